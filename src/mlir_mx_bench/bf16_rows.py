"""``mx-bench`` rows for bf16 activations: ``mlir_mx.Linear(B, activations="bf16")``.

``ours Linear f32->bf16``: the f32 activations rounded to bf16 per call, then
multiplied exactly, with the kernel the automatic choice runs here (the
``bf16-*`` dot kernels on ``vdpbf16ps`` where ``mlir_mx.host.bf16_dot_pays``,
else the f32 kernels on the rounded values).  Where that choice is not the
dot kernels but the CPU has AVX512-BF16 (Intel), ``ours Linear f32->bf16
vdpbf16ps`` runs them as well (``MLIR_MX_BF16_DOT=on`` while the Linear binds
its kernel), so one run shows both.  Both are checked against the oracle of
the rounded activations times the weights (exact on the rounded input; the
rounding itself is the row's approximation, not the kernel's error).  Where
the call took ``Linear``'s guarded AMX-BF16 path (``mlir_mx.linear.amx_linear``:
M >= 64, FP4/FP6/INT8 weights, a CPU with AMX-BF16; ``MLIR_MX_AMX=0`` turns it
off) the note says so; its bits are the exact path's, and ``ours Linear
f32->bf16 no AMX`` times the same Linear with the hook off (the exact path's
kernels).  The ``vdpbf16ps`` row runs with the hook off too.
"""

from __future__ import annotations

import os
import time
from contextlib import contextmanager

import ml_dtypes
import numpy as np

from mlir_mx.host import has_features

from .cases import Oracle, Problem
from .method import Method, linear_call_method

__all__ = ["bf16_methods"]


@contextmanager
def _forced_dot():
    """``MLIR_MX_BF16_DOT=on`` for the body (a Linear binds its kernel at its first call)."""
    old = os.environ.get("MLIR_MX_BF16_DOT")
    os.environ["MLIR_MX_BF16_DOT"] = "on"
    try:
        yield
    finally:
        if old is None:
            del os.environ["MLIR_MX_BF16_DOT"]
        else:
            os.environ["MLIR_MX_BF16_DOT"] = old


def _oracle(p: Problem) -> Oracle:
    """The oracle of ``round_bf16(a) @ db`` (computed once per problem)."""
    if "bf16-a" not in p.cache:
        p.cache["bf16-a"] = Oracle.of(p.a.astype(ml_dtypes.bfloat16).astype(np.float32), p.db)
    return p.cache["bf16-a"]


class _NoAMX:
    """A Linear called with its AMX hook off (``MLIR_MX_AMX=0`` around each
    call): the exact path's kernels, for the rows beside the AMX one."""

    def __init__(self, lin):
        self.lin, self.nbytes = lin, lin.nbytes

    def __call__(self, a):
        from mlir_mx.linear.amx_linear import ENV

        old = os.environ.get(ENV)
        os.environ[ENV] = "0"
        try:
            return self.lin(a)
        finally:
            if old is None:
                del os.environ[ENV]
            else:
                os.environ[ENV] = old


def _method(p: Problem, threads: int, say, label: str, forced: bool, amx: bool = True) -> Method:
    import mlir_mx
    from mlir_mx.linear.amx_linear import last_path

    t0 = time.perf_counter()
    lin = mlir_mx.Linear(p.qb, threads=threads, activations="bf16")
    call = lin if amx else _NoAMX(lin)
    if forced:
        with _forced_dot():
            schedule = lin.schedule(p.a)
            say(f"    compiling {label} ({schedule})...")
            call(p.a)  # binds (and compiles) the dot kernel
    else:
        schedule = lin.schedule(p.a)
        say(f"    compiling {label} ({schedule})...")
        call(p.a)
    took = ", AMX-BF16 guarded (linear/amx_linear.py)" if last_path(lin) == "amx" else ""
    took += "" if amx else ", MLIR_MX_AMX=0"
    return linear_call_method(
        p, threads, call, label, t0, oracle=_oracle(p),
        note=f"schedule {schedule} (mlir_mx.Linear, activations='bf16'{took})",
    )  # fmt: skip


def bf16_methods(p: Problem, threads: int, say) -> list[Method]:
    """The bf16-activation rows of a problem with f32 activations (not an A:B pair)."""
    import mlir_mx

    if p.a_element is not None or p.shape.K % 2:
        return []
    methods = [_method(p, threads, say, "ours Linear f32->bf16", forced=False)]
    auto = methods[0].note.split()[1]
    if "AMX" in methods[0].note:  # the exact path's kernels beside it
        methods.append(_method(p, threads, say, "ours Linear f32->bf16 no AMX", False, False))
    if not auto.startswith("bf16-") and has_features("avx512_bf16", "avx512bw"):
        with _forced_dot():
            forced = mlir_mx.Linear(p.qb, activations="bf16").schedule(p.a)
        if forced.startswith("bf16-"):
            label = "ours Linear f32->bf16 vdpbf16ps"
            methods.append(_method(p, threads, say, label, True, amx=False))
    return methods

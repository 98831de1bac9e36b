"""Our rows of an ``nvfp4`` problem (``mx-bench --formats nvfp4``).

NVFP4 weights (E2M1 codes in blocks of 16, E4M3 block scales, a global scale)
beside an MXFP4 group, on the same shapes, side by side in one run:

* ``ours mx x mx`` and ``ours mx x mx <schedule>`` (one row per other
  schedule that supports the problem, as for MXFP4): the Runner's kernels
  (``ours.runner_methods``) on ``mx.block_matmul`` with the NVFP4 B and its
  ``global_scale`` operand (``docs/dialect.md``), the global scale passed as
  the f32 argument after the operands.  Its lhs is E8M0-scaled, so A is
  ``p.a`` quantized to MXFP4 in blocks of 16 (W4A4; an ``A:nvfp4`` pair
  names another MX A), and its oracle is ``dequantize(qa) @ db``; the
  kernels compute ``oracle.blocked_order`` bit for bit, inside that bound;
* ``ours Linear f32 x``: the exact path (f32 activations; ``ours.py``);
* ``ours Linear f32->bf16`` (and ``... vdpbf16ps`` where it applies;
  ``bf16_rows.py``);
* ``ours Linear f32->i8``: ``activations="i8"``, MXINT8 activations in blocks
  of 16, the integer dot kernels (W4A8); its oracle is
  ``dequantize(quantize(a, "i8", 16)) @ db``, which the kernel computes
  within the f32 summation bound (``docs/numerics.md``, "NVFP4 in the matmul").
"""

from __future__ import annotations

import time

from mlir_mx.convert import dequantize, quantize

from .cases import Oracle, Problem
from .method import Method, Skipped, linear_call_method

__all__ = ["nvfp4_methods"]

def _i8_oracle(p: Problem) -> Oracle:
    """The oracle of ``a`` quantized to MXINT8 in blocks of 16, times ``db``."""
    if "nvfp4-i8" not in p.cache:
        qa = quantize(p.a, "i8", p.block_size, axis=1)
        p.cache["nvfp4-i8"] = Oracle.of(dequantize(qa), p.db)
    return p.cache["nvfp4-i8"]


def _i8_method(p: Problem, threads: int, say) -> Method:
    import mlir_mx

    t0 = time.perf_counter()
    lin = mlir_mx.Linear(p.qb, threads=threads, activations="i8")
    schedule = lin.schedule(p.a)
    say(f"    compiling ours Linear f32->i8 ({schedule})...")
    lin(p.a)  # compiles
    return linear_call_method(
        p, threads, lin, "ours Linear f32->i8", t0, oracle=_i8_oracle(p),
        note=f"schedule {schedule} (mlir_mx.Linear, activations='i8', blocks of 16)",
    )  # fmt: skip


def nvfp4_methods(
    p: Problem, threads: int, say, compiled: dict[int, float] | None = None
) -> list[Method | Skipped]:
    """The Runner rows and the Linear rows of an nvfp4 problem (``compiled``:
    the run's compile seconds per engine, :func:`~.ours.runner_methods`)."""
    from .bf16_rows import bf16_methods
    from .ours import linear_f32_method, runner_methods

    return [
        *runner_methods(p, threads, {} if compiled is None else compiled, say),
        linear_f32_method(p, threads, say),
        *bf16_methods(p, threads, say),
        _i8_method(p, threads, say),
    ]

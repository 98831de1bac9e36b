"""``Linear(w, activations="bf16")`` on AMX-BF16 where it gives the exact
path's bits (issue 51; ``docs/numerics.md``, "AMX-BF16"; ``docs/library.md``,
"bf16 activations on AMX").

:func:`with_amx` is the one hook in :meth:`mlir_mx.Linear.__call__`: given the
call the exact path would make, it returns it unchanged, or a call that
first tries the guarded AMX matmul (:class:`~mlir_mx.linear.amx_matmul.AMXMatmul`)
and makes the exact call where the AMX path declines.  The AMX path is
taken when all of these hold:

- :data:`ENV` (``MLIR_MX_AMX``) is not ``0``;
- the call's activations are f32 rounded to bf16 (``activations="bf16"``);
- it has at least :data:`MIN_ROWS` rows (32);
- the weight is E8M0-scaled with block size 32 and its format's guard bound
  ``T = 2^24 q / bmax`` is at least :data:`MIN_T` (E2M1, E2M3, E3M2, INT8;
  FP8's ``T`` is 73 or below 1, and FP8 blocks nearly never pass), or it is
  NVFP4 (E2M1, E4M3 scales in blocks of 16, a global scale: the kernel runs
  one tile K step per block of 16, and the global scale is divided once per
  output after it, as on the exact path: :func:`_nvfp4`);
- :func:`mlir_mx.linear.amx.amx_bf16_usable` (the features, the OS
  permission and the self-test; ``MLIR_MX_CPU_FEATURES=-amx_bf16`` masks it).

Per call, the compiled prepare kernel (:mod:`mlir_mx.linear.amx_prepare`)
rounds A to bf16 and decides the guard; the call runs on the exact path
where the per-call condition fails, a weight block is flagged, or more than
:data:`~mlir_mx.linear.amx_matmul.MAX_FALLBACK_SHARE` of the (row, block)s
fail.  The bits are the exact path's in every case.  The weight is prepared
for the tiles once per Linear, at its first AMX call: its codes in the
kernel's pair order (the packed codes' size, N padded to 16) and its scale
bytes, flags and bounds, about 1.13x the packed codes beside the Linear's
own weight; the transposed copy it is made from is not kept.  It is made
once even when threads race on a fresh Linear, and it lives as long as the
Linear (the calls bound here hold the Linear weakly: no reference cycle).
The kernel runs on the call's team.  :data:`ENV` and the CPU features (a
mask set later) are read at each call.  :func:`precompile_amx` (from
:meth:`mlir_mx.Linear.precompile`) compiles the AMX kernels and prepares the
weight ahead of the first call that takes them.
"""

from __future__ import annotations

import os
import threading
import weakref

import numpy as np

from mlir_mx.linear.activations import BF16, f32_at
from mlir_mx.numerics import MXArray

__all__ = [
    "ENV",
    "MIN_ROWS",
    "MIN_T",
    "amx_enabled",
    "amx_matmul_of",
    "last_path",
    "precompile_amx",
    "with_amx",
    "with_amx_raw",
]

#: The environment switch: ``MLIR_MX_AMX=0`` keeps every call on the exact path.
ENV = "MLIR_MX_AMX"

#: The fewest rows a call takes the AMX path with.  Measured
#: (``bench/probes/amx_linear_rows.py``, E2M1, 1 thread, thread CPU time,
#: B widened from the codes per tile; bench/results/amx-linear-rows-2026-12-05-s54.txt):
#: the hook against the exact path at 4096 x 4096 (quiet) was 1.07x at M =
#: 16, 1.36x at 32, 2.20x at 64, 2.46x at 256; at 2048 x 2048 0.72x at 16,
#: 1.01x at 24, 1.32x at 32, 1.78x at 64.  (With B stored as bf16, session 54's
#: first version, it paid only from 64 rows.)
MIN_ROWS = 32

#: The smallest guard bound ``T`` a weight format takes the AMX path with.
#: A block of 32 bf16 values over even one binade has ``S/g`` of a few
#: hundred to thousands: E3M2 (37,449) passes most N(0,1) blocks, E4M3 (73)
#: almost none.
MIN_T = 2.0**12

_LOCK = threading.Lock()
#: Linear -> (AMXMatmul, GuardParams) or None (not eligible), per Linear.
_MATMULS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
#: Linear -> the lock its first :func:`amx_matmul_of` holds while it builds.
_BUILDING: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
#: Per thread: the prepare kernel's output arrays, reused from call to call.
_BUFFERS = threading.local()
#: Linear -> the path its last call through :func:`with_amx`'s call took.
_LAST: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def amx_enabled() -> bool:
    """Whether :data:`ENV` allows the AMX path (anything but ``0``)."""
    return os.environ.get(ENV, "1").strip() != "0"


def _nvfp4(lin) -> bool:
    """Whether ``lin``'s weight is NVFP4 (E2M1 codes, E4M3 scales in blocks
    of 16, a global scale), which the AMX kernel takes in blocks of 16."""
    from mlir_mx.numerics.formats import element_format

    e2m1 = element_format("mxfp4").name
    return lin.global_scale is not None and lin.block_size == 16 and lin.element == e2m1


def _eligible(lin) -> bool:
    from mlir_mx.linear.amx import amx_bf16_usable
    from mlir_mx.numerics.amx_guard import amx_bounds

    if _nvfp4(lin):
        return amx_bf16_usable()
    if lin.block_size != 32 or lin.global_scale is not None:
        return False
    q, bmax = amx_bounds(lin.element)
    return 2.0**24 * q / bmax >= MIN_T and amx_bf16_usable()


def amx_matmul_of(lin):
    """``(AMXMatmul, GuardParams)`` of ``lin``'s weight, made once per Linear
    (None where the weight or this CPU cannot take the AMX path).  Threads
    that ask for a fresh Linear's at once wait for the first one's build
    (a lock per Linear, held while the weight is packed in numpy: no team's
    region runs under it, so no team waits on it; a build that raises
    leaves the next call to try again)."""
    with _LOCK:
        if lin in _MATMULS:
            return _MATMULS[lin]
        building = _BUILDING.setdefault(lin, threading.Lock())
    with building:
        with _LOCK:
            if lin in _MATMULS:  # built while this thread waited
                return _MATMULS[lin]
        found = _build(lin)
        with _LOCK:
            _MATMULS[lin] = found
            _BUILDING.pop(lin, None)
    return found


def _build(lin):
    from mlir_mx.linear.amx_matmul import EXACT_LINEARS, AMXMatmul
    from mlir_mx.linear.amx_prepare import guard_params

    if lin in EXACT_LINEARS or not _eligible(lin):
        return None
    w = lin.weight()  # (out, in) blocked along in: B = W^T blocked along K
    b = MXArray(np.ascontiguousarray(w.codes.T), np.ascontiguousarray(w.scales.T),
                w.format_name, lin.block_size, 0, global_scale=w.global_scale)  # fmt: skip
    mm = AMXMatmul(b, threads=lin.threads, keep_source=False)  # lin holds the weight
    params = guard_params(mm.weight)
    return (mm, params) if params is not None else None


def last_path(lin) -> str | None:
    """``"amx"`` or ``"exact"``: the path ``lin``'s last call that could take
    the AMX path took (None: no call could)."""
    return _LAST.get(lin)


def _applies(kind, m: int, bf16: bool = False) -> bool:
    """Whether a call with ``m`` rows of activations of ``kind`` can take the
    hook (``bf16``: ``x`` holds bf16 values, :meth:`mlir_mx.Linear.call_into`'s):
    activations rounded to bf16, or bf16 values with no quantization."""
    rounded = kind.quantize_to == BF16 or (bf16 and kind.quantize_to is None)
    return rounded and kind.element is None and m >= MIN_ROWS and amx_enabled()


def _hooked(lin, kind, m: int, bf16: bool = False):
    """:func:`amx_matmul_of` ``lin`` where such a call takes the hook, else None."""
    return amx_matmul_of(lin) if _applies(kind, m, bf16) else None


def with_amx(lin, kind, m: int, threads: int, call):
    """``call`` (the exact path's ``call(x, out)`` for ``m`` rows of
    activations of ``kind`` on ``threads`` threads), or a call with the same
    arguments that runs on AMX where the guard lets it (the module doc)."""
    found = None if call is None else _hooked(lin, kind, m)
    if found is None:
        return call
    ref = weakref.ref(lin)
    g = _divisor(lin, call)

    def amx_call(x: np.ndarray, out: np.ndarray) -> None:
        if not _on_amx(ref, found, x, out, threads, g):
            call(x, out)

    amx_call.divides_global = g is not None  # as ``call``: weight_form.divide_by_global reads it
    return amx_call


def _divisor(lin, call):
    """NVFP4's global scale where ``call`` (an exact call) divides by it
    itself (``weight_form.applies_global``; so must the AMX path then),
    else None (``Linear`` divides after either path).  Defensive: only a
    dot kernel on records divides itself, and bf16 values reach one only
    where the Linear holds ``bf16``-unit records, which no E2M1 weight does
    today (not even with ``MLIR_MX_BF16_DOT=on``: session 56 checked), so
    no test reaches the branch; it keeps the AMX path right if one does."""
    from mlir_mx.linear.weight_form import applies_global

    return lin.global_scale if lin.global_scale is not None and applies_global(call) else None


def _on_amx(ref, found, x: np.ndarray, out: np.ndarray, threads: int, g=None) -> bool:
    """``out = x @ W.T`` on AMX (True), or nothing done (False: the caller
    makes the exact call) where the preparation declines.  ``ref``: a weak
    reference to the Linear (its :func:`last_path`); ``g``: NVFP4's global
    scale where this call divides by it (in place, after the kernel: the
    exact path's ``np.divide``), else None."""
    from mlir_mx.linear.amx import amx_bf16_usable
    from mlir_mx.linear.amx_prepare import prepare_activations

    if not amx_bf16_usable():  # masked since this Linear's first AMX call
        _record(ref, "exact")
        return False
    mm, params = found
    buffers = _BUFFERS.__dict__.setdefault("by_shape", {})  # this thread's, reused
    prepared = prepare_activations(x, params, mm.max_fallback_share, buffers, threads)
    if prepared.args is None:
        _record(ref, "exact")
        return False
    if out.flags.c_contiguous and out.flags.writeable and out.dtype == np.float32:
        mm.run(prepared.args, x.shape[0], threads, out=out)  # written in place
    else:
        out[...] = mm.run(prepared.args, x.shape[0], threads)  # the call's team
    if g is not None:
        np.divide(out, g, out=out)
    _record(ref, "amx")
    return True


def _record(ref, path: str) -> None:
    lin = ref()
    if lin is not None:
        _LAST[lin] = path


def with_amx_raw(lin, kind, m: int, bf16: bool, call, threads: int = 1):
    """For :meth:`mlir_mx.Linear.call_into`: ``call`` (``call(x_addr,
    out_addr)``, the exact path's bound call on ``m`` rows of activations of
    ``kind``; ``bf16``: ``x`` holds bf16 values), or a call with the same
    arguments that runs on AMX where the guard lets it.  It applies where
    the activations are rounded to bf16 (``activations="bf16"``) or already
    are bf16 with no quantization (a bf16 model's input): the AMX path's
    bits are the exact path's on those values.  ``threads``: the call's team
    (the AMX kernel's too).  :data:`ENV` is read when the call is bound (once
    per row count and team: ``0`` then keeps the exact call for them) and at
    each call.  The call, which the Linear keeps, holds it weakly."""
    found = _hooked(lin, kind, m, bf16)
    if found is None:
        return call
    k, n, ref = lin.in_features, lin.out_features, weakref.ref(lin)
    g = lin.global_scale  # ``call`` divides by it (weight_form.divide_at): so does the AMX path

    def amx_raw_call(x_addr: int, out_addr: int) -> None:
        x, out = f32_at(x_addr, m, k), f32_at(out_addr, m, n)
        if not amx_enabled() or not _on_amx(ref, found, x, out, threads, g):
            call(x_addr, out_addr)

    return amx_raw_call


def precompile_amx(lin, kind, m: int, threads: int, bf16: bool = False) -> None:
    """For :meth:`mlir_mx.Linear.precompile`: where a call with ``m`` rows of
    activations of ``kind`` on ``threads`` threads (``bf16``: ``x`` holding
    bf16 values, as :meth:`~mlir_mx.Linear.call_into` takes them) would take
    the hook, prepare the weight for the tiles (:func:`amx_matmul_of`) and
    compile (or load from the compile cache) the prepare kernel and the
    matmul kernel for that team, so that the call compiles nothing.
    Elsewhere (no AMX-BF16, ``MLIR_MX_AMX=0``, too few rows, another
    weight or activation kind) it does nothing."""
    from mlir_mx.linear.amx import amx_bf16_usable
    from mlir_mx.linear.amx_matmul import amx_matmul_runner
    from mlir_mx.linear.amx_prepare import prepare_runner, split_min

    found = _hooked(lin, kind, m, bf16) if lin.out_features and lin.in_features else None
    if found is None or not amx_bf16_usable():
        return
    mm = found[0]
    prepare_runner(mm.weight.block_size)
    if threads > 1 and split_min() is not None:  # a call's team may prepare A (any m)
        prepare_runner(mm.weight.block_size, threads)
    amx_matmul_runner(mm.group, mm.weight.element, threads, mm.weight.block_size)

"""Quantize and dequantize at memory speed: ``mlir_mx.quantize`` / ``mlir_mx.dequantize``.

The same results as the numpy oracle (:func:`mlir_mx.oracle.quantize`,
:func:`mlir_mx.oracle.dequantize`), bit for bit, computed by the compiled
kernels of :mod:`mlir_mx.kernels.convert.emitter` (the numerics of the dialect's
``mx.quantize_block`` / ``mx.dequantize_block`` lowering, vectorized and
multi-threaded)::

    a = mlir_mx.quantize(w, "f4E2M1FN", 32)       # an MXArray, FP4 codes packed
    y = mlir_mx.dequantize(a)                     # f32

* Any rank and blocking axis; numpy arrays and DLPack arrays (a torch CPU
  tensor, ...), strided ones too: read in place (no copy of the input) when
  the data is aligned and every stride is a whole number of elements
  (negative and zero strides included), else copied first (a field of a
  structured array, a view at an odd byte offset);
  float32 input (float64, float16 and bfloat16 are converted to float32 in
  registers, as the oracle converts them first).
* The output is written once, in its stored form: FP4/FP6 codes packed
  (``numerics.packing``) where the shape packs; no f32-sized temporary.
* One compiled kernel per (operation, format, block size, layout, input
  type) serves every shape and thread count (all sizes are dynamic, the
  thread count is an argument; ranks and axes fold into two layouts); the
  last :data:`KERNEL_CACHE_SIZE` used are kept in memory and, lowered, all
  in the persistent compile cache (``MLIR_MX_CACHE_DIR``,
  ``mlir_mx.linear.cache_dir``).
* Bad arguments raise ``TypeError`` / ``ValueError`` naming the argument,
  with the oracle's messages, before any native code runs.
"""

from __future__ import annotations

import ctypes
import threading
from collections import OrderedDict
from math import prod

import ml_dtypes
import numpy as np
from mlir import ir

from mlir_mx.errors import MXArgTypeError, MXValueError
from mlir_mx.execution import CompileOptions, Runner
from mlir_mx.execution.arguments import descriptor_type
from mlir_mx.execution.c_interface import call_packed, packed_function
from mlir_mx.host import check_threads, host_features
from mlir_mx.kernels.convert import RUNTIME_THREADS, ConvertSpec, convert_module
from mlir_mx.numerics import ElementFormat, MXArray, element_format, is_packed_storage, packed_shape
from mlir_mx.numerics.blocks import check_block_size, check_blocked_shape, normalize_axis
from mlir_mx.numerics.formats import E4M3_SCALE_TYPE, NVFP4, SCALE_DTYPE, SCALE_TYPE
from mlir_mx.numerics.mx import check_input, check_scaling, scale_shape
from mlir_mx.numerics.mxarray import check_global_scale
from mlir_mx.numerics.nvfp4 import global_scale
from mlir_mx.pipelines import kernel_library_pipeline

__all__ = ["KERNEL_CACHE_SIZE", "dequantize", "quantize", "quantize_stored"]

_SOURCE = {"float32": "f32", "float64": "f64", "float16": "f16", "bfloat16": "bf16"}


# --------------------------------------------------------------------------- the API


def quantize(
    x, element: str | ElementFormat = "f8E4M3FN", block_size: int | None = None, axis: int = -1,
    threads=None, *, global_scale=None,
):
    """The oracle's :func:`mlir_mx.oracle.quantize` (same signature, same bits), compiled.

    Args:
        x: the values, any rank and strides: a numpy array, a list, or a DLPack
            array (a torch CPU tensor); float32, or float64 / float16 /
            bfloat16 (converted to float32 exactly as the oracle does).
        element: the MX element format (``f8E4M3FN``, ``f4E2M1FN``, ``i8``, ...;
            a name or an :class:`~mlir_mx.numerics.ElementFormat`), or ``"nvfp4"``.
        block_size: elements per shared scale (None: 32, 16 for ``nvfp4``);
            ``x.shape[axis]`` must be a multiple of it.
        axis: the axis the blocks run along.
        threads: the kernel's thread count (default: this machine's cores).
        global_scale: ``nvfp4`` only: the per-tensor scale (None: computed
            from ``x`` as the oracle does, one pass of numpy's max and min).

    Returns:
        An :class:`~mlir_mx.MXArray` built from its stored form (``MXArray.from_packed``).

    Raises:
        MXArgTypeError: ``x`` of an unsupported type or dtype, a non-int size.
        MXValueError: an unknown format, a bad block size, axis or thread count.
    """
    fmt, scale_type, block_size = check_scaling(element, block_size, global_scale)
    x, block_size, axis = _check_input(x, block_size, axis)
    threads = check_threads(threads)
    if scale_type != SCALE_TYPE:
        g = _global_scale(x) if global_scale is None else check_global_scale(global_scale)
        packed, scales = _quantize_checked(x, fmt, block_size, axis, threads, g)
        return MXArray.from_packed(
            packed, scales, NVFP4, block_size, axis, copy=False, global_scale=g
        )
    packed, scales = _quantize_checked(x, fmt, block_size, axis, threads)
    # The kernel's fresh buffers become the array's own (no copy).
    return MXArray.from_packed(packed, scales.view(SCALE_DTYPE), fmt, block_size, axis, copy=False)


def _global_scale(x: np.ndarray) -> np.float32:
    """The oracle's computed global scale (:func:`mlir_mx.numerics.nvfp4.global_scale`)
    of ``x``, from numpy's max and min where they are finite (no temporary);
    else, or for f16/bf16 input, from the oracle on ``x`` as float32."""
    if x.size and x.dtype in (np.float32, np.float64):
        with np.errstate(invalid="ignore", over="ignore"):
            m = np.float32(max(float(np.max(x)), -float(np.min(x))))
        if np.isfinite(m):
            return global_scale(np.array([m], np.float32))
    with np.errstate(over="ignore"):
        return global_scale(np.asarray(x, np.float32))


def quantize_stored(
    x, element: str | ElementFormat, block_size: int = 32, axis: int = -1, threads=None
):
    """``(codes, scales)`` of :func:`quantize` as ``uint8`` arrays in their stored
    form (``MXArray.packed_codes()`` and the E8M0 scale codes), without
    building the MXArray."""
    fmt = element_format(element)
    x, block_size, axis = _check_input(x, block_size, axis)
    return _quantize_checked(x, fmt, block_size, axis, check_threads(threads))


def _quantize_checked(
    x: np.ndarray, fmt: ElementFormat, block_size: int, axis: int, threads: int, g=None
):
    """:func:`quantize_stored` on checked arguments (:func:`_check_input`);
    ``g``: NVFP4's global scale (None: E8M0 scales)."""
    packed = is_packed_storage(x.shape, fmt)
    codes = np.empty(packed_shape(x.shape, fmt) if packed else x.shape, np.uint8)
    scales = np.empty(scale_shape(x.shape, block_size, axis), np.uint8)
    if x.size == 0:
        return codes, scales
    rows = axis == x.ndim - 1
    for xv, cv, sv in _views(x, codes, scales, axis):
        contiguous = xv.strides[-1] == 1 or xv.shape[-1] == 1
        spec = ConvertSpec(
            "quantize", fmt, block_size, "rows" if rows else "columns", packed,
            _SOURCE[x.dtype.name], contiguous, RUNTIME_THREADS,
            SCALE_TYPE if g is None else E4M3_SCALE_TYPE,
        )  # fmt: skip
        _kernel(spec)(xv, cv, sv, threads=threads, global_scale=g)
    return codes, scales


def dequantize(a, threads=None, *, out=None) -> np.ndarray:
    """The oracle's :func:`mlir_mx.oracle.dequantize` (same bits), compiled.

    Args:
        a: the :class:`~mlir_mx.MXArray` to decode.
        threads: the kernel's thread count (default: this machine's cores).
        out: a C-contiguous, writeable float32 array of ``a.shape`` to write
            into instead of a new one (a fresh array costs the OS's zeroing of
            its pages on first touch).

    Returns:
        ``a``'s values as float32 (``out`` when given).

    Raises:
        MXArgTypeError: ``a`` not an MXArray; ``out`` not a float32 array of ``a.shape``.
        MXValueError: ``out`` not C-contiguous and writeable; a bad thread count.
    """
    if not isinstance(a, MXArray):
        raise MXArgTypeError(f"a: expected an MXArray, got {type(a).__name__}")
    threads = check_threads(threads)
    if out is None:
        out = np.empty(a.shape, np.float32)
    elif not isinstance(out, np.ndarray) or out.dtype != np.float32 or out.shape != a.shape:
        raise MXArgTypeError(f"out: expected a float32 numpy array of shape {a.shape}")
    elif not (out.flags.c_contiguous and out.flags.aligned and out.flags.writeable):
        raise MXValueError("out: must be C-contiguous, aligned and writeable")
    codes = np.ascontiguousarray(a.packed_codes()).view(np.uint8)
    scales = np.ascontiguousarray(a.scales).view(np.uint8)
    if np.may_share_memory(out, codes) or np.may_share_memory(out, scales):
        # The kernel would read codes it has already overwritten.
        raise MXValueError("out: overlaps the memory of a's codes or scales")
    if out.size == 0:
        return out
    bs, axis = a.block_size, a.axis
    if axis == a.ndim - 1:
        layout, rows = "rows", prod(a.shape[:-1])
        views = (codes.reshape(rows, -1), scales.reshape(rows, -1), out.reshape(rows, -1))
    else:
        layout, rows = "columns", prod(a.shape[: axis + 1])
        views = (
            codes.reshape(rows, -1),
            scales.reshape(rows // bs, -1),
            out.reshape(rows, -1),
        )
    spec = ConvertSpec(
        "dequantize", a.format, bs, layout, a.is_packed, threads=RUNTIME_THREADS,
        scale_type=a.scale_type,
    )
    _kernel(spec)(*(_View.of(v) for v in views), threads=threads, global_scale=a.global_scale)
    return out


# --------------------------------------------------------------------------- checks


def _check_input(x, block_size, axis):
    """The oracle's checks (and messages): x as an ndarray the kernels can
    read in place (:func:`_readable`), block_size, axis."""
    if not isinstance(x, np.ndarray) and hasattr(x, "__dlpack__"):
        x = _from_dlpack(x)
    x = _readable(check_input(x))
    block_size = check_block_size(block_size)
    axis = normalize_axis(axis, x.ndim)
    check_blocked_shape(x.shape, block_size, axis, "x")
    return x, block_size, axis


def _readable(x: np.ndarray) -> np.ndarray:
    """``x`` itself when a kernel can read it in place: its data aligned for its
    dtype and every stride (of a dimension longer than 1; negative, zero or
    any multiple) a whole number of elements, as a memref's strides are.
    Otherwise a C-contiguous copy: a field of a structured array (a float32
    field of a 6-byte record has stride 6), a view at an odd byte offset, a
    view of overlapping elements with a byte stride."""
    item = x.itemsize
    if x.flags.aligned and all(s % item == 0 for s, n in zip(x.strides, x.shape, strict=True) if n > 1):
        return x
    return np.array(x, copy=True, order="C")


def _from_dlpack(x) -> np.ndarray:
    """A numpy view of a DLPack array (a torch CPU tensor, ...): no copy.

    numpy has no DLPack bfloat16, so a torch bfloat16 tensor is viewed as
    int16 and reinterpreted.
    """
    try:
        return np.from_dlpack(x)
    except (BufferError, RuntimeError, TypeError, ValueError) as err:
        if str(getattr(x, "dtype", "")) == "torch.bfloat16" and hasattr(x, "view"):
            import torch

            return np.from_dlpack(x.view(torch.int16)).view(ml_dtypes.bfloat16)
        raise MXArgTypeError(f"x: cannot view this {type(x).__name__} as host memory: {err}") from None


# --------------------------------------------------------------------------- views


class _View:
    """A strided view for a kernel argument: address, sizes, strides in elements."""

    __slots__ = ("keep", "ptr", "shape", "strides")

    def __init__(self, keep: np.ndarray, ptr: int, shape, strides):
        self.keep, self.ptr = keep, ptr
        self.shape, self.strides = tuple(shape), tuple(strides)

    @classmethod
    def of(cls, a: np.ndarray) -> _View:
        return cls(a, a.ctypes.data, a.shape, [s // a.itemsize for s in a.strides])

    def descriptor(self):
        d = descriptor_type(len(self.shape))()
        d.allocated = d.aligned = self.ptr
        d.offset = 0
        d.shape[:] = list(self.shape)
        d.strides[:] = list(self.strides)
        return d


def _merge(shape, strides):
    """``(size, stride)`` of dims that fold into one (C order), or None."""
    dims = [(n, s) for n, s in zip(shape, strides, strict=True) if n != 1]
    if not dims:
        return prod(shape), 1
    for (_n0, s0), (n1, s1) in zip(dims, dims[1:], strict=False):
        if s0 != n1 * s1:
            return None
    return prod(shape), dims[-1][1]


def _foldable_from(shape, strides, lo: int, hi: int) -> int:
    """Smallest ``k`` in ``[lo, hi]`` such that dims ``[k, hi)`` fold into one."""
    k = lo
    while k < hi and _merge(shape[k:hi], strides[k:hi]) is None:
        k += 1
    return k


def _views(x: np.ndarray, codes: np.ndarray, scales: np.ndarray, axis: int):
    """``(x, codes, scales)`` kernel views: ``(P, N)``/``(P, N')``/``(P, N/B)``
    (``rows``) or ``(P, N, Q)``/``(P N, Q')``/``(P N / B, Q)`` (``columns``).

    Dims that do not fold into P or Q (a strided input) are iterated here,
    one kernel call per index; the outputs are C-contiguous, so every
    sub-view of them folds.
    """
    item = x.itemsize
    shape, strides = x.shape, tuple(s // item for s in x.strides)
    nd = x.ndim
    lead = _foldable_from(shape, strides, 0, axis)
    rows = axis == nd - 1
    mid_hi = axis + 1 if rows else _foldable_from(shape, strides, axis + 1, nd)
    outer = [range(n) for n in shape[:lead]] + [range(n) for n in shape[axis + 1 : mid_hi]]
    for idx in np.ndindex(*(len(r) for r in outer)):
        pre, mid = idx[:lead], idx[lead:]
        sel = pre + (slice(None),) * (axis - lead + 1) + mid
        xs, cs, ss = x[sel], codes[sel], scales[sel]
        k = axis - lead  # the blocked axis in the sub-views
        xsh, xst = xs.shape, tuple(s // item for s in xs.strides)
        p, sp = _merge(xsh[:k], xst[:k])
        if rows:
            yield (
                _View(xs, xs.ctypes.data, (p, xsh[k]), (sp, xst[k])),
                _folded(cs, k),
                _folded(ss, k),
            )
        else:
            q, sq = _merge(xsh[k + 1 :], xst[k + 1 :])
            yield (
                _View(xs, xs.ctypes.data, (p, xsh[k], q), (sp, xst[k], sq)),
                _folded(cs, k + 1),
                _folded(ss, k + 1),
            )


def _folded(a: np.ndarray, split: int) -> _View:
    """``a`` (a sub-view of a C-contiguous output) as 2-D: dims ``[0, split)``
    and ``[split, ndim)`` folded (never a copy: the kernel writes through it)."""
    st = [s // a.itemsize for s in a.strides]
    rows, rs = _merge(a.shape[:split], st[:split])
    cols, cst = _merge(a.shape[split:], st[split:])
    if cst != 1 and cols > 1:
        raise AssertionError("an output view is not contiguous in its last dims")
    return _View(a, a.ctypes.data, (rows, cols), (rs, 1))


# --------------------------------------------------------------------------- kernels

#: How many compiled conversion kernels :func:`_kernel` keeps in memory (the
#: least recently used goes first).  A kernel serves every shape and every
#: thread count (``RUNTIME_THREADS``); one is needed per operation, format,
#: block size, layout, packing, input dtype and innermost stride kind.
#: About 4 MiB of memory each (docs/library.md, "Memory").
KERNEL_CACHE_SIZE = 32
_KERNELS: OrderedDict[tuple, _Kernel] = OrderedDict()
_LOCK = threading.Lock()


class _Kernel:
    """One compiled kernel, called with three strided views (and, for a
    ``RUNTIME_THREADS`` kernel, the thread count)."""

    def __init__(self, spec: ConvertSpec):
        from mlir_mx.dialect import load_dialect
        from mlir_mx.execution.compiled import GeneratedModule
        from mlir_mx.execution.options import default_cache_dir as cache_dir

        def make() -> str:  # only when no cache holds the machine code
            with ir.Context() as ctx, ir.Location.unknown():
                load_dialect(ctx)
                return str(convert_module(spec))

        options = CompileOptions(kernel_library_pipeline(spec.threads), cache_dir=cache_dir())
        self.runner = Runner(GeneratedModule(f"convert {spec!r}", make), options=options)
        self.fn = packed_function(self.runner.entry(spec.name))
        self.runtime_threads = spec.threads == RUNTIME_THREADS

    def __call__(self, *views: _View, threads: int = 1, global_scale=None) -> None:
        scalars = [ctypes.c_int64(threads)] if self.runtime_threads else []
        if global_scale is not None:  # NVFP4: the f32 argument before the thread count
            scalars.insert(0, ctypes.c_float(global_scale))
        call_packed(self.fn, [v.descriptor() for v in views], scalars)


def _kernel(spec: ConvertSpec) -> _Kernel:
    """The compiled kernel of ``spec`` on this host: from the in-memory LRU of
    :data:`KERNEL_CACHE_SIZE` kernels, else compiled (from the persistent
    compile cache when it holds it)."""
    key = (spec, host_features())
    with _LOCK:
        k = _KERNELS.get(key)
        if k is None:
            k = _KERNELS[key] = _Kernel(spec)
            while len(_KERNELS) > KERNEL_CACHE_SIZE:
                _KERNELS.popitem(last=False)
        else:
            _KERNELS.move_to_end(key)
        return k

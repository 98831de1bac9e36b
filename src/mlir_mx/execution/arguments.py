"""Checking and marshalling the Runner's arguments, before native code runs.

Every check raises ``TypeError`` (wrong kind of object or dtype) or
``ValueError`` (wrong shape, layout, mutability or range) naming the
function and the argument; nothing reaches native code unless it is safe:

* buffers are ``numpy.ndarray`` (subclasses such as ``np.matrix`` and
  ``np.memmap`` are used as the plain array they view; masked arrays are
  refused: native code would ignore the mask), of the exact dtype and
  shape, C-contiguous and aligned;
* an array the function may write (the accumulator of a matmul, an output
  memref; :mod:`mlir_mx.execution.effects`) must be writeable: a read-only
  array, a memmap opened ``mode="r"`` or an array over ``bytes`` is refused;
* scalars are real numbers (integers for integer types) whose value fits the
  parameter's type: an f32 argument of 2**200 is refused instead of becoming
  +inf (an explicit inf or nan is passed as is).
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable

import numpy as np

from mlir_mx.errors import MXArgTypeError, MXValueError
from mlir_mx.numerics import MXArray, element_format, pack_codes, unpack_codes

__all__ = [
    "check_compile_args",
    "check_buffer",
    "scalar_cell",
    "descriptor",
    "descriptor_type",
    "point",
    "split_mx_args",
    "group_mx_results",
    "CTYPES",
]

#: Raw storage of a scalar passed by pointer (the C interface).
CTYPES = {1: ctypes.c_uint8, 2: ctypes.c_uint16, 4: ctypes.c_uint32, 8: ctypes.c_uint64}


def check_compile_args(module, context) -> None:
    """Refuse a bad module or context before upstream sees them (the
    options are checked by :class:`~mlir_mx.execution.options.CompileOptions`)."""
    from mlir import ir

    if not isinstance(module, str | ir.Module):
        raise MXArgTypeError(
            f"module: expected an ir.Module or MLIR text (str), got {type(module).__name__}"
        )
    if context is not None and not isinstance(context, ir.Context):
        raise MXArgTypeError(
            f"context: expected an ir.Context or None, got {type(context).__name__}"
        )


def _where(fn: str, i: int, p, label: str | None = None) -> str:
    """How a message names argument ``i`` of ``fn``: ``label`` (the caller's
    name for it, ``Runner.bind(names=)``) or ``fn: argument i ('%argI')``."""
    return label or f"{fn}: argument {i + 1} ('{p.name}')"


def fmt_shape(shape) -> str:
    return "(" + ", ".join(str(s) for s in shape) + ("," if len(shape) == 1 else "") + ")"


def check_buffer(
    fn: str, i: int, p, a, may_write: Callable[[], bool], label: str | None = None
) -> np.ndarray:
    """The array to pass for buffer parameter ``p`` (argument ``i`` of ``fn``;
    ``label``: its name in messages, see :func:`_where`).

    numpy arrays are passed as they are; any object with ``__dlpack__`` (a
    torch CPU tensor, ...) through ``np.from_dlpack``, i.e. without a copy, so
    in-place updates reach the caller's tensor.

    ``may_write()`` says whether the function may write this parameter; it is
    only asked for read-only arrays (it runs an analysis the first time).
    """
    where = _where(fn, i, p, label)
    if isinstance(a, np.ma.MaskedArray):
        raise MXArgTypeError(
            f"{where}: masked arrays are not supported (native code would ignore the mask); "
            "pass a.filled(value) or np.asarray(a)"
        )
    if not isinstance(a, np.ndarray) and hasattr(a, "__dlpack__"):
        # DLPack producers (torch CPU tensors, JAX/CuPy host arrays, ...): a
        # numpy view of the same memory, no copy; a device array is refused.
        try:
            a = np.from_dlpack(a)
        except (BufferError, RuntimeError, TypeError, ValueError) as err:
            raise MXArgTypeError(
                f"{where}: cannot view this {type(a).__name__} as host memory: {err}"
            ) from None
    if not isinstance(a, np.ndarray):
        raise MXArgTypeError(
            f"{where}: expected a numpy.ndarray (or a DLPack array) for {p.type}, "
            f"got {type(a).__name__}"
        )
    if type(a) is not np.ndarray:
        a = np.asarray(a)  # np.matrix, np.memmap, ...: the plain array they view (same memory)
    if a.dtype != p.dtype:
        raise MXArgTypeError(f"{where}: expected dtype {p.dtype}, got {a.dtype}")
    if a.ndim != len(p.shape) or any(
        s is not None and s != d for s, d in zip(p.shape, a.shape, strict=False)
    ):
        want = tuple("?" if s is None else s for s in p.shape)
        raise MXValueError(f"{where}: expected shape {fmt_shape(want)}, got {fmt_shape(a.shape)}")
    if not a.flags.c_contiguous:
        raise MXValueError(f"{where}: array is not C-contiguous (use np.ascontiguousarray)")
    if not a.flags.aligned:
        raise MXValueError(f"{where}: array data is not aligned for {a.dtype} (copy it: np.array(a))")
    if not a.flags.writeable and may_write():
        raise MXValueError(
            f"{where}: the function writes this argument but the array is read-only "
            "(a read-only view, a memmap opened mode='r' or an array over bytes); "
            "pass a writeable copy: np.array(a)"
        )
    return a


def _real(where: str, p, a) -> np.ndarray:
    if isinstance(a, bool | np.bool_) or not isinstance(a, int | float | np.integer | np.floating):
        raise MXArgTypeError(f"{where}: expected a real number for {p.type}, got {type(a).__name__}")
    try:
        wide = float(a)
    except OverflowError:
        raise MXValueError(f"{where}: {a} is outside the range of {p.type}") from None
    with np.errstate(over="ignore"):
        value = np.array(a, dtype=p.dtype)
    if np.isinf(value) and np.isfinite(wide):
        raise MXValueError(f"{where}: {a!r} is outside the range of {p.type} (it would become inf)")
    return value


def scalar_cell(fn: str, i: int, p, a, label: str | None = None):
    """A ctypes cell holding scalar argument ``a`` for parameter ``p``."""
    where = _where(fn, i, p, label)
    if isinstance(a, np.ndarray) and a.ndim == 0:
        a = a[()]
    kind = p.dtype.kind
    if kind == "f" or p.type == "bf16":
        value = _real(where, p, a)
    elif kind == "b":
        if not isinstance(a, bool | np.bool_ | int | np.integer) or int(a) not in (0, 1):
            raise MXArgTypeError(f"{where}: expected a bool for i1, got {a!r}")
        value = np.array(bool(a), dtype=np.bool_)
    else:
        if isinstance(a, bool | np.bool_) or not isinstance(a, int | np.integer):
            raise MXArgTypeError(f"{where}: expected an integer for {p.type}, got {type(a).__name__}")
        info = np.iinfo(p.dtype)
        if not info.min <= int(a) <= info.max:
            raise MXValueError(f"{where}: {int(a)} does not fit in {p.type}")
        value = np.array(int(a), dtype=p.dtype)
    return CTYPES[p.dtype.itemsize].from_buffer_copy(value.tobytes())


@functools.cache
def descriptor_type(rank: int):
    """ctypes struct of a ranked memref descriptor (element pointer as void*).

    Cached: creating a ctypes type (and its pointer type) costs tens of
    microseconds, which would dominate the call of a small kernel.
    """
    fields = [
        ("allocated", ctypes.c_void_p),
        ("aligned", ctypes.c_void_p),
        ("offset", ctypes.c_int64),
    ]
    if rank:
        fields += [("shape", ctypes.c_int64 * rank), ("strides", ctypes.c_int64 * rank)]
    return type(f"MemRef{rank}D", (ctypes.Structure,), {"_fields_": fields})


def descriptor(a: np.ndarray):
    """The memref descriptor viewing ``a`` (which must stay alive during the call)."""
    d = descriptor_type(a.ndim)()
    point(d, a)
    return d


def point(d, a: np.ndarray) -> None:
    """Point descriptor ``d`` (of ``a``'s rank) at the array ``a``."""
    d.allocated = d.aligned = a.__array_interface__["data"][0]
    d.offset = 0
    if a.ndim:
        d.shape[:] = a.shape
        d.strides[:] = [s // a.itemsize for s in a.strides] if a.size else [0] * a.ndim


def split_mx_args(fn: str, params, args, mx_param_type, labels=None) -> list:
    """Expand each MXArray / (codes, scales) argument into its two buffers
    (``labels``: the arguments' names in messages, see :func:`_where`)."""
    flat: list = []
    for i, (p, a) in enumerate(zip(params, args, strict=True)):
        if not isinstance(p, mx_param_type):
            flat.append(a)
            continue
        where = _where(fn, i, p, None if labels is None else labels[i])
        if isinstance(a, MXArray):
            want = (p.mx.element_type, p.mx.block_size, p.mx.block_axis, p.mx.scale_type)
            got = (a.element, a.block_size, a.axis, a.scale_type)
            if want != got:
                raise MXArgTypeError(
                    f"{where}: expected an MXArray with element {want[0]}, block_size "
                    f"{want[1]}, axis {want[2]}, scales {want[3]} for {p.type}; got element "
                    f"{got[0]}, block_size {got[1]}, axis {got[2]}, scales {got[3]}"
                )
            # An NVFP4 array's global scale is not part of the !mx.tensor value:
            # it is the ops' own f32 operand, an argument of its own.
            # The arrays the MXArray holds, not its read-only views and not a
            # copy: no lowering writes an !mx.tensor argument (its codes and
            # scales are never a destination), but the write analysis may not
            # prove it (effects.py: escapes into the threads' closures).
            codes, scales = a.held_buffers()
            if not p.packed:  # one code per byte at this boundary
                fmt = a.format
                codes = unpack_codes(codes, fmt) if a.is_packed else codes.view(fmt.dtype)
            flat += [codes, scales]
        elif isinstance(a, tuple | list) and len(a) == 2:
            codes = a[0]
            if p.packed and getattr(codes, "dtype", None) == element_format(p.mx.element_type).dtype and np.shape(codes) == p.mx.shape:
                codes = pack_codes(codes, p.mx.element_type)  # one code per byte: packed here
            flat += [codes, a[1]]
        else:
            raise MXArgTypeError(
                f"{where}: expected an MXArray or a (codes, scales) pair for {p.type}, "
                f"got {type(a).__name__}"
            )
    return flat


def group_mx_results(params, values: list, mx_param_type) -> list:
    """Regroup the (codes, scales) buffers of mx results into MXArrays; an
    NVFP4 result (``f8E4M3FN`` scales) stays the ``(codes, scales)`` pair:
    its global scale is another value of the function, not part of it."""
    out, k = [], 0
    for p in params:
        if isinstance(p, mx_param_type):
            codes, scales = values[k], values[k + 1]
            mx = p.mx
            if mx.has_global_scale:
                out.append((codes, scales))
                k += 2
                continue
            # Fresh copies the Runner made (Runner._take): taken over, not copied again.
            make = MXArray.from_packed if p.packed else MXArray
            out.append(make(codes, scales, mx.element_type, mx.block_size, mx.block_axis, copy=False))
            k += 2
        else:
            out.append(values[k])
            k += 1
    return out

"""The checks of an MX layout's arguments, shared by :class:`~mlir_mx.numerics.MXArray`,
the oracle (:mod:`mlir_mx.numerics.mx`) and the compiled conversions (:mod:`mlir_mx.convert`)."""

from __future__ import annotations

import numpy as np

from mlir_mx.errors import MXArgTypeError, MXValueError

__all__ = ["check_block_size", "check_blocked_shape", "check_shape", "normalize_axis"]


def check_shape(shape, arg: str = "shape") -> tuple[int, ...]:
    """``shape`` (a sequence of non-negative ints, numpy's included) as a tuple;
    ``MXArgTypeError`` / ``MXValueError`` naming the argument ``arg`` otherwise."""
    if isinstance(shape, (str, bytes)) or not hasattr(shape, "__iter__"):
        raise MXArgTypeError(f"{arg}: expected a sequence of ints, got {type(shape).__name__}")
    out = tuple(shape)
    if not all(isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)) for v in out):
        raise MXArgTypeError(f"{arg}: expected a sequence of ints, got {shape!r}")
    if any(v < 0 for v in out):
        raise MXValueError(f"{arg}: expected sizes of 0 or more, got {tuple(int(v) for v in out)}")
    return tuple(int(v) for v in out)


def check_block_size(block_size) -> int:
    """``block_size`` as an int, checked positive (an ``MXArgTypeError`` for a non-int)."""
    if isinstance(block_size, (bool, np.bool_)) or not isinstance(block_size, (int, np.integer)):
        raise MXArgTypeError(f"block_size: expected a positive int, got {type(block_size).__name__}")
    block_size = int(block_size)
    if block_size <= 0:
        raise MXValueError(f"block_size: must be positive, got {block_size}")
    return block_size


def normalize_axis(axis, ndim: int, arg: str = "axis") -> int:
    """``axis`` as an index in ``[0, ndim)`` (negative axes count from the end)."""
    if isinstance(axis, (bool, np.bool_)) or not isinstance(axis, (int, np.integer)):
        raise MXArgTypeError(f"{arg}: expected an int, got {type(axis).__name__}")
    axis = int(axis)
    if not -ndim <= axis < ndim:
        raise MXValueError(f"{arg}: {axis} is out of range for an array of rank {ndim}")
    return axis % ndim


def check_blocked_shape(shape, block_size: int, axis: int, arg: str) -> None:
    """Refuse a ``shape`` whose blocked ``axis`` is not a multiple of ``block_size``."""
    n = shape[axis]
    if n % block_size != 0:
        raise MXValueError(
            f"{arg}: blocked axis {axis} has size {n}, not a multiple of block_size {block_size}"
        )

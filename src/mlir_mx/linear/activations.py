"""What a :class:`~mlir_mx.Linear` call's activations are: the ``activations=``
argument checked, the kind the kernel cache is keyed by, and a DLPack array
viewed as host memory."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import NamedTuple

import ml_dtypes
import numpy as np

from mlir_mx.errors import MXArgTypeError, user_error
from mlir_mx.kernels.common.problem import BF16
from mlir_mx.kernels.dot.units import dot_kind
from mlir_mx.numerics import ElementFormat, element_format

__all__ = ["BF16", "BF16_ACTIVATIONS", "HALF_DTYPES", "Activations", "activations_format", "f32_at",
           "host_view", "input_kind"]  # fmt: skip


@dataclass(frozen=True)
class RoundedActivations:
    """``activations="bf16"``: f32 activations rounded to bf16 per call
    (nearest even), then multiplied exactly: the ``bf16`` dot kernels
    (``vdpbf16ps``) where the CPU has AVX512-BF16, else the f32 kernels on
    the rounded values; the same bits (``docs/numerics.md``)."""

    name: str = BF16


#: The one ``activations="bf16"`` (what :func:`activations_format` returns for it).
BF16_ACTIVATIONS = RoundedActivations()


class Activations(NamedTuple):
    """What a call's activations are, as the kernels see them (a key of the
    kernel cache): MX activations of ``element`` (codes ``packed`` or one per
    byte), or f32 activations (``element`` None), quantized to ``quantize_to``
    per call when that is set (``Linear(activations=...)``): an MX element
    format, or :data:`BF16` (rounded to bf16, then exact)."""

    element: str | None
    packed: bool
    quantize_to: str | None


def input_kind(activations, element: str, block: int, m: int, bf16: bool) -> Activations:
    """The kind of a call by address (``Linear.call_into``) with ``m`` f32 rows
    for a weight of ``element`` in blocks of ``block`` made with
    ``activations``: bf16 values (``bf16``) with no ``activations=`` take the
    bf16 dot kernels where they are chosen (not at M = 1: decode runs the f32
    kernel), else the exact path's kind.  ``Linear.precompile(bf16=True)``
    compiles the same."""
    dot = bf16 and m > 1 and dot_kind(BF16, element, block)
    return Activations(None, False, activations or (BF16 if dot else None))


def activations_format(activations) -> ElementFormat | RoundedActivations | None:
    """``activations=``: ``None`` (f32 activations enter the products exactly),
    ``"bf16"`` (rounded to bf16 per call, then exact: :data:`BF16_ACTIVATIONS`)
    or an MX element format (a name or an :class:`ElementFormat`) they are
    quantized to per call, blocks along ``in`` (the dot kernels where the CPU
    has them).  Returns the format; ``ValueError`` / ``TypeError`` naming
    ``activations`` otherwise."""
    if activations is None:
        return None
    if isinstance(activations, RoundedActivations) or (
        isinstance(activations, str) and activations == BF16
    ):
        return BF16_ACTIVATIONS
    try:
        return element_format(activations)
    except (TypeError, ValueError) as err:
        raise user_error(err, f"activations: {err}") from None



#: Activation dtypes widened to f32 exactly.
HALF_DTYPES = (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))


def host_view(x) -> np.ndarray:
    """A numpy view of the DLPack array ``x``; a torch bfloat16/float16 tensor
    as float32 (numpy has no bfloat16 to view it as)."""
    if type(x).__module__.startswith("torch"):
        if getattr(x, "requires_grad", False):
            raise MXArgTypeError(
                "x: the tensor requires grad, and Linear computes no gradients: pass x.detach()"
            )
        if str(getattr(x, "dtype", "")) in ("torch.bfloat16", "torch.float16"):
            x = x.float()  # exact
    try:
        return np.from_dlpack(x)
    except (BufferError, RuntimeError, TypeError, ValueError) as err:
        raise MXArgTypeError(
            f"x: cannot view this {type(x).__name__} as host memory: {err}"
        ) from None


def f32_at(addr: int, m: int, n: int) -> np.ndarray:
    """The f32 ``(m, n)`` C-contiguous buffer at ``addr`` as a numpy view (no
    copy; the caller keeps the memory alive): ``Linear.call_into``'s buffers."""
    return np.ctypeslib.as_array((ctypes.c_float * (m * n)).from_address(addr)).reshape(m, n)

"""What a :class:`~mlir_mx.Linear` call's activations are: the ``activations=``
argument checked, and the kind the kernel cache is keyed by."""

from __future__ import annotations

from typing import NamedTuple

from mlir_mx.errors import user_error
from mlir_mx.numerics import element_format

__all__ = ["Activations", "check_activations"]


class Activations(NamedTuple):
    """What a call's activations are, as the kernels see them (a key of the
    kernel cache): MX activations of ``element`` (codes ``packed`` or one per
    byte), or f32 activations (``element`` None), quantized to ``quantize_to``
    per call when that is set (``Linear(activations=...)``)."""

    element: str | None
    packed: bool
    quantize_to: str | None


def check_activations(activations) -> str | None:
    """``activations=``: ``None`` (f32 activations enter the products exactly) or
    an MX element format they are quantized to per call, blocks along ``in``
    (the dot kernels where the CPU has them).  Returns the format's name;
    ``ValueError`` / ``TypeError`` naming ``activations`` otherwise."""
    if activations is None:
        return None
    try:
        return element_format(activations).name
    except (TypeError, ValueError) as err:
        raise user_error(err, f"activations: {err}") from None

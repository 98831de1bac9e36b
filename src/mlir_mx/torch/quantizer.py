"""The one place ``mlir_mx.torch`` quantizes a weight (``quantize_weight``).

It calls the library's compiled quantizer, :func:`mlir_mx.quantize`
(``mx-quantize-kernels``: the oracle's bits at memory speed), on the
tensor's own memory (DLPack, any float dtype: bf16/f16 widen in registers), so
converting a layer needs no memory beyond its MX result.
"""

from __future__ import annotations

import torch

from mlir_mx.errors import MXArgTypeError, MXValueError
from mlir_mx.numerics import ElementFormat, MXArray, element_format

__all__ = ["quantize_weight"]


def quantize_weight(
    weight: torch.Tensor, element: str | ElementFormat, block_size: int, *,
    threads: int | None = None,
) -> MXArray:
    """MX ``weight`` ``(out, in)`` (any float dtype, on the CPU), blocked along ``in``:
    the bits of ``quantize(weight.float().numpy(), element, block_size, axis=1)``,
    computed on ``threads`` threads (None: ``torch.get_num_threads()``)."""
    if not isinstance(weight, torch.Tensor):
        raise MXArgTypeError(f"weight: expected a torch.Tensor, got {type(weight).__name__}")
    fmt = element_format(element)
    w = weight.detach()
    if w.dim() != 2:
        raise MXValueError(f"weight: expected a 2-D (out, in) tensor, got shape {tuple(w.shape)}")
    if w.device.type != "cpu":
        raise MXValueError(f"weight: mlir_mx quantizes on the CPU, got a tensor on {w.device}")
    rows, cols = w.shape
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
        raise MXValueError(f"block_size: expected a positive int, got {block_size!r}")
    if cols % block_size:
        raise MXValueError(
            f"weight: in_features {cols} is not a multiple of block_size {block_size}"
        )
    from mlir_mx.convert import quantize

    if not w.is_contiguous():
        w = w.contiguous()
    n = torch.get_num_threads() if threads is None else threads
    return quantize(w, fmt, block_size, axis=-1, threads=n)

"""The one place ``mlir_mx.torch`` quantizes a weight (``quantize_weight``).

It calls the oracle, :func:`mlir_mx.numerics.quantize`, a slice of rows at a
time, so that converting a layer needs little memory beyond its MX result (the
oracle works in float64: a whole 32000 x 2048 head at once would take ~2 GB of
temporaries).  A faster, compiled quantizer (issue 20) replaces the body of
this function, and nothing else.
"""

from __future__ import annotations

import numpy as np
import torch

from mlir_mx.numerics import MXArray, element_format, packed_shape, quantize, scale_shape
from mlir_mx.numerics.packing import is_packed_storage

__all__ = ["quantize_weight"]

#: Elements quantized per slice (about 16 MB of f32).
_SLICE_ELEMENTS = 1 << 22


def quantize_weight(weight: torch.Tensor, element: str, block_size: int) -> MXArray:
    """MX ``weight`` ``(out, in)`` (any float dtype, on the CPU), blocked along ``in``:
    the bits of ``quantize(weight.float().numpy(), element, block_size, axis=1)``."""
    fmt = element_format(element)
    w = weight.detach()
    if w.dim() != 2:
        raise ValueError(f"weight: expected a 2-D (out, in) tensor, got shape {tuple(w.shape)}")
    if w.device.type != "cpu":
        raise ValueError(f"weight: mlir_mx quantizes on the CPU, got a tensor on {w.device}")
    rows, cols = w.shape
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
        raise ValueError(f"block_size: expected a positive int, got {block_size!r}")
    if cols % block_size:
        raise ValueError(
            f"weight: in_features {cols} is not a multiple of block_size {block_size}"
        )
    packed = is_packed_storage((rows, cols), fmt)
    codes = np.empty(packed_shape((rows, cols), fmt) if packed else (rows, cols), np.uint8)
    scales = np.empty(scale_shape((rows, cols), block_size, 1), np.uint8)
    step = max(1, _SLICE_ELEMENTS // max(cols, 1))
    for r in range(0, rows, step):
        part = w[r : r + step].to(torch.float32).numpy()
        q = quantize(part, fmt.name, block_size, axis=1)
        codes[r : r + step] = q.packed_codes()
        scales[r : r + step] = q.scales.view(np.uint8)
    return MXArray.from_packed(codes, scales, fmt.name, block_size, axis=1, copy=False)

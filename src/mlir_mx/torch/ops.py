"""The torch custom op ``mlir_mx::linear``: one MX linear layer, for eager mode,
``torch.compile`` and ``torch.export``.

``torch.ops.mlir_mx.linear(x, codes, scales, element, block_size, in_features,
out_features, threads, activations)``: ``x`` f32 ``(M, in)`` C-contiguous on the CPU;
``codes``/``scales`` the weight as the kernels read it (``mlir_mx.Linear.stored``,
as ``uint8`` tensors); ``threads`` 0 follows ``torch.get_num_threads()`` at call
time; ``activations`` the MX format ``x`` is quantized to per call, or ``""``.
Returns f32 ``(M, out)``.  A fake (meta) implementation gives the output
shape, so tracing sees one opaque op per layer and no graph break.

The op runs the layer's :class:`mlir_mx.Linear`.  An ``MXLinear`` registers its
Linear under the addresses of its two tensors (:func:`register`), so a call
with those tensors reuses its compiled kernels; the tensors are the Linear's own
memory (``torch.from_numpy``), so a write through them is seen by the kernel and
nothing can be stale.  Other tensors (an exported program's copies) get a Linear
built over their memory for the call (``Linear.from_stored``: no copy; kernels
come from the compile caches).
"""

from __future__ import annotations

import weakref

import torch

from mlir_mx.linear import Linear
from mlir_mx.numerics import SCALE_DTYPE

__all__ = ["linear", "register"]

_LIVE: weakref.WeakValueDictionary[tuple, Linear] = weakref.WeakValueDictionary()


def _key(codes, scales, element: str, block_size: int, activations: str) -> tuple:
    return (
        codes.data_ptr(), tuple(codes.shape), scales.data_ptr(), tuple(scales.shape),
        element, block_size, activations,
    )  # fmt: skip


def register(lin: Linear, codes: torch.Tensor, scales: torch.Tensor) -> None:
    """Let calls on ``codes``/``scales`` (views of ``lin.stored``) use ``lin``.

    Held weakly: the entry goes with the Linear.  While it lives, its memory
    does, so no other allocation can take these addresses."""
    _LIVE[_key(codes, scales, lin.element, lin.block_size, lin.activations or "")] = lin


def _layer(codes, scales, element, block_size, in_features, out_features, acts) -> Linear:
    lin = _LIVE.get(_key(codes, scales, element, block_size, acts))
    if lin is not None:
        return lin
    return Linear.from_stored(
        codes.numpy(), scales.numpy().view(SCALE_DTYPE), element, block_size,
        in_features, out_features, activations=acts or None,
    )  # fmt: skip


@torch.library.custom_op("mlir_mx::linear", mutates_args=(), device_types="cpu")
def linear(
    x: torch.Tensor,
    codes: torch.Tensor,
    scales: torch.Tensor,
    element: str,
    block_size: int,
    in_features: int,
    out_features: int,
    threads: int,
    activations: str,
) -> torch.Tensor:
    """``x @ W.T`` with the MX weight ``W`` held as ``codes``/``scales`` (see the module)."""
    lin = _layer(codes, scales, element, block_size, in_features, out_features, activations)
    lin.threads = threads if threads > 0 else torch.get_num_threads()
    return torch.from_numpy(lin(x.numpy()))


@linear.register_fake
def _linear_fake(
    x, codes, scales, element, block_size, in_features, out_features, threads, activations
):
    return x.new_empty((x.shape[0], out_features))

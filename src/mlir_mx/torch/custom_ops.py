"""The torch custom op ``mlir_mx::linear``: one MX linear layer, for eager mode,
``torch.compile`` and ``torch.export``.

``torch.ops.mlir_mx.linear(x, weight, element, block_size, in_features,
out_features, threads, activations, records)``: ``x`` f32 ``(M, in)``
C-contiguous on the CPU; ``weight`` the arrays the layer's ``mlir_mx.Linear``
holds (``Linear.held``, as ``uint8`` tensors): ``[codes, scales]`` of the
stored form, ``[records]``, the dot kernels' records of unit ``records``
(``""`` when no records are held), or ``[codes, scales, records]`` (records
beside the stored form); ``threads`` this call's thread count, 0 for
``torch.get_num_threads()`` at call time (passed to the call, never stored
on the shared Linear); ``activations`` the MX format ``x`` is quantized to
per call, or ``""``.  Returns f32 ``(M, out)``.  A fake (meta)
implementation gives the output shape, so tracing sees one opaque op per
layer and no graph break.

The op runs the layer's :class:`mlir_mx.Linear`.  An ``MXLinear`` registers its
Linear under the addresses of its tensors (:func:`register`), so a call with
those tensors reuses its compiled kernels; the tensors are the Linear's own
memory (``torch.from_numpy``), so a write through them is seen by the kernel and
nothing can be stale.  Other tensors (an exported program's copies) get a Linear
built over their memory for the call (``Linear.from_stored`` /
``Linear.from_records``: no copy; kernels come from the compile caches).
"""

from __future__ import annotations

import weakref

import torch

from mlir_mx.linear import Linear
from mlir_mx.numerics import SCALE_DTYPE

from .thread_policy import layer_threads

__all__ = ["call_op", "linear", "register"]

_LIVE: weakref.WeakValueDictionary[tuple, Linear] = weakref.WeakValueDictionary()


def _key(weight, element: str, block_size: int, activations: str, records: str) -> tuple:
    arrays = tuple((t.data_ptr(), tuple(t.shape)) for t in weight)
    return (arrays, element, block_size, activations, records)


def register(lin: Linear, weight: list[torch.Tensor]) -> None:
    """Let calls on ``weight`` (views of ``lin.held``) use ``lin``.

    Held weakly: the entry goes with the Linear.  While it lives, its memory
    does, so no other allocation can take these addresses."""
    key = _key(weight, lin.element, lin.block_size, lin.activations or "", lin.records_unit or "")
    _LIVE[key] = lin


def _layer(weight, element, block_size, in_features, out_features, acts, records) -> Linear:
    lin = _LIVE.get(_key(weight, element, block_size, acts, records))
    if lin is not None:
        return lin
    shape = (element, block_size, in_features, out_features)
    if records and len(weight) == 1:
        (rec,) = weight
        return Linear.from_records(rec.numpy(), records, *shape, activations=acts or None)
    codes, scales, *rec = weight
    return Linear.from_stored(
        codes.numpy(),
        scales.numpy().view(SCALE_DTYPE),
        *shape,
        activations=acts or None,
        records=rec[0].numpy() if rec else None,
    )


@torch.library.custom_op("mlir_mx::linear", mutates_args=(), device_types="cpu")
def linear(
    x: torch.Tensor,
    weight: list[torch.Tensor],
    element: str,
    block_size: int,
    in_features: int,
    out_features: int,
    threads: int,
    activations: str,
    records: str,
) -> torch.Tensor:
    """``x @ W.T`` with the MX weight ``W`` held as ``weight`` (see the module)."""
    lin = _layer(weight, element, block_size, in_features, out_features, activations, records)
    n = threads if threads > 0 else layer_threads()
    return torch.from_numpy(lin(x.numpy(), threads=n))


def call_op(
    x: torch.Tensor, weight: list[torch.Tensor], lin: Linear, threads: int | None
) -> torch.Tensor:
    """``torch.ops.mlir_mx.linear`` on ``x`` (f32 ``(M, in)``, C-contiguous) for
    ``lin``, held as ``weight`` (views of ``lin.held``: a layer's buffers, which
    a tracer sees; the fused weight's for a part of it); ``threads`` None:
    ``torch.get_num_threads()`` at call time.  The one spelling of the op's
    call (``MXLinear``, ``FusedWeight``): format, shape, activations and
    records unit are ``lin``'s, those :func:`register` keys it by."""
    shape = (lin.element, lin.block_size, lin.in_features, lin.out_features)
    acts, unit = lin.activations or "", lin.records_unit or ""
    return torch.ops.mlir_mx.linear(x, weight, *shape, threads or 0, acts, unit)


@linear.register_fake
def _linear_fake(
    x, weight, element, block_size, in_features, out_features, threads, activations, records
):
    return x.new_empty((x.shape[0], out_features))

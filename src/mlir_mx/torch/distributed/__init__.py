"""``mlir_mx.torch`` across processes with ``torch.distributed`` (``docs/distributed.md``).

Tensor parallel (:mod:`.tensor_parallel`): torch's ``ColwiseParallel`` /
``RowwiseParallel`` extended to ``MXLinear`` (:class:`MXColwiseParallel`,
:class:`MXRowwiseParallel`, :func:`parallelize`); the plans (:mod:`.plans`:
``"auto"``, transformers' ``base_model_tp_plan``); a checkpoint loaded as this
rank's shard only (:mod:`.shard_load`: :func:`from_pretrained` with
``device_mesh=`` and ``tp_plan=``).
"""

from __future__ import annotations

from .plans import auto_plan, resolve_plan
from .shard_load import from_pretrained
from .tensor_parallel import (
    MXColwiseParallel,
    MXRowwiseParallel,
    check_plan,
    held_weight_bytes,
    parallelize,
    slice_mx,
)

__all__ = [
    "MXColwiseParallel",
    "MXRowwiseParallel",
    "auto_plan",
    "check_plan",
    "from_pretrained",
    "held_weight_bytes",
    "parallelize",
    "resolve_plan",
    "slice_mx",
]

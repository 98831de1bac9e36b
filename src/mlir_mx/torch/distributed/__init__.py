"""``mlir_mx.torch`` across processes with ``torch.distributed`` (``docs/distributed.md``).

Tensor parallel (:mod:`.tensor_parallel`): torch's ``ColwiseParallel`` /
``RowwiseParallel`` extended to ``MXLinear`` (:class:`MXColwiseParallel`,
:class:`MXRowwiseParallel`, :func:`parallelize`); the plans (:mod:`.plans`:
``"auto"``, transformers' ``tp_plan``); a checkpoint loaded as this rank's
shard only (:mod:`.shard_load`, behind ``mlir_mx.torch.from_pretrained(path,
device_mesh=, tp_plan=)``); the processes of ``mx-generate --tp N`` /
``torchrun`` (:mod:`.launch`), each rank's threads on its own CPUs
(:mod:`.affinity`: :func:`pin_rank`).

Expert parallel for ``MXExperts`` (:mod:`.experts`): :func:`shard_experts`,
:class:`ExpertParallel` (a ``ParallelStyle``), :class:`ExpertShard`,
:func:`expert_range` (``docs/torch.md``, "Expert parallel"; on paper, past one
machine: ``docs/scaling-out.md``); read as each rank's experts at load
(:mod:`.expert_load`: :func:`ep_auto_plan`, :class:`HeadsParallel`).

The names are re-exported lazily (imported on first use): importing
``torch.distributed.tensor`` costs about a second, which a process that never
splits a model (``mx-generate`` without ``--tp``) does not pay.
"""

from __future__ import annotations

from importlib import import_module

#: Each public name and the module that defines it.
_EXPORTS = {
    "MXColwiseParallel": "tensor_parallel",
    "MXRowwiseParallel": "tensor_parallel",
    "check_plan": "tensor_parallel",
    "held_weight_bytes": "tensor_parallel",
    "parallelize": "tensor_parallel",
    "set_decode_collective": "decode_collectives",
    "pin_rank": "affinity",
    "slice_mx": "tensor_parallel",
    "auto_plan": "plans",
    "resolve_plan": "plans",
    "COMBINES": "experts",
    "ExpertParallel": "experts",
    "ExpertShard": "experts",
    "expert_range": "experts",
    "shard_experts": "experts",
    "HeadsParallel": "expert_load",
    "ep_auto_plan": "expert_load",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

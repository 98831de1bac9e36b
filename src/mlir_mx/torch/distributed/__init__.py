"""mlir_mx.torch over ``torch.distributed``: MX models sharded across processes
(issue 56; ``docs/torch.md``, "Expert parallel", and ``docs/scaling-out.md``).

Expert parallel for ``MXExperts``: :func:`shard_experts`, :class:`ExpertParallel`
(a ``ParallelStyle``), :class:`ExpertShard`, :func:`expert_range`.
"""

from __future__ import annotations

from .experts import COMBINES, ExpertParallel, ExpertShard, expert_range, shard_experts

__all__ = ["COMBINES", "ExpertParallel", "ExpertShard", "expert_range", "shard_experts"]

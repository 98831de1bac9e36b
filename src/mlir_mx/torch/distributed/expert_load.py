"""Expert parallel at load: each rank reads only its experts' bytes.

:class:`.shard_load.ShardedLoad` (``from_pretrained(path, device_mesh=,
tp_plan=)``) takes a plan whose entries may name a stacked-experts module with
:class:`~.experts.ExpertParallel` (or transformers' ep plan string
``"ep_dispatch_experts"``).  ``tp_plan="auto"`` on a model with stacked experts
(gpt-oss) is transformers' own plan (the embedding's rows, the gathered head)
plus, as :func:`ep_auto_plan` adds it:

* every stacked-experts module expert parallel (transformers' ``ep_plan`` of
  gpt-oss names the same modules ``ep_dispatch_experts``);
* every attention tensor parallel, the Megatron split (transformers 5 dropped
  it from gpt-oss's ``tp_plan``): ``q/k/v_proj`` colwise (whole heads per
  rank), ``o_proj`` rowwise, and the per-head parameters the attention holds
  (gpt-oss's ``sinks``) cut to the rank's heads (:class:`HeadsParallel`).

The plan is checked on the meta model before a byte is read or a collective
runs: a rank count that does not divide a block's experts is an
:class:`~mlir_mx.errors.MXValueError` naming the block (:func:`expert_cuts`).
The checkpoint reader (``checkpoint._experts``) then reads experts ``first ..
first + E/N - 1`` only, per projection one expert at a time (``get_slice``:
``*_blocks[e]``, ``*_scales[e]``), and the biases' rows of those experts;
:func:`~.experts.shard_experts` adopts the block as this rank's
:class:`~.experts.ExpertShard` without another copy.

Plain ``nn.Linear`` layers the plan splits (gpt-oss's bf16 attention and
head) are read as their rows or columns too, and handed to torch's styles as
DTensors made from those shards (:func:`adopt_linear_shard`:
``DTensor.from_local``, which torch's ``distribute_tensor`` takes as it is),
so no rank reads or scatters the whole weight.
"""

from __future__ import annotations

import torch
from torch.distributed.tensor import DTensor, Replicate, Shard
from torch.distributed.tensor.parallel import ColwiseParallel, ParallelStyle

from mlir_mx.errors import MXValueError

from ..experts import MXExperts, is_stacked_experts
from .experts import ExpertParallel, expert_range
from .tensor_parallel import shard_range

__all__ = ["EP_STRING", "HeadsParallel", "adopt_linear_shard", "ep_auto_plan", "expert_cuts",
           "with_ep_styles"]  # fmt: skip

#: transformers' ep plan string for a stacked-experts module (gpt-oss's ``ep_plan``).
EP_STRING = "ep_dispatch_experts"
_ATTN = {"q_proj": "colwise", "k_proj": "colwise", "v_proj": "colwise", "o_proj": "rowwise"}


class HeadsParallel(ParallelStyle):
    """The per-head parameters of an attention whose ``q/k/v_proj`` are split
    colwise (whole heads per rank): ``sinks`` ``(heads,)`` cut to the rank's
    heads, a plain tensor (the attention's math runs on local tensors)."""

    def _apply(self, module: torch.nn.Module, device_mesh) -> torch.nn.Module:
        sinks = getattr(module, "sinks", None)
        if isinstance(sinks, torch.Tensor) and getattr(module, "mx_tp_heads", None) is None:
            rank, world = device_mesh.get_local_rank(), device_mesh.size()
            if sinks.shape[0] % world:
                raise MXValueError(f"sinks: {sinks.shape[0]} heads do not split over {world} ranks")
            a, b = shard_range(sinks.shape[0], rank, world)
            module.sinks = torch.nn.Parameter(sinks.detach()[a:b].clone(), requires_grad=False)
            module.mx_tp_heads = (a, b)
        return module


def _stacked(model) -> list[str]:
    return [n for n, m in model.named_modules() if is_stacked_experts(m) or isinstance(m, MXExperts)]


def ep_auto_plan(model: torch.nn.Module) -> dict:
    """What ``"auto"`` adds to transformers' plan of a model with stacked experts
    (the module docstring): ``{}`` for a model without them."""
    names = _stacked(model)
    if not names:
        return {}
    plan = {_pattern(n): ExpertParallel() for n in names}
    for name, m in model.named_modules():
        if name.endswith("self_attn") and all(
            type(getattr(m, p, None)) is torch.nn.Linear for p in _ATTN
        ):  # fmt: skip
            stem = _pattern(name)
            plan |= {f"{stem}.{p}": style for p, style in _ATTN.items()}
            if isinstance(getattr(m, "sinks", None), torch.Tensor):
                plan[stem] = HeadsParallel()
    return plan


def _pattern(name: str) -> str:
    """``model.layers.3.mlp.experts`` -> ``model.layers.*.mlp.experts``."""
    return ".".join("*" if p.isdigit() else p for p in name.split("."))


def with_ep_styles(plan):
    """A dict plan with transformers' ep string (:data:`EP_STRING`) made an
    :class:`ExpertParallel`; anything else as it is."""
    if not isinstance(plan, dict):
        return plan
    return {k: ExpertParallel() if v == EP_STRING else v for k, v in plan.items()}


def expert_cuts(model: torch.nn.Module, plan: dict, rank: int, world: int) -> dict[str, range]:
    """``{block name: range of its experts this rank holds}`` for each module of
    the expanded ``plan`` styled :class:`ExpertParallel`; a module that is not
    stacked experts, or a rank count that does not divide a block's experts,
    is refused (MXValueError naming the block) before anything is read."""
    out = {}
    for name, style in plan.items():
        if not isinstance(style, ExpertParallel):
            continue
        m = model.get_submodule(name)
        if isinstance(m, MXExperts):
            total = m.num_experts
        elif is_stacked_experts(m):
            total = m.gate_up_proj.shape[0]
        else:
            raise MXValueError(f"{name}: planned expert parallel, but holds no stacked experts "
                               f"({type(m).__name__})")  # fmt: skip
        try:
            first, count = expert_range(total, rank, world)
        except MXValueError as e:
            raise MXValueError(f"{name}: {e}") from None
        out[name] = range(first, first + count)
    return out


def adopt_linear_shard(module: torch.nn.Linear, style, mesh) -> None:
    """A plain ``nn.Linear`` read as its rows (colwise) or columns (rowwise):
    its weight (and a colwise bias, cut here to its rows) made DTensors from
    the local shards, placed as torch's style places them (``Shard(0)`` /
    ``Shard(1)``; a rowwise bias ``Replicate``), so the style's
    ``distribute_tensor`` keeps them as they are."""
    col = isinstance(style, ColwiseParallel)
    w = module.weight  # requires_grad kept as loaded, as torch's distribute_tensor keeps it
    module.register_parameter("weight", torch.nn.Parameter(
        DTensor.from_local(w.detach(), mesh, [Shard(0 if col else 1)], run_check=False),
        requires_grad=w.requires_grad,
    ))  # fmt: skip
    if module.bias is not None:
        b = module.bias
        local = b.detach()
        if col:
            a, z = shard_range(b.shape[0], mesh.get_local_rank(), mesh.size())
            local = local[a:z].clone()
        module.register_parameter("bias", torch.nn.Parameter(
            DTensor.from_local(local, mesh, [Shard(0) if col else Replicate()], run_check=False),
            requires_grad=b.requires_grad,
        ))  # fmt: skip

"""Expert parallel for :class:`~mlir_mx.torch.MXExperts`, over ``torch.distributed``.

Every rank of a group holds a contiguous range of each MoE block's experts
(:func:`expert_range`: ``E / N`` each; ``N`` must divide ``E``) and the rest
of the model whole: attention, the router, the norms, the embeddings.  The
router is replicated, so every rank routes every token the same way; each
rank runs its experts for the tokens routed to them, and the outputs are
combined with torch's collectives (the process group's backend: ``gloo`` on
CPUs):

* ``combine="exact"`` (the default): each rank fills the ``(T, k, H)`` f32
  tensor of its slots (token ``t``'s ``j``-th routed expert's output times
  its routing weight; zeros for the slots whose expert another rank holds),
  one sum over the ranks makes every slot whole (each slot nonzero on one
  rank only: ``x + 0 = x``, exact in any order of the additions), and every
  rank adds each token's slots in ascending expert order into zeros, as
  ``MXExperts`` does in one process (the one-token path's ``out += y[r]``,
  the grouped path's ``index_add_`` per expert, ascending).  So the output is
  bit for bit the single process's, at every rank count.
* ``combine="sum"``: each rank adds its own slots (ascending) and one
  ``all_reduce`` adds the ``N`` partial sums: ``k`` times fewer bytes
  (``(T, H)``), but another order of the ``k`` additions than the single
  process's, so the result may differ from it by at most ``2 gamma_{k-1}
  sum_j |w_j y_j|`` per element (``gamma_n = n u / (1 - n u)``, ``u =
  2^-24``: each order's sum is within ``gamma_{k-1} sum |terms|`` of the exact
  sum, whatever the order; Higham, "Accuracy and Stability", 4.2).  It is
  still the same from run to run: the order over ``N`` ranks is fixed.

The sum over the ranks of a decode step's tensor (at most
``decode_collectives.EXCHANGE_BYTES``: 64 KiB, a gpt-oss step's ``(1, 4,
2880)`` f32 slots are 45 KiB) is tensor parallel's decode collective
(``decode_collectives.replicated``: one ``all_to_all_single`` round, the
parts added in rank order, waited for by polling while a core is free;
``set_decode_collective("torch")`` makes it torch's ``all_reduce``); a
longer prompt's is torch's ``all_reduce``.  For ``"exact"`` the bits are
the same either way (each slot is one rank's value plus zeros); for
``"sum"`` with 2 ranks too (``a + b == b + a``), past 2 the rank order is
another fixed order, within the same bound.

Entry points: :func:`shard_experts` (every ``MXExperts`` of a model, in
place) and :class:`ExpertParallel`, a ``ParallelStyle`` for
``torch.distributed.tensor.parallel.parallelize_module``.  A sharded block is
an :class:`ExpertShard`: an ``MXExperts`` holding only its rank's experts
(``nbytes`` about ``1 / N`` of the block's; the other experts' layers are no
longer referenced and are freed).  ``docs/torch.md``, "Expert parallel".
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch.distributed.tensor import Partial
from torch.distributed.tensor.parallel import ParallelStyle

from mlir_mx.errors import MXArgTypeError, MXValueError

from ..experts import MXExperts
from ..fused import eager
from .decode_collectives import EXCHANGE_BYTES, replicated
from .exit_guard import guard_exit

__all__ = ["COMBINES", "ExpertParallel", "ExpertShard", "expert_range", "shard_experts"]

#: How a sharded block combines the ranks' outputs (module docstring).
COMBINES = ("exact", "sum")


def expert_range(num_experts: int, rank: int, ranks: int) -> tuple[int, int]:
    """``(first, count)``: rank ``rank`` of ``ranks`` holds experts ``first ..
    first + count - 1``, ``count = num_experts / ranks``.  A rank count that does
    not divide the experts is refused (MXValueError): the plan is checked on
    every rank before anything is sharded and before any collective."""
    for name, v in (("num_experts", num_experts), ("rank", rank), ("ranks", ranks)):
        if isinstance(v, bool) or not isinstance(v, int):
            raise MXArgTypeError(f"{name}: expected an int, got {type(v).__name__}")
    if ranks < 1 or not 0 <= rank < ranks:
        raise MXValueError(f"rank, ranks: expected 0 <= rank < ranks, got rank {rank} of {ranks}")
    if num_experts % ranks:
        raise MXValueError(
            f"ranks: {ranks} ranks do not divide the {num_experts} experts (expert parallel "
            "gives each rank the same number of experts)"
        )
    count = num_experts // ranks
    return rank * count, count


class ExpertShard(MXExperts):
    """An ``MXExperts`` block sharded by :func:`shard_experts`: it holds experts
    ``first .. first + num_experts - 1`` of ``total_experts`` (its
    ``gate_up`` / ``down`` and ``nbytes`` are those), takes the whole
    block's call (router indices in ``[0, total_experts)``) and returns the
    whole block's output, combined over ``group`` (module docstring)."""

    first: int
    total_experts: int
    combine: str

    def forward(self, hidden_states, router_indices=None, routing_weights=None):
        x, idx, w = self._check_call(
            hidden_states, router_indices, routing_weights, experts=self.total_experts
        )
        slots = _slots(self, x, idx, w)  # (T, k, H) f32, zeros where another rank's
        group = self.__dict__.get("group")
        group = dist.group.WORLD if group is None else group
        if self.combine == "sum":
            out = _summed(_fold(slots, idx), group)
        else:
            out = _fold(_summed(slots, group), idx)
        return out.to(x.dtype)

    def extra_repr(self) -> str:
        return (
            f"experts {self.first}..{self.first + self.num_experts - 1} of "
            f"{self.total_experts}, combine={self.combine!r}, {super().extra_repr()}"
        )


def _slots(block: ExpertShard, x: torch.Tensor, idx: torch.Tensor, w: torch.Tensor):
    """``(T, k, H)`` f32: slot ``(t, j)`` is expert ``idx[t, j]`` on token ``t``
    times ``w[t, j]`` where this rank holds that expert, else zeros; each
    product as ``MXExperts.forward`` makes it (the one-token rows, or each
    expert once on its tokens)."""
    t, k = idx.shape
    hidden = block.hidden_size
    slots = torch.zeros(t, k, hidden, dtype=torch.float32)
    if k == 0:
        return slots
    xf, bf16 = x.to(torch.float32), x.dtype == torch.bfloat16
    scales = w.reshape(-1).to(torch.float32)
    first, last = block.first, block.first + block.num_experts
    flat = slots.view(t * k, hidden)
    if t == 1 and eager(xf) and not (xf.requires_grad and torch.is_grad_enabled()):
        mine = sorted((e, j) for j, e in enumerate(idx[0].tolist()) if first <= e < last)
        if mine:
            y = block.rows([e - first for e, _ in mine], xf.contiguous(), bf16)
            at = [j for _, j in mine]
            y *= scales[at][:, None]
            flat[at] = y
        return slots
    pairs = idx.reshape(-1)
    for e in sorted(set(pairs.tolist()) & set(range(first, last))):
        where = (pairs == e).nonzero().reshape(-1)
        y = block.expert(e - first, xf[where // k], bf16)
        flat[where] = y * scales[where][:, None]
    return slots


def _summed(t: torch.Tensor, group) -> torch.Tensor:
    """``t`` summed over the ranks: a decode step's (at most
    ``EXCHANGE_BYTES``) by tensor parallel's decode collective
    (:func:`.decode_collectives.replicated`: one ``all_to_all_single`` round
    summed in rank order, waited for by polling; or torch's ``all_reduce``
    after ``set_decode_collective("torch")``), a longer prompt's by torch's
    ``all_reduce`` (in place)."""
    if t.numel() * t.element_size() <= EXCHANGE_BYTES:
        return replicated(t, Partial(), group)
    dist.all_reduce(t, group=group)
    return t


def _fold(slots: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """``(T, H)``: each token's slots added into zeros in ascending expert order
    (ties: slot order), one slot at a time: ``MXExperts``' order of additions."""
    t, k, hidden = slots.shape
    out = torch.zeros(t, hidden, dtype=torch.float32)
    if k == 0:
        return out
    order = torch.sort(idx, dim=1, stable=True).indices
    ordered = slots.gather(1, order[..., None].expand(t, k, hidden))
    for j in range(k):
        out += ordered[:, j]
    return out


def _group_of(mesh_or_group):
    """The process group of a 1-D ``DeviceMesh``, a ``ProcessGroup``, or None
    (the default group); refused before any collective."""
    if not dist.is_available() or not dist.is_initialized():
        raise MXValueError(
            "torch.distributed is not initialized: call torch.distributed.init_process_group "
            "(backend 'gloo' on CPUs; torchrun sets the environment) first"
        )
    if mesh_or_group is None:
        return dist.group.WORLD
    from torch.distributed.device_mesh import DeviceMesh

    if isinstance(mesh_or_group, DeviceMesh):
        if mesh_or_group.ndim != 1:
            raise MXValueError(
                f"device_mesh: expected a 1-D mesh (its experts dimension, e.g. mesh['ep']), got "
                f"{mesh_or_group.ndim} dimensions"
            )
        return mesh_or_group.get_group()
    if isinstance(mesh_or_group, dist.ProcessGroup):
        return mesh_or_group
    raise MXArgTypeError(
        f"device_mesh: expected a DeviceMesh, a ProcessGroup or None, got "
        f"{type(mesh_or_group).__name__}"
    )


def shard_experts(model: torch.nn.Module, device_mesh=None, *, combine: str = "exact") -> list[str]:
    """Shard every :class:`MXExperts` of ``model`` (or ``model`` itself) over
    ``device_mesh`` (a 1-D ``DeviceMesh``, a ``ProcessGroup``, or None: the
    default group), in place: each becomes an :class:`ExpertShard` holding
    its rank's contiguous range of experts (:func:`expert_range`), the other
    experts dropped.  Returns the names of the blocks sharded.

    The whole plan is checked first, on every rank alike, before any block
    changes and before any collective: MXValueError for torch.distributed
    not initialized, no ``MXExperts`` in ``model`` (``quantize_`` or
    ``from_pretrained`` makes them), a rank count that does not divide a
    block's experts, a block already sharded, an unknown ``combine``."""
    if combine not in COMBINES:
        raise MXValueError(f"combine: expected one of {', '.join(COMBINES)}, got {combine!r}")
    if not isinstance(model, torch.nn.Module):
        raise MXArgTypeError(f"model: expected a torch.nn.Module, got {type(model).__name__}")
    group = _group_of(device_mesh)
    rank, ranks = dist.get_rank(group), dist.get_world_size(group)
    blocks = [(n, m) for n, m in model.named_modules() if isinstance(m, MXExperts)]
    if not blocks:
        raise MXValueError(
            f"model: holds no MXExperts ({type(model).__name__}); convert its experts with "
            "quantize_ or load an MXFP4 checkpoint with from_pretrained first"
        )
    plans = []
    for name, block in blocks:
        if isinstance(block, ExpertShard):
            raise MXValueError(f"{name or 'model'}: already sharded ({block.extra_repr()})")
        plans.append(_plan(name or "model", block, rank, ranks))
    guard_exit()  # gloo's workers done before the interpreter finalizes (exit_guard)
    for (_, block), (first, count, total) in zip(blocks, plans, strict=True):
        _shard(block, group, first, count, total, combine)
    return [name for name, _ in blocks]


def _plan(name: str, block: MXExperts, rank: int, ranks: int) -> tuple[int, int, int]:
    """``(first, count, total)`` of this rank; a block loaded as its experts
    only (``mx_ep_loaded = (first, total)``, :mod:`.expert_load`) must hold
    this rank's range."""
    loaded = getattr(block, "mx_ep_loaded", None)
    total = block.num_experts if loaded is None else loaded[1]
    try:
        first, count = expert_range(total, rank, ranks)
    except MXValueError as e:
        raise MXValueError(f"{name}: {e}") from None
    if loaded is not None and (loaded[0], block.num_experts) != (first, count):
        raise MXValueError(
            f"{name}: loaded as experts {loaded[0]}..{loaded[0] + block.num_experts - 1} of "
            f"{total}, but rank {rank} of {ranks} holds {first}..{first + count - 1}"
        )
    return first, count, total


def _shard(block: MXExperts, group, first: int, count: int, total: int, combine: str) -> None:
    local = block if hasattr(block, "mx_ep_loaded") else block.select(first, count)
    block.gate_up, block.down = local.gate_up, local.down
    block.num_experts = local.num_experts
    block.__class__ = ExpertShard
    block.first, block.total_experts, block.combine = first, total, combine
    block.__dict__["group"] = group  # not pickled state: a process group is the process's


class ExpertParallel(ParallelStyle):
    """A ``ParallelStyle`` for ``parallelize_module``: the ``MXExperts`` it is
    applied to is sharded over the (1-D) mesh, in place, as by
    :func:`shard_experts`::

        parallelize_module(model, mesh, {"model.layers.*.mlp.experts": ExpertParallel()})

    The router and the rest stay as they are (replicated)."""

    def __init__(self, *, combine: str = "exact"):
        super().__init__()
        if combine not in COMBINES:
            raise MXValueError(f"combine: expected one of {', '.join(COMBINES)}, got {combine!r}")
        self.combine = combine

    def _apply(self, module: torch.nn.Module, device_mesh) -> torch.nn.Module:
        if not isinstance(module, MXExperts):
            raise MXArgTypeError(
                f"ExpertParallel: applies to MXExperts, got {type(module).__name__} (convert the "
                "experts with quantize_ or from_pretrained first)"
            )
        shard_experts(module, device_mesh, combine=self.combine)
        return module

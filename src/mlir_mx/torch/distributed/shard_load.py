"""A checkpoint loaded as this rank's shard: ``from_pretrained(path, device_mesh=, tp_plan=)``.

:func:`mlir_mx.torch.from_pretrained` with a ``device_mesh`` builds a
:class:`ShardedLoad` (imported then, so a process that never splits a model
never imports ``torch.distributed.tensor``).  For a compressed-tensors
``mxfp4-pack-quantized`` folder each layer the plan splits reads only this
rank's bytes from the safetensors files (``safe_open(...).get_slice``): a
colwise layer its rows of ``weight_packed`` / ``weight_scale``, a rowwise
layer its columns (``in / N`` at block boundaries: ``in / 2N`` bytes and
``in / 32N`` scales per row), and the pages of the file's map it touched are
dropped after each layer.  The plan is checked against the model's shapes
(built on the meta device) before any byte is read.  Then the layers, already
holding their shards, get the plan's forward hooks from torch's
``parallelize_module`` (:func:`.tensor_parallel.parallelize`), as do the plain
modules the plan names (``nn.Embedding``: torch shards it itself).

An ``nn.Embedding`` the plan splits (Llama's ``embedding_rowwise``) reads its
rows (or columns) the same way, and becomes a DTensor made from that shard
(``from_local``: no scatter from rank 0); so does a plain ``nn.Linear`` the
plan splits (gpt-oss's bf16 attention and head: its rows or columns read,
:func:`.expert_load.adopt_linear_shard`).  Stacked experts planned
:class:`~.experts.ExpertParallel` (``"auto"`` on gpt-oss: :mod:`.expert_load`)
read only this rank's experts.  Not read as a shard: the tensors the plan does
not split (norms, routers).  A GGUF file (``gguf_model.from_gguf(shards=)``)
reads its MXFP4 layers' shards and its experts from its map the same way
(whole 17-byte ggml blocks); its other tensors whole.
"""

from __future__ import annotations

import torch
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

from mlir_mx.errors import MXArgTypeError, MXValueError

from ..experts import MXExperts
from .expert_load import adopt_linear_shard, ep_auto_plan, expert_cuts, with_ep_styles
from .experts import ExpertParallel
from .plans import resolve_plan
from .tensor_parallel import check_plan, expand_plan, parallelize, shard_range

__all__ = ["ShardedLoad"]

_BLOCK = 32  # compressed-tensors MXFP4's block


class ShardedLoad:
    """This rank's part of a tensor-parallel load over ``device_mesh`` (a 1-D
    torch ``DeviceMesh``, this process one of its ranks) with ``tp_plan``
    (``"auto"``, the default: the model's own plan, :func:`.plans.auto_plan`;
    or a dict as :func:`.tensor_parallel.parallelize` takes)."""

    def __init__(self, device_mesh, tp_plan=None):
        if device_mesh is None:
            raise MXArgTypeError("tp_plan: given without device_mesh (the ranks to split over)")
        if not hasattr(device_mesh, "get_local_rank") or not hasattr(device_mesh, "ndim"):
            raise MXArgTypeError(f"device_mesh: expected a 1-D torch DeviceMesh, got {device_mesh!r}")
        if device_mesh.ndim != 1:
            raise MXValueError(f"device_mesh: expected a 1-D mesh, got {device_mesh.ndim} dimensions")
        self.mesh, self.tp_plan, self.plan = device_mesh, tp_plan or "auto", None
        self.cuts: dict = {}  # shards(): {layer name: (dim, start, stop), or a range of experts}

    def shards(self, meta_model) -> dict:
        """``{layer name: (dim, start, stop)}`` of the plain ``nn.Linear`` and
        ``nn.Embedding`` layers of ``meta_model`` the plan splits (the plan
        checked first)."""
        rank, world = self.mesh.get_local_rank(), self.mesh.size()
        plan = resolve_plan(meta_model, with_ep_styles(self.tp_plan))
        if self.tp_plan == "auto":  # a model with stacked experts: EP + attention TP
            plan = {**plan, **ep_auto_plan(meta_model)}
        full = expand_plan(meta_model, plan)
        check_plan(meta_model, world, full, block_size=_BLOCK)
        self.plan, out = full, expert_cuts(meta_model, full, rank, world)
        for name, style in full.items():
            m = meta_model.get_submodule(name)
            if type(m) is torch.nn.Embedding:  # rowwise: its rows; colwise: its columns
                if isinstance(style, (ColwiseParallel, RowwiseParallel)):
                    row = isinstance(style, RowwiseParallel)
                    n = m.num_embeddings if row else m.embedding_dim
                    out[name] = (0 if row else 1, *shard_range(n, rank, world))
            elif type(m) is torch.nn.Linear and isinstance(style, ColwiseParallel):
                out[name] = (0, *shard_range(m.out_features, rank, world))
            elif type(m) is torch.nn.Linear and isinstance(style, RowwiseParallel):
                out[name] = (1, *shard_range(m.in_features, rank, world))
        self.cuts = out
        return out

    def parallelize(self, model):
        """``model`` (loaded, its planned MX layers holding their shards) split
        over the mesh: the plan's hooks, the other planned modules sharded;
        the expert blocks and plain linears read as their shards adopted as
        such (:mod:`.expert_load`)."""
        plan = self.plan if self.plan is not None else resolve_plan(model, self.tp_plan)
        if self.tp_plan == "auto":  # stacked experts a checkpoint holds dense: replicated
            plan = {n: s for n, s in plan.items() if not isinstance(s, ExpertParallel)
                    or isinstance(model.get_submodule(n), MXExperts)}  # fmt: skip
        world = self.mesh.size()
        for name, cut in self.cuts.items():
            m = model.get_submodule(name)
            if isinstance(cut, range) and isinstance(m, MXExperts) and m.num_experts == len(cut):
                m.mx_ep_loaded = (cut.start, len(cut) * world)  # read as its experts only
            elif type(m) is torch.nn.Linear and getattr(m, "mx_tp_shard", None) is not None:
                adopt_linear_shard(m, plan[name], self.mesh)
        return parallelize(model, self.mesh, plan)

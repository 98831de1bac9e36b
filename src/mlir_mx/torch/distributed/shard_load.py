"""A checkpoint loaded as this rank's shard: ``from_pretrained(path, device_mesh=, tp_plan=)``.

For a compressed-tensors ``mxfp4-pack-quantized`` folder each layer the plan
splits reads only this rank's bytes from the safetensors files
(``safe_open(...).get_slice``, :func:`mlir_mx.torch.checkpoint.from_pretrained`'s
``shards=``): a colwise layer its rows of ``weight_packed`` / ``weight_scale``,
a rowwise layer its columns (``in / N`` at block boundaries: ``in / 2N`` bytes
and ``in / 32N`` scales per row), and the pages of the file's map it touched
are dropped after each layer.  The plan is checked against the model's
shapes (built on the meta device) before any byte is read.  Then the layers,
already holding their shards, get the plan's forward hooks from torch's
``parallelize_module`` (:func:`.tensor_parallel.parallelize`), as do the
plain modules the plan names (``nn.Embedding``: torch shards it itself).

What is not read as a shard: the tensors the plan does not split (norms, a
replicated head), a plain module torch shards (read whole, then
``distribute_tensor``), gpt-oss's experts (expert parallel's part), a GGUF
file (the model is loaded whole, then sliced: see ``docs/distributed.md``).
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

from mlir_mx.errors import MXArgTypeError

from ..checkpoint import from_pretrained as load_whole
from .plans import resolve_plan
from .tensor_parallel import check_plan, expand_plan, parallelize, shard_range

__all__ = ["from_pretrained"]

_BLOCK = 32  # compressed-tensors MXFP4's block


def from_pretrained(path, *, device_mesh=None, tp_plan=None, **kw):
    """:func:`mlir_mx.torch.checkpoint.from_pretrained` (``dtype``, ``threads``,
    ``activations`` as there), and with ``device_mesh`` (a 1-D torch
    ``DeviceMesh``, this process one of its ranks) the model tensor parallel
    over it: ``tp_plan`` ``"auto"`` (the default with a mesh: the model's own
    plan, :func:`.plans.auto_plan`) or a dict as :func:`.tensor_parallel.parallelize`
    takes.  The layers the plan splits are read as this rank's shard only
    (the module docstring).  A plan the mesh cannot run is an ``MXValueError``
    naming the layer, raised before any byte is read or collective started."""
    if device_mesh is None:
        if tp_plan is not None:
            raise MXArgTypeError("tp_plan: given without device_mesh (the ranks to split over)")
        return load_whole(path, **kw)
    if not hasattr(device_mesh, "get_local_rank"):
        raise MXArgTypeError(f"device_mesh: expected a 1-D torch DeviceMesh, got {device_mesh!r}")
    rank, world = device_mesh.get_local_rank(), device_mesh.size()
    plan_of = {}

    def shards(meta_model) -> dict:
        full = expand_plan(meta_model, resolve_plan(meta_model, tp_plan or "auto"))
        check_plan(meta_model, world, full, block_size=_BLOCK)
        plan_of["plan"] = full
        out = {}
        for name, style in full.items():
            m = meta_model.get_submodule(name)
            if type(m) is not torch.nn.Linear:
                continue
            if isinstance(style, ColwiseParallel):
                out[name] = (0, *shard_range(m.out_features, rank, world))
            elif isinstance(style, RowwiseParallel):
                out[name] = (1, *shard_range(m.in_features, rank, world))
        return out

    if Path(os.fspath(path)).suffix == ".gguf":  # read whole, then sliced by parallelize
        model = load_whole(path, **kw)
        return parallelize(model, device_mesh, resolve_plan(model, tp_plan or "auto"))
    model = load_whole(path, shards=shards, **kw)
    return parallelize(model, device_mesh, plan_of["plan"])

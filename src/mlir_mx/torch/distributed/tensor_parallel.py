"""Tensor parallel for ``MXLinear``: torch's ``ColwiseParallel`` / ``RowwiseParallel``
over MX weights, each rank holding its slice of the stored bytes.

torch's styles shard an ``nn.Linear``'s ``weight`` *parameter* into a DTensor
(``distribute_tensor``), and their ``_apply`` refuses every other module.  An
``MXLinear`` has no float ``weight``: it holds an ``mlir_mx.Linear`` over the
weight's stored bytes (packed FP4/FP6/FP8 codes and E8M0 scales, ``uint8``
buffers in the kernel's layout), which DTensor cannot carry (a DTensor's local
shard is a torch tensor whose ops DTensor dispatches; our kernel is not a
torch op with a sharding rule, and a packed FP4 byte holds two elements).

The smallest extension that runs it: :class:`MXColwiseParallel` and
:class:`MXRowwiseParallel`, subclasses of torch's two styles that keep their
arguments (``input_layouts``, ``output_layouts``, ``use_local_output``) and
their meaning, and change one thing, ``_apply`` on an ``MXLinear``:

* the weight is sliced **locally** on each rank, without a collective: rows
  ``rank * out/N : (rank+1) * out/N`` (colwise) or the columns
  ``rank * in/N : (rank+1) * in/N`` at block boundaries (rowwise), stored bytes
  and scales copied as they are (:func:`slice_mx`, never dequantized); the
  layer then holds a plain ``mlir_mx.Linear`` over its slice;
* the layer's input and output go through DTensor at the boundary only
  (forward hooks, as ``distribute_module``'s): the input is annotated with
  ``input_layouts`` and redistributed to what the layer needs, the output is
  annotated as what the layer made (``Shard(-1)`` colwise, ``Partial()``
  rowwise) and redistributed to ``output_layouts``: torch's collectives
  (``Partial -> Replicate`` is torch's all-reduce, ``Shard -> Replicate`` its
  all-gather).  A transition that is the identity (``Replicate`` in, the local
  output out) makes no DTensor at all, and the two of a decode step's hot
  path, a local output made ``Replicate`` from ``Partial`` (rowwise) or
  ``Shard(-1)`` (a gathered head), make no DTensor either: one
  ``dist.all_to_all_single`` on the mesh's process group hands every rank
  every rank's output, summed or concatenated in rank order (one message
  round where gloo's ring all-reduce takes two; ``"torch"``:
  ``dist.all_reduce`` / ``dist.all_gather``; :mod:`.decode_collectives`);
* a rowwise layer's bias is added once, after the all-reduce;
* an ``nn.Embedding`` read as its rows (``from_pretrained(device_mesh=)``)
  and planned rowwise with replicated input and output (Llama's
  ``embedding_rowwise``) is looked up without a DTensor: its ids shifted to
  its rows, the others' rows zeroed, summed by the same exchange
  (:func:`_row_lookup`).

Every other module (a plain ``nn.Linear``, ``nn.Embedding``) gets torch's own
``_apply``.  :func:`parallelize` checks the whole plan first (every layer's
split a multiple of the block and of the rank count, fused parts all colwise,
attention heads whole per rank) and raises :class:`MXValueError` naming the
layer before any collective starts, then calls torch's ``parallelize_module``.
"""

from __future__ import annotations

from fnmatch import fnmatchcase
from functools import partial

import torch
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_module
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    ParallelStyle,
    RowwiseParallel,
    parallelize_module,
)

from mlir_mx.errors import MXArgTypeError, MXValueError
from mlir_mx.numerics import MXArray

from ..module import MXLinear
from . import decode_collectives as dc
from .exit_guard import guard_exit

__all__ = [
    "MXColwiseParallel",
    "MXRowwiseParallel",
    "check_plan",
    "expand_plan",
    "held_weight_bytes",
    "mx_style",
    "parallelize",
    "shard_range",
    "slice_mx",
]


def shard_range(n: int, rank: int, world: int) -> tuple[int, int]:
    """``(start, stop)`` of rank ``rank``'s equal share of ``n`` (``world`` divides ``n``)."""
    step = n // world
    return rank * step, (rank + 1) * step


def slice_mx(w: MXArray, dim: int, start: int, stop: int) -> MXArray:
    """Rows (``dim`` 0) or columns (``dim`` 1, at block boundaries) ``start:stop``
    of a 2-D ``w`` blocked along axis 1, as a new compact MXArray: the stored
    code bytes and scale bytes (E8M0, or NVFP4's E4M3 with its global scale)
    of that range, copied, never dequantized
    (packed FP4: 2 codes a byte; FP6: 4 codes in 3 bytes; a block is a whole
    number of bytes in every format)."""
    codes, scales = w.packed_codes(), w.scales
    if dim == 0:
        c, s = codes[start:stop], scales[start:stop]
    else:
        bs, k = w.block_size, w.shape[1]
        if start % bs or stop % bs:
            raise MXValueError(f"columns {start}:{stop}: not at block boundaries (block {bs})")
        per_row = codes.shape[1]
        if (start * per_row) % k or (stop * per_row) % k:
            raise MXValueError(f"columns {start}:{stop}: not a whole number of stored bytes")
        c = codes[:, start * per_row // k : stop * per_row // k]
        s = scales[:, start // bs : stop // bs]
    return MXArray.from_packed(
        c, s, w.format_name, w.block_size, axis=1, copy=True, global_scale=w.global_scale
    )  # NVFP4: its E4M3 scales and its one global scale, whole on every rank


def _wait(t: torch.Tensor) -> torch.Tensor:
    """A plain tensor (an async collective's result waited for): the MX layer's
    eager path takes only ``type(t) is torch.Tensor``."""
    if type(t) is not torch.Tensor and hasattr(t, "wait"):
        t = t.wait()
    return t


def _enter(given, wanted, mesh, module, args):
    x = args[0]
    if isinstance(x, DTensor):
        x = _wait(x.redistribute(mesh, wanted).to_local())
    elif given != wanted:
        d = DTensor.from_local(x, mesh, given, run_check=False)
        x = _wait(d.redistribute(mesh, wanted).to_local())
    return (x, *args[1:])


def _leave_hook(made, wanted, local, mesh, bias):
    """The forward hook that takes a layer's local output ``made`` to ``wanted``:
    which path it takes decided here, once (a decode step calls it for every
    layer; comparing placements costs microseconds a call)."""
    if local and wanted == (Replicate(),) and made in ((Partial(),), (Shard(-1),)):
        path = "exchange"
    else:
        path = "dtensor" if made != wanted or not local else "local"
    return partial(_leave, path, made, wanted, local, mesh, bias)


def _leave(path, made, wanted, local, mesh, bias, module, args, y):
    if path == "exchange":
        y = dc.replicated(y, made[0], mesh)
    elif path == "dtensor":
        d = DTensor.from_local(y, mesh, made, run_check=False)
        if made != wanted:
            d = d.redistribute(mesh, wanted)
        y = _wait(d.to_local()) if local else d
    if bias is not None:
        y = y + bias.to(y.dtype)
    return y


def _shard_layer(module: MXLinear, dim: int, mesh) -> None:
    """Slice ``module``'s weight (and bias, colwise) for this rank, once; noted
    as ``module.mx_tp_shard = (dim, start, stop)`` (its own rows or columns)."""
    rank, world = mesh.get_local_rank(), mesh.size()
    if getattr(module, "mx_tp_shard", None) is not None:
        return  # loaded as its shard (shard_load.from_pretrained)
    fused = module.fused
    if fused is not None:  # every part's own rows split, once for the group
        if getattr(fused, "mx_tp_sizes", None) is None:
            fused.mx_tp_sizes = list(fused.sizes)  # before: the parts' full sizes
            starts = [shard_range(n, rank, world)[0] for n in fused.sizes]
            fused.narrow_parts(starts, [n // world for n in fused.sizes])
        a, b = shard_range(fused.mx_tp_sizes[module.fused_part], rank, world)
        if module.bias is not None:
            module.bias = torch.nn.Parameter(module.bias.detach()[a:b].clone(), requires_grad=False)
    else:
        w = module.weight()
        a, b = shard_range(w.shape[dim], rank, world)
        bias = module.bias
        if bias is not None and dim == 0:
            bias = bias.detach()[a:b]
        module.replace_weight(slice_mx(w, dim, a, b), None if dim == 1 else bias)
        if dim == 1 and bias is not None:
            module.mx_tp_bias = bias.detach().clone()
    module.mx_tp_shard = (dim, a, b)


class MXColwiseParallel(ColwiseParallel):
    """torch's ``ColwiseParallel`` (same arguments), which also shards an
    ``MXLinear``: its weight's rows, this rank's ``out / N`` (each part's own
    rows for a fused layer)."""

    def _apply(self, module: torch.nn.Module, device_mesh) -> torch.nn.Module:
        if _loaded_shard(module):  # an nn.Embedding read as its columns
            return _presharded(self, module, device_mesh, Shard(1))
        if not isinstance(module, MXLinear):
            return super()._apply(module, device_mesh)
        _shard_layer(module, 0, device_mesh)
        module.register_forward_pre_hook(
            partial(_enter, self.input_layouts, self.desired_input_layouts, device_mesh)
        )
        module.register_forward_hook(_leave_hook(
            (Shard(-1),), self.output_layouts, self.use_local_output, device_mesh, None
        ))  # fmt: skip
        return module


class MXRowwiseParallel(RowwiseParallel):
    """torch's ``RowwiseParallel`` (same arguments), which also shards an
    ``MXLinear``: its weight's columns, this rank's ``in / N`` at block
    boundaries; the partial products all-reduced by torch (``Partial`` ->
    ``output_layouts``), the bias added once after."""

    def _apply(self, module: torch.nn.Module, device_mesh) -> torch.nn.Module:
        if _loaded_shard(module):  # an nn.Embedding read as its rows
            self.desired_input_layouts = (Replicate(),)
            local = (Replicate(),) == self.input_layouts == self.output_layouts
            if local and self.use_local_output:
                return _row_lookup(module, device_mesh)
            return _presharded(self, module, device_mesh, Shard(0))
        if not isinstance(module, MXLinear):
            return super()._apply(module, device_mesh)
        _shard_layer(module, 1, device_mesh)
        self.desired_input_layouts = (Shard(-1),)
        module.register_forward_pre_hook(
            partial(_enter, self.input_layouts, self.desired_input_layouts, device_mesh)
        )
        bias = getattr(module, "mx_tp_bias", None)
        module.register_forward_hook(_leave_hook(
            (Partial(),), self.output_layouts, self.use_local_output, device_mesh, bias
        ))  # fmt: skip
        return module


def _loaded_shard(module) -> bool:
    return type(module) is torch.nn.Embedding and getattr(module, "mx_tp_shard", None) is not None


def _row_lookup(module: torch.nn.Embedding, mesh) -> torch.nn.Module:
    """An ``nn.Embedding`` holding its rows ``start:stop`` (read as its shard)
    looked up as torch's ``RowwiseParallel`` does (ids outside the rows read
    as zeros, the partial rows summed over the ranks: exact, each id's row is
    one rank's), without a DTensor: the ids shifted by ``start`` in a forward
    pre-hook, the other ranks' rows zeroed and the sum made by the decode
    collective (:func:`_replicated`) in a forward hook."""
    _dim, start, stop = module.mx_tp_shard
    outside = []

    def shift(mod, args):
        ids = args[0]
        out = (ids < start) | (ids >= stop)
        outside[:] = [out.unsqueeze(-1)]
        return ((ids - start).masked_fill(out, 0), *args[1:])

    def gather(mod, args, y):
        return dc.replicated(y.masked_fill(outside.pop(), 0), Partial(), mesh)

    module.register_forward_pre_hook(shift)
    module.register_forward_hook(gather)
    return module


def _presharded(style, module, mesh, placement):
    """torch's style on an ``nn.Embedding`` whose weight already is this rank's
    shard (read as such, :mod:`.shard_load`): the weight made a DTensor from
    it (``from_local``, no scatter from rank 0), the style's own input and
    output functions around it."""
    w = DTensor.from_local(module.weight.detach(), mesh, [placement], run_check=False)
    module.register_parameter("weight", torch.nn.Parameter(w, requires_grad=False))
    return distribute_module(
        module, mesh, None,
        partial(style._prepare_input_fn, style.input_layouts, style.desired_input_layouts),
        partial(style._prepare_output_fn, style.output_layouts, style.use_local_output),
    )  # fmt: skip


def mx_style(style: ParallelStyle | str) -> ParallelStyle:
    """The MX style for ``style``: torch's ``ColwiseParallel`` / ``RowwiseParallel``
    (their arguments kept) or a transformers plan string (``"colwise"``,
    ``"rowwise"``, ``"colwise_rep"``: colwise with the output gathered,
    ``"rowwise_rep"``); another ``ParallelStyle`` as it is."""
    if isinstance(style, str):
        styles = {
            "colwise": MXColwiseParallel,
            "rowwise": MXRowwiseParallel,
            "colwise_rep": partial(MXColwiseParallel, output_layouts=Replicate()),
            "rowwise_rep": partial(MXRowwiseParallel, output_layouts=Replicate()),
        }
        if style not in styles:
            raise MXValueError(f"plan: style {style!r} is not one of {sorted(styles)}")
        return styles[style]()
    if isinstance(style, (MXColwiseParallel, MXRowwiseParallel)):
        return style
    for torch_cls, ours in ((ColwiseParallel, MXColwiseParallel), (RowwiseParallel, MXRowwiseParallel)):
        if type(style) is torch_cls:
            new = ours(input_layouts=style.input_layouts[0], output_layouts=style.output_layouts[0],
                       use_local_output=style.use_local_output)  # fmt: skip
            new.src_data_rank = style.src_data_rank
            return new
    if isinstance(style, ParallelStyle):
        return style
    raise MXArgTypeError(f"plan: expected a ParallelStyle or a plan string, got {style!r}")


def expand_plan(model: torch.nn.Module, plan: dict) -> dict[str, ParallelStyle]:
    """``{module name: MX style}``: each key of ``plan`` (a module name, ``*`` matching
    one name component, as ``parallelize_module``'s) matched against ``model``'s
    modules; a key that matches none is an error."""
    if not isinstance(plan, dict):
        raise MXArgTypeError(f"plan: expected a dict of module name -> style, got {type(plan).__name__}")
    names = [n for n, _ in model.named_modules() if n]
    out = {}
    for key, style in plan.items():
        parts = key.split(".")
        hits = [n for n in names if len(n.split(".")) == len(parts)
                and all(fnmatchcase(a, b) for a, b in zip(n.split("."), parts, strict=True))]  # fmt: skip
        if not hits:
            raise MXValueError(f"plan: {key!r} names no module of the model")
        for n in hits:
            out[n] = mx_style(style)
    return out


def check_plan(
    model: torch.nn.Module, world: int, plan: dict[str, ParallelStyle], *, block_size=None
) -> None:  # fmt: skip
    """Refuse an expanded ``plan`` that ``world`` ranks cannot run: an
    :class:`MXValueError` naming the first layer whose split is not whole (a
    rowwise ``in / world`` not a multiple of the block, a colwise ``out`` or a
    fused part not divisible by ``world``, a fused group not wholly colwise,
    an attention's heads not divisible).  No collective runs here.
    ``block_size``: also check the plain ``nn.Linear`` layers of ``plan`` as MX
    weights of that block (a model about to be loaded as its shards)."""
    if world < 1:
        raise MXValueError(f"device_mesh: expected 1 or more ranks, got {world}")
    for name, style in plan.items():
        module = model.get_submodule(name)
        col = isinstance(style, ColwiseParallel)
        row = isinstance(style, RowwiseParallel)
        mx = isinstance(module, MXLinear)
        if type(module) is torch.nn.Embedding and (col or row):
            n = module.num_embeddings if row else module.embedding_dim
            if n % world:
                raise MXValueError(f"{name}: {n} embedding {'rows' if row else 'columns'} "
                                   f"do not split over {world} ranks")  # fmt: skip
        if not (mx or (block_size and type(module) is torch.nn.Linear)) or not (col or row):
            continue
        if getattr(module, "mx_tp_shard", None) is not None:
            continue  # loaded as its shard
        fused = module.fused if mx else None
        if row:
            if fused is not None:
                raise MXValueError(f"{name}: a part of a fused weight (fused along out) cannot "
                                   "be split rowwise; fuse=False, or plan it colwise")  # fmt: skip
            k, bs = module.in_features, module.block_size if mx else block_size
            if k % (world * bs):
                raise MXValueError(
                    f"{name}: rowwise over {world} ranks splits in_features {k} into "
                    f"{k / world:g}, not a multiple of the MX block {bs}"
                )
        else:
            sizes = fused.sizes if fused is not None else [module.out_features]
            bad = [s for s in sizes if s % world]
            if bad:
                raise MXValueError(
                    f"{name}: colwise over {world} ranks: out_features {bad[0]} is not "
                    f"divisible by {world}"
                )
        if fused is not None:
            _check_fused_group(model, name, fused, plan)
        _check_heads(model, name, module, world)


def _check_fused_group(model, name: str, fused, plan: dict) -> None:
    owner = name.rpartition(".")[0]
    parent = model.get_submodule(owner) if owner else model
    for attr, child in parent.named_children():
        if isinstance(child, MXLinear) and child.fused is fused:
            full = f"{owner}.{attr}" if owner else attr
            if not isinstance(plan.get(full), ColwiseParallel):
                raise MXValueError(
                    f"{full}: fused with {name}, which is planned colwise; every part of a "
                    "fused weight must be planned colwise"
                )


def _check_heads(model, name: str, module: MXLinear, world: int) -> None:
    """q/k/v of an attention with ``head_dim``: whole heads per rank."""
    owner, _, attr = name.rpartition(".")
    parent = model.get_submodule(owner) if owner else model
    head_dim = getattr(parent, "head_dim", None)
    if attr not in ("q_proj", "k_proj", "v_proj") or not isinstance(head_dim, int):
        return
    heads = module.out_features // head_dim
    if heads % world:
        raise MXValueError(
            f"{name}: {heads} attention heads do not split over {world} ranks (head_dim {head_dim})"
        )


def parallelize(model: torch.nn.Module, device_mesh, plan: dict) -> torch.nn.Module:
    """``parallelize_module(model, device_mesh, plan)`` with the MX styles:
    ``plan`` as torch's (module names, ``*`` wildcards; torch's
    ``ColwiseParallel`` / ``RowwiseParallel`` or transformers' plan strings,
    :func:`mx_style`).  The plan is checked for ``device_mesh.size()`` ranks
    first (:func:`check_plan`): a bad plan raises before any collective."""
    if device_mesh is None or not hasattr(device_mesh, "get_local_rank"):
        raise MXArgTypeError(f"device_mesh: expected a 1-D torch DeviceMesh, got {device_mesh!r}")
    if device_mesh.ndim != 1:
        raise MXValueError(f"device_mesh: expected a 1-D mesh, got {device_mesh.ndim} dimensions")
    full = expand_plan(model, plan)
    check_plan(model, device_mesh.size(), full)
    guard_exit()  # gloo's workers done before the interpreter finalizes (exit_guard)
    parallelize_module(model, device_mesh, full)
    model.mx_tp_mesh = device_mesh
    return model


def held_weight_bytes(model: torch.nn.Module) -> int:
    """Bytes of MX weights this process holds (each fused weight once): the
    figure tensor parallel divides."""
    seen, total = set(), 0
    for m in model.modules():
        if isinstance(m, MXLinear):
            key = id(m.fused) if m.fused is not None else id(m)
            if key not in seen:
                seen.add(key)
                total += m.linear.nbytes
    return total

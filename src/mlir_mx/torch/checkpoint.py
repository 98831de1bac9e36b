"""Load and save MX checkpoints as they are: ``from_pretrained`` / ``save_pretrained``.

Two layouts of MXFP4 weights in safetensors files (``docs/torch.md``, "MoE and
checkpoints"), both the stored form of an FP4 :class:`~mlir_mx.numerics.MXArray`
``(out, in)`` blocked along ``in`` (two E2M1 codes a byte, element ``2j`` in the
low nibble; E8M0 scale bytes), so no byte is converted:

* **gpt-oss** (``quantization_config.quant_method == "mxfp4"``): each layer's
  experts as ``mlp.experts.{gate_up,down}_proj_blocks`` uint8 ``(E, out, in/32,
  16)`` and ``..._scales`` uint8 ``(E, out, in/32)``, loaded into
  :class:`MXExperts`; everything else (attention, router, norms, embeddings,
  ``lm_head``, the expert biases) as stored (bf16), or in ``dtype``.
* **compressed-tensors** ``mxfp4-pack-quantized`` (``quant_method ==
  "compressed-tensors"``): each quantized ``nn.Linear`` as ``weight_packed``
  uint8 ``(out, in/2)`` and ``weight_scale`` uint8 ``(out, in/32)``, loaded into
  :class:`MXLinear`; with the other block-scaled families (compressed-tensors
  NVFP4, ModelOpt NVFP4, Quark OCP MX, MLX) through one registry of per-linear
  layouts (:mod:`.checkpoint_layouts`, ``docs/torch.md``, "Block-scaled
  checkpoint families").

The files are read with the ``safetensors`` library: every tensor's dtype and
shape is checked against the model the config describes (file headers only)
before any tensor is read, and a file ``safetensors`` refuses (truncated, a bad
header) or a tensor that is missing, unexpected or of another dtype or shape is
an :class:`~mlir_mx.errors.MXValueError` naming it, as is a folder whose files
disagree or a malformed index or config field (:mod:`.checkpoint_files`, which
also holds the save's commit).  Expert weights are read one
expert at a time (``get_slice``), taken over by an ``MXArray`` without a copy,
and laid out once as its ``mlir_mx.Linear``'s stored form; the bytes read are
freed a group of experts at a time (:mod:`.checkpoint_experts`; a shard's
load drops the file map's pages with them).  :func:`save_pretrained` writes
the same layout back, the same tensors in the same files with the same
metadata, so a loaded checkpoint saved again is byte-identical.
"""

from __future__ import annotations

import json
from contextlib import ExitStack
from functools import partial
from pathlib import Path

import torch

from mlir_mx.errors import MXArgTypeError, MXValueError
from mlir_mx.files import path_argument
from mlir_mx.numerics import MXArray

from .checkpoint_config import COMPRESSED, GPT_OSS, saved_config
from .checkpoint_experts import experts_in_groups, page_release
from .checkpoint_files import (
    CheckpointFiles,
    check_config,
    not_a_folder,
    safetensors_module,
    write_checkpoint,
)
from .checkpoint_layouts import MLX, LinearLayout, Scheme, scheme_of
from .checkpoint_linears import layout_embedding, plan_embedding, plan_linear
from .experts import MXExperts, experts_gate, is_stacked_experts
from .gguf_model import from_gguf, linear_layer
from .module import MXLinear
from .thread_policy import install as install_decode_policy

__all__ = [
    "COMPRESSED", "GPT_OSS", "from_pretrained", "linear_shape", "mx_weights", "save_pretrained",
]  # fmt: skip

_FP4, _BLOCK = "f4E2M1FN", 32
_FLOATS = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32}
#: The dtypes ``from_pretrained(dtype=)`` takes: those the MX layers take
#: (``MXLinear`` / ``MXExperts`` refuse float64 inputs).
_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def read_config(folder: Path) -> tuple[dict, str | Scheme]:
    """``(config.json as a dict, the layout: GPT_OSS, or the Scheme of a family
    of linears, :mod:`.checkpoint_layouts`)``."""
    path = folder / "config.json"
    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise MXValueError(f"path: cannot read {path} ({e})") from None
    check_config(path, config)  # each field read below of the right type
    q = config.get("quantization_config") or {}
    method = q.get("quant_method")
    if method == GPT_OSS:
        return config, GPT_OSS
    scheme = scheme_of(folder, config)
    if scheme is not None:
        return config, scheme
    raise MXValueError(
        f"{path}: quantization_config.quant_method is {method!r}; expected 'mxfp4' (gpt-oss), "
        "'compressed-tensors' (mxfp4- / nvfp4-pack-quantized), 'quark' or 'modelopt', or MLX's "
        "'quantization' (docs/torch.md)"
    )


def model_config(config: dict, layout) -> dict:
    """The config transformers builds the model from: MLX's quantization fields
    left out (they are MLX's, not a transformers quantizer's)."""
    if getattr(layout, "name", None) != MLX:
        return config
    return {k: v for k, v in config.items() if k not in ("quantization", "quantization_config")}


def _meta_model(config: dict, path: Path):
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    if config["model_type"] not in CONFIG_MAPPING:
        raise MXValueError(
            f"{path}: model_type {config['model_type']!r} is not a transformers model type"
        )
    try:
        cfg = transformers.AutoConfig.for_model(**config)
        with torch.device("meta"):
            model = transformers.AutoModelForCausalLM.from_config(cfg)
    except Exception as e:  # noqa: BLE001 - the config's fields only: name the file
        raise MXValueError(
            f"{path}: transformers builds no causal LM from it ({type(e).__name__}: {e})"
        ) from None
    return model.eval()


def from_pretrained(
    path, *, dtype=None, threads: int | None = None, activations=None, device_mesh=None,
    tp_plan=None,
):  # fmt: skip
    """A ``transformers`` causal LM from the checkpoint folder ``path`` (``config.json``
    and safetensors files, with ``model.safetensors.index.json`` when sharded),
    its MX weights as stored: gpt-oss's experts in :class:`MXExperts`, the
    linears of a compressed-tensors, ModelOpt, Quark or MLX checkpoint in
    :class:`MXLinear` (the module docstring); or from a GGUF file ``path``
    ending in ``.gguf`` (:mod:`.gguf_model`).
    ``dtype``: the other tensors' dtype (None: as stored).
    ``threads`` / ``activations``: every MX layer's, as for :class:`MXLinear`
    (``activations`` None: the checkpoint's own, where Quark names MX ones).
    ``device_mesh`` (a 1-D torch ``DeviceMesh``) / ``tp_plan`` (``"auto"``, the
    default, or a dict): tensor parallel over the mesh, each layer the plan
    splits read as this rank's rows or block-aligned columns only
    (``get_slice``; :mod:`mlir_mx.torch.distributed.shard_load`).

    Raises:
        MXValueError: a config that is not one of these layouts, a scheme or
            group size they do not run, or a
            malformed field of it or of the index (the file and key named); a
            file that does not read; files that disagree (named); a tensor
            missing, unexpected, or of another dtype or shape than the config
            gives (named); ``dtype`` not bf16, f16 or f32.
        MXArgTypeError: ``dtype`` not a ``torch.dtype``.
    """
    folder, tp, kw = path_argument(path), None, dict(threads=threads, activations=activations)
    if device_mesh is not None or tp_plan is not None:  # torch.distributed: imported now
        from .distributed.shard_load import ShardedLoad

        tp = ShardedLoad(device_mesh, tp_plan)
    if folder.suffix == ".gguf":  # a llama.cpp model file (MXFP4 layers read as shards)
        model = from_gguf(path, dtype=dtype, shards=tp and tp.shards, **kw)
        return model if tp is None else tp.parallelize(model)
    if not folder.is_dir():
        raise not_a_folder(path)
    if dtype is not None and not isinstance(dtype, torch.dtype):
        raise MXArgTypeError(f"dtype: expected a torch.dtype or None, got {dtype!r}")
    if dtype is not None and dtype not in _DTYPES:
        raise MXValueError(
            f"dtype: expected one of {', '.join(map(str, _DTYPES))} or None, got {dtype}"
        )
    config, layout = read_config(folder)
    model = _meta_model(model_config(config, layout), folder / "config.json")
    with ExitStack() as stack:
        files = CheckpointFiles(folder, stack)
        plan = _plan(model, layout, files)  # every header checked before a byte is read
        plan["shards"] = {} if tp is None else tp.shards(model)
        _fill(model, plan, files, dtype, kw)
        # The MX bytes now live in the layers' own arrays: their pages of the
        # memory map would count in the RSS until the map is closed.
        files.release()
        model.mx_source = {
            "layout": getattr(layout, "name", layout),
            "files": dict(files.where),
            "metadata": files.metadata,
            "sharded": files.sharded,
        }
    install_decode_policy(model)  # decode steps: torch on 1 thread (thread_policy)
    return model if tp is None else tp.parallelize(model)


def mx_weights(path) -> dict[str, MXArray]:
    """Each quantized linear's :class:`MXArray` as :func:`from_pretrained` reads
    it (the same checks, the same bytes: copied out of the files, nothing
    decoded), without building the layers: to inspect a checkpoint of a
    compressed-tensors, ModelOpt, Quark or MLX family (not gpt-oss's experts)."""
    folder = path_argument(path)
    if folder.suffix == ".gguf" or not folder.is_dir():
        raise not_a_folder(path)
    config, layout = read_config(folder)
    model = _meta_model(model_config(config, layout), folder / "config.json")
    with ExitStack() as stack:
        files = CheckpointFiles(folder, stack)
        plan = _plan(model, layout, files)
        return {
            name: lay.weight(name, lambda key: files.tensor(key).clone())
            for name, lay in plan["mx"].items() if isinstance(lay, LinearLayout)
        }  # fmt: skip


def _plan(model, layout: str, files: CheckpointFiles) -> dict:
    """``{"mx": {module name: kind}, "plain": {tensor name: dtype}}``, every
    tensor of the file checked against the model."""
    mx, plain, seen, dense = {}, {}, set(), {}  # dense: a weight's name -> its MX form's
    sd = model.state_dict()
    for name, module in model.named_modules():
        if layout == GPT_OSS and is_stacked_experts(module):
            for proj in ("gate_up_proj", "down_proj"):
                e, out, k = linear_shape(module, proj)
                key = f"{name}.{proj}"
                _check_k(key, k)
                files.check(key + "_blocks", ("U8",), (e, out, k // _BLOCK, _BLOCK // 2))
                files.check(key + "_scales", ("U8",), (e, out, k // _BLOCK))
                seen |= {key + "_blocks", key + "_scales"}
                dense[key] = f"{key}_blocks / _scales"
                if f"{key}_bias" in sd:
                    files.check(f"{key}_bias", tuple(_FLOATS), (e, out))
                    seen.add(f"{key}_bias")
            mx[name] = "experts"
        elif isinstance(layout, Scheme) and type(module) is torch.nn.Linear:
            lay = plan_linear(layout, name, module, files, seen, dense)
            if lay is not None:
                mx[name] = lay
        elif isinstance(layout, Scheme) and plan_embedding(layout, name, module, files, seen):
            mx[name] = ("embedding", layout.embeddings)
    for key, t in sd.items():
        if key in seen or key in dense:
            continue
        if key not in files.where and _tied(model, key):
            continue
        plain[key] = files.check(key, tuple(_FLOATS), tuple(t.shape))
        seen.add(key)
    extra = sorted(k for k in files.where if k not in seen)
    both = [k for k in extra if k in dense]
    if both:  # the docs' "unexpected tensor", said precisely
        raise MXValueError(
            f"{both[0]}: stored dense in {files.where[both[0]]} beside its MX form "
            f"{dense[both[0]]}; a checkpoint holds one form of each weight"
        )
    if extra:
        more = f" and {len(extra) - 3} more" if len(extra) > 3 else ""
        raise MXValueError(f"{', '.join(extra[:3])}{more}: not a tensor of this model ({getattr(layout, 'name', layout)} layout)")
    return {"mx": mx, "plain": plain}


def linear_shape(module, proj: str) -> tuple[int, int, int]:
    """``(E, out, in)`` of a stacked-experts projection in ``nn.Linear``'s layout."""
    e, a, b = getattr(module, proj).shape
    return (e, b, a) if getattr(module, "is_transposed", False) else (e, a, b)


def _check_k(key: str, k: int) -> None:
    if k % _BLOCK:
        raise MXValueError(f"{key}: in_features {k} is not a multiple of the MX block size {_BLOCK}")


def _tied(model, key: str) -> bool:
    tied = getattr(model, "_tied_weights_keys", None) or {}
    return bool(getattr(model.config, "tie_word_embeddings", False)) and key in tied


def _fill(model, plan: dict, files: CheckpointFiles, dtype, kw: dict) -> None:
    for key, file_dtype in plan["plain"].items():
        owner, _, attr = key.rpartition(".")
        module = model.get_submodule(owner)
        cut = plan["shards"].get(owner) if attr == "weight" else None  # an nn.Embedding's
        if cut is not None:
            module.mx_tp_shard = cut
        t = files.tensor(key, None if cut is None else _rows_or_cols(cut))
        t = t.to(dtype or _FLOATS[file_dtype])
        if attr in module._parameters:
            # requires_grad as transformers loads it: a bf16 F.linear under
            # inference_mode with a weight that does not require grad took
            # another path in torch 2.13 (a copy of the transposed weight): 6.3
            # s against 0.2 s for gpt-oss's lm_head on one token.
            module._parameters[attr] = torch.nn.Parameter(t)
        else:
            module._buffers[attr] = t
    if plan["shards"]:  # a shard: the pages of the map those reads touched
        files.release(whole=True)
    read = files.tensor if dtype is None else (lambda key, i=None: files.tensor(key, i).to(dtype))
    drop = partial(files.release, whole=True) if plan["shards"] else partial(page_release, files)
    for name, kind in plan["mx"].items():
        owner, _, attr = name.rpartition(".")
        parent = model.get_submodule(owner) if owner else model
        old = getattr(parent, attr)
        if kind == "experts":
            new = _experts(old, name, files, read, kw, plan["shards"].get(name))
        elif isinstance(kind, tuple):  # ("embedding", its layout)
            new = layout_embedding(old, name, kind[1], files, dtype)
        else:
            new = _linear(old, name, kind, files, read, kw, plan["shards"].get(name))
        setattr(parent, attr, new)
        if plan["shards"] or kind != "experts":  # (a whole load's experts: per group)
            drop()  # its bytes copied: their pages of the map dropped now (each page once)
    _tie(model, plan)
    _rebuild_meta_buffers(model)


def _tie(model, plan: dict) -> None:
    """Tie the embeddings as the config says; but a tied weight the file holds
    in MX (a compressed-tensors ``lm_head`` quantized: ``weight_packed``)
    wins: that layer stays an ``MXLinear``, the embeddings as stored, and the
    model's config says ``tie_word_embeddings=False`` (so a later
    ``tie_weights`` or save keeps them apart)."""
    tied = _tied_keys(model)
    if any(key.rpartition(".")[0] in plan["mx"] for key in tied):
        model.config.tie_word_embeddings = False
        for key in tied:
            getattr(model, "all_tied_weights_keys", {}).pop(key, None)
    elif tied:
        model.tie_weights()


def _mx(codes: torch.Tensor, scales: torch.Tensor, out: int) -> MXArray:
    """The FP4 MXArray whose stored form is these bytes (taken over, no copy)."""
    return MXArray.from_packed(
        codes.reshape(out, -1).numpy(), scales.numpy(), _FP4, _BLOCK, axis=1, copy=False
    )


def _experts(old, name: str, files: CheckpointFiles, read, kw: dict, mine=None) -> MXExperts:
    """``mine``: the range of experts to read (expert parallel's shard), else
    all; read a few at a time (:func:`.checkpoint_experts.experts_in_groups`)."""
    e = linear_shape(old, "gate_up_proj")[0]
    ids, rows = (range(e), None) if mine is None else (mine, slice(mine.start, mine.stop))

    def one(i: int) -> tuple[MXArray, MXArray]:
        return tuple(_mx(files.copied(f"{name}.{p}_blocks", i), files.copied(f"{name}.{p}_scales", i),
                         linear_shape(old, p)[1]) for p in ("gate_up_proj", "down_proj"))  # fmt: skip

    gu_b, dn_b = (
        read(f"{name}.{p}_bias", rows) if f"{name}.{p}_bias" in files.where else None
        for p in ("gate_up_proj", "down_proj")
    )
    drop = partial(page_release, files) if mine is None else partial(files.release, whole=True)
    return experts_in_groups(one, ids, gu_b, dn_b, gate=experts_gate(old), kw=kw, after_group=drop)


def _linear(old, name: str, lay, files: CheckpointFiles, read, kw: dict, cut=None) -> MXLinear:
    w = lay.weight(name, partial(_read_cut, files, lay, cut, old.in_features))
    bias = read(f"{name}.bias") if old.bias is not None else None
    if lay.activations is not None and kw.get("activations") is None:
        kw = {**kw, "activations": lay.activations}  # the checkpoint's own scheme (Quark)
    return linear_layer(w, bias, cut, kw)


def _rows_or_cols(cut) -> tuple | slice:
    """The ``get_slice`` index of rows (``dim`` 0) or columns ``a:b``."""
    dim, a, b = cut
    return slice(a, b) if dim == 0 else (slice(None), slice(a, b))


def _read_cut(files: CheckpointFiles, lay, cut, k: int, key: str) -> torch.Tensor:
    """A linear's tensor ``key``, whole or its rows / block-aligned columns ``cut``
    of the ``k`` inputs (``get_slice``: the codes' and the scales' columns in
    their own units); a per-tensor scale whole, not noted as copied (a scalar)."""
    if lay.global_scale is not None and key.endswith(lay.global_scale):
        return files.tensor(key)
    if cut is None:
        return files.copied(key)
    dim, a, b = cut
    if dim == 0:
        return files.copied(key, slice(a, b))
    cols = files.handles[files.where[key]].get_slice(key).get_shape()[1]
    return files.copied(key, (slice(None), slice(a * cols // k, b * cols // k)))


def _rebuild_meta_buffers(model) -> None:
    """Non-persistent buffers (rotary frequencies) are computed, not stored:
    each module still holding one on the meta device is built again from the
    config, on the CPU."""
    for name, module in list(model.named_modules()):
        if not any(b.is_meta for b in module._buffers.values() if b is not None):
            continue
        try:
            new = type(module)(model.config)
        except Exception as e:  # noqa: BLE001 - a module we cannot rebuild: say which
            raise MXValueError(f"{name}: a computed buffer that cannot be rebuilt ({e})") from None
        owner, _, attr = name.rpartition(".")
        setattr(model.get_submodule(owner) if owner else model, attr, new)
    left = [n for n, t in (*model.named_parameters(), *model.named_buffers()) if t.is_meta]
    if left:
        raise MXValueError(f"{', '.join(left[:3])}: not in the checkpoint")


# -- saving -------------------------------------------------------------------------------


def checkpoint_tensors(model) -> tuple[dict[str, torch.Tensor], str]:
    """``(name -> tensor, layout)``: the model's tensors as the checkpoint holds
    them: each :class:`MXExperts` as gpt-oss's ``*_blocks`` / ``*_scales`` /
    biases, each :class:`MXLinear` as compressed-tensors' ``weight_packed`` /
    ``weight_scale`` / ``bias``, every other parameter and persistent buffer as
    it is."""
    out, prefixes, kinds = {}, [], set()
    for name, module in model.named_modules():
        if isinstance(module, MXExperts):
            if getattr(module, "total_experts", module.num_experts) != module.num_experts:
                raise MXValueError(
                    f"{name}: holds {module.num_experts} of its {module.total_experts} experts "
                    "(expert parallel): save the unsharded model"
                )
            kinds.add(GPT_OSS)
            for proj, layers in (("gate_up_proj", module.gate_up), ("down_proj", module.down)):
                blocks, scales = zip(*(_stored(m, f"{name}.{proj}") for m in layers), strict=True)
                out[f"{name}.{proj}_blocks"] = torch.stack(
                    [b.reshape(b.shape[0], -1, _BLOCK // 2) for b in blocks]
                )
                out[f"{name}.{proj}_scales"] = torch.stack(scales)
                if layers[0].bias is not None:
                    out[f"{name}.{proj}_bias"] = torch.stack([m.bias.detach() for m in layers])
            prefixes.append(name + ".")
        elif isinstance(module, MXLinear) and not any(name.startswith(p) for p in prefixes):
            kinds.add(COMPRESSED)
            out[f"{name}.weight_packed"], out[f"{name}.weight_scale"] = _stored(module, name)
            if module.bias is not None:
                out[f"{name}.bias"] = module.bias.detach()
            prefixes.append(name + ".")
    if len(kinds) != 1:
        raise MXValueError(
            "model: expected MXExperts (gpt-oss layout) or MXLinear layers (compressed-tensors), "
            f"not {'both' if kinds else 'neither'}"
        )
    for key, t in model.state_dict().items():
        if not any(key.startswith(p) for p in prefixes) and key not in _tied_keys(model):
            out[key] = t.detach()
    return out, kinds.pop()


def _tied_keys(model) -> set:
    if not getattr(model.config, "tie_word_embeddings", False):
        return set()
    return set(getattr(model, "_tied_weights_keys", None) or {})


def _stored(layer: MXLinear, name: str) -> tuple[torch.Tensor, torch.Tensor]:
    if (layer.element, layer.block_size) != (_FP4, _BLOCK):
        raise MXValueError(
            f"{name}: holds {layer.element} weights in blocks of {layer.block_size}; these "
            f"checkpoint layouts hold {_FP4} in blocks of {_BLOCK}"
        )
    w = layer.weight()
    return torch.from_numpy(w.packed_codes().copy()), torch.from_numpy(w.scales.view("uint8").copy())


def save_pretrained(model, path) -> None:
    """Write ``model`` (from :func:`from_pretrained`, or with ``MXExperts`` /
    ``MXLinear`` layers of MXFP4 from ``quantize_``) to the folder ``path`` in
    the layout it holds: ``config.json`` and safetensors files.  A model loaded
    by :func:`from_pretrained` is written to the same files (same tensors per
    file, same metadata; the index when it was sharded), so its safetensors
    files are byte-identical to those it was loaded from; another goes to one
    ``model.safetensors``.  The save is atomic: every file goes to a hidden
    folder inside ``path`` first and is renamed in once all were written,
    after the previous checkpoint's index and the safetensors files this save
    does not rewrite were removed (``checkpoint_files.write_checkpoint``).  A
    failed write raises its ``OSError`` and leaves the folder as it was."""
    if not isinstance(model, torch.nn.Module):
        raise MXArgTypeError(f"model: expected a torch.nn.Module, got {type(model).__name__}")
    folder = path_argument(path)
    safetensors_module()
    tensors, layout = checkpoint_tensors(model)
    source = getattr(model, "mx_source", None) or {}
    where = source.get("files") if source.get("layout") == layout else None
    if where is None or set(where) != set(tensors):
        where = dict.fromkeys(tensors, "model.safetensors")
        metadata, sharded = {"model.safetensors": {"format": "pt"}}, False
    else:
        metadata, sharded = source["metadata"], source["sharded"]
    parts = {
        file: {k: t.contiguous() for k, t in tensors.items() if where[k] == file}
        for file in sorted(set(where.values()))
    }
    index = None
    if sharded:
        size = sum(t.numel() * t.element_size() for t in tensors.values())
        index = {"metadata": {"total_size": size}, "weight_map": dict(sorted(where.items()))}
        index = json.dumps(index, indent=2) + "\n"
    config = json.dumps(saved_config(model, layout), indent=2, sort_keys=True) + "\n"
    write_checkpoint(folder, parts, metadata, index, config)

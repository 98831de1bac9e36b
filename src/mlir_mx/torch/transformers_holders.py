"""The modules transformers' loader fills for :class:`.transformers_quantizer.MXHfQuantizer`.

* Holders of an MXFP4 checkpoint's stored form (:func:`holder_modules`, on the
  meta model before loading): :class:`StoredExperts` (gpt-oss's
  ``*_blocks`` / ``*_scales`` / biases) and :class:`StoredLinear`
  (compressed-tensors' ``weight_packed`` / ``weight_scale`` / ``bias``), under
  the checkpoint's own tensor names, so transformers reads each tensor into its
  holder as it reads any other (no conversion, no dtype change for the
  ``uint8`` bytes).  :func:`mx_modules` then makes each holder the
  ``MXExperts`` / ``MXLinear`` over those bytes, as
  :func:`~mlir_mx.torch.from_pretrained` does.
* Holders of the other block-scaled families (:func:`family_holders`:
  compressed-tensors ``nvfp4-pack-quantized``, ModelOpt NVFP4, Quark OCP MX):
  :class:`LayoutLinear`, one buffer per tensor the family's
  :class:`~mlir_mx.torch.checkpoint_layouts.LinearLayout` names, in the
  file's dtype and shape (transformers casts nothing: a buffer's dtype is the
  file's), planned and checked from the headers by the one registry
  (:func:`~mlir_mx.torch.checkpoint_linears.plan_linear`), as
  :func:`~mlir_mx.torch.from_pretrained` plans them.
* :class:`OnLoad`: quantize-on-load to an :class:`~mlir_mx.torch.MXConfig`.
  The layers are those :func:`~mlir_mx.torch.quantize_` would convert
  (``selected_linears`` / ``selected_experts``); transformers hands each of
  their weights to :class:`QuantizeOnLoad` as it reads it (one tensor at a
  time: transformers loads sequentially when a quantizer quantizes on load),
  which quantizes it with :func:`~mlir_mx.torch.quantize_weight` and drops
  the float tensor; :meth:`OnLoad.finish` builds the layers.
"""

from __future__ import annotations

import torch
from transformers.core_model_loading import ConversionOps

from mlir_mx.errors import MXValueError
from mlir_mx.numerics import MXArray

from .checkpoint import linear_shape
from .checkpoint_config import COMPRESSED, GPT_OSS
from .checkpoint_files import CheckpointFiles
from .checkpoint_layouts import LinearLayout, scheme_of
from .checkpoint_linears import plan_linear
from .config import MXConfig
from .experts import MXExperts, experts_gate, is_stacked_experts
from .module import MXLinear, is_conv1d
from .quantize_model import QuantizeSummary, selected_experts, selected_linears
from .quantizer import quantize_weight

__all__ = [
    "LayoutLinear", "OnLoad", "QuantizeOnLoad", "StoredExperts", "StoredLinear", "family_holders",
    "holder_modules", "mx_modules",
]  # fmt: skip

_FP4, _BLOCK = "f4E2M1FN", 32
_PROJS = ("gate_up_proj", "down_proj")


def _meta(shape, dtype=torch.uint8) -> torch.Tensor:
    return torch.empty(shape, dtype=dtype, device="meta")


class StoredExperts(torch.nn.Module):
    """A stacked-experts module's MXFP4 bytes as gpt-oss stores them, until loaded."""

    def __init__(self, old: torch.nn.Module):
        super().__init__()
        self.gate, self.shapes = experts_gate(old), {}
        for proj in _PROJS:
            e, out, k = linear_shape(old, proj)
            self.shapes[proj] = (e, out, k)
            self.register_buffer(f"{proj}_blocks", _meta((e, out, k // _BLOCK, _BLOCK // 2)))
            self.register_buffer(f"{proj}_scales", _meta((e, out, k // _BLOCK)))
            bias = getattr(old, f"{proj}_bias", None)
            if isinstance(bias, torch.Tensor):
                self.register_parameter(f"{proj}_bias", torch.nn.Parameter(_meta(bias.shape, bias.dtype)))


class StoredLinear(torch.nn.Module):
    """An ``nn.Linear``'s MXFP4 bytes as compressed-tensors stores them, until loaded."""

    def __init__(self, old: torch.nn.Linear):
        super().__init__()
        out, k = old.weight.shape
        self.register_buffer("weight_packed", _meta((out, k // 2)))
        self.register_buffer("weight_scale", _meta((out, k // _BLOCK)))
        if old.bias is not None:
            self.bias = torch.nn.Parameter(_meta(old.bias.shape, old.bias.dtype))


#: safetensors dtypes -> torch dtypes of the holders' buffers.
_DTYPES = {"U8": torch.uint8, "F8_E4M3": torch.float8_e4m3fn, "F32": torch.float32,
           "BF16": torch.bfloat16, "F16": torch.float16}  # fmt: skip


class LayoutLinear(torch.nn.Module):
    """An ``nn.Linear`` of a block-scaled family as its file stores it, until
    loaded: a buffer per tensor of its :class:`LinearLayout` (the file's
    dtype and shape), its bias."""

    def __init__(self, old: torch.nn.Linear, name: str, lay: LinearLayout, files):
        super().__init__()
        self.layout, self.name = lay, name
        out, k = old.weight.shape
        for key in lay.tensors(name, out, k):
            if key in files.where:  # an optional input scale may be absent
                sl = files.handles[files.where[key]].get_slice(key)
                dtype = _DTYPES.get(sl.get_dtype())
                if dtype is None:
                    raise MXValueError(f"{key}: dtype {sl.get_dtype()} is not one transformers can hold here")
                self.register_buffer(key[len(name) + 1 :], _meta(tuple(sl.get_shape()), dtype))
        if old.bias is not None:
            self.bias = torch.nn.Parameter(_meta(old.bias.shape, old.bias.dtype))

    def mx_linear(self) -> MXLinear:
        """The ``MXLinear`` over the loaded bytes (``LinearLayout.weight``: no copy)."""
        def read(key: str) -> torch.Tensor:
            t = getattr(self, key[len(self.name) + 1 :])
            if t.is_meta:
                raise MXValueError(f"{key}: missing from the checkpoint")
            return t

        w = self.layout.weight(self.name, read)
        return MXLinear(w, _bias(self, "bias", f"{self.name}.bias"), activations=self.layout.activations)


def family_holders(model, config: dict, checkpoint_files) -> str:
    """Replace (on the meta model) each ``nn.Linear`` the family of ``config``
    (the checkpoint's ``config.json``) stores quantized by a
    :class:`LayoutLinear`; the family's name.  A scheme, group size, dtype or
    activation scheme we do not run, or a malformed header, is refused as
    :func:`~mlir_mx.torch.from_pretrained` refuses it."""
    from contextlib import ExitStack
    from pathlib import Path

    folder = Path(checkpoint_files[0]).parent
    scheme = scheme_of(folder, config)
    if scheme is None:
        raise MXValueError(f"{folder}: no block-scaled checkpoint family in its config")
    names, seen, dense = [], set(), {}
    with ExitStack() as stack:
        files = CheckpointFiles(folder, stack)
        for name, module in list(model.named_modules()):
            if type(module) is torch.nn.Linear:
                lay = plan_linear(scheme, name, module, files, seen, dense)
                if lay is not None:
                    _set(model, name, LayoutLinear(module, name, lay, files))
                    names.append(name)
    _untie(model, names)
    return scheme.name


def _set(model, name: str, module: torch.nn.Module) -> None:
    owner, _, attr = name.rpartition(".")
    setattr(model.get_submodule(owner) if owner else model, attr, module)


def _keys(files) -> set:
    from safetensors import safe_open

    keys = set()
    for path in files:
        with safe_open(str(path), framework="pt") as f:
            keys.update(f.keys())
    return keys


def holder_modules(model, layout: str, checkpoint_files) -> list[str]:
    """Replace (on the meta model) each module ``layout`` stores in MX by its
    holder: every stacked-experts module (gpt-oss), every ``nn.Linear`` whose
    ``weight_packed`` the files hold (compressed-tensors); the names."""
    keys = _keys(checkpoint_files) if layout == COMPRESSED else set()
    names = []
    for name, module in list(model.named_modules()):
        if layout == GPT_OSS and is_stacked_experts(module):
            for proj in _PROJS:
                if linear_shape(module, proj)[2] % _BLOCK:
                    raise MXValueError(f"{name}.{proj}: in_features not a multiple of {_BLOCK}")
            _set(model, name, StoredExperts(module))
            names.append(name)
        elif type(module) is torch.nn.Linear and f"{name}.weight_packed" in keys:
            if module.in_features % _BLOCK:
                raise MXValueError(f"{name}.weight: in_features {module.in_features} is not a "
                                   f"multiple of the MX block size {_BLOCK}")  # fmt: skip
            _set(model, name, StoredLinear(module))
            names.append(name)
    _untie(model, names)
    return names


def _untie(model, names: list[str]) -> None:
    """A tied weight the file holds in MX (a compressed-tensors ``lm_head`` with
    ``weight_packed`` beside ``tie_word_embeddings``) wins, as in
    :func:`~mlir_mx.torch.from_pretrained`: that layer stays MX, the embeddings
    as stored, and the config says ``tie_word_embeddings=False``."""
    tied = getattr(model, "all_tied_weights_keys", None) or {}
    untied = [key for key in tied if key.rpartition(".")[0] in names]
    if untied:
        model.config.tie_word_embeddings = False
        for key in untied:
            tied.pop(key)


def _mx(codes: torch.Tensor, scales: torch.Tensor, out: int, key: str) -> MXArray:
    """The FP4 MXArray whose stored form is these bytes (taken over, no copy)."""
    if codes.is_meta or scales.is_meta:
        raise MXValueError(f"{key}: missing from the checkpoint")
    return MXArray.from_packed(
        codes.reshape(out, -1).numpy(), scales.numpy(), _FP4, _BLOCK, axis=1, copy=False
    )


def _bias(module, name: str, key: str):
    b = getattr(module, name, None)
    if b is not None and b.is_meta:
        raise MXValueError(f"{key}: missing from the checkpoint")
    return None if b is None else b.detach()


def mx_modules(model, layout: str) -> list[str]:
    """Each holder (:func:`holder_modules`), loaded, made the ``MXExperts`` /
    ``MXLinear`` over its bytes; the names."""
    names = []
    for name, holder in list(model.named_modules()):
        if isinstance(holder, StoredExperts):
            w, b = {}, {}
            for proj in _PROJS:
                e, out, _k = holder.shapes[proj]
                blocks, scales = (getattr(holder, f"{proj}_{s}") for s in ("blocks", "scales"))
                w[proj] = [_mx(blocks[i], scales[i], out, f"{name}.{proj}_blocks") for i in range(e)]
                b[proj] = _bias(holder, f"{proj}_bias", f"{name}.{proj}_bias")
            new = MXExperts(w["gate_up_proj"], w["down_proj"], b["gate_up_proj"], b["down_proj"],
                            gate=holder.gate)  # fmt: skip
        elif isinstance(holder, StoredLinear):
            w = _mx(holder.weight_packed, holder.weight_scale, holder.weight_packed.shape[0],
                    f"{name}.weight_packed")  # fmt: skip
            new = MXLinear(w, _bias(holder, "bias", f"{name}.bias"))
        elif isinstance(holder, LayoutLinear):
            new = holder.mx_linear()
        else:
            continue
        _set(model, name, new)
        names.append(name)
    return names


class OnLoad:
    """The layers of a model (on the meta device) that ``quantize_(model, config)``
    would convert, and their weights quantized as transformers reads them."""

    def __init__(self, model, config: MXConfig):
        self.config, summary = config, QuantizeSummary(config.element, config.block_size)
        size = config.block_size
        self.experts = {n for n, _, _ in selected_experts(model, size, None, summary)}
        self.linears = {n for n, _, _ in selected_linears(model, size, None, summary)}
        self.pending: dict[str, dict] = {}  # module name -> {tensor name: MXArray(s)}

    def takes(self, param_name: str) -> bool:
        owner, _, attr = param_name.rpartition(".")
        return (owner in self.linears and attr == "weight") or (
            owner in self.experts and attr in _PROJS
        )

    def op(self) -> QuantizeOnLoad:
        return QuantizeOnLoad(self)

    def quantize(self, model, key: str, value: torch.Tensor) -> None:
        """Quantize ``value``, the weight ``key`` just read, as ``quantize_`` would."""
        owner, _, attr = key.rpartition(".")
        module, fmt, size = model.get_submodule(owner), self.config.format, self.config.block_size
        if owner in self.experts:
            tr = bool(getattr(module, "is_transposed", False))
            mx = [quantize_weight(v.t() if tr else v, fmt, size) for v in value]
        else:
            mx = quantize_weight(value.t() if is_conv1d(module) else value, fmt, size)
        self.pending.setdefault(owner, {})[attr] = mx
        module._is_hf_initialized = True

    def finish(self, model) -> list[str]:
        """Every layer made an ``MXLinear`` / ``MXExperts``: from its weights
        quantized on load, or (a weight the checkpoint does not hold: tied to
        the embeddings) from the weight it holds now; the names."""
        acts = self.config.activations
        for name in sorted(self.linears):
            layer = model.get_submodule(name)
            w = self.pending.pop(name, {}).get("weight")  # freed once laid out
            if w is None:
                self._check_loaded(name, layer.weight)
                w = quantize_weight(layer.weight.t() if is_conv1d(layer) else layer.weight,
                                    self.config.format, self.config.block_size)  # fmt: skip
            _set(model, name, MXLinear(w, layer.bias, activations=acts))
            del w
        for name in sorted(self.experts):
            block, got = model.get_submodule(name), self.pending.pop(name, {})
            for proj in _PROJS:
                if proj not in got:
                    raise MXValueError(f"{name}.{proj}: missing from the checkpoint")
            biases = [getattr(block, f"{p}_bias", None) for p in _PROJS]
            if not getattr(block, "has_bias", biases[0] is not None):
                biases = [None, None]
            new = MXExperts(got["gate_up_proj"], got["down_proj"], *biases,
                            gate=experts_gate(block), activations=acts)  # fmt: skip
            _set(model, name, new)
        self.pending.clear()
        return sorted(self.linears | self.experts)

    @staticmethod
    def _check_loaded(name: str, weight: torch.Tensor) -> None:
        if weight.is_meta:
            raise MXValueError(f"{name}.weight: missing from the checkpoint")


class QuantizeOnLoad(ConversionOps):
    """transformers' conversion op for one weight :class:`OnLoad` takes: quantized,
    the float tensor dropped, nothing handed back to the loader."""

    def __init__(self, on_load: OnLoad):
        self.on_load = on_load

    def convert(self, input_dict, model=None, full_layer_name=None, missing_keys=None, **kwargs):
        (value,) = input_dict.values()
        value = value[0] if isinstance(value, list) else value
        self.on_load.quantize(model, full_layer_name, value)
        if missing_keys is not None:
            missing_keys.discard(full_layer_name)
        return {}

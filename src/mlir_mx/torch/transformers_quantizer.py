"""transformers' own API over mlir-mx: a quantizer ``AutoModelForCausalLM.from_pretrained``
and ``model.save_pretrained`` use (``docs/torch.md``, "transformers' own API").

* ``from_pretrained(path, quantization_config=MXConfig(...))``: every layer
  :func:`~mlir_mx.torch.quantize_` would convert is quantized as its weight is
  read (transformers' per-parameter loading: one weight in f32 / bf16 at a time,
  freed once quantized), then becomes an ``MXLinear`` / ``MXExperts``.
* ``from_pretrained(path)`` on an MXFP4 checkpoint (gpt-oss's ``mxfp4``,
  compressed-tensors' ``mxfp4-pack-quantized``: what
  :func:`~mlir_mx.torch.save_pretrained` writes): the stored bytes are read into
  holders of the stored form (:mod:`.transformers_holders`) and each holder
  becomes an ``MXExperts`` / ``MXLinear`` over those bytes, as
  :func:`~mlir_mx.torch.from_pretrained` builds it.
* ``from_pretrained(path)`` on the other block-scaled families
  (compressed-tensors ``nvfp4-pack-quantized``, ModelOpt NVFP4 with
  ``quant_method: modelopt``, AMD Quark OCP MX): each quantized linear's
  tensors are read into a :class:`~.transformers_holders.LayoutLinear` in the
  file's dtypes, planned by the one registry (``checkpoint_layouts``), and
  each becomes an ``MXLinear`` over those bytes (Quark's MX activations as
  its ``activations=``), as :func:`~mlir_mx.torch.from_pretrained` builds it.
* ``model.save_pretrained(path)`` on a model holding MX layers (loaded so, or
  converted by ``quantize_``): the tensors and ``quantization_config`` of
  :func:`~mlir_mx.torch.save_pretrained` (``checkpoint.checkpoint_tensors``).

:func:`register` puts :class:`MXHfQuantizer` in transformers' tables: under
``"mlir_mx"`` (:class:`~mlir_mx.torch.MXConfig`'s ``quant_method``) and in
place of transformers' ``"mxfp4"``, ``"compressed-tensors"`` and ``"quark"``
quantizers, which it hands every config it does not take (dequantize, another
compressed-tensors format, quantizing on load to Mxfp4Config, a Quark scheme
we do not run where ``amd-quark`` is installed) unchanged; and under
``"modelopt"``, which transformers does not have.
:func:`unregister` puts transformers' own back.  ``mlir_mx.torch`` calls
:func:`register_on_import`: at once when transformers' quantizers are already
imported, else when they are (an import hook, so ``import mlir_mx.torch`` does
not import transformers).
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch
from transformers.quantizers import auto
from transformers.quantizers.base import HfQuantizer
from transformers.utils.quantization_config import QuantizationConfigMixin

from mlir_mx.errors import MXValueError

from .checkpoint import checkpoint_tensors
from .checkpoint_config import COMPRESSED, GPT_OSS, saved_config
from .checkpoint_layouts import MODELOPT, QUARK, scheme_of
from .config import MXConfig
from .quantize_model import AFTER_QUANTIZE
from .thread_policy import install as install_decode_policy
from .transformers_holders import OnLoad, family_holders, holder_modules, mx_modules

__all__ = [
    "METHOD", "CompressedMXFP4Config", "FamilyConfig", "MXConfigEntry", "MXHfQuantizer", "attach",
    "register", "registered", "unregister",
]  # fmt: skip

log = logging.getLogger(__name__)
METHOD = MXConfig.quant_method  # "mlir_mx"
#: transformers' own entries our registration replaced (restored by :func:`unregister`).
_OWN: dict[str, tuple] = {}
_MXFP4_CT, _NVFP4_CT = "mxfp4-pack-quantized", "nvfp4-pack-quantized"


def _ct_formats(d: dict) -> set:
    groups = d.get("config_groups") or {}
    return {d.get("format")} | {g.get("format") for g in groups.values() if isinstance(g, dict)}


def _is_mxfp4_ct(d: dict) -> bool:
    return bool(_ct_formats(d) & {_MXFP4_CT, _NVFP4_CT})


class CompressedMXFP4Config(QuantizationConfigMixin):
    """A compressed-tensors ``mxfp4-pack-quantized`` or ``nvfp4-pack-quantized``
    ``quantization_config``, held as the dict it was read from (no
    ``compressed_tensors`` package needed); another compressed-tensors config
    goes to transformers' own class."""

    def __init__(self, config: dict):
        self.config = dict(config)
        self.quant_method = COMPRESSED
        self.dequantize = False
        #: Read through the block-scaled families' registry (NVFP4 present).
        self.family = _NVFP4_CT in _ct_formats(self.config)

    @classmethod
    def from_dict(cls, config_dict, return_unused_kwargs=False, **kwargs):
        d = config_dict.get("quantization_config", config_dict)
        if not _is_mxfp4_ct(d):
            own = _OWN.get(COMPRESSED, (None, auto.AUTO_QUANTIZATION_CONFIG_MAPPING[COMPRESSED]))[1]
            return own.from_dict(config_dict, return_unused_kwargs=return_unused_kwargs, **kwargs)
        return (cls(d), kwargs) if return_unused_kwargs else cls(d)

    def to_dict(self) -> dict:
        return dict(self.config)

    def to_diff_dict(self) -> dict:
        return self.to_dict()


class FamilyConfig(QuantizationConfigMixin):
    """The ``quantization_config`` of a block-scaled family transformers has no
    CPU loader for, held as its dict: AMD Quark OCP MX (``quant_method:
    quark``; transformers' own needs the ``amd-quark`` package) and ModelOpt
    NVFP4 (``modelopt``; transformers has none).  Read by the one registry
    (:func:`~mlir_mx.torch.checkpoint_layouts.scheme_of`) when transformers
    reads the config: a scheme we do not run is refused then, named (a Quark
    one goes to transformers' own loader where ``amd-quark`` is installed)."""

    family = True
    method: str = ""

    def __init__(self, config: dict):
        self.config = dict(config)
        self.quant_method = config.get("quant_method", self.method)

    @classmethod
    def from_dict(cls, config_dict, return_unused_kwargs=False, **kwargs):
        d = config_dict.get("quantization_config", config_dict)
        try:
            scheme_of(Path("config.json"), {"quantization_config": d})
        except MXValueError as err:
            own = _OWN.get(cls.method)
            if own is not None and _quark_installed():
                return own[1].from_dict(config_dict, return_unused_kwargs=return_unused_kwargs, **kwargs)
            raise MXValueError(
                f"{cls.method} checkpoint: {err.args[0]}; transformers has no CPU loader of its own "
                f"for it{_NOTE.get(cls.method, '')}"
            ) from None
        return (cls(d), kwargs) if return_unused_kwargs else cls(d)

    def to_dict(self) -> dict:
        return dict(self.config)

    def to_diff_dict(self) -> dict:
        return self.to_dict()


_NOTE = {QUARK: " (its own Quark loader needs the amd-quark package)"}


class QuarkEntry(FamilyConfig):
    method = QUARK


class ModelOptEntry(FamilyConfig):
    method = MODELOPT


def _quark_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("quark") is not None


class MXConfigEntry(QuantizationConfigMixin):
    """transformers' table entry for ``quant_method: "mlir_mx"``: it makes an
    :class:`~mlir_mx.torch.MXConfig` (the one config users write; never made itself)."""

    @classmethod
    def from_dict(cls, config_dict, return_unused_kwargs=False, **kwargs):
        d = {k: v for k, v in config_dict.items() if k != "quant_method"}
        config = MXConfig.from_dict(d)
        return (config, kwargs) if return_unused_kwargs else config


def _ours(config, pre_quantized: bool) -> bool:
    if isinstance(config, MXConfig):
        return True
    if isinstance(config, (CompressedMXFP4Config, FamilyConfig)):
        return pre_quantized
    method = getattr(config, "quant_method", None)
    method = getattr(method, "value", method)
    return method == GPT_OSS and pre_quantized and not getattr(config, "dequantize", False)


class MXHfQuantizer(HfQuantizer):
    """transformers' quantizer for :class:`~mlir_mx.torch.MXConfig` (quantize on
    load) and for MXFP4 checkpoints (gpt-oss ``mxfp4``, compressed-tensors
    ``mxfp4-pack-quantized``) read as stored; a config it does not take is
    handed to transformers' own quantizer for its method (the object returned
    is then that quantizer)."""

    requires_calibration = False

    def __new__(cls, quantization_config=None, **kwargs):
        # None: copy / pickle make the object first, then set its state
        if quantization_config is not None and not _ours(
            quantization_config, kwargs.get("pre_quantized", True)
        ):
            method = getattr(quantization_config, "quant_method", None)
            method = getattr(method, "value", method)
            own = _OWN.get(method, (auto.AUTO_QUANTIZER_MAPPING.get(method),))[0]
            if own is None or own is cls:
                raise MXValueError(f"quantization_config: {method!r} is not a config mlir-mx takes")
            return own(quantization_config, **kwargs)
        return super().__new__(cls)

    def __init__(self, quantization_config, **kwargs):
        super().__init__(quantization_config, **kwargs)
        self.layout = None  # GPT_OSS / COMPRESSED once a checkpoint is read
        self.on_load = None  # OnLoad: the layers quantized as read

    def validate_environment(self, *args, device_map=None, **kwargs):
        """The MX layers run on the CPU: a ``device_map`` placing anything
        elsewhere is refused (``"auto"`` only where torch sees no CUDA device)."""
        places = device_map.values() if isinstance(device_map, dict) else [device_map]
        cpu = {None, "cpu", torch.device("cpu")} | ({"auto"} if not torch.cuda.is_available() else set())
        bad = [p for p in places if not isinstance(p, (str, torch.device, type(None))) or p not in cpu]
        if bad:
            raise MXValueError(f"device_map: mlir-mx layers run on the CPU, got {device_map!r}")

    def _process_model_before_weight_loading(self, model, checkpoint_files=None, **kwargs):
        config = self.quantization_config
        if self.pre_quantized and getattr(config, "family", False):  # the families' registry
            self.layout = family_holders(model, {"quantization_config": config.to_dict()},
                                         checkpoint_files or [])  # fmt: skip
        elif self.pre_quantized:
            self.layout = GPT_OSS if not isinstance(config, CompressedMXFP4Config) else COMPRESSED
            holder_modules(model, self.layout, checkpoint_files or [])
        else:
            self.on_load = OnLoad(model, self.quantization_config)
        return model

    def param_needs_quantization(self, model, param_name: str, **kwargs) -> bool:
        return self.on_load is not None and self.on_load.takes(param_name)

    def get_quantize_ops(self):
        return self.on_load.op()

    def _process_model_after_weight_loading(self, model, **kwargs):
        if self.pre_quantized:
            made = mx_modules(model, self.layout)
            how = f"{self.layout} checkpoint read as stored"
        else:
            made = self.on_load.finish(model)
            self.on_load = None
            how = f"quantized on load ({self.quantization_config.element})"
        model.mx_source = {"layout": self.layout, "loader": "transformers", "modules": made}
        log.info("mlir_mx.torch: %d layers through mlir-mx kernels (%s)", len(made), how)
        install_decode_policy(model)  # decode steps: torch on 1 thread (thread_policy)
        return model

    def get_state_dict_and_metadata(self, model):
        """:func:`~mlir_mx.torch.save_pretrained`'s tensors; the model's config
        takes that layout's ``quantization_config`` (written next)."""
        tensors, layout = checkpoint_tensors(model)
        model.config.quantization_config = saved_config(model, layout)["quantization_config"]
        return {k: t.contiguous() for k, t in tensors.items()}, {}

    def is_serializable(self, *args, **kwargs) -> bool:
        return True

    @property
    def is_trainable(self) -> bool:
        return False

    @property
    def is_compileable(self) -> bool:
        return True


def attach(model) -> None:
    """Let transformers' ``save_pretrained`` write ``model`` (a ``PreTrainedModel``
    that ``quantize_`` converted) as :func:`~mlir_mx.torch.save_pretrained` does."""
    from transformers import PreTrainedModel

    if isinstance(model, PreTrainedModel) and getattr(model, "hf_quantizer", None) is None:
        model.hf_quantizer = MXHfQuantizer(MXConfig(), pre_quantized=True)


# -- the tables ----------------------------------------------------------------------------


def registered() -> bool:
    """Whether transformers' tables hold :class:`MXHfQuantizer` (:func:`register`)."""
    return auto.AUTO_QUANTIZER_MAPPING.get(GPT_OSS) is MXHfQuantizer


def register() -> None:
    """Put :class:`MXHfQuantizer` in transformers' tables (idempotent): the
    ``mlir_mx`` method by transformers' public ``register_quantization_config``
    / ``register_quantizer``; the ``mxfp4`` / ``compressed-tensors`` entries
    replaced, transformers' own kept for :func:`unregister` and for the
    configs we hand back."""
    if registered():
        return
    if METHOD not in auto.AUTO_QUANTIZER_MAPPING:
        auto.register_quantization_config(METHOD)(MXConfigEntry)
        auto.register_quantizer(METHOD)(MXHfQuantizer)
    for method in (GPT_OSS, COMPRESSED, QUARK):
        if method in auto.AUTO_QUANTIZER_MAPPING:
            _OWN[method] = (auto.AUTO_QUANTIZER_MAPPING[method], auto.AUTO_QUANTIZATION_CONFIG_MAPPING[method])
        auto.AUTO_QUANTIZER_MAPPING[method] = MXHfQuantizer
    auto.AUTO_QUANTIZATION_CONFIG_MAPPING[COMPRESSED] = CompressedMXFP4Config
    auto.AUTO_QUANTIZATION_CONFIG_MAPPING[QUARK] = QuarkEntry
    if MODELOPT not in auto.AUTO_QUANTIZER_MAPPING:  # transformers has none: ours, kept
        auto.register_quantization_config(MODELOPT)(ModelOptEntry)
        auto.register_quantizer(MODELOPT)(MXHfQuantizer)
    if attach not in AFTER_QUANTIZE:
        AFTER_QUANTIZE.append(attach)
    log.info("mlir_mx.torch: transformers' mxfp4 and compressed-tensors MXFP4 loading go through mlir-mx")


def unregister() -> None:
    """transformers' own ``mxfp4`` / ``compressed-tensors`` entries back (the
    ``mlir_mx`` method stays: transformers has no call to remove one)."""
    for method, (quantizer, config) in list(_OWN.items()):
        auto.AUTO_QUANTIZER_MAPPING[method] = quantizer
        auto.AUTO_QUANTIZATION_CONFIG_MAPPING[method] = config
    _OWN.clear()
    if attach in AFTER_QUANTIZE:
        AFTER_QUANTIZE.remove(attach)


# Imported directly, this module imports transformers' quantizers itself, while the
# import hook (transformers_hook) finds it half made: its package, mlir_mx.torch,
# was imported first, so it registers here.
register()

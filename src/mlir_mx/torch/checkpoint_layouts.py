"""The per-linear layouts of block-scaled checkpoints, for
:mod:`mlir_mx.torch.checkpoint`: one registry of the families read
(``docs/torch.md``, "Block-scaled checkpoint families").

Each quantized ``nn.Linear`` of a checkpoint is a :class:`LinearLayout`: which
tensors hold its codes and scales (by suffix of the module's name), their
safetensors dtypes and shapes, its element format and block size, its
per-tensor scale (NVFP4) and the activations it asks for.  A family's
:class:`Scheme` reads the config and gives each module's layout (or None: the
module is stored dense).  Every layout's bytes are the stored form of an
:class:`~mlir_mx.numerics.MXArray` ``(out, in)`` blocked along ``in`` (FP4
two codes a byte, element ``2j`` low; FP6 four codes in three bytes, a
little-endian 24-bit word; FP8 a code a byte), so the codes and scales are
taken over as they are; only MLX's uint32 words are viewed as their bytes
(little-endian: the same order).

Families (:func:`scheme_of`): compressed-tensors ``mxfp4-pack-quantized`` and
``nvfp4-pack-quantized``; ModelOpt NVFP4; AMD Quark OCP MX (FP4, FP6 E2M3 /
E3M2 weights; MX activations); MLX ``mxfp4`` / ``mxfp8`` / ``nvfp4``.  A
scheme, group size, dtype or activation scheme we do not run is refused by
name (:class:`~mlir_mx.errors.MXValueError`).
"""

from __future__ import annotations

import fnmatch
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from mlir_mx.errors import MXValueError
from mlir_mx.numerics import MXArray
from mlir_mx.numerics.formats import NVFP4, element_format

from .checkpoint_config import COMPRESSED

__all__ = [
    "LinearLayout", "MLX", "MODELOPT", "QUARK", "Scheme", "nvfp4_scales", "scheme_of",
]  # fmt: skip

#: The ``mx_source`` layout names of the families read here (compressed-tensors'
#: is :data:`~mlir_mx.torch.checkpoint_config.COMPRESSED`).
QUARK, MODELOPT, MLX = "quark", "modelopt", "mlx"
_FP4 = "f4E2M1FN"
_SCALAR = ((), (1,))  # a per-tensor scale: a scalar or one element


@dataclass(frozen=True)
class LinearLayout:
    """One quantized linear's tensors: ``codes`` / ``scales`` / ``global_scale``
    are suffixes of the module's name (``q_proj.weight_packed``)."""

    family: str
    element: str  # an MXArray element name, or "nvfp4"
    block: int
    codes: str
    scales: str
    codes_dtype: str = "U8"  # "U32": MLX's words
    scales_dtype: str = "U8"  # "F8_E4M3": NVFP4's E4M3 scales
    global_scale: str | None = None  # NVFP4's per-tensor scale tensor
    reciprocal: bool = False  # the file holds 1 / g (ModelOpt's weight_scale_2)
    extra: tuple = ()  # other per-tensor scalars read and checked (input scales)
    activations: str | None = None

    def tensors(self, name: str, out: int, k: int) -> dict:
        """``{tensor name: (dtypes, shape)}`` of this linear in the file."""
        per = 4 if self.codes_dtype == "U32" else 1
        t = {
            f"{name}.{self.codes}": ((self.codes_dtype,), (out, k * _bits(self.element) // 8 // per)),
            f"{name}.{self.scales}": ((self.scales_dtype,), (out, k // self.block)),
        }
        for s in (self.global_scale, *self.extra):
            if s is not None:
                t[f"{name}.{s}"] = (("F32",), _SCALAR)
        return t

    def weight(self, name: str, read) -> MXArray:
        """The MXArray over the file's bytes (``read(key)``: a torch tensor the
        array takes over, no copy); NVFP4 scales checked (:func:`nvfp4_scales`)."""
        import torch

        codes = read(f"{name}.{self.codes}")
        scales = read(f"{name}.{self.scales}")
        codes = codes.view(torch.uint8) if codes.dtype != torch.uint8 else codes
        scales = scales.view(torch.uint8) if scales.dtype != torch.uint8 else scales
        g = None
        if self.element == NVFP4:
            nvfp4_scales(f"{name}.{self.scales}", scales.numpy())
            g = 1.0 if self.global_scale is None else _global(name, self, read)
        return MXArray.from_packed(
            codes.numpy(), scales.numpy(), self.element, self.block, axis=1, copy=False,
            global_scale=g,
        )  # fmt: skip


def _bits(element: str) -> int:
    """Bits per stored code of ``element`` (NVFP4: its E2M1 codes)."""
    return element_format(_FP4 if element == NVFP4 else element).bits


def _global(name: str, lay: LinearLayout, read) -> np.float32:
    key = f"{name}.{lay.global_scale}"
    v = read(key).reshape(()).numpy()
    if lay.reciprocal:  # as compressed-tensors' ModelOpt converter: one f32 division
        v = np.float32(1) / v if np.isfinite(v) and v > 0 else v
    if not (np.isfinite(v) and v > 0):
        raise MXValueError(f"{key}: the per-tensor scale is {float(v)}; expected a finite positive f32")
    return np.float32(v)


def nvfp4_scales(key: str, scales: np.ndarray) -> None:
    """NVFP4 block scales must be finite and not negative: an E4M3 NaN (0x7f /
    0xff) or a set sign bit is a malformed file (no reference writes one)."""
    bad = (scales & 0x7F) == 0x7F
    if bad.any():
        r, c = np.argwhere(bad)[0]
        raise MXValueError(f"{key}: E4M3 NaN block scale (0x{int(scales[r, c]):02x}) at [{r}, {c}]")
    neg = scales >= 0x80
    if neg.any():
        r, c = np.argwhere(neg)[0]
        raise MXValueError(f"{key}: negative E4M3 block scale (0x{int(scales[r, c]):02x}) at [{r}, {c}]")


@dataclass
class Scheme:
    """A checkpoint family's reading of its config: :meth:`linear` gives each
    module's layout, or None where the module is stored dense."""

    name: str
    layouts: dict = field(default_factory=dict)  # a name pattern -> LinearLayout or None
    default: LinearLayout | None = None
    exclude: tuple = ()
    by_file: bool = False  # compressed-tensors: the layout follows the file's tensors
    embeddings: LinearLayout | None = None  # MLX: quantized embedding tables

    def linear(self, name: str, files=None) -> LinearLayout | None:
        if any(_matches(name, p) for p in self.exclude):
            return None
        for pattern, lay in self.layouts.items():
            if _matches(name, pattern):
                return lay
        if self.by_file and files is not None:
            return _compressed_layout(name, files)
        return self.default


def _matches(name: str, pattern: str) -> bool:
    """A module name against a config's pattern: the name itself, a glob
    (Quark, ModelOpt), or compressed-tensors' ``re:`` regular expression."""
    if pattern.startswith("re:"):
        return re.search(pattern[3:], name) is not None
    return name == pattern or fnmatch.fnmatchcase(name, pattern)


# -- compressed-tensors ---------------------------------------------------------------------

_CT_MXFP4 = LinearLayout(COMPRESSED, _FP4, 32, "weight_packed", "weight_scale")
_CT_NVFP4 = LinearLayout(
    COMPRESSED, NVFP4, 16, "weight_packed", "weight_scale", scales_dtype="F8_E4M3",
    global_scale="weight_global_scale", extra=("input_global_scale",),
)  # fmt: skip
_CT_FORMATS = {"mxfp4-pack-quantized": (_CT_MXFP4, 32), "nvfp4-pack-quantized": (_CT_NVFP4, 16)}


def _compressed(path: Path, q: dict) -> Scheme:
    groups = q.get("config_groups") or {}
    formats = {q.get("format")} | {g.get("format") for g in groups.values() if isinstance(g, dict)}
    formats.discard(None)
    unknown = sorted(f for f in formats if f not in _CT_FORMATS)
    if unknown or not formats:
        raise MXValueError(
            f"{path}: compressed-tensors format {unknown or sorted(formats)} is not read; "
            f"expected {' or '.join(_CT_FORMATS)}"
        )
    for gname, g in groups.items():
        w = (g or {}).get("weights") or {}
        fmt = g.get("format") or q.get("format")
        size = w.get("group_size")
        if fmt in _CT_FORMATS and size is not None and size != _CT_FORMATS[fmt][1]:
            raise MXValueError(
                f"{path}: quantization_config.config_groups.{gname}: {fmt} with group_size "
                f"{size}; it is read in groups of {_CT_FORMATS[fmt][1]} only"
            )
    if q.get("kv_cache_scheme"):
        raise MXValueError(f"{path}: compressed-tensors kv_cache_scheme is not read (KV-cache quantization)")
    kinds = [_CT_FORMATS[f][0] for f in sorted(formats)]
    ignore = tuple(str(i) for i in q.get("ignore") or ())
    return Scheme(COMPRESSED, default=kinds[0], exclude=ignore, by_file=len(kinds) > 1)


def _compressed_layout(name: str, files) -> LinearLayout:
    """Both formats in one checkpoint: NVFP4 where the module has its global scale."""
    return _CT_NVFP4 if f"{name}.weight_global_scale" in files.where else _CT_MXFP4


# -- ModelOpt ---------------------------------------------------------------------------------


def _modelopt(path: Path, q: dict) -> Scheme:
    algo = q.get("quant_algo")
    if algo != "NVFP4":
        raise MXValueError(f"{path}: ModelOpt quant_algo {algo!r} is not read; expected 'NVFP4'")
    if q.get("kv_cache_quant_algo"):
        raise MXValueError(
            f"{path}: ModelOpt kv_cache_quant_algo {q['kv_cache_quant_algo']!r} is not read "
            "(KV-cache quantization)"
        )
    size = q.get("group_size", 16)
    if size != 16:
        raise MXValueError(f"{path}: ModelOpt NVFP4 with group_size {size}; NVFP4 takes blocks of 16")
    lay = LinearLayout(
        MODELOPT, NVFP4, 16, "weight", "weight_scale", scales_dtype="F8_E4M3",
        global_scale="weight_scale_2", reciprocal=True, extra=("input_scale",),
    )  # fmt: skip
    exclude = tuple(str(m) for m in q.get("exclude_modules") or q.get("ignore") or ())
    return Scheme(MODELOPT, default=lay, exclude=exclude)


def modelopt_config(folder: Path, config: dict) -> dict | None:
    """ModelOpt's quantization fields: ``quantization_config`` with
    ``quant_method: modelopt``, else ``hf_quant_config.json``'s ``quantization``."""
    q = config.get("quantization_config") or {}
    if q.get("quant_method") == MODELOPT:
        return q
    path = folder / "hf_quant_config.json"
    if not path.exists() or q:
        return None
    try:
        hf = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise MXValueError(f"{path}: cannot read it ({e})") from None
    quant = hf.get("quantization") if isinstance(hf, dict) else None
    if not isinstance(quant, dict):
        raise MXValueError(f"{path}: no 'quantization' object")
    return quant


# -- Quark ------------------------------------------------------------------------------------

_QUARK_DTYPES = {"fp4": _FP4, "fp6_e2m3": "f6E2M3FN", "fp6_e3m2": "f6E3M2FN"}
_QUARK_ACTS = {**_QUARK_DTYPES, "fp8_e4m3": "f8E4M3FN"}


def _quark_mx(where: str, spec) -> str:
    """The element of an OCP MX spec (per_group, 32, e8m0), else refused by name."""
    dtype = spec.get("dtype")
    got = (spec.get("qscheme"), spec.get("group_size"), spec.get("scale_format"))
    if got != ("per_group", 32, "e8m0"):
        raise MXValueError(
            f"{where}: Quark {dtype} with qscheme/group_size/scale_format {got}; read only as OCP "
            "MX ('per_group', 32, 'e8m0')"
        )
    return dtype


def _quark_layer(path: Path, where: str, cfg) -> LinearLayout | None:
    if not isinstance(cfg, dict) or cfg.get("weight") is None:
        return None
    if cfg.get("output_tensors") or cfg.get("bias"):
        raise MXValueError(f"{path}: {where}: Quark output_tensors / bias quantization is not read")
    w = cfg["weight"]
    if isinstance(w, list) or w.get("dtype") not in _QUARK_DTYPES:
        got = [s.get("dtype") for s in w] if isinstance(w, list) else w.get("dtype")
        raise MXValueError(
            f"{path}: {where}: Quark weight dtype {got!r} is not read; expected one of "
            f"{', '.join(_QUARK_DTYPES)} (OCP MX)"
        )
    element = _QUARK_DTYPES[_quark_mx(f"{path}: {where}.weight", w)]
    acts, a = None, cfg.get("input_tensors")
    if a is not None:
        if isinstance(a, list) or a.get("dtype") not in _QUARK_ACTS or not a.get("is_dynamic"):
            got = a if isinstance(a, list) else (a.get("dtype"), a.get("qscheme"), a.get("is_dynamic"))
            raise MXValueError(
                f"{path}: {where}: Quark input_tensors {got!r} is not read; expected dynamic OCP MX "
                f"activations ({', '.join(_QUARK_ACTS)})"
            )
        acts = _QUARK_ACTS[_quark_mx(f"{path}: {where}.input_tensors", a)]
    return LinearLayout(QUARK, element, 32, "weight", "weight_scale", activations=acts)


def _quark(path: Path, q: dict) -> Scheme:
    if (q.get("export") or {}).get("kv_cache_group"):
        raise MXValueError(f"{path}: Quark export.kv_cache_group is not read (KV-cache quantization)")
    fmt = (q.get("export") or {}).get("weight_format", "real_quantized")
    if fmt != "real_quantized":
        raise MXValueError(f"{path}: Quark export weight_format {fmt!r} is not read; expected 'real_quantized'")
    layers = {
        pattern: _quark_layer(path, f"layer_quant_config[{pattern!r}]", cfg)
        for pattern, cfg in (q.get("layer_quant_config") or {}).items()
    }
    for kind, cfg in (q.get("layer_type_quant_config") or {}).items():
        if kind not in ("Linear", "nn.Linear", "torch.nn.Linear") and cfg:
            raise MXValueError(f"{path}: Quark layer_type_quant_config[{kind!r}] is not read")
    typed = (q.get("layer_type_quant_config") or {})
    typed = next((c for c in typed.values() if c), None)
    glob = typed if typed is not None else q.get("global_quant_config")
    default = _quark_layer(path, "global_quant_config", glob)
    exclude = tuple(str(m) for m in q.get("exclude") or ())
    return Scheme(QUARK, layouts=layers, default=default, exclude=exclude)


# -- MLX --------------------------------------------------------------------------------------

_MLX_MODES = {"mxfp4": (_FP4, 4, 32), "mxfp8": ("f8E4M3FN", 8, 32), "nvfp4": (NVFP4, 4, 16)}


def _mlx_layout(path: Path, where: str, q) -> LinearLayout | None:
    if q is False:
        return None
    if not isinstance(q, dict):
        raise MXValueError(f"{path}: {where} is {q!r}; expected an object or false")
    mode = q.get("mode", "affine")
    if mode not in _MLX_MODES:
        raise MXValueError(
            f"{path}: {where}: MLX quantization mode {mode!r} is not read; expected one of "
            f"{', '.join(_MLX_MODES)}"
        )
    element, bits, size = _MLX_MODES[mode]
    got = (q.get("bits", bits), q.get("group_size", size))
    if got != (bits, size):
        raise MXValueError(
            f"{path}: {where}: MLX {mode} with bits/group_size {got}; {mode} is ({bits}, {size})"
        )
    return LinearLayout(MLX, element, size, "weight", "scales", codes_dtype="U32")


def _mlx(path: Path, q: dict) -> Scheme:
    layers = {
        k: _mlx_layout(path, f"quantization[{k!r}]", v) for k, v in q.items() if isinstance(v, (dict, bool))
    }
    default = _mlx_layout(path, "quantization", {k: v for k, v in q.items() if k not in layers})
    return Scheme(MLX, layouts=layers, default=default, embeddings=default)


# -- which family -----------------------------------------------------------------------------


def scheme_of(folder: Path, config: dict) -> Scheme | None:
    """The family of ``config.json`` (and ``hf_quant_config.json``) read here,
    or None (another layout: gpt-oss's, or none)."""
    path = folder / "config.json"
    q = config.get("quantization_config") or {}
    method = q.get("quant_method")
    if method == COMPRESSED:
        return _compressed(path, q)
    if method == QUARK:
        return _quark(path, q)
    if isinstance(config.get("quantization"), dict) and method in (None, MLX):
        return _mlx(path, config["quantization"])
    mo = modelopt_config(folder, config)
    if mo is not None:
        return _modelopt(folder / ("config.json" if q else "hf_quant_config.json"), mo)
    return None

"""Checkpoint folders of the block-scaled families, written here from the tiny
Llama (``tests/llama_cases.py``), and each family's reference dequantization,
for ``test_checkpoint_families.py``.

* **MLX** (``mxfp4`` / ``mxfp8`` / ``nvfp4``): MLX's own ``mx.quantize`` (its
  uint32 codes and uint8 scales as it returns them, mlx-lm's tensor names
  ``weight`` / ``scales`` and config ``quantization``); the reference is
  ``mx.dequantize``.
* **compressed-tensors** ``nvfp4-pack-quantized``: compressed-tensors' own
  qparams (``generate_gparam``, ``calculate_qparams``) and compressor
  (``NVFP4PackedCompressor.compress``); the reference is its ``decompress``.
* **ModelOpt** NVFP4: ``nvidia-modelopt`` is not installed; the file is
  compressed-tensors' NVFP4 renamed as ModelOpt stores it (``weight``,
  ``weight_scale``, ``weight_scale_2 = 1 / weight_global_scale``,
  ``input_scale``), the inverse of compressed-tensors'
  ``ModelOptNvfp4Converter``; the reference is that converter's ``process``
  then the compressor's ``decompress``.
* **Quark** (OCP MX FP4 / FP6): ``amd-quark`` is not installed here; the bytes
  are written per its documented layout (``quark/torch/utils/pack.py``,
  ``Pack_fp4`` / ``Pack_fp6``, read in amd-quark 0.10) from the oracle's
  codes, and the reference decodes them with :func:`quark_unpack`, a numpy
  transcription of those ``unpack`` methods (and vLLM's ``dequant_mxfp6``
  scale rule ``2 ** (e - 127)``).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

#: MLX's modes: (bits, group size).
MLX_MODES = {"mxfp4": (4, 32), "mxfp8": (8, 32), "nvfp4": (4, 16)}


def _quantized(key: str, lm_head: bool = True) -> bool:
    return key.endswith("proj.weight") or (lm_head and key == "lm_head.weight")


def _write(folder, tensors: dict, config: dict, metadata=None) -> None:
    from safetensors.numpy import save_file

    folder.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(folder / "model.safetensors"), metadata=metadata or {"format": "pt"})
    (folder / "config.json").write_text(json.dumps(config))


def mlx_checkpoint(folder, mode: str, seed: int = 0):
    """An mlx-lm style folder of ``mode``: every projection, ``lm_head`` and
    the embedding table quantized by ``mx.quantize``.  Returns ``(model,
    tensors, reference weights by state-dict key)``."""
    mx = pytest.importorskip("mlx.core", reason="mlx not installed (pip install 'mlx[cpu]')")
    from llama_cases import tiny_llama

    model = tiny_llama(seed)
    bits, group = MLX_MODES[mode]
    tensors, ref = {}, {}
    for key, t in model.state_dict().items():
        if _quantized(key) or key == "model.embed_tokens.weight":
            q, s = mx.quantize(mx.array(t.numpy()), group_size=group, bits=bits, mode=mode)
            d = mx.dequantize(q, s, group_size=group, bits=bits, mode=mode, dtype=mx.float32)
            tensors[key], tensors[key[: -len("weight")] + "scales"] = np.array(q), np.array(s)
            ref[key] = torch.from_numpy(np.array(d))
        else:
            tensors[key] = t.detach().numpy().copy()
    config = model.config.to_dict()
    config["quantization"] = config["quantization_config"] = {
        "group_size": group, "bits": bits, "mode": mode,
    }  # fmt: skip
    _write(folder, tensors, config, {"format": "mlx"})
    return model, tensors, ref


def _ct_nvfp4(w: torch.Tensor):
    """compressed-tensors' NVFP4 of one weight: its compressor's state dict."""
    from compressed_tensors.compressors.nvfp4.base import NVFP4PackedCompressor
    from compressed_tensors.quantization import QuantizationScheme
    from compressed_tensors.quantization.quant_scheme import NVFP4
    from compressed_tensors.quantization.utils.helpers import calculate_qparams, generate_gparam

    scheme = QuantizationScheme(targets=["Linear"], **NVFP4)
    gs = generate_gparam(w.min(), w.max())
    blocks = w.reshape(w.shape[0], -1, 16)
    scale, _ = calculate_qparams(blocks.amin(-1), blocks.amax(-1), scheme.weights, global_scale=gs)
    state = {"weight": w, "weight_scale": scale, "weight_global_scale": gs}
    return scheme, NVFP4PackedCompressor.compress(state, scheme)


def _ct_decompress(scheme, state: dict) -> torch.Tensor:
    """compressed-tensors' decompression in f32: its ``unpack_fp4_from_uint8``
    and ``dequantize`` (its compressor's ``decompress`` is the same with the
    codes and the scales in bf16, which rounds the E4M3 scales' quotient)."""
    from compressed_tensors.compressors.nvfp4.helpers import unpack_fp4_from_uint8
    from compressed_tensors.quantization.lifecycle.forward import dequantize

    packed = state["weight_packed"]
    m, n = packed.shape
    codes = unpack_fp4_from_uint8(packed, m, n * 2, dtype=torch.float32)
    return dequantize(
        x_q=codes, scale=state["weight_scale"].to(torch.float32), args=scheme.weights,
        global_scale=state["weight_global_scale"], dtype=torch.float32,
    )  # fmt: skip


def _tensors(state_dict: dict, quantize) -> tuple[dict, dict]:
    tensors, ref = {}, {}
    for key, t in state_dict.items():
        if _quantized(key):
            out, deq = quantize(key[: -len("weight")], t.detach().to(torch.float32))
            tensors.update(out)
            ref[key] = deq
        else:
            tensors[key] = t.detach().numpy().copy()
    return tensors, ref


def compressed_nvfp4_checkpoint(folder, seed: int = 0):
    """A compressed-tensors ``nvfp4-pack-quantized`` folder; ``(model, tensors
    as torch, reference weights)``."""
    pytest.importorskip("compressed_tensors", reason="compressed-tensors not installed")
    from llama_cases import tiny_llama
    from safetensors.torch import save_file

    model = tiny_llama(seed)

    def quantize(base, w):
        scheme, state = _ct_nvfp4(w)
        out = {base + k: v.contiguous() for k, v in state.items()}
        out[base + "input_global_scale"] = torch.tensor([100.0])  # static W4A4's, read and checked
        return out, _ct_decompress(scheme, state)

    tensors, ref = _tensors(model.state_dict(), quantize)
    tensors = {k: torch.as_tensor(v).contiguous() for k, v in tensors.items()}
    folder.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    config = model.config.to_dict()
    group = {
        "targets": ["Linear"], "format": "nvfp4-pack-quantized",
        "weights": {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16,
                    "symmetric": True, "dynamic": False},
    }  # fmt: skip
    config["quantization_config"] = {
        "quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized",
        "config_groups": {"group_0": group}, "ignore": [],
    }  # fmt: skip
    (folder / "config.json").write_text(json.dumps(config))
    return model, tensors, ref


def modelopt_checkpoint(folder, seed: int = 0, *, hf_quant_config: bool = False):
    """A ModelOpt NVFP4 folder (the module docstring): ``quantization_config``
    with ``quant_method: modelopt``, or (``hf_quant_config``) ModelOpt's
    ``hf_quant_config.json`` beside a config without one."""
    pytest.importorskip("compressed_tensors", reason="compressed-tensors not installed")
    from compressed_tensors.entrypoints.convert.converters.modelopt_nvfp4 import (
        ModelOptNvfp4Converter,
    )
    from llama_cases import tiny_llama
    from safetensors.torch import save_file

    model = tiny_llama(seed)

    def quantize(base, w):
        scheme, state = _ct_nvfp4(w)
        mo = {
            base + "weight": state["weight_packed"],
            base + "weight_scale": state["weight_scale"],
            base + "weight_scale_2": (1 / state["weight_global_scale"]).reshape(()),
            base + "input_scale": torch.tensor(0.25, dtype=torch.float32),
        }
        back = ModelOptNvfp4Converter(targets=["re:.*proj$", "lm_head"]).process(dict(mo))
        state = {k[len(base):]: v for k, v in back.items() if k.startswith(base)}
        return mo, _ct_decompress(scheme, state)

    tensors, ref = _tensors(model.state_dict(), quantize)
    tensors = {k: torch.as_tensor(v).contiguous() for k, v in tensors.items()}
    folder.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    config = model.config.to_dict()
    q = {"quant_algo": "NVFP4", "group_size": 16, "exclude_modules": []}
    if hf_quant_config:
        (folder / "hf_quant_config.json").write_text(
            json.dumps({"producer": {"name": "modelopt"}, "quantization": q})
        )
    else:
        config["quantization_config"] = {"quant_method": "modelopt", **q}
    (folder / "config.json").write_text(json.dumps(config))
    return model, tensors, ref


# -- Quark ------------------------------------------------------------------------------------

#: Quark's dtype names -> (MXArray element, e bits, m bits).
QUARK_DTYPES = {"fp4": ("f4E2M1FN", 2, 1), "fp6_e2m3": ("f6E2M3FN", 2, 3), "fp6_e3m2": ("f6E3M2FN", 3, 2)}


def quark_unpack(packed: np.ndarray, scales: np.ndarray, dtype: str) -> np.ndarray:
    """Quark's decoding of a weight (numpy transcription of ``Pack_fp4.unpack``
    / ``Pack_fp6.unpack`` and the E8M0 scale ``2 ** (e - 127)``), f32."""
    _, e_bits, m_bits = QUARK_DTYPES[dtype]
    p = packed.astype(np.int32)
    if dtype == "fp4":
        v = np.stack([p & 0x0F, (p >> 4) & 0x0F], -1).reshape(p.shape[0], -1)
        bits = ((v & 0x07) << 22) | ((v & 0x08) << 28)
        vals = bits.astype(np.uint32).view(np.float32) * np.float32(2.0 ** (127 - 1))
    else:
        b = p.reshape(p.shape[0], -1, 3)
        b2, b1, b0 = b[..., 0], b[..., 1], b[..., 2]
        v0, v1 = b2 & 0x3F, ((b1 & 0x0F) << 2) + (b2 >> 6)
        v2, v3 = ((b0 & 0x03) << 4) + (b1 >> 4), b0 >> 2
        v = np.stack([v0, v1, v2, v3], -1).reshape(p.shape[0], -1)
        ebias, mbias = (1 << (e_bits - 1)) - 1, 23 - m_bits
        bits = ((v & 0x1F) << mbias) | ((v & 0x20) << 26)
        vals = bits.astype(np.uint32).view(np.float32) * np.float32(2.0 ** (127 - ebias))
    scale = np.exp2(scales.astype(np.float32) - 127)
    return (vals.reshape(*scales.shape, 32) * scale[..., None]).reshape(vals.shape).astype(np.float32)


def quark_spec(dtype: str, dynamic: bool) -> dict:
    return {
        "dtype": dtype, "qscheme": "per_group", "group_size": 32, "ch_axis": -1,
        "scale_format": "e8m0", "scale_calculation_mode": "even", "round_method": "half_even",
        "is_dynamic": dynamic, "observer_cls": "PerBlockMXObserver", "symmetric": None,
    }  # fmt: skip


def quark_config(weight: str, activations: str | None, **over) -> dict:
    layer = {"weight": quark_spec(weight, False), "bias": None, "output_tensors": None,
             "input_tensors": None if activations is None else quark_spec(activations, True)}  # fmt: skip
    return {
        "quant_method": "quark", "version": "0.10",
        "export": {"kv_cache_group": [], "pack_method": "reorder", "weight_format": "real_quantized",
                   "min_kv_scale": 0.0, "weight_merge_groups": None},
        "global_quant_config": layer, "layer_quant_config": {}, "layer_type_quant_config": {},
        "exclude": ["lm_head"], "algo_config": None, "quant_mode": "eager_mode", **over,
    }  # fmt: skip


def quark_checkpoint(folder, weight: str, activations: str | None, seed: int = 0):
    """A Quark OCP MX folder (the module docstring): every projection's weight
    in ``weight`` (``fp4`` / ``fp6_e2m3`` / ``fp6_e3m2``), ``lm_head`` excluded."""
    from llama_cases import tiny_llama

    from mlir_mx.torch import quantize_weight

    model = tiny_llama(seed)
    element = QUARK_DTYPES[weight][0]
    tensors, ref = {}, {}
    for key, t in model.state_dict().items():
        if key.endswith("proj.weight"):
            w = quantize_weight(t, element, 32)
            packed, scales = w.packed_codes().copy(), w.scales.view(np.uint8).copy()
            tensors[key], tensors[key[: -len("weight")] + "weight_scale"] = packed, scales
            ref[key] = torch.from_numpy(quark_unpack(packed, scales, weight))
        else:
            tensors[key] = t.detach().numpy().copy()
    config = model.config.to_dict()
    config["quantization_config"] = quark_config(weight, activations)
    _write(folder, tensors, config)
    return model, tensors, ref


def reference_model(model, ref: dict, activations: str | None = None):
    """transformers' model of ``model``'s config with the reference weights
    (f32); with ``activations``, each quantized linear's input rounded to
    that MX format first (the oracle's quantize/dequantize, blocks of 32)."""
    from llama_cases import tiny_llama

    from mlir_mx import oracle

    out = tiny_llama(0, **{k: getattr(model.config, k) for k in ("tie_word_embeddings",)})
    state = {k: ref.get(k, v).to(torch.float32) for k, v in model.state_dict().items()}
    out.load_state_dict(state, strict=True)
    if activations is not None:
        def qdq(module, args):
            x = args[0].detach().to(torch.float32).numpy()
            q = oracle.quantize(x, activations, 32, axis=-1).dequantize()
            return (torch.from_numpy(np.asarray(q, np.float32)),)

        for name, m in out.named_modules():
            if name.endswith("proj"):
                m.register_forward_pre_hook(qdq)
    return out.eval()

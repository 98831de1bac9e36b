"""The ``config.json`` of a saved MX checkpoint, one for both saves:
:func:`~mlir_mx.torch.save_pretrained` and transformers' ``model.save_pretrained``
(through :class:`~mlir_mx.torch.transformers_quantizer.MXHfQuantizer`)."""

from __future__ import annotations

import torch

__all__ = ["COMPRESSED", "GPT_OSS", "quantization_config", "saved_config"]

#: The two layouts, by the ``quant_method`` of their ``quantization_config``.
GPT_OSS, COMPRESSED = "mxfp4", "compressed-tensors"
_BLOCK = 32


def saved_config(model, layout: str) -> dict:
    """``model.config`` as both saves write it: the model's class and dtype set
    on it, its defaults left out (what transformers' own ``save_pretrained``
    does), and a ``quantization_config`` of ``layout``: the one it holds, else
    (a model ``quantize_`` converted, or one transformers loaded with
    ``MXConfig``) :func:`quantization_config`."""
    model.config.architectures = [type(model).__name__]
    model.config.dtype = str(model.dtype).split(".")[1]
    config = model.config.to_diff_dict()
    if (config.get("quantization_config") or {}).get("quant_method") != layout:
        config["quantization_config"] = quantization_config(model, layout)
    return config


def quantization_config(model, layout: str) -> dict:
    """The ``quantization_config`` of a model whose MX layers ``quantize_`` made:
    gpt-oss's (the modules kept as they are: every other leaf with weights) or
    compressed-tensors' ``mxfp4-pack-quantized`` (the ``nn.Linear`` layers kept
    in ``ignore``)."""
    if layout == GPT_OSS:
        kept = sorted(
            {
                n
                for n, m in model.named_modules()
                if isinstance(m, torch.nn.Linear) or isinstance(m, torch.nn.Embedding)
            }
        )
        return {"quant_method": GPT_OSS, "modules_to_not_convert": kept}
    kept = sorted(n for n, m in model.named_modules() if type(m) is torch.nn.Linear)
    weights = {
        "num_bits": 4,
        "type": "float",
        "strategy": "group",
        "group_size": _BLOCK,
        "symmetric": True,
        "scale_dtype": "torch.uint8",
    }
    group = {"targets": ["Linear"], "weights": weights, "format": "mxfp4-pack-quantized"}
    return {
        "quant_method": COMPRESSED,
        "format": "mxfp4-pack-quantized",
        "config_groups": {"group_0": group},
        "ignore": kept,
    }

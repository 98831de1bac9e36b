"""A tiny gpt-oss (2 layers, hidden 64, 4 experts, top-2; random weights from a
fixed seed, nothing downloaded) for the ``mlir_mx.torch`` MoE tests."""

from __future__ import annotations

import pytest
import torch

TINY_GPT_OSS = dict(
    hidden_size=64,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    vocab_size=256,
    num_local_experts=4,
    num_experts_per_tok=2,
    max_position_embeddings=256,
    sliding_window=8,
    rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
)


def transformers_or_skip():
    return pytest.importorskip(
        "transformers", reason="transformers not installed (pip install 'mlir-mx[test]')"
    )


def tiny_config(**overrides):
    transformers = transformers_or_skip()
    return transformers.GptOssConfig(**{**TINY_GPT_OSS, **overrides})


def tiny_gpt_oss(seed: int = 0, **overrides):
    """A ``GptOssForCausalLM`` of the tiny config in f32, eval mode; the experts'
    weights scaled up (init std 0.02 would leave every gate near 0) and the
    router's so that routing is decided."""
    transformers = transformers_or_skip()
    torch.manual_seed(seed)
    model = transformers.GptOssForCausalLM(tiny_config(**overrides)).eval()
    with torch.no_grad():
        for layer in model.model.layers:
            ex = layer.mlp.experts
            for p in (ex.gate_up_proj, ex.down_proj):
                p.normal_(0.0, 0.15)
            ex.gate_up_proj_bias.normal_(0.0, 0.1)
            ex.down_proj_bias.normal_(0.0, 0.1)
            layer.mlp.router.weight.normal_(0.0, 0.3)
    return model


def prompt(n: int = 12, vocab: int = TINY_GPT_OSS["vocab_size"], seed: int = 1):
    return torch.randint(0, vocab, (1, n), generator=torch.Generator().manual_seed(seed))


def write_gpt_oss_checkpoint(model, folder, *, shards: int = 1):
    """Write ``model`` (a ``GptOssForCausalLM``) as gpt-oss's checkpoints are:
    experts MXFP4 (``*_blocks`` uint8 ``(E, out, in/32, 16)``, ``*_scales`` uint8
    ``(E, out, in/32)``, quantized here by ``mlir_mx.quantize``), every other
    tensor bf16, ``quantization_config`` ``mxfp4`` with ``modules_to_not_convert``;
    ``shards`` > 1: that many files and ``model.safetensors.index.json``."""
    import json

    from safetensors.torch import save_file

    import mlir_mx

    tensors = {}
    for key, t in model.state_dict().items():
        if key.endswith(("gate_up_proj", "down_proj")):
            e = t.shape[0]
            codes, scales = [], []
            for i in range(e):
                w = mlir_mx.quantize(t[i].t().contiguous().float().numpy(), "f4E2M1FN", 32)
                out = w.shape[0]
                codes.append(torch.from_numpy(w.packed_codes().reshape(out, -1, 16).copy()))
                scales.append(torch.from_numpy(w.scales.view("uint8").copy()))
            tensors[key + "_blocks"] = torch.stack(codes)
            tensors[key + "_scales"] = torch.stack(scales)
        else:
            tensors[key] = t.detach().to(torch.bfloat16).contiguous()
    folder.mkdir(parents=True, exist_ok=True)
    names = sorted(tensors)
    files = {k: f"model-{i % shards + 1:05d}-of-{shards:05d}.safetensors" for i, k in enumerate(names)}
    if shards == 1:
        files = dict.fromkeys(names, "model.safetensors")
    for f in sorted(set(files.values())):
        save_file({k: tensors[k] for k in names if files[k] == f}, str(folder / f),
                  metadata={"format": "pt"})  # fmt: skip
    if shards > 1:
        index = {"metadata": {"total_size": 0}, "weight_map": files}
        (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    config = model.config.to_dict()
    config["quantization_config"] = {
        "quant_method": "mxfp4",
        "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                                   "model.embed_tokens", "lm_head"],
    }  # fmt: skip
    (folder / "config.json").write_text(json.dumps(config))
    return tensors

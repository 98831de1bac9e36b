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

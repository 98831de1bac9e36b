"""A tiny Llama built from a config (2 layers, hidden 64; random weights from a
fixed seed, nothing downloaded), for the ``mlir_mx.torch`` tests and ``mx-bench --model``'s."""

from __future__ import annotations

import pytest
import torch

TINY = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    vocab_size=256,
    max_position_embeddings=128,
)


def tiny_llama(seed: int = 0, **overrides):
    """A ``LlamaForCausalLM`` of the tiny config, in eval mode."""
    transformers = pytest.importorskip(
        "transformers", reason="transformers not installed (pip install 'mlir-mx[test]')"
    )
    torch.manual_seed(seed)
    config = transformers.LlamaConfig(**{**TINY, **overrides})
    return transformers.LlamaForCausalLM(config).eval()


def prompt(n: int = 16, vocab: int = TINY["vocab_size"], seed: int = 1):
    """``(1, n)`` token ids."""
    return torch.randint(0, vocab, (1, n), generator=torch.Generator().manual_seed(seed))

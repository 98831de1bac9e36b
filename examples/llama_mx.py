"""A Llama with MX weights through ``mlir_mx.torch``: ``quantize_``, then ``generate``.

    python examples/llama_mx.py [--layers 2] [--weights mxfp4] [--activations i8]
                                [--prompt 32] [--tokens 32] [--threads T] [--check]
                                [--save DIR] [--tiny]

Builds a ``transformers`` ``LlamaForCausalLM`` of TinyLlama-1.1B's shape with
``--layers`` layers (default 2: a small model; random weights from a fixed
seed, nothing downloaded; ``--tiny``: a toy config), converts every
``nn.Linear`` to an ``MXLinear`` in place, compiles its kernels, then runs
``model.generate`` greedily, timing the prefill and the decode (compile time
apart)::

    from mlir_mx.torch import precompile, quantize_
    quantize_(model, element="mxfp4")        # every nn.Linear, lm_head included
    precompile(model)                        # the kernels, before any timing
    out = model.generate(input_ids, max_new_tokens=32, do_sample=False)

``--save DIR`` writes the converted model with ``mlir_mx.torch.save_pretrained``
and loads it back with ``mlir_mx.torch.from_pretrained`` (the same tokens).
``--check`` also builds the correctness reference (the f32 model with each
weight replaced by its dequantized MX weight) and checks the logits against
its bound and the greedy tokens against its own (``docs/torch.md``).
For a model folder with a tokenizer, ``mx-generate PATH --prompt "..."`` does
all of this from the command line.  Needs torch and transformers
(``pip install 'mlir-mx[torch]'``).
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
import time

import numpy as np
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from mlir_mx.errors import MXError
from mlir_mx.host import check_threads
from mlir_mx.linear import activations_format
from mlir_mx.numerics import element_format
from mlir_mx.tools.driver import check_fits
from mlir_mx.torch import (
    dequantize_,
    from_pretrained,
    greedy,
    logit_bound,
    precompile,
    quantize_,
    save_pretrained,
)
from mlir_mx.torch.generate import GenerationClock

TINYLLAMA = dict(hidden_size=2048, intermediate_size=5632, num_attention_heads=32,
                 num_key_value_heads=4, vocab_size=32000, max_position_embeddings=2048,
                 rms_norm_eps=1e-5, tie_word_embeddings=False)  # fmt: skip
TINY = dict(hidden_size=128, intermediate_size=256, num_attention_heads=4,
            num_key_value_heads=2, vocab_size=512, max_position_embeddings=256)  # fmt: skip


def build(layers: int, tiny: bool, seed: int) -> LlamaForCausalLM:
    """The f32 model, random weights from ``seed``."""
    torch.manual_seed(seed)
    config = LlamaConfig(**(TINY if tiny else TINYLLAMA), num_hidden_layers=layers)
    model = LlamaForCausalLM(config).eval()
    model.generation_config.eos_token_id = None  # random weights: no end of text, every token
    return model


class OneLineParser(argparse.ArgumentParser):
    """argparse whose usage errors are one ``llama_mx.py: error: ...`` line, exit 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


def check_args(ap: argparse.ArgumentParser, ns) -> None:
    """Every argument checked before any work: a bad one is one
    ``llama_mx.py: error: ...`` line and exit status 2 (``ap.error``)."""
    for flag, value, low in (("--layers", ns.layers, 1), ("--prompt", ns.prompt, 1),
                             ("--tokens", ns.tokens, 0), ("--seed", ns.seed, 0)):  # fmt: skip
        if value < low:
            ap.error(f"{flag}: expected {low} or more, got {value}")
    if ns.seed >= 2**63 - 1:
        ap.error(f"--seed: expected less than 2**63 - 1, got {ns.seed}")
    config = TINY if ns.tiny else TINYLLAMA
    checks = [("--weights", lambda: element_format(ns.weights)),
              ("--activations", lambda: activations_format(ns.activations)),
              ("--threads", lambda: ns.threads is None or check_threads(ns.threads, "")),
              ("", lambda: check_fits(f"--layers {ns.layers}",
                                      4 * (2 if ns.check else 1) * params(ns.layers, config)))]  # fmt: skip
    for flag, check in checks:
        try:
            check()
        except MXError as err:  # "element: ..." / ": expected ...": named by the flag instead
            why = str(err).removeprefix("activations: ").removeprefix("element: ").lstrip(": ")
            ap.error(f"{flag}: {why}" if flag else why)
    if ns.save:
        folder = os.path.dirname(os.path.abspath(ns.save))
        if not os.path.isdir(folder) or not os.access(folder, os.W_OK):
            ap.error(f"--save: cannot write '{ns.save}': no writable folder '{folder}'")


def params(layers: int, c: dict) -> int:
    """The model's parameter count (its f32 bytes / 4)."""
    h, i, v = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    kv = h * c["num_key_value_heads"] // c["num_attention_heads"]
    return layers * (2 * h * h + 2 * h * kv + 3 * h * i) + 2 * v * h


def generate(model, ids: torch.Tensor, tokens: int, show: bool = True) -> np.ndarray:
    """``tokens`` greedy tokens after ``ids``; ``show``: the prefill and decode
    figures printed.  0 tokens: none, the model not run."""
    if tokens == 0:
        return np.zeros(0, dtype=np.int64)
    clock = GenerationClock(None)  # notes when each token comes
    with torch.inference_mode():
        clock.start()
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=tokens,
                             do_sample=False, streamer=clock)  # fmt: skip
    if show:
        print("\n".join(clock.figures(ids.shape[1])))
    return out[0, ids.shape[1] :].numpy()


def main(argv=None) -> int:
    ap = OneLineParser(prog="llama_mx.py", description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--tiny", action="store_true", help="a toy config (hidden 128)")
    ap.add_argument("--weights", default="mxfp4", help="MX element format (mxfp4)")
    ap.add_argument("--activations", help="MX format activations are quantized to per call (i8)")
    ap.add_argument("--prompt", type=int, default=32, help="prompt tokens (32)")
    ap.add_argument("--tokens", type=int, default=32, help="greedy tokens (32)")
    ap.add_argument("--threads", type=int, help="torch.set_num_threads (our layers follow it)")
    ap.add_argument("--check", action="store_true", help="compare with the reference")
    ap.add_argument("--save", help="save_pretrained the converted model here, and reload it")
    ap.add_argument("--seed", type=int, default=0)
    ns = ap.parse_args(argv)
    check_args(ap, ns)
    if ns.threads:
        torch.set_num_threads(ns.threads)

    model = build(ns.layers, ns.tiny, ns.seed)
    reference = copy.deepcopy(model) if ns.check else None
    t0 = time.perf_counter()
    print(quantize_(model, element=ns.weights, activations=ns.activations))
    print(model.model.layers[0].mlp.down_proj)  # an MXLinear: its format, bits per weight
    t1 = time.perf_counter()
    precompile(model)
    print(f"quantize_ {t1 - t0:.1f} s, compile {time.perf_counter() - t1:.1f} s (not timed below)")

    ids = torch.randint(0, model.config.vocab_size, (1, ns.prompt),
                        generator=torch.Generator().manual_seed(ns.seed + 1))  # fmt: skip
    generate(model, ids[:, :4], 2, show=False)  # a warm-up: torch's first calls
    tokens = generate(model, ids, ns.tokens)
    print(f"{ns.tokens} greedy tokens: {tokens[:16]} ...")
    ok = True
    if ns.save:
        save_pretrained(model, ns.save)
        reloaded = from_pretrained(ns.save)
        reloaded.generation_config.eos_token_id = None
        same = np.array_equal(generate(reloaded, ids, ns.tokens, show=False), tokens)
        print(f"saved to {ns.save}; reloaded, the same tokens: {'yes' if same else 'NO'}")
        ok &= same
    if reference is None:
        return 0 if ok else 1
    dequantize_(reference, element=ns.weights)
    with torch.inference_mode():
        ratio = logit_bound(reference, ids).check(model(ids).logits)
    n = min(32, ns.tokens)  # 0 tokens: the logits checked alone
    same = bool(np.array_equal(tokens[:n], greedy(reference, ids, n)))
    note = "activations quantized: reported, no bound applies" if ns.activations else "<= 1: within the bound"
    print(f"logits vs the reference: max |diff| / bound = {ratio:.3g} ({note})")
    print(f"first {n} greedy tokens equal to the reference's: {'yes' if same else 'NO'}")
    if ns.activations:  # quantized activations: reported, not held to the bound
        return 0 if ok else 1
    return 0 if ok and ratio <= 1.0 and same else 1


if __name__ == "__main__":
    sys.exit(main())

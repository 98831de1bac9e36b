"""A Llama with MX weights, end to end, through ``mlir_mx.torch``.

    python examples/llama_mx.py [--layers 8] [--weights f4E2M1FN] [--activations i8]
                                [--tokens 64] [--check]

Builds a ``transformers`` ``LlamaForCausalLM`` of TinyLlama-1.1B's shape from a
config (random weights from a fixed seed: nothing is downloaded; ``--layers``
shrinks it, ``--tiny`` makes it a toy), converts every ``nn.Linear`` to an
``MXLinear`` in place, and generates greedily::

    from mlir_mx.torch import quantize_
    summary = quantize_(model, element="f4E2M1FN")     # lm_head included
    with torch.inference_mode():
        out = model(input_ids, use_cache=True)

``--activations i8`` quantizes each layer's activations to MXINT8 per call
(W4A8 on the CPU's integer dot units; the layers then hold the dot kernels'
records alone, still 4.25 bits per weight).  ``--check`` also builds the
correctness reference (the f32 model with each converted weight replaced by its
dequantized MX weight) and checks the logits against its bound and the greedy
tokens against its own (``docs/torch.md``); with ``--activations`` it reports
the difference only (the bound is for exact activations).
``--save PATH`` writes the converted model's ``state_dict`` (``uint8`` codes and
scales).  ``mx-bench --model`` times the same model against torch f32/bf16.
Needs torch and transformers (``pip install 'mlir-mx[torch]'``).
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
from mlir_mx.torch import dequantize_, greedy, logit_bound, quantize_

TINYLLAMA = dict(hidden_size=2048, intermediate_size=5632, num_attention_heads=32,
                 num_key_value_heads=4, vocab_size=32000, max_position_embeddings=2048,
                 rms_norm_eps=1e-5, tie_word_embeddings=False)  # fmt: skip
TINY = dict(hidden_size=128, intermediate_size=256, num_attention_heads=4,
            num_key_value_heads=2, vocab_size=512, max_position_embeddings=256)  # fmt: skip


def build(layers: int, tiny: bool, seed: int) -> LlamaForCausalLM:
    """The f32 model, random weights from ``seed``."""
    torch.manual_seed(seed)
    config = LlamaConfig(**(TINY if tiny else TINYLLAMA), num_hidden_layers=layers)
    return LlamaForCausalLM(config).eval()


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


def main(argv=None) -> int:
    ap = OneLineParser(prog="llama_mx.py", description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=22)
    ap.add_argument("--tiny", action="store_true", help="a toy config (hidden 128)")
    ap.add_argument("--weights", default="f4E2M1FN", help="MX element format (f4E2M1FN)")
    ap.add_argument("--activations", help="MX format activations are quantized to per call (i8)")
    ap.add_argument("--prompt", type=int, default=128, help="prompt tokens (128)")
    ap.add_argument("--tokens", type=int, default=64, help="greedy tokens (64)")
    ap.add_argument("--threads", type=int, help="torch.set_num_threads (our layers follow it)")
    ap.add_argument("--check", action="store_true", help="compare with the reference")
    ap.add_argument("--save", help="write the converted model's state_dict here")
    ap.add_argument("--seed", type=int, default=0)
    ns = ap.parse_args(argv)
    check_args(ap, ns)
    if ns.threads:
        torch.set_num_threads(ns.threads)

    model = build(ns.layers, ns.tiny, ns.seed)
    reference = copy.deepcopy(model) if ns.check else None
    t0 = time.perf_counter()
    summary = quantize_(model, element=ns.weights, activations=ns.activations)
    print(f"{summary}\n  ({time.perf_counter() - t0:.1f} s)")
    print(model.model.layers[0].mlp.down_proj)

    ids = torch.randint(0, model.config.vocab_size, (1, ns.prompt),
                        generator=torch.Generator().manual_seed(ns.seed + 1))  # fmt: skip
    greedy(model, ids, 2)  # compiles our kernels (prefill and decode) before the timing
    with torch.inference_mode():
        t0 = time.perf_counter()
        model(ids, logits_to_keep=1)
        print(f"prefill of {ns.prompt} tokens: {1e3 * (time.perf_counter() - t0):.0f} ms")
    t0 = time.perf_counter()
    tokens = greedy(model, ids, ns.tokens)
    print(f"{ns.tokens} greedy tokens in {time.perf_counter() - t0:.2f} s: {tokens[:16]} ...")

    if ns.save:
        torch.save(model.state_dict(), ns.save)
        print(f"saved the state_dict (uint8 codes and scales) to {ns.save}")
    if reference is None:
        return 0
    dequantize_(reference, element=ns.weights)
    lb = logit_bound(reference, ids)
    with torch.inference_mode():
        ratio = lb.check(model(ids).logits)
    n = min(32, ns.tokens)
    same = bool(np.array_equal(tokens[:n], greedy(reference, ids, n)))
    note = (
        "activations quantized: reported, no bound applies"
        if ns.activations
        else "<= 1: within the bound"
    )
    print(f"logits vs the reference: max |diff| / bound = {ratio:.3g} ({note})")
    print(f"first {n} greedy tokens equal to the reference's: {'yes' if same else 'NO'}")
    if ns.activations:  # quantized activations: reported, not held to the bound
        return 0
    return 0 if ratio <= 1.0 and same else 1


if __name__ == "__main__":
    sys.exit(main())

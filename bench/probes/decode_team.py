"""Decode ms/token of a 4-layer TinyLlama-shaped MXFP4 model on one team
(docs/library.md, "Threads"):

    python bench/probes/decode_team.py {pool,openmp,main} THREADS

("main": the tree on PYTHONPATH as it is, for a checkout from before
``set_team``).  Median of 40 one-token steps after 8 warm-up steps."""

import statistics
import sys
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from mlir_mx.torch import quantize_

team, threads = sys.argv[1], int(sys.argv[2])
if team != "main":
    from mlir_mx.execution.threads import set_team

    set_team(team)
torch.manual_seed(0)
cfg = LlamaConfig(hidden_size=2048, intermediate_size=5632, num_hidden_layers=4,
                  num_attention_heads=32, num_key_value_heads=4, vocab_size=32000)  # fmt: skip
m = LlamaForCausalLM(cfg).eval()
quantize_(m, element="mxfp4")
torch.set_num_threads(threads)
ids = torch.randint(0, 32000, (1, 16))
with torch.inference_mode():
    m.generate(ids, max_new_tokens=8, do_sample=False, min_new_tokens=8)
    out = m(ids, use_cache=True)
    past, tok = out.past_key_values, out.logits[:, -1:].argmax(-1)
    steps = []
    for _ in range(48):
        t = time.perf_counter()
        out = m(tok, past_key_values=past, use_cache=True)
        steps.append(time.perf_counter() - t)
        past, tok = out.past_key_values, out.logits[:, -1:].argmax(-1)
print(f"{team} threads={threads}: median {1e3 * statistics.median(steps[8:]):.2f} ms/token")

"""A bf16 Llama's prefill with ``Linear``'s AMX hook on and off, interleaved
in one process (issue 51; ``mlir_mx.linear.amx_linear``): TinyLlama's shape
with LAYERS layers (random weights), ``model.to(torch.bfloat16)`` then
``quantize_(model, "f4E2M1FN")``, a 128-token prompt, 1 thread; each round
one prefill with ``MLIR_MX_AMX=1`` and one with ``=0``.  Thread CPU time and
wall time, medians.  ``--paths`` also prints, per linear, the share of its
(row, block)s failing the guard on the prompt and the path its call took.

    python bench/probes/amx_llama_prefill.py [LAYERS] [--rounds 7] [--paths]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np
import torch
from transformers import LlamaForCausalLM

from mlir_mx.linear import amx_linear
from mlir_mx.linear.amx_prepare import prepare_activations
from mlir_mx.torch import quantize_
from mlir_mx.torch.module import MXLinear
from mlir_mx_bench.models.llama.worker import llama_config


def prefill(model, ids, env: str):
    os.environ[amx_linear.ENV] = env
    w0, c0 = time.perf_counter(), time.thread_time()
    with torch.no_grad():
        model(ids, logits_to_keep=1)
    return (time.thread_time() - c0) * 1e3, (time.perf_counter() - w0) * 1e3


def print_paths(model, ids) -> None:
    seen = {}

    def hook(mod, inp, _out):
        x = np.ascontiguousarray(inp[0].reshape(-1, inp[0].shape[-1]).float().numpy())
        found = amx_linear.amx_matmul_of(mod.linear)
        if found is None:
            seen[mod] = "not eligible"
            return
        p = prepare_activations(x, found[1], 1.0)
        share = p.failing / (x.size // 32)
        seen[mod] = f"{100 * share:5.1f} % failing, took {amx_linear.last_path(mod.linear)}"

    names = {m: n for n, m in model.named_modules() if isinstance(m, MXLinear)}
    handles = [m.register_forward_hook(hook) for m in names]
    prefill(model, ids, "1")
    for h in handles:
        h.remove()
    for m, n in names.items():
        print(f"  {n:40s} {seen.get(m)}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("layers", nargs="?", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--paths", action="store_true")
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = LlamaForCausalLM(llama_config(args.layers)).eval().to(torch.bfloat16)
    quantize_(model, "f4E2M1FN")
    ids = torch.randint(0, 32000, (1, 128))
    prefill(model, ids, "1")  # compiles, prepares the weights for the tiles
    prefill(model, ids, "0")
    if args.paths:
        print_paths(model, ids)
    times = {"1": [], "0": []}
    for _ in range(args.rounds):
        for env in times:
            times[env].append(prefill(model, ids, env))
    print(f"{args.layers} layers, 128-token prefill, 1 thread, median of {args.rounds} "
          "(ms: thread CPU / wall)")  # fmt: skip
    for env, ts in times.items():
        label = "AMX hook" if env == "1" else "MLIR_MX_AMX=0"
        cpu, wall = statistics.median(t[0] for t in ts), statistics.median(t[1] for t in ts)
        print(f"  {label:15s} {cpu:8.1f} / {wall:8.1f}")


if __name__ == "__main__":
    main()

"""Decode steps of torch's f32 model and of converted copies, alternating in
one process: the ratio of their tokens/s, with the host's drift cancelled.

``mx-bench --model`` runs each row in a process of its own, one after the
other (for RSS, the first forward and the default environment as users run
it); on a shared host whose speed drifts within minutes, its ratios move with
that drift.  Here the f32 model (TinyLlama's shape, ``--layers``, random
weights) and one converted copy per row take decode steps in turn, on the
same prompt and KV-cache lengths, so every ratio compares steps seconds apart.

    python bench/probes/decode_interleaved.py --layers 8 --threads 1,2 --rows mxfp4,mxfp4-i8,mxfp8

``--rows bf16,...`` adds torch's bf16 model (and a "vs bf16" column);
``--emulate avx2`` runs the probe again with every library capped at AVX2,
as ``mx-bench --emulate avx2`` does (``mlir_mx_bench.emulate``).
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import subprocess
import sys
import time

import torch

from mlir_mx_bench.emulate import EMULATIONS, MARK, active
from mlir_mx_bench.models.llama.worker import llama_config

#: row -> quantize_ arguments (None: torch's own bf16 model)
ROWS = {
    "bf16": None,
    "mxfp4": dict(element="f4E2M1FN"),
    "mxfp4-i8": dict(element="f4E2M1FN", activations="i8"),
    "mxfp4-fused": dict(element="f4E2M1FN", fuse=True),
    "mxfp4-i8-fused": dict(element="f4E2M1FN", activations="i8", fuse=True),
    "mxfp8": dict(element="f8E4M3FN"),
}


class Decoder:
    """One model's greedy decode after a 128-token prompt, one step at a time."""

    def __init__(self, model, ids):
        self.model, self.ids = model, ids
        self.restart()

    def restart(self) -> None:
        with torch.inference_mode():
            out = self.model(self.ids, use_cache=True, logits_to_keep=1)
        self.cache, self.next = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True)

    def step(self) -> float:
        with torch.inference_mode():
            t0 = time.perf_counter()
            out = self.model(self.next, past_key_values=self.cache, use_cache=True, logits_to_keep=1)
            dt = time.perf_counter() - t0
        self.cache, self.next = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True)
        return dt


def main() -> None:
    from mlir_mx.torch import quantize_

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--threads", default="1,2")
    p.add_argument("--rows", default="mxfp4,mxfp4-i8,mxfp8")
    p.add_argument("--steps", type=int, default=48, help="decode steps per model and round")
    p.add_argument("--rounds", type=int, default=2, help="restarts from the prompt")
    p.add_argument("--emulate", choices=list(EMULATIONS), help="cap every library at this ISA")
    a = p.parse_args()
    if a.emulate and active() != a.emulate:
        env = {**os.environ, **EMULATIONS[a.emulate][1], MARK: a.emulate}
        sys.exit(subprocess.run([sys.executable, __file__, *sys.argv[1:]], env=env).returncode)
    torch.manual_seed(0)
    base = __import__("transformers").LlamaForCausalLM(llama_config(a.layers)).eval()
    models = {"f32": base}
    for row in a.rows.split(","):
        models[row] = copy.deepcopy(base)
        if ROWS[row] is None:
            models[row].to(torch.bfloat16)
        else:
            quantize_(models[row], **ROWS[row])
    ids = torch.randint(0, 32000, (1, 128), generator=torch.Generator().manual_seed(1))
    for threads in (int(t) for t in a.threads.split(",")):
        torch.set_num_threads(threads)
        decoders = {name: Decoder(m, ids) for name, m in models.items()}  # warms up each
        steps: dict[str, list[float]] = {name: [] for name in models}
        for _ in range(a.rounds):
            for d in decoders.values():
                d.restart()
                d.step()  # the first step after a prefill: not timed
            for _ in range(a.steps):
                for name, d in decoders.items():
                    steps[name].append(d.step())
        f32 = statistics.median(steps["f32"])
        bf16 = statistics.median(steps["bf16"]) if "bf16" in steps else None
        level = f", libraries capped at {a.emulate}" if a.emulate else ""
        print(f"{threads} thread(s), {a.layers} layers, {a.rounds} x {a.steps} alternating steps per model{level}:")
        for name, s in steps.items():
            med = statistics.median(s)
            vs_bf16 = f"  vs bf16 {bf16 / med:5.2f}x" if bf16 else ""
            print(f"  {name:16s} {1e3 * med:8.2f} ms/token  {1 / med:7.2f} tok/s  vs f32 {f32 / med:5.2f}x{vs_bf16}")


if __name__ == "__main__":
    main()

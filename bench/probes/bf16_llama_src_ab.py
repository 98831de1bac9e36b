"""A bf16 Llama's 128-token prefill under two source trees, in fresh
processes that alternate (issue 51): each process puts one tree's ``src``
first on ``sys.path``, builds TinyLlama's shape with LAYERS layers (random
weights, seed 0) in bf16 and times, interleaved, torch bf16 and ours
(``quantize_(model, "f4E2M1FN")``, separate and ``fuse=True``) on the
bench's prompt and call (``logits_to_keep=1``), after two warm-ups each:
median of ROUNDS, wall ms and the calling thread's CPU ms.  The logits of
every process are compared (ours separate and fused, both trees: the bits
must not change).

    python bench/probes/bf16_llama_src_ab.py --a /work/main/src --b src \
        [--layers 8] [--threads 1,2] [--procs 3] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

CHILD = r"""
import copy, hashlib, json, statistics, sys, time
sys.path.insert(0, sys.argv[1])
import torch
from transformers import LlamaForCausalLM
from mlir_mx.torch import quantize_
from mlir_mx_bench.models.llama.worker import llama_config
layers, threads, rounds = (int(v) for v in sys.argv[2:5])
torch.set_num_threads(threads)
torch.manual_seed(0)
ref = LlamaForCausalLM(llama_config(layers)).eval().to(torch.bfloat16)
sep, fused = copy.deepcopy(ref), copy.deepcopy(ref)
quantize_(sep, "f4E2M1FN")
quantize_(fused, "f4E2M1FN", fuse=True)
ids = torch.randint(0, 32000, (1, 128), generator=torch.Generator().manual_seed(1))
models = {"torch bf16": ref, "ours": sep, "ours fused": fused}
def prefill(m):
    w, c = time.perf_counter(), time.thread_time()
    with torch.inference_mode():
        out = m(ids, use_cache=True, logits_to_keep=1).logits
    return (time.perf_counter() - w) * 1e3, (time.thread_time() - c) * 1e3, out
digest = {}
for name, m in models.items():
    prefill(m)
    digest[name] = hashlib.sha256(prefill(m)[2].view(torch.int16).numpy().tobytes()).hexdigest()
times = {name: [] for name in models}
for _ in range(rounds):
    for name, m in models.items():
        times[name].append(prefill(m)[:2])
print(json.dumps({"digest": digest, "ms": {n: [statistics.median(t[0] for t in ts),
                  statistics.median(t[1] for t in ts)] for n, ts in times.items()}}))
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--a", required=True, help="the 'before' tree's src")
    ap.add_argument("--b", required=True, help="the 'after' tree's src")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--procs", type=int, default=3, help="processes per tree and thread count")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    trees = {"before": os.path.abspath(args.a), "after": os.path.abspath(args.b)}
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(CHILD)
    results: dict = {}
    digests = set()
    for t in (int(v) for v in args.threads.split(",")):
        for i in range(args.procs):
            order = list(trees.items()) if i % 2 == 0 else list(trees.items())[::-1]
            for label, src in order:
                env = {**os.environ, "PYTHONPATH": src}
                out = subprocess.run(
                    [sys.executable, f.name, src, str(args.layers), str(t), str(args.rounds)],
                    env=env, capture_output=True, text=True, check=True,
                ).stdout.splitlines()[-1]  # fmt: skip
                rec = json.loads(out)
                digests.add((rec["digest"]["ours"], rec["digest"]["ours fused"]))
                for name, ms in rec["ms"].items():
                    results.setdefault((t, label, name), []).append(ms)
                print(f"  {t} thread(s) {label:6s} proc {i}: "
                      + ", ".join(f"{n} {ms[0]:.1f}/{ms[1]:.1f}" for n, ms in rec["ms"].items()),
                      flush=True)  # fmt: skip
    os.unlink(f.name)
    print(f"\n{args.layers} layers, 128-token prefill; per process the median of {args.rounds} "
          f"(wall ms / thread CPU ms), here the median over {args.procs} processes")  # fmt: skip
    for (t, label, name), ms in sorted(results.items()):
        print(f"  {t} thread(s) {label:6s} {name:11s} {statistics.median(m[0] for m in ms):8.1f} / "
              f"{statistics.median(m[1] for m in ms):8.1f}")  # fmt: skip
    same = len(digests) == 1 and len(set(next(iter(digests)))) == 1
    print(f"ours' logits (separate and fused) identical across every process and both trees: {same}")


if __name__ == "__main__":
    main()

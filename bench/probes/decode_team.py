"""Decode ms/token of a TinyLlama-shaped MXFP4 model on one team and thread
policy (docs/library.md, "Threads"):

    python bench/probes/decode_team.py {pool,openmp,main} THREADS
        [--layers 4] [--policy {torch,layers}] [--busy {spin,self}] [--fuse] [--trace]

("main": the tree on PYTHONPATH as it is, for a checkout from before
``set_team``.)  ``--policy torch``: torch's own ops and our layers both on
THREADS (``torch.set_num_threads(THREADS)``, the layers follow it);
``--policy layers``: torch's own ops on 1 thread, our layers on THREADS
(``quantize_(..., threads=THREADS)``, ``torch.set_num_threads(1)``).
``--policy auto``: the library's decode policy (``mlir_mx.torch.thread_policy``:
each decode step's torch ops on 1 thread, the layers on THREADS).
``--busy spin``: one ``python -c "while True: pass"`` process runs beside it
for the whole run; ``--busy self``: a second copy of this probe (same
arguments) runs at once, and both print.  Median of 40 one-token steps after
8 warm-up steps, the load average printed at the end.  ``--trace``: the load
check keeps its looks (``MLIR_MX_LOAD_TRACE=1``) and each step's line is
printed: its start (ms on the system's monotonic clock, so two copies line
up), its time, the parallel regions it ran and the verdicts of the looks
inside it (``B`` busy, ``q`` not), after the times the phases began."""

import argparse
import os
import statistics
import subprocess
import sys
import time

ap = argparse.ArgumentParser()
ap.add_argument("team", choices=("pool", "openmp", "main"))
ap.add_argument("threads", type=int)
ap.add_argument("--layers", type=int, default=4)
ap.add_argument("--policy", choices=("torch", "layers", "auto"), default="torch")
ap.add_argument("--busy", choices=("spin", "self"))
ap.add_argument("--fuse", action="store_true")
ap.add_argument("--trace", action="store_true")
ap.add_argument("--twin", action="store_true", help=argparse.SUPPRESS)
ns = ap.parse_args()
phases = [("start", time.monotonic_ns())]
if ns.trace:
    os.environ["MLIR_MX_LOAD_TRACE"] = "1"

load = None
if ns.busy == "spin":
    load = subprocess.Popen([sys.executable, "-c", "while True: pass"])
elif ns.busy == "self":
    argv = [a for a in sys.argv[1:] if a not in ("--busy", "self")]
    load = subprocess.Popen([sys.executable, os.path.abspath(__file__), *argv, "--twin"])

import torch  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

from mlir_mx.torch import quantize_  # noqa: E402

if ns.team != "main":
    from mlir_mx.execution.threads import set_team

    set_team(ns.team)
    try:  # session 51's decode policy (mlir_mx.torch.thread_policy)
        from mlir_mx.torch.thread_policy import set_decode_policy
    except ImportError:
        pass
    else:  # "torch" / "layers": set by hand below; "auto": the library's hooks
        set_decode_policy("layers" if ns.policy == "auto" else "torch")
torch.manual_seed(0)
cfg = LlamaConfig(hidden_size=2048, intermediate_size=5632, num_hidden_layers=ns.layers,
                  num_attention_heads=32, num_key_value_heads=4, vocab_size=32000)  # fmt: skip
m = LlamaForCausalLM(cfg).eval()
phases.append(("built", time.monotonic_ns()))
layer_threads = ns.threads if ns.policy == "layers" else None
quantize_(m, element="mxfp4", threads=layer_threads, fuse=ns.fuse)
torch.set_num_threads(1 if ns.policy == "layers" else ns.threads)
ids = torch.randint(0, 32000, (1, 16))
phases.append(("quantized", time.monotonic_ns()))
try:
    from mlir_mx.execution.threads import regions
except ImportError:  # a checkout from before regions()
    def regions():
        return 0
try:
    with torch.inference_mode():
        m.generate(ids, max_new_tokens=8, do_sample=False, min_new_tokens=8)
        out = m(ids, use_cache=True)
        past, tok = out.past_key_values, out.logits[:, -1:].argmax(-1)
        phases.append(("steps", time.monotonic_ns()))
        steps, spans = [], []
        for _ in range(48):
            r, t0 = regions(), time.monotonic_ns()
            t = time.perf_counter()
            out = m(tok, past_key_values=past, use_cache=True)
            steps.append(time.perf_counter() - t)
            spans.append((t0, time.monotonic_ns(), regions() - r))
            past, tok = out.past_key_values, out.logits[:, -1:].argmax(-1)
finally:
    if ns.busy == "spin":
        load.kill()
    if load is not None:
        load.wait()
who = "twin" if ns.twin else "row"
phases.append(("end", time.monotonic_ns()))
if ns.trace:
    from mlir_mx.execution.pool_load import looks

    seen = looks()
    print(f"{who} phases (ms): " + ", ".join(f"{k} {t / 1e6:.1f}" for k, t in phases))
    first = [(t, r, o, v) for t, r, o, _team, v, _ns in seen if t < spans[0][0]]
    cost = sorted(ns_ for *_, ns_ in seen)
    print(f"{who} looks: {len(seen)}, each {cost[len(cost) // 2] / 1e3:.1f} us median, "
          f"{cost[-1] / 1e3:.1f} us at most")
    print(f"{who} looks before the steps: {len(first)}, busy {sum(v for *_, v in first)}; "
          f"first busy at ms {next((t / 1e6 for t, *_, v in first if v), None)}")
    for i, (a, b, n) in enumerate(spans):
        inside = [(r, o, v) for t, r, o, _team, v, _ns in seen if a <= t < b]
        marks = " ".join(f"{'B' if v else 'q'}{r}-{o}" for r, o, v in inside)
        print(f"{who} step {i} at {a / 1e6:.1f}: {(b - a) / 1e6:.2f} ms, regions {n}, {marks}")
print(
    f"{who}: {ns.team} threads={ns.threads} policy={ns.policy} layers={ns.layers} "
    f"fuse={ns.fuse} busy={ns.busy}: median {1e3 * statistics.median(steps[8:]):.2f} ms/token "
    f"(load {open('/proc/loadavg').read().split()[0]})"
)

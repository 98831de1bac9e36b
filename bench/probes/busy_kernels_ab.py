"""Issue 51, the busy machine measured apart, in one process: the per-token
cost of an 8-layer TinyLlama-shaped MXFP4 decode step (docs/library.md,
"Threads", session 52) on

* ``1t``: the true 1-thread path (``decode_threads(1)``: torch and the layers
  on 1 thread; the 1-thread kernels, no load check: a team of 1 never looks);
* ``team``: 2 threads (the default decode policy) on a machine the load check
  finds oversubscribed (forced: ``pool_load.configure(LOAD_CHECK, -1000)``),
  ``set_busy_kernels("team")``: the 2-thread kernels on the caller alone
  (session 51's path);
* ``one``: the same with ``set_busy_kernels("one")`` (the default since
  session 52): the 1-thread kernels, picked per call (``call_threads``);
* ``one-t1``: ``one`` with torch at 1 thread outside the forward too (the
  decode policy's ``torch.set_num_threads`` toggles not made);

rows alternated round by round, each step on the same 16-token cache (cropped
back after each step), so every row does the same work. Also the load check
alone: what one look at ``/proc`` costs and a call between looks, and how many
looks a token makes. ::

    PYTHONPATH=src python bench/probes/busy_kernels_ab.py [--layers 8] [--rounds 5] [--steps 30]
"""

import argparse
import statistics
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from mlir_mx.execution import pool_load
from mlir_mx.execution import threads as threads_
from mlir_mx.torch import quantize_
from mlir_mx.torch.thread_policy import decode_threads

ap = argparse.ArgumentParser()
ap.add_argument("--layers", type=int, default=8)
ap.add_argument("--rounds", type=int, default=5)
ap.add_argument("--steps", type=int, default=30)
ap.add_argument("--rows", default="1t,team,one,one-t1")
ap.add_argument("--calls", type=int, default=0, help="also time one layer's calls, this many a row")
ns = ap.parse_args()


def load() -> str:
    return " ".join(open("/proc/loadavg").read().split()[:4])


def check_costs() -> tuple[float, float]:
    """(us a look at /proc costs, us a call between looks costs)."""
    every = pool_load.LoadCheck(1, 0)  # looks at every 8th call (the clock: every 8th)
    rest = pool_load.LoadCheck(10**9, 0)  # looks once
    every.busy(2), rest.busy(2)
    n = 8000
    t0 = time.perf_counter()
    for _ in range(n):
        every.busy(2)
    t1 = time.perf_counter()
    for _ in range(n):
        rest.busy(2)
    t2 = time.perf_counter()
    between = (t2 - t1) / n
    look = ((t1 - t0) - n * between) / (n / 8)
    return 1e6 * look, 1e6 * between




def layer_calls(calls: int) -> None:
    """Each decode kernel of the model alone (``Linear.call_into``, M = 1):
    us a call on the 1-thread kernel, on the 2-thread kernel alone (busy,
    ``team``) and on the 2-thread call the busy machine maps to 1 (``one``):
    the least mean of 15 batches of ``calls`` (on a loaded machine the
    median mostly measures the preemptions), the rows alternated."""
    import numpy as np

    import mlir_mx

    print("\n| layer (out x in) | 1t us | team us | one us | team / 1t |")
    print("|---|---|---|---|---|")
    rng = np.random.default_rng(0)
    for n, k in ((2048, 2048), (256, 2048), (5632, 2048), (2048, 5632)):
        w = mlir_mx.quantize(rng.standard_normal((n, k)).astype(np.float32), "f4E2M1FN", 32)
        lin = mlir_mx.Linear(w, threads=2)
        lin.precompile(1)
        x, out = np.ones((1, k), np.float32), np.zeros((1, n), np.float32)
        got = {"1t": [], "team": [], "one": []}
        for _ in range(15):
            for name in got:
                pool_load.configure(pool_load.LOAD_CHECK, -1000)
                threads_.set_busy_kernels("team" if name == "team" else "one")
                t, call = 1 if name == "1t" else 2, lin.call_into
                t0 = time.perf_counter()
                for _ in range(calls):
                    call(x.ctypes.data, 1, out.ctypes.data, t)
                got[name].append(1e6 * (time.perf_counter() - t0) / calls)
        med = {name: min(v) for name, v in got.items()}
        print(f"| {n} x {k} | {med['1t']:.1f} | {med['team']:.1f} | {med['one']:.1f} "
              f"| {med['team'] / med['1t']:.3f} |")  # fmt: skip
    threads_.set_busy_kernels("one")


print(f"load average, runnable/threads at the start: {load()}; {ns.layers} layers", flush=True)
look_us, between_us = check_costs()
print(f"load check: a look {look_us:.1f} us, a call between looks {between_us:.2f} us")
if ns.calls:
    layer_calls(ns.calls)

torch.manual_seed(0)
cfg = LlamaConfig(hidden_size=2048, intermediate_size=5632, num_hidden_layers=ns.layers,
                  num_attention_heads=32, num_key_value_heads=4, vocab_size=32000)  # fmt: skip
model = LlamaForCausalLM(cfg).eval()
torch.set_num_threads(2)
quantize_(model, element="mxfp4", precompile=True)  # the 2- and 1-thread kernels
ids = torch.randint(0, 32000, (1, 16))
ROWS = ns.rows.split(",")
got = {r: [] for r in ROWS}
looks = {r: [] for r in ROWS}
regions = {r: [] for r in ROWS}
outs = {}


def row(name: str, past, tok):
    busy = name != "1t"
    pool_load.configure(pool_load.LOAD_CHECK, -1000 if busy else 0)
    threads_.set_busy_kernels("team" if name == "team" else "one")
    torch.set_num_threads(1 if name in ("1t", "one-t1") else 2)
    scope = decode_threads(1 if name == "1t" else 2)
    regions0, times = threads_.regions(), []
    with scope:
        for _ in range(ns.steps):
            t = time.perf_counter()
            out = model(tok, past_key_values=past, use_cache=True)
            times.append(time.perf_counter() - t)
            past.crop(-1)  # back to the 16 tokens
    outs[name] = out.logits
    return times, threads_.regions() - regions0, pool_load.shared_reads()


with torch.inference_mode():
    out = model(ids, use_cache=True)
    past, tok = out.past_key_values, out.logits[:, -1:].argmax(-1)
    for name in ROWS:  # warm-up: bind every row's calls
        row(name, past, tok)
    for r in range(ns.rounds):
        for name in ROWS:
            times, made, reads = row(name, past, tok)
            got[name].append(1e3 * statistics.median(times))
            looks[name].append(reads / ns.steps)
            regions[name].append(made / ns.steps)
        print(f"round {r}: " + ", ".join(f"{n} {got[n][-1]:.2f}" for n in ROWS)
              + f" (load {load()})", flush=True)  # fmt: skip
print(f"load average at the end: {load()}\n")
base = statistics.median(got[ROWS[0]])
print(f"| row | ms/token (median of rounds) | vs {ROWS[0]} | looks at /proc a token "
      "| regions a token |")  # fmt: skip
print("|---|---|---|---|---|")
for name in ROWS:
    med = statistics.median(got[name])
    print(f"| {name} | {med:.2f} ({', '.join(f'{v:.1f}' for v in got[name])}) | "
          f"{base / med:.3f}x speed | {statistics.median(looks[name]):.1f} "
          f"| {statistics.median(regions[name]):.0f} |")  # fmt: skip
same = all(torch.equal(outs[ROWS[0]].view(torch.int32), o.view(torch.int32)) for o in outs.values())
print(f"\nlogits bit-identical across rows: {same}")

"""What a 2-thread process pays on a busy machine beyond what a 1-thread one
does, in one process, step by step (issue 51, docs/library.md "Threads"):

    python bench/probes/busy_path_cost.py [--layers 8] [--rounds 12] [--steps 6]

One 8-layer TinyLlama-shaped MXFP4 model (``quantize_``, the decode policy),
decoded one token a step; each round runs ``--steps`` steps in each mode, in
turn (each mode first in turn, round by round), so load that comes and goes falls on every mode alike:

* ``1t``: torch at 1 thread (a 1-thread process);
* ``2t-busy``: torch at 2 threads, the load check looking every 5 ms at
  ``/proc`` and finding the machine oversubscribed at every look (readings of
  ``/proc`` made as always, the runnable count raised by 100 after): what a
  2-thread copy beside another copy runs, the 1-thread kernels, plus the
  policy's thread toggles and the looks;
* ``2t-busy-free``: the same verdict with no look at ``/proc`` (one look at
  the first call, none after): the looks' own cost is the difference.

Prints each mode's median ms/token and its ratio to ``1t``, and the looks per
step with their median cost (the check's trace)."""

import argparse
import statistics
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from mlir_mx.execution import pool_load
from mlir_mx.execution.threads import regions
from mlir_mx.torch import quantize_
from mlir_mx.torch.precompile import precompile

ap = argparse.ArgumentParser()
ap.add_argument("--layers", type=int, default=8)
ap.add_argument("--rounds", type=int, default=12)
ap.add_argument("--steps", type=int, default=6)
ns = ap.parse_args()

torch.manual_seed(0)
cfg = LlamaConfig(hidden_size=2048, intermediate_size=5632, num_hidden_layers=ns.layers,
                  num_attention_heads=32, num_key_value_heads=4, vocab_size=32000)  # fmt: skip
m = LlamaForCausalLM(cfg).eval()
quantize_(m, element="mxfp4")
torch.set_num_threads(2)
precompile(m, 1)  # the 2- and the 1-thread kernels


def real_then_busy(team, ours):
    running, mine = pool_load.LoadCheck.read_proc(check, team, ours)
    return running + 100, mine


MODES = {
    "1t": (1, dict(every=0)),
    "2t-busy": (2, dict(every=5000, read=real_then_busy, trace=True)),
    "2t-busy-free": (2, dict(every=10**9, slack=-1000)),
    "1t-layers2": (1, dict(every=10**9, slack=-1000)),
}
mx_layers = [mod for mod in m.modules() if hasattr(mod, "_threads")]
times = {k: [] for k in MODES}
looks = []
ids = torch.randint(0, 32000, (1, 16))
with torch.inference_mode():
    out = m(ids, use_cache=True)
    past, tok = out.past_key_values, out.logits[:, -1:].argmax(-1)
    for r in range(ns.rounds + 1):
        names = list(MODES)
        for name in names[r % 4 :] + names[: r % 4]:  # each mode first in turn
            threads, how = MODES[name]
            for mod in mx_layers:  # 1t-layers2: torch on 1 thread, the layers asked for 2
                mod._threads = 2 if name == "1t-layers2" else None
            torch.set_num_threads(threads)
            check = pool_load.configure(**how)
            r0 = regions()
            for _ in range(ns.steps):
                t = time.perf_counter()
                out = m(tok, past_key_values=past, use_cache=True)
                if r:  # round 0 warms every mode up
                    times[name].append(time.perf_counter() - t)
                past, tok = out.past_key_values, out.logits[:, -1:].argmax(-1)
            assert regions() == r0, "a busy step ran a team"
            if name == "2t-busy" and r:
                looks += check.trace
            if past.get_seq_length() > 400:  # keep attention's share steady
                out = m(ids, use_cache=True)
                past, tok = out.past_key_values, out.logits[:, -1:].argmax(-1)
pool_load.configure()
base = statistics.median(times["1t"])
print(f"{ns.layers} layers, {ns.rounds} rounds x {ns.steps} steps a mode, load "
      f"{open('/proc/loadavg').read().split()[0]}")  # fmt: skip
for name, got in times.items():
    med = statistics.median(got)
    print(f"{name}: median {1e3 * med:.2f} ms/token, 1t / it {base / med:.3f}x")
steps = ns.rounds * ns.steps
print(f"2t-busy looks: {len(looks) / steps:.1f} a step, median "
      f"{statistics.median(ns_ for *_, ns_ in looks) / 1e3:.1f} us, "
      f"all busy: {all(v for *_, v, _ns in looks)}")  # fmt: skip

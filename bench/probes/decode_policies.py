"""Decode ms/token of a TinyLlama-shaped MXFP4 model under several teams and
thread policies, alternated in one process (docs/library.md, "Threads"):

    python bench/probes/decode_policies.py [--layers 8] [--rounds 4]
        [--busy spin] [--fuse] [CONFIG ...]

A CONFIG is ``TEAM:THREADS:POLICY[:HOOKS]`` (``openmp:2:layers``,
``pool:2:layers:load_check=0,spin=20000``): the team (``set_team``), the
thread count, ``torch`` (torch's ops and our layers on THREADS) or ``layers``
(the decode policy: torch's ops on 1 thread, our layers on THREADS,
``mlir_mx.torch.thread_policy``), and for the pool, keywords of
``pool().hooks`` (``spin``, ``load_check``, ``load_slack``, ``backoff``).  Each round runs every
config for 16 one-token steps (after 4 warm-up steps) in turn; the medians
of each round and of all rounds are printed, with the load average.  One
process for every config, so the load (a shared machine's) is alike for
all; ``decode_team.py`` runs one config per fresh process."""

import argparse
import statistics
import subprocess
import sys
import time

DEFAULT = ("openmp:1:torch", "openmp:2:torch", "openmp:2:layers", "pool:2:layers", "pool:2:torch")
ap = argparse.ArgumentParser()
ap.add_argument("configs", nargs="*", default=DEFAULT)
ap.add_argument("--layers", type=int, default=8)
ap.add_argument("--rounds", type=int, default=4)
ap.add_argument("--steps", type=int, default=16)
ap.add_argument("--busy", choices=("spin",))
ap.add_argument("--fuse", action="store_true")
ns = ap.parse_args()

import torch  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

from mlir_mx.execution import pool as pool_  # noqa: E402
from mlir_mx.execution.threads import regions, set_team  # noqa: E402
from mlir_mx.torch import quantize_, set_decode_policy  # noqa: E402


def load() -> str:
    return open("/proc/loadavg").read().split()[0]


torch.manual_seed(0)
cfg = LlamaConfig(hidden_size=2048, intermediate_size=5632, num_hidden_layers=ns.layers,
                  num_attention_heads=32, num_key_value_heads=4, vocab_size=32000)  # fmt: skip
m = LlamaForCausalLM(cfg).eval()
quantize_(m, element="mxfp4", fuse=ns.fuse)
ids = torch.randint(0, 32000, (1, 16))
spin = None
if ns.busy == "spin":
    spin = subprocess.Popen([sys.executable, "-c", "while True: pass"])
times: dict[str, list[float]] = {c: [] for c in ns.configs}
counts: dict[str, int] = {}
print(f"load {load()} at the start; {ns.layers} layers, fuse={ns.fuse}, busy={ns.busy}")
try:
    with torch.inference_mode():
        for r in range(ns.rounds):
            for c in ns.configs:
                team, threads, policy, *hooks = c.split(":")
                kw = dict(h.split("=") for h in hooks[0].split(",")) if hooks else {}
                pool_.pool().hooks(**{k: int(v) for k, v in kw.items()})
                set_team(team)
                set_decode_policy(policy)
                torch.set_num_threads(int(threads))
                out = m(ids, use_cache=True)
                past, tok = out.past_key_values, out.logits[:, -1:].argmax(-1)
                steps, before, alone = [], regions(), getattr(pool_.pool(), "alone", 0)
                for i in range(4 + ns.steps):
                    t = time.perf_counter()
                    out = m(tok, past_key_values=past, use_cache=True)
                    if i >= 4:
                        steps.append(time.perf_counter() - t)
                    past, tok = out.past_key_values, out.logits[:, -1:].argmax(-1)
                counts[c] = (regions() - before) // (4 + ns.steps)
                med = 1e3 * statistics.median(steps)
                times[c].append(med)
                alone = getattr(pool_.pool(), "alone", 0) - alone
                print(f"round {r} {c:18s} {med:8.2f} ms/token  regions/token {counts[c]}"
                      f"  pool alone {alone}  load {load()}", flush=True)  # fmt: skip
finally:
    if spin is not None:
        spin.kill()
        spin.wait()
print(f"load {load()} at the end")
for c in ns.configs:
    print(f"{c:18s} median of rounds {statistics.median(times[c]):8.2f} ms/token  "
          f"({', '.join(f'{t:.1f}' for t in times[c])})")  # fmt: skip

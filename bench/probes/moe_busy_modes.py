"""``MXExperts`` at 1 and 2 threads in one process, the modes in turn, beside
one CPU-bound process or not (issue 51's busy rule, session 66;
docs/library.md, "The MoE beside a busy process").

gpt-oss-20b's MoE shape (``amx_experts_prefill.py``'s ``build`` and
``route``: 32 experts, top-4, H = I = 2880, MXFP4), ``threads=None`` so the
layers follow :func:`mlir_mx.torch.decode_threads`: each round runs CALLS
calls inside ``decode_threads(1)`` then CALLS inside ``decode_threads(2)``
(torch's own ops on 1 thread, the MX layers on 1 or 2: what the decode
policy does, and what a busy prefill gets), and reports each mode's median
wall ms per round, the parallel regions it ran, and the load check's looks.

    python bench/probes/moe_busy_modes.py [--spin] [--tokens 1] [--calls 100]
        [--rounds 6] [--acts none|bf16]

Blocks of calls, not calls alternating one by one: ``MXExperts`` binds its
one-token kernels again when the layers' thread count changes
(``_bind_decode``), which a call-by-call alternation would time.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from amx_experts_prefill import build, route  # noqa: E402

from mlir_mx.execution import pool_load  # noqa: E402
from mlir_mx.execution import threads as team  # noqa: E402
from mlir_mx.torch import decode_threads  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--spin", action="store_true", help="one CPU-bound process beside it")
    ap.add_argument("--tokens", type=int, default=1)
    ap.add_argument("--calls", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--acts", choices=("none", "bf16"), default="none")
    ns = ap.parse_args()
    shape = argparse.Namespace(hidden=2880, experts=32, k=4, threads=None, acts=ns.acts)
    rng = np.random.default_rng(0)
    ex, *_ = build(shape, rng)
    x = torch.from_numpy(rng.standard_normal((ns.tokens, 2880)).astype(np.float32))
    x = x.to(torch.bfloat16)
    idx, w = route(shape, rng, x)
    torch.set_num_threads(2)
    spin = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if ns.spin else None
    res: dict[int, list[tuple[float, int]]] = {1: [], 2: []}
    try:
        with torch.inference_mode():
            for n in (1, 2):  # warm-up: compiles and binds both modes' kernels
                with decode_threads(n):
                    ex(x, idx, w)
            for _ in range(ns.rounds):
                for n in (1, 2):
                    with decode_threads(n):
                        r0, ts = team.regions(), []
                        for _ in range(ns.calls):
                            t0 = time.perf_counter()
                            ex(x, idx, w)
                            ts.append(time.perf_counter() - t0)
                        res[n].append((statistics.median(ts) * 1e3, team.regions() - r0))
    finally:
        if spin is not None:
            spin.kill()
    for n, v in res.items():
        print(f"{n} thread(s): median ms per round {[round(a, 2) for a, _ in v]}, "
              f"regions {[b for _, b in v]}")  # fmt: skip
    m1, m2 = (statistics.median(a for a, _ in res[n]) for n in (1, 2))
    print(f"spin={ns.spin} tokens={ns.tokens} acts={ns.acts}: 1 thread {m1:.2f} ms, 2 threads "
          f"{m2:.2f} ms, 2 / 1 thread speed {m1 / m2:.2f}x; load looks {pool_load.shared_reads()}")  # fmt: skip


if __name__ == "__main__":
    main()

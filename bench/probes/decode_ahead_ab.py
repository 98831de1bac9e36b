"""Runner decode kernels side by side in one process, calls alternating (issue 51).

Builds the Runner's mx x mx kernel of ``1 x N x N`` (``N`` default 8192) once
per schedule given, checks that all give the same output bytes, then times
them in turn: per round each schedule runs 2 warm-up calls and 10 timed
ones; after ``ROUNDS`` rounds it prints each schedule's median, 10th
percentile and minimum per call.  On a shared host the medians of
alternating calls compare like for like where separate processes would not
(the host's speed drifts between them); say the load average with them.

    PYTHONPATH=src MLIR_MX_CACHE_DIR=off python bench/probes/decode_ahead_ab.py \\
        f4E2M1FN 2 int-decode,int-decode-ahead [N] [ROUNDS]
    ... f8E4M3FN 2 decode,decode-ahead

Measured in session 51: ``docs/passes/mx-matmul-kernels.md``, "Prefetching
the next sweep".
"""

from __future__ import annotations

import os
import statistics
import sys
import time

import numpy as np

from mlir_mx.execution import Runner
from mlir_mx.roofline.variants import Shape, variant_module_text
from mlir_mx_bench.cases import make_problem


def main() -> None:
    element, threads, schedules = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(",")
    n = int(sys.argv[4]) if len(sys.argv) > 4 else 8192
    rounds = int(sys.argv[5]) if len(sys.argv) > 5 else 60
    shape = Shape(1, n, n)
    p = make_problem(shape, element)
    text = variant_module_text("mx-ab", shape, element)
    calls, outs = [], []
    for s in schedules:
        r = Runner(text, threads=threads, schedule=s)
        c = np.zeros((1, n), np.float32)
        out = np.zeros((1, n), np.float32)
        r.invoke("bench", p.qa, p.qb, out, 1)
        outs.append(out)
        calls.append(lambda k, r=r, c=c: r.invoke("bench", p.qa, p.qb, c, k))
    same = all(np.array_equal(outs[0].view(np.uint32), o.view(np.uint32)) for o in outs)
    header = f"1 x {n} x {n} {element}, {threads} thread(s), load average {os.getloadavg()}"
    alternate(schedules, calls, rounds, header)
    print(f"  same output bytes: {same}")


def alternate(names: list[str], calls: list, rounds: int, header: str) -> None:
    """Time ``calls`` (each ``call(n)`` runs ``n`` calls) in turn: per round 2
    warm-up calls and 10 timed ones; print ``header`` and each one's median,
    10th percentile and minimum per call (also ``fp8_lanes_ab.py``'s)."""
    times: list[list[float]] = [[] for _ in names]
    for _ in range(rounds):
        for i, call in enumerate(calls):
            call(2)
            t0 = time.perf_counter()
            call(10)
            times[i].append((time.perf_counter() - t0) / 10)
    print(header)
    for name, ts in zip(names, times, strict=True):
        ts = sorted(ts)
        print(
            f"  {name:20s} median {statistics.median(ts) * 1e3:7.3f} ms  "
            f"p10 {ts[len(ts) // 10] * 1e3:7.3f}  min {ts[0] * 1e3:7.3f}"
        )


if __name__ == "__main__":
    main()

"""A 2-thread call after an idle gap: ``mlir_mx.Linear`` 1 x 8192 x 8192 MXFP4
called back to back, then with a sleep before each call, then back to back.

    PYTHONPATH=src python bench/probes/gap_calls.py [THREADS] [--torch]

``--torch`` imports torch first, so the kernels run on its OpenMP team (the
default in a torch process) instead of upstream's async runtime. Session 61
(AMD EPYC Zen 4, 2 vCPUs): at 2 threads 1.65-1.67 ms back to back and
3.58-3.67 ms after 50 ms gaps (torch imported: 1.88-2.08 and 4.31, p90 9.1),
where 1 thread took 2.87 and 3.36. The cause is the scheduler's placement of
the woken worker (``bench/probes/wake-placement-pair.c``; docs/library.md,
"Threads").
"""

import statistics
import sys
import time

import numpy as np

if "--torch" in sys.argv:
    import torch  # noqa: F401

import mlir_mx

args = [a for a in sys.argv[1:] if not a.startswith("--")]
threads = int(args[0]) if args else 2
rng = np.random.default_rng(0)
w = mlir_mx.quantize(rng.standard_normal((8192, 8192)).astype(np.float32), "f4E2M1FN", 32, axis=0)
x = rng.standard_normal((1, 8192)).astype(np.float32)
lin = mlir_mx.Linear(w, threads=threads)
for _ in range(20):
    lin(x)


def series(gap: float, n: int = 40) -> list[float]:
    ts = []
    for _ in range(n):
        if gap:
            time.sleep(gap)
        t0 = time.perf_counter()
        lin(x)
        ts.append((time.perf_counter() - t0) * 1e3)
    return sorted(ts)


for _ in range(2):
    for gap in (0.0, 0.05, 0.0):
        ts = series(gap)
        print(f"{threads} thread(s), gap {gap * 1e3:4.0f} ms: median {statistics.median(ts):.3f} ms "
              f"p10 {ts[4]:.3f} p90 {ts[36]:.3f}")  # fmt: skip

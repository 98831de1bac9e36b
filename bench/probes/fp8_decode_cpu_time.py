"""1 x N x N MXFP8 decode beside ggml Q8_0 in thread CPU time, 1 thread (issue 51).

On the shared machine (load average 5-12 on 2 cores) ``mx-bench``'s wall
times are 4-20x a quiet run's and ggml's suffer more than ours, so their
ratios say nothing.  At 1 thread the calling thread's CPU time
(``time.thread_time``) leaves out the time it waited for a core (not the
caches the others pollute): this times ggml Q8_0 (``mlir_mx_bench``'s own
ggml row, ``ggml_methods``), the Runner's ``decode`` (mx x mx, row-major
B) and ``mlir_mx.Linear`` (f32 activations, tiled B) alternating, 10 calls
per round, and prints median, 10th percentile and minimum.  ggml must run its
compute on the caller's thread at 1 thread (it does: ``ggml_graph_compute``
with ``n_threads = 1``); wall-clock ratios belong to ``mx-bench`` on a quiet
machine.

    PYTHONPATH=src:/work/venvs/ggml-decode python bench/probes/fp8_decode_cpu_time.py \
        ROUNDS [N]
"""

from __future__ import annotations

import os
import statistics
import sys
import time

import numpy as np

import mlir_mx
from mlir_mx.execution import Runner
from mlir_mx.roofline.variants import Shape, variant_module_text
from mlir_mx_bench.cases import make_problem
from mlir_mx_bench.ggml_baseline import ggml_methods


def main() -> None:
    rounds = int(sys.argv[1])
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 8192
    el = "f8E4M3FN"
    shape = Shape(1, n, n)
    p = make_problem(shape, el)
    calls = {}
    methods = ggml_methods(p, 1)
    if isinstance(methods, list):
        for m in methods:
            calls[m.name] = m.run
    r = Runner(variant_module_text("mx-ab", shape, el), threads=1, schedule="decode")
    c = np.zeros((1, n), np.float32)
    calls["ours Runner mx x mx"] = lambda k: r.invoke("bench", p.qa, p.qb, c, k)
    rng = np.random.default_rng(0)
    w = mlir_mx.quantize(rng.standard_normal((n, n)).astype(np.float32), el, 32)
    x = rng.standard_normal((1, n)).astype(np.float32)
    lin = mlir_mx.Linear(w, threads=1)
    calls["ours Linear f32 x"] = lambda k: [lin(x) for _ in range(k)]
    times = {name: [] for name in calls}
    for _ in range(rounds):
        for name, call in calls.items():
            call(2)
            t0 = time.thread_time()
            call(10)
            times[name].append((time.thread_time() - t0) / 10)
    print(f"1 x {n} x {n} {el}, 1 thread, thread CPU time, load {os.getloadavg()}")
    for name, ts in times.items():
        ts.sort()
        print(f"  {name:22s} median {statistics.median(ts) * 1e3:.3f} "
              f"p10 {ts[len(ts) // 10] * 1e3:.3f} min {ts[0] * 1e3:.3f} ms")  # fmt: skip


if __name__ == "__main__":
    main()

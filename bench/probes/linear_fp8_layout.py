"""Linear's MXFP8 decode, its weight tiled against row-major, beside the Runner (issue 51).

Builds ``mlir_mx.Linear`` of a 1 x N x N weight (f32 activations) twice, its
stored codes tiled (64-column tiles) and row-major (``Geometry.tiled`` forced
each way), and the Runner's mx x mx ``decode``; checks the two Linears give
the same output bytes, then times the three alternating (2 warm-up and 10
timed calls per round) and prints median, 10th percentile and minimum.
Session 52 (loaded Xeon, load average 13-15): row-major ran at the Runner's
time, tiled 1.4x it at 1 and at 2 threads; but a row-major B made the
M = 64 ``prefill`` of the same Linear 1.15-1.2x slower, so the stored layout
stays tiled (docs/passes/mx-matmul-kernels.md, "Where the MXFP8 decode
time goes").

    PYTHONPATH=src MLIR_MX_CACHE_DIR=off python bench/probes/linear_fp8_layout.py \
        THREADS ROUNDS [N] [ELEMENT]
"""

import os
import statistics
import sys
import time

import numpy as np

import mlir_mx
from mlir_mx.execution import Runner
from mlir_mx.linear import weight_form
from mlir_mx.roofline.variants import Shape, variant_module_text
from mlir_mx_bench.cases import make_problem

t = int(sys.argv[1])
n = int(sys.argv[3]) if len(sys.argv) > 3 else 8192
rounds = int(sys.argv[2])
el = sys.argv[4] if len(sys.argv) > 4 else "f8E4M3FN"
rng = np.random.default_rng(0)
w = mlir_mx.quantize(rng.standard_normal((n, n)).astype(np.float32), el, 32)
x = rng.standard_normal((1, n)).astype(np.float32)
calls = {}
outs = []
orig = weight_form.Geometry.tiled
weight_form.Geometry.tiled = property(lambda self: self.n % 64 == 0)
lin = mlir_mx.Linear(w, threads=t)
outs.append(lin(x).copy())
calls["linear tiled"] = lambda k, lin=lin: [lin(x) for _ in range(k)]
weight_form.Geometry.tiled = property(lambda self: False)
lin2 = mlir_mx.Linear(w, threads=t)
outs.append(lin2(x).copy())
weight_form.Geometry.tiled = orig
print("tiled:", lin.tiled, lin2.tiled)
calls["linear row-major"] = lambda k, lin=lin2: [lin(x) for _ in range(k)]
print("same", np.array_equal(outs[0].view(np.uint32), outs[1].view(np.uint32)))
shape = Shape(1, n, n)
p = make_problem(shape, el)
r = Runner(variant_module_text("mx-ab", shape, el), threads=t, schedule="decode")
c = np.zeros((1, n), np.float32)
calls["runner decode"] = lambda k: r.invoke("bench", p.qa, p.qb, c, k)
times = {k: [] for k in calls}
for _ in range(rounds):
    for name, call in calls.items():
        call(2)
        t0 = time.perf_counter()
        call(10)
        times[name].append((time.perf_counter() - t0) / 10)
print(f"{el} {n} {t} thread(s) load {os.getloadavg()}")
for name, ts in times.items():
    ts.sort()
    print(
        f"  {name:20s} median {statistics.median(ts) * 1e3:.3f} p10 {ts[len(ts) // 10] * 1e3:.3f} min {ts[0] * 1e3:.3f}"
    )

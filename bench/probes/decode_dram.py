"""One decode shape's ``Linear`` calls with B streamed from DRAM and from cache.

``count`` Linears of the same shape hold different weights (``count`` x the
weight's bytes should pass the L3: 40 x 6 MB against this Xeon's 105 MB), and
are called in turn ("DRAM": each call finds its weight out of cache, as in a
model's decode step); then the first one alone ``count`` times ("hot": its
weight stays in L2/L3).  1 and 2 threads alternate in one process; medians of
5 rounds.  torch is imported first, so the 2-thread kernels run on its OpenMP
team, as inside a model.

    python bench/probes/decode_dram.py N K COUNT [ELEMENT [ACTIVATIONS]]
    python bench/probes/decode_dram.py 5632 2048 40 f4E2M1FN i8
"""

from __future__ import annotations

import sys
import time

import numpy as np
import torch

import mlir_mx
from mlir_mx import Linear


def main() -> None:
    n, k, count = (int(a) for a in sys.argv[1:4])
    element = sys.argv[4] if len(sys.argv) > 4 else "f4E2M1FN"
    act = sys.argv[5] if len(sys.argv) > 5 else None
    rng = np.random.default_rng(0)
    w = rng.standard_normal((n, k)).astype(np.float32) * 0.02
    weights = [mlir_mx.quantize(w * (1 + i * 1e-3), element, axis=1) for i in range(count)]
    x = rng.standard_normal((1, k)).astype(np.float32)
    layers = {t: [Linear(q, threads=t, activations=act) for q in weights] for t in (1, 2)}
    for t in (1, 2):
        torch.set_num_threads(t)
        for layer in layers[t]:
            layer(x)
    runs: dict[int, list[tuple[float, float]]] = {1: [], 2: []}
    for _ in range(5):
        for t in (1, 2):
            torch.set_num_threads(t)
            t0 = time.perf_counter()
            for layer in layers[t]:
                layer(x)
            cold = (time.perf_counter() - t0) / count
            t0 = time.perf_counter()
            for _ in range(count):
                layers[t][0](x)
            runs[t].append((cold, (time.perf_counter() - t0) / count))
    nbytes = layers[1][0].nbytes
    for t in (1, 2):
        cold = float(np.median([r[0] for r in runs[t]]))
        hot = float(np.median([r[1] for r in runs[t]]))
        print(f"{element} activations={act} 1x{n}x{k} {t} thread(s): DRAM {cold * 1e3:.3f} ms "
              f"({nbytes / cold / 1e9:.1f} GB/s), hot {hot * 1e3:.3f} ms ({nbytes / hot / 1e9:.1f} GB/s)")  # fmt: skip


if __name__ == "__main__":
    main()

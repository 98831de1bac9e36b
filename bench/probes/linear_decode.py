"""Time mlir_mx.Linear at decode (1 x 8192 x 8192, f32 activations), FP4 and FP8
weights, 1 and 2 threads (median and min of 30 calls): the probe behind the
M = 1 specialization of the decode kernel a Linear compiles.

    python bench/probes/linear_decode.py
"""

from __future__ import annotations

import time

import numpy as np

import mlir_mx


def main() -> None:
    n = k = 8192
    rng = np.random.default_rng(0)
    for el in ("f4E2M1FN", "f8E4M3FN"):
        w = mlir_mx.quantize(rng.standard_normal((n, k)).astype(np.float32), el, 32)
        x = rng.standard_normal((1, k)).astype(np.float32)
        for t in (1, 2):
            lin = mlir_mx.Linear(w, threads=t)
            lin(x)
            ts = []
            for _ in range(30):
                t0 = time.perf_counter()
                lin(x)
                ts.append(time.perf_counter() - t0)
            ms = 1e3 * np.median(ts), 1e3 * min(ts)
            print(f"{el} {t} thread(s) {lin.schedule(x)}: median {ms[0]:.3f} min {ms[1]:.3f} ms")


if __name__ == "__main__":
    main()

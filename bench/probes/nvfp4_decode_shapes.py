"""NVFP4 and MXFP4 with blocks of 16 against MXFP4 (block 32) at decode, for
the same number of codes in other shapes (K x N): does the block of 16 cost
more where C (N f32) no longer fits L1 beside B's stream?  Session 58, Zen 4:
1.20x at 8192 x 8192 and 2048 x 32768, 1.06-1.07x at 32768 x 2048 and
65536 x 1024 (bench/results/zen4-s58-2026-12-06.md, section 5).
``mlir_mx.Linear`` calls, interleaved, medians of ``--reps``.

    python bench/probes/nvfp4_decode_shapes.py [--threads 1] [--reps 15]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import mlir_mx

SHAPES = ((8192, 8192), (32768, 2048), (2048, 32768), (65536, 1024))  # (K, N)
WEIGHTS = (("b32", "mxfp4", 32), ("b16", "mxfp4", 16), ("nv", "nvfp4", None))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--reps", type=int, default=15)
    args = p.parse_args()
    rng = np.random.default_rng(0)
    for k, n in SHAPES:
        w = rng.standard_normal((n, k), dtype=np.float32)
        x = rng.standard_normal((1, k), dtype=np.float32)
        lins = [
            (label, mlir_mx.Linear(mlir_mx.quantize(w, f, b, axis=1), threads=args.threads))
            for label, f, b in WEIGHTS
        ]
        times: dict[str, list[float]] = {label: [] for label, _ in lins}
        for _, lin in lins:
            lin(x)  # compiles
        for _ in range(args.reps):
            for label, lin in lins:
                t0 = time.perf_counter()
                lin(x)
                times[label].append(time.perf_counter() - t0)
        med = {label: 1e3 * float(np.median(t)) for label, t in times.items()}
        cells = ", ".join(f"{lab} {v:.2f} ms ({v / med['b32']:.2f}x)" for lab, v in med.items())
        print(f"K={k} N={n} ({args.threads} thread(s)): {cells}")


if __name__ == "__main__":
    main()

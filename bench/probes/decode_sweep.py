"""Time the Runner's decode from codes (1 x N x K, mx x mx) per schedule,
side by side in one run; optional ggml MXFP4 baseline.

    python bench/probes/decode_sweep.py --shape 1x8192x8192 --threads 1,2
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from mlir_mx import oracle
from mlir_mx.execution import Runner
from mlir_mx.roofline.variants import Shape, variant_module_text


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--shape", default="1x8192x8192")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--schedules", default="int-decode,decode")
    p.add_argument("--element", default="f4E2M1FN")
    p.add_argument("--samples", type=int, default=15)
    p.add_argument("--reps", type=int, default=5)
    args = p.parse_args()
    m, n, k = map(int, args.shape.split("x"))
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    qa = oracle.quantize(a, args.element, 32, axis=1)
    qb = oracle.quantize(b, args.element, 32, axis=0)
    text = variant_module_text("mx-ab", Shape(m, n, k), args.element, 32)
    nbytes = qb.nbytes + qa.nbytes
    ref = None
    for t in map(int, args.threads.split(",")):
        for s in args.schedules.split(","):
            r = Runner(text, threads=t, schedule=s)
            c = np.zeros((m, n), np.float32)
            r.invoke("bench", qa, qb, c, 1)
            if ref is None:
                ref = c.copy()
            assert np.array_equal(c.view(np.uint32), ref.view(np.uint32)), s
            best = []
            for _ in range(args.samples):
                t0 = time.perf_counter()
                r.invoke("bench", qa, qb, c, args.reps)
                best.append((time.perf_counter() - t0) / args.reps)
            ms = 1e3 * np.min(best)
            med = 1e3 * np.median(best)
            print(f"threads {t} {s:12s} min {ms:.3f} ms  median {med:.3f} ms  {nbytes / ms / 1e6:.1f} GB/s")


if __name__ == "__main__":
    main()

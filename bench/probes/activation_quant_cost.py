"""What ``Linear(w, activations="i8")`` pays to quantize f32 activations per
call: the time of a call on f32 x minus the time of the same Linear on x
already quantized (``quantize(x, "i8", 32)``), as a share of the f32-x call.
Medians of 15 calls, interleaved, 1 thread, out = in = 4096, per weight format.

    python bench/probes/activation_quant_cost.py [--threads 1] [--formats f4E2M1FN,i8,f6E2M3FN]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import mlir_mx
from mlir_mx import oracle


def _median_ms(f, reps: int = 15) -> float:
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t0)
    return 1e3 * float(np.median(ts))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--formats", default="f4E2M1FN,i8,f6E2M3FN")
    p.add_argument("--ms", default="8,32,64,256")
    args = p.parse_args()
    rng = np.random.default_rng(0)
    n = k = 4096
    w32 = rng.standard_normal((n, k)).astype(np.float32)
    for el in args.formats.split(","):
        lin = mlir_mx.Linear(mlir_mx.quantize(w32, el, 32), threads=args.threads, activations="i8")
        for m in map(int, args.ms.split(",")):
            x = rng.standard_normal((m, k)).astype(np.float32)
            xq = oracle.quantize(x, "i8", 32)
            same = np.array_equal(lin(x).view(np.uint32), lin(xq).view(np.uint32))
            f32_ms, q_ms = [], []
            for _ in range(3):  # interleaved rounds
                f32_ms.append(_median_ms(lambda f=lin, a=x: f(a)))
                q_ms.append(_median_ms(lambda f=lin, a=xq: f(a)))
            a, b = min(f32_ms), min(q_ms)
            print(
                f"{el:9s} M={m:4d} {lin.schedule(x):12s} f32 x {a:8.3f} ms  quantized x {b:8.3f} ms"
                f"  cost {100 * (a - b) / a:5.1f} %  same bits {same}"
            )


if __name__ == "__main__":
    main()

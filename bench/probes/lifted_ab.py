"""The lifted block step against the plain one for E8M0 weights (session 64,
``mlir_mx.kernels.dot.biased``): one ``Linear`` per form of the same weight
with INT8 activations, the plain one built with ``weight_form.lifts``
patched to False (``Problem.b_lift`` off), checked bit-identical, then
called in turn; medians of ``--reps`` calls, wall time.

    python bench/probes/lifted_ab.py [--threads 1] [--reps 15] [--m 256,8]
        [--formats mxfp4,f6E2M3FN,i8] [--size 4096]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import mlir_mx
from mlir_mx.linear import weight_form


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--reps", type=int, default=15)
    p.add_argument("--m", default="256,8", help="rows (256: int-prefill, 8: int-small)")
    p.add_argument("--formats", default="mxfp4,f6E2M3FN,i8")
    p.add_argument("--size", type=int, default=4096, help="K = N")
    a = p.parse_args()
    rng = np.random.default_rng(0)
    w = rng.standard_normal((a.size, a.size), dtype=np.float32)
    lifts = weight_form.lifts
    for fmt in a.formats.split(","):
        q = mlir_mx.quantize(w, fmt, 32, axis=1)
        for m in (int(v) for v in a.m.split(",")):
            x = rng.standard_normal((m, a.size), dtype=np.float32)
            weight_form.lifts = lambda records, g: False  # noqa: ARG005 - the plain step
            plain = mlir_mx.Linear(q, activations="i8", threads=a.threads)
            y = plain(x)
            weight_form.lifts = lifts
            lifted = mlir_mx.Linear(q, activations="i8", threads=a.threads)
            assert (lifted(x).view(np.uint32) == y.view(np.uint32)).all(), "bits differ"
            times: dict[str, list[float]] = {"plain": [], "lifted": []}
            for _ in range(a.reps):
                for name, lin in (("plain", plain), ("lifted", lifted)):
                    t0 = time.perf_counter()
                    lin(x)
                    times[name].append(time.perf_counter() - t0)
            tp, tl = (float(np.median(times[k])) * 1e3 for k in ("plain", "lifted"))
            print(
                f"{fmt} {m}x{a.size}x{a.size} i8 ({lifted.schedule(x)}, {a.threads} thread(s)): "
                f"plain {tp:.3f} ms, lifted {tl:.3f} ms, plain / lifted {tp / tl:.3f}"
            )


if __name__ == "__main__":
    main()

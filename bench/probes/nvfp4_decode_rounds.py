"""NVFP4 and MXFP4 with blocks of 16 against MXFP4 (block 32) at decode,
robust to a noisy host: three ``mlir_mx.Linear`` of one 8192 x 8192 weight
called in turn by address (``Linear.call_into``, one output buffer), so each
round's three calls see the same machine state; the figure of merit is the
median over rounds of each call's time over the block-32 call's time of the
same round.  ``--series LABEL`` times one weight alone instead and prints
the time of every call as a character (``.`` within 15 % of the 10th
percentile, ``o`` within 50 %, ``X`` beyond): the clusters of slow calls of
``bench/results/zen4-s59-2026-12-06.md``, section 2.  Compare builds in
alternating processes with ``MLIR_MX_CACHE_DIR=off`` (the disk cache keys by
source, not by environment variables a variant may read).

    python bench/probes/nvfp4_decode_rounds.py [--threads 1] [--rounds 100] [--series nv] \
        [--activations i8]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import mlir_mx

WEIGHTS = {"b32": ("mxfp4", 32), "b16": ("mxfp4", 16), "nv": ("nvfp4", None)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=100)
    p.add_argument("--size", type=int, default=8192, help="N = K")
    p.add_argument("--series", choices=list(WEIGHTS), help="one weight's per-call series")
    p.add_argument("--activations", default=None, help="Linear's activations= (default: f32)")
    args = p.parse_args()
    rng = np.random.default_rng(0)
    k = n = args.size
    w = rng.standard_normal((n, k), dtype=np.float32)
    labels = [args.series] if args.series else list(WEIGHTS)
    lins = {
        label: mlir_mx.Linear(
            mlir_mx.quantize(w, *WEIGHTS[label], axis=1),
            threads=args.threads,
            activations=args.activations,
        )
        for label in labels
    }
    del w
    x = rng.standard_normal(k).astype(np.float32)
    out = np.zeros(n, np.float32)
    times: dict[str, list[float]] = {label: [] for label in lins}
    for _ in range(args.rounds):
        for label, lin in lins.items():
            out[:] = 0
            t0 = time.perf_counter()
            if not lin.call_into(x.ctypes.data, 1, out.ctypes.data, args.threads):
                raise SystemExit(f"{label}: Linear.call_into declined this call")
            times[label].append(time.perf_counter() - t0)
    t = {label: 1e3 * np.array(v) for label, v in times.items()}
    if args.series:
        v = t[args.series]
        p10 = np.percentile(v, 10)
        marks = "".join("." if x < 1.15 * p10 else ("o" if x < 1.5 * p10 else "X") for x in v)
        pct = " ".join(f"{np.percentile(v, q):.2f}" for q in (10, 50, 90))
        print(f"{args.series}: p10/50/90 {pct} ms\n{marks}")
        return
    ratio = {label: float(np.median(t[label] / t["b32"])) for label in t}
    print(
        f"{n}x{k}, {args.threads} thread(s), {args.rounds} rounds: "
        + " | ".join(f"{lab} {np.median(v):.2f} ms ({ratio[lab]:.3f}x b32)" for lab, v in t.items())
    )


if __name__ == "__main__":
    main()

"""Our exact decode against ggml's, call for call in one process (issue 51's
"1 x 8192 x 8192 exact >= 1.3x ggml Q8_0 / MXFP4" row): ``mlir_mx.Linear``
(f32 activations, the weights quantized to ELEMENT in blocks of 32, the
default kernel and its thread count) and ggml's ``mul_mat`` of the same f32
weights quantized to Q8_0 (FP8 rows) or MXFP4 (FP4 rows), through the bench's
own ggml baseline, in turn: ROUNDS rounds of a block of BLOCK calls of each,
the first 2 calls of each block left out (ggml's workers spin on after its
call: a 2-thread kernel called right after it ran 1.7x slower); the medians,
their ratio and the median of the per-round ratios.  mx-bench times each
row's calls together, minutes apart on a shared host; here each round has
both.

    PYTHONPATH=src python bench/probes/decode_vs_ggml.py [--elements f8E4M3FN,f4E2M1FN] \\
        [--threads 1,2] [--rounds 12] [--block 10] [--n 8192] [--k 8192]
"""

from __future__ import annotations

import argparse
import functools
import time

import numpy as np

import mlir_mx
from mlir_mx.roofline.variants import Shape
from mlir_mx_bench.cases import make_problem
from mlir_mx_bench.ggml_baseline import ggml_available, ggml_methods


def _block(call, n: int) -> np.ndarray:
    """The times of calls 3 .. n of ``n`` calls in a row."""
    ts = []
    for _ in range(n):
        t0 = time.perf_counter()
        call()
        ts.append(time.perf_counter() - t0)
    return np.array(ts[2:])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--elements", default="f8E4M3FN,f4E2M1FN")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--block", type=int, default=10)
    ap.add_argument("--n", type=int, default=8192)
    ap.add_argument("--k", type=int, default=8192)
    args = ap.parse_args()
    why = ggml_available()
    if why:
        raise SystemExit(f"ggml is not available: {why}")
    for element in args.elements.split(","):
        p = make_problem(Shape(1, args.k, args.n), element, 32)
        want = "ggml Q8_0" if element.startswith("f8") else "ggml MXFP4"
        w = mlir_mx.quantize(np.ascontiguousarray(p.b.T), element, 32)
        for threads in (int(t) for t in args.threads.split(",")):
            found = ggml_methods(p, threads)
            gg = next(m for m in found if m.name == want)
            lin = mlir_mx.Linear(w, threads=threads)
            lin(p.a)
            gg.run(1)
            ours_call = functools.partial(lin, p.a)
            theirs_call = functools.partial(gg.run, 1)
            ours, theirs = [], []
            for _ in range(args.rounds):
                ours.append(_block(ours_call, args.block))
                theirs.append(_block(theirs_call, args.block))
            o, g = np.median(np.concatenate(ours)), np.median(np.concatenate(theirs))
            per = np.median([np.median(t) / np.median(u) for u, t in zip(ours, theirs, strict=True)])
            print(
                f"{element} 1x{args.k}x{args.n} {threads} thread(s) {lin.schedule(p.a)}: ours"
                f" {1e3 * o:.3f} ms, {want} {1e3 * g:.3f} ms: {g / o:.2f}x (per round {per:.2f}x)",
                flush=True,
            )
            for m in found:
                if m.close:
                    m.close()


if __name__ == "__main__":
    main()

"""Where ``Linear(w, activations="bf16")``'s AMX hook starts to pay, by row
count (issue 51; ``mlir_mx.linear.amx_linear.MIN_ROWS``): the hook's call
against the same Linear with ``MLIR_MX_AMX=0`` (the exact path's kernels),
K x N E2M1 weights, N(0,1) activations, 1 thread, interleaved rounds.  The
hook's row minimum is lowered to 1 for the probe.  Thread CPU time and wall
time, medians.

    python bench/probes/amx_linear_rows.py [K N] [--rows 4,8,16,32,64] [--rounds 7]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

import mlir_mx
from mlir_mx import oracle
from mlir_mx.linear import amx_linear


def timed(fn):
    w0, c0 = time.perf_counter(), time.thread_time()
    fn()
    return (time.thread_time() - c0) * 1e3, (time.perf_counter() - w0) * 1e3


def exact_path(lin, a):
    os.environ[amx_linear.ENV] = "0"
    try:
        return lin(a)
    finally:
        del os.environ[amx_linear.ENV]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("shape", nargs="*", type=int, default=[4096, 4096])
    ap.add_argument("--rows", default="4,8,16,32,64")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--element", default="f4E2M1FN")
    args = ap.parse_args()
    k, n = args.shape
    rng = np.random.default_rng(0)
    w = oracle.quantize(rng.standard_normal((n, k)).astype(np.float32), args.element, 32)
    lin = mlir_mx.Linear(w, activations="bf16", threads=1)
    amx_linear.MIN_ROWS = 1
    print(f"{args.element} {k}x{n}, 1 thread, median of {args.rounds} rounds "
          "(ms: thread CPU / wall)")  # fmt: skip
    for m in [int(r) for r in args.rows.split(",")]:
        a = rng.standard_normal((m, k)).astype(np.float32)
        got, want = lin(a), exact_path(lin, a)
        path = amx_linear.last_path(lin)
        differ = int((got.view(np.uint32) != want.view(np.uint32)).sum())
        rows = {"AMX hook": lambda a=a: lin(a), "exact": lambda a=a: exact_path(lin, a)}
        times = {name: [] for name in rows}
        for _ in range(args.rounds):
            for name, fn in rows.items():
                times[name].append(timed(fn))
        med = {name: (statistics.median(t[0] for t in ts), statistics.median(t[1] for t in ts))
               for name, ts in times.items()}  # fmt: skip
        print(f"  M={m:4d} took {path}, {differ} differ: AMX {med['AMX hook'][0]:7.2f} / "
              f"{med['AMX hook'][1]:7.2f}  exact {med['exact'][0]:7.2f} / {med['exact'][1]:7.2f}"
              f"  ratio (CPU) {med['exact'][0] / med['AMX hook'][0]:.2f}x")


if __name__ == "__main__":
    main()

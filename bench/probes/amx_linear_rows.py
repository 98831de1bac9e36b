"""Where ``Linear(w, activations="bf16")``'s AMX hook starts to pay, by row
count (issue 51; ``mlir_mx.linear.amx_linear.MIN_ROWS``): the hook's call
against the same Linear with ``MLIR_MX_AMX=0`` (the exact path's kernels),
K x N E2M1 weights, N(0,1) activations, 1 thread, interleaved rounds.  The
hook's row minimum is lowered to 1 for the probe.  Thread CPU time and wall
time, medians.

    python bench/probes/amx_linear_rows.py [K N] [--rows 4,8,16,32,64] [--rounds 7]
        [--fail 0.1,0.2,0.3]

``--fail S``: a share S of the (row, block)s (chosen at random) made to fail
the guard (one element set to 2^10 and one to 2^-12 in each: a spread above
every format's T), with the hook's fallback share limit lifted, to see what
the fallback costs against the exact path.
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


def fail(a, share, rng) -> None:
    """Make ``share`` of ``a``'s (row, 32-block)s fail the guard, in place."""
    m, k = a.shape
    blocks = a.reshape(m, k // 32, 32)
    chosen = rng.random((m, k // 32)) < share
    blocks[chosen, 0] = 2.0**10
    blocks[chosen, 1] = 2.0**-12


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
    ap.add_argument("--fail", default="", help="shares of failing (row, block)s, comma-separated")
    args = ap.parse_args()
    k, n = args.shape
    rng = np.random.default_rng(0)
    w = oracle.quantize(rng.standard_normal((n, k)).astype(np.float32), args.element, 32)
    lin = mlir_mx.Linear(w, activations="bf16", threads=1)
    amx_linear.MIN_ROWS = 1
    print(f"{args.element} {k}x{n}, 1 thread, median of {args.rounds} rounds "
          "(ms: thread CPU / wall)")  # fmt: skip
    shares = [float(f) for f in args.fail.split(",")] if args.fail else [None]
    for m, share in [(int(r), f) for r in args.rows.split(",") for f in shares]:
        a = rng.standard_normal((m, k)).astype(np.float32)
        if share is not None:
            amx_linear.amx_matmul_of(lin)[0].max_fallback_share = 1.0
            fail(a, share, rng)
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
        label = "" if share is None else f" fail {share:.0%}"
        print(f"  M={m:4d}{label} took {path}, {differ} differ: AMX {med['AMX hook'][0]:7.2f} / "
              f"{med['AMX hook'][1]:7.2f}  exact {med['exact'][0]:7.2f} / {med['exact'][1]:7.2f}"
              f"  ratio (CPU) {med['exact'][0] / med['AMX hook'][0]:.2f}x")


if __name__ == "__main__":
    main()

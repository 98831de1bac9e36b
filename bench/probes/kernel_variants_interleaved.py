"""Kernel variants side by side in one process, calls interleaved (session 60).

On a host whose second vCPU is shared with other tenants, a process's speed
moves by 10-50 % from one minute to the next (``host-pair-contention.c``),
so two variants timed in separate processes, even alternating, compare
noise.  Here each variant is a ``Linear`` of the same weight built while an
environment variable (read by an experiment's ``StreamConfig.adapt`` or
similar, at kernel planning; the plan's fields key the kernel, so each value
compiles its own) holds one value; the calls then alternate, call by call,
and each call's time is divided by the first variant's in the same round.
The bits of every variant are checked equal first.

    MLIR_MX_CACHE_DIR=off python bench/probes/kernel_variants_interleaved.py \\
        --var CARRY --values 0,2,4 --format nvfp4 [--n 8192] [--threads 1] [--calls 300]

Prints per variant the 10th/50th/90th percentile (ms), the median per-call
ratio to the first variant, and the first 100 calls as ``.`` (within 15 % of
the variant's 10th percentile), ``o`` (within 50 %) or ``X``: a kernel that
falls into slow phases while the first, called in between, stays steady is
sensitive to the neighbour, not the victim of noise.  Session 60's uses
(``bench/results/zen4-s60-2026-12-06.md``): the carry and multi-stream NVFP4
decode variants, MXFP8 stream counts, C prefetch distances.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

import mlir_mx


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--var", required=True, help="the environment variable the variants set")
    ap.add_argument("--values", required=True, help="comma-separated; '0' or '' unsets it")
    ap.add_argument("--format", default="nvfp4", help="nvfp4, or ELEMENT:BLOCK (f4E2M1FN:32)")
    ap.add_argument("--n", type=int, default=8192, help="N = K")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--calls", type=int, default=300)
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    wf = rng.standard_normal((a.n, a.n)).astype(np.float32)
    if a.format == "nvfp4":
        w = mlir_mx.quantize(wf, "nvfp4")
    else:
        element, block = a.format.split(":")
        w = mlir_mx.quantize(wf, element, int(block))
    x = rng.standard_normal((1, a.n)).astype(np.float32)
    lins = {}
    for v in a.values.split(","):
        os.environ.pop(a.var, None)
        if v not in ("", "0"):
            os.environ[a.var] = v
        lin = mlir_mx.Linear(w, threads=a.threads)
        y = np.zeros((1, a.n), np.float32)
        assert lin.call_into(x.ctypes.data, 1, y.ctypes.data, a.threads)
        lins[v] = (lin, y)
    os.environ.pop(a.var, None)
    first = next(iter(lins))
    for v, (_, y) in lins.items():
        assert np.array_equal(y.view(np.uint32), lins[first][1].view(np.uint32)), f"{v}: other bits"
    times: dict[str, list[float]] = {v: [] for v in lins}
    for _ in range(a.calls):
        for v, (lin, y) in lins.items():
            y[:] = 0
            t0 = time.perf_counter()
            lin.call_into(x.ctypes.data, 1, y.ctypes.data, a.threads)
            times[v].append(time.perf_counter() - t0)
    base = np.array(times[first])
    for v, ts in times.items():
        t = np.array(ts)
        p10, p50, p90 = np.percentile(t * 1e3, [10, 50, 90])
        marks = "".join("." if s < 1.15 * p10 / 1e3 else "o" if s < 1.5 * p10 / 1e3 else "X" for s in t[:100])
        print(f"{a.var}={v or '0':4s} p10/50/90 {p10:.3f} {p50:.3f} {p90:.3f} ms  "
              f"ratio {np.median(t / base):.3f}  {marks}")  # fmt: skip


if __name__ == "__main__":
    main()

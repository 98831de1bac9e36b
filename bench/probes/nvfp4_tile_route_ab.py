"""NVFP4's AMX tile route (issue 54, session 57), A/B in one process: the
(row, block)s that fail the guard only because of the scales' odd part
``m`` take ``t`` from a tile product (``MLIR_MX_AMX_NVFP4_TILES`` unset)
or from the FMA chains (``=0``, as before), against MXFP4 on AMX, the
three interleaved per round.  Prints the shares of (row, block)s that
pass, take the tile route and take the chains (N(0,1) weights and
activations, the shapes of ``nvfp4_vs_mxfp4.py``'s prefill), then the
medians of ``AMXMatmul.prepare`` and ``.run`` (thread CPU time and wall
time).  The bits of both NVFP4 sides are checked equal first.

    python bench/probes/nvfp4_tile_route_ab.py [M K N] [--rounds 15] [--threads 1]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import ml_dtypes
import numpy as np

import mlir_mx
from mlir_mx import oracle
from mlir_mx.linear.amx_matmul import AMXMatmul
from mlir_mx.linear.amx_prepare import TILES_ENV


def _timed(fn):
    w0, c0 = time.perf_counter(), time.thread_time()
    out = fn()
    return out, time.thread_time() - c0, time.perf_counter() - w0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("shape", nargs="*", type=int, default=[256, 4096, 4096])
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    m, k, n = args.shape
    rng = np.random.default_rng(0)
    w = rng.standard_normal((k, n), dtype=np.float32)
    x = rng.standard_normal((m, k)).astype(np.float32)
    a = x.astype(ml_dtypes.bfloat16).astype(np.float32)
    nv = AMXMatmul(mlir_mx.quantize(w, "nvfp4", 16, axis=0), threads=args.threads)
    mx = AMXMatmul(mlir_mx.quantize(w, "mxfp4", 32, axis=0), threads=args.threads)
    ok, route = oracle.amx_plan(a, nv.weight), oracle.amx_tile_route(a, nv.weight)
    total = ok.size
    print(f"{m}x{k}x{n} NVFP4, N(0,1): (row, block of 16)s {total}: pass {ok.sum() / total:.1%}, "
          f"tile route {route.sum() / total:.1%}, chains {(~ok & ~route).sum() / total:.1%}; "
          f"MXFP4 (blocks of 32) failing {(~oracle.amx_plan(a, mx.weight)).mean():.1%}")  # fmt: skip
    sides = {"NVFP4 tiles": (nv, ""), "NVFP4 chains": (nv, "0"), "MXFP4": (mx, "")}
    outs = {}
    for label, (mm, env) in sides.items():
        os.environ[TILES_ENV] = env
        outs[label] = mm.run(mm.prepare(a), m)
    same = np.array_equal(outs["NVFP4 tiles"].view(np.uint32), outs["NVFP4 chains"].view(np.uint32))
    print(f"NVFP4 tiles and chains: the same bits: {same}")
    times = {label: {"prepare": [], "run": [], "wall": []} for label in sides}
    for _ in range(args.rounds):
        for label, (mm, env) in sides.items():
            os.environ[TILES_ENV] = env
            prep, cp, wp = _timed(lambda mm=mm: mm.prepare(a))
            _, cr, wr = _timed(lambda mm=mm, prep=prep: mm.run(prep, m))
            times[label]["prepare"].append(cp * 1e3)
            times[label]["run"].append(cr * 1e3)
            times[label]["wall"].append((wp + wr) * 1e3)
    os.environ.pop(TILES_ENV, None)
    base = statistics.median(times["MXFP4"]["wall"])
    for label, t in times.items():
        med = {key: statistics.median(v) for key, v in t.items()}
        print(f"{label:13s} prepare {med['prepare']:6.2f} + run {med['run']:6.2f} ms (thread CPU); "
              f"wall {med['wall']:6.2f} ms ({med['wall'] / base:.2f}x MXFP4)")  # fmt: skip


if __name__ == "__main__":
    main()

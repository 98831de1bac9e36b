"""A's preparation for the guarded AMX-BF16 matmul on one thread against the
same on the call's team (``mlir_mx.linear.amx_prepare``, issue 51, session
56): ``prepare_activations`` with :data:`SPLIT_ENV` unset (the 1-thread
kernel) and set to 0 (the row tiles on a team of ``--threads``), in one
process, interleaved (each first in every other round), wall time, median of
the rounds; the arrays compared bit for bit.

    MLIR_MX_LOAD_CHECK=0 python bench/probes/amx_prepare_team_ab.py \\
        [--rounds 200] [--threads 2] [--torch] [--m 128,256] [--k 2048,4096,5632]

``--torch``: torch imported first (its OpenMP team runs the team's kernel,
as in a torch model); without it, the project's own pool.  Activations
N(0,1) (a few per cent of the (row, block)s fail the guard).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

from mlir_mx import oracle
from mlir_mx.execution import threads as team_threads
from mlir_mx.linear import amx_prepare
from mlir_mx.numerics import MXArray


def params(k: int) -> amx_prepare.GuardParams:
    rng = np.random.default_rng(0)
    w = oracle.quantize(rng.standard_normal((16, k)).astype(np.float32), "f4E2M1FN", 32)
    b = MXArray(w.codes.T.copy(), w.scales.view(np.uint8).T.copy(), "f4E2M1FN", 32, 0)
    return amx_prepare.guard_params(oracle.amx_prepare(b))


def timed(a, p, buffers, split: bool, threads: int):
    if split:
        os.environ[amx_prepare.SPLIT_ENV] = "0"
    else:
        os.environ.pop(amx_prepare.SPLIT_ENV, None)
    start = time.perf_counter()
    done = amx_prepare.prepare_activations(a, p, 1.0, buffers, threads=threads)
    return time.perf_counter() - start, done


def row(m: int, k: int, rounds: int, threads: int) -> str:
    p = params(k)
    a = np.random.default_rng(1).standard_normal((m, k)).astype(np.float32)
    buffers = ({}, {})
    _, one = timed(a, p, buffers[0], False, threads)
    _, two = timed(a, p, buffers[1], True, threads)
    same = all(np.array_equal(np.asarray(x).view(np.uint8), np.asarray(y).view(np.uint8))
               for x, y in zip(one.args, two.args, strict=True))  # fmt: skip
    times: tuple[list, list] = ([], [])
    regions = team_threads.regions()
    for i in range(rounds):
        for side in (i % 2, 1 - i % 2):
            times[side].append(timed(a, p, buffers[side], bool(side), threads)[0])
    one_ms, team_ms = (statistics.median(t) * 1e3 for t in times)
    return (f"M={m} K={k} threads={threads}: one thread {one_ms:.3f} ms, team {team_ms:.3f} ms, "
            f"team/one {team_ms / one_ms:.2f}, bits same {same}, "
            f"regions {team_threads.regions() - regions}")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--torch", action="store_true")
    ap.add_argument("--m", default="128,256")
    ap.add_argument("--k", default="2048,4096,5632")
    args = ap.parse_args()
    if args.torch:
        import torch  # noqa: F401  (its OpenMP team)
    print(f"load {os.getloadavg()[0]:.2f}")
    for m in (int(v) for v in args.m.split(",")):
        for k in (int(v) for v in args.k.split(",")):
            print(row(m, k, args.rounds, args.threads), flush=True)
    print(f"load {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()

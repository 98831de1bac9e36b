"""Where the 2-thread 1 x N x N decode loses time (issue 51, session 54).

Splits a 2-thread ``mlir_mx.Linear`` decode (f32 activations, tiled B) into
what a team adds and what two cores sharing the memory cost:

* ``empty``: a parallel region with no work (``threads.batch_entry`` on an
  empty list) on torch's OpenMP team and on our pool: the wake-up and join,
  with the Python of ``threads._launch`` (about 1.5 us of it);
* ``1t``: the 1-thread kernel, whole N;
* ``half alone``: the 1-thread kernel on N/2 columns, the other core idle;
* ``halves``: two Python threads, each the 1-thread kernel on its own N/2
  columns (two Linears), started together: a split with no team, no shared
  call, the memory shared;
* ``2t omp`` / ``2t pool``: the 2-thread kernel on each team; for the pool,
  the caller's own share and its wait for the worker (``Pool``'s cycle
  counts, converted at the TSC rate measured here).

The load check is off (``MLIR_MX_LOAD_CHECK=0`` before the import) so every
2-thread call really runs 2 threads.  Each figure: the minimum and the median
of ROUNDS rounds of CALLS calls (wall clock per call); on a shared machine the
minimum is the nearest to a quiet one.

    PYTHONPATH=src python bench/probes/fp8_two_thread_split.py \
        [--n 8192] [--element f8E4M3FN] [--rounds 15] [--calls 10]
"""

from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import threading
import time

os.environ["MLIR_MX_LOAD_CHECK"] = "0"

import numpy as np  # noqa: E402
import torch  # noqa: E402, F401  (loads libgomp: the "tasks" lowering and torch's team)

import mlir_mx  # noqa: E402
from mlir_mx.execution import pool as pool_  # noqa: E402
from mlir_mx.execution import threads as th  # noqa: E402


def tsc_hz() -> float:
    """The cycle counter's rate (the pool's counts are ``rdtsc`` ticks): the
    model name's frequency, else BogoMIPS / 2 (this KVM guest's TSC)."""
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name") and "@" in line:
                return float(line.split("@")[1].strip().rstrip("GHz")) * 1e9
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.lower().startswith("bogomips"):
                return float(line.split(":")[1]) / 2 * 1e6
    return 2.6e9


def rounds_of(call, rounds: int, calls: int) -> list[float]:
    call()
    out = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(calls):
            call()
        out.append((time.perf_counter() - t0) / calls)
    return out


def empty_region(team: str, rounds: int, calls: int) -> list[float]:
    th.set_team(team)
    listing = (ctypes.c_void_p * 1)(0)
    cell = ctypes.c_void_p(ctypes.addressof(listing))
    array = (ctypes.c_void_p * 1)(ctypes.addressof(cell))
    counter = ctypes.c_int64(0)
    entry = th.batch_entry()
    return rounds_of(lambda: th._launch(entry, array, counter, 2), rounds, calls)


def halves(lins, x, rounds: int, calls: int) -> list[float]:
    """Two threads, each its own Linear ``calls`` times, started at a barrier."""
    out = []
    for _ in range(rounds + 1):
        gate = threading.Barrier(3)
        done = []

        def go(lin, gate=gate, done=done):
            gate.wait()
            for _ in range(calls):
                lin(x, threads=1)
            done.append(time.perf_counter())

        ts = [threading.Thread(target=go, args=(lin,)) for lin in lins]
        for t in ts:
            t.start()
        gate.wait()
        t0 = time.perf_counter()
        for t in ts:
            t.join()
        out.append((max(done) - t0) / calls)
    return out[1:]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=8192)
    ap.add_argument("--element", default="f8E4M3FN")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--calls", type=int, default=10)
    ns = ap.parse_args()
    n, el, R, C = ns.n, ns.element, ns.rounds, ns.calls
    rng = np.random.default_rng(0)
    wf = rng.standard_normal((n, n)).astype(np.float32)
    w = mlir_mx.quantize(wf, el, 32)
    x = rng.standard_normal((1, n)).astype(np.float32)
    lin = mlir_mx.Linear(w, threads=2)
    half = [mlir_mx.Linear(mlir_mx.quantize(wf[i * n // 2 : (i + 1) * n // 2], el, 32))
            for i in range(2)]  # fmt: skip
    ref = lin(x, threads=1)
    assert np.array_equal(lin(x, threads=2).view(np.uint32), ref.view(np.uint32))
    rows: dict[str, list[float]] = {}
    rows["empty omp"] = empty_region("openmp", R, 200)
    rows["empty pool"] = empty_region("pool", R, 200)
    for team in ("openmp", "pool"):
        th.set_team(team)
        lin(x, threads=2)
    rows["1t"] = rounds_of(lambda: lin(x, threads=1), R, C)
    rows["half alone"] = rounds_of(lambda: half[0](x, threads=1), R, C)
    rows["halves"] = halves(half, x, R, C)
    th.set_team("openmp")
    rows["2t omp"] = rounds_of(lambda: lin(x, threads=2), R, C)
    th.set_team("pool")
    p = pool_.pool()
    shares = []

    def pool_call():
        lin(x, threads=2)
        shares.append((p._view[pool_._WORK], p._view[pool_._WAIT]))

    rows["2t pool"] = rounds_of(pool_call, R, C)
    hz = tsc_hz()
    work = sorted(s[0] / hz for s in shares)
    wait = sorted(s[1] / hz for s in shares)
    print(f"1 x {n} x {n} {el}, Linear f32 x, load {os.getloadavg()}, "
          f"team calls {th.regions()}, pool alone {p.alone}")  # fmt: skip
    for name, ts in rows.items():
        print(
            f"  {name:11s} min {min(ts) * 1e3:8.4f} ms  median {statistics.median(ts) * 1e3:8.4f} ms"
        )
    print(f"  pool caller's share: min {work[0] * 1e3:.4f} median {statistics.median(work) * 1e3:.4f} ms;"
          f" its wait for the worker: min {wait[0] * 1e3:.4f} median {statistics.median(wait) * 1e3:.4f}"
          f" p90 {wait[len(wait) * 9 // 10] * 1e3:.4f} ms")  # fmt: skip


if __name__ == "__main__":
    main()

"""The guarded AMX-BF16 matmul kernel (``mlir_mx.linear.amx_matmul``) against
``Linear(w, activations="bf16")`` and ``Linear(w)`` (exact, f32 activations),
256 x 4096 x 4096 E2M1 (MXFP4) weights, N(0,1) bf16 activations, 1 thread,
interleaved rounds in one process (``--threads``: 1 by default; issue 51; the C prototype is
``bench/probes/amx-bf16-speed.c``).

Rows: the kernel alone (A packed and the failing rows listed once, outside
the timing; the fallback chains run in the kernel), the compiled
preparation (``AMXMatmul.prepare``: ``mlir_mx.linear.amx_prepare``, the
guard, the packing and the lists in one kernel pass, then the by-block
lists in numpy) and its kernel alone, the numpy model's parts (the guard
``amx_plan``, ``pack_activations``, ``failing_rows`` with
``failing_blocks``), the whole call (``AMXMatmul(b)(a)``: compiled
preparation and kernel), and ``Linear(w, activations="bf16")`` with its AMX
hook (``mlir_mx.linear.amx_linear``) and without it (``MLIR_MX_AMX=0``: the
exact path's kernels).  Thread CPU time and wall time, median of the rounds.
Checks the kernel's bits against ``Linear(w, activations="bf16")`` (AMX off)
first.

    python bench/probes/amx_matmul_speed.py [M K N] [--rounds 7] [--threads 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import ml_dtypes
import numpy as np

import mlir_mx
import mlir_mx.execution.threads
from mlir_mx import oracle
from mlir_mx.linear import amx_linear, amx_matmul
from mlir_mx.linear.amx_matmul import AMXMatmul
from mlir_mx.linear.amx_prepare import guard_params, prepare_runner
from mlir_mx.numerics import MXArray


def timed(fn):
    w0, c0 = time.perf_counter(), time.thread_time()
    fn()
    return (time.thread_time() - c0) * 1e3, (time.perf_counter() - w0) * 1e3


def fails_and_blocks(a, ok):
    ptr, rows, bptr, bidx, grow = amx_matmul.failing_rows(ok)
    return amx_matmul.failing_blocks(a, bptr, bidx, grow)


def exact_path(lin, a):
    os.environ[amx_linear.ENV] = "0"
    try:
        return lin(a)
    finally:
        del os.environ[amx_linear.ENV]


def prepare_kernel(a, params, nb):
    """The compiled prepare kernel alone, on fresh outputs (as a call makes them)."""
    m = a.shape[0]
    mt = -(-m // 16)
    prepare_runner().amx_prepare(
        a, params.lim, params.cap, params.par, np.empty((mt, nb, 16, 32), np.int16),
        np.empty(mt * nb + 1, np.int32), np.empty(m * nb, np.int32),
        np.empty((m * nb, 32), np.float32), np.zeros(4, np.int32))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("shape", nargs="*", type=int, default=[256, 4096, 4096])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--element", default="f4E2M1FN")
    ap.add_argument("--threads", type=int, default=1, help="the kernel's and Linear's team")
    ap.add_argument("--team", choices=["openmp", "pool"], default="openmp",
                    help="openmp: torch's (imported here for its libgomp); pool: ours")  # fmt: skip
    args = ap.parse_args()
    if args.threads > 1 and args.team == "openmp":
        import torch  # noqa: F401  (its OpenMP runtime runs the teams, as in a torch process)
    mlir_mx.execution.threads.set_team(args.team)
    m, k, n = args.shape
    rng = np.random.default_rng(0)
    w = oracle.quantize(rng.standard_normal((n, k)).astype(np.float32), args.element, 32)
    b = MXArray(w.codes.T.copy(), w.scales.T.copy(), args.element, 32, 0)
    a = rng.standard_normal((m, k)).astype(ml_dtypes.bfloat16).astype(np.float32)
    t = args.threads
    mm = AMXMatmul(b, threads=t)
    lin_bf16 = mlir_mx.Linear(w, activations="bf16", threads=t)
    lin_exact = mlir_mx.Linear(w, threads=t)
    prepared = mm.prepare(a)
    ok = oracle.amx_plan(a, mm.weight)
    fails = int((~ok).sum())
    print(f"{m}x{k}x{n} {args.element}: guard fails on {fails} of {ok.size} (row, block)s "
          f"({100 * fails / ok.size:.2f} %); weight flagged blocks: {int(mm.weight.flagged.sum())}")  # fmt: skip
    got, want = mm.run(prepared, m), exact_path(lin_bf16, a)
    differ = int((got.view(np.uint32) != want.view(np.uint32)).sum())
    print(f"kernel vs Linear(activations='bf16') exact: {differ} of {got.size} outputs differ")
    hooked = lin_bf16(a)
    differ = int((hooked.view(np.uint32) != want.view(np.uint32)).sum())
    print(f"Linear(activations='bf16') took {amx_linear.last_path(lin_bf16)!r}: "
          f"{differ} of {got.size} outputs differ from its exact path")  # fmt: skip
    params, nb = guard_params(mm.weight), k // 32
    rows = {
        "AMX kernel alone (prepared A)": lambda: mm.run(prepared, m),
        "AMX whole call (prepare + kernel)": lambda: mm(a),
        "  part: prepare (compiled; AMXMatmul.prepare)": lambda: mm.prepare(a),
        "    its kernel alone": lambda: prepare_kernel(a, params, nb),
        "  numpy model: amx_plan (guard)": lambda: oracle.amx_plan(a, mm.weight),
        "  numpy model: pack_activations": lambda: amx_matmul.pack_activations(a, ok),
        "  numpy model: failing_rows + blocks": lambda: fails_and_blocks(a, ok),
        "Linear(w, activations='bf16'), AMX hook": lambda: lin_bf16(a),
        "Linear(w, activations='bf16'), MLIR_MX_AMX=0": lambda: exact_path(lin_bf16, a),
        "Linear(w) exact, f32 activations": lambda: lin_exact(a),
    }
    for fn in rows.values():  # warm up
        fn()
    times = {name: [] for name in rows}
    for _ in range(args.rounds):
        for name, fn in rows.items():
            times[name].append(timed(fn))
    print(f"AMXMatmul holds {mm.held_bytes} bytes; the packed codes {b.packed_codes().nbytes}")
    print(f"median of {args.rounds} interleaved rounds, {t} thread(s) "
          "(ms: calling thread's CPU / wall)")  # fmt: skip
    for name, ts in times.items():
        cpu = statistics.median(t[0] for t in ts)
        wall = statistics.median(t[1] for t in ts)
        print(f"  {name:45s} {cpu:8.1f} / {wall:8.1f}")


if __name__ == "__main__":
    main()

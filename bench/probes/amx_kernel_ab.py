"""The AMX matmul kernel (``mlir_mx.kernels.amx.matmul``) against another
version of it, in one process, interleaved (each first in every other round), with the same prepared
arguments and each its own output array, allocated once (issue 51, session
55); thread CPU time, median of the rounds; bits compared.

    python bench/probes/amx_kernel_ab.py [M K N] [--old FILE.py] [--rounds 15]
        [--acts normal|pass] [--element f4E2M1FN] [--threads 1]
        [--chunk C] [--whole-k-tiles T] [--old-chunk C] [--old-whole-k-tiles T]

``--old``: a Python file holding an older ``matmul_module`` (e.g. ``git show
REV:src/mlir_mx/kernels/amx/matmul.py > /tmp/old_matmul.py``; its imports
are this tree's); without it, the tree's kernel against itself.  ``--acts
pass``: activations of ±1 (every (row, block) passes the guard: no fallback
chains, the tiles and the widening alone); ``normal``: N(0,1) (~6 % fail).
``--chunk``/``--whole-k-tiles`` (and ``--old-``): ``matmul_module``'s K
chunk and chunking threshold for the new (old) side, by default its own
(session 56: the order's rule measured on one kernel, e.g. ``--whole-k-tiles
0`` against the default).
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import statistics
import time

import ml_dtypes
import numpy as np

from mlir_mx import oracle
from mlir_mx.execution import CompileOptions, Runner
from mlir_mx.kernels.amx.matmul import matmul_module
from mlir_mx.linear.amx_matmul import GROUP, AMXMatmul
from mlir_mx.numerics import MXArray
from mlir_mx.passes.pipeline import Pipeline, PipelineElement
from mlir_mx.pipelines.amx import amx_library_pipeline


def runner(module_fn, element: str, threads: int) -> Runner:
    from mlir import ir

    with ir.Context(), ir.Location.unknown():
        text = str(module_fn("amx_matmul", GROUP, element))
    tasks = PipelineElement.of("mx-parallel-tasks", threads=threads)
    return Runner(text, options=CompileOptions(Pipeline((tasks, *amx_library_pipeline()))))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("shape", nargs="*", type=int, default=[256, 4096, 4096])
    ap.add_argument("--old", default="")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--acts", choices=["normal", "pass"], default="normal")
    ap.add_argument("--element", default="f4E2M1FN")
    ap.add_argument("--threads", type=int, default=1)
    for side in ("", "old-"):
        ap.add_argument(f"--{side}chunk", type=int, default=None)
        ap.add_argument(f"--{side}whole-k-tiles", type=int, default=None)
    args = ap.parse_args()
    m, k, n = args.shape
    rng = np.random.default_rng(0)
    w = oracle.quantize(rng.standard_normal((n, k)).astype(np.float32), args.element, 32)
    b = MXArray(w.codes.T.copy(), w.scales.T.copy(), args.element, 32, 0)
    if args.acts == "pass":
        a = np.where(rng.random((m, k)) < 0.5, -1.0, 1.0).astype(np.float32)
    else:
        a = rng.standard_normal((m, k)).astype(ml_dtypes.bfloat16).astype(np.float32)
    mm = AMXMatmul(b)
    prepared = mm.prepare(a)
    assert prepared is not None, "the call would take the exact path"
    old_fn = matmul_module
    if args.old:
        spec = importlib.util.spec_from_file_location("old_matmul", args.old)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        old_fn = mod.matmul_module
    old_fn = functools.partial(old_fn, chunk=args.old_chunk, whole_k_tiles=args.old_whole_k_tiles)
    new_fn = functools.partial(matmul_module, chunk=args.chunk, whole_k_tiles=args.whole_k_tiles)
    kernels = {"old": runner(old_fn, args.element, args.threads),
               "new": runner(new_fn, args.element, args.threads)}  # fmt: skip
    a_tiles, ptr, rows, bptr, bidx, fa = prepared
    shape = (a_tiles.shape[0] * 16, mm.b_codes.shape[0] * 16)
    outs = {name: np.zeros(shape, np.float32) for name in kernels}  # faulted in, reused

    def call(name):
        c = outs[name]
        kernels[name].amx_matmul(a_tiles, mm.b_codes, c, ptr, rows, mm.b_scales, bptr, bidx, fa)

    times = {name: [] for name in kernels}
    for name in kernels:
        call(name)
    differ = int((outs["old"].view(np.uint32) != outs["new"].view(np.uint32)).sum())
    fails = (np.diff(ptr) > 0).sum()
    print(f"{m}x{k}x{n} {args.element} acts={args.acts}: {len(rows)} failing (row, block)s, "
          f"{fails} (row tile, block)s with one; old vs new: {differ} outputs differ")  # fmt: skip
    walls = {name: [] for name in kernels}
    for r in range(args.rounds):
        for name in list(kernels)[:: 1 if r % 2 else -1]:  # each first in half the rounds
            w0, c0 = time.perf_counter(), time.thread_time()
            call(name)
            times[name].append((time.thread_time() - c0) * 1e3)
            walls[name].append((time.perf_counter() - w0) * 1e3)
    for name, ts in times.items():
        print(f"  {name}: median {statistics.median(ts):7.2f} ms, min {min(ts):7.2f} "
              f"(calling thread's CPU), wall median {statistics.median(walls[name]):7.2f} "
              f"({args.threads} thread(s), {args.rounds} rounds)")  # fmt: skip
    for what, got in (("CPU", times), ("wall", walls)):
        ratio = statistics.median(got["new"]) / statistics.median(got["old"])
        print(f"  new/old ({what}): {ratio:.3f}")


if __name__ == "__main__":
    main()

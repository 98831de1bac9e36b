"""Prescaled bf16 chunks on and off in one process, beside OpenVINO (issue 51).

Two ``Linear(w, activations="bf16")`` of the same weight: one built while
``kernels.dot.prescale.scale_bounds`` is patched to an empty range (every
chunk runs the plain block step ``t = acc * sb; c = c + t``), then the
compiled-kernel cache cleared and one built as shipped (chunks whose scales
the call's A allows run prescaled, ``c = c + acc``; ``kernels.dot.prescale``).
Their bits are checked equal, then the calls alternate, round after round,
with OpenVINO's MatMul on NNCF's MXFP4 weights (``--ov``, MXFP4 only,
its default bf16 precision) beside them; each round's time is divided by
the plain kernel's of the same round.

    python bench/probes/bf16_prescale_ab.py M N K THREADS [--format f4E2M1FN] [--rounds 25] [--ov]

Session 67 (Zen 5): 256 x 4096 x 4096 MXFP4 1.08x at 1 and 2 threads,
1.08-1.12x OpenVINO (docs/passes/mx-matmul-kernels.md, "Prescaled chunks").
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("MLIR_MX_CACHE_DIR", "off")

import numpy as np  # noqa: E402

import mlir_mx  # noqa: E402
from mlir_mx.execution.compiled import clear_cache  # noqa: E402
from mlir_mx.kernels.dot import prescale as dot_prescale  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for name in ("m", "n", "k", "threads"):
        p.add_argument(name, type=int)
    p.add_argument("--format", default="f4E2M1FN")
    p.add_argument("--rounds", type=int, default=25)
    p.add_argument("--ov", action="store_true", help="OpenVINO's MXFP4 MatMul beside them")
    args = p.parse_args()
    rng = np.random.default_rng(0)
    w = mlir_mx.quantize(rng.standard_normal((args.n, args.k)).astype(np.float32), args.format, 32)
    x = rng.standard_normal((args.m, args.k)).astype(np.float32)
    shipped = dot_prescale.scale_bounds
    dot_prescale.scale_bounds = lambda kb, e, span: (kb.const(1, kb.i8), kb.const(0, kb.i8))
    plain = mlir_mx.Linear(w, threads=args.threads, activations="bf16")
    y0 = plain(x)
    dot_prescale.scale_bounds = shipped
    clear_cache()
    pre = mlir_mx.Linear(w, threads=args.threads, activations="bf16")
    y1 = pre(x)
    print("same bits:", np.array_equal(y0.view(np.uint32), y1.view(np.uint32)), flush=True)
    calls = {"plain chunks": lambda: plain(x), "prescaled": lambda: pre(x)}
    if args.ov:
        from mlir_mx_bench.openvino_baseline import OvMatmul, compress_mxfp4

        ov = OvMatmul(compress_mxfp4(mlir_mx.dequantize(w), args.m), x, args.threads, None)
        calls[f"openvino {ov.kernel}"] = lambda: ov.run(1)
    times = {name: [] for name in calls}
    for _ in range(args.rounds):
        for name, call in calls.items():
            t0 = time.perf_counter()
            call()
            times[name].append(time.perf_counter() - t0)
    base = np.array(times["plain chunks"])
    for name, t in times.items():
        t = np.array(t)
        print(
            f"{name:28s} min {1e3 * t.min():7.2f}  p50 {1e3 * np.median(t):7.2f} ms"
            f"  speed over plain (median of rounds) {np.median(base / t):.3f}"
        )


if __name__ == "__main__":
    main()

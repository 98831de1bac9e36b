"""NVFP4 against MXFP4 ``Linear`` at decode (1 x 8192 x 8192) and prefill
(256 x 4096 x 4096), interleaved on the same machine state (issue 54's target:
the same speed within 10 %): the same f32 weights quantized to MXFP4 (block
32), MXFP4 with block 16 (what the block of 16 alone costs) and NVFP4 (block
16, E4M3 scales, the global scale divided once per output), for f32, ``i8``
and ``bf16`` activations.  Medians of ``--reps`` calls, each weight in turn
per repetition.  mx-bench (``--formats f4E2M1FN,nvfp4``) is the measurement
of record; this probe separates the block-16 cost from the E4M3 one.

    python bench/probes/nvfp4_vs_mxfp4.py [--threads 1] [--reps 11] [--only prefill]
        [--activations f32,i8,bf16]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import mlir_mx

SHAPES = ((1, 8192, 8192), (256, 4096, 4096))
WEIGHTS = (("MXFP4 b32", "mxfp4", 32), ("MXFP4 b16", "mxfp4", 16), ("NVFP4", "nvfp4", None))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--reps", type=int, default=11)
    p.add_argument("--only", choices=("decode", "prefill"), help="one of the two shapes")
    p.add_argument(
        "--cpu-time",
        action="store_true",
        help="the process's CPU time, not wall time (a loaded machine: no time spent waiting "
        "for a core; the threads' CPU time summed at more than 1 thread)",
    )
    p.add_argument("--activations", default="f32,i8,bf16", help="comma-separated (f32: None)")
    args = p.parse_args()
    acts = [None if a == "f32" else a for a in args.activations.split(",")]
    clock = time.process_time if args.cpu_time else time.perf_counter
    rng = np.random.default_rng(0)
    for m, k, n in SHAPES:
        if args.only and (m == 1) != (args.only == "decode"):
            continue
        w = rng.standard_normal((n, k), dtype=np.float32)
        x = rng.standard_normal((m, k), dtype=np.float32)
        qs = [(label, mlir_mx.quantize(w, f, b, axis=1)) for label, f, b in WEIGHTS]
        for act in acts:
            lins = [
                (label, mlir_mx.Linear(q, threads=args.threads, activations=act)) for label, q in qs
            ]
            times: dict[str, list[float]] = {label: [] for label, _ in lins}
            for _label, lin in lins:
                lin(x)  # compiles
            for _ in range(args.reps):
                for label, lin in lins:
                    t0 = clock()
                    lin(x)
                    times[label].append(clock() - t0)
            med = {label: 1e3 * float(np.median(t)) for label, t in times.items()}
            base = med["MXFP4 b32"]
            cells = ", ".join(f"{label} {v:.2f} ms ({v / base:.2f}x)" for label, v in med.items())
            sched = lins[-1][1].schedule(x)
            print(f"{m}x{k}x{n} activations={act} ({sched}, {args.threads} thread(s)): {cells}")


if __name__ == "__main__":
    main()

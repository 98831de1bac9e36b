"""The dot kernels' prefetch of ``Linear``'s B while they expand its chunks,
at several distances, in one process (issue 51; ``kernels.dot.tiles``:
``EXPAND_AHEAD`` for tiled codes with bf16 activations, ``RECORDS_AHEAD`` for
VNNI records with integer or FP8 activations).

``E`` weights of ``N x K`` (quantized from N(0, 1)) are called in turn with
the same ``M x K`` input, as a MoE's experts are (each call finds its weight
out of cache once ``E`` weights exceed L3; ``--experts 1``: one weight, in
cache); for each distance its own ``Linear`` objects are built (the compiled-
kernel cache cleared between), the rounds alternate between the distances,
and each round's time is divided by the first distance's of the same round.
The outputs are checked bit for bit against the first distance's.

    python bench/probes/expand_prefetch_ab.py N K --acts bf16 --ahead 0,2 --m 4,16
        [--format f4E2M1FN] [--experts 32] [--threads 1] [--rounds 9]

Session 68 (Zen 5): ``5760 2880 --acts bf16 --ahead 0,2 --m 4,16`` 1.43x /
1.27x; ``--acts i8 --ahead 0,6 --m 8,16`` 1.77x / 1.48x
(``docs/passes/mx-matmul-kernels.md``, "Prefetching Linear's B").
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("MLIR_MX_CACHE_DIR", "off")

import numpy as np  # noqa: E402
import torch  # noqa: E402,F401  (the pool team, as in a model)

import mlir_mx  # noqa: E402
from mlir_mx.execution.compiled import clear_cache  # noqa: E402
from mlir_mx.kernels.dot import tiles  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("n", type=int)
    p.add_argument("k", type=int)
    p.add_argument("--acts", default="bf16", help="Linear's activations= (bf16, i8, f8E4M3FN, ...)")
    p.add_argument("--ahead", default="0,2", help="distances, comma-separated (the first: the base)")
    p.add_argument("--m", default="4,16", help="row counts, comma-separated")
    p.add_argument("--format", default="f4E2M1FN")
    p.add_argument("--experts", type=int, default=32)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=9)
    args = p.parse_args()
    name = "EXPAND_AHEAD" if args.acts == "bf16" else "RECORDS_AHEAD"
    aheads = [int(a) for a in args.ahead.split(",")]
    ms = [int(m) for m in args.m.split(",")]
    rng = np.random.default_rng(0)
    ws = [
        mlir_mx.quantize(rng.standard_normal((args.n, args.k)).astype(np.float32), args.format, 32)
        for _ in range(args.experts)
    ]
    built = {}
    for a in aheads:  # the kernels are compiled as the layers are first called
        setattr(tiles, name, a)
        clear_cache()
        built[a] = [mlir_mx.Linear(w, threads=args.threads, activations=args.acts) for w in ws]
        for m in ms:
            x = np.zeros((m, args.k), np.float32)
            for lin in built[a]:
                lin(x)
    print(f"{args.experts} weights {args.n} x {args.k} {args.format}, activations={args.acts}, "
          f"{args.threads} thread(s); {name} in {aheads}")  # fmt: skip
    for m in ms:
        x = rng.standard_normal((m, args.k)).astype(np.float32)
        times = {a: [] for a in aheads}
        outs = {}
        for _ in range(args.rounds):
            for a in aheads:
                t0 = time.perf_counter()
                outs[a] = [lin(x) for lin in built[a]]
                times[a].append((time.perf_counter() - t0) / args.experts)
        base = np.array(times[aheads[0]])
        for a in aheads:
            same = all(
                np.array_equal(y.view(np.uint32), y0.view(np.uint32))
                for y, y0 in zip(outs[a], outs[aheads[0]], strict=True)
            )
            t = np.array(times[a])
            print(
                f"M={m:4d} {name}={a:3d}: {1e3 * np.median(t):7.3f} ms a call (median of "
                f"{args.rounds}), speed over {aheads[0]} {np.median(base / t):.3f}, same bits {same}"
            )


if __name__ == "__main__":
    main()

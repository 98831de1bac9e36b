"""The first forward of a new process: a converted Llama with a warm compile cache vs torch f32.

    python bench/first_forward.py [--layers 8] [--repeats 3] [--threads 2] [--cache DIR]

Builds a transformers ``LlamaForCausalLM`` of TinyLlama's shape with
``--layers`` layers (random weights, as ``mx-bench --model``), in a fresh
process per row and repeat: ``torch f32`` (unconverted), ``mxfp4``
(``quantize_(model, "f4E2M1FN")``, the compile cache in ``--cache``, warmed by
one run first) and ``mxfp4 precompiled`` (``quantize_`` then
``mlir_mx.torch.precompile``).  Each process times a 128-token forward twice:
the first pays for whatever is not cached, the second is the steady state.
Rows are interleaved (shared machines); prints the median of each figure and
the first forward's ratio to torch f32's (issue 27's target: <= 1.5x).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROWS = {"torch f32": "f32", "mxfp4": "mx", "mxfp4 precompiled": "mx-pre"}


def worker(kind: str, layers: int, threads: int) -> dict:
    import torch
    from transformers import LlamaForCausalLM

    from mlir_mx_bench.models.llama.worker import llama_config

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = LlamaForCausalLM(llama_config(layers)).eval()
    rec: dict = {}
    if kind != "f32":
        import mlir_mx.torch as mt

        t0 = time.perf_counter()
        mt.quantize_(model, "f4E2M1FN")
        rec["convert_s"] = time.perf_counter() - t0
        if kind == "mx-pre":
            t0 = time.perf_counter()
            mt.precompile(model, progress=False)
            rec["precompile_s"] = time.perf_counter() - t0
    ids = torch.randint(0, 32000, (1, 128), generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        for name in ("first_s", "second_s"):
            t0 = time.perf_counter()
            model(ids, use_cache=True, logits_to_keep=1)
            rec[name] = time.perf_counter() - t0
    return rec


def _spawn(kind: str, ns, env: dict) -> dict:
    cmd = [sys.executable, __file__, "--worker", kind, "--layers", str(ns.layers),
           "--threads", str(ns.threads)]  # fmt: skip
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if p.returncode:
        raise SystemExit(f"{kind}: worker failed:\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--cache", default=None, help="compile cache folder (default: a new one)")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    ns = ap.parse_args(argv)
    if ns.worker:
        print(json.dumps(worker(ns.worker, ns.layers, ns.threads)))
        return 0
    cache = ns.cache or tempfile.mkdtemp(prefix="mlir-mx-first-forward-")
    env = dict(os.environ, MLIR_MX_CACHE_DIR=cache)
    _spawn("mx", ns, env)  # warms the cache
    got: dict[str, list[dict]] = {row: [] for row in ROWS}
    for _ in range(ns.repeats):
        for row, kind in ROWS.items():
            got[row].append(_spawn(kind, ns, env))
    med = {
        row: {k: statistics.median(r[k] for r in recs) for k in recs[0]}
        for row, recs in got.items()
    }
    base = med["torch f32"]["first_s"]
    print(
        f"{ns.layers} layers, {ns.threads} threads, 128 tokens, median of {ns.repeats}; cache {cache}"
    )
    print("| row | first forward | second forward | first - second | first / torch f32 first |")
    print("|---|---|---|---|---|")
    for row, m in med.items():
        extra = f" (precompile {m['precompile_s']:.2f} s)" if "precompile_s" in m else ""
        print(f"| {row}{extra} | {m['first_s']:.3f} s | {m['second_s']:.3f} s | "
              f"{m['first_s'] - m['second_s']:.3f} s | {m['first_s'] / base:.2f}x |")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Fused vs block-factored lowering of ``mx.block_matmul``, measured on this machine.

    python bench/matmul_lowerings.py [--out bench/results] [--shapes 32x64x64,...]

For each shape (M x N x K) and operand kind (mx x f32: ``mx-a``; mx x mx:
``mx-ab``; f8E4M3FN elements, block 32) it compiles the ``@bench`` module of
:mod:`mlir_mx.roofline.variants` (the matmul in an ``scf.for``, ``n`` calls per
native entry, so Python overhead is amortized) with four pipelines:

* ``fused``       ``mx-to-linalg{matmul-lowering=fused}`` + ``lower-to-llvm`` (scalar loops)
* ``fused-vec``   the ``mx-vectorize`` bundle (tile [0, 32, 32], pin map
  constants, vectorize), forced to the fused lowering, + ``lower-to-llvm``
* ``blocked``     ``mx-to-linalg{matmul-lowering=blocked}`` + ``lower-to-llvm``
* ``blocked-vec`` the ``mx-vectorize-blocked`` bundle + ``lower-to-llvm``

and times it with :func:`mlir_mx.roofline.measure.time_repeated` (one warm-up at
the sample size, then up to 5 samples; the median per call is reported).
numpy's f32 ``a @ b`` on the dequantized operands (one BLAS thread) is the
reference.  Every variant's result is checked against f64 before timing.
Writes ``matmul-lowerings-<date>.md`` under ``--out``.
"""

from __future__ import annotations

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse  # noqa: E402
import datetime  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from mlir_mx import oracle  # noqa: E402
from mlir_mx.execution import Runner  # noqa: E402
from mlir_mx.host import machine_description  # noqa: E402
from mlir_mx.pipelines import load_pipeline  # noqa: E402
from mlir_mx.roofline.measure import time_repeated  # noqa: E402
from mlir_mx.roofline.variants import parse_shape, variant_module_text  # noqa: E402

SHAPES = ("32x64x64", "1x4096x4096", "128x256x512", "8x2048x2048")
KINDS = {"mx-a": "mx x f32", "mx-ab": "mx x mx"}
ELEMENT = "f8E4M3FN"


def pipelines() -> dict[str, str]:
    llvm = load_pipeline("lower-to-llvm")
    return {
        "fused": "mx-to-linalg{matmul-lowering=fused}," + llvm,
        "fused-vec": load_pipeline("mx-vectorize") + llvm,
        "blocked": "mx-to-linalg{matmul-lowering=blocked}," + llvm,
        "blocked-vec": load_pipeline("mx-vectorize-blocked") + llvm,
    }


def inputs(kind: str, shape, rng):
    a = rng.standard_normal((shape.M, shape.K)).astype(np.float32)
    b = rng.standard_normal((shape.K, shape.N)).astype(np.float32)
    qa = oracle.quantize(a, ELEMENT, 32)
    args = [qa]  # the Runner takes an MXArray for an !mx.tensor argument
    a = oracle.dequantize(qa)
    if kind == "mx-ab":
        qb = oracle.quantize(b, ELEMENT, 32, axis=0)
        args.append(qb)
        b = oracle.dequantize(qb)
    else:
        args.append(b)
    return args, a, b


def bench_one(kind, shape, pipe, args, exact, bound, budget):
    text = variant_module_text(kind, shape, ELEMENT)
    t0 = time.perf_counter()
    try:
        runner = Runner(text, pipe)
        runner.invoke("bench", *args, np.zeros((shape.M, shape.N), np.float32), 1)
    except Exception as err:  # noqa: BLE001 - report, do not stop the table
        return None, f"unavailable: {str(err).strip().splitlines()[0][:100]}"
    compile_s = time.perf_counter() - t0
    acc = np.zeros((shape.M, shape.N), np.float32)
    got = runner.invoke("bench", *args, acc, 1)
    if not np.all(np.abs(got - exact) <= bound):
        return None, "WRONG RESULT"
    timing = time_repeated(
        lambda n: runner.invoke("bench", *args, acc, n), samples=5, budget_s=budget
    )
    return timing.median, f"compile+first call {compile_s:.2f} s"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="bench/results")
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--budget", type=float, default=1.5, help="seconds per timing")
    ns = ap.parse_args(argv)
    pipes = pipelines()
    rows = []
    t_start = time.perf_counter()
    for s in ns.shapes.split(","):
        shape = parse_shape(s)
        for kind in KINDS:
            rng = np.random.default_rng(0)
            args, a, b = inputs(kind, shape, rng)
            exact = a.astype(np.float64) @ b.astype(np.float64)
            bound = (shape.K + 2) * 2.0**-24 * (np.abs(a).astype(np.float64) @ np.abs(b))
            np_t = time_repeated(lambda n, a=a, b=b: [a @ b for _ in range(n)], samples=5)
            row = {"shape": s, "kind": kind, "numpy": np_t.median, "notes": []}
            for name, pipe in pipes.items():
                med, note = bench_one(kind, shape, pipe, args, exact, bound, ns.budget)
                row[name] = med
                row["notes"].append(f"{name}: {note}")
                print(f"{s:>12} {kind:<6} {name:<12} "
                      f"{'-' if med is None else f'{med * 1e3:9.3f} ms'}  {note}", flush=True)  # fmt: skip
            rows.append(row)
    total = time.perf_counter() - t_start
    write_report(ns, rows, total)
    return 0


def _ms(x) -> str:
    return "n/a" if x is None else f"{x * 1e3:.3f}"


def _ratio(x, y) -> str:
    return "n/a" if x is None or y is None else f"{x / y:.2f}"


def write_report(ns, rows, total) -> None:
    date = datetime.date.today().isoformat()
    out = Path(ns.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"matmul-lowerings-{date}.md"
    cmd = "python bench/matmul_lowerings.py " + " ".join(sys.argv[1:])
    lines = [
        f"# mx.block_matmul: fused vs blocked lowering ({date})",
        "",
        f"- Command: `{cmd.strip()}`",
        f"- Machine: {machine_description()}; threads: 1 (the JIT code is "
        "single-threaded; numpy with OPENBLAS/MKL/OMP_NUM_THREADS=1)",
        f"- Elements: {ELEMENT}, block 32, E8M0 scales; shapes M x N x K; median per "
        "call after a warm-up (up to 5 samples, `@bench` loops n calls per native entry)",
        f"- Total run time: {total:.0f} s",
        "",
        "Times in ms (median per call). Ratios: fused/blocked and fused-vec/blocked-vec "
        "(>1: blocked faster), blocked-vec/numpy (>1: slower than numpy f32).",
        "",
        "| shape | kind | numpy f32 | fused | fused-vec | blocked | blocked-vec "
        "| fused/blocked | fused-vec/blocked-vec | blocked-vec/numpy |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['shape']} | {KINDS[r['kind']]} | {_ms(r['numpy'])} | {_ms(r['fused'])} "
            f"| {_ms(r['fused-vec'])} | {_ms(r['blocked'])} | {_ms(r['blocked-vec'])} "
            f"| {_ratio(r['fused'], r['blocked'])} | {_ratio(r['fused-vec'], r['blocked-vec'])} "
            f"| {_ratio(r['blocked-vec'], r['numpy'])} |"
        )
    lines += ["", "Notes:", ""]
    for r in rows:
        lines.append(f"- {r['shape']} {KINDS[r['kind']]}: " + "; ".join(r["notes"]))
    path.write_text("\n".join(lines) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    sys.exit(main())

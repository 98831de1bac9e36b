"""Decode GEMV (small M) with MX operands, side by side with f32 GEMVs.

    python bench/decode_gemv.py [--out bench/results] [--shapes 1x4096x4096,8x2048x2048]

One run, one thread on both sides (the JIT code is single-threaded; numpy
with OPENBLAS/MKL/OMP_NUM_THREADS=1).  Shapes are M x N x K; elements
f8E4M3FN, block 32, E8M0 scales.  Columns:

* ``numpy f32``        ``a @ b`` on the dequantized operands (f32).
* ``ours f32``         the plain f32 matmul (``f32`` variant of
  :mod:`mlir_mx.roofline.variants`) through ``decode-f32-vectorize`` (stock
  tiling/vectorization, same register tile as the mx partials) + ``lower-to-llvm``.
* ``mx x f32``         ``mx-vectorize-blocked`` + ``lower-to-llvm``.
* ``mx x mx (old)``    the mx x mx kernel with the previous partial tile
  (``[1, 1, 0, 32]``: a whole 32 x 32 tile per step; kept here, inline, for
  the before/after comparison).
* ``mx x mx``          ``mx-vectorize-blocked`` + ``lower-to-llvm`` (current).

Every variant's result is checked against the oracle (dequantize, f64
matmul; tolerance ``(K + 2) * 2^-24 * sum_k |a_ik| |b_kj|``) before it is
timed.  Timing: the ``@bench`` entry runs the matmul ``n`` times per native
call (``n`` picked so a sample takes about 20 ms), one warm-up sample, then
``--reps`` samples (>= 10); median and min per call.  Writes
``decode-gemv-<date>.md`` under ``--out``.
"""

from __future__ import annotations

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse  # noqa: E402
import datetime  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from mlir_mx import oracle  # noqa: E402
from mlir_mx.execution import Runner  # noqa: E402
from mlir_mx.host import machine_description  # noqa: E402
from mlir_mx.passes.pipeline import Pipeline  # noqa: E402
from mlir_mx.pipelines import load_pipeline, schedule_path  # noqa: E402
from mlir_mx.roofline.variants import parse_shape, variant_module_text  # noqa: E402

SHAPES = ("1x4096x4096", "8x2048x2048")
ELEMENT = "f8E4M3FN"
COLUMNS = ("numpy f32", "ours f32", "mx x f32", "mx x mx (old)", "mx x mx")


def old_blocked_pipeline(tmpdir: str) -> str:
    """``mx-vectorize-blocked`` with the previous partial tile [1, 1, 0, 32]."""
    text = Path(schedule_path("schedules-blocked")).read_text()
    new = (
        "%p_t, %p_l0, %p_l1, %p_l2, %p_l3 = transform.structured.tile_using_for %p_i "
        "tile_sizes [1, 1, 8, 32]\n"
        "      : (!transform.any_op) -> (!transform.any_op, !transform.any_op, "
        "!transform.any_op, !transform.any_op, !transform.any_op)\n"
        "    transform.structured.vectorize %p_t vector_sizes [1, 1, 8, 32]"
    )
    old = (
        "%p_t, %p_l0, %p_l1, %p_l2 = transform.structured.tile_using_for %p_i "
        "tile_sizes [1, 1, 0, 32]\n"
        "      : (!transform.any_op) -> (!transform.any_op, !transform.any_op, "
        "!transform.any_op, !transform.any_op)\n"
        "    transform.structured.vectorize %p_t vector_sizes [1, 1, 32, 32]"
    )
    if new not in text:
        raise RuntimeError("schedules-blocked.mlir changed: update old_blocked_pipeline")
    path = Path(tmpdir) / "schedules-blocked-old.mlir"
    path.write_text(text.replace(new, old))
    # The schedule's path sits inside a transform-interpreter option: a text edit.
    pipe = Pipeline.parse(
        str(load_pipeline("mx-vectorize-blocked")).replace(schedule_path("schedules-blocked"), str(path))
    )
    return pipe + load_pipeline("lower-to-llvm")


def time_calls(run, reps: int, target_s: float = 0.02):
    """(median, min) seconds per call of ``run(n)``; one warm-up sample first."""
    t0 = time.perf_counter()
    run(1)
    n = max(1, int(target_s / max(time.perf_counter() - t0, 1e-9)))
    run(n)  # warm-up at the sample size
    per_call = []
    for _ in range(reps):
        t0 = time.perf_counter()
        run(n)
        per_call.append((time.perf_counter() - t0) / n)
    return float(np.median(per_call)), float(min(per_call))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="bench/results")
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--reps", type=int, default=10)
    ns = ap.parse_args(argv)
    if ns.reps < 10:
        ap.error("--reps must be >= 10")
    llvm = load_pipeline("lower-to-llvm")
    t_start = time.perf_counter()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        pipes = {
            "ours f32": ("f32", load_pipeline("decode-f32-vectorize") + llvm),
            "mx x f32": ("mx-a", load_pipeline("mx-vectorize-blocked") + llvm),
            "mx x mx (old)": ("mx-ab", old_blocked_pipeline(tmp)),
            "mx x mx": ("mx-ab", load_pipeline("mx-vectorize-blocked") + llvm),
        }
        for s in ns.shapes.split(","):
            shape = parse_shape(s)
            rng = np.random.default_rng(0)
            a = rng.standard_normal((shape.M, shape.K)).astype(np.float32)
            b = rng.standard_normal((shape.K, shape.N)).astype(np.float32)
            qa = oracle.quantize(a, ELEMENT, 32)
            qb = oracle.quantize(b, ELEMENT, 32, axis=0)
            da, db = oracle.dequantize(qa), oracle.dequantize(qb)
            args = {"f32": (da, db), "mx-a": (qa, db), "mx-ab": (qa, qb)}
            # The mx x f32 kernel reads db (the dequantized B) as its f32 rhs,
            # so every column computes the same product dequant(A) @ dequant(B).
            exact = da.astype(np.float64) @ db.astype(np.float64)
            bound = (shape.K + 2) * 2.0**-24 * (np.abs(da).astype(np.float64) @ np.abs(db))
            row = {"shape": s, "notes": []}
            got = da @ db
            assert np.all(np.abs(got - exact) <= bound), "numpy f32 outside the bound"
            row["numpy f32"] = time_calls(lambda n, x=da, y=db: [x @ y for _ in range(n)], ns.reps)
            for col, (variant, pipe) in pipes.items():
                text = variant_module_text(variant, shape, ELEMENT)
                variant_args = args[variant]
                t0 = time.perf_counter()
                runner = Runner(text, pipe)
                acc = np.zeros((shape.M, shape.N), np.float32)
                got = runner.invoke("bench", *variant_args, acc, 1)
                compile_s = time.perf_counter() - t0
                err = float(np.max(np.abs(got - exact) / np.maximum(bound, 1e-300)))
                if not np.all(np.abs(got - exact) <= bound):
                    raise SystemExit(f"{s} {col}: WRONG RESULT (max err/bound {err:.3g})")
                row[col] = time_calls(
                    lambda n, r=runner, va=variant_args, c=acc: r.invoke("bench", *va, c, n),
                    ns.reps,
                )
                row["notes"].append(
                    f"{col}: compile+first call {compile_s:.2f} s, max |err|/bound {err:.2g}"
                )
            rows.append(row)
            print(
                f"{s:>12} "
                + "  ".join(f"{c}: {row[c][0] * 1e3:.3f}/{row[c][1] * 1e3:.3f}" for c in COLUMNS)
                + "  (ms median/min)",
                flush=True,
            )
    total = time.perf_counter() - t_start
    write_report(ns, rows, total)
    return 0


def write_report(ns, rows, total) -> None:
    date = datetime.date.today().isoformat()
    out = Path(ns.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"decode-gemv-{date}.md"
    cmd = "python bench/decode_gemv.py " + " ".join(sys.argv[1:])
    lines = [
        f"# Decode GEMV: mx x mx vs f32 ({date})",
        "",
        f"- Command: `{cmd.strip()}`",
        f"- Machine: {machine_description()}; threads: 1 (JIT code single-threaded; "
        "numpy with OPENBLAS/MKL/OMP_NUM_THREADS=1)",
        f"- Elements: {ELEMENT}, block 32, E8M0 scales; shapes M x N x K; {ns.reps} samples "
        "after a warm-up, each sample ~20 ms of back-to-back calls (`@bench` loops n calls)",
        "- Every result checked against dequantize -> f64 matmul, tolerance "
        "(K+2)*2^-24*sum|a||b|, before timing",
        f"- Total run time: {total:.0f} s",
        "",
        "Times in ms per call, median (min). Last columns: ratio to numpy f32 and to ours f32 "
        "(< 1: mx x mx faster).",
        "",
        "| shape | " + " | ".join(COLUMNS) + " | mx x mx / numpy | mx x mx / ours f32 "
        "| old / new |",
        "|---|" + "---|" * (len(COLUMNS) + 3),
    ]
    for r in rows:
        cells = " | ".join(f"{r[c][0] * 1e3:.3f} ({r[c][1] * 1e3:.3f})" for c in COLUMNS)
        mm = r["mx x mx"][0]
        lines.append(
            f"| {r['shape']} | {cells} | {mm / r['numpy f32'][0]:.2f} "
            f"| {mm / r['ours f32'][0]:.2f} | {r['mx x mx (old)'][0] / mm:.2f} |"
        )
    lines += ["", "Notes:", ""]
    for r in rows:
        lines.append(f"- {r['shape']}: " + "; ".join(r["notes"]))
    path.write_text("\n".join(lines) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    sys.exit(main())

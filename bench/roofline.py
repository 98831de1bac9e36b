"""Measured roofline on this machine: ceilings, kernel times, table and plots.

    python bench/roofline.py [--threads 1] [--out bench/results]

Writes ``roofline-<date>.md`` (table, command, machine) and
``roofline-<date>.{png,svg}`` / ``time-<date>.{png,svg}`` under ``--out``.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

from mlir_mx.model.kernels import VariantUnavailable, parse_shape
from mlir_mx.model.measure import lscpu, measure_machine, time_kernel
from mlir_mx.model.plots import roofline_plot, time_plot
from mlir_mx.model.report import model_rows, roofline_table

SHAPES = ("32x64x64", "1x64x64", "1x4096x4096", "128x256x512")
VARIANTS = ("f32", "mx-a", "mx-ab", "mx-a-blocked", "mx-ab-blocked")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results"))
    ap.add_argument("--element", default="f8E4M3FN")
    args = ap.parse_args()
    t0 = time.perf_counter()
    say = lambda s: print(s, flush=True)  # noqa: E731
    machine = measure_machine(threads=args.threads, progress=say)
    rows = model_rows([parse_shape(s) for s in SHAPES], list(VARIANTS), args.element)
    for r in rows:
        if r.model is None:
            continue
        say(f"timing {r.variant} {r.shape_text}...")
        try:
            kt = time_kernel(r.variant, r.shape, args.element, budget_s=3.0)
        except VariantUnavailable as err:
            r.unavailable = str(err)
            continue
        r.measured = kt.timing
        say(f"  median {kt.timing.median * 1e6:,.2f} us (min {kt.timing.min * 1e6:,.2f}, "
            f"spread {kt.timing.spread:.1%}, {kt.timing.samples} x {kt.timing.calls} calls), "
            f"max |err| {kt.max_abs_error:.2e}")  # fmt: skip
    table = roofline_table(rows, machine)
    print(table)
    date = datetime.date.today().isoformat()
    out = Path(args.out)
    plots = roofline_plot(rows, machine, out, f"roofline-{date}") + time_plot(
        rows, machine, out, f"time-{date}"
    )
    cpu = lscpu()
    timings = "\n".join(
        f"| {r.variant} | {r.shape_text} | {r.measured.median * 1e6:,.2f} | {r.measured.min * 1e6:,.2f} | "
        f"{r.measured.max * 1e6:,.2f} | {r.measured.spread:.1%} | {r.measured.samples} x {r.measured.calls} |"
        for r in rows
        if r.measured
    )
    unavailable = "\n".join(
        f"- {r.variant} {r.shape_text}: {r.unavailable}" for r in rows if r.unavailable
    )
    from mlir_mx.model.kernels import VARIANTS as ALL_VARIANTS

    pipelines = "; ".join(
        f"{v}: `{ALL_VARIANTS[v].exec_pipeline or 'scalar loops'}`" for v in VARIANTS
    )
    md = f"""# Measured roofline, {date}

Command: `{" ".join([Path(sys.executable).name, *sys.argv])}` ({time.perf_counter() - t0:.0f} s)

## Machine

- CPU: {cpu.get("Model name", platform.processor())}; {cpu.get("CPU(s)", os.cpu_count())} CPUs,
  {cpu.get("Core(s) per socket", "?")} core(s) per socket, {cpu.get("Thread(s) per core", "?")} thread(s) per core;
  L3 {cpu.get("L3 cache", "?")}
- threads used: {args.threads} (kernels: 1)
- numpy {np.__version__}; Python {platform.python_version()}
- bandwidth: {machine.bandwidth / 1e9:.2f} GB/s ({machine.details["bandwidth kernel"]}; median {machine.details["bandwidth median GB/s"]} GB/s);
  numpy `np.copyto`: {machine.reference["numpy copyto GB/s"] / 1e9:.2f} GB/s
- peak f32: {machine.peak / 1e9:.2f} GFLOP/s ({machine.details["peak kernel"]}; median {machine.details["peak median GFLOP/s"]} GFLOP/s);
  numpy `np.dot` 2048^3: {machine.reference["numpy dot GFLOP/s"] / 1e9:.2f} GFLOP/s (numpy's BLAS threads)
- ridge: {machine.ridge:.2f} FLOP/byte

## Model vs measured

Bytes and FLOPs read from the bufferized IR of each variant's `@kernel`; modelled
time = max(bytes / BW, FLOPs / peak) with the measured ceilings above; measured =
median per-call time of `@bench` (the contraction in an `scf.for`, many calls per
native entry, after a warm-up), run by the Runner. Each variant is compiled with
its execution pipeline and then `lower-to-llvm`: {pipelines}.

```
{table}
```

| variant | shape | median us | min us | max us | spread | samples x calls |
|---|---|---:|---:|---:|---:|---|
{timings}

Unavailable:
{unavailable or "- none"}

Plots: {", ".join(p.name for p in plots)}
"""
    path = out / f"roofline-{date}.md"
    path.write_text(md)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

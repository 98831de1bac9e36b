"""Rows of the roofline table: one (variant, shape) each, modelled and measured."""

from __future__ import annotations

from dataclasses import dataclass

from mlir_mx.errors import expect_type
from mlir_mx.roofline.ir_model import KernelModel, Shift, analyze, shift
from mlir_mx.roofline.machines import Machine
from mlir_mx.roofline.measure import Timing
from mlir_mx.roofline.variants import VARIANTS, Shape, variant_module_text

__all__ = ["Row", "model_rows", "roofline_table", "shifts"]


@dataclass
class Row:
    """One kernel: its model, and its measured time when it was timed."""

    variant: str
    shape: Shape | None
    model: KernelModel
    measured: Timing | None = None
    label: str = ""  # for IR files: the file name

    @property
    def name(self) -> str:
        return self.label or self.variant

    @property
    def shape_text(self) -> str:
        return str(self.shape) if self.shape else "-"

    def achieved(self) -> float | None:
        """Measured FLOP/s: the model's FLOPs over the median time."""
        if self.measured is None or self.model is None:
            return None
        return self.model.flops / self.measured.median


def model_rows(
    shapes: list[Shape], variants: list[str], element: str = "f8E4M3FN", block_size: int = 32
) -> list[Row]:
    """Analyze each variant at each shape."""
    expect_type(shapes, (list, tuple), "shapes", "a list of Shapes")
    expect_type(variants, (list, tuple), "variants", "a list of variant names")
    rows = []
    for s in shapes:
        for v in variants:
            text = variant_module_text(v, s, element, block_size)
            km = analyze(text, "kernel", matmul_lowering=VARIANTS[v].matmul_lowering)
            km.label = f"{v} {s}"
            rows.append(Row(v, s, km))
    return rows


def shifts(rows: list[Row]) -> list[tuple[Row, Row, Shift]]:
    """(f32 row, mx row, decomposition) for every mx row with an f32 row at its shape."""
    out = []
    base = {r.shape: r for r in rows if r.variant == "f32"}
    for r in rows:
        if r.variant != "f32" and r.shape in base:
            out.append((base[r.shape], r, shift(base[r.shape].model, r.model)))
    return out


def _ns(t: float | None) -> str:
    if t is None:
        return "-"
    return f"{t * 1e9:,.1f}"


def roofline_table(rows: list[Row], machine: Machine) -> str:
    """The text table: bytes, FLOPs (useful/dequant), intensity, times, ratio."""
    for r in expect_type(rows, (list, tuple), "rows", "a list of Rows"):
        expect_type(r, Row, "rows", "a list of Rows")
    expect_type(machine, Machine, "machine", "a Machine (roofline.get_machine)")
    head = (
        "variant",
        "shape",
        "bytes",
        "FLOPs",
        "useful",
        "dequant",
        "I (F/B)",
        "attain GF/s",
        "bound",
        "model ns",
        "measured ns",
        "meas/model",
    )
    lines = [head]
    for r in rows:
        km = r.model
        floor = km.time_floor(machine)
        meas = r.measured.median if r.measured else None
        lines.append(
            (
                r.name,
                r.shape_text,
                f"{km.bytes:,}",
                f"{km.flops:,}",
                f"{km.flops_useful:,}",
                f"{km.flops_dequant:,}",
                f"{km.intensity:.3f}",
                f"{km.attainable(machine) / 1e9:.1f}",
                km.bound(machine),
                _ns(floor),
                _ns(meas),
                f"{meas / floor:.1f}x" if meas else "-",
            )
        )
    widths = [
        max(len(row[i]) for row in lines if len(row) > i and len(row) == len(head))
        for i in range(len(head))
    ]
    out = []
    for row in lines:
        if len(row) != len(head):
            out.append(f"{row[0]:<{widths[0]}}  {row[1]:<{widths[1]}}  {row[2]}")
            continue
        cells = [
            c.ljust(w) if i < 2 or i == 8 else c.rjust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ]
        out.append("  ".join(cells).rstrip())
    out.insert(1, "-" * len(out[0]))
    sh = shifts(rows)
    if sh:
        out.append("")
        for b, r, s in sh:
            t_b, t_r = b.model.time_floor(machine), r.model.time_floor(machine)
            line = (
                f"{r.variant} vs f32 at {r.shape_text}: {s.label}; modelled time {t_r / t_b:.2f}x"
            )
            if b.measured and r.measured:
                line += f", measured time {r.measured.median / b.measured.median:.2f}x"
            out.append(line)
    return "\n".join(out)


def markdown_report(rows: list[Row], machine: Machine, command: str, plots: list) -> str:
    """``mx-roofline --report``: the measured roofline of this machine as a
    results page (command, machine, ceilings, the model-vs-measured table,
    the timings, the plots)."""
    import datetime
    import platform

    import numpy as np

    from mlir_mx.host import machine_description
    from mlir_mx.roofline.variants import VARIANTS

    date = datetime.date.today().isoformat()
    timings = "\n".join(
        f"| {r.name} | {r.shape_text} | {r.measured.median * 1e6:,.2f} | "
        f"{r.measured.min * 1e6:,.2f} | {r.measured.max * 1e6:,.2f} | {r.measured.spread:.1%} "
        f"| {r.measured.samples} x {r.measured.calls} |"
        for r in rows
        if r.measured
    )
    pipelines = "; ".join(
        f"{v}: `{VARIANTS[v].exec_pipeline or 'scalar loops'}`"
        for v in dict.fromkeys(r.variant for r in rows)
        if v in VARIANTS
    )
    ref = machine.reference or {}
    extra = "".join(f"\n- numpy reference: {k} {v / 1e9:.2f}" for k, v in ref.items())
    return f"""# Measured roofline, {date}

Command: `{command}`

## Machine

- {machine_description()}
- numpy {np.__version__}; Python {platform.python_version()}
- {machine.describe()}{f" ({machine.source})" if machine.source else ""}{extra}

## Model vs measured

Bytes and FLOPs read from the bufferized IR of each variant's `@kernel`; modelled
time = max(bytes / BW, FLOPs / peak) with the ceilings above; measured = median
per-call time of `@bench` (the contraction in an `scf.for`, many calls per native
entry, after a warm-up), run by the Runner. Execution pipelines: {pipelines}.

```
{roofline_table(rows, machine)}
```

| variant | shape | median us | min us | max us | spread | samples x calls |
|---|---|---:|---:|---:|---:|---|
{timings}

Plots: {", ".join(p.name for p in plots)}
"""

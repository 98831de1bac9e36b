"""The roofline plot and the time chart (matplotlib, Agg backend, PNG + SVG).

SVG text stays text (``svg.fonttype = 'none'``) so labels can be checked.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from mlir_mx.files import atomic_path  # noqa: E402
from mlir_mx.roofline.machines import Machine  # noqa: E402
from mlir_mx.roofline.report import Row, shifts  # noqa: E402

__all__ = ["roofline_plot", "time_plot"]

_COLORS = {
    "f32": "tab:blue",
    "mx-a": "tab:red",
    "mx-ab": "darkred",
    "mx-a-blocked": "tab:orange",
    "mx-ab-blocked": "orangered",
}
_MARKERS = ["^", "D", "v", "P", "X", "*", "h"]


def _color(variant: str) -> str:
    return _COLORS.get(variant, "tab:red" if variant.startswith("mx") else "tab:gray")


def _marker(shape, others: dict) -> str:
    if shape is None:
        return "o"
    if shape.M == 32:
        return "o"
    if shape.M == 1:
        return "s"
    if shape not in others:
        others[shape] = _MARKERS[len(others) % len(_MARKERS)]
    return others[shape]


def _save(fig, out_dir: Path, stem: str) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    with matplotlib.rc_context({"svg.fonttype": "none"}):
        for ext in ("png", "svg"):
            p = out_dir / f"{stem}.{ext}"
            with atomic_path(p) as tmp:  # never half a plot (mlir_mx.files)
                fig.savefig(tmp, format=ext, dpi=130, bbox_inches="tight")
            paths.append(p)
    plt.close(fig)
    return paths


def roofline_plot(rows: list[Row], machine: Machine, out_dir, stem: str = "roofline") -> list[Path]:
    """Log-log roofline: roof over I in 10^-1..10^2.5, ridge band, one point per row.

    Filled markers: modelled (attainable rate); hollow: measured (model FLOPs
    over the median time).  Arrows go from f32 to each mx variant at the same
    shape, labelled with the decomposition of the intensity shift.
    """
    rows = list(rows)
    fig, ax = plt.subplots(figsize=(9, 6))
    lo, hi = 10**-1, 10**2.5
    xs = np.logspace(-1, 2.5, 400)
    ax.plot(xs, [machine.attainable(x) / 1e9 for x in xs], color="black", lw=2, label="roof")
    r0, r1 = machine.ridge_range
    if machine.ridge_band > 0:
        ax.axvspan(
            r0,
            r1,
            color="0.85",
            zorder=0,
            label=f"ridge {machine.ridge:.2f} F/B +-{machine.ridge_band:.0%}",
        )
    else:
        ax.axvline(machine.ridge, color="0.6", ls=":", label=f"ridge {machine.ridge:.2f} F/B")
    _plot_points(ax, rows, machine)
    _plot_shifts(ax, rows, machine)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ymin = min([machine.attainable(lo) / 1e9] + [(r.achieved() or np.inf) / 1e9 for r in rows])
    ax.set_ylim(ymin * 0.5, machine.peak / 1e9 * 2)
    ax.set_xlabel("operational intensity I (FLOP/byte)")
    ax.set_ylabel("attainable rate (GFLOP/s)")
    ax.set_title(
        f"Roofline on {machine.name}: {machine.bandwidth / 1e9:.0f} GB/s, {machine.peak / 1e9:.0f} GFLOP/s"
    )
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    return _save(fig, Path(out_dir), stem)


def _plot_points(ax, rows: list[Row], machine: Machine) -> None:
    """One point per row: filled at the modelled rate, hollow at the measured one."""
    others: dict = {}
    seen = set()
    for r in rows:
        km = r.model
        x = km.intensity
        mk = _marker(r.shape, others)
        lab = f"{r.name} {r.shape_text}"
        ax.scatter(
            [x],
            [km.attainable(machine) / 1e9],
            color=_color(r.variant),
            marker=mk,
            s=70,
            zorder=3,
            label=f"{lab} (model)" if lab not in seen else None,
        )
        ach = r.achieved()
        if ach is not None:
            ax.scatter(
                [x],
                [ach / 1e9],
                facecolors="none",
                edgecolors=_color(r.variant),
                marker=mk,
                s=70,
                lw=1.5,
                zorder=3,
                label=f"{lab} (measured)",
            )
        seen.add(lab)


def _plot_shifts(ax, rows: list[Row], machine: Machine) -> None:
    """An arrow from f32 to each mx variant at the same shape, labelled with
    the decomposition of the intensity shift."""
    per_base: dict = {}
    for b, r, s in shifts(rows):
        # arrows leaving nearby points share a label stack (shapes with the
        # same f32 intensity, e.g. every M = 1 GEMV, would overlap otherwise)
        k = per_base.setdefault(round(float(np.log10(b.model.intensity)), 1), [0])
        p0 = (b.model.intensity, b.model.attainable(machine) / 1e9)
        p1 = (r.model.intensity, r.model.attainable(machine) / 1e9)
        ax.annotate(
            "",
            xy=p1,
            xytext=p0,
            arrowprops={
                "arrowstyle": "->",
                "color": _color(r.variant),
                "lw": 1.2,
                "connectionstyle": f"arc3,rad={0.25 * (k[0] + 1)}",
            },
        )
        ax.text(
            p0[0] * 1.08,
            min(p0[1], p1[1]) * 0.72 ** (k[0] + 1),
            s.label if len({x.shape for x in rows}) == 1 else f"{r.shape_text}: {s.label}",
            fontsize=8,
            color=_color(r.variant),
            ha="left",
            va="top",
        )
        k[0] += 1


def time_plot(rows: list[Row], machine: Machine, out_dir, stem: str = "time") -> list[Path]:
    """Bars per shape: modelled time floor (filled) and measured median (hatched),
    labelled with the ratio to f32 at the same shape."""
    rows = list(rows)
    shapes = list(dict.fromkeys(r.shape_text for r in rows))
    variants = list(dict.fromkeys(r.name for r in rows))
    measured = any(r.measured for r in rows)
    per = len(variants) * (2 if measured else 1)
    width = 0.8 / per
    fig, ax = plt.subplots(figsize=(min(16, max(7, 2.2 * len(shapes) * per / 2)), 5.5))
    base = {r.shape_text: r for r in rows if r.variant == "f32"}
    for i, sh in enumerate(shapes):
        k = 0
        for v in variants:
            r = next((x for x in rows if x.shape_text == sh and x.name == v), None)
            if r is None:
                k += 2 if measured else 1
                continue
            b = base.get(sh)
            bars = [
                ("model", r.model.time_floor(machine), b.model.time_floor(machine) if b else None)
            ]
            if measured:
                bars.append(
                    (
                        "measured",
                        r.measured.median if r.measured else None,
                        b.measured.median if b and b.measured else None,
                    )
                )
            for kind, t, tb in bars:
                x = i + (k - (per - 1) / 2) * width
                k += 1
                if t is None:
                    continue
                ax.bar(
                    x,
                    t * 1e9,
                    width * 0.9,
                    color=_color(r.variant) if kind == "model" else "none",
                    edgecolor=_color(r.variant),
                    hatch=None if kind == "model" else "//",
                    label=f"{v} ({kind})" if i == 0 else None,
                )
                txt = (
                    f"{t * 1e9:,.1f} ns"
                    if t < 1e-6
                    else f"{t * 1e6:,.1f} us"
                    if t < 1e-3
                    else f"{t * 1e3:,.2f} ms"
                )
                if tb and r.variant != "f32":
                    txt += f"\n{t / tb:.2f}x"
                ax.text(x, t * 1e9 * 1.05, txt, ha="center", va="bottom", fontsize=7, rotation=0)
    ax.set_xticks(range(len(shapes)), shapes)
    ax.set_yscale("log")
    ax.set_ylabel("time per call (ns)")
    ax.set_xlabel("shape (MxNxK)")
    title = f"Modelled floor on {machine.name}"
    ax.set_title(title + (" vs measured (hatched)" if measured else ""))
    ax.legend(fontsize=7)
    ax.grid(True, axis="y", which="both", alpha=0.3)
    top = max(
        [r.model.time_floor(machine) for r in rows]
        + [r.measured.median for r in rows if r.measured]
    )
    ax.set_ylim(None, top * 1e9 * 4)
    return _save(fig, Path(out_dir), stem)

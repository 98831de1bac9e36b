"""What ``mx-bench`` shows at the end of a matmul run, and where it writes.

* :func:`default_out_dir`  the results folder when ``--out`` is not given: a
  user data folder, never the repository (``bench/results/`` only when asked,
  ``--out bench/results``);
* :func:`rows_table`  the rows as one table, its columns as wide as the
  widest cell (long method names included);
* :func:`report`  the end of a run: the table (a progress line), the files
  written and, under ``--quick``, the summary;
* :func:`quick_summary`  the line ``--quick`` ends with: what the tiny shapes
  show and where our kernels win, computed from the rows.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["default_out_dir", "quick_summary", "report", "rows_table"]

#: The baseline every row is compared with (the results' "vs numpy f32").
NUMPY = "numpy f32"


def default_out_dir() -> Path:
    """``$XDG_DATA_HOME/mlir-mx/bench-results``, or
    ``~/.local/share/mlir-mx/bench-results`` where ``XDG_DATA_HOME`` is unset,
    empty or relative (the XDG base directory rule)."""
    base = os.environ.get("XDG_DATA_HOME", "")
    root = Path(base) if os.path.isabs(base) else Path.home() / ".local" / "share"
    return root / "mlir-mx" / "bench-results"


def _numpy_times(rows: list[dict]) -> dict[tuple, float]:
    return {
        (x["shape"], x["format"], x["threads"]): x["median_s"]
        for x in rows
        if x["method"] == NUMPY
    }


def rows_table(rows: list[dict]) -> list[str]:
    """The rows as aligned text: shape, format, threads, method, median ms and
    the speedup over numpy f32 at the same thread count; each column as wide
    as its widest cell."""
    numpy = _numpy_times(rows)
    head = ("shape", "format", "threads", "method", "median ms", "vs numpy f32")
    cells = [head]
    for x in rows:
        base = numpy.get((x["shape"], x["format"], x["threads"]))
        vs = f"{base / x['median_s']:.2f}x" if base else "-"
        cells.append(
            (x["shape"], x["format"], str(x["threads"]), x["method"],
             f"{x['median_s'] * 1e3:.3f}", vs)
        )  # fmt: skip
    widths = [max(len(c[i]) for c in cells) for i in range(len(head))]
    right = (False, False, True, False, True, True)  # numbers to the right
    return [
        "  ".join(
            c.rjust(w) if r else c.ljust(w) for c, w, r in zip(row, widths, right, strict=True)
        ).rstrip()
        for row in cells
    ]


def _macs(shape: str) -> int:
    m, n, k = (int(v) for v in shape.split("x"))
    return m * n * k


def _best_ratios(rows: list[dict]) -> dict[str, float]:
    """Per shape: numpy f32's time over our fastest row's, at the thread
    count (and format) where that ratio is best."""
    numpy = _numpy_times(rows)
    best: dict[str, float] = {}
    for x in rows:
        base = numpy.get((x["shape"], x["format"], x["threads"]))
        if x["kind"] == "ours" and base:
            best[x["shape"]] = max(best.get(x["shape"], 0.0), base / x["median_s"])
    return best


def quick_summary(rows: list[dict]) -> str:
    """One line: tiny shapes measure call overhead; at which shapes (and from
    how many multiply-adds) numpy f32 or our fastest kernel wins, from the
    rows; and how to run the real shapes."""
    best = _best_ratios(rows)
    tail = "; run without --quick for the 8192-wide shapes (minutes)"
    if not best:
        return "summary: no row of ours beside numpy f32 to compare" + tail
    lose = sorted((s for s, r in best.items() if r < 1), key=_macs)
    win = sorted((s for s, r in best.items() if r >= 1), key=_macs)
    parts = ["summary: tiny shapes measure call overhead more than the kernels"]
    if lose:
        lo, hi = f"{min(best[s] for s in lose):.2f}", f"{max(best[s] for s in lose):.2f}"
        parts.append(
            f"numpy f32 wins at {', '.join(lose)} (up to {_macs(lose[-1])} MACs; "
            f"our fastest at {lo if lo == hi else f'{lo}-{hi}'}x its speed)"
        )
    if win:
        parts.append(
            f"ours win at {', '.join(win)} (from {_macs(win[0])} MACs; up to "
            f"{max(best[s] for s in win):.2f}x numpy)"
        )
    else:
        parts.append("ours win at none of these shapes")
    return ": ".join(parts[:2]) + "".join(f"; {p}" for p in parts[2:]) + tail


def report(record: dict, wrote: str, quick: bool, say) -> None:
    """The end of a run: the rows' table through ``say`` (``--quiet`` drops it),
    then ``wrote`` and, for a ``--quick`` run with matmul rows, the summary
    line, printed."""
    rows = record["rows"]
    for line in ["", *rows_table(rows)] if rows else []:
        say(line)
    print(wrote)
    if quick and rows:
        print(quick_summary(rows))

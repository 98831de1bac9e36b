"""Least-squares fit of ``mlir_mx.torch.experts_amx.AMX_COST`` to
``amx_experts_rows.py``'s output (issue 51, session 57): each point's AMX
cost in units of the exact path's per-row cost (``m * amx / exact``)
against the model's terms (a call, 16-row tiles, tiles holding a failing
row), the narrow-N factor by grid search; then the points where the model,
without and with the 1.1 margin, takes the slower side, and the largest
failing share it takes at a few row counts (K/32 = 90 blocks).

    python bench/probes/amx_cost_fit.py ROWS_OUTPUT.txt [MORE.txt ...]
"""

from __future__ import annotations

import re
import sys

import numpy as np

LINE = re.compile(r"(\w+)\s+(\d+) rows: exact\s+([\d.]+) ms, amx\s+([\d.]+) ms .*"
                  r"failing \(row, block\)s\s+([\d.]+) %.*AMX ran (\d+)/")  # fmt: skip
BLOCKS, WIDE = 90, 5760


def terms(m: int, share: float) -> np.ndarray:
    tiles = [16] * (m // 16) + ([m % 16] if m % 16 else [])
    return np.array([1.0, len(tiles), sum(1 - (1 - share) ** r for r in tiles)])


def main() -> None:
    pts = []
    for path in sys.argv[1:]:
        for line in open(path):
            g = LINE.match(line)
            if g and g.group(6) != "0":  # AMX ran
                n = WIDE if g.group(1) == "gate_up" else WIDE // 2
                pts.append((g.group(1), int(g.group(2)), float(g.group(3)), float(g.group(4)),
                            float(g.group(5)) / 100, n))  # fmt: skip
    best = None
    for narrow in np.arange(0.0, 0.6, 0.02):
        x = np.array([terms(m, s) * (1 + narrow * (WIDE / n - 1)) for _, m, _, _, s, n in pts])
        y = np.array([m * am / ex for _, m, ex, am, _, _ in pts])
        coef = np.linalg.lstsq(x, y, rcond=None)[0]
        err = float(((x @ coef - y) ** 2).sum())
        if best is None or err < best[0]:
            best = (err, narrow, coef)
    err, narrow, coef = best
    print(f"{len(pts)} points: call {coef[0]:.2f}, tile {coef[1]:.2f}, failing_tile {coef[2]:.2f}, "
          f"narrow {narrow:.2f}; rms {np.sqrt(err / len(pts)):.2f} row units")  # fmt: skip

    def pays(m, s, n, margin):
        return margin * (terms(m, s) @ coef) * (1 + narrow * (WIDE / n - 1)) < m

    for margin in (1.0, 1.1):
        wrong = [(p, m, round(100 * s, 1), round(ex / am, 2)) for p, m, ex, am, s, n in pts
                 if pays(m, s, n, margin) != (am < ex)]  # fmt: skip
        print(f"margin {margin}: the slower side at {wrong}")
    for n in (WIDE, WIDE // 2):
        most = []
        for m in (12, 16, 24, 32, 64):
            s = 0.0
            while s < 1 and pays(m, s, n, 1.1):
                s += 0.001
            most.append(f"{m} rows {100 * s:.1f} %")
        print(f"N = {n}: takes up to " + ", ".join(most))


if __name__ == "__main__":
    main()

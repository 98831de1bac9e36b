"""Issue 51's thread targets in one command: decode ms/token of a
TinyLlama-shaped MXFP4 model (``decode_team.py``, a fresh process per row)
for each thread setting, quiet, beside one CPU-bound process and beside a
second copy of itself, the rows alternated round by round
(docs/library.md, "Threads"):

    python bench/probes/decode_team_matrix.py [--layers 8] [--rounds 3]
        [--busy none,spin,self] [--settings 1t,2t,2t-s51,2t-before,...]
        [--before-src DIR]

Prints each setting's median over the rounds (every round's figure in
brackets; for ``self`` the row's and its copy's), the load average at the
start and end, and the targets: 2 threads (the default) beside a spinning
process at least 1 thread's speed there, each of two copies at least their
speed at 1 thread, quiet within 5 % of ``before``.  ``--before-src DIR``: a
setting named ``KEY@before`` runs KEY with ``PYTHONPATH=DIR`` (an older
tree's ``src``, e.g. ``git archive`` of the base), so a change and its base
are measured in the same rounds."""

import argparse
import os
import re
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
#: key: (what it is, decode_team.py arguments, environment)
SETTINGS = {
    "1t": ("1 thread", ["openmp", "1", "--policy", "auto"], {}),
    "2t": ("2 threads, the default", ["openmp", "2", "--policy", "auto"], {}),
    "2t-before": (
        "2 threads as in session 50 (torch's ops on 2 threads, no load check)",
        ["openmp", "2", "--policy", "torch"],
        {"MLIR_MX_LOAD_CHECK": "0"},
    ),
    "2t-s51": (
        "2 threads as in session 51 (busy: the 2-thread kernels on the caller alone)",
        ["openmp", "2", "--policy", "auto"],
        {"MLIR_MX_BUSY_KERNELS": "team"},
    ),
    "2t-nocheck": (
        "2 threads, the decode policy without the load check",
        ["openmp", "2", "--policy", "auto"],
        {"MLIR_MX_LOAD_CHECK": "0"},
    ),
    "2t-slack1": (
        "2 threads, load slack 1 (a team while one runnable thread too many)",
        ["openmp", "2", "--policy", "auto"],
        {"MLIR_MX_LOAD_SLACK": "1"},
    ),
    "2t-pool": ("2 threads on our pool", ["pool", "2", "--policy", "auto"], {}),
    "2t-hold0": (
        "2 threads, a look every period however long the load lasts (before session 66)",
        ["openmp", "2", "--policy", "auto"],
        {"MLIR_MX_LOAD_HOLD": "0"},
    ),
    "2t-calm1": (
        "2 threads, back to the team at the first quiet look (session 53's check)",
        ["openmp", "2", "--policy", "auto"],
        {"MLIR_MX_LOAD_CALM": "1"},
    ),
}


def load() -> str:
    return " ".join(open("/proc/loadavg").read().split()[:3])


def run(args: list[str], env: dict, busy: str, layers: int) -> list[float]:
    cmd = [sys.executable, os.path.join(HERE, "decode_team.py"), *args, "--layers", str(layers)]
    if busy != "none":
        cmd += ["--busy", busy]
    out = subprocess.run(
        cmd, env={**os.environ, **env}, capture_output=True, text=True, check=False
    ).stdout
    found = [float(v) for v in re.findall(r"median ([0-9.]+) ms/token", out)]
    if not found:
        print(f"  no figure from {' '.join(args)} ({busy}): {out[-300:]}", file=sys.stderr)
    return found


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--busy", default="none,spin,self")
    ap.add_argument("--settings", help="comma-separated keys of SETTINGS (default: all)")
    ap.add_argument("--before-src", help="PYTHONPATH of the KEY@before settings")
    ns = ap.parse_args()
    names = ns.settings.split(",") if ns.settings else list(SETTINGS)
    kinds = ns.busy.split(",")
    got = {(n, k): [] for n in names for k in kinds}
    print(f"load average at the start: {load()}; {ns.layers} layers", flush=True)
    for r in range(ns.rounds):
        for k in kinds:
            for n in names:
                key, _, tree = n.partition("@")
                _, args, env = SETTINGS[key]
                if tree == "before":
                    env = {**env, "PYTHONPATH": ns.before_src}
                figures = run(args, env, k, ns.layers)
                got[n, k].append(figures)
                print(f"round {r} [{k}] {n}: {figures} (load {load()})", flush=True)
    print(f"load average at the end: {load()}\n")
    print("| setting | " + " | ".join(kinds) + " |")
    print("|---|" + "---|" * len(kinds))
    med = {}
    for n in names:
        cells = []
        for k in kinds:
            rows = [f for f in got[n, k] if f]
            firsts = [f[0] for f in rows]
            med[n, k] = statistics.median(firsts) if firsts else None
            each = ", ".join("/".join(f"{v:.1f}" for v in f) for f in rows)
            cells.append(f"{med[n, k]:.2f} ({each})" if firsts else "-")
        what = SETTINGS[n.partition("@")[0]][0] + (" (before)" if "@" in n else "")
        print(f"| {n}: {what} | " + " | ".join(cells) + " |")
    _targets(med, kinds)


def _targets(med: dict, kinds: list[str]) -> None:
    one, before = "1t", "2t-before"
    for two in ("2t", "2t@before"):
        for k in kinds:
            a, b = med.get((two, k)), med.get((one, k))
            if a and b:
                print(f"[{k}] {two} / 1t: {b / a:.2f}x speed (target >= 1.0"
                      + (f"; quiet: within 5 % of before: {med.get((before, k), 0) / a:.2f}x)"
                         if k == "none" and med.get((before, k)) else ")"))  # fmt: skip
    for k in kinds:
        a, b = med.get(("2t", k)), med.get(("2t@before", k))
        if a and b:
            print(f"[{k}] 2t after / before: {b / a:.3f}x speed")


if __name__ == "__main__":
    main()

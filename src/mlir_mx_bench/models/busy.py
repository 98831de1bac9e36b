"""``mx-bench --model [gpt-oss] --busy KIND[,KIND]``: rows run on a machine made busy on purpose.

Each busy kind runs every chosen row again, at every thread count, labelled
``[busy KIND]``, with its load started beside it by the benchmark itself, so
the row can be reproduced on any machine (issue 51):

* ``spin``: one CPU-bound process (``python -c "while True: pass"``) runs for
  the whole life of the row's process;
* ``self``: a second copy of the row (the same spec, another process) starts
  at the same moment; both build, convert, prefill and decode the same model
  at once.  The copy's own figures are recorded with the row (``twin``).

The row's record keeps its kind (``spec["busy"]``) and the row it repeats
(``spec["base_row"]``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from mlir_mx.tools.driver import UsageError
from mlir_mx_bench.models.workers import run_worker

__all__ = [
    "BUSY_KINDS", "DECODE_SPEED", "add_busy_argument", "busy_spec", "busy_targets", "parse_busy",
    "run_busy_row",
]

BUSY_KINDS = ("spin", "self")

#: The CPU-bound process of ``--busy spin``.
SPIN_COMMAND = (sys.executable, "-c", "while True: pass")


def add_busy_argument(p) -> None:
    """``--busy`` on the command line's parser."""
    p.add_argument(
        "--busy",
        metavar="KIND[,KIND]",
        help="--model: run the rows again on a busy machine, labelled [busy KIND]: spin "
        "(one CPU-bound process beside the row), self (a second copy of the row at once); "
        "--model gpt-oss: transformers bf16 and our rows held to targets",
    )


def parse_busy(text: str | None) -> list[str]:
    """``"spin,self"`` -> ``["spin", "self"]``; UsageError naming ``--busy`` otherwise."""
    if text is None:
        return []
    kinds = [k.strip() for k in text.split(",")]
    if not kinds or any(k not in BUSY_KINDS for k in kinds) or len(set(kinds)) != len(kinds):
        raise UsageError(f"--busy: expected some of {','.join(BUSY_KINDS)}, got '{text}'")
    return kinds


def busy_spec(spec: dict, kind: str) -> dict:
    """The spec of ``spec``'s row run with the load ``kind``."""
    return dict(
        spec,
        name=f"{spec['name']}-busy-{kind}",
        row=f"{spec['row']} [busy {kind}]",
        base_row=spec["row"],
        busy=kind,
    )


def run_busy_row(module: str, spec: dict, tmp: Path) -> dict:
    """Run the row of ``spec`` (``python -m module``, :func:`run_worker`) with
    its load (``spec["busy"]``) beside it; returns the row's record."""
    if spec["busy"] == "spin":
        load = subprocess.Popen(SPIN_COMMAND, stdout=subprocess.DEVNULL)
        try:
            return run_worker(module, spec, tmp, spec.get("env"))
        finally:
            load.kill()
            load.wait()
    twin = dict(spec, name=f"{spec['name']}-twin")
    path = tmp / f"{twin['name']}-spec.json"
    path.write_text(json.dumps(twin))
    env = spec.get("env")
    other = subprocess.Popen(
        [sys.executable, "-m", module, str(path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, **env} if env else None,  # an --env-row's twin: its setting too
    )
    try:
        rec = run_worker(module, spec, tmp, spec.get("env"))
    finally:
        code = other.wait()
    result = tmp / f"{twin['name']}.json"
    if code == 0 and result.exists() and "error" not in rec:
        copy = json.loads(result.read_text())
        rec["twin"] = {k: copy.get(k) for k in ("prefill_ms", "decode_tokens_per_s")}
    elif "error" not in rec:
        rec["twin"] = {"error": f"the second copy exited {code}"}
    return rec


#: What :func:`busy_targets` holds by default: (record key, what it is, higher
#: is faster).  The Llama rows' decode tokens/s.
DECODE_SPEED = (("decode_tokens_per_s", "decode tokens/s", True),)


def busy_targets(rows: list[dict], threads: int, by: dict, figures=DECODE_SPEED) -> list[dict]:
    """Issue 51's targets for our busy rows at ``threads`` > 1: each of
    ``figures`` (``(key, what, higher is faster)``: :data:`DECODE_SPEED`, or a
    gpt-oss run's MoE times) at least as fast as the same row's with the same
    load at 1 thread (``by``: records by (row, threads)); the value is a speed
    ratio (a time's inverse)."""
    out = []
    for r in rows:
        s = r["spec"]
        if s["threads"] != threads or threads == 1 or not s.get("busy"):
            continue
        if not s["kind"].startswith("mx"):
            continue
        one = by.get((s["row"], 1))
        for key, what, faster_higher in figures:
            if key not in r:
                continue
            value = None
            if one is not None and one.get(key) and r[key]:
                value = r[key] / one[key] if faster_higher else one[key] / r[key]
            out.append(
                dict(
                    threads=threads,
                    figure=f"{what}, {s['row']}: {threads} threads / 1 thread",
                    value=value,
                    target=">= 1.0",
                    met=None if value is None else value >= 1.0,
                )
            )
    return out

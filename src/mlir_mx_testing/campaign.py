"""Seeded campaigns of numbered cases, run in-process in a worker subprocess.

A *suite* (``"fuzz"``, ``"misuse"``, ``"gguf"``, ``"gguf-write"``, ``"cache"``,
``"linear"``, ``"state-dict"`` and ``"checkpoint"`` (need torch), ``"convert"``)
maps ``(seed, index)`` (and the suite's keyword options) to one case
and runs it in-process, returning an :class:`Outcome`.  Case ``i`` depends on
``(seed, i)`` only, so any case can be rerun alone.  :func:`run_campaign`
starts ``python -m mlir_mx_testing.campaign`` as a worker that runs cases
``start..`` in order and prints one JSON line per case (a "begin" line
first).  When the worker dies by a signal or goes silent for longer than the
timeout, the case in flight is recorded as ``signal`` / ``hang`` and a new
worker resumes at the next case: the campaign always completes, in-process
speed included, and a crash costs one worker restart.

Outcome kinds: ``ok`` (a result), ``rejected`` (bad input refused the
documented way: a located diagnostic and exit code 1 for a tool, a
``TypeError``/``ValueError``/``MXError`` for the API), and the findings
``traceback``, ``unlocated``, ``silent``, ``wrong``, ``signal``, ``hang``.
"""

from __future__ import annotations

import importlib
import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, field

from mlir_mx.errors import MXValueError

__all__ = ["Outcome", "Report", "FINDINGS", "run_campaign", "run_inline"]

#: Outcome kinds that are defects.
#: ``not-mx-error``: bad input refused with a builtin exception that is not an
#: ``mlir_mx.MXError`` (every library error for bad input must be one).
FINDINGS = ("traceback", "unlocated", "silent", "wrong", "signal", "hang", "not-mx-error")

#: Suites by name: module with ``case(seed, index, **options) -> Outcome``
#: (``"module:function"``: another function of the module).
_SUITES = {
    "fuzz": "mlir_mx_testing.fuzz",
    "misuse": "mlir_mx_testing.misuse",
    "gguf": "mlir_mx_testing.gguf_fuzz",
    "gguf-write": "mlir_mx_testing.gguf_fuzz:write_case",
    "cache": "mlir_mx_testing.cache_fuzz",
    "cache-store": "mlir_mx_testing.cache_fuzz:store_case",
    "linear": "mlir_mx_testing.linear_fuzz",
    "state-dict": "mlir_mx_testing.state_dict_fuzz",
    "convert": "mlir_mx_testing.convert_fuzz",
    "checkpoint": "mlir_mx_testing.checkpoint_fuzz",
}


@dataclass
class Outcome:
    """What one case did."""

    index: int
    kind: str  # ok, rejected, or one of FINDINGS
    config: str = ""
    detail: str = ""
    reproducer: str = ""  # the input (IR text or a description of the call)


@dataclass
class Report:
    """Counts of a campaign and its findings."""

    suite: str
    seed: int
    cases: int = 0
    kinds: Counter = field(default_factory=Counter)
    configs: Counter = field(default_factory=Counter)
    findings: list[Outcome] = field(default_factory=list)
    restarts: int = 0
    seconds: float = 0.0

    def add(self, o: Outcome) -> None:
        self.cases += 1
        self.kinds[o.kind] += 1
        self.configs[o.config] += 1
        if o.kind in FINDINGS:
            self.findings.append(o)

    @property
    def clean(self) -> bool:
        return not self.findings

    def summary(self) -> str:
        kinds = ", ".join(f"{k} {self.kinds[k]}" for k in sorted(self.kinds))
        finds = ", ".join(f"{k} {self.kinds.get(k, 0)}" for k in FINDINGS)
        lines = [
            f"{self.suite}: seed {self.seed}, {self.cases} cases in {self.seconds:.0f} s "
            f"({self.restarts} worker restarts)",
            f"  outcomes: {kinds}",
            f"  findings: {finds}",
            "  per configuration: "
            + ", ".join(f"{c} {n}" for c, n in sorted(self.configs.items())),
        ]
        for o in self.findings[:20]:
            lines.append(f"  FINDING case {o.index} [{o.config}] {o.kind}: {o.detail[:300]}")
        return "\n".join(lines)


def _suite(name: str):
    """The ``case`` function of a suite by short name, or of any module path."""
    if name in _SUITES:
        module, _, function = _SUITES[name].partition(":")
        return getattr(importlib.import_module(module), function or "case")
    try:
        mod = importlib.import_module(name)
    except ImportError:
        mod = None
    if mod is None or not hasattr(mod, "case"):
        raise MXValueError(
            f"unknown suite '{name}' (available: {', '.join(_SUITES)}, or a module with case())"
        )
    return mod.case


def run_inline(suite: str, seed: int, indices, options: dict | None = None) -> Report:
    """Run cases in this process (no signal protection): for debugging one case."""
    case, report = _suite(suite), Report(suite, seed)
    for i in indices:
        report.add(case(seed, i, **(options or {})))
    return report


def run_campaign(
    suite: str,
    seed: int,
    count: int,
    *,
    start: int = 0,
    timeout: float = 120.0,
    progress=None,
    options: dict | None = None,
) -> Report:
    """Run cases ``start .. start+count-1`` of ``suite`` in worker processes.

    ``options``: keyword arguments of the suite's ``case`` (JSON values), e.g.
    a restriction of its generator; a case is then a function of ``(seed,
    index, options)``."""
    _suite(suite)  # validate the name here
    report = Report(suite, seed)
    t0 = time.monotonic()
    nxt, end = start, start + count
    opts = json.dumps(options or {})
    while nxt < end:
        nxt = _one_worker(suite, seed, nxt, end, timeout, report, progress, opts)
        if nxt < end:
            report.restarts += 1
    report.seconds = time.monotonic() - t0
    return report


def _one_worker(suite, seed, nxt, end, timeout, report, progress, opts="{}") -> int:
    """Run one worker from case ``nxt``; return the next case to run."""
    cmd = [
        sys.executable,
        "-m",
        "mlir_mx_testing.campaign",
        suite,
        str(seed),
        str(nxt),
        str(end),
        opts,
    ]
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True)
        lines: queue.Queue = queue.Queue()
        threading.Thread(target=_pump, args=(proc.stdout, lines), daemon=True).start()
        current, done = None, nxt
        while True:
            try:
                line = lines.get(timeout=timeout)
            except queue.Empty:
                proc.kill()
                proc.wait()
                at = current if current is not None else done
                report.add(Outcome(at, "hang", "", f"no answer in {timeout:.0f} s"))
                return at + 1
            if line is not None:
                msg = json.loads(line)
                if "begin" in msg:
                    current = msg["begin"]
                    continue
                report.add(Outcome(**msg))
                current, done = None, msg["index"] + 1
                if progress is not None:
                    progress(report)
                continue
            proc.wait()  # the worker is gone
            if proc.returncode == 0 and current is None:
                return end
            err.seek(0)
            tail = err.read()[-800:].decode(errors="replace")
            if current is None and done == nxt:
                raise RuntimeError(
                    f"campaign worker failed to start (exit {proc.returncode}): {tail}"
                )
            at = current if current is not None else done
            code = proc.returncode
            what = f"signal {-code}" if code < 0 else f"exit code {code}"
            report.add(Outcome(at, "signal", "", f"worker died ({what}): {tail}"))
            return at + 1


def _pump(stream, lines: queue.Queue) -> None:
    for line in stream:
        if line.startswith("{"):
            lines.put(line)
    lines.put(None)


def _worker(suite: str, seed: int, start: int, end: int, options: dict | None = None) -> None:
    case = _suite(suite)
    options = options or {}
    out = sys.stdout
    # Cases print (mx-runner prints results, upstream prints to fd 1): keep
    # the protocol on a private copy of stdout and send the rest to stderr.
    proto = os.fdopen(os.dup(out.fileno()), "w", buffering=1)
    os.dup2(sys.stderr.fileno(), out.fileno())
    for i in range(start, end):
        proto.write(json.dumps({"begin": i}) + "\n")
        proto.flush()
        o = case(seed, i, **options)
        proto.write(json.dumps(asdict(o)) + "\n")
        proto.flush()


if __name__ == "__main__":
    _opts = json.loads(sys.argv[5]) if len(sys.argv) > 5 else {}
    _worker(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), _opts)

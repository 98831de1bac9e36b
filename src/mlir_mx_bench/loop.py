"""The benchmark loop: per (shape, format), per thread count, every method is
built, checked against the oracle, then timed; progress lines as it goes.

A wrong result raises :class:`~mlir_mx_bench.cases.BenchFailure` at once:
it is a failure of the run, never a row.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from mlir_mx.roofline.measure import FmaProbe, Timing, host_share, time_repeated
from mlir_mx.roofline.variants import Shape

from .baselines import numpy_methods, torch_methods
from .cases import Problem, is_nvfp4, make_problem, split_format
from .ggml_baseline import ggml_methods
from .machine import (
    Roof,
    cpu_sample,
    loadavg,
    machine_info,
    measure_roof,
    other_load,
    roof_warnings,
    thread_limits,
)
from .method import Method, Skipped
from .mlx_baseline import mlx_methods
from .nvfp4_rows import nvfp4_methods
from .openvino_baseline import openvino_methods
from .ours import our_methods

__all__ = ["Options", "run_bench"]

FAMILIES = (numpy_methods, torch_methods, ggml_methods, openvino_methods, mlx_methods)


@dataclass
class Options:
    """Everything a run depends on (recorded in the results)."""

    shapes: list[Shape]
    formats: list[str]
    threads: list[int]
    command: str
    tag: str
    out: Path
    quick: bool = False
    block_size: int = 32
    samples: int = 9
    target_s: float = 0.05
    budget_s: float = 4.0
    #: pause before each timing so the previous library's spinning workers sleep
    settle_s: float = 0.3
    #: a timing during which other processes used more than this share of the
    #: cores is repeated (after ``retry_wait_s``) up to ``retries`` times
    max_others: float = 0.1
    retries: int = 3
    retry_wait_s: float = 5.0
    #: a timing around which the cores gave less than this share of their FMA
    #: peak (a probe before and after it: contention the guest cannot see) is
    #: repeated the same way; 0 turns the probes off
    min_host: float = 0.85
    #: the MLP benchmark (``mlir_mx_bench.mlp``): (d, f) and token counts
    mlp: tuple[int, int] | None = None
    mlp_tokens: tuple[int, ...] = (1, 128)
    #: the conversion benchmark (``mlir_mx_bench.quantize_rows``): (rows, columns)
    quantize: tuple[int, int] | None = None


def _row(p: Problem, m: Method, t: Timing, roof: Roof, threads: int, err: float) -> dict:
    s = p.shape
    t_bw = m.bytes_moved / roof.bandwidth
    t_pk = p.flops / roof.peak
    return {
        "shape": str(s),
        "M": s.M,
        "N": s.N,
        "K": s.K,
        "format": p.label,
        "block_size": p.block_size,
        "threads": threads,
        "method": m.name,
        "kind": m.kind,
        "operands": m.operands,
        "method_threads": m.threads,
        "median_s": t.median,
        "min_s": t.min,
        "max_s": t.max,
        "spread": t.spread,
        "samples": t.samples,
        "calls_per_sample": t.calls,
        "bytes": m.bytes_moved,
        "gb_per_s": m.bytes_moved / t.median / 1e9,
        "gflop_per_s": p.flops / t.median / 1e9,
        "roof": "bandwidth" if t_bw >= t_pk else "peak",
        "roof_fraction": max(t_bw, t_pk) / t.median,
        "max_err_over_bound": err,
        "compile_s": m.compile_s,
        "note": m.note,
        **(m.extra or {}),
    }


def _ratios(rows: list[dict]) -> list[dict]:
    """Speedup of each of our rows over each baseline row of the same group."""
    out = []
    for o in (r for r in rows if r["kind"] == "ours"):
        for b in (r for r in rows if r["kind"] == "baseline"):
            out.append(
                {
                    "shape": o["shape"],
                    "format": o["format"],
                    "threads": o["threads"],
                    "ours": o["method"],
                    "baseline": b["method"],
                    # emulation rows compare only with kernels of the same operands
                    "like_for_like": b["operands"] in (None, o["operands"]),
                    "speedup": b["median_s"] / o["median_s"],
                }
            )
    return out


#: the progress lines' method column: at least this wide, wider for a longer name
NAME_WIDTH = 26


def _disturbed(cpu: dict | None, host: dict | None, opts: Options) -> str | None:
    """Why a timing cannot be trusted, or None: other processes on the cores
    (``/proc/stat``), or the cores giving less FMA rate than the probe's
    threshold (contention beside the guest)."""
    if cpu is not None and cpu["others"] > opts.max_others:
        return f"other processes used {cpu['others']:.0%} of the cores while it was timed"
    if host is not None and host["share"] < opts.min_host:
        return (
            f"the cores gave {host['share']:.0%} of their FMA peak around the timing "
            f"(before {host['before']:.0%}, after {host['after']:.0%}; not other processes "
            "here: the host's other tenants, or threads of this process that still spin)"
        )
    return None


def _probe(probe: FmaProbe | None, roof: Roof) -> float | None:
    return None if probe is None else host_share(probe, roof.peak)


def _measure(p: Problem, m: Method, threads: int, roof: Roof, opts: Options, say,
             width: int = NAME_WIDTH, probe: FmaProbe | None = None) -> dict:  # fmt: skip
    err = m.oracle.check(m.name, f"{p.where}, {threads} thread(s)", m.result(), m.out_unit)
    for attempt in range(1, opts.retries + 2):
        time.sleep(opts.settle_s)  # the previous call's spinning workers sleep (the oracle's too)
        before = _probe(probe, roof)
        cpu0 = cpu_sample()
        timing = time_repeated(
            m.run, samples=opts.samples, target_s=opts.target_s, budget_s=opts.budget_s
        )
        cpu = other_load(cpu0, cpu_sample())
        if probe is not None:  # our own workers (and torch's, OpenBLAS's) stop spinning first
            time.sleep(opts.settle_s)
        after = _probe(probe, roof)
        host = None if before is None else {
            "before": before, "after": after, "share": min(before, after)
        }  # fmt: skip
        why = _disturbed(cpu, host, opts)
        if why is None or attempt > opts.retries:
            break
        say(f"    {m.name}: {why}; timing again in {opts.retry_wait_s:g} s")
        time.sleep(opts.retry_wait_s)
    row = _row(p, m, timing, roof, threads, err)
    row["cpu"], row["host"], row["attempts"] = cpu, host, attempt
    say(
        f"    {m.name:<{width}} {timing.median * 1e3:10.3f} ms (spread {timing.spread:7.1%}) "
        f"{row['gb_per_s']:7.1f} GB/s {row['gflop_per_s']:8.1f} GFLOP/s "
        f"{row['roof_fraction']:6.1%} of {row['roof']} roof; err/bound {err:.2g}"
        + (f"; others used {row['cpu']['others']:.0%} of the cores" if row["cpu"] else "")
        + (f"; cores gave {host['share']:.0%} of their FMA peak" if host else "")
    )
    return row


def _group(p, threads, roof, opts, compiled, skipped, say, probe=None) -> list[dict]:
    rows = []

    def ours(p, t, s):
        if is_nvfp4(p.element):
            return nvfp4_methods(p, t, s, compiled)
        return our_methods(p, t, compiled, s)

    families: list[Callable] = [*FAMILIES, lambda p, t: ours(p, t, say)]
    for family in families:
        got = family(p, threads)
        items = [got] if isinstance(got, Skipped) else got
        methods = [m for m in items if not isinstance(m, Skipped)]
        for s in items:
            if isinstance(s, Skipped) and s.name not in skipped:
                skipped[s.name] = s.reason
                say(f"    note: skipping {s.name}: {s.reason}")
        width = max([NAME_WIDTH, *(len(m.name) for m in methods)])
        try:
            for m in methods:
                rows.append(_measure(p, m, threads, roof, opts, say, width, probe))
        finally:
            for m in methods:
                if m.close:
                    m.close()
    return rows


def _shape_rows(opts, roofs, compiled, skipped, probes, say) -> list[dict]:
    """Every (shape, format, thread count) group's rows, in that order."""
    rows: list[dict] = []
    for shape in opts.shapes:
        for element in opts.formats:
            say(f"{shape} {element}: quantizing the inputs, computing the f64 oracle...")
            a_element, b_element = split_format(element)
            p = make_problem(shape, b_element, opts.block_size, a_element=a_element)
            _ = p.oracle
            for t in opts.threads:
                say(f"  {shape} {element} at {t} thread(s):")
                with thread_limits(t):
                    rows += _group(p, t, roofs[t], opts, compiled, skipped, say, probes.get(t))
            del p
    return rows


def run_bench(opts: Options, say: Callable[[str], None]) -> dict:
    """Run the whole benchmark; returns the record written by :mod:`.results`."""
    t_start, cpu0 = time.perf_counter(), cpu_sample()
    record = {
        "tool": "mx-bench",
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "tag": opts.tag,
        "command": opts.command,
        "options": {k: v for k, v in asdict(opts).items() if k != "out"},
        "machine": machine_info(),
        "loadavg_start": loadavg(),
    }
    record["options"]["shapes"] = [str(s) for s in opts.shapes]
    say(f"mx-bench on {record['machine']['cpu']}, load average {record['loadavg_start']}")
    roofs = {t: measure_roof(t, opts.quick, say) for t in sorted(set(opts.threads) | {1})}
    for warning in roof_warnings(roofs):
        say(f"  warning: {warning}")
    probes = {t: FmaProbe(t) for t in opts.threads} if opts.min_host > 0 and opts.shapes else {}
    compiled: dict[int, float] = {}
    skipped: dict[str, str] = {}
    try:
        rows = _shape_rows(opts, roofs, compiled, skipped, probes, say)
    finally:
        for probe in probes.values():
            probe.close()
    if opts.mlp:
        from .mlp import run_mlp

        record["mlp"] = run_mlp(
            *opts.mlp,
            opts.threads,
            list(opts.mlp_tokens),
            say,
            samples=opts.samples,
            retries=opts.retries,
        )
    if opts.quantize:
        from .quantize_rows import run_quantize

        record["quantize"] = run_quantize(
            *opts.quantize,
            opts.formats,
            opts.threads,
            say,
            samples=opts.samples,
            retries=opts.retries,
        )
    record.update(
        roofs=[asdict(r) for r in roofs.values()],
        roof_warnings=roof_warnings(roofs),
        rows=rows,
        ratios=_ratios_by_group(rows),
        skipped=[{"method": k, "reason": v} for k, v in skipped.items()],
        loadavg_end=loadavg(),
        cpu=other_load(cpu0, cpu_sample()),
        total_s=time.perf_counter() - t_start,
    )
    return record


def _ratios_by_group(rows: list[dict]) -> list[dict]:
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["shape"], r["format"], r["threads"]), []).append(r)
    return [x for g in groups.values() for x in _ratios(g)]

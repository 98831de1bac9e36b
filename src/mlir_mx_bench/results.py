"""The results files of a run: ``mx-bench-<date>-<tag>.json`` and ``.md``."""

from __future__ import annotations

import json
from pathlib import Path

from mlir_mx.files import write_text

from . import emulate

__all__ = ["RATIO_BASELINES", "markdown", "row_isa", "write_results"]

#: baseline columns of the speedup table, in order
RATIO_BASELINES = (
    "numpy f32",
    "emulation",
    "torch f32",
    "torch bf16",
    "ggml Q8_0",
    "ggml MXFP4",
    "openvino MXFP4",
    "openvino MXFP4 f32",
    "ggml NVFP4",
    "mlx MXFP4",
    "mlx NVFP4",
)


def write_results(record: dict, out: Path) -> tuple[Path, Path]:
    """Write the JSON record and its markdown rendering; returns both paths.

    Each file is written atomically (:mod:`mlir_mx.files`): an error leaves
    the previous file of the same name, or none, never half a file."""
    out.mkdir(parents=True, exist_ok=True)
    stem = f"mx-bench-{record['date'][:10]}-{record['tag']}"
    js, md = out / f"{stem}.json", out / f"{stem}.md"
    text = markdown(record)  # rendered before either file is touched
    write_text(js, json.dumps(record, indent=1) + "\n")
    write_text(md, text)
    return js, md


def row_isa(kind: str, machine: dict, method: str = "") -> str:
    """The ISA level a results row ran on: ours (``kind == "ours"``) at the
    kernels' level (the record's ``isa_level``: ``MLIR_MX_CPU_FEATURES``
    applied), ggml's rows at its build's (``isa_level_ggml``: it runs what it
    was compiled for), another baseline (numpy, torch, the emulation) at the
    CPU's own (``isa_level_cpu``), which it dispatches on, or the level
    ``--emulate`` capped them at (``isa_level_baselines``); ``-`` in a record
    made before the levels were recorded."""
    if kind != "ours" and method.startswith("ggml") and machine.get("isa_level_ggml"):
        return machine["isa_level_ggml"]
    if kind == "ours":
        return machine.get("isa_level", "-")
    # numpy and torch at the level --emulate capped them at, else the CPU's.
    return machine.get("isa_level_baselines") or machine.get("isa_level_cpu", "-")


def _pct(cpu: dict | None, key: str) -> str:
    return "unknown" if not cpu else f"{cpu[key]:.0%}"


def _host(row: dict) -> str:
    """The 'host' column: the lower of the two probes' shares of the FMA peak."""
    h = row.get("host")
    return "-" if not h else f"{h['share']:.0%}"


def _host_line(r: dict) -> list[str]:
    shares = [x["host"]["share"] for x in r["rows"] if x.get("host")]
    if not shares:
        return []
    low = min(shares)
    below = sum(s < r["options"].get("min_host", 0) for s in shares)
    return [
        "- Host contention (per row in the 'host' column): the share of the cores' f32 FMA "
        "peak a 5 ms probe at the row's thread count got before and after each timing, the "
        f"lower of the two; lowest {low:.0%}. A timing with a probe under "
        f"{r['options'].get('min_host', 0):.0%} was repeated like a disturbed one; "
        f"{below} row(s) still below it. It sees what /proc/stat cannot: a busy neighbour "
        "of the vCPUs on the host, with no steal reported, as well as other processes here"
    ]


def _tries(row: dict) -> str:
    n = row.get("attempts", 1)
    return f" (timed {n}x)" if n > 1 else ""


def _header(r: dict) -> list[str]:
    m = r["machine"]
    have = [k for k, v in m["cpu_features"].items() if v]
    lack = [k for k, v in m["cpu_features"].items() if not v]
    vers = ", ".join(f"{k} {v}" for k, v in m["versions"].items())
    blas = "; ".join(
        " ".join(str(b.get(k, "")) for k in ("internal_api", "version", "architecture"))
        for b in m["blas"]
    )
    # The matmul results table has the column; the other sections say per row.
    used = "; the 'kernel threads' column says what each method really used" if r["rows"] else ""
    lines = [
        f"# mx-bench: {r['tag']} ({r['date']})",
        "",
        f"- Command: `{r['command']}`",
        f"- Machine: {m.get('description', m['cpu'])}; {m['platform']}",
        f"- CPU features: {', '.join(have) or 'none of the listed'}; "
        f"absent: {', '.join(lack) or 'none'}",
        f"- ISA level: ours {m.get('isa_level', 'not recorded')}, the baselines "
        + (f"{m['isa_level_baselines']} (capped by --emulate, below)" if m.get("isa_level_baselines")
           else f"{m.get('isa_level_cpu', 'not recorded')} (they dispatch on the CPU itself; "
           "MLIR_MX_CPU_FEATURES masks only ours")
        + (f"; ggml as built: {m['isa_level_ggml']}" if m.get("isa_level_ggml") else "")
        + "); the 'ISA' column says per row",
        *([emu] if (emu := emulate.summary(m)) else []),
        f"- Versions: {vers}; BLAS: {blas or 'unknown'}",
        f"- Thread counts: {', '.join(str(t) for t in r['options']['threads'])} "
        f"(numpy BLAS via threadpoolctl, torch.set_num_threads, ggml n_threads{used})",
        f"- Load average (1/5/15 min) at start {r['loadavg_start']}, at end {r['loadavg_end']} "
        "(load counts every process on the cores, ours too)",
        f"- Share of the cores used by other processes during the run: "
        f"{_pct(r['cpu'], 'others')}, stolen by the hypervisor: {_pct(r['cpu'], 'steal')}; "
        "per row in the 'others' column: a timing during which others used more than "
        f"{r['options']['max_others']:.0%} was repeated up to {r['options']['retries']} times "
        "('timed Nx'); one still above that was disturbed",
        *_host_line(r),
        f"- Total run time {r['total_s']:.0f} s; samples per timing up to "
        f"{r['options']['samples']} (budget {r['options']['budget_s']} s), median reported, "
        "spread = (max - min) / median",
    ]
    if r["rows"]:
        lines.append(
            "- Every result was checked against the oracle (f64 product of the exact operand "
            "values, tolerance (K+2) 2^-24 sum|a||b|) before it was timed; see docs/bench.md"
        )
    if m.get("env"):
        lines.append(f"- Environment: {m['env']}")
    for s in r["skipped"]:
        lines.append(f"- Skipped {s['method']}: {s['reason']}")
    lines += [
        "",
        "## Measured roofs",
        "",
        "| threads | bandwidth GB/s (median) | peak GFLOP/s (median) | how |",
        "|---|---|---|---|",
    ]
    for roof in r["roofs"]:
        lines.append(
            f"| {roof['threads']} | {roof['bandwidth'] / 1e9:.1f} "
            f"({roof['bandwidth_median'] / 1e9:.1f}) | {roof['peak'] / 1e9:.1f} "
            f"({roof['peak_median'] / 1e9:.1f}) | {roof['method']} |"
        )
    for w in r.get("roof_warnings", []):
        lines += ["", f"**Warning:** {w}."]
    return lines


def _table(title: str, intro: str, columns: list[str]) -> list[str]:
    """A section's heading, its explanation and a markdown table's header."""
    return [
        "",
        f"## {title}",
        "",
        intro,
        "",
        "| " + " | ".join(columns) + " |",
        "|" + "---|" * len(columns),
    ]


def _rows_table(r: dict) -> list[str]:
    lines = _table(
        "Results",
        "Times per call. GB/s: the method's compulsory bytes / time (docs/bench.md). "
        "% roof: time at the roof that bounds the method (bandwidth or f32 FMA peak) / "
        "measured time. vs numpy: numpy f32 time / this time (> 1: faster).",
        [
            "shape",
            "format",
            "threads",
            "method",
            "ISA",
            "kernel threads",
            "median ms",
            "min ms",
            "spread",
            "GB/s",
            "GFLOP/s",
            "roof",
            "% roof",
            "vs numpy f32",
            "err/bound",
            "compile s",
            "others",
            "host",
        ],
    )
    numpy = {
        (x["shape"], x["format"], x["threads"]): x["median_s"]
        for x in r["rows"]
        if x["method"] == "numpy f32"
    }
    for x in r["rows"]:
        base = numpy.get((x["shape"], x["format"], x["threads"]))
        vs = f"{base / x['median_s']:.2f}" if base else "-"
        comp = f"{x['compile_s']:.2f}" if x["compile_s"] is not None else "-"
        lines.append(
            f"| {x['shape']} | {x['format']} | {x['threads']} | {x['method']} "
            f"| {row_isa(x['kind'], r['machine'], x['method'])} | {x['method_threads']} | {x['median_s'] * 1e3:.3f} | {x['min_s'] * 1e3:.3f} "
            f"| {x['spread']:.1%} | {x['gb_per_s']:.1f} | {x['gflop_per_s']:.1f} | {x['roof']} "
            f"| {x['roof_fraction']:.1%} | {vs} | {x['max_err_over_bound']:.2g} | {comp} "
            f"| {_pct(x.get('cpu'), 'others')}{_tries(x)} | {_host(x)} |"
        )
    return lines


def _ratio_table(r: dict) -> list[str]:
    lines = _table(
        "Our kernels against each baseline",
        "Speedup = baseline time / our time at the same thread count (> 1: ours faster). "
        "'emulation' is the emulation of the same operands (mx x mx or mx x f32).",
        ["shape", "format", "threads", "ours", *RATIO_BASELINES],
    )
    table: dict[tuple, dict[str, float]] = {}
    for q in r["ratios"]:
        if not q["like_for_like"]:
            continue
        col = "emulation" if q["baseline"].startswith("emulation") else q["baseline"]
        key = (q["shape"], q["format"], q["threads"], q["ours"])
        table.setdefault(key, {})[col] = q["speedup"]
    for key, cols in table.items():
        cells = " | ".join(f"{cols[c]:.2f}" if c in cols else "-" for c in RATIO_BASELINES)
        lines.append(f"| {' | '.join(str(k) for k in key)} | {cells} |")
    return lines


def _notes(r: dict) -> list[str]:
    notes: dict[tuple[str, str], list[str]] = {}
    for x in r["rows"]:
        if x["note"]:
            threads = notes.setdefault((x["method"], x["note"]), [])
            if str(x["threads"]) not in threads:
                threads.append(str(x["threads"]))
    return ["", "## Notes", ""] + [
        f"- {method} ({'/'.join(t)} thread(s)): {note}" for (method, note), t in notes.items()
    ]


def markdown(record: dict) -> str:
    """The markdown rendering of a run record."""
    lines = _header(record)
    if record["rows"]:
        lines += _rows_table(record) + _ratio_table(record) + _notes(record)
    if record.get("mlp"):
        from .mlp import mlp_markdown

        lines += [""] + mlp_markdown(record["mlp"])
    if record.get("quantize"):
        from .quantize_rows import quantize_markdown

        lines += [""] + quantize_markdown(record["quantize"])
    return "\n".join(lines) + "\n"

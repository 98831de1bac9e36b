"""The results files of ``mx-bench --model``: ``mx-bench-<date>-<tag>.json`` and ``.md``."""

from __future__ import annotations

import json
from pathlib import Path

from mlir_mx.files import write_text
from mlir_mx_bench.emulate import summary
from mlir_mx_bench.models.llama.run import ROWS, same_env_key
from mlir_mx_bench.models.workers import host_column

__all__ = ["model_markdown", "write_model_results"]

MIB = 1024


def write_model_results(record: dict, out: Path) -> tuple[Path, Path]:
    """Write the JSON record and its markdown rendering; returns both paths.

    Each file is written atomically (:mod:`mlir_mx.files`), the markdown
    rendered first: an error (a full disk) leaves the previous file of the
    same name, or none, never half a file."""
    out.mkdir(parents=True, exist_ok=True)
    stem = f"mx-bench-{record['date'][:10]}-{record['tag']}"
    js, md = out / f"{stem}.json", out / f"{stem}.md"
    text = model_markdown(record)
    write_text(js, json.dumps(record, indent=1) + "\n")
    write_text(md, text)
    return js, md


def _header(r: dict) -> list[str]:
    m, o = r["machine"], r["options"]
    have = [k for k, v in m["cpu_features"].items() if v]
    vers = ", ".join(f"{k} {v}" for k, v in m["versions"].items())
    cpu = r.get("cpu") or {}
    others = f"{cpu['others']:.0%}" if cpu else "unknown"
    return [
        f"# mx-bench --model: {r['tag']} ({r['date']})",
        "",
        f"- Command: `{r['command']}`",
        f"- Machine: {m['cpu']}, {m['cpus']} CPUs; {m['platform']}; CPU features: {', '.join(have)}",
        *([emu] if (emu := summary(m)) else []),
        f"- Versions: {vers}",
        f"- **Shared machine**: other agents' processes ran on the same cores during this "
        f"run (load average {r['loadavg_start']} at start, {r['loadavg_end']} at end; other "
        f"processes used {others} of the cores). Times are noisy; compare rows of one run, "
        "and rerun on a quiet machine for final figures.",
        f"- Model: `transformers` `LlamaForCausalLM` of TinyLlama-1.1B's shape (hidden 2048, "
        f"intermediate 5632, 32 heads, 4 KV heads, vocab 32000"
        f"{', changed: ' + str(o['config']) if o.get('config') else ''}) with "
        f"**{o['layers']} layers**; random weights (HF init, seed {o['seed']}), nothing downloaded",
        f"- Work: a {o['prompt']}-token prompt (prefill timed with `logits_to_keep=1`, median "
        f"of {o['prefill_samples']}), then {o['new_tokens']} greedy tokens with the KV cache "
        "(decode tokens/s: 1 / the median decode step, robust to bursts of other work; the "
        "mean is in the JSON); each row after a warm-up of 3 tokens (our kernels compile "
        "there), each row in a process of its own",
        "- Threads: torch.set_num_threads(t); our layers follow torch.get_num_threads(). "
        "**Environment**: every row runs in the environment of the command as it is (no "
        f"variable set; OMP_/GOMP_/KMP_/MKL_ variables of the command: {r.get('env') or 'none'})"
        + (", except the rows labelled `[VAR=VALUE]` (`--env-row`), which set that variable "
           "for their process only" if r["options"].get("env_rows") else "")
        + "; what each row's process ran in is under 'Environment' below",
        "- Linear weights: bytes of the memory the linear layers reference (tensors, a "
        "tensor subclass's inner tensors, the arrays `mlir_mx.Linear` holds; each block once)",
        "- RSS: VmRSS after building and converting the model and returning freed heap "
        "memory to the OS (`malloc_trim`); 'over baseline' subtracts the RSS after the "
        "imports (torch, transformers, mlir_mx); peak: VmHWM of the row's process (the f32 "
        "model is built first, then converted layer by layer)",
        f"- Correctness: logits of the whole prompt against the reference (the f32 model with "
        f"each converted Linear's weight replaced by its dequantized MX weight) within the "
        f"bound of `mlir_mx.torch.logit_bound` ({o['probes']} probes; docs/torch.md), and the "
        f"first 32 greedy tokens identical; total run time {r['total_s']:.0f} s",
    ]


def _row_line(r: dict, base: dict | None, rows: list[dict]) -> str:
    s = r["spec"]
    if "error" in r:
        return f"| {s['row']} | failed: {r['error'].splitlines()[-1][:120]} |" + " |" * 10
    vs = f"{r['decode_tokens_per_s'] / base['decode_tokens_per_s']:.2f}x" if base else "-"
    pre = f"{base['prefill_ms'] / r['prefill_ms']:.2f}x" if base else "-"
    bits = 8 * r["linear_bytes"] / r["linear_params"]
    diff = f"{r['max_logit_diff']:.2e} (vs {r['vs']})" if "max_logit_diff" in r else "-"
    ok = "-"
    if s["kind"] in ("torchao", "mx-w4a8", "mx-w4a8-fused"):  # activations quantized: no bound
        ok = "n/a (activations quantized)"
    elif s["kind"] in ("mx-bf16", "mx-bf16-fused"):
        ok = "n/a (bf16 model)"
    elif "diff_over_bound" in r:
        ok = f"{r['diff_over_bound']:.2g}"
        if "correct" in r:
            ok += " ok" if r["correct"] else " **FAIL**"
    same = f"{r['same_tokens']}/{r['tokens_compared']}" if "same_tokens" in r else "-"
    return (
        f"| {s['row']} | {r['prefill_ms']:.0f} | {pre} | {r['decode_tokens_per_s']:.2f} | {vs} "
        f"| {r['linear_bytes'] / 2**20:.1f} MiB ({bits:.2f} b/param) "
        f"| {r['rss_model_kib'] / MIB:.0f} ({(r['rss_model_kib'] - r['rss_start_kib']) / MIB:.0f}) "
        f"| {r['rss_peak_kib'] / MIB:.0f} | {diff} | {ok} | {same} | {host_column(r, rows)} |"
    )


def _tables(r: dict) -> list[str]:
    lines = []
    for t in r["options"]["threads"]:
        rows = [x for x in r["rows"] if x["spec"]["threads"] == t]
        f32 = {
            same_env_key(x["spec"]): x
            for x in rows
            if x["spec"]["kind"] == "f32" and "error" not in x
        }
        lines += [
            "",
            f"## {t} thread(s)",
            "",
            "| row | prefill ms | prefill vs f32 | decode tok/s | decode vs f32 | linear weights "
            "| RSS MiB (over baseline) | peak RSS MiB | max abs logit diff | diff / bound "
            "| same tokens | host |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        lines += [_row_line(x, f32.get(same_env_key(x["spec"])), rows) for x in rows]
        for name, why in r["not_run"].items():
            lines.append(f"| {name} | not run: {why} |" + " |" * 10)
    return lines


def _targets(r: dict) -> list[str]:
    from mlir_mx_bench.models.llama.run import MODEL_TARGETS, machine_class

    cls = r.get("target_class") or machine_class()
    w = MODEL_TARGETS[cls]
    lines = [
        "",
        "## Targets",
        "",
        f"What mlir-mx aims for on this model on an {cls} machine (this one's class): "
        f"decode tokens/s of each MXFP4 row (f32 activations, and W4A8: activations "
        f"quantized to MXINT8 per call) at least {w['decode_f32']:g}x torch f32's and "
        f"{w['decode_bf16']:g}x torch bf16's, MXFP8's at least {w['mxfp8_f32']:g}x torch "
        f"f32's, the 128-token prefill at least {w['prefill_f32']:g}x torch f32's (W4A8: "
        f"{w['prefill_w4a8']:g}x), the linear weights of each MXFP4 row 4.25 bits per "
        "parameter (measured from the memory they reference), and the MXFP4 model's "
        "process RSS at most 0.35x the f32 model's. "
        + "; ".join(
            f"{c}: {v['decode_f32']:g}x / {v['decode_bf16']:g}x / "
            f"{v['mxfp8_f32']:g}x / {v['prefill_f32']:g}x ({v['prefill_w4a8']:g}x)"
            for c, v in MODEL_TARGETS.items()
        )
        + ".",
        "",
        "| threads | figure | value | target | met |",
        "|---|---|---|---|---|",
    ]
    for x in r["targets"]:
        value = "-" if x["value"] is None else f"{x['value']:.3f}"
        met = "-" if x["met"] is None else ("yes" if x["met"] else "no")
        lines.append(f"| {x['threads']} | {x['figure']} | {value} | {x['target']} | {met} |")
    return lines


def _notes(r: dict) -> list[str]:
    lines = ["", "## Notes", ""]
    for ref in r["references"]:
        if "error" in ref:
            lines.append(f"- {ref['spec']['row']}: failed: {ref['error']}")
    ao = next((x for x in r["rows"] if x["spec"]["kind"] == "torchao"), None)
    skipped = [name for name, _, _ in ROWS if name not in r["options"]["rows"]]
    if skipped:
        lines.append(f"- Rows not run in this run (`--rows`): {', '.join(skipped)}")
    timed = (
        f"its decode is timed over {ao['spec']['new_tokens']} tokens only (it is slow)"
        if ao
        else "its row was not run here"
    )
    lines.append(
        "- host: the share of the cores' FMA rate the row's process got, the lower of a 5 ms "
        "probe before its prefill timing and one after its decode, over the run's best probe "
        "at that thread count (a busy neighbour on the host slows it with no other process "
        "or steal shown here; docs/bench.md). `--busy` rows are low by design"
    )
    lines.append(
        "- torchao 0.18.0's MX inference path (`MXDynamicActivationMXWeightConfig`) has no "
        "weight-only mode: it quantizes the activations to MX too (per call, RCEIL scales, "
        "not the OCP FLOOR rule ours and the reference use), takes bf16 models only, and on "
        "the CPU runs `KernelPreference.EMULATED` (dequantize both operands to bf16, then "
        "a bf16 matmul); its CUTLASS/cuBLAS kernels need an NVIDIA SM100 GPU. So its logits "
        f"differ from the reference by the activation quantization (no bound applies), and {timed}."
    )
    for x in r["rows"]:
        if "summary" in x and x["spec"]["threads"] == r["options"]["threads"][0]:
            lines.append(
                f"- {x['spec']['row']}: `{x['summary'].splitlines()[0]}`, "
                f"converted in {x['convert_s']:.0f} s (mlir_mx.quantize, compiled)"
            )
    return lines


def _environment(r: dict) -> list[str]:
    """What each row's process ran in (workers.run_environment), one line per
    distinct environment."""
    seen: dict[str, list[str]] = {}
    for x in r["rows"]:
        e = x.get("environment")
        if e is None:
            continue
        keep = ("backend", "max_threads")
        par = "; ".join(p for p in e.get("torch_parallel", []) if any(k in p for k in keep))
        text = (
            f"variables {e['variables'] or 'none set'}; {e.get('cpus_allowed', e['cpus'])} "
            f"CPUs allowed; torch threads {e.get('torch_threads')} (inter-op "
            f"{e.get('torch_interop_threads')}); {par}"
        )
        seen.setdefault(text, []).append(f"{x['spec']['row']} ({x['spec']['threads']}t)")
    lines = ["", "## Environment", ""]
    lines += [f"- {text}: {', '.join(rows)}" for text, rows in seen.items()]
    return lines if seen else []


def _profile(r: dict) -> list[str]:
    """The per-token breakdown (--profile) of the rows that have one."""
    rows = [x for x in r["rows"] if "profile" in x]
    if not rows:
        return []
    lines = [
        "",
        "## Per-token breakdown (--profile)",
        "",
        "| threads | row | decode step ms (timed) | linears ms, hooks only | linear weights "
        "MiB | linears GB/s | profiled step ms | of which: linears | torch's other ops "
        "(ops/token) | Python and the rest |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for x in rows:
        p = x["profile"]
        gbs = "-" if p["linear_gb_per_s"] is None else f"{p['linear_gb_per_s']:.1f}"
        lines.append(
            f"| {x['spec']['threads']} | {x['spec']['row']} | {1e3 / x['decode_tokens_per_s']:.2f} "
            f"| {p['linear_ms']:.2f} ({p['linear_calls']} calls) | {p['linear_bytes'] / 2**20:.1f} "
            f"| {gbs} | {p['profiled_step_ms']:.2f} | {p['profiled_linear_ms']:.2f} "
            f"| {p['other_ops_ms']:.2f} ({p['other_ops']}) | {p['python_ms']:.2f} |"
        )
    method = " ".join(rows[0]["profile"]["method"].split())
    lines += ["", f"Method ({rows[0]['profile']['steps']} decode steps per pass): {method}"]
    return lines + _projections(rows)


def _projections(rows: list[dict]) -> list[str]:
    """The linears' time per projection (--profile, the hooks-only pass)."""
    rows = [x for x in rows if x["profile"].get("projections")]
    if not rows:
        return []
    lines = [
        "",
        "Linears per projection (the hooks-only pass; ms per token, the layers "
        "of one name together):",
        "",
        "| threads | row | projection | calls | ms | weights MiB | GB/s |",
        "|---|---|---|---|---|---|---|",
    ]
    for x in rows:
        for p in x["profile"]["projections"]:
            gbs = "-" if p["gb_per_s"] is None else f"{p['gb_per_s']:.1f}"
            lines.append(
                f"| {x['spec']['threads']} | {x['spec']['row']} | {p['name']} | {p['calls']} "
                f"| {p['ms']:.2f} | {p['bytes'] / 2**20:.1f} | {gbs} |"
            )
    return lines


def model_markdown(record: dict) -> str:
    """The markdown rendering of a model run."""
    lines = _header(record) + _tables(record) + _profile(record) + _environment(record)
    lines += _targets(record) + _notes(record)
    return "\n".join(lines) + "\n"

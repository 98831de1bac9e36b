"""``mx-bench --model``: a whole Llama through ``mlir_mx.torch``, end to end.

A ``transformers`` ``LlamaForCausalLM`` of TinyLlama-1.1B's shape (hidden
2048, intermediate 5632, 22 layers, 32 heads, 4 KV heads, vocab 32000; random
weights from a fixed seed, nothing downloaded; ``--layers`` shrinks it) runs a
128-token prompt, then 64 greedy tokens, as each row at each thread count:
torch f32, torch bf16, torchao's MX path, ours MXFP8 and ours MXFP4 (f32
activations, entering the products exactly) and ours MXFP4 with
``activations="i8"`` (W4A8: activations quantized to MXINT8 per call, the
integer dot units).  Each row is a process of its own (:mod:`mlir_mx_bench.models.llama.worker`), so its RSS is its
own.  Per row: prefill ms, decode tokens/s, the linear weights' bytes (from the
memory they reference), RSS, and the logits against the correctness reference
(``mlir_mx.torch.dequantize_``: the f32 model with each converted layer's
weight replaced by its dequantized MX weight) with the bound of
``mlir_mx.torch.logit_bound``; our rows must stay within it and give the same
first 32 greedy tokens.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np

from mlir_mx.host import default_thread_counts
from mlir_mx.numerics.formats import ELEMENT_FORMATS
from mlir_mx_bench.console import default_out_dir
from mlir_mx_bench.machine import cpu_sample, loadavg, other_load
from mlir_mx_bench.models.busy import busy_spec, busy_targets, run_busy_row
from mlir_mx_bench.models.workers import run_record, run_worker

__all__ = [
    "CHECKED_KINDS", "ModelOptions", "ROWS", "TARGET_ROWS", "run_model", "same_env_key", "targets"
]

#: (row name, worker kind, MX format); the reference a row is checked against
ROWS = (
    ("torch f32", "f32", None),
    ("torch bf16", "bf16", None),
    ("torchao MXFP4 (W+A, emulated)", "torchao", "f4E2M1FN"),
    ("ours MXFP8", "mx", "f8E4M3FN"),
    ("ours MXFP4", "mx", "f4E2M1FN"),
    # W4A8: activations quantized to MXINT8 per call (the integer dot units);
    # checked against the same reference, reported, not held to its bound
    # (the bound is for f32 activations).
    ("ours MXFP4, activations=i8", "mx-w4a8", "f4E2M1FN"),
    # quantize_(..., fuse=True): q/k/v and gate/up one kernel call each
    ("ours MXFP4, fused", "mx-fused", "f4E2M1FN"),
    ("ours MXFP4, activations=i8, fused", "mx-w4a8-fused", "f4E2M1FN"),
    # A bf16 model (model.to(bfloat16), then quantize_): bf16 inputs take the
    # bf16 kernels with no option (the exact path's bits on them); reported
    # beside torch bf16, not held to the f32 bound.
    ("ours MXFP4, bf16 model", "mx-bf16", "f4E2M1FN"),
    # The same with quantize_(..., fuse=True): one f32 copy of the input, one
    # AMX preparation and one kernel call for q/k/v and for gate/up (issue 51).
    ("ours MXFP4, bf16 model, fused", "mx-bf16-fused", "f4E2M1FN"),
)
#: The row kinds held to the reference's bound and greedy tokens.
CHECKED_KINDS = ("mx", "mx-fused")
NOT_RUN: dict[str, str] = {}
SAME_TOKENS = 32


class ModelOptions:
    """What a model run depends on (recorded in the results)."""

    def __init__(
        self,
        *,
        layers=22,
        threads=None,
        prompt=128,
        new_tokens=64,
        seed=0,
        prefill_samples=3,
        probes=4,
        torchao_tokens=4,
        command="",
        tag="model",
        out=None,
        config=None,
        rows=None,
        env_rows=(),
        profile=0,
        busy=(),
    ):
        #: thread counts (default: 1 and all cores, host.default_thread_counts)
        threads = default_thread_counts() if threads is None else threads
        self.layers, self.threads, self.prompt = layers, list(threads), prompt
        self.new_tokens, self.seed, self.prefill_samples = new_tokens, seed, prefill_samples
        self.probes, self.torchao_tokens, self.command = probes, torchao_tokens, command
        self.tag, self.out = tag, Path(out or default_out_dir())
        #: LlamaConfig fields over TinyLlama's (--quick: a tiny model)
        self.config = dict(config or {})
        #: the ROWS to run, by name (None: all)
        self.rows = list(rows) if rows is not None else [name for name, _, _ in ROWS]
        #: settings ({VAR: VALUE}) each run as separate, labelled rows (--env-row);
        #: every other row runs in this environment as it is
        self.env_rows = [dict(e) for e in env_rows]
        #: decode steps of the per-token breakdown (--profile; 0: none)
        self.profile = profile
        #: loads each run as separate, labelled rows (--busy; models.busy)
        self.busy = list(busy)

    def as_dict(self) -> dict:
        return {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(self).items()}


def _run_worker(spec: dict, tmp: Path, say) -> dict:
    module = "mlir_mx_bench.models.llama.worker"
    if spec.get("busy"):
        rec = run_busy_row(module, spec, tmp)
    else:
        rec = run_worker(module, spec, tmp, spec.get("env"))
    twin = rec.get("twin") or {}
    more = f" (second copy {twin['decode_tokens_per_s']:.2f} tok/s)" if "decode_tokens_per_s" in twin else ""
    say(f"    {spec['row']:<32} {_summary(rec)}{more}")
    return rec


def _summary(r: dict) -> str:
    if "error" in r:
        return f"failed: {r['error'].splitlines()[-1]}"
    if "prefill_ms" not in r:
        return f"reference ready ({r['wall_s']:.0f} s)"
    return (
        f"prefill {r['prefill_ms']:.0f} ms, decode {r['decode_tokens_per_s']:.2f} tok/s, "
        f"RSS {r['rss_model_kib'] / 1024:.0f} MiB ({r['wall_s']:.0f} s)"
    )


def _label(env: dict | None) -> str:
    return " ".join(f"{k}={v}" for k, v in (env or {}).items())


def _spec(
    opts: ModelOptions,
    tmp: Path,
    row: str,
    kind: str,
    fmt,
    threads: int,
    env: dict | None = None,
    index: int = 0,
) -> dict:
    name = f"{kind}-{fmt or 'none'}-{threads}t" + (f"-env{index}" if env else "")
    tokens = min(opts.new_tokens, opts.torchao_tokens) if kind == "torchao" else opts.new_tokens
    if kind == "reference":  # its greedy tokens are only compared, SAME_TOKENS of them
        tokens = min(opts.new_tokens, SAME_TOKENS)
    spec = dict(
        name=name,
        row=row,
        kind=kind,
        format=fmt,
        threads=threads,
        layers=opts.layers,
        prompt=opts.prompt,
        new_tokens=tokens,
        seed=opts.seed,
        out=str(tmp),
        prefill_samples=1 if kind == "torchao" else opts.prefill_samples,
        probes=opts.probes,
        config=opts.config,
        env=env,
        base_row=row if env else None,
        profile=opts.profile if kind not in ("torchao", "reference") else 0,
    )
    if env:
        spec["row"] = f"{row} [{_label(env)}]"
    return spec


def _check(rec: dict, refs: dict, tmp: Path) -> None:
    """Logit differences and token agreement against the row's reference."""
    fmt, kind = rec["spec"]["format"], rec["spec"]["kind"]
    if "error" in rec or fmt is None or fmt not in refs or "error" in refs[fmt]:
        return
    ref = refs[fmt]
    z = np.load(tmp / f"{rec['spec']['name']}-logits.npy")
    z_ref = np.load(tmp / f"{ref['spec']['name']}-logits.npy")
    bound = np.load(tmp / f"{ref['spec']['name']}-bound.npy")
    diff = np.abs(z.astype(np.float64) - z_ref)
    rec["vs"] = ref["spec"]["row"]
    rec["max_logit_diff"] = float(diff.max())
    rec["max_logit_ref"] = float(np.abs(z_ref).max())
    rec["max_bound"] = float(bound.max())
    rec["diff_over_bound"] = float((diff / bound).max())
    n = min(SAME_TOKENS, len(rec["tokens"]), len(ref["tokens"]))
    rec["same_tokens"] = int(np.argmin(np.r_[np.equal(rec["tokens"][:n], ref["tokens"][:n]), False]))
    rec["tokens_compared"] = n
    if kind in CHECKED_KINDS:
        rec["correct"] = rec["diff_over_bound"] <= 1.0 and rec["same_tokens"] == n


def same_env_key(spec: dict) -> tuple:
    """Rows run at one thread count in one environment share this key."""
    return spec["threads"], _label(spec.get("env"))


def _bf16_vs_f32(rows: list[dict], tmp: Path) -> None:
    f32 = {
        same_env_key(r["spec"]): r for r in rows if r["spec"]["kind"] == "f32" and "error" not in r
    }
    for r in rows:
        base = f32.get(same_env_key(r["spec"]))
        if r["spec"]["kind"] == "bf16" and "error" not in r and base is not None:
            z = np.load(tmp / f"{r['spec']['name']}-logits.npy")
            z32 = np.load(tmp / f"{base['spec']['name']}-logits.npy")
            r["vs"], r["max_logit_diff"] = "torch f32", float(np.abs(z - z32).max())


def _cpu_sample():
    """:func:`cpu_sample` with our row processes counted as our own (os.times'
    children: the waited-for workers)."""
    s, t = cpu_sample(), os.times()
    return None if s is None else replace(s, own=s.own + t.children_user + t.children_system)


def run_model(opts: ModelOptions, say: Callable[[str], None]) -> dict:
    """Run every row at every thread count; returns the record."""
    t_start, cpu0 = time.perf_counter(), _cpu_sample()
    record = run_record("mx-bench --model", opts, not_run=NOT_RUN)
    say(
        f"mx-bench --model: Llama of TinyLlama-1.1B's shape, {opts.layers} layers, "
        f"threads {opts.threads}, load average {record['loadavg_start']}"
    )
    with tempfile.TemporaryDirectory(prefix="mx-bench-model-") as tmp_:
        tmp = Path(tmp_)
        say("  the correctness references (f32, dequantized MX weights) and their bounds:")
        refs = {}
        for fmt in dict.fromkeys(f for name, _, f in ROWS if f and name in opts.rows):
            label = ELEMENT_FORMATS[fmt].mx_name
            spec = _spec(opts, tmp, f"reference {label}", "reference", fmt, max(opts.threads))
            refs[fmt] = _run_worker(spec, tmp, say)
        rows = []
        for t in opts.threads:
            say(f"  {t} thread(s):")
            for i, env in enumerate([None, *opts.env_rows]):
                for row, kind, fmt in (r for r in ROWS if r[0] in opts.rows):
                    spec = _spec(opts, tmp, row, kind, fmt, t, env, i)
                    rows.append(_run_worker(spec, tmp, say))
                    _check(rows[-1], refs, tmp)
            for load in opts.busy:  # the same rows with a load beside them (--busy)
                for i, env in enumerate([None, *opts.env_rows]):  # and each --env-row
                    for row, kind, fmt in (r for r in ROWS if r[0] in opts.rows):
                        spec = busy_spec(_spec(opts, tmp, row, kind, fmt, t, env, i), load)
                        rows.append(_run_worker(spec, tmp, say))
                        _check(rows[-1], refs, tmp)
        _bf16_vs_f32(rows, tmp)
    record.update(
        references=list(refs.values()),
        rows=rows,
        loadavg_end=loadavg(),
        cpu=other_load(cpu0, _cpu_sample()),
        total_s=time.perf_counter() - t_start,
    )
    record["target_class"] = machine_class()
    record["targets"] = targets(rows, record["target_class"])
    return record


#: The rows held to the speed and memory targets: (row, what its figures say
#: about the activations).
TARGET_ROWS = (
    ("ours MXFP4", "MXFP4 (f32 activations)"),
    ("ours MXFP4, activations=i8", "MXFP4 W4A8 (activations quantized to MXINT8 per call)"),
)


def _ratio(a, b, key, inverse=False):
    if a is None or b is None:
        return None
    return b[key] / a[key] if inverse else a[key] / b[key]


#: The speed targets per machine class (issue 27): each MXFP4 row's decode
#: tokens/s over torch f32's and bf16's, MXFP8's over torch f32's, and the
#: 128-token prefill of the f32-activation MXFP4 row and of the W4A8 row over
#: torch f32's.
MODEL_TARGETS = {
    "AVX2": {
        "decode_f32": 3.0,
        "decode_bf16": 2.0,
        "mxfp8_f32": 2.0,
        "prefill_f32": 1.0,
        "prefill_w4a8": 1.0,
    },
    "AVX-512 + VNNI": {
        "decode_f32": 4.0,
        "decode_bf16": 3.0,
        "mxfp8_f32": 2.5,
        "prefill_f32": 1.5,
        "prefill_w4a8": 2.0,
    },
}


def machine_class(level: str | None = None) -> str:
    """The :data:`MODEL_TARGETS` class of an ISA level (default: this host's):
    AVX-512 with VNNI, else AVX2 (AVX-VNNI included: 256-bit dots)."""
    if level is None:
        from mlir_mx.host import isa_level

        level = isa_level()
    return "AVX-512 + VNNI" if level in ("AVX512-VNNI", "AVX512-BF16") else "AVX2"


def targets(rows: list[dict], cls: str | None = None) -> list[dict]:
    """The targets, per thread count, from the rows, for machine class ``cls``
    (default: this host's, :func:`machine_class`; :data:`MODEL_TARGETS`):
    decode tokens/s of each MXFP4 row (:data:`TARGET_ROWS`) and of MXFP8 over
    torch f32's and bf16's, the 128-token prefill over torch f32's, each MXFP4
    row's linear weights 4.25 bits per parameter, and the f32-activation
    MXFP4 row's RSS <= 0.35x the f32 model's."""
    want = MODEL_TARGETS[cls or machine_class()]
    by = {(r["spec"]["row"], r["spec"]["threads"]): r for r in rows if "prefill_ms" in r}
    out = []
    for t in sorted({r["spec"]["threads"] for r in rows}):
        g = {name: by.get((name, t)) for name, _, _ in ROWS}
        out += [dict(threads=t, **x) for x in _targets_of(g, want)]
        out += busy_targets(rows, t, by)
        for r in rows:  # our rows in the default environment against each --env-row
            s = r["spec"]
            if s["threads"] == t and s.get("env") and s["kind"].startswith("mx"):
                base = g.get(s["base_row"])
                value = _ratio(base, by.get((s["row"], t)), "decode_tokens_per_s")
                out.append(
                    dict(
                        threads=t,
                        figure=f"decode tokens/s, {s['base_row']}: default "
                        f"environment / {_label(s['env'])}",
                        value=value,
                        target=">= 0.9",
                        met=None if value is None else value >= 0.9,
                    )
                )
    return out


def _target(figure: str, value, want: float) -> dict:
    met = None if value is None else value >= want
    return dict(figure=figure, value=value, target=f">= {want}", met=met)


def _targets_of(g: dict, want: dict) -> list[dict]:
    """The targets ``want`` of one thread count's rows ``g`` (row name -> record or None)."""
    f32, bf16, tps = g["torch f32"], g["torch bf16"], "decode_tokens_per_s"
    out = []
    for row, label in TARGET_ROWS:
        r = g.get(row)
        prefill = want["prefill_w4a8" if "W4A8" in label else "prefill_f32"]
        out += [
            _target(
                f"decode tokens/s, {label} / torch f32", _ratio(r, f32, tps), want["decode_f32"]
            ),
            _target(
                f"decode tokens/s, {label} / torch bf16", _ratio(r, bf16, tps), want["decode_bf16"]
            ),
            _target(
                f"128-token prefill, torch f32 time / {label} time",
                _ratio(r, f32, "prefill_ms", True),
                prefill,
            ),
        ]
        if r is not None:
            bits = 8 * r["linear_bytes"] / r["linear_params"]
            out.append(
                dict(
                    figure=f"linear weights, {label}, bits per parameter",
                    value=bits,
                    target="4.25",
                    met=abs(bits - 4.25) < 1e-9,
                )
            )
    fp8 = _ratio(g["ours MXFP8"], f32, tps)
    out.append(
        _target("decode tokens/s, MXFP8 (f32 activations) / torch f32", fp8, want["mxfp8_f32"])
    )
    fp4 = g["ours MXFP4"]
    if fp4 is not None and f32 is not None:
        for key, what in (
            ("rss_model_kib", "process RSS"),
            ("model_rss_kib", "RSS over the baseline"),
        ):
            value = _rss(fp4, key) / _rss(f32, key)
            out.append(
                dict(
                    figure=f"{what} of the converted model, MXFP4 (f32 activations) / f32",
                    value=value,
                    target="<= 0.35",
                    met=value <= 0.35,
                )
            )
    return out


def _rss(r: dict, key: str) -> float:
    if key == "model_rss_kib":
        return r["rss_model_kib"] - r["rss_start_kib"]
    return r[key]

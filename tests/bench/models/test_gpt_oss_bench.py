"""``mx-bench --model gpt-oss``: its command line and, marked slow, a quick run."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytest.importorskip("torch", reason="torch not installed (pip install 'mlir-mx[torch]')")
pytest.importorskip("transformers", reason="transformers not installed (pip install 'mlir-mx[test]')")

from mlir_mx_bench.cli import main  # noqa: E402
from mlir_mx_bench.models.gpt_oss.run import gpt_oss_markdown  # noqa: E402


def test_gpt_oss_arguments_are_checked(capsys):
    pytest.importorskip("accelerate", reason="accelerate not installed (pip install 'mlir-mx[test]')")
    assert main(["--model", "gpt-oss", "--layers", "0"]) == 2
    assert "--layers: must be positive" in capsys.readouterr().err
    assert main(["--model", "gpt-oss", "--rows", "f32"]) == 2
    assert "--rows is not used by --model gpt-oss" in capsys.readouterr().err
    assert main(["--model", "gpt-oss", "--profile"]) == 2
    assert "--profile is not used by --model gpt-oss" in capsys.readouterr().err
    assert main(["--model", "mixtral"]) == 2
    assert "invalid choice" in capsys.readouterr().err
    assert main(["--model", "gpt-oss", "--busy", "idle"]) == 2
    assert "--busy: expected some of spin,self, got 'idle'" in capsys.readouterr().err


def test_busy_rows_are_planned_and_kept_apart(tmp_path, monkeypatch):
    """``--busy``: the anchor and our target rows run again with the load
    beside them, at each thread count, labelled; the plain rows' targets (issue
    28) read the plain rows only, and each busy row at 2 threads is held to its
    1-thread MoE speed under the same load (issue 51)."""
    import mlir_mx_bench.models.gpt_oss.run as run
    import mlir_mx_bench.models.gpt_oss.worker as worker

    ran = []

    def fake(spec, tmp, say):
        ran.append(spec)
        if spec["kind"].endswith("f32"):  # no reference logits to check against here
            return {"spec": spec, "error": "exit 1: not run"}
        fast = 0.5 if spec["kind"].startswith("mx") else 1.0
        slow = 2.0 if spec.get("busy") and spec["threads"] == 2 and fast < 1 else 1.0  # ours, busy
        return dict(spec=spec, load_s=1.0, expert_bytes=17, expert_weights=32, rss_model_kib=2048,
                    rss_start_kib=1024, prefill_ms=10.0, decode_tokens_per_s=1.0,
                    moe_prefill_ms=40.0 * slow * fast, moe_decode_ms=4.0 * fast)  # fmt: skip

    monkeypatch.setattr(run, "_run_worker", fake)
    monkeypatch.setattr(worker, "write_checkpoint", lambda *a: 1)
    opts = run.GptOssOptions(layers=1, threads=[1, 2], busy=["spin"], out=tmp_path)
    rec = run.run_gpt_oss(opts, lambda s: None)
    busy = [s for s in ran if s.get("busy")]
    assert [(s["kind"], s["threads"]) for s in busy] == [(k, t) for t in (1, 2) for k in run.BUSY_ROWS]
    assert all(s["row"].endswith(" [busy spin]") and not s["bound"] and not s["logits"] for s in busy)
    rec.update(_HEADER)
    text = gpt_oss_markdown(rec)
    one, two = text.split("## 2 thread(s)")
    # the plain rows' targets: ours at half transformers' MoE time, busy rows apart
    assert "- MoE prefill speed vs transformers bf16: 2.00x (target >= 1.5x): met" in two
    assert "Targets (issue 51)" not in one
    assert "- MoE prefill speed, ours MXFP4 [busy spin]: 2 threads / 1 thread: 0.500x " \
        "(target >= 1.0): NOT met" in two
    assert "- MoE decode speed, ours MXFP4 W4A8 [busy spin]: 2 threads / 1 thread: 1.000x " \
        "(target >= 1.0): met" in two
    assert "| transformers bf16 [busy spin] |" in two and "transformers bf16 [busy spin]: 2" not in two


#: A run record's fields other than its rows (gpt_oss_markdown's input).
_HEADER = {
    "tag": "t", "date": "d", "command": "c", "loadavg_start": 1, "loadavg_end": 1, "env": {},
    "checkpoint_bytes": 2**30, "options": {"layers": 1, "prompt": 8, "prefill_samples": 1,
                                           "new_tokens": 4},
    "machine": {"cpu": "x", "cpus": 2, "platform": "p", "cpu_features": {"avx2": True},
                "versions": {"torch": "2"}},
}


def test_markdown_reports_bits_and_the_check():
    row = dict(load_s=1.0, expert_bytes=17, expert_weights=32, rss_model_kib=3072, rss_start_kib=1024,
               prefill_ms=5.0, decode_tokens_per_s=2.0, moe_prefill_ms=2.5, moe_decode_ms=0.25)  # fmt: skip
    rec = {
        **_HEADER,
        "rows": [
            {**row, "spec": {"row": "transformers bf16", "kind": "hf-bf16", "threads": 1},
             "decode_tokens_per_s": 1.0, "expert_bytes": 64},
            {**row, "spec": {"row": "ours MXFP4, f32 rest", "kind": "mx-f32", "threads": 1},
             "max_logit_diff": 1e-6, "diff_over_bound": 0.01, "same_tokens": 4, "tokens_compared": 4,
             "host_gflops": [80.0, 100.0]},
            {"spec": {"row": "ours MXFP4", "kind": "mx-bf16", "threads": 1}, "error": "exit 1: boom"},
        ],
    }  # fmt: skip
    text = gpt_oss_markdown(rec)
    assert ("(4.25) | 2 | 5 | 2.00 | 2.00x | 2.5 | 0.2 | max diff 1.00e-06 = 0.010 of the bound; "
            "4/4 tokens | 80% |") in text  # host: 80 of the run's best 100 GFLOP/s
    assert "2.5 | 0.2 | - | - |" in text  # no probes in the record: no host share
    assert "(16.00)" in text and "| ours MXFP4 | failed: exit 1: boom |" in text
    assert "## Published, not measured here" in text and "PR #19738" in text and "ik_llama.cpp" in text
    # ours failed at this thread count: the targets say so instead of a ratio
    assert "- MoE decode speed vs transformers bf16: not measured (a row failed" in text


def test_markdown_computes_the_targets_per_thread_count():
    def row(kind, threads, **fig):
        base = dict(load_s=10.0, expert_bytes=64, expert_weights=32, rss_model_kib=5120,
                    rss_start_kib=1024, prefill_ms=100.0, decode_tokens_per_s=1.0,
                    moe_prefill_ms=60.0, moe_decode_ms=8.0)  # fmt: skip
        return {**base, **fig, "spec": {"row": kind, "kind": kind, "threads": threads}}

    rec = {
        **_HEADER,
        "rows": [
            row("hf-f32", 1, moe_decode_ms=16.0, expert_bytes=128),
            row("hf-bf16", 1),
            row("mx-bf16", 1, moe_decode_ms=2.0, moe_prefill_ms=30.0, load_s=4.0,
                rss_model_kib=2048, expert_bytes=17),
            row("mx-i8", 1, moe_decode_ms=1.0, moe_prefill_ms=20.0, load_s=4.0,
                rss_model_kib=2048, expert_bytes=17),
            row("hf-f32", 2, expert_bytes=128),
            row("hf-bf16", 2),
            row("mx-bf16", 2, moe_decode_ms=4.0, moe_prefill_ms=48.0, load_s=6.0,
                rss_model_kib=3072, expert_bytes=17),
        ],
    }  # fmt: skip
    one, two = gpt_oss_markdown(rec).split("## 2 thread(s)")
    exact, w4a8 = one.split("ours = `ours MXFP4 W4A8`")
    assert "- MoE decode speed vs transformers bf16: 4.00x (target >= 3.0x): met" in exact
    assert "- MoE decode speed vs transformers f32: 8.00x (target >= 5.0x): met" in exact
    assert "- MoE prefill speed vs transformers bf16: 2.00x (target >= 1.5x): met" in exact
    assert "- RSS over baseline vs transformers bf16: 0.25x (target <= 0.4x): met" in exact
    assert "- load time vs transformers bf16: 0.40x (target <= 0.5x): met" in exact
    assert "- MoE decode speed vs transformers f32: 16.00x (target >= 5.0x): met" in w4a8
    assert "- MoE prefill speed vs transformers bf16: 3.00x (target >= 1.5x): met" in w4a8
    assert "- expert weights in memory: 4.25 bits/weight (target 4.25)" in one
    assert "- MoE decode speed vs transformers bf16: 2.00x (target >= 3.0x): NOT met" in two
    assert "- MoE prefill speed vs transformers bf16: 1.25x (target >= 1.5x): NOT met" in two
    assert "- RSS over baseline vs transformers bf16: 0.50x (target <= 0.4x): NOT met" in two
    assert "- load time vs transformers bf16: 0.60x (target <= 0.5x): NOT met" in two
    # no W4A8 row at 2 threads: said, not skipped silently
    assert "ours = `ours MXFP4 W4A8` (MXINT8 activations):\n\n- MoE decode speed vs transformers " \
        "bf16: not measured" in two


def test_the_moe_clock_times_each_model_call_in_its_mlp_blocks():
    """MoEClock adds each layer's ``mlp`` time (router and experts) to the
    model call it ran in, and nothing else: a tiny gpt-oss whose experts sleep
    10 ms (inside the clock) and whose attention sleeps 200 ms (outside it).
    Only the lower bound is a time a correct clock must reach; the upper one
    is the least a clock that counted one attention could read (its 200 ms
    sleep over the experts' 20 ms): a correct clock's call was 74 ms on a
    2-core CI-like run and 200.3 ms once on a loaded host (session 65), so
    the bound is that least value, not 200 ms (the untimed first call takes
    the one-time costs)."""
    import time

    import torch
    from transformers import GptOssConfig, GptOssForCausalLM

    from mlir_mx_bench.models.gpt_oss.worker import MoEClock

    cfg = GptOssConfig(hidden_size=64, intermediate_size=64, num_local_experts=4,
                       num_experts_per_tok=2, num_attention_heads=4, num_key_value_heads=2,
                       head_dim=16, vocab_size=128, num_hidden_layers=2)  # fmt: skip
    model = GptOssForCausalLM(cfg).eval()
    with torch.inference_mode():  # the first call's one-time costs (lazy imports, torch's
        model(torch.tensor([[1, 2, 3]]))  # first ops) before the timed calls: one CI run's took 184 ms
    for layer in model.model.layers:
        layer.mlp.experts.register_forward_pre_hook(lambda *_: time.sleep(0.01))
        layer.self_attn.register_forward_pre_hook(lambda *_: time.sleep(0.2))
    clock = MoEClock(model)
    with torch.inference_mode():
        model(torch.tensor([[1, 2, 3]]))
        model(torch.tensor([[4]]))
    assert len(clock.calls) == 2
    assert all(0.02 <= c < 0.02 + 0.2 for c in clock.calls), clock.calls  # 2 layers x 10 ms
    clock.reset()
    assert clock.calls == []
    clock.remove()
    with torch.inference_mode():
        model(torch.tensor([[5]]))
    assert clock.calls == []  # removed: nothing more counted


@pytest.mark.slow
def test_quick_gpt_oss_run_writes_results(tmp_path):
    pytest.importorskip("accelerate", reason="accelerate not installed (pip install 'mlir-mx[test]')")
    proc = subprocess.run(
        [sys.executable, "-m", "mlir_mx_bench.cli", "--model", "gpt-oss", "--quick", "--threads",
         "1", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=1200,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    rec = json.loads(next(tmp_path.glob("*.json")).read_text())
    (checked,) = [r for r in rec["rows"] if "correct" in r]
    assert checked["correct"] and checked["spec"]["kind"] == "mx-f32"

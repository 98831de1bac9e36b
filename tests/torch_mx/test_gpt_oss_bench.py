"""``mx-bench --model gpt-oss``: its command line and, marked slow, a quick run."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytest.importorskip("torch", reason="torch not installed (pip install 'mlir-mx[torch]')")
pytest.importorskip("transformers", reason="transformers not installed (pip install 'mlir-mx[test]')")

from mlir_mx_bench.cli import main  # noqa: E402
from mlir_mx_bench.gpt_oss import gpt_oss_markdown  # noqa: E402


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
               prefill_ms=5.0, decode_tokens_per_s=2.0)  # fmt: skip
    rec = {
        **_HEADER,
        "rows": [
            {**row, "spec": {"row": "transformers bf16", "kind": "hf-bf16", "threads": 1},
             "decode_tokens_per_s": 1.0, "expert_bytes": 64},
            {**row, "spec": {"row": "ours MXFP4, f32 rest", "kind": "mx-f32", "threads": 1},
             "max_logit_diff": 1e-6, "diff_over_bound": 0.01, "same_tokens": 4, "tokens_compared": 4},
            {"spec": {"row": "ours MXFP4", "kind": "mx-bf16", "threads": 1}, "error": "exit 1: boom"},
        ],
    }  # fmt: skip
    text = gpt_oss_markdown(rec)
    assert "(4.25) | 2 | 5 | 2.00 | 2.00x | max diff 1.00e-06 = 0.010 of the bound; 4/4 tokens |" in text
    assert "(16.00)" in text and "| ours MXFP4 | failed: exit 1: boom |" in text
    assert "## Published, not measured here" in text and "PR #19738" in text and "ik_llama.cpp" in text
    # ours failed at this thread count: the targets say so instead of a ratio
    assert "- decode tok/s vs transformers bf16: not measured (a row failed)" in text


def test_markdown_computes_the_targets_per_thread_count():
    def row(kind, threads, **fig):
        base = dict(load_s=10.0, expert_bytes=64, expert_weights=32, rss_model_kib=5120,
                    rss_start_kib=1024, prefill_ms=100.0, decode_tokens_per_s=1.0)  # fmt: skip
        return {**base, **fig, "spec": {"row": kind, "kind": kind, "threads": threads}}

    rec = {
        **_HEADER,
        "rows": [
            row("hf-f32", 1, decode_tokens_per_s=0.5, expert_bytes=128),
            row("hf-bf16", 1),
            row("mx-bf16", 1, decode_tokens_per_s=3.5, prefill_ms=50.0, load_s=4.0,
                rss_model_kib=2048, expert_bytes=17),
            row("hf-f32", 2, expert_bytes=128),
            row("hf-bf16", 2),
            row("mx-bf16", 2, decode_tokens_per_s=2.0, prefill_ms=80.0, load_s=6.0,
                rss_model_kib=3072, expert_bytes=17),
        ],
    }  # fmt: skip
    one, two = gpt_oss_markdown(rec).split("## 2 thread(s)")
    assert "- decode tok/s vs transformers bf16: 3.50x (target >= 3.0x): met" in one
    assert "- decode tok/s vs transformers f32: 7.00x (target >= 5.0x): met" in one
    assert "- prefill speed vs transformers bf16: 2.00x (target >= 1.5x): met" in one
    assert "- RSS over baseline vs transformers bf16: 0.25x (target <= 0.4x): met" in one
    assert "- load time vs transformers bf16: 0.40x (target <= 0.5x): met" in one
    assert "- expert weights in memory: 4.25 bits/weight (target 4.25)" in one
    assert "- decode tok/s vs transformers bf16: 2.00x (target >= 3.0x): NOT met" in two
    assert "- prefill speed vs transformers bf16: 1.25x (target >= 1.5x): NOT met" in two
    assert "- RSS over baseline vs transformers bf16: 0.50x (target <= 0.4x): NOT met" in two
    assert "- load time vs transformers bf16: 0.60x (target <= 0.5x): NOT met" in two


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

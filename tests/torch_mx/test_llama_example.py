"""examples/llama_mx.py runs on a toy config and its checks pass."""

from __future__ import annotations

import re
import runpy
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="torch not installed (pip install 'mlir-mx[test]')")
pytest.importorskip("transformers", reason="transformers not installed (pip install 'mlir-mx[test]')")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "llama_mx.py"


def test_llama_example_checks_pass(tmp_path, capsys):
    main = runpy.run_path(str(EXAMPLE), run_name="llama_mx")["main"]
    saved = tmp_path / "saved"
    argv = ["--tiny", "--layers", "2", "--prompt", "16", "--tokens", "32", "--threads", "1",
            "--check", "--save", str(saved)]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "quantize_: 15 nn.Linear layers -> MXLinear (f4E2M1FN, block 32)" in out
    assert "4.25 bits/weight" in out
    assert re.search(r"^quantize_ [0-9.]+ s, compile [0-9.]+ s \(not timed below\)$", out, re.MULTILINE)
    assert re.search(r"^prefill: 16 tokens in [0-9.]+ s: [0-9.]+ tokens/s$", out, re.MULTILINE)
    assert re.search(r"^decode: 31 tokens in [0-9.]+ s: [0-9.]+ tokens/s", out, re.MULTILINE)
    assert "first 32 greedy tokens equal to the reference's: yes" in out
    assert f"saved to {saved}; reloaded, the same tokens: yes" in out
    assert (saved / "config.json").is_file()


def test_llama_example_with_one_token(capsys):
    """One token: a prefill and no decode step (the figures say so)."""
    main = runpy.run_path(str(EXAMPLE), run_name="llama_mx")["main"]
    assert main(["--tiny", "--layers", "1", "--prompt", "4", "--tokens", "1", "--threads", "1"]) == 0
    out = capsys.readouterr().out
    assert "1 greedy tokens" in out and "decode: no token after the first" in out


def test_llama_example_with_no_new_tokens(capsys):
    """--tokens 0 hung after the prefill (greedy looped for ever; issue 29)."""
    main = runpy.run_path(str(EXAMPLE), run_name="llama_mx")["main"]
    assert main(["--tiny", "--layers", "1", "--prompt", "4", "--tokens", "0", "--threads", "1"]) == 0
    assert "0 greedy tokens" in capsys.readouterr().out

"""``mx-bench --emulate avx2``: every library capped at AVX2, checked by what
each reports once loaded; the switches are set before anything loads (a child
process), and a run whose ggml build is wider skips ggml's rows with the reason."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from mlir_mx import host
from mlir_mx_bench import emulate, ggml_baseline
from mlir_mx_bench.cli import _parse, main

pytestmark = pytest.mark.skipif(
    host.host_arch() != "x86_64", reason="--emulate avx2 caps x86 libraries (an x86-64 host only)"
)


@pytest.fixture(autouse=True)
def _user_data_home(tmp_path, monkeypatch):
    """The default --out (a user folder, created when the options are parsed)
    is a temporary one here."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))


def test_the_options_are_checked_before_the_child_runs(capsys):
    parsed = _parse(["--emulate", "avx2", "--quick", "--threads", "1"])
    assert isinstance(parsed, emulate.Reexec) and parsed.level == "avx2"
    assert parsed.argv == ["--emulate", "avx2", "--quick", "--threads", "1"]
    # a bad command line is one usage error in this process, not a child's
    assert main(["--emulate", "avx2", "--threads", "0"]) == 2
    assert "--threads: values must be positive" in capsys.readouterr().err
    assert main(["--emulate", "sse"]) == 2
    assert "invalid choice: 'sse'" in capsys.readouterr().err


def test_inside_the_child_the_options_are_the_run_itself(monkeypatch):
    monkeypatch.setenv(emulate.MARK, "avx2")
    opts, _quiet = _parse(["--emulate", "avx2", "--quick", "--threads", "1"])
    assert opts.threads == [1] and emulate.active() == "avx2"
    assert emulate.baseline_level() == "AVX2"
    monkeypatch.setenv(emulate.MARK, "avx9")  # not an emulation: none active
    assert emulate.active() is None and emulate.baseline_level() is None


def test_ggml_rows_need_a_build_no_wider_than_the_emulated_level(monkeypatch):
    monkeypatch.setattr(ggml_baseline, "_loadable", lambda: None)
    monkeypatch.setattr(ggml_baseline, "ggml_isa", lambda: "AVX512-VNNI")
    assert ggml_baseline.ggml_available() is None  # no emulation: any build runs
    monkeypatch.setenv(emulate.MARK, "avx2")
    why = ggml_baseline.ggml_available()
    assert "built for AVX512-VNNI, wider than the emulated AVX2" in why and "docs/bench.md" in why
    for narrower in ("AVX2", "AVX", "SSE"):
        monkeypatch.setattr(ggml_baseline, "ggml_isa", lambda n=narrower: n)
        assert ggml_baseline.ggml_available() is None, narrower
    monkeypatch.setattr(ggml_baseline, "ggml_isa", lambda: "AVX-VNNI")
    assert "wider than the emulated AVX2" in ggml_baseline.ggml_available()
    # not installed stays the reason, whatever the emulation
    monkeypatch.setattr(ggml_baseline, "_loadable", lambda: "ggml-python is not installed")
    assert ggml_baseline.ggml_available() == "ggml-python is not installed"


def test_torch_bf16_counts_as_emulated_when_torch_is_capped(monkeypatch):
    from mlir_mx_bench.baselines import torch_bf16_emulated

    monkeypatch.setenv(emulate.MARK, "avx2")
    assert torch_bf16_emulated() == "torch is capped at AVX2 (--emulate): no bf16 dot unit"


@pytest.mark.skipif(not host.has_features("avx2"), reason="the CPU lacks AVX2: nothing to emulate")
def test_a_quick_emulated_run_records_what_each_library_ran(tmp_path):
    """The child sets every switch before the libraries load: numpy's
    OpenBLAS reports its Haswell kernels, torch its AVX2 capability, our
    kernels the AVX2 level; the report says so and what still differs."""
    proc = subprocess.run(
        [sys.executable, "-m", "mlir_mx_bench.cli", "--emulate", "avx2", "--quick", "--shapes",
         "1x64x128", "--threads", "1", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "--emulate avx2: running again with" in proc.stdout
    [js] = tmp_path.glob("mx-bench-*.json")
    m = json.loads(js.read_text())["machine"]
    assert m["isa_level"] == "AVX2" and m["isa_level_baselines"] == "AVX2"
    assert m["emulated"]["variables"] == emulate.EMULATIONS["avx2"][1]
    libs = m["emulated"]["libraries"]
    for name, arch in libs.items():
        if name.startswith("numpy openblas"):
            assert arch == "Haswell", libs
        if name == "torch":
            assert arch in ("AVX2", "DEFAULT"), libs
    text = next(tmp_path.glob("mx-bench-*.md")).read_text()
    assert "**Emulated AVX2** (`--emulate`)" in text and "What differs:" in text
    assert "the baselines AVX2 (capped by --emulate, below)" in text

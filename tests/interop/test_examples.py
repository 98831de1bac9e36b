"""The GGUF round-trip example (examples/gguf_roundtrip.py) runs and its checks pass."""

import runpy
from pathlib import Path

import pytest

pytest.importorskip("gguf", reason="the GGUF example needs the gguf package (mlir-mx[gguf])")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "gguf_roundtrip.py"


@pytest.fixture(scope="module")
def example():
    return runpy.run_path(str(EXAMPLE), run_name="gguf_roundtrip")


def test_example_round_trip_passes(example, tmp_path, capsys):
    out = tmp_path / "w.gguf"
    assert example["main"](["--out", str(out), "--shape", "64", "256", "--seed", "3"]) == 0
    text = capsys.readouterr().out
    assert out.stat().st_size > 64 * 256 // 2
    assert "read back == quantize(x) bit for bit: yes" in text
    assert "ggml decoder == dequantize:           yes" in text
    assert "B = W^T (axis 0) == quantize(x.T):    yes" in text
    assert "(4.25 bits per element)" in text


def test_example_rejects_a_bad_shape(example, capsys):
    with pytest.raises(SystemExit) as e:
        example["main"](["--shape", "4", "33"])
    assert e.value.code == 2
    assert "N_IN a positive multiple of 32" in capsys.readouterr().err


MLP = Path(__file__).resolve().parents[2] / "examples" / "mlp_mxfp4.py"


def test_mlp_example_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MLIR_MX_CACHE_DIR", str(tmp_path / "cache"))
    mod = runpy.run_path(str(MLP), run_name="mlp_mxfp4")
    assert mod["main"](["--dims", "64", "128", "--tokens", "1", "20", "--threads", "2"]) == 0
    text = capsys.readouterr().out
    assert "round trip bit-exact: yes" in text
    assert "4.250 bits per weight" in text
    assert "M =    1:" in text and "M =   20:" in text

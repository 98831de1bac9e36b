"""mlir_mx.torch warns once for a torch outside the tested range, which is
the range the ``torch`` extra of pyproject.toml pins."""

import re
import warnings
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="torch not installed (pip install 'mlir-mx[test]')")

from mlir_mx.torch import versions  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def fresh(monkeypatch):
    monkeypatch.setattr(versions, "_warned", set())


@pytest.mark.parametrize("version", ["2.13.0", "2.13.0+cpu", "2.13.1+cu130", "2.13.0a0+git1234"])
def test_a_tested_torch_does_not_warn(version, fresh, monkeypatch):
    monkeypatch.setattr(torch, "__version__", version)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        versions.warn_untested_torch()


@pytest.mark.parametrize("version", ["2.12.1", "2.14.1+cu130", "2.15.0.dev20270101", "3.0.0+cu140", "nightly"])
def test_an_untested_torch_warns_once_with_what_to_install(version, fresh, monkeypatch):
    monkeypatch.setattr(torch, "__version__", version)
    with pytest.warns(versions.UntestedTorchWarning) as got:
        versions.warn_untested_torch()
        versions.warn_untested_torch()  # the second call is silent
    assert len(got) == 1
    text = str(got[0].message)
    assert text.startswith(f"mlir_mx.torch: torch {version} is untested: mlir-mx is tested "
                           "with torch 2.13 (pip install 'mlir-mx[torch]' installs one; "
                           "CPU-only: pip install torch==2.13.0 --index-url "
                           "https://download.pytorch.org/whl/cpu)")  # fmt: skip


def test_the_tested_range_is_the_one_the_torch_extra_pins():
    text = (ROOT / "pyproject.toml").read_text()
    extra = re.search(r"^torch = \[(.*?)\]", text, re.M | re.S)[1]
    pin = re.search(r'"torch>=(\d+)\.(\d+),<(\d+)\.(\d+)"', extra)
    lo, hi = (int(pin[1]), int(pin[2])), (int(pin[3]), int(pin[4]))
    assert versions.TESTED_TORCH == (lo, (hi[0], hi[1] - 1))
    assert '"accelerate>=' in extra  # transformers loads MXFP4 checkpoints on a CPU with it
    test_pin = re.search(r'"torch==(\d+)\.(\d+)\.\d+"', text)  # the test extra's torch
    assert lo <= (int(test_pin[1]), int(test_pin[2])) <= versions.TESTED_TORCH[1]


def test_importing_mlir_mx_torch_under_an_untested_torch_warns_once():
    import subprocess
    import sys

    code = ("import warnings; warnings.simplefilter('always'); import torch; "
            "torch.__version__ = '3.1.0'; import mlir_mx.torch; from mlir_mx.torch import versions; "
            "versions.warn_untested_torch()")  # fmt: skip
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("UntestedTorchWarning: mlir_mx.torch: torch 3.1.0 is untested") == 1


def _torch_triton_pin() -> str | None:
    from importlib.metadata import requires

    return next((r for r in requires("torch") or () if r.startswith("triton")), None)


@pytest.mark.skipif(
    _torch_triton_pin() is None,
    reason="this torch's wheel names no triton (the CPU wheel; the default CUDA one does)",
)
def test_the_test_extras_triton_is_the_one_torch_pins():
    """Where torch's default (CUDA) wheel is installed, the triton it requires
    is the one the test extra installs beside the CPU torch (issue 53)."""
    text = (ROOT / "pyproject.toml").read_text()
    extra = re.search(r"^test = \[(.*?)^\]", text, re.M | re.S)[1]  # to its own line's ]
    ours = re.search(r'"(triton==[^;"]+)', extra)[1].strip()
    assert _torch_triton_pin().split(";")[0].strip() == ours

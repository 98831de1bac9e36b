"""``MLIR_MX_CPU_FEATURES``: every item is applied or refused by name
(reliability round 4: ``09-cpu-mask-avx512bw`` and
``13-cpu-mask-unknown-names-ignored`` in ``../shared/repro/round4/``)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from mlir_mx import cpu_features as cf
from mlir_mx import host
from mlir_mx.errors import MXValueError

SAMPLES = Path(__file__).parent / "samples"
SPR = cf.parse_cpuinfo((SAMPLES / "cpuinfo-x86-emeraldrapids-kvm.txt").read_text())


def test_llvm_spellings_are_aliases_of_the_cpuinfo_names():
    steps = (("-", "avx512_vnni"), ("+", "sse4_1"), ("-", "avx_vnni"))
    assert cf.parse_mask("-avx512vnni,+sse4.1 -avxvnni", "x86_64") == steps
    assert cf.parse_mask("-dotprod -i8mm", "aarch64") == (("-", "asimddp"), ("-", "i8mm"))
    assert cf.parse_mask(" none  baseline ", "x86_64") == (("none", ""), ("baseline", ""))
    assert cf.parse_mask("", "x86_64") == ()


@pytest.mark.parametrize(
    "mask, message",
    [
        ("avx2", "'avx2': expected \\+name, -name"),
        ("+bogus", "'\\+bogus': unknown feature on x86_64; known: .*avx512_vnni"),
        ("-bogus", "'-bogus': unknown feature on x86_64"),
        ("-", "'-': expected"),
        ("+asimddp", "'\\+asimddp': not a feature of x86_64"),
    ],
)
def test_an_item_that_cannot_be_applied_is_refused_by_name(mask, message):
    with pytest.raises(ValueError, match=message):
        cf.parse_mask(mask, "x86_64")


def test_removing_another_architectures_feature_removes_nothing():
    """One mask serves the tests on both architectures."""
    assert cf.parse_mask("-avx512f -dotprod", "aarch64") == (("-", "asimddp"),)
    assert cf.parse_mask("-asimddp", "x86_64") == ()


def test_a_flag_the_cpu_reports_is_a_known_name():
    assert cf.parse_mask("-ht", "x86_64", SPR) == (("-", "ht"),)
    with pytest.raises(ValueError):
        cf.parse_mask("-ht", "x86_64")


def test_the_host_refuses_a_bad_mask_with_an_mx_error(monkeypatch):
    monkeypatch.setenv("MLIR_MX_CPU_FEATURES", "-avx512f +bogus")
    with pytest.raises(MXValueError, match="^MLIR_MX_CPU_FEATURES: '\\+bogus': unknown feature"):
        host.host_features()
    monkeypatch.setenv("MLIR_MX_CPU_FEATURES", "-avx512vnni")
    assert "avx512_vnni" not in host.host_features()


def test_masking_bw_masks_vnni_and_bf16_as_on_any_real_cpu():
    """No CPU has AVX512_VNNI without BW, and the VNNI kernels use BW's
    shuffles: ``-avx512bw`` removes VNNI too, so the kernels fall back."""
    closed = cf.close_features(SPR - {"avx512bw"}, "x86_64")
    assert "avx512f" in closed
    assert not closed & {"avx512bw", "avx512_vnni", "avx512_bf16", "avx512vbmi"}


@pytest.mark.skipif(
    not {"avx512bw", "avx512_vnni"} <= host.host_features(),
    reason="needs an AVX-512 BW + VNNI CPU to mask BW on",
)
def test_fp4_dot_kernels_run_with_bw_masked_and_give_the_same_bits(tmp_path):
    """Round 4 ``09``: with ``-avx512bw`` the FP4 x int8 / FP4 kernels
    chose the 512-bit byte shuffle on VNNI alone (a compile error).  They now
    fall back and give the unmasked kernels' bits (results do not depend on
    the CPU)."""
    code = textwrap.dedent(
        """
        import sys, numpy as np, mlir_mx
        rng = np.random.default_rng(0)
        w = mlir_mx.quantize(rng.standard_normal((128, 96)).astype(np.float32), "f4E2M1FN", 32)
        x = rng.standard_normal((3, 96)).astype(np.float32)
        out = [mlir_mx.Linear(w, activations=a, threads=1)(x) for a in (None, "i8", "f4E2M1FN")]
        np.save(sys.argv[1], np.stack(out))
        """
    )
    got = {}
    for mask in ("", "-avx512bw"):
        path = tmp_path / f"out{len(got)}.npy"
        env = dict(os.environ, MLIR_MX_CPU_FEATURES=mask, MLIR_MX_CACHE_DIR="off")
        cmd = [sys.executable, "-c", code, str(path)]
        run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
        assert run.returncode == 0, run.stderr[-2000:]
        got[mask] = path.read_bytes()
    assert got[""] == got["-avx512bw"]

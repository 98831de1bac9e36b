"""AMX-TILE / AMX-BF16: detected from the CPU's flags, masked by
``MLIR_MX_CPU_FEATURES`` like every feature, named by ``features_summary``,
and never a change of the ISA level; the OS permission for the tile state
(``mlir_mx.amx_permission``) is a bool that never raises (issue 51)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from mlir_mx import amx_permission as perm
from mlir_mx import cpu_features as cf
from mlir_mx import host

SAMPLES = Path(__file__).parent / "samples"
#: The sample's VM did not expose AMX; this host (Sapphire Rapids class, KVM)
#: reports these three flags beside the rest.
AMX_FLAGS = frozenset({"amx_tile", "amx_bf16", "amx_int8"})
SPR = cf.parse_cpuinfo((SAMPLES / "cpuinfo-x86-emeraldrapids-kvm.txt").read_text()) | AMX_FLAGS
ZEN3 = cf.parse_cpuinfo((SAMPLES / "cpuinfo-x86-epyc-zen3.txt").read_text())


def _as_cpu(monkeypatch, flags: frozenset[str], mask: str) -> frozenset[str]:
    """``host_features()`` as on an x86-64 CPU reporting ``flags``, masked by ``mask``."""
    monkeypatch.setattr(host.platform, "machine", lambda: "x86_64")
    monkeypatch.setattr(host, "_reported_features", lambda: flags)
    monkeypatch.setenv("MLIR_MX_CPU_FEATURES", mask)
    return host.host_features()


def test_amx_is_read_from_the_flags_and_named_by_the_summary():
    line = "flags\t\t: fpu sse sse2 avx2 fma f16c avx512f avx512bw amx_bf16 amx_tile\n"
    assert {"amx_tile", "amx_bf16"} <= cf.parse_cpuinfo(line)
    summary = host.features_summary(SPR, "x86_64").split()
    assert "amx_tile" in summary and "amx_bf16" in summary
    assert "amx" not in host.features_summary(ZEN3, "x86_64")


@pytest.mark.parametrize(
    "mask, left",
    [
        ("", {"amx_tile", "amx_bf16", "amx_int8"}),
        ("-amx_bf16", {"amx_tile", "amx_int8"}),
        ("-amx-bf16", {"amx_tile", "amx_int8"}),  # LLVM's spelling
        ("-amx_tile", set()),  # amx_bf16 and amx_int8 need it
        ("baseline", set()),
    ],
)
def test_the_mask_removes_amx_like_any_feature(monkeypatch, mask, left):
    got = _as_cpu(monkeypatch, SPR, mask)
    assert {f for f in got if f.startswith("amx")} == left
    assert host.has_features("amx_tile", "amx_bf16") == ("amx_bf16" in left)
    assert ("amx_bf16" in host.features_summary().split()) == ("amx_bf16" in left)
    plus = [f for f in cf.llvm_target_features(got, "x86_64") if f.startswith("+amx")]
    assert plus == [
        f"+{f.replace('_', '-')}"
        for f in sorted(AMX_FLAGS, key=list(cf.LLVM_NAMES["x86_64"]).index)
        if f in left
    ]


@pytest.mark.parametrize("mask", ["", "-amx_bf16", "-amx_tile"])
def test_amx_changes_no_isa_level(monkeypatch, mask):
    _as_cpu(monkeypatch, SPR, mask)
    assert host.isa_level() == "AVX512-BF16"
    assert cf.isa_level(SPR - AMX_FLAGS, "x86_64") == "AVX512-BF16"


@pytest.mark.parametrize(
    "name, needs",
    [
        ("llvm.x86.tdpbf16ps.internal", (("amx_bf16",),)),
        ("llvm.x86.tileloadd64.internal", (("amx_tile",),)),
        ("llvm.x86.tilestored64.internal", (("amx_tile",),)),
        ("llvm.x86.tilezero.internal", (("amx_tile",),)),
        ("llvm.x86.tdpbssd.internal", (("amx_int8",),)),
    ],
)
def test_amx_intrinsics_name_the_feature_they_need(name, needs):
    """What ``mx-host-target`` checks before LLVM's backend could abort."""
    assert cf.intrinsic_features(name) == needs


@pytest.mark.parametrize(
    "system, arch, reported, why",
    [
        ("Darwin", "aarch64", frozenset(), "Linux request"),
        ("Linux", "aarch64", frozenset(), "x86-64 feature"),
        ("Linux", "x86_64", ZEN3, "does not report amx_tile and amx_bf16"),
        ("Linux", "x86_64", SPR - {"amx_bf16"}, "does not report amx_bf16"),
    ],
)
def test_permission_is_not_asked_where_it_cannot_be(system, arch, reported, why):
    assert why in perm.permission_problem(system, arch, reported)


def test_permission_is_a_cached_bool_with_a_reason():
    first = perm.amx_permission()
    assert isinstance(first.granted, bool) and bool(first) is first.granted
    assert first.reason
    assert perm.amx_permission() is first
    if not first.granted:  # off Linux x86-64 with AMX, or the kernel's refusal: says which
        assert "amx" in first.reason.lower() or "arch_prctl" in first.reason


def test_permission_in_a_fresh_process_never_raises():
    """In a process of its own (the request is process-wide): the answer,
    and, where granted, XTILEDATA in the kernel's permitted set."""
    code = (
        "from mlir_mx.amx_permission import amx_permission as p\n"
        "r = p(); print(r.granted, r.reason)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    granted, _, reason = out.stdout.strip().partition(" ")
    assert granted in ("True", "False") and reason
    assert granted == "False" or "XTILEDATA in the permitted set" in reason

"""CPU features on every platform, from samples of what each one reports.

``samples/``: ``/proc/cpuinfo`` of an x86 Emerald Rapids guest (this
project's development machine), an AMD EPYC Zen 3 (AVX2, no AVX-512), an
AWS Graviton3 (Neoverse V1: dotprod, i8mm, bf16, SVE) and a Raspberry Pi 4
(Cortex-A72: NEON only); ``sysctl hw.optional`` of an Apple M1 (no BF16 or
I8MM) and an Apple M3; and the ``/proc/cpuinfo`` that qemu-user 10.0.2
(bookworm-backports) shows an arm64 guest at ``QEMU_CPU`` cortex-a72,
neoverse-n1, neoverse-v1 and max (``scripts/run-tests-aarch64``'s CPUs).
The same names come out everywhere (cpuinfo's), the ISA level follows, and
``mlir_mx.host`` reads each platform's source.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from mlir_mx import cpu_features as cf
from mlir_mx import host
from mlir_mx.errors import MXUnsupportedHostError

SAMPLES = Path(__file__).parent / "samples"


def _features(name: str) -> frozenset[str]:
    text = (SAMPLES / name).read_text()
    return cf.parse_sysctl(text) if name.startswith("sysctl") else cf.parse_cpuinfo(text)


#: (sample, architecture, ISA level): what each of these CPUs is known to be.
CPUS = [
    ("cpuinfo-x86-emeraldrapids-kvm.txt", "x86_64", "AVX512-BF16"),
    ("cpuinfo-x86-epyc-zen3.txt", "x86_64", "AVX2"),
    ("cpuinfo-aarch64-graviton3.txt", "aarch64", "NEON-I8MM-BF16"),
    ("cpuinfo-aarch64-cortex-a72.txt", "aarch64", "NEON"),
    ("sysctl-macos-apple-m1.txt", "aarch64", "NEON-DOTPROD"),
    ("sysctl-macos-apple-m3.txt", "aarch64", "NEON-I8MM-BF16"),
    ("cpuinfo-aarch64-qemu-cortex-a72.txt", "aarch64", "NEON"),
    ("cpuinfo-aarch64-qemu-neoverse-n1.txt", "aarch64", "NEON-DOTPROD"),
    ("cpuinfo-aarch64-qemu-neoverse-v1.txt", "aarch64", "NEON-I8MM-BF16"),
    ("cpuinfo-aarch64-qemu-max.txt", "aarch64", "NEON-I8MM-BF16"),
]

#: sample -> ``host.features_summary`` (what mx-demo, mx-bench and the
#: benchmark reports print): each architecture's own feature names.
SUMMARIES = {
    "cpuinfo-x86-emeraldrapids-kvm.txt": "avx2 fma f16c avx512f avx512bw avx512vl avx512vbmi "
    "avx512_vnni avx512_bf16 avx512_fp16 avx_vnni gfni",
    "cpuinfo-x86-epyc-zen3.txt": "avx2 fma f16c",
    "cpuinfo-aarch64-graviton3.txt": "asimd asimdhp asimddp i8mm bf16 sve svei8mm svebf16",
    "cpuinfo-aarch64-cortex-a72.txt": "asimd",
    "sysctl-macos-apple-m1.txt": "asimd asimdhp asimddp",
    "sysctl-macos-apple-m3.txt": "asimd asimdhp asimddp i8mm bf16",
    "cpuinfo-aarch64-qemu-cortex-a72.txt": "asimd",
    "cpuinfo-aarch64-qemu-neoverse-n1.txt": "asimd asimdhp asimddp",
    "cpuinfo-aarch64-qemu-neoverse-v1.txt": "asimd asimdhp asimddp i8mm bf16 sve svei8mm svebf16",
    "cpuinfo-aarch64-qemu-max.txt": "asimd asimdhp asimddp i8mm bf16 sve sve2 svei8mm svebf16 sme",
}


@pytest.mark.parametrize("sample, arch, level", CPUS, ids=[c[0] for c in CPUS])
def test_each_platform_reports_its_class(sample, arch, level):
    feats = _features(sample)
    assert cf.isa_level(feats, arch) == level
    assert cf.close_features(feats, arch) == feats  # real CPUs are consistent
    # Only LLVM names of this architecture, each feature once, + before -.
    flags = cf.llvm_target_features(feats, arch)
    names = [f[1:] for f in flags]
    assert len(set(names)) == len(names) == len(cf.LLVM_NAMES[arch])
    assert flags == sorted(flags, key=lambda f: f[0] == "-")
    assert {f"+{cf.LLVM_NAMES[arch][n]}" for n in feats if n in cf.LLVM_NAMES[arch]} <= set(flags)


def test_macos_and_linux_name_a_feature_alike():
    """An Apple M3 (sysctl) and a Graviton3 (cpuinfo) both have dotprod, i8mm, bf16."""
    mac, linux = _features("sysctl-macos-apple-m3.txt"), _features("cpuinfo-aarch64-graviton3.txt")
    assert {"asimd", "asimddp", "i8mm", "bf16", "fphp", "asimdhp"} <= mac & linux
    assert "sve" in linux and "sve" not in mac
    assert not {"i8mm", "bf16"} & _features("sysctl-macos-apple-m1.txt")


def test_the_first_processor_block_is_read():
    text = "processor\t: 0\nFeatures\t: fp asimd asimddp\n\nprocessor\t: 1\nFeatures\t: fp\n"
    assert cf.parse_cpuinfo(text) == {"fp", "asimd", "asimddp"}
    assert cf.parse_cpuinfo("processor\t: 0\nBogoMIPS\t: 2.0\n") == frozenset()
    assert cf.parse_sysctl("hw.optional.arm.FEAT_I8MM: 0\nhw.optional.neon: 1\nnoise\n") == {
        "asimd"
    }


def test_a_mask_removes_what_needs_the_feature():
    zen3 = _features("cpuinfo-x86-epyc-zen3.txt")
    assert cf.isa_level(zen3 - {"avx2"}, "x86_64") == "AVX"
    # No AVX: no VEX-encoded feature survives.
    assert not {"avx2", "fma", "f16c", "vaes"} & cf.close_features(zen3 - {"avx"}, "x86_64")
    v3 = _features("cpuinfo-aarch64-graviton3.txt")
    assert cf.close_features((v3 | {"sve2"}) - {"sve"}, "aarch64") == v3 - {"sve"}


@pytest.mark.parametrize("sample, arch, level", CPUS, ids=[c[0] for c in CPUS])
def test_host_reads_each_platform(monkeypatch, sample, arch, level):
    """``mlir_mx.host`` on Linux (``/proc/cpuinfo``) and macOS (``sysctl``),
    the machine faked with a sample."""
    text = (SAMPLES / sample).read_text()
    darwin = sample.startswith("sysctl")

    def fake_open(path, *a, **k):
        if darwin or path != "/proc/cpuinfo":
            raise OSError(path)
        from io import StringIO

        return StringIO(text)

    def fake_run(cmd, **k):
        assert cmd[:2] == ["sysctl", "hw.optional"]
        return subprocess.CompletedProcess(cmd, 0, text, "")

    monkeypatch.setattr("builtins.open", fake_open)
    monkeypatch.setattr(host.subprocess, "run", fake_run)
    monkeypatch.setattr(host.platform, "system", lambda: "Darwin" if darwin else "Linux")
    monkeypatch.setattr(host.platform, "machine", lambda: "arm64" if darwin else arch)
    monkeypatch.delenv("MLIR_MX_CPU_FEATURES", raising=False)
    host._reported_features.cache_clear()
    try:
        assert host.host_arch() == arch
        assert host.host_features() == _features(sample)
        assert host.isa_level() == level
        assert host.features_summary() == SUMMARIES[sample]
        assert host.feature_table() == {n: n in SUMMARIES[sample].split() for n in host.interesting()}
        host.check_host()  # every sample is a supported CPU
    finally:
        host._reported_features.cache_clear()


@pytest.mark.parametrize("sample, arch, _level", CPUS, ids=[c[0] for c in CPUS])
def test_features_summary_names_each_architectures_features(sample, arch, _level):
    """The summary of a sample's features names them in its architecture's
    terms (an aarch64 CPU's were "none" when only x86 names were known);
    another architecture's names never show."""
    features = _features(sample)
    assert host.features_summary(features, arch) == SUMMARIES[sample]
    other = host.interesting("aarch64" if arch == "x86_64" else "x86_64")
    assert not set(other) & set(SUMMARIES[sample].split())
    assert host.features_summary(features - set(host.interesting(arch)), arch) == "none"


def test_an_x86_cpu_without_fma_is_refused_by_name():
    zen3 = _features("cpuinfo-x86-epyc-zen3.txt")
    host.check_host("x86_64", zen3)
    with pytest.raises(MXUnsupportedHostError, match="lacks fma.*one rounding"):
        host.check_host("x86_64", cf.close_features(zen3 - {"fma"}, "x86_64"))
    host.check_host("aarch64", _features("cpuinfo-aarch64-cortex-a72.txt"))


def test_the_vendor_is_read_from_cpuinfo():
    """``parse_vendor`` (the decode kernels' prefetch policy,
    ``host.software_prefetch``): x86 samples name theirs, aarch64 has none."""
    assert cf.parse_vendor((SAMPLES / "cpuinfo-x86-epyc-zen3.txt").read_text()) == "AuthenticAMD"
    intel = (SAMPLES / "cpuinfo-x86-emeraldrapids-kvm.txt").read_text()
    assert cf.parse_vendor(intel) == "GenuineIntel"
    assert cf.parse_vendor((SAMPLES / "cpuinfo-aarch64-graviton3.txt").read_text()) == ""


def test_the_family_is_read_from_cpuinfo():
    """``parse_family`` (Zen 5's decode streams, ``stream_config._zen5_streams``):
    x86 samples give theirs, aarch64 and a text without the field 0."""
    assert cf.parse_family((SAMPLES / "cpuinfo-x86-epyc-zen3.txt").read_text()) == 25
    assert cf.parse_family((SAMPLES / "cpuinfo-x86-emeraldrapids-kvm.txt").read_text()) == 6
    assert cf.parse_family((SAMPLES / "cpuinfo-aarch64-graviton3.txt").read_text()) == 0
    assert cf.parse_family("cpu family\t: 26\nmodel\t\t: 2\n") == 26


def test_cache_sizes_are_read_from_sysfs(tmp_path):
    """``parse_cache_size`` reads sysfs's sizes; ``host.cache_bytes`` finds a
    level's cache in a sysfs cache folder (``memory_ahead``'s L3), None where
    the folder, the level or a readable size is missing."""
    from mlir_mx import host

    assert cf.parse_cache_size("32768K\n") == 32 << 20
    assert cf.parse_cache_size("2M") == 2 << 20
    assert cf.parse_cache_size("512") == 512
    assert cf.parse_cache_size("") is None
    assert cf.parse_cache_size("lots") is None
    for index, (level, size) in enumerate([("1", "48K"), ("2", "1024K"), ("3", "32768K")]):
        (tmp_path / f"index{index}").mkdir()
        (tmp_path / f"index{index}" / "level").write_text(level + "\n")
        (tmp_path / f"index{index}" / "size").write_text(size + "\n")
    (tmp_path / "uevent").write_text("")
    assert host.cache_bytes(str(tmp_path), 3) == 32 << 20
    assert host.cache_bytes(str(tmp_path), 2) == 1 << 20
    assert host.cache_bytes(str(tmp_path), 4) is None
    assert host.cache_bytes(str(tmp_path / "missing"), 3) is None

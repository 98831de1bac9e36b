"""The differential tester: random mx programs through every pipeline of
mlir_mx_testing.differential.COMPILERS, with and without --canonicalize,
against the oracle (docs/testing.md).  Quick seeded set by default, the long
set marked slow."""

from __future__ import annotations

import numpy as np
import pytest

from mlir_mx import oracle
from mlir_mx.kernels import SCHEDULES
from mlir_mx_testing import differential as D
from mlir_mx_testing.programs import Program, _Val


def test_quick_differential_set():
    # 1 program, compiled by every lowering and each kernel schedule at 1 or 2
    # threads in turn (D.quick_compilers), and after --canonicalize by every
    # compiler that is not a generated kernel schedule (the compilations are
    # where the time goes), 4 input sets; the long set below runs 240
    # programs, every compiler at both thread counts, each also after
    # --canonicalize (-m slow)
    compilers = D.quick_compilers()
    report = D.run(
        seed=1,
        batches=1,
        programs_per_batch=1,
        inputs_per_program=4,
        canonicalize="lowerings",
        compilers=compilers,
    )
    assert not report.mismatches, "\n".join(report.mismatches[:20])
    # every compiler compiled (the fused-vectorized one only if a program fits
    # its tile); this seed's program is one --canonicalize rewrites
    lowerings = [v for v in compilers if not v.kernels]
    assert len(lowerings) >= 5 and len(lowerings) < len(compilers)
    assert report.compiles >= (len(compilers) - 1) + (len(lowerings) - 1)
    assert report.bitwise > 20 and report.bounded > 20


def test_quick_compilers_cover_every_schedule_at_both_thread_counts():
    quick = {v.name for v in D.quick_compilers()}
    assert {v.name for v in D.COMPILERS if not v.kernels} <= quick
    for s in SCHEDULES:  # each schedule once, at 1 or 2 threads
        assert len(quick & {f"kernels-{s}-1t", f"kernels-{s}-2t"}) == 1
    assert any(n.endswith("-1t") for n in quick) and any(n.endswith("-2t") for n in quick)
    # every shape class (decode, small, prefill) at both thread counts
    for cls in {SCHEDULES[s].shape_class for s in SCHEDULES}:
        threads = {
            n[-2]
            for n in quick
            for s in SCHEDULES
            if SCHEDULES[s].shape_class == cls and n.startswith(f"kernels-{s}-") and "avx2" not in n
        }
        assert threads == {"1", "2"}, cls
    assert len(quick) < len(D.COMPILERS)


def test_a_module_canonicalize_leaves_alone_is_built_once(monkeypatch):
    """--canonicalize leaves this program as it is: its canonicalized build
    would be the plain one again, and is not made."""
    p = _fold_then_dequantize(3.0)
    assert D._canonicalized(p.text()) is None
    built = []
    monkeypatch.setattr(
        D, "_compile", lambda text, compiler: built.append(compiler.name) or _NoRunner()
    )
    plain = D.Compiler("blocked", D.then_llvm("mx-to-linalg"))
    report = D.check([p], {"fd": []}, [plain])
    assert built == ["blocked"] and report.compiles == 1
    with pytest.raises(ValueError, match="canonicalize: expected"):
        D.check([p], {"fd": []}, [plain], canonicalize="some")


class _NoRunner:
    def invoke(self, *args):  # pragma: no cover - no input sets are given
        raise AssertionError("not called")


def _fold_then_dequantize(alpha: float) -> Program:
    t = _Val("a0", (1, 32), ("f8E4M3FN", 32, 1))
    fs = _Val("v1", (1, 32), ("f8E4M3FN", 32, 1))
    d = _Val("v2", (1, 32))
    return Program(
        "fd", args=[t], ops=[("fold", fs, t, ("const", alpha)), ("dequantize", d, fs)], results=[d]
    )


def test_the_tester_catches_a_result_changing_rewrite():
    """mx-fuse-scales is the opt-in, inexact fusion: as a 'pipeline' it must
    be caught (semantics/3-fold-scale-requantize.mlir: 3.5 vs 3.375)."""
    fused = D.Compiler("fuse-scales", D.then_llvm("mx-fuse-scales,mx-to-linalg"))
    plain = D.Compiler("blocked", D.then_llvm("mx-to-linalg"))
    p = _fold_then_dequantize(3.0)
    x = np.ones((1, 32), np.float32)
    x[0, 0] = 1.125
    t = oracle.quantize(x, "f8E4M3FN", 32)
    assert not D.check([p], {"fd": [[t]]}, [plain]).mismatches
    caught = D.check([p], {"fd": [[t]]}, [fused]).mismatches
    assert any("differs from the oracle" in m for m in caught)


def test_oracle_and_bound_helpers():
    nan_a = np.array([np.nan, 1.0], np.float32)
    nan_b = np.array([np.float32(np.nan) * -1, 1.0], np.float32)
    assert D.same_result(nan_a, nan_b)  # NaN payload and sign aside
    assert not D.same_result(np.float32([0.0]), np.float32([-0.0]))  # but zeros' signs count
    b = D.matmul_bound(np.array([1.0, 2.0]), 64, 32)
    assert b[1] > b[0] > 64 * 2.0**-24


def test_compilers_are_one_registry():
    names = [v.name for v in D.COMPILERS]
    assert len(names) == len(set(names))
    assert {"fused", "blocked", "fused-vectorized", "blocked-vectorized"} <= set(names)
    extra = D.Compiler("extra", D.then_llvm("mx-to-linalg"), "blocked")
    D.register_compiler(extra)
    try:
        assert D.COMPILERS[-1] is extra and [v.name for v in D.COMPILERS].count("extra") == 1
    finally:
        D.COMPILERS.remove(extra)


@pytest.mark.slow
def test_long_differential_set():
    """The long mode recorded in docs/testing.md."""
    report = D.run(seed=2026, batches=40, programs_per_batch=6, inputs_per_program=3)
    assert not report.mismatches, "\n".join(report.mismatches[:20])

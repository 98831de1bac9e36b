"""The one-tile AMX-BF16 kernel (``mlir_mx.kernels.amx``, upstream's ``amx``
dialect through our Runner) against the numpy model
``oracle.amx_tdpbf16ps``, and the start-up self-test that decides whether
AMX is usable (``mlir_mx.linear.amx``; issue 51)."""

from __future__ import annotations

import numpy as np
import pytest
from mlir import ir

from mlir_mx import host, oracle
from mlir_mx.amx_permission import amx_permission
from mlir_mx.diagnostics import DiagnosticError
from mlir_mx.errors import MXUnsupportedHostError, MXValueError
from mlir_mx.execution import CompileOptions, Runner
from mlir_mx.execution.object_dump import object_code
from mlir_mx.kernels.amx import tile_product_module
from mlir_mx.linear import amx
from mlir_mx.pipelines.amx import amx_library_pipeline

HAS_AMX = host.has_features("amx_tile", "amx_bf16") and amx_permission().granted
needs_amx = pytest.mark.skipif(not HAS_AMX, reason="no AMX-BF16 on this CPU")


def _module_text() -> str:
    with ir.Context(), ir.Location.unknown():
        return str(tile_product_module("tdpbf16ps"))


@pytest.fixture(scope="module")
def runner():
    if not HAS_AMX:
        pytest.skip("no AMX-BF16 on this CPU")
    return Runner(_module_text(), options=CompileOptions(amx_library_pipeline()))


def _run(runner, a, b, c) -> np.ndarray:
    got = c.copy()
    runner.tdpbf16ps(amx._bf16(a), amx._bf16(oracle.amx_pair_layout(b)), got)  # noqa: SLF001
    return got


def _assert_model_bits(got, a, b, c):
    want = oracle.amx_tdpbf16ps(a, b, c)
    same = amx._same(got, want, a, b, c)  # noqa: SLF001 - the self-test's one comparison
    assert same.all(), f"{int((~same).sum())} outputs differ from the model"


def test_the_module_is_upstreams_amx_dialect():
    text = _module_text()
    for op in ("amx.tile_load", "amx.tile_mulf", "amx.tile_store"):
        assert op in text
    assert "memref<16x32xbf16>" in text and "memref<16x16xf32>" in text


@needs_amx
@pytest.mark.parametrize("case", amx.DIRECTED_CASES, ids=[c[0] for c in amx.DIRECTED_CASES])
def test_edge_cases_give_the_models_bits(runner, case):
    a, b, c = amx.directed_tile(case)
    got = _run(runner, a, b, c)
    _assert_model_bits(got, a, b, c)
    want = oracle.amx_tdpbf16ps(a, b, c)
    assert got.view(np.uint32)[0, 0] == want.view(np.uint32)[0, 0]  # payloads too


@needs_amx
def test_random_tiles_give_the_models_bits(runner):
    """Another seed than the self-test's: 140 tiles, every distribution."""
    for a, b, c in amx.random_tiles(140, seed=7):
        _assert_model_bits(_run(runner, a, b, c), a, b, c)


@needs_amx
@pytest.mark.slow
def test_many_random_tiles_give_the_models_bits(runner):
    """The campaign behind docs/numerics.md's figure: 2,800 tiles (716,800
    outputs), 20 seeds, every distribution."""
    for seed in range(20):
        for a, b, c in amx.random_tiles(140, seed=1000 + seed):
            _assert_model_bits(_run(runner, a, b, c), a, b, c)


#: ``TILERELEASE`` (VEX.128.NP.0F38.W0 49 C0) and ``LDTILECFG m512``'s opcode bytes.
TILERELEASE = bytes.fromhex("c4e27849c0")
LDTILECFG = bytes.fromhex("c4e27849")


@needs_amx
def test_the_kernel_configures_and_releases_the_tiles(runner):
    """LLVM's x86 backend writes the tile configuration before the tile
    instructions and releases the tiles after: the calling thread does not
    keep 8 KiB of tile state live."""
    code = object_code(runner.engine)
    assert code.count(LDTILECFG) >= 2  # ldtilecfg m512, and tilerelease's own prefix
    assert TILERELEASE in code


@needs_amx
def test_only_c_is_written(runner):
    """The Runner's effects analysis knows the tile loads read and the tile
    store writes (``execution/effects.py``): read-only A and B (weights in
    a read-only map) are taken, a read-only C is refused by name."""
    assert runner.compiled.writes("tdpbf16ps") == frozenset({2})
    a, b, c = next(amx.random_tiles(1, seed=9))
    a16, b16 = amx._bf16(a), amx._bf16(oracle.amx_pair_layout(b))  # noqa: SLF001
    a16.setflags(write=False)
    b16.setflags(write=False)
    got = c.copy()
    runner.tdpbf16ps(a16, b16, got)
    _assert_model_bits(got, a, b, c)
    got.setflags(write=False)
    with pytest.raises(MXValueError, match="argument 3 .* writes this argument"):
        runner.tdpbf16ps(a16, b16, got)


@needs_amx
def test_exact_sums_are_the_matmul(runner):
    rng = np.random.default_rng(3)
    a = rng.integers(-4, 5, (16, 32)).astype(np.float32)
    b = rng.integers(-4, 5, (32, 16)).astype(np.float32)
    c = np.ones((16, 16), np.float32)
    assert np.array_equal(_run(runner, a, b, c), 1 + a @ b)


@needs_amx
def test_amx_is_usable_here_and_asked_once():
    status = amx.amx_bf16_status()
    assert status.usable and status.compiled and "self-test passed" in status.reason
    assert amx.amx_bf16_usable() is True
    assert amx.amx_bf16_status() is status


def test_the_mask_makes_amx_unusable_and_compiles_nothing(monkeypatch):
    monkeypatch.setenv("MLIR_MX_CPU_FEATURES", "-amx_bf16")
    status = amx.amx_bf16_status()
    assert not status and not status.compiled
    assert "no AMX-BF16 on this CPU" in status.reason and "-amx_bf16" in status.reason
    assert amx.amx_bf16_usable() is False
    with pytest.raises(MXUnsupportedHostError, match="AMX-BF16 kernel refused"):
        amx.tile_runner()  # refused before anything is compiled or run
    # and the lowering itself refuses the intrinsic for the masked target
    with pytest.raises(DiagnosticError, match="tdpbf16ps"):
        Runner(_module_text(), options=CompileOptions(amx_library_pipeline()))


def _single_chain(a_bf16, b_pairs, c):
    """Another implementation: Intel's pseudocode read literally (one
    in-order chain from c; f64 sums, DAZ/FTZ left out)."""
    with np.errstate(all="ignore"):
        a = a_bf16.astype(np.float64)
        bp = b_pairs.astype(np.float64)
        b = np.empty((32, 16))
        b[0::2], b[1::2] = bp[:, 0::2], bp[:, 1::2]
        t = c.astype(np.float32)
        for k in range(32):
            t = (t + a[:, k, None] * b[k][None]).astype(np.float32)
    c[...] = t


def test_the_selftest_catches_another_implementation():
    bad = amx.selftest_mismatches(_single_chain)
    assert bad, "the self-test must tell the single chain from the hardware's two"
    assert any(line.startswith("2^20 (even), -2^20 (odd)") for line in bad)
    assert all("differ" in line for line in bad)

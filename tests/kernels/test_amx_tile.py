"""The one-tile AMX-BF16 kernel (``mlir_mx.kernels.amx``, upstream's ``amx``
dialect through our Runner) against the numpy model
``oracle.amx_tdpbf16ps``, and the start-up self-test that decides whether
AMX is usable (``mlir_mx.linear.amx``; issue 51)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from format_cases import INTEGRAL
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
    # and the lowering itself refuses an AMX intrinsic for the masked target: the
    # first it meets, tdpbf16ps where only amx_bf16 is missing (masked), the tile
    # load where the CPU lacks the tiles too (a CPU without AMX)
    amx_tile = host.has_features("amx_tile")
    first = "tdpbf16ps.* needs amx_bf16" if amx_tile else "tileloadd64.* needs amx_tile"
    with pytest.raises(DiagnosticError, match=rf"llvm\.x86\.{first}, which the target CPU lacks"):
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


def _tiled(runner):
    """The one-tile kernel as ``product(a, b, c)`` on any (M x 32), (32 x N)
    and (M x N), in 16 x 16 tiles (zero padded)."""

    def product(a, b, c):
        m, n = c.shape
        mp, np_ = -(-m // 16) * 16, -(-n // 16) * 16
        ap, bp = np.zeros((mp, 32), np.float32), np.zeros((32, np_), np.float32)
        cp = np.zeros((mp, np_), np.float32)
        ap[:m], bp[:, :n], cp[:m, :n] = a, b, c
        for i in range(0, mp, 16):
            for j in range(0, np_, 16):
                cp[i : i + 16, j : j + 16] = _run(runner, ap[i : i + 16], bp[:, j : j + 16],
                                                  cp[i : i + 16, j : j + 16].copy())  # fmt: skip
        return cp[:m, :n]

    return product


@needs_amx
@pytest.mark.parametrize("element", INTEGRAL)
def test_the_guarded_design_gives_the_exact_paths_bits_on_amx(runner, element):
    """``oracle.amx_guarded_matmul`` with this CPU's ``TDPBF16PS`` in place
    of the model (issue 51's design on the hardware): the exact path's bits,
    with fallback rows, flagged weight blocks and ragged M and N; the same
    tiles with the guard ignored do not give them."""
    from mlir_mx.numerics import MXArray

    rng = np.random.default_rng(21)
    w = rng.standard_normal((37, 128)) * np.exp2(rng.integers(-8, 8, (37, 1)))
    w = oracle.quantize(w.astype(np.float32), element, 32)
    s = w.scales.view(np.uint8).T.copy()
    s[1, 3], s[2, 5] = 253, 254  # bmax sb >= 2^128 for these (flagged)
    b = MXArray(w.codes.T.copy(), s, element, 32, 0)
    x = rng.standard_normal((21, 128))
    x[1::2] *= np.exp2(rng.integers(-20, 20, (21, 128)))[1::2]  # odd rows fall back
    a = x.astype(ml_dtypes.bfloat16).astype(np.float32)
    pw = oracle.amx_prepare(b)
    ok = oracle.amx_pass(a, pw)
    assert pw.flagged.any() and oracle.amx_guard_call(a, pw) and ok.any() and not ok.all()
    want = oracle.blocked_order(a, b, np.zeros((21, 37), np.float32))
    product = _tiled(runner)
    got = oracle.amx_guarded_matmul(a, pw, product=product)
    assert (got.view(np.uint32) == want.view(np.uint32)).all()
    ignored = np.zeros((21, 37), np.float32)
    for j in range(4):
        bj = np.where(pw.flagged[j][None, :], np.float32(0), pw.values(j))
        ignored = product(a[:, j * 32 : (j + 1) * 32], bj, ignored)
    cols = ~pw.flagged.any(axis=0)  # the columns the ignored run computes whole
    assert (ignored[:, cols].view(np.uint32) != want[:, cols].view(np.uint32)).any()

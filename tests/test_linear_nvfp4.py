"""NVFP4 weights (E4M3 block scales of 16, a global scale) on every path of
``mlir_mx.Linear``, bit for bit the oracle's bit model
(``mlir_mx.oracle.blocked_order``: the blocked order with the E4M3 scales,
then one f32 division by the global scale per output; ``docs/numerics.md``,
"NVFP4 in the matmul"):

* f32 activations (the exact path: ``decode``, ``small``, ``prefill``),
  ``activations="i8"`` and MX FP4 activations (the integer dot kernels, or
  the f32 kernels where they do not serve), ``activations="bf16"`` (the f32
  kernels, and the ``bf16-*`` dot kernels where they are chosen);
* 1 and 2 threads, tiled B (N a multiple of 64: records or tiles) and
  ragged shapes (N = 40, K = 48: codes one per row, tails);
* under the AVX2 and AVX-VNNI masks and with no dot units (``baseline``);
* global scales 1.0, a power of two, the computed (non power of two) one,
  tiny and huge ones; inside the claim of ``matmul_reference``;
* every kernel schedule on B's codes (the Runner's form), E4M3 scales in
  the kernel (``Problem.b_scale_type``);
* NVFP4 activations refused by name.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from dot_cases import AVX2_MASKS, mask_avx2, same_bits

import mlir_mx
from mlir_mx import oracle
from mlir_mx.errors import MXValueError
from mlir_mx.kernels import SCHEDULES, Problem, plan_kernel, shape_class
from mlir_mx.numerics import MXArray, pack_codes
from mlir_mx.numerics.formats import E4M3_SCALE_TYPE

ACTIVATIONS = [None, "i8", "mxfp4", "bf16"]


def _w(n=128, k=96, seed=0, global_scale=None, spread=8):
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((n, k)) * np.exp2(rng.integers(-spread, spread, (n, 1)))
    return oracle.quantize(w.astype(np.float32), "nvfp4", axis=1, global_scale=global_scale)


def _x(m, k, seed=1):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((m, k)) * np.exp2(rng.integers(-20, 20, (m, 1)))).astype(np.float32)


def _as_b(w: MXArray) -> MXArray:
    """W (out, in) blocked along in -> B = W^T (in, out) blocked along axis 0."""
    return MXArray(
        w.codes.T.copy(), w.scales.T.copy(), "nvfp4", 16, axis=0, global_scale=w.global_scale
    )


def _want(w: MXArray, x: np.ndarray, act) -> np.ndarray:
    """The oracle's bits for ``Linear(w, activations=act)(x)``."""
    if act == "bf16":
        a = x.astype(ml_dtypes.bfloat16).astype(np.float32)
    elif act is not None:
        a = oracle.quantize(x, act, 16, axis=1)
    else:
        a = x
    return oracle.blocked_order(a, _as_b(w), np.zeros((x.shape[0], w.shape[0]), np.float32))


def _vendor(monkeypatch, name):
    from mlir_mx import host

    monkeypatch.setattr(host, "cpu_vendor", lambda: name)


#: (activations, M, N, K): each activation kind at each shape class, tiled
#: (N = 128) and ragged (N = 40, K = 48) in turn.
CASES = [
    (act, m, *((128, 96) if (i + j) % 2 == 0 else (40, 48)))
    for i, act in enumerate(ACTIVATIONS)
    for j, m in enumerate((1, 5, 70))
]


@pytest.mark.parametrize("act, m, n, k", CASES)
@pytest.mark.filterwarnings("ignore:Linear.*f32 kernels")
def test_every_path_equals_the_oracle(monkeypatch, act, m, n, k):
    """Every activation kind, shape class, tiled and ragged, 1 and 2 threads;
    bf16 with the vendor rule of AMD (the bf16 dot kernels where the CPU has
    them)."""
    if act == "bf16":
        _vendor(monkeypatch, "AuthenticAMD")
    w = _w(n, k)
    lin = mlir_mx.Linear(w, activations=act, threads=2)
    x = _x(m, k)
    want = _want(w, x, act)
    for threads in (1, 2):
        assert same_bits(lin(x, threads=threads), want).all(), (lin.schedule(x), threads)
    assert lin.global_scale == w.global_scale
    assert lin.weight().bitwise_equal(w)


#: E4M3 scale codes a file may hold beside the quantizer's: zero (both
#: signs), the smallest and largest subnormals, NaN (both signs), negative.
ODD_SCALES = [0x00, 0x80, 0x01, 0x07, 0x7F, 0xFF, 0xB8, 0x08]


@pytest.mark.parametrize("act", ACTIVATIONS)
@pytest.mark.filterwarnings("ignore:Linear.*f32 kernels")
def test_every_path_takes_zero_subnormal_negative_and_nan_scales(monkeypatch, act):
    """Block scales of every class, in the tiles' first and second blocks
    (a decode visits the two blocks of 16 of a tile at once,
    ``kernels/matmul/stream.py``) and across a tile's 64 columns: every
    shape class and both thread counts give the oracle's bits (NaN where a
    block's scale is NaN)."""
    if act == "bf16":
        _vendor(monkeypatch, "AuthenticAMD")
    w = _w(128, 96, seed=11)
    scales = np.array(w.scales).view(np.uint8).copy()
    for i, code in enumerate(ODD_SCALES):
        scales[(17 * i + 3) % 128, i % scales.shape[1]] = code
        scales[(29 * i + 64) % 128, (i + 1) % scales.shape[1]] = code
    w = MXArray(
        w.codes, scales.view(w.scales.dtype), "nvfp4", 16, axis=1, global_scale=w.global_scale
    )
    lin = mlir_mx.Linear(w, activations=act, threads=2)
    for m in (1, 5, 70):
        x = _x(m, 96, seed=12)
        want = _want(w, x, act)
        assert np.isnan(want).any() and not np.isnan(want).all()
        for threads in (1, 2):
            assert same_bits(lin(x, threads=threads), want).all(), (lin.schedule(x), threads)


@pytest.mark.parametrize("cpu", ["baseline", "avx2", "avx-vnni", "-avx512_bf16"])
@pytest.mark.filterwarnings("ignore:Linear.*f32 kernels")
def test_every_isa_gives_the_same_bits(monkeypatch, cpu):
    """The same bits without AVX-512 (the 256-bit dot kernels), without any
    dot unit, without AVX512-BF16 (bf16 activations on the f32 kernels)."""
    _vendor(monkeypatch, "AuthenticAMD")
    if cpu in AVX2_MASKS:
        mask_avx2(monkeypatch, cpu)
    else:
        monkeypatch.setenv("MLIR_MX_CPU_FEATURES", cpu)
    w = _w(128, 64, seed=2)
    x = _x(9, 64, seed=3)
    for act in ACTIVATIONS:
        lin = mlir_mx.Linear(w, activations=act, threads=2)
        for m in (1, 9):
            assert same_bits(lin(x[:m]), _want(w, x[:m], act)).all(), (cpu, act, m)


#: Global scales: 1.0, a power of two, the computed one (not a power of two),
#: tiny and huge (block scales saturating at 448, or zero blocks at 0.125).
GLOBALS = [1.0, 2.0**-3, None, 2.0**-20, 2.0**60]


@pytest.mark.parametrize("g", GLOBALS)
def test_global_scale_edges(g):
    w = _w(64, 32, seed=4, global_scale=g, spread=30)
    assert g is not None or w.global_scale != 2.0 ** np.round(np.log2(w.global_scale))
    x = _x(5, 32, seed=5)
    lin = mlir_mx.Linear(w, threads=2)
    got = lin(x)
    assert same_bits(got, _want(w, x, None)).all()
    acc = np.zeros((5, 64), np.float32)
    exact, bound, inside = oracle.matmul_reference(x, _as_b(w), acc)
    assert inside.all() and (np.abs(got - exact) <= bound).all()
    # Within the claim of the dequantized weight too, where no f32 overflow intervenes.
    np.testing.assert_allclose(got, x @ w.dequantize().T, rtol=1e-4, atol=1e-30)


@pytest.mark.parametrize("name, schedule", [(s.name, s) for s in SCHEDULES.values()])
def test_every_schedule_decodes_e4m3_scales(name, schedule):
    """Each kernel schedule on B's codes and E4M3 scales (``Problem.b_scale_type``,
    the form the Runner passes; tiled where it takes tiles): the blocked order
    with the E4M3 scales, which the global scale then divides."""
    from dot_cases import compile_module

    m = next(r for r in (1, 5, 70) if shape_class(r) == schedule.shape_class)
    k, n = 64, 128
    w = _w(n, k, seed=6)
    b = _as_b(w)
    a_quant = {"int": "i8", "bf16": "bf16"}.get(schedule.unit)
    for tiled in (False, True):
        prob = Problem(
            m, n, k, 16, None, "f4E2M1FN", b_packed=True, b_tiled=tiled, a_quant=a_quant,
            b_scale_type=E4M3_SCALE_TYPE,
        )  # fmt: skip
        if not schedule.supports(prob):
            continue
        runner = compile_module(prob, plan_kernel(prob, name, 2))
        codes = pack_codes(np.ascontiguousarray(b.codes), "f4E2M1FN")
        if tiled:
            from mlir_mx.kernels.common.problem import tile_b_codes

            codes = tile_b_codes(codes, 16, "f4E2M1FN", True)
        x = _x(m, k, seed=7)
        c = np.zeros((m, n), np.float32)
        runner.invoke("matmul", x, np.array(codes), np.array(b.scales), c)
        assert same_bits(c / w.global_scale, _want(w, x, a_quant)).all(), (name, tiled)


def test_nvfp4_activations_are_refused_by_name():
    w = _w(64, 32)
    lin = mlir_mx.Linear(w)
    x = oracle.quantize(_x(3, 32), "nvfp4", axis=1)
    with pytest.raises(MXValueError, match="x: nvfp4 activations are not taken"):
        lin(x)
    with pytest.raises(MXValueError, match="nvfp4"):
        mlir_mx.Linear(w, activations="nvfp4")
    with pytest.raises(MXValueError, match="a: .*nvfp4"):
        oracle.blocked_order(x, _as_b(w), np.zeros((3, 64), np.float32))


def test_from_stored_and_records_keep_the_global_scale():
    w = _w(128, 64, seed=8)
    lin = mlir_mx.Linear(w, threads=1)
    codes, scales = lin.stored
    assert scales.dtype == ml_dtypes.float8_e4m3fn
    again = mlir_mx.Linear.from_stored(
        codes, scales, "f4E2M1FN", 16, 64, 128, global_scale=lin.global_scale
    )
    x = _x(3, 64)
    assert same_bits(again(x), lin(x)).all()
    with pytest.raises(MXValueError, match="scales"):
        mlir_mx.Linear.from_stored(codes, scales, "f4E2M1FN", 16, 64, 128)
    with pytest.raises(MXValueError, match="global_scale"):
        mlir_mx.Linear.from_stored(codes, scales, "f4E2M1FN", 32, 64, 128, global_scale=2.0)
    lin8 = mlir_mx.Linear(w, threads=1, activations="i8")
    if lin8.records_unit is not None:
        rec = mlir_mx.Linear.from_records(
            lin8.held[0], lin8.records_unit, "f4E2M1FN", 16, 64, 128, activations="i8",
            global_scale=lin.global_scale,
        )  # fmt: skip
        assert same_bits(rec(x), lin8(x)).all() and rec.weight().bitwise_equal(w)


def test_matmul_caches_an_nvfp4_weight():
    w = _w(64, 32, seed=9)
    x = _x(4, 32)
    assert same_bits(mlir_mx.matmul(x, w), _want(w, x, None)).all()


@pytest.mark.parametrize("vendor", ["AuthenticAMD", "GenuineIntel"])
@pytest.mark.parametrize("fmt, block, m", [("nvfp4", 16, 1), ("mxfp4", 16, 1), ("mxfp4", 32, 4),
                                           ("nvfp4", 16, 5)])  # fmt: skip
def test_the_amd_fp4_prefetch_keeps_the_bits(monkeypatch, vendor, fmt, block, m):
    """Packed FP4 prefetches B's tiles on AMD too where it pays (decode in
    blocks of 16, small batches: ``SHORT_BLOCK_PREFETCH`` tiles ahead;
    ``TILED_PREFETCH`` on Intel): the oracle's bits at 1 and 2 threads, with
    the prefetch running past the last tile of a thread's columns (4 tiles,
    8 ahead) and of the last block."""
    from mlir_mx import host
    from mlir_mx.kernels.matmul.stream import SHORT_BLOCK_PREFETCH, TILED_PREFETCH

    if not host.has_features("avx512f"):
        pytest.skip("the tiled prefetch is an AVX-512 kernel's (none without AVX-512)")
    _vendor(monkeypatch, vendor)
    n, k = 256, 160
    if fmt == "nvfp4":
        w = _w(n, k)
    else:
        rng = np.random.default_rng(3)
        w = oracle.quantize(rng.standard_normal((n, k)).astype(np.float32), "f4E2M1FN", block, axis=1)
    lin = mlir_mx.Linear(w, threads=2)
    x = _x(m, k)
    scale = {"b_scale_type": E4M3_SCALE_TYPE} if fmt == "nvfp4" else {}
    prob = Problem(m, n, k, block, None, "f4E2M1FN", b_packed=True, b_tiled=True, **scale)
    assert lin.schedule(x) == ("decode" if m == 1 else "small")
    cfg = plan_kernel(prob, lin.schedule(x), 1).config
    assert cfg.prefetch == (TILED_PREFETCH if vendor == "GenuineIntel" else SHORT_BLOCK_PREFETCH)
    if fmt == "nvfp4":
        want = _want(w, x, None)
    else:
        b = MXArray(w.codes.T.copy(), w.scales.T.copy(), "f4E2M1FN", block, axis=0)
        want = oracle.blocked_order(x, b, np.zeros((m, n), np.float32))
    for threads in (1, 2):
        assert same_bits(lin(x, threads=threads), want).all(), (fmt, vendor, threads)


def test_only_fp4_prefetches_on_amd_and_at_decode_only_in_blocks_of_16(monkeypatch):
    """Where the measurements said no on Zen 4 (``stream_config._amd_fp4_prefetch``):
    FP4 decode in blocks of 32, one-byte codes and FP6 (decode and small
    batches) keep no prefetch on AMD family 25 (Zen 5's 1-thread decode:
    ``tests/passes/kernels/test_tiled_streams.py``)."""
    from mlir_mx import host
    from mlir_mx.kernels.matmul import stream_config

    if not host.has_features("avx512f"):
        pytest.skip("the tiled prefetch is an AVX-512 kernel's (none without AVX-512)")
    _vendor(monkeypatch, "AuthenticAMD")
    monkeypatch.setattr(stream_config, "cpu_vendor", lambda: "AuthenticAMD")
    monkeypatch.setattr(stream_config, "cpu_family", lambda: 25)
    for prob, schedule in [
        (Problem(1, 256, 160, 32, None, "f4E2M1FN", b_packed=True, b_tiled=True), "decode"),
        (Problem(1, 256, 160, 16, None, "f8E4M3FN", b_tiled=True), "decode"),
        (Problem(4, 256, 160, 32, None, "f8E4M3FN", b_tiled=True), "small"),
        (Problem(1, 256, 160, 16, None, "f6E2M3FN", b_packed=True, b_tiled=True), "decode"),
        (Problem(4, 256, 160, 32, None, "f6E2M3FN", b_packed=True, b_tiled=True), "small"),
    ]:
        assert plan_kernel(prob, schedule, 1).config.prefetch == 0, prob

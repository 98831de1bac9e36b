"""bf16 activations (``Problem.a_quant = "bf16"``) on the dot kernels.

* A bf16 input gives exactly the bits of the exact f32 path on the same input
  (the numpy oracle's blocked order, :func:`mlir_mx.oracle.blocked_order`)
  for every weight format, the ``bf16-small`` and ``bf16-prefill`` schedules
  (and the f32 ``decode`` / ``small`` / ``prefill`` kernels, which round A in
  ``prepare_a``), 1 and 2 threads, ragged shapes, B as row-major or tiled
  codes.
* An f32 input is rounded to bf16 (nearest even) first: the same bits as
  rounding it with ``ml_dtypes`` and running the exact path.
* Denormals (``docs/numerics.md``, "bf16 activations"): inputs below
  ``units.bf16_floor`` (bf16 denormals, and normal values whose products or
  partial sums reach the denormal range) send the call to the FMA form, so
  the bits stay the exact path's; without that route ``vdpbf16ps``'s flush
  changes them (checked here on the CPU, so the route is needed).
"""

from __future__ import annotations

from dataclasses import replace

import ml_dtypes
import numpy as np
import pytest
from dot_cases import compile_module, same_bits

from mlir_mx import oracle
from mlir_mx.host import has_features
from mlir_mx.kernels import SCHEDULES, Problem
from mlir_mx.kernels.common.plan import KernelPlan
from mlir_mx.kernels.common.problem import BF16, tile_b_codes
from mlir_mx.kernels.dot import kernel as dot_kernel
from mlir_mx.kernels.dot.units import bf16_floor, dot_kind
from mlir_mx.numerics import ELEMENT_FORMATS, decode_elements, is_packed_storage, pack_codes

FORMATS = list(ELEMENT_FORMATS)
needs_bf16 = pytest.mark.skipif(
    not has_features("avx512_bf16", "avx512bw"), reason="the CPU has no AVX512-BF16"
)


@pytest.fixture
def amd(monkeypatch):
    """The bf16 dot kernels chosen as on AMD (``host.bf16_dot_pays``): on an
    Intel CPU the automatic choice keeps the f32 kernels; the kernels and
    their instructions are the same on both."""
    from mlir_mx import host

    monkeypatch.setattr(host, "cpu_vendor", lambda: "AuthenticAMD")


def bf16(x: np.ndarray) -> np.ndarray:
    """``x`` rounded to bf16 (nearest even), as f32."""
    return x.astype(ml_dtypes.bfloat16).astype(np.float32)


def run_bf16(x, qb, acc, schedule: str, threads: int, tiled: bool = False, **cfg) -> np.ndarray:
    """``acc + round_bf16(x) B`` with ``schedule``, B as its codes (row-major
    or tiled, what ``Linear`` holds) and scales, A rounded inside the kernel."""
    (m, k), n, bs = x.shape, qb.shape[1], qb.block_size
    packed = is_packed_storage((k, n), qb.element)
    prob = Problem(m, n, k, bs, None, qb.element, b_packed=packed, b_tiled=tiled, a_quant=BF16)
    entry = SCHEDULES[schedule]
    assert entry.supports(prob), (schedule, prob)
    plan = KernelPlan(entry, replace(entry.configure(prob, threads), **cfg))
    codes = np.ascontiguousarray(qb.codes)
    raw = pack_codes(codes, qb.element) if packed else codes.view(np.uint8)
    if tiled:
        raw = tile_b_codes(raw, bs, qb.element, packed)
    elif not packed:
        raw = codes  # one code per byte, the element dtype
    c = acc.copy()
    compile_module(prob, plan).invoke("matmul", x, np.array(raw), np.array(qb.scales), c)
    return c


def _operands(element, m, k, n, seed=0):
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((k, n)) * np.exp2(rng.integers(-6, 6, (1, n)))
    qb = oracle.quantize(w.astype(np.float32), element, 32, axis=0)
    x = (rng.standard_normal((m, k)) * np.exp2(rng.integers(-20, 20, (m, 1)))).astype(np.float32)
    acc = rng.standard_normal((m, n)).astype(np.float32)
    return x, qb, acc


#: (schedule, threads, (M, K, N), tiled): ragged M (not a multiple of the row
#: group) and N (not a multiple of 64: a partial last panel) included.
CASES = [
    ("bf16-small", 1, (5, 96, 80), False),
    ("bf16-small", 2, (1, 128, 256), True),
    ("bf16-prefill", 2, (61, 128, 130), False),
    ("bf16-prefill", 1, (70, 64, 128), True),
    ("decode", 2, (1, 128, 130), False),
    ("small", 1, (7, 96, 128), True),
    ("prefill", 2, (53, 128, 64), True),
]


def _rotated():
    return [(e, *CASES[(i + j) % len(CASES)]) for i, e in enumerate(FORMATS) for j in range(2)]


def _check(element, schedule, threads, shape, tiled):
    x, qb, acc = _operands(element, *shape)
    x[0, :5] = [np.nan, np.inf, -0.0, 3.4028235e38, 1.00390625]  # NaN, Inf, -0, overflow, a tie
    got = run_bf16(x, qb, acc, schedule, threads, tiled)
    want = oracle.blocked_order(bf16(x), qb, acc)
    assert same_bits(got, want).all(), np.argwhere(~same_bits(got, want))[:5]


@needs_bf16
@pytest.mark.parametrize("element, schedule, threads, shape, tiled", _rotated())
def test_bf16_inputs_give_the_exact_path_bits(amd, element, schedule, threads, shape, tiled):
    _check(element, schedule, threads, shape, tiled)


@pytest.mark.slow
@needs_bf16
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("element", FORMATS)
def test_bf16_inputs_every_format_and_schedule(amd, element, case):
    _check(element, *case)


@needs_bf16
def test_every_tile_gives_the_same_bits(amd):
    """The register tiles of the bf16 schedules (rows x vectors, K chunks)."""
    x, qb, acc = _operands("f4E2M1FN", 29, 256, 128, seed=3)
    want = oracle.blocked_order(bf16(x), qb, acc)
    for mr, nv, kcb in [(1, 4, 0), (3, 4, 2), (8, 2, 3), (12, 1, 8)]:
        got = run_bf16(x, qb, acc, "bf16-prefill", 2, True, mr=mr, nv=nv, kcb=kcb)
        assert same_bits(got, want).all(), (mr, nv, kcb)


def test_bf16_floor_keeps_every_partial_normal():
    """``units.bf16_floor``: a bf16 value at ``2^floor`` times the format's
    smallest value is at least 2^-126 in every product's grid (its bf16 ulp
    ``2^(floor-7)`` times it); one binade lower it is not (the bound is tight)."""
    for element, fmt in ELEMENT_FORMATS.items():
        q = float(decode_elements(np.ones(1, np.uint8).view(fmt.dtype), element)[0])
        e = bf16_floor(element)
        assert 2.0 ** (e - 7) * q == 2.0**-126, element
        assert 2.0 ** (e - 8) * q < 2.0**-126


def _tiny_case(element):
    """Row 1: normal bf16 values whose products with the weights' small
    values fall below 2^-126; row 2: bf16 denormals; row 3: one value just
    below the floor; the other rows ordinary."""
    x, qb, acc = _operands(element, 6, 64, 64, seed=7)
    acc[:] = 0.0
    x[1] = bf16(x[1] / np.abs(x[1]).max()) * np.float32(2.0 ** (bf16_floor(element) - 14))
    x[2, :4] = np.float32(2.0**-130)
    x[3, 7] = np.float32(2.0 ** (bf16_floor(element) - 1))
    return x, qb, acc


@needs_bf16
@pytest.mark.parametrize("element", ["f8E4M3FN", "f8E5M2", "f4E2M1FN", "i8"])
@pytest.mark.parametrize("schedule", ["bf16-small", "bf16-prefill"])
def test_denormal_inputs_and_partials_follow_the_rule(amd, element, schedule):
    """Inputs below the floor take the FMA form: the exact path's bits."""
    x, qb, acc = _tiny_case(element)
    want = oracle.blocked_order(bf16(x), qb, acc)
    got = run_bf16(x, qb, acc, schedule, 2)
    assert same_bits(got, want).all()
    assert (want[1] != 0).any()  # the tiny row contributes


@needs_bf16
def test_without_the_route_vdpbf16ps_flushes(amd, monkeypatch):
    """The route is needed: with the FMA form removed, ``vdpbf16ps`` flushes
    the tiny row's denormal products and partial sums (DAZ/FTZ) and its
    outputs leave the exact path's bits; the ordinary rows keep them."""
    x, qb, acc = _tiny_case("f8E4M3FN")
    want = oracle.blocked_order(bf16(x), qb, acc)
    monkeypatch.setattr(dot_kernel, "routed", lambda kb, flag, run, form: run)
    got = run_bf16(x, qb, acc, "bf16-small", 1)
    assert not same_bits(got[1], want[1]).all()
    assert same_bits(got[[0, 4, 5]], want[[0, 4, 5]]).all()


def test_bf16_activations_follow_the_cpu(monkeypatch):
    """The bf16 unit for bf16 activations: AVX512-BF16 (+BW), an even block,
    and a CPU where it pays (not Intel); else the f32 kernels."""
    from mlir_mx import host

    monkeypatch.setattr(host, "cpu_vendor", lambda: "AuthenticAMD")
    expect = has_features("avx512_bf16", "avx512bw")
    assert all((dot_kind(BF16, e, 32) is not None) == expect for e in FORMATS)
    monkeypatch.setattr(host, "cpu_vendor", lambda: "GenuineIntel")
    assert dot_kind(BF16, "f4E2M1FN", 32) is None
    monkeypatch.setattr(host, "cpu_vendor", lambda: "AuthenticAMD")
    monkeypatch.setenv("MLIR_MX_CPU_FEATURES", "-avx512_bf16")
    assert dot_kind(BF16, "f4E2M1FN", 32) is None
    prob = Problem(8, 64, 64, 32, None, "f4E2M1FN", b_packed=True, b_tiled=True, a_quant=BF16)
    assert SCHEDULES["small"].supports(prob) and not SCHEDULES["bf16-small"].supports(prob)


def test_mlir_mx_bf16_dot_overrides_the_vendor(monkeypatch):
    from mlir_mx import host

    monkeypatch.setattr(host, "cpu_vendor", lambda: "GenuineIntel")
    assert not host.bf16_dot_pays()
    monkeypatch.setenv("MLIR_MX_BF16_DOT", "on")
    assert host.bf16_dot_pays()
    monkeypatch.setattr(host, "cpu_vendor", lambda: "AuthenticAMD")
    monkeypatch.setenv("MLIR_MX_BF16_DOT", "off")
    assert not host.bf16_dot_pays() and dot_kind(BF16, "f4E2M1FN", 32) is None
    monkeypatch.setenv("MLIR_MX_BF16_DOT", "")
    assert host.bf16_dot_pays()

"""The dot kernels (``mlir_mx.kernels.dot.kernel``) give the f32 kernels' bits.

* Integer pairs (every pair of FP4, FP6, INT8) and bf16 pairs (with FP8)
  against the f32 kernels, at every shape class (decode, small, prefill with
  a K-chunk tail), odd M, N not a multiple of the panel, 1 and 2 threads;
  the quick set rotates the shapes over the pairs, ``-m slow`` runs them all.
* Special values (NaN scales, code-0 and code-254 scales, saturated codes,
  E4M3/E5M2 NaN and Inf codes) against an exact model of the blocked order
  with the block step ``t = p * sb; c = fma(t, sa, c)`` (``dot_cases.model``).
* Without AVX512-VNNI (simulated: ``MLIR_MX_CPU_FEATURES=-avx512_vnni``) the
  AVX512BW fallbacks give the same bits; without AVX512_BF16 no bf16 kind is
  chosen (the f32 kernels serve those pairs).
* Without AVX-512 (simulated: :data:`AVX2_MASKS`, AVX2 + AVX-VNNI and plain
  AVX2) the 256-bit kernels give the same bits, and the format tables show
  that no ``vpmaddubsw`` pair sum can saturate for any pair.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from dot_cases import (
    AVX2_MASKS,
    AVX2_PAIRS,
    FP8,
    INTS,
    dot_schedule,
    f32_bits,
    mask_avx2,
    model,
    run_dot,
    same_bits,
)
from matmul_cases import case

from mlir_mx.host import has_features
from mlir_mx.kernels import SCHEDULES, Problem, shape_class
from mlir_mx.kernels.dot.isa import DotOps, dot_isa
from mlir_mx.kernels.dot.tiles import DECODE_PREFETCH, DECODE_STREAMS
from mlir_mx.kernels.dot.units import a_offset_run, dot_kind, int_max, value_table
from mlir_mx.kernels.matmul.stream import TILED_PREFETCH
from mlir_mx.numerics import ELEMENT_FORMATS, MXArray, decode_elements, finite_codes

needs_bw = pytest.mark.skipif(
    not has_features("avx512bw"), reason="the CPU has no AVX512BW: no integer dot kernel"
)
#: The integer dot kernels: AVX512BW (x86; the AVX2 ones are tested masked
#: below) or asimddp (aarch64, NEON ``sdot``/``usdot``; under qemu in the
#: aarch64 job, where these tests check the same numpy-oracle bits as on x86).
needs_int = pytest.mark.skipif(
    not (has_features("avx512bw") or has_features("asimddp")),
    reason="the CPU has neither AVX512BW nor asimddp: no integer dot kernel",
)
needs_bf16 = pytest.mark.skipif(
    not has_features("avx512_bf16", "avx512bw"), reason="the CPU has no AVX512_BF16"
)

#: (M, K, N, overrides): odd M, N not a multiple of 64, one per shape class
#: (prefill with a K-chunk tail).
SHAPES = [(1, 128, 100, {}), (5, 128, 80, {}), (13, 256, 130, {"kcb": 3})]
INT_PAIRS = list(itertools.product(INTS, INTS))
BF16_PAIRS = [(a, b) for a, b in itertools.product(INTS + FP8, INTS + FP8) if a in FP8 or b in FP8]
#: The i8-unit pairs whose B has no 16-entry table but fits the A-offset mode
#: (E2M3 B, made signed per chunk), from the format tables.
A_OFFSET_TABLELESS = [
    (a, b)
    for a, b in INT_PAIRS
    if not value_table(b) and a_offset_run(a, b, 32) and max(int_max(a), int_max(b)) <= 128
]


def _check(ea, eb, shape, threads, unit, source="records"):
    m, k, n, overrides = shape
    if unit == "int" and dot_kind(ea, eb, 32) is None:  # NEON: E3M2 pairs (int16)
        pytest.skip(f"no integer dot unit for {ea} x {eb} on this CPU (f32 kernels serve it)")
    (qa, qb), acc, _exact, _bound = case(m, k, n, ea, eb, seed=m + k)
    want = f32_bits(qa, qb, acc)
    got = run_dot(qa, qb, acc, dot_schedule(unit, shape_class(m)), threads, source, **overrides)
    same = same_bits(got, want)
    assert same.all(), (np.argwhere(~same)[:5], got[~same][:5], want[~same][:5])


def _rotated(pairs):
    """Each pair once, the shape, thread count and B source rotating."""
    return [
        (a, b, SHAPES[i % 3], 1 + (i // 3) % 2, ("records", "codes")[(i // 2) % 2])
        for i, (a, b) in enumerate(pairs)
    ]


def _ids(cases):
    return [f"{a}-{b}-{shape_class(s[0])}-t{t}-{src}" for a, b, s, t, src in cases]


@needs_int
@pytest.mark.parametrize(
    "ea, eb, shape, threads, source", _rotated(INT_PAIRS), ids=_ids(_rotated(INT_PAIRS))
)
def test_integer_pairs_equal_f32_kernels(ea, eb, shape, threads, source):
    _check(ea, eb, shape, threads, "int", source)


@needs_bf16
@pytest.mark.parametrize(
    "ea, eb, shape, threads, source",
    _rotated(BF16_PAIRS)[::3],
    ids=_ids(_rotated(BF16_PAIRS)[::3]),
)
def test_bf16_pairs_equal_f32_kernels(ea, eb, shape, threads, source):
    _check(ea, eb, shape, threads, "bf16", source)


@needs_bw
@pytest.mark.parametrize("eb", INTS)
@pytest.mark.parametrize("shape", SHAPES, ids=[shape_class(s[0]) for s in SHAPES])
def test_b_from_codes_for_every_b_format_and_shape(eb, shape):
    """B as the Runner passes it (codes, FP4/FP6 packed) at every schedule:
    the per-call expansion and the decode sweep."""
    ea = INTS[(INTS.index(eb) + SHAPES.index(shape)) % len(INTS)]
    _check(ea, eb, shape, 2, "int", "codes")


SOURCES = ("records", "codes")
ALL = [(a, b, s, t, src) for a, b in INT_PAIRS for s in SHAPES for t in (1, 2) for src in SOURCES]
ALL_BF16 = [
    (a, b, s, t, src) for a, b in BF16_PAIRS for s in SHAPES[1:] for t in (1, 2) for src in SOURCES
]


@pytest.mark.slow
@needs_int
@pytest.mark.parametrize("ea, eb, shape, threads, source", ALL, ids=_ids(ALL))
def test_integer_pairs_every_shape_and_thread_count(ea, eb, shape, threads, source):
    _check(ea, eb, shape, threads, "int", source)


@pytest.mark.slow
@needs_bf16
@pytest.mark.parametrize("ea, eb, shape, threads, source", ALL_BF16, ids=_ids(ALL_BF16))
def test_bf16_pairs_every_shape_and_thread_count(ea, eb, shape, threads, source):
    _check(ea, eb, shape, threads, "bf16", source)


def _special(qa: MXArray, qb: MXArray, rng) -> tuple[MXArray, MXArray]:
    """Saturated and NaN/Inf codes, NaN, code-0 and code-254 scales."""
    a_codes, b_codes = qa.codes.copy(), qb.codes.copy()
    a_sc, b_sc = qa.scales.view(np.uint8).copy(), qb.scales.view(np.uint8).copy()
    for codes, fmt in ((a_codes, qa.format), (b_codes, qb.format)):
        raw = codes.view(np.uint8)
        fin = finite_codes(fmt.name)
        vals = decode_elements(fin, fmt.name)
        top = [fin.view(np.uint8)[np.argmax(vals)], fin.view(np.uint8)[np.argmin(vals)]]
        if fmt.is_int:
            top.append(0x80)  # -128: valid, never produced by quantize
        raw[:, :32] = rng.choice(np.array(top, np.uint8), raw[:, :32].shape)
        if fmt.has_nan:  # a NaN and (E5M2) an Inf code
            raw[0, 3] = 0x7F
            raw[-1, -5] = 0x7C if fmt.has_inf else 0xFF
    a_sc[0, 0], a_sc[-1, 0], b_sc[0, -1] = 0, 254, 255
    b_sc[1, :3], a_sc[1 % a_sc.shape[0], 1] = 254, 0
    return (
        MXArray(a_codes, a_sc, qa.element, qa.block_size),
        MXArray(b_codes, b_sc, qb.element, qb.block_size, axis=0),
    )


@needs_int
@pytest.mark.parametrize(
    "ea, eb, unit",
    [("f4E2M1FN", "i8", "int"), ("f6E3M2FN", "f6E2M3FN", "int"), ("i8", "i8", "int")]
    + ([("f8E5M2", "f8E4M3FN", "bf16")] if has_features("avx512_bf16") else []),
)
@pytest.mark.parametrize("cls, source", [("decode", "records"), ("prefill", "codes")])
def test_special_values_follow_the_blocked_order(ea, eb, unit, cls, source):
    if dot_kind(ea, eb, 32) is None:  # NEON: E3M2 pairs (int16)
        pytest.skip(f"no dot unit for {ea} x {eb} on this CPU (f32 kernels serve it)")
    rng = np.random.default_rng(7)
    m = 1 if cls == "decode" else 7  # the prefill schedule runs any M
    (qa, qb), acc, _e, _b = case(m, 96, 70, ea, eb, seed=11)
    qa, qb = _special(qa, qb, rng)
    kcb = {"kcb": 2} if cls == "prefill" else {}  # a K-chunk tail
    got = run_dot(qa, qb, acc, dot_schedule(unit, cls), 2, source, **kcb)
    want = model(qa, qb, acc)
    same = same_bits(got, want)
    assert same.all(), (np.argwhere(~same)[:5], got[~same][:5], want[~same][:5])
    assert np.isnan(got).any()
    # A NaN code in A's only row (decode, a format with NaN: E5M2 here) makes
    # every output NaN, as the model says; elsewhere some outputs stay finite.
    if not (m == 1 and qa.format.has_nan):
        assert not np.isnan(got).all()


@needs_bw
@pytest.mark.parametrize("ea, eb", [("f4E2M1FN", "f4E2M1FN"), ("i8", "f6E2M3FN"), ("i8", "i8")])
def test_without_vnni_the_bw_fallback_gives_the_same_bits(monkeypatch, ea, eb):
    monkeypatch.setenv("MLIR_MX_CPU_FEATURES", "-avx512_vnni")
    assert dot_kind(ea, eb, 32).name == ("i16" if ea == "i8" else "i8")  # A is the s8 operand
    _check(ea, eb, SHAPES[2], 1, "int")
    _check(ea, eb, SHAPES[0], 2, "int", "codes")


def _decode_config(ea: str, eb: str, threads: int):
    """int-decode's config for a 1 x 96 x 300 problem on B's records, on this CPU."""
    prob = Problem(1, 300, 96, 32, ea, eb, b_dot=dot_kind(ea, eb, 32).name)
    return SCHEDULES[dot_schedule("int", "decode")].configure(prob, threads)


#: Decode with 5 panels (the last 44 columns wide): at 1 thread 2 runs of 2
#: panels side by side and 1 left over; at 2 threads 3 and 2 panels.
SIDE_BY_SIDE = (1, 96, 300, {})


@needs_int
@pytest.mark.parametrize("ea, eb", [("f4E2M1FN", "f4E2M1FN"), ("i8", "f6E2M3FN"), ("i8", "i8")])
@pytest.mark.parametrize("threads", [1, 2])
def test_decode_reads_panels_side_by_side_with_the_same_bits(ea, eb, threads):
    """int-decode from records: 2 panels side by side, each run prefetched
    (Intel's config), 3 runs, a remainder of every size, and one run with no
    prefetch (the others') give the same bits on any CPU."""
    _check(ea, eb, (*SIDE_BY_SIDE[:3], {"streams": 2, "prefetch": 8}), threads, "int")
    _check(ea, eb, (*SIDE_BY_SIDE[:3], {"streams": 3}), threads, "int")
    _check(ea, eb, (*SIDE_BY_SIDE[:3], {"streams": 1, "prefetch": 0}), threads, "int")


@needs_bw
@pytest.mark.parametrize("vendor", ["GenuineIntel", "AuthenticAMD", "HygonGenuine", ""])
def test_decode_prefetches_on_intel_only(monkeypatch, vendor):
    """The software prefetch of the decode streams follows the vendor
    (``host.software_prefetch``): Intel's 2 runs prefetched 8 records ahead
    and the tiled f32 stream's 4 tiles; elsewhere one sequential run."""
    from mlir_mx import host

    monkeypatch.setattr(host, "cpu_vendor", lambda: vendor)
    intel = vendor == "GenuineIntel"
    assert host.software_prefetch() is intel
    cfg = _decode_config("i8", "f4E2M1FN", 1)
    want = (DECODE_STREAMS, DECODE_PREFETCH) if intel else (1, 0)
    assert (cfg.streams, cfg.prefetch) == want
    assert (DECODE_STREAMS, DECODE_PREFETCH) == (2, 8)
    tiled = Problem(1, 256, 256, 32, None, "f4E2M1FN", b_tiled=True)
    stream = SCHEDULES["decode"].configure(tiled, 1)
    assert stream.prefetch == (TILED_PREFETCH if intel else 0)


def test_dot_kind_follows_the_cpu_features(monkeypatch):
    monkeypatch.setenv("MLIR_MX_CPU_FEATURES", "none")
    assert all(dot_kind(a, b, 32) is None for a in INTS + FP8 for b in INTS + FP8)
    monkeypatch.setenv("MLIR_MX_CPU_FEATURES", "-avx512_bf16")
    assert dot_kind("f8E4M3FN", "f4E2M1FN", 32) is None
    assert dot_kind("f6E3M2FN", "f6E3M2FN", 128) is None  # 128 * 448^2 >= 2^24: inexact
    assert dot_kind(None, "f4E2M1FN", 32) is None  # an f32 A: no dot unit


# -- without AVX-512: the 256-bit kernels (kernels/dot/isa.py) ---------------------------


def _int_values(element: str) -> np.ndarray:
    """Every value of ``element`` (every code: INT8's -128 too) as the
    integer ``value * 2^int_exp2``."""
    fmt = ELEMENT_FORMATS[element]
    codes = np.arange(fmt.num_codes, dtype=np.uint8).view(fmt.dtype)
    vals = decode_elements(codes, element) * 2.0**fmt.int_exp2
    assert (vals == np.round(vals)).all()
    return np.unique(vals.astype(np.int64))


def _check_a_offset(aa: np.ndarray, bb: np.ndarray, run: int) -> None:
    """The A-offset mode (kernels/dot/isa.py): ``u = a + 128`` unsigned, ``s =
    b`` signed, one pair sum (and ``128 (b + b')``, the lane's start) inside
    int16; each int16 lane adds ``run`` K groups (``2 run`` products) with
    wrapping ``vpaddw`` from ``-128 *`` its sum of B, so it ends exact when
    the lane's true sum fits int16, for any A and B values."""
    u, s = aa + 128, bb
    assert (u * s - 128 * bb == aa * bb).all()
    assert 0 <= u.min() and u.max() <= 255 and -128 <= s.min() and s.max() <= 127
    assert -(2**15) <= 2 * (u * s).min() and 2 * (u * s).max() < 2**15
    assert 2 * 128 * np.abs(bb).max() < 2**15  # one pair of the lane's start
    assert 2 * run * np.abs(aa * bb).max() < 2**15  # the lane's exact end
    assert 8 % run == 0  # whole runs per block of 32


@pytest.mark.parametrize("isa", AVX2_MASKS)
def test_avx2_pair_sums_cannot_saturate(monkeypatch, isa):
    """For every FP4/FP6/INT8 pair, from the format tables: the operands the
    chosen unit feeds its instructions fit their types, and no ``vpmaddubsw``
    pair sum leaves int16 (its saturating intermediate), nor the int16 sum of
    a run of them; INT8 x INT8 (-128 x -128) is the one narrow pair that
    cannot use it."""
    mask_avx2(monkeypatch, isa)
    a_offset = []
    for ea, eb in INT_PAIRS:
        a, b = _int_values(ea), _int_values(eb)
        kind = dot_kind(ea, eb, 32)
        ops = dot_isa(kind, ea, eb)
        assert not ops.wide and ops.vnni == (isa == "avx-vnni"), (ea, eb, ops)
        aa, bb = np.meshgrid(a, b)
        if kind.name == "i16":  # int16 operands, vpmaddwd's int32 pair sums
            assert max(abs(a).max(), abs(b).max()) < 2**15
            assert 2 * abs(a).max() * abs(b).max() < 2**31
            continue
        assert kind.name == "i8", (ea, eb, kind)
        if ops.sign:  # |a| unsigned, b * sign(a) signed: their products are a * b
            u, s = np.abs(aa), bb * np.sign(aa)
        else:  # b + 128 unsigned, a signed; the compensation -128 * sum a
            u, s = bb + 128, aa
        assert (u * s == aa * bb + (0 if ops.sign else 128 * aa)).all()
        assert 0 <= u.min() and u.max() <= 255 and -128 <= s.min() and s.max() <= 127
        if not ops.vnni:  # two products into an int16, saturating; `run` of them summed
            prods, run = u * s, DotOps(kind, ops, ea, eb, None).run
            assert -(2**15) <= 2 * run * prods.min() and 2 * run * prods.max() < 2**15, (ea, eb)
        run = a_offset_run(ea, eb, 32)
        if not ops.vnni and run:  # the expanding kernels' A-offset mode
            _check_a_offset(aa, bb, run)
            a_offset.append((ea, eb))
    # Plain AVX2: every i8-unit pair with FP4 or E2M3 B (|b| <= 60), W4A8 among them.
    assert all(np.abs(_int_values(eb)).max() <= 60 for _, eb in a_offset)
    assert {p for p in A_OFFSET_TABLELESS if isa == "avx2"} <= set(a_offset)
    assert (("i8", "f4E2M1FN") in a_offset) == (isa == "avx2"), a_offset
    assert (("i8", "f6E2M3FN") in a_offset) == (isa == "avx2"), a_offset
    worst = 2 * _int_values("i8").min() ** 2  # -128 x -128, twice: one above int16
    assert worst >= 2**15 and (isa == "avx-vnni") == (dot_kind("i8", "i8", 32).name == "i8")


#: (mask, A, B): every mapping on plain AVX2; on AVX-VNNI the i8 (INT8 x INT8
#: there) and i16 units.
AVX2_CASES = [("avx2", a, b) for a, b in AVX2_PAIRS.values()] + [
    ("avx-vnni", *AVX2_PAIRS[m]) for m in ("i16", "wide")
]


@pytest.mark.parametrize("isa, ea, eb", AVX2_CASES)
def test_avx2_kernels_equal_f32_kernels(monkeypatch, isa, ea, eb):
    """The 256-bit dot kernels give the f32 kernels' bits (masked to AVX2):
    odd M, N tails, every shape class, 1 and 2 threads, records and codes."""
    mask_avx2(monkeypatch, isa)
    cfg = _decode_config(ea, eb, 1)  # one run, no prefetch: not measured on 16 ymm registers
    assert (cfg.streams, cfg.prefetch) == (1, 0)
    i = AVX2_CASES.index((isa, ea, eb))
    _check(ea, eb, SHAPES[i % 3], 1 + i % 2, "int", SOURCES[i % 2])
    _check(ea, eb, SHAPES[(i + 1) % 3], 2 - i % 2, "int", SOURCES[(i + 1) % 2])


@pytest.mark.parametrize("ea, eb", A_OFFSET_TABLELESS)
def test_avx2_a_offset_runs_equal_f32_kernels(monkeypatch, ea, eb):
    """The A-offset mode with E2M3 B (plain AVX2): its int16 lanes end every
    2 (INT8 A), 4 (E2M3 A) or 8 (FP4 A) K groups, and B's expanded bytes are
    made signed per chunk; the f32 kernels' bits at small and prefill, records
    and codes, 1 and 2 threads (the FP4-B pairs: test_avx2_kernels_equal_f32_kernels)."""
    mask_avx2(monkeypatch, "avx2")
    assert dot_kind(ea, eb, 32).name == "i8" and a_offset_run(ea, eb, 32) in (2, 4, 8)
    _check(ea, eb, SHAPES[1], 1, "int", "records")
    _check(ea, eb, SHAPES[2], 2, "int", "codes")


AVX2_ALL = [(isa, *case) for isa in AVX2_MASKS for case in ALL]


@pytest.mark.slow
@pytest.mark.parametrize(
    "isa, ea, eb, shape, threads, source", AVX2_ALL, ids=[f"{c[0]}-{i}" for c, i in
                                                           zip(AVX2_ALL, _ids(ALL) * 2, strict=True)]
)  # fmt: skip
def test_avx2_every_pair_shape_and_thread_count(monkeypatch, isa, ea, eb, shape, threads, source):
    mask_avx2(monkeypatch, isa)
    _check(ea, eb, shape, threads, "int", source)


@pytest.mark.parametrize("isa, ea, eb", AVX2_CASES[:3] + AVX2_CASES[-2:-1])
@pytest.mark.parametrize("cls, source", [("decode", "records"), ("prefill", "codes")])
def test_avx2_special_values_follow_the_blocked_order(monkeypatch, isa, ea, eb, cls, source):
    """Saturated codes (INT8 -128), code-0, 254 and NaN scales on the 256-bit kernels."""
    mask_avx2(monkeypatch, isa)
    m = 1 if cls == "decode" else 7
    (qa, qb), acc, _e, _b = case(m, 96, 70, ea, eb, seed=11)
    qa, qb = _special(qa, qb, np.random.default_rng(7))
    got = run_dot(qa, qb, acc, dot_schedule("int", cls), 2, source, **({"kcb": 2} if m > 1 else {}))
    same = same_bits(got, model(qa, qb, acc))
    assert same.all(), (np.argwhere(~same)[:5], got[~same][:5])
    assert np.isnan(got).any() and not np.isnan(got).all()


def test_avx2_dot_kind_needs_avx2(monkeypatch):
    """Without AVX2 (and AVX-512) no integer dot unit: the f32 kernels."""
    monkeypatch.setenv("MLIR_MX_CPU_FEATURES", AVX2_MASKS["avx2"][0] + " -avx2")
    assert all(dot_kind(a, b, 32) is None for a, b in INT_PAIRS)

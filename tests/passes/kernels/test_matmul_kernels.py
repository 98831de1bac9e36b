"""``mx-matmul-kernels``: the generated kernels against the oracle and each other.

Every schedule class (decode, small, prefill), every element format (mx x f32
and mx x mx), 1 and 2 threads, odd M and N not a multiple of any tile: the
result is within the bound of :mod:`matmul_cases` of the exact f64 result and
**bit-identical** to the blocked order of the numpy oracle
(``mlir_mx.oracle.blocked_order``), as is the
``mx-to-linalg{matmul-lowering=blocked}`` scalar lowering it replaces (the
same f32 operations per element), hence identical across schedules and
thread counts.  The table (AVX512-VBMI) and the f16
widening paths are both checked when the machine has VBMI.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from format_cases import INTEGRAL, NON_INTEGRAL, SUB_BYTE
from matmul_cases import ELEMENTS, case, kernel_runner, matmul_text, schedule_cases
from mlir import ir

import mlir_mx.kernels.common.problem as kernel_problem
from mlir_mx import oracle
from mlir_mx.dialect import load_dialect, parse_module, print_module
from mlir_mx.execution import Runner
from mlir_mx.host import MAX_THREADS, has_features
from mlir_mx.kernels import SCHEDULES, Problem, choose, kernel_module, plan_kernel, shape_class
from mlir_mx.kernels.common.codec import f16_factor
from mlir_mx.kernels.common.problem import MIN_TASK_MACS, task_count, tile_b_codes
from mlir_mx.numerics import ELEMENT_FORMATS, decode_elements, pack_codes
from mlir_mx.passes.pipeline import build_pass_manager
from mlir_mx.pipelines import load_pipeline

REFERENCE = "mx-to-linalg{matmul-lowering=blocked}," + load_pipeline("lower-to-llvm")
# Quick set: every element type as A and as B (mx x mx, rotated) and two mx x f32.
_PAIRS = [(e, ELEMENTS[(i + 1) % len(ELEMENTS)]) for i, e in enumerate(ELEMENTS)] + [
    ("f8E4M3FN", None),
    ("f4E2M1FN", None),
]


#: The features of an AVX2 + FMA + F16C CPU (AMD Zen 2/3), masked on this one.
NO_AVX512 = (
    "-avx512f -avx512bw -avx512vl -avx512vbmi -avx512_vnni -avx512_bf16 -avx512_fp16 -avx_vnni"
)


@pytest.fixture(autouse=True)
def _split_small_work(monkeypatch):
    """The test problems are small: without this a call would run on one task
    whatever its thread count (``task_count``), and the threaded code paths
    would go untested."""
    monkeypatch.setattr(kernel_problem, "MIN_TASK_MACS", 1)


def _bits(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x).view(np.uint32)


def _run(text, args, acc, **kw) -> np.ndarray:
    c = acc.copy()
    got = Runner(text, **kw).invoke("mm", *args, c)
    np.testing.assert_array_equal(_bits(c), _bits(got))  # updated in place
    return got


def _check(m, k, n, ea, eb, runs, reference=True):
    """Each of ``runs`` (Runner kwargs) within the bound and equal to the bits
    of the blocked order (the numpy oracle ``blocked_order``), and so is the
    blocked linalg lowering (``reference``: compiled and compared too)."""
    text = matmul_text(m, k, n, ea, eb)
    args, acc, exact, bound = case(m, k, n, ea, eb)
    ref = oracle.blocked_order(*args, acc)
    assert np.all(np.abs(ref - exact) <= bound)
    if reference:
        lowered = _run(text, args, acc, pipeline=REFERENCE)
        assert np.array_equal(_bits(lowered), _bits(ref)), (
            "the blocked lowering is not the blocked order"
        )
    for kw in runs:
        got = _run(text, args, acc, **kw)
        err = np.abs(got - exact)
        assert np.all(err <= bound), f"{kw}: max err/bound {np.max(err / bound):.3g}"
        assert np.array_equal(_bits(got), _bits(ref)), f"{kw}: not bit-identical to the reference"


def _shapes() -> list[tuple[int, int, int]]:
    """The distinct problems of :func:`schedule_cases`, one per shape class."""
    return sorted({(m, k, n) for _s, m, k, n in schedule_cases()})


@pytest.mark.parametrize("ea,eb", _PAIRS, ids=lambda x: x or "f32")
def test_every_format_every_class(ea, eb):
    """Every schedule of the registry at 1 thread, in the shape class of each,
    bit-identical to the blocked order of the oracle; the automatic choice at
    2 threads on one of the problems, the pairs taking them in turn (the rest:
    ``test_every_format_automatic_choice_everywhere``, slow); the linalg
    reference too, at the largest problem."""
    shapes = _shapes()
    _every_class(ea, eb, {shapes[_PAIRS.index((ea, eb)) % len(shapes)]})


def _every_class(ea, eb, auto: set) -> None:
    """Every schedule at 1 thread in its shape class; the automatic choice at
    2 threads on the problems ``auto``; the linalg reference at the largest."""
    cases = schedule_cases()
    largest = max((m * k * n, (m, k, n)) for _s, m, k, n in cases)[1]
    for schedule, m, k, n in cases:
        runs = [dict(threads=1, schedule=schedule)]
        if (m, k, n) in auto:
            runs.append(dict(threads=2))
        _check(m, k, n, ea, eb, runs, reference=(m, k, n) == largest)


def test_the_pairs_take_every_problem_in_turn():
    shapes = _shapes()
    assert len(_PAIRS) >= len(shapes)
    assert {shapes[i % len(shapes)] for i in range(len(_PAIRS))} == set(shapes)


@pytest.mark.slow
@pytest.mark.parametrize("ea,eb", _PAIRS, ids=lambda x: x or "f32")
def test_every_format_automatic_choice_everywhere(ea, eb):
    """The automatic choice at 2 threads on every problem of every pair."""
    for m, k, n in _shapes():
        _check(m, k, n, ea, eb, [dict(threads=2)], reference=False)


@pytest.mark.parametrize("schedule", list(SCHEDULES))
@pytest.mark.parametrize("m,k,n", [(1, 32, 1), (1, 64, 16), (3, 32, 65), (17, 128, 64)])
def test_odd_shapes(schedule, m, k, n):
    _check(m, k, n, "f8E4M3FN", "f8E4M3FN", [dict(schedule=schedule, threads=2)])


def test_f16_widening_path_equals_table_path(monkeypatch):
    """Without VBMI the kernels widen through f16; same bits either way."""
    runs = [dict(threads=1, schedule=s) for s, m, _k, _n in schedule_cases() if m > 1]
    if has_features("avx512vbmi"):  # the table path, which this machine uses
        _check(9, 96, 100, "f8E4M3FN", "f4E2M1FN", runs)
    monkeypatch.setenv("MLIR_MX_CPU_FEATURES", "-avx512vbmi")
    assert not has_features("avx512vbmi")
    _check(9, 96, 100, "f8E4M3FN", "f4E2M1FN", runs)
    _check(9, 96, 100, "f6E3M2FN", "f8E5M2", runs)
    # No AVX-512 intrinsics at all: FP4 through f16 too (LLVM still picks the
    # host's vector instructions for the generic ops).
    monkeypatch.setenv("MLIR_MX_CPU_FEATURES", "-avx512f")
    _check(9, 96, 100, "f4E2M1FN", "f4E2M1FN", runs)


def _every_code_case(element: str, m: int, n: int):
    """(A, B codes, B scales, want): row 0 of B holds every code of ``element``
    (column j code ``j % codes``), the other rows code 0, scales 1, A ones:
    ``C = 0 + A x B`` is each code's exact value (+0 for -0: the sum starts at +0)."""
    fmt = ELEMENT_FORMATS[element]
    codes = np.zeros((32, n), np.uint8)
    codes[0] = np.arange(n) % fmt.num_codes
    values = decode_elements(codes[0].view(fmt.dtype), fmt).astype(np.float32)
    want = np.broadcast_to(np.float32(0) + values, (m, n))
    scales = np.full((1, n), 127, np.uint8).view(ml_dtypes.float8_e8m0fnu)
    return np.ones((m, 32), np.float32), codes, scales, want


@pytest.mark.parametrize("element", ELEMENTS)
@pytest.mark.parametrize("features", ["", NO_AVX512], ids=["host", "avx2"])
def test_every_code_through_the_kernels(element, features, monkeypatch):
    """Every code of every format through each f32 schedule (its shape class's
    M; N with a tail; packed, and tiled for decode, where the format packs)
    with the host's widening and with an AVX2 CPU's (FP4 through a vpshufb
    table), each equal to the oracle's values, hence to each other."""
    monkeypatch.setenv("MLIR_MX_CPU_FEATURES", features)
    fmt = ELEMENT_FORMATS[element]
    for name, m, _k, _n in schedule_cases():
        s = SCHEDULES[name]
        if s.unit is not None:  # the f32 kernels only
            continue
        for packed in (False, True) if fmt.is_sub_byte else (False,):
            tiled = packed and m == 1
            n = 256 if tiled else fmt.num_codes + 20  # a tail of 4 columns (tiles: 64)
            a, codes, scales, want = _every_code_case(element, m, n)
            prob = Problem(m, n, 32, 32, None, element, b_packed=packed, b_tiled=tiled)
            arg = pack_codes(codes.view(fmt.dtype), element) if packed else codes.view(fmt.dtype)
            if tiled:
                arg = tile_b_codes(arg, 32, element, packed)
            c = np.zeros((m, n), np.float32)
            kernel_runner(prob, s.name, 2).matmul(a, arg, scales, c)
            nan = np.isnan(want)
            np.testing.assert_array_equal(np.isnan(c), nan, err_msg=s.name)
            np.testing.assert_array_equal(_bits(c[~nan]), _bits(want[~nan]), err_msg=s.name)


@pytest.mark.parametrize(
    "features", ["", "-avx512vbmi", NO_AVX512], ids=["host", "avx512-no-vbmi", "avx2"]
)
@pytest.mark.parametrize("tiled", [False, True], ids=["row-major", "tiled"])
def test_the_block_nan_test_equals_the_per_code_mapping(features, tiled, monkeypatch):
    """The decode kernel's per-block NaN test for E4M3 (``Decoder.block_nan``:
    the NaN codes widened to a finite value, their columns made NaN after
    the block) against the per-code mapping: NaN codes of both signs at
    every row position of a block, in tail columns, beside an Inf and a zero
    activation; the other columns the same bits."""
    from mlir_mx.kernels.matmul import stream

    monkeypatch.setenv("MLIR_MX_CPU_FEATURES", features)
    rng = np.random.default_rng(7)
    k, n = 96, 192 if tiled else 100
    codes = rng.integers(0, 256, (k, n)).astype(np.uint8)
    codes[(codes & 0x7F) == 0x7F] = 0x10
    cols = np.arange(0, n, 3)
    codes[(7 * cols) % k, cols] = np.where(cols % 2, 0xFF, 0x7F)  # rows 0..95, both signs
    codes[:, n - 1] = 0x7F  # the last (tail) column NaN in every block
    a = rng.standard_normal((1, k)).astype(np.float32)
    a[0, 40], a[0, 41] = np.inf, 0.0
    scales = rng.integers(120, 135, (k // 32, n)).astype(np.uint8).view(ml_dtypes.float8_e8m0fnu)
    prob = Problem(1, n, k, 32, None, "f8E4M3FN", b_tiled=tiled)
    arg = codes.view(ml_dtypes.float8_e4m3fn)
    if tiled:
        arg = tile_b_codes(codes, 32, "f8E4M3FN", False)
    outs = []
    for block_nan in (True, False):
        if not block_nan:
            monkeypatch.setattr(stream._Kernel, "_block_nan", lambda self, nv, scratch: False)
        c = np.zeros((1, n), np.float32)
        kernel_runner(prob, "decode", 1).matmul(a, arg, scales, c)
        outs.append(c)
    got, want = outs
    assert np.isnan(want[0, cols]).all() and np.isnan(want[0, n - 1])
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    assert ok.sum() > n // 3
    np.testing.assert_array_equal(_bits(got[ok]), _bits(want[ok]))


#: The formats whose f16 widening multiplies by 2^(15 - bias) > 1 (E4M3, FP6).
FACTOR_ELEMENTS = [
    name
    for name, fmt in ELEMENT_FORMATS.items()
    if fmt.widening == "f16" and f16_factor(fmt) > 1
]


@pytest.mark.parametrize(
    "features", ["", "-avx512vbmi", NO_AVX512], ids=["host", "avx512-no-vbmi", "avx2"]
)
@pytest.mark.parametrize("element", FACTOR_ELEMENTS)
def test_the_widening_factor_moved_onto_a_gives_the_same_bits(features, element, monkeypatch):
    """``move_factor``: B's f16 widening leaves out ``2^(15 - bias)`` and the
    loop reads ``f * A`` instead, where ``f * A`` cannot overflow (tested per
    call).  Subnormal and tiny activations give the same bits as the multiply
    per code; an activation of 2^121 fails the test and runs the loop with
    the multiply (forcing the moved loop there overflows: the test matters)."""
    from mlir_mx.kernels.matmul import stream

    monkeypatch.setenv("MLIR_MX_CPU_FEATURES", features)
    rng = np.random.default_rng(3)
    k, n = 96, 100
    fmt = ELEMENT_FORMATS[element]
    codes = rng.integers(0, fmt.num_codes, (k, n)).astype(np.uint8)
    if fmt.has_nan:
        codes[(codes & 0x7F) == 0x7F] = 0x11
    b = codes.view(fmt.dtype)
    scales = rng.integers(100, 140, (k // 32, n)).astype(np.uint8).view(ml_dtypes.float8_e8m0fnu)
    a = (rng.standard_normal((1, k)) * 2.0 ** rng.integers(-140, 60, (1, k))).astype(np.float32)
    a[0, :4] = [1e-45, -3e-42, 2.0**-126, np.inf]  # subnormals, the smallest normal, Inf
    huge = a.copy()
    huge[0, 50] = 2.0**121
    prob = Problem(1, n, k, 32, None, element)
    orig = stream._Kernel.move_factor

    def run(x, mode):
        def move(self):
            orig(self)
            if mode == "off":
                self.afs = None
            elif mode == "forced":
                assert self.afs is not None
                self.fast = True

        monkeypatch.setattr(stream._Kernel, "move_factor", move)
        c = np.zeros((1, n), np.float32)
        kernel_runner(prob, "decode", 1).matmul(x, b, scales, c)
        return c

    def same(x, y):
        return np.array_equal(np.isnan(x), np.isnan(y)) and np.array_equal(
            _bits(x[~np.isnan(x)]), _bits(y[~np.isnan(y)])
        )

    for x in (a, huge):
        assert same(run(x, "on"), run(x, "off"))
    assert not same(run(huge, "forced"), run(huge, "off"))


@pytest.mark.parametrize("features", ["", NO_AVX512], ids=["host", "avx2"])
@pytest.mark.parametrize("element", ELEMENTS)
def test_the_row_major_sweep_gives_the_same_bits(features, element, monkeypatch):
    """Decode from a row-major B reads 8 rows at a time across the chunk's
    columns, the partials and NaN keys kept between them (``_Kernel._sweep``):
    the same bits as the whole block per tile, with a column tail, packed
    where the format packs, NaN codes included; 1 or 2 threads by the
    format's place in the table (each thread count meets both feature sets)."""
    from mlir_mx.kernels.matmul import stream

    monkeypatch.setenv("MLIR_MX_CPU_FEATURES", features)
    fmt = ELEMENT_FORMATS[element]
    rng = np.random.default_rng(11)
    k, n = 96, 148  # 9 vectors and a tail of 4 (whole FP6 groups)
    codes = rng.integers(0, fmt.num_codes, (k, n)).astype(np.uint8)
    codes[5, 7] = codes[40, n - 1] = fmt.num_codes - 1  # NaN / the largest code
    b = pack_codes(codes.view(fmt.dtype), element) if fmt.is_sub_byte else codes.view(fmt.dtype)
    scales = rng.integers(110, 140, (k // 32, n)).astype(np.uint8).view(ml_dtypes.float8_e8m0fnu)
    a = rng.standard_normal((1, k)).astype(np.float32)
    prob = Problem(1, n, k, 32, None, element, b_packed=fmt.is_sub_byte)
    sweeps, used = stream._Kernel._sweeps, []

    def patched(self, on):
        used.append(sweeps(self))
        return on and used[-1]

    threads = 1 + ELEMENTS.index(element) % 2
    outs = []
    for on in (True, False):
        monkeypatch.setattr(stream._Kernel, "_sweeps", lambda self, on=on: patched(self, on))
        c = np.zeros((1, n), np.float32)
        kernel_runner(prob, "decode", threads).matmul(a, b, scales, c)
        outs.append(c)
    assert np.array_equal(np.isnan(outs[0]), np.isnan(outs[1]))
    ok = ~np.isnan(outs[1])
    np.testing.assert_array_equal(_bits(outs[0][ok]), _bits(outs[1][ok]))
    assert used and all(used)  # the problem takes the sweep


#: The ``-ahead`` decode schedules and the plain ones they vary (issue 51).
_AHEAD = {
    s.name: s.name.removesuffix("-ahead") for s in SCHEDULES.values() if s.name.endswith("-ahead")
}


#: FP4 (the sub-byte format with the fewest codes): the Runner's MXFP4 decode.
_FP4 = min(SUB_BYTE, key=lambda n: ELEMENT_FORMATS[n].num_codes)
#: (A, B, K, N) of the -ahead test: FP8 x FP8 and FP8 x packed FP4 take the
#: f32 kernels (``decode``), FP4 x FP4 and two integral formats ``int-decode``;
#: K of 2 to 5 blocks (the last sweeps' prefetch clamped), N with a tail.
_AHEAD_CASES = [
    (NON_INTEGRAL[0], NON_INTEGRAL[0], 64, 200),
    (NON_INTEGRAL[-1], _FP4, 96, 148),
    (_FP4, _FP4, 96, 300),
    (INTEGRAL[1], INTEGRAL[-1], 160, 130),
]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("ea,eb,k,n", _AHEAD_CASES, ids=str)
def test_decode_ahead_gives_the_same_bits(ea, eb, k, n, threads):
    """The ``-ahead`` schedules (the decode sweeps of a row-major B prefetching
    the next sweep's rows, clamped at B's last rows) give the blocked order's
    bits, as the plain schedules do, at 1 and 2 threads on ragged shapes; and
    their kernels do prefetch (the plain ones' do not)."""
    runs = [dict(threads=threads, schedule=s) for pair in _AHEAD.items() for s in pair]
    _check(1, k, n, ea, eb, runs, reference=False)
    for ahead, plain in _AHEAD.items():
        prob = Problem(1, n, k, 32, ea, eb, b_packed=ELEMENT_FORMATS[eb].is_sub_byte)
        if not SCHEDULES[ahead].supports(prob):
            continue
        with ir.Context() as ctx, ir.Location.unknown():
            load_dialect(ctx)
            texts = {s: str(kernel_module(prob, plan_kernel(prob, s, threads))) for s in (ahead, plain)}
        assert texts[ahead].count("memref.prefetch") > texts[plain].count("memref.prefetch")


def test_the_ahead_schedules_are_opt_in():
    """``auto`` never picks an ``-ahead`` schedule: the plain ones prefetch
    the next sweep themselves where B is larger than the L3 (``memory_ahead``)."""
    assert _AHEAD and all(SCHEDULES[a].priority < SCHEDULES[p].priority for a, p in _AHEAD.items())


def test_a_decode_from_memory_prefetches_the_next_sweep(monkeypatch):
    """``memory_ahead``: the plain ``decode`` and ``int-decode`` of a
    row-major B larger than the L3 (its size stood in) prefetch the next
    sweep, as the ``-ahead`` schedules do; B within the L3, an unknown L3, a
    tiled B, M > 1 and a host without AVX-512 (checked there) do not; the bits are the
    blocked order's either way."""
    import mlir_mx.kernels.matmul.stream_config as stream_config

    fp8 = Problem(1, 200, 64, 32, NON_INTEGRAL[0], NON_INTEGRAL[0])
    if not has_features("avx512f"):  # an AVX2 host (or mask): never
        monkeypatch.setattr(stream_config, "l3_bytes", lambda: 1024)
        assert plan_kernel(fp8, "decode", 1).config.ahead == 0
        return
    fp4 = Problem(1, 300, 96, 32, _FP4, _FP4, b_packed=True)
    tiled = Problem(1, 256, 64, 32, None, NON_INTEGRAL[0], b_tiled=True)
    rows = Problem(4, 200, 64, 32, NON_INTEGRAL[0], NON_INTEGRAL[0])
    fp8_bytes = 64 * 200 + 2 * 200  # codes and scales
    for l3, prob, schedule, want in [
        (fp8_bytes - 1, fp8, "decode", 1),
        (fp8_bytes, fp8, "decode", 0),
        (1024, fp4, "int-decode", 1),
        (1 << 20, fp4, "int-decode", 0),
        (None, fp8, "decode", 0),
        (1024, tiled, "decode", 0),
        (1024, rows, "small", 0),
    ]:
        monkeypatch.setattr(stream_config, "l3_bytes", lambda l3=l3: l3)
        assert plan_kernel(prob, schedule, 1).config.ahead == want, (l3, prob)
    monkeypatch.setattr(stream_config, "has_features", lambda *f: False)
    monkeypatch.setattr(stream_config, "l3_bytes", lambda: 1024)
    assert stream_config.memory_ahead(fp8) == 0
    monkeypatch.undo()
    monkeypatch.setattr(stream_config, "l3_bytes", lambda: 1024)
    for ea, eb, k, n in _AHEAD_CASES[:3]:
        _check(1, k, n, ea, eb, [dict(threads=t, schedule="auto") for t in (1, 2)], reference=False)


def test_the_block_nan_test_is_where_it_pays():
    """Only E4M3 (an 8-bit format with NaN codes) on the f16 path takes it;
    the 64-code tables (VBMI) map NaN themselves, FP4/FP6/E5M2/INT8 have no
    NaN code to test."""
    from mlir_mx.kernels.common.widen import Decoder

    for name, fmt in ELEMENT_FORMATS.items():
        want = name == "f8E4M3FN"
        assert Decoder(fmt).block_nan(32) is want, name
        assert Decoder(fmt, table=not fmt.is_int).block_nan(64) is False, name


def test_small_work_runs_on_fewer_tasks_with_the_same_bits(monkeypatch):
    """``task_count``: a call starts at most one task per ``MIN_TASK_MACS`` of
    work (static M: at emission; dynamic M: per call), and the results are
    the same bits on any thread count (tasks split columns only)."""
    monkeypatch.setattr(kernel_problem, "MIN_TASK_MACS", MIN_TASK_MACS)  # the real one
    small, big = Problem(5, 40, 96, 32, None, "f4E2M1FN"), Problem(1, 8192, 8192, 32, None, "i8")
    assert task_count(None, small, None, 2) == 1
    assert task_count(None, big, None, 2) == 2
    assert task_count(None, big, None, 64) == 8192 * 8192 // MIN_TASK_MACS
    # A dynamic M, the count per call: 1 task for M = 1, 3 for M = 24 here.
    monkeypatch.setattr(kernel_problem, "MIN_TASK_MACS", 8 * 96 * 200)
    prob = Problem(None, 200, 96, 32, "f8E4M3FN", "f4E2M1FN")
    groups = [
        s.name for s in SCHEDULES.values() if s.unit is None and s.shape_class != shape_class(1)
    ]
    runners = [kernel_runner(prob, s, t) for s in groups for t in (1, 3)]
    for m in (1, 24):
        args, acc, exact, bound = case(m, 96, 200, "f8E4M3FN", "f4E2M1FN")
        outs = []
        for r in runners:
            c = acc.copy()
            r.matmul(*map(np.array, (args[0].codes, args[0].scales, args[1].codes)),
                     np.array(args[1].scales), c)  # fmt: skip
            assert np.all(np.abs(c - exact) <= bound)
            outs.append(_bits(c))
        for o in outs[1:]:
            np.testing.assert_array_equal(o, outs[0])


def test_tiles_without_avx512_give_the_same_bits(monkeypatch):
    """Without AVX-512 (16 ymm registers) the f32 row-group schedules take
    narrower tiles (``StreamConfig.adapt``, ``PrefillConfig.adapt``): the
    same bits as the reference at odd M and N, on any machine."""
    f32_groups = [
        s for s in SCHEDULES.values() if s.unit is None and s.shape_class != shape_class(1)
    ]
    prob = Problem(67, 100, 96, 32, "f4E2M1FN", "i8")
    monkeypatch.setenv("MLIR_MX_CPU_FEATURES", "-avx512f")
    for s in f32_groups:
        cfg = plan_kernel(prob, s.name, 1).config
        # At most 6 vectors of partials per register group: 12 of the 16 ymm.
        assert cfg.nv == 1 and cfg.mr <= 6, s.describe(cfg)
    decode = SCHEDULES[choose(Problem(1, 100, 96, 32, None, "i8")).name]
    assert plan_kernel(prob, decode.name, 1).config.nv <= 2  # 4 ymm of partials
    runs = [dict(threads=t, schedule=s.name) for s in f32_groups for t in (1, 2)]
    _check(67, 96, 100, "f4E2M1FN", "i8", runs)
    _check(9, 64, 80, "f6E3M2FN", "f8E4M3FN", runs)


def test_default_runner_lowers_mx_and_picks_by_shape():
    """``Runner(mx_text)`` with no pipeline runs the kernels (the old default failed)."""
    for m in (1, 8, 64):
        text = matmul_text(m, 64, 32, "f8E4M3FN", "f8E4M3FN")
        r = Runner(text, threads=1)
        assert "mx-matmul-kernels{schedule=auto threads=1}" in str(r._compiled.pipeline)
        ctx = ir.Context()
        module = parse_module(text, ctx)
        t = module.body.operations[0].regions[0].blocks[0].operations[0]
        assert t.operation.name == "mx.block_matmul"
        prob = Problem(m, 32, 64, 32, "f8E4M3FN", "f8E4M3FN")
        assert plan_kernel(prob).schedule == choose(prob)
        assert choose(prob).shape_class == shape_class(m)


def test_dynamic_m_kernel_serves_every_m():
    """One kernel module with a dynamic M (the library's case) for several M."""
    prob = Problem(None, 48, 96, 32, "f8E4M3FN", "f8E4M3FN")
    r = kernel_runner(prob, choose(prob).name, 2)
    for m in (1, 4, 5, 11):
        args, acc, exact, bound = case(m, 96, 48, "f8E4M3FN", "f8E4M3FN")
        qa, qb = args
        c = acc.copy()
        # Writeable copies: a threaded kernel may not take an MXArray's read-only
        # views (the Runner's write analysis cannot clear them, effects.py).
        r.matmul(*map(np.array, (qa.codes, qa.scales, qb.codes, qb.scales)), c)
        assert np.all(np.abs(c - exact) <= bound)


@pytest.mark.parametrize("ea,eb", [("f4E2M1FN", "f4E2M1FN"), ("f6E2M3FN", "f6E3M2FN"),
                                   ("f8E4M3FN", "f4E2M1FN"), ("f4E2M1FN", None)])  # fmt: skip
@pytest.mark.parametrize("schedule,m", [(s, m) for s, m, _k, _n in schedule_cases()])
def test_packed_subbyte_codes(ea, eb, schedule, m):
    """Packed FP4/FP6 codes (two per byte / four per three bytes) give the
    same bits as one code per byte: the blocked order of the oracle, which
    the unpacked kernels give (test_every_format_every_class)."""
    k, n = 128, 136
    args, acc, exact, bound = case(m, k, n, ea, eb)
    qa, b = args
    r = kernel_runner(Problem(m, n, k, 32, ea, eb, a_packed=True, b_packed=True), schedule, 2)

    def pk(x, e):  # 8-bit codes are stored as they are
        # (writeable copies of the MXArray's read-only views)
        return pack_codes(x, e) if ELEMENT_FORMATS[e].is_sub_byte else np.array(x)

    bargs = [pk(b.codes, eb), np.array(b.scales)] if eb else [b]
    c = acc.copy()
    r.matmul(pk(qa.codes, ea), np.array(qa.scales), *bargs, c)
    assert np.all(np.abs(c - exact) <= bound)
    np.testing.assert_array_equal(_bits(c), _bits(oracle.blocked_order(qa, b, acc)))


def test_pass_replaces_the_pair_and_frees_nothing_twice():
    """After the pass: no partials buffer, no linalg.generic, vector FMAs, and
    with threads an scf.parallel over column chunks."""
    text = matmul_text(37, 128, 130, "f8E4M3FN", "f8E4M3FN")  # split: the autouse fixture
    ctx = ir.Context()
    module = parse_module(text, ctx)
    pipe = (
        "mx-to-linalg{matmul-lowering=blocked},"
        + load_pipeline("bufferize")
        + ",mx-matmul-kernels{schedule=auto threads=2}"
    )
    build_pass_manager(pipe, ctx).run(module.operation)
    out = print_module(module)
    assert "linalg.generic" not in out
    assert "memref<37x4x130xf32>" not in out  # the (M, K/B, N) partials
    assert "vector.fma" in out
    assert "scf.parallel" in out


def test_bad_options():
    from mlir_mx.passes.pipeline import PipelineError

    ctx = ir.Context()
    from mlir_mx.kernels.registry import schedule_names

    with pytest.raises(PipelineError, match="'fast' is not one of: " + ", ".join(schedule_names())):
        build_pass_manager("mx-matmul-kernels{schedule=fast}", ctx)
    module = parse_module(matmul_text(1, 32, 16, "f8E4M3FN", None), ctx)
    for bad in (-1, MAX_THREADS + 1):  # host.check_threads' range, or 0
        pm = build_pass_manager(f"mx-to-linalg,mx-matmul-kernels{{threads={bad}}}", ctx)
        want = rf"threads: expected an integer in \[1, {MAX_THREADS}\], got {bad} \(or 0: "
        with pytest.raises(ir.MLIRError, match=want):
            pm.run(module.operation)


@pytest.mark.slow
@pytest.mark.parametrize("ea", [e for e in ELEMENTS if (e, None) not in _PAIRS])
def test_every_class_mx_times_f32(ea):
    """The MX x f32 pairs outside the default set, with the automatic choice
    on every problem (calling the default test failed: its ``_PAIRS.index``
    has no such pair)."""
    _every_class(ea, None, set(_shapes()))


@pytest.mark.slow
@pytest.mark.parametrize("ea", ELEMENTS)
@pytest.mark.parametrize("eb", ELEMENTS + (None,), ids=lambda x: x or "f32")
@pytest.mark.parametrize("m,k,n", [(1, 512, 200), (12, 256, 257), (70, 320, 300)])
def test_sweep(m, k, n, ea, eb):
    _check(m, k, n, ea, eb, [dict(threads=t, schedule=s) for t in (1, 2)
                             for s in SCHEDULES if shape_class(1) != SCHEDULES[s].shape_class])  # fmt: skip

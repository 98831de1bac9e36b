"""End to end: mx ops lowered by ``mx-to-linalg``, JIT-compiled, vs the numpy oracle.

Each module is lowered by ``mx-to-linalg`` in Python first (the Runner parses
plain upstream IR, without the mx dialect or its custom syntax), then compiled
by the Runner with the ``lower-to-llvm`` bundle, i.e. the pipeline
``mx-to-linalg,<lower-to-llvm>``.

* quantize / dequantize: BIT EXACT against :mod:`mlir_mx.numerics` for every
  element type, block axis 0 and last, rank 1 to 3, with zero blocks, NaN and
  Inf blocks, saturating values, f32 subnormals and ties.
* block_matmul (mx x f32 and mx x mx): both sides multiply the same exactly
  dequantized f32 values; only the order of the f32 sums differs.  With
  ``p_k = a_ik * b_kj`` the f32 result of any summation order satisfies
  ``|got - exact| <= K * eps * sum_k |p_k|`` (eps = 2^-24, plus one rounding
  of each product, covered by K >= 1), which is the bound asserted.
* fold_scale: bit exact against the oracle's definition (exponent add for
  in-range blocks of a power-of-two alpha, else quantize(dequantize(t)*alpha)).
"""

from __future__ import annotations

import numpy as np
import pytest
from format_cases import BY_BEHAVIOUR, pairs
from mlir import ir

from mlir_mx import numerics as N
from mlir_mx import oracle
from mlir_mx.dialect import parse_module, print_module
from mlir_mx.execution import Runner
from mlir_mx.numerics.formats import ELEMENT_FORMATS, SCALE_DTYPE
from mlir_mx.passes.pipeline import build_pass_manager
from mlir_mx.pipelines import load_pipeline

ELEMENTS = tuple(ELEMENT_FORMATS)  # every format of the one table
# (shape, axis, block size): rank 1..3, axis 0 and last.
LAYOUTS = (
    ((64,), 0, 32),
    ((4, 64), 1, 32),
    ((64, 3), 0, 32),
    ((2, 3, 32), 2, 16),
    ((32, 2, 3), 0, 16),
)


def _mx(shape, elem, bs, axis) -> str:
    dims = "x".join(str(d) for d in shape)
    ax = f", axis = {axis}" if axis != len(shape) - 1 else ""
    return f"!mx.tensor<{dims}x{elem}, block_size = {bs}, scale_type = f8E8M0FNU{ax}>"


def _f32(shape) -> str:
    return "tensor<" + "".join(f"{d}x" for d in shape) + "f32>"


def compile_mx(text: str, storage: str = "unpacked") -> Runner:
    """``mx-to-linalg`` here, then the Runner with ``lower-to-llvm``: the
    functions take and return the (codes, scales) buffers themselves, codes
    one per byte (``storage="unpacked"``) or packed (``"packed"``)."""
    ctx = ir.Context()
    module = parse_module(text, ctx)
    build_pass_manager(f"mx-to-linalg{{subbyte-storage={storage}}}", ctx).run(module.operation)
    return Runner(print_module(module), load_pipeline("lower-to-llvm"))


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.uint8)


def _assert_f32_identical(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == want.dtype == np.float32
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan)
    np.testing.assert_array_equal(got[~nan].view(np.uint32), want[~nan].view(np.uint32))


def _inputs(shape, axis, bs, fmt, rng) -> np.ndarray:
    """Values exercising every path: magnitudes over the whole f32 range, zero
    blocks, NaN and Inf blocks, saturation, exact ties, f32 subnormals."""
    moved = tuple(np.moveaxis(np.empty(shape, np.int8), axis, -1).shape)
    xm = rng.standard_normal(moved).astype(np.float32)  # blocks along the last dim
    xm *= np.exp2(rng.integers(-30, 30, moved)).astype(np.float32)
    flat = xm.reshape(-1, xm.shape[-1])  # a view: xm is contiguous
    nb = flat.shape[1] // bs
    rows = flat.shape[0]
    blocks = [(r, b) for r in range(rows) for b in range(nb)]
    order = rng.permutation(len(blocks))
    special = [blocks[i] for i in order[:8]]

    def blk(k):
        r, b = special[k % len(special)]
        return flat[r, b * bs : (b + 1) * bs]

    blk(0)[:] = 0.0  # zero block (code 0 everywhere)
    blk(1)[3] = np.nan  # NaN block -> scale 255, codes 0
    blk(2)[5] = -np.inf  # Inf block
    blk(3)[:] = rng.standard_normal(bs).astype(np.float32) * np.float32(2.0**-140)  # subnormals
    b4 = blk(4)  # saturation: amax just below the next binade
    b4[:] = rng.uniform(-1, 1, bs).astype(np.float32)
    b4[0] = np.float32(1.9999)
    b5 = blk(5)  # exact ties of the element grid
    b5[:] = (np.arange(bs) % 7 + 0.5).astype(np.float32) * np.float32(fmt.min_subnormal)
    b5[0] = np.float32(2.0**fmt.emax)
    blk(6)[:] = np.float32(3e38) * np.sign(rng.standard_normal(bs)).astype(np.float32)  # huge
    blk(7)[:] = -0.0  # negative zeros
    assert np.shares_memory(flat, xm)
    return np.ascontiguousarray(np.moveaxis(xm, -1, axis))


def _module_for(elem: str) -> str:
    funcs = []
    for i, (shape, axis, bs) in enumerate(LAYOUTS):
        t, f = _mx(shape, elem, bs, axis), _f32(shape)
        funcs.append(
            f"func.func @q{i}(%x: {f}) -> {t} {{\n"
            f"  %r = mx.quantize_block %x : {f} -> {t}\n"
            f"  return %r : {t}\n}}\n"
            f"func.func @d{i}(%t: {t}) -> {f} {{\n"
            f"  %r = mx.dequantize_block %t : {t} -> {f}\n"
            f"  return %r : {f}\n}}"
        )
    return "\n".join(funcs)


@pytest.fixture(scope="module", params=ELEMENTS)
def element_runner(request):
    return request.param, compile_mx(_module_for(request.param))


@pytest.mark.parametrize("layout", range(len(LAYOUTS)))
def test_quantize_bit_exact(element_runner, layout):
    elem, runner = element_runner
    shape, axis, bs = LAYOUTS[layout]
    fmt = ELEMENT_FORMATS[elem]
    x = _inputs(shape, axis, bs, fmt, np.random.default_rng(layout))
    codes, scales = runner.invoke(f"q{layout}", x)
    ref = oracle.quantize(x, elem, bs, axis=axis)
    np.testing.assert_array_equal(_bits(scales), _bits(ref.scales))
    np.testing.assert_array_equal(_bits(codes), _bits(ref.codes))


SUB_BYTE = [e for e in ELEMENTS if ELEMENT_FORMATS[e].is_sub_byte]


@pytest.fixture(scope="module", params=SUB_BYTE)
def packed_runner(request):
    return request.param, compile_mx(_module_for(request.param), storage="packed")


@pytest.mark.parametrize("layout", range(len(LAYOUTS)))
def test_packed_storage_bit_exact(packed_runner, layout):
    """subbyte-storage=packed: codes cross the function boundary packed
    (numerics.pack_codes, where the shape packs), both ways, bit for bit."""
    elem, runner = packed_runner
    shape, axis, bs = LAYOUTS[layout]
    fmt = ELEMENT_FORMATS[elem]
    x = _inputs(shape, axis, bs, fmt, np.random.default_rng(layout))
    ref = oracle.quantize(x, elem, bs, axis=axis)
    codes, scales = runner.invoke(f"q{layout}", x)
    want = ref.packed_codes()
    assert codes.shape == want.shape
    assert (want.shape != ref.shape) == ref.is_packed
    np.testing.assert_array_equal(_bits(codes), want)
    np.testing.assert_array_equal(_bits(scales), _bits(ref.scales))
    arg = want.view(np.int8) if ref.is_packed else np.ascontiguousarray(ref.codes)
    got = runner.invoke(f"d{layout}", arg, np.ascontiguousarray(ref.scales))
    _assert_f32_identical(got, oracle.dequantize(ref))


@pytest.mark.parametrize("layout", range(len(LAYOUTS)))
def test_dequantize_bit_exact(element_runner, layout):
    elem, runner = element_runner
    shape, axis, bs = LAYOUTS[layout]
    fmt = ELEMENT_FORMATS[elem]
    rng = np.random.default_rng(100 + layout)
    codes = rng.choice(N.finite_codes(fmt), size=shape)
    sshape = N.scale_shape(shape, bs, axis)
    scales = rng.integers(0, 256, sshape).astype(np.uint8)
    scales.flat[:4] = [0, 254, 255, 127][: scales.size]
    a = N.MXArray(codes, scales.view(SCALE_DTYPE), elem, bs, axis)
    got = runner.invoke(f"d{layout}", np.ascontiguousarray(a.codes), np.ascontiguousarray(a.scales))
    _assert_f32_identical(got, oracle.dequantize(a))


def _matmul_bound(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    k = a.shape[1]
    mag = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))
    return k * 2.0**-24 * mag


@pytest.mark.parametrize("elem", BY_BEHAVIOUR)
def test_block_matmul_mx_times_f32(elem):
    m, k, n = 8, 64, 16
    t = _mx((m, k), elem, 32, 1)
    text = (
        f"func.func @mm(%a: {t}, %b: tensor<{k}x{n}xf32>, %acc: tensor<{m}x{n}xf32>) -> tensor<{m}x{n}xf32> {{\n"
        f"  %0 = mx.block_matmul %a, %b, %acc : {t}, tensor<{k}x{n}xf32>, tensor<{m}x{n}xf32> -> tensor<{m}x{n}xf32>\n"
        f"  return %0 : tensor<{m}x{n}xf32>\n}}"
    )
    runner = compile_mx(text)
    rng = np.random.default_rng(7)
    qa = oracle.quantize(rng.standard_normal((m, k)).astype(np.float32) * 4, elem, 32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    acc = rng.standard_normal((m, n)).astype(np.float32)
    a = oracle.dequantize(qa)
    exact = acc.astype(np.float64) + a.astype(np.float64) @ b.astype(np.float64)
    got = runner.invoke("mm", qa.codes, qa.scales, b, acc.copy())
    bound = _matmul_bound(a, b) + 2.0**-24 * np.abs(exact)
    assert np.all(np.abs(got - exact) <= bound)


@pytest.mark.parametrize("ea,eb", pairs())
def test_block_matmul_mx_times_mx(ea, eb):
    m, k, n = 4, 64, 8
    ta, tb = _mx((m, k), ea, 32, 1), _mx((k, n), eb, 32, 0)
    text = (
        f"func.func @mm(%a: {ta}, %b: {tb}, %acc: tensor<{m}x{n}xf32>) -> tensor<{m}x{n}xf32> {{\n"
        f"  %0 = mx.block_matmul %a, %b, %acc : {ta}, {tb}, tensor<{m}x{n}xf32> -> tensor<{m}x{n}xf32>\n"
        f"  return %0 : tensor<{m}x{n}xf32>\n}}"
    )
    runner = compile_mx(text)
    rng = np.random.default_rng(11)
    qa = oracle.quantize(rng.standard_normal((m, k)).astype(np.float32), ea, 32)
    qb = oracle.quantize(rng.standard_normal((k, n)).astype(np.float32) * 100, eb, 32, axis=0)
    acc = np.zeros((m, n), np.float32)
    a, b = oracle.dequantize(qa), oracle.dequantize(qb)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    got = runner.invoke("mm", qa.codes, qa.scales, qb.codes, qb.scales, acc)
    # In place: the accumulator array passed in IS the result buffer.
    np.testing.assert_array_equal(acc, got)
    assert np.all(np.abs(got - exact) <= _matmul_bound(a, b) + 2.0**-24 * np.abs(exact))


@pytest.mark.parametrize(
    "alpha,power", [(8.0, 3), (2.0**-100, -100), (2.0**120, 120), (3.0, None), (-2.0, None)]
)
def test_fold_scale_constant_alpha_bit_exact(alpha, power):
    t = _mx((4, 64), "f8E4M3FN", 32, 1)
    text = (
        f"func.func @fs(%t: {t}) -> {t} {{\n"
        f"  %c = arith.constant {alpha!r} : f32\n"
        f"  %r = mx.fold_scale %t, %c : {t}, f32 -> {t}\n"
        f"  return %r : {t}\n}}"
    )
    runner = compile_mx(text)
    rng = np.random.default_rng(5)
    a = oracle.quantize(rng.standard_normal((4, 64)).astype(np.float32), "f8E4M3FN", 32)
    scales = a.scales.view(np.uint8).copy()
    scales[0] = [0, 254]  # extremes: some leave [0, 254] for every power tested
    scales[1, 0] = 255  # a NaN block stays NaN (for a power of two, codes kept)
    a = N.MXArray(a.codes, scales.view(SCALE_DTYPE), a.element, 32, 1)
    codes, sc = runner.invoke("fs", a.codes, a.scales)
    ref = oracle.fold_scale(a, alpha)  # the oracle: one meaning for every path
    if power is not None:  # the power-of-two route really moved the in-range codes
        moved = (a.scales.view(np.uint8).astype(int) + power)[2:]
        np.testing.assert_array_equal(_bits(sc)[2:], moved.astype(np.uint8))
    np.testing.assert_array_equal(_bits(sc), _bits(ref.scales))
    np.testing.assert_array_equal(_bits(codes), _bits(ref.codes))


def test_fold_scale_runtime_alpha_bit_exact():
    t = _mx((64, 4), "f6E2M3FN", 32, 0)
    text = (
        f"func.func @fs(%t: {t}, %alpha: f32) -> {t} {{\n"
        f"  %r = mx.fold_scale %t, %alpha : {t}, f32 -> {t}\n"
        f"  return %r : {t}\n}}"
    )
    runner = compile_mx(text)
    rng = np.random.default_rng(9)
    a = oracle.quantize(rng.standard_normal((64, 4)).astype(np.float32), "f6E2M3FN", 32, axis=0)
    scales = a.scales.view(np.uint8).copy()
    scales[0, :2] = [0, 254]
    scales[1, 0] = 255
    a = N.MXArray(a.codes, scales.view(SCALE_DTYPE), a.element, 32, 0)
    # runtime powers of two take the exponent route too (per block, per call)
    for alpha in (0.3, 1.0, -7.5, 2.0**-126, 2.0**-149, 2.0**127, 0.0, float("nan")):
        codes, sc = runner.invoke("fs", a.codes, a.scales, np.float32(alpha))
        ref = oracle.fold_scale(a, alpha)
        np.testing.assert_array_equal(_bits(sc), _bits(ref.scales))
        np.testing.assert_array_equal(_bits(codes), _bits(ref.codes))

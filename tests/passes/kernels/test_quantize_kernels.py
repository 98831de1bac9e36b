"""``mx-quantize-kernels``: mx.quantize_block / mx.dequantize_block compiled to the
generated kernels, against the oracle and the generic lowering they replace.

Through the Runner's default pipeline (which runs the pass), every element
format, both storages of FP4/FP6 codes at the boundary (packed, unpacked),
blocks along the last axis and along another one, a block size of 32 and odd
ones, 1 and 2 threads: the codes, scales and f32 values are those of the
oracle bit for bit, hence of the ``lower-to-llvm`` lowering (tested against
the oracle elsewhere).
"""

from __future__ import annotations

import numpy as np
import pytest
from mlir import ir

from mlir_mx import oracle
from mlir_mx.dialect import parse_module
from mlir_mx.execution import Runner
from mlir_mx.ir_utils import collect, kernel_tag
from mlir_mx.numerics import ELEMENT_FORMATS, MXArray
from mlir_mx.passes.pipeline import build_pass_manager, run_pipeline
from mlir_mx.pipelines import kernel_pipeline, load_pipeline

FORMATS = list(ELEMENT_FORMATS)


def _module(shape, element, block, axis) -> str:
    dims = "x".join(map(str, shape))
    ax = "" if axis == len(shape) - 1 else f", axis = {axis}"
    mx = f"!mx.tensor<{dims}x{element}, block_size = {block}, scale_type = f8E8M0FNU{ax}>"
    t = f"tensor<{dims}xf32>"
    return (
        f"func.func @q(%x: {t}) -> {mx} {{\n"
        f"  %0 = mx.quantize_block %x : {t} -> {mx}\n  return %0 : {mx}\n}}\n"
        f"func.func @d(%a: {mx}) -> {t} {{\n"
        f"  %0 = mx.dequantize_block %a : {mx} -> {t}\n  return %0 : {t}\n}}\n"
    )


def _values(shape, seed=0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(np.float32)
    with np.errstate(over="ignore"):
        x *= np.exp2(rng.integers(-140, 120, shape)).astype(np.float32)
    flat = x.reshape(-1)
    flat[:: max(1, flat.size // 7)] = [np.nan, np.inf, -0.0, 1e-45, 448.0, 6.0, 3e38, 0.0][
        : len(flat[:: max(1, flat.size // 7)])
    ]
    return x


CASES = [((4, 64), 32, 1), ((3, 21, 8), 7, 1), ((6, 2, 4), 3, 0), ((96,), 32, 0)]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-b{c[1]}-a{c[2]}")
@pytest.mark.parametrize("element", FORMATS)
def test_runner_default_pipeline_is_the_oracle(element, case):
    shape, block, axis = case
    x = _values(shape)
    want = oracle.quantize(x, element, block, axis)
    runs = ((2, "packed"), (1, "unpacked"))  # the storages differ for FP4/FP6 only
    if not ELEMENT_FORMATS[element].is_sub_byte:
        runs = runs[CASES.index(case) % 2 :][:1]
    for threads, storage in runs:
        pipeline = kernel_pipeline(threads=threads)
        if storage == "unpacked":
            pipeline = pipeline.with_options("mx-to-linalg", subbyte_storage="unpacked")
        r = Runner(_module(shape, element, block, axis), pipeline)
        got = r.q(x)
        assert got.bitwise_equal(want), (threads, storage)
        back = r.d(want)
        ref = oracle.dequantize(want)
        nan = np.isnan(ref)
        np.testing.assert_array_equal(np.isnan(back), nan)
        np.testing.assert_array_equal(back.view(np.uint32)[~nan], ref.view(np.uint32)[~nan])


def _lowered(text: str, storage: str = "packed") -> ir.Module:
    m = parse_module(text)
    run_pipeline(
        m,
        f"mx-to-linalg{{subbyte-storage={storage}}},{load_pipeline('bufferize')},"
        "mx-quantize-kernels{threads=2}",
    )
    return m


@pytest.mark.parametrize("storage", ["packed", "unpacked"])
def test_every_group_is_replaced(storage):
    """No tagged generic is left (amax, scales, elements, dequantize, and the
    pack/unpack generics of packed FP4 codes)."""
    with ir.Context(), ir.Location.unknown():
        for shape, block, axis in CASES:
            m = _lowered(_module(shape, "f4E2M1FN", block, axis), storage)
            left = collect(m.operation, lambda o: kernel_tag(o) is not None)
            assert [kernel_tag(o) for o in left] == [], (shape, block, axis)


def test_the_amax_buffer_is_gone():
    with ir.Context(), ir.Location.unknown():
        text = str(_lowered(_module((4, 64), "f8E4M3FN", 32, 1)))
    assert "memref<4x2xf32>" not in text and "linalg.fill" not in text


def test_fold_scale_requantization_still_matches():
    """fold_scale by a non-power of two requantizes: the dequantize with alpha
    stays a generic, its quantize becomes the kernel."""
    t = "!mx.tensor<2x64xf4E2M1FN, block_size = 32, scale_type = f8E8M0FNU>"
    text = (
        f"func.func @f(%a: {t}) -> {t} {{\n  %c = arith.constant 3.0 : f32\n"
        f"  %0 = mx.fold_scale %a, %c : {t}, f32 -> {t}\n  return %0 : {t}\n}}\n"
    )
    a = oracle.quantize(_values((2, 64), 3), "f4E2M1FN", 32)
    got = Runner(text, threads=2).f(a)
    assert isinstance(got, MXArray) and got.bitwise_equal(oracle.fold_scale(a, 3.0))


def test_bad_threads_option():
    ctx = ir.Context()
    module = parse_module(_module((4, 64), "i8", 32, 1), ctx)
    pm = build_pass_manager("mx-to-linalg,mx-quantize-kernels{threads=-1}", ctx)
    with pytest.raises(ir.MLIRError, match="threads must be >= 0"):
        pm.run(module.operation)

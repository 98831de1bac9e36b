"""End to end: ``mx.block_matmul`` with an NVFP4 rhs (``f8E4M3FN`` scales,
block 16, the f32 ``global_scale`` operand) through the JIT, bit for bit
against the oracle's blocked order (``oracle.blocked_order``: the blocked
order from zero with the E4M3 scales as ``sb``, then ``acc + f32(c / g)``,
``docs/numerics.md``, "NVFP4 in the matmul").

* the default (kernel) pipeline at 1 and 2 threads, decode / small / prefill
  shapes (every schedule the registry picks by M), lhs of every behaviour
  (FP8, FP6, packed FP4, INT8: E8M0 MX in blocks of 16), global scales 1, computed, 2^-20 and 2^60,
  a nonzero accumulator (updated in place);
* the blocked generics on the stock path (``lower-to-llvm``): the same bits;
* the fused lowering (one generic over (m, n, k)): within the oracle's bound
  (``oracle.matmul_reference``), since it sums in another order.
"""

from __future__ import annotations

import numpy as np
import pytest
from format_cases import BY_BEHAVIOUR
from mlir import ir
from tests.execution.test_mx_e2e import _assert_f32_identical

from mlir_mx import oracle
from mlir_mx.dialect import parse_module, print_module
from mlir_mx.errors import MXArgTypeError
from mlir_mx.execution import Runner
from mlir_mx.kernels.registry import SMALL_MAX_M, shape_class
from mlir_mx.passes.pipeline import build_pass_manager
from mlir_mx.pipelines import load_pipeline

K, N = 128, 64
#: (M, lhs element): decode, small and prefill shapes for the registry's choice.
#: The lhs formats: every behaviour (FP8, FP6, packed FP4, INT8) over the shape classes.
SHAPES = tuple(zip((1, 5, SMALL_MAX_M + 8, 3), BY_BEHAVIOUR, strict=True))


def _types(m: int, elem: str) -> tuple[str, str, str]:
    ta = f"!mx.tensor<{m}x{K}x{elem}, block_size = 16, scale_type = f8E8M0FNU>"
    tb = f"!mx.tensor<{K}x{N}xf4E2M1FN, block_size = 16, scale_type = f8E4M3FN, axis = 0>"
    return ta, tb, f"tensor<{m}x{N}xf32>"


def _module() -> str:
    funcs = []
    for i, (m, elem) in enumerate(SHAPES):
        ta, tb, tc = _types(m, elem)
        funcs.append(
            f"func.func @mm{i}(%a: {ta}, %b: {tb}, %c: {tc}, %g: f32) -> {tc} {{\n"
            f"  %r = mx.block_matmul %a, %b, %c, %g : {ta}, {tb}, {tc}, f32 -> {tc}\n"
            f"  return %r : {tc}\n}}"
        )
    return "\n".join(funcs)


def _operands(i: int, g, seed: int):
    m, elem = SHAPES[i]
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((m, K)) * np.exp2(rng.integers(-6, 6, (m, K)))).astype(np.float32)
    w = (rng.standard_normal((K, N)) * np.exp2(rng.integers(-8, 8, (K, N)))).astype(np.float32)
    w[16:32, 3] = 0.0  # a zero block: the E4M3 zero-block scale
    a = oracle.quantize(x, elem, 16)
    b = oracle.quantize(w, "nvfp4", axis=0, global_scale=g)
    acc = rng.standard_normal((m, N)).astype(np.float32)
    return a, b, acc


GLOBALS = [1.0, None, 2.0**-20, 2.0**60]  # None: computed from the weight


@pytest.fixture(scope="module", params=[1, 2], ids=["1thread", "2threads"])
def kernel_runner(request):
    return Runner(_module(), threads=request.param)


@pytest.mark.parametrize("g", GLOBALS, ids=["g1", "computed", "g2^-20", "g2^60"])
@pytest.mark.parametrize("i", range(len(SHAPES)), ids=[f"M{m}-{e}" for m, e in SHAPES])
def test_kernel_pipeline_bit_exact(kernel_runner, i, g):
    a, b, acc = _operands(i, g, 54 + i)
    want = oracle.blocked_order(a, b, acc)
    c = acc.copy()
    got = kernel_runner.invoke(f"mm{i}", a, b, c, b.global_scale)
    _assert_f32_identical(got, want)
    np.testing.assert_array_equal(c.view(np.uint32), got.view(np.uint32))  # in place


def _generic_runner(lowering: str) -> Runner:
    ctx = ir.Context()
    module = parse_module(_module(), ctx)
    build_pass_manager(f"mx-to-linalg{{matmul-lowering={lowering} subbyte-storage=unpacked}}", ctx).run(module.operation)
    return Runner(print_module(module), load_pipeline("lower-to-llvm"))


def test_blocked_generics_bit_exact():
    r = _generic_runner("blocked")
    for i in range(len(SHAPES)):
        a, b, acc = _operands(i, None, 7 + i)
        got = r.invoke(f"mm{i}", a.codes, a.scales, b.codes, b.scales, acc.copy(), b.global_scale)
        _assert_f32_identical(got, oracle.blocked_order(a, b, acc))


def test_fused_lowering_within_bound():
    r = _generic_runner("fused")
    for i in range(len(SHAPES)):
        a, b, acc = _operands(i, None, 9 + i)
        got = r.invoke(f"mm{i}", a.codes, a.scales, b.codes, b.scales, acc.copy(), b.global_scale)
        exact, bound, inside = oracle.matmul_reference(a, b, acc)
        assert inside.all()
        assert np.all(np.abs(got.astype(np.float64) - exact) <= bound)


def test_e8m0_rhs_refused_by_name(kernel_runner):
    """An OCP MX B where the function takes an NVFP4 one: refused before
    native code, naming the scale types."""
    a, b, acc = _operands(0, None, 1)
    wrong = oracle.quantize(b.dequantize(), "f4E2M1FN", 16, axis=0)
    with pytest.raises(MXArgTypeError, match="f8E4M3FN.*f8E8M0FNU"):
        kernel_runner.invoke("mm0", a, wrong, acc.copy(), b.global_scale)


def test_shapes_cover_every_shape_class():
    assert {shape_class(m) for m, _ in SHAPES} == {"decode", "small", "prefill"}

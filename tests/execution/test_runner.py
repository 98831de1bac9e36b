"""The Runner: compile once, call with numpy, check arguments before native code."""

from __future__ import annotations

import numpy as np
import pytest

from mlir_mx.errors import MXError
from mlir_mx.execution import CompileOptions, Runner, compile_module
from mlir_mx.pipelines import available_pipelines, load_pipeline

SRC = """
#id2 = affine_map<(d0, d1) -> (d0, d1)>
func.func @add(%a: tensor<4x4xf32>, %b: tensor<4x4xf32>) -> tensor<4x4xf32> {
  %e = tensor.empty() : tensor<4x4xf32>
  %r = linalg.generic {indexing_maps = [#id2, #id2, #id2], iterator_types = ["parallel", "parallel"]}
      ins(%a, %b : tensor<4x4xf32>, tensor<4x4xf32>) outs(%e : tensor<4x4xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %s = arith.addf %x, %y : f32
    linalg.yield %s : f32
  } -> tensor<4x4xf32>
  return %r : tensor<4x4xf32>
}
func.func @matmul(%a: tensor<64x32xf32>, %b: tensor<32x16xf32>, %c: tensor<64x16xf32>) -> tensor<64x16xf32> {
  %r = linalg.matmul ins(%a, %b : tensor<64x32xf32>, tensor<32x16xf32>) outs(%c : tensor<64x16xf32>) -> tensor<64x16xf32>
  return %r : tensor<64x16xf32>
}
func.func @two(%a: tensor<3xf64>) -> (tensor<3xf64>, tensor<3xi32>, f64) {
  %e = tensor.empty() : tensor<3xf64>
  %f = tensor.empty() : tensor<3xi32>
  %r:2 = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]}
      ins(%a : tensor<3xf64>) outs(%e, %f : tensor<3xf64>, tensor<3xi32>) {
  ^bb0(%x: f64, %o: f64, %p: i32):
    %d = arith.mulf %x, %x : f64
    %i = arith.fptosi %x : f64 to i32
    linalg.yield %d, %i : f64, i32
  } -> (tensor<3xf64>, tensor<3xi32>)
  %c0 = arith.constant 0 : index
  %first = tensor.extract %a[%c0] : tensor<3xf64>
  return %r#0, %r#1, %first : tensor<3xf64>, tensor<3xi32>, f64
}
func.func @scalars(%x: f32, %n: i64, %i: index, %flag: i1) -> f32 {
  %nf = arith.sitofp %n : i64 to f32
  %ii = arith.index_cast %i : index to i64
  %if = arith.sitofp %ii : i64 to f32
  %s = arith.addf %x, %nf : f32
  %t = arith.addf %s, %if : f32
  %z = arith.constant 0.0 : f32
  %r = arith.select %flag, %t, %z : f32
  return %r : f32
}
func.func @scale(%a: tensor<?xf32>, %k: f32) -> tensor<?xf32> {
  %c0 = arith.constant 0 : index
  %n = tensor.dim %a, %c0 : tensor<?xf32>
  %e = tensor.empty(%n) : tensor<?xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]}
      ins(%a : tensor<?xf32>) outs(%e : tensor<?xf32>) {
  ^bb0(%x: f32, %o: f32):
    %m = arith.mulf %x, %k : f32
    linalg.yield %m : f32
  } -> tensor<?xf32>
  return %r : tensor<?xf32>
}
func.func @inplace(%m: memref<5xi32>) {
  %c0 = arith.constant 0 : index
  %v = arith.constant 42 : i32
  memref.store %v, %m[%c0] : memref<5xi32>
  return
}
func.func private @helper() -> ()
"""


@pytest.fixture(scope="module")
def runner() -> Runner:
    return Runner(SRC)


def test_pipelines_are_package_data():
    assert "lower-to-llvm" in available_pipelines()
    p = load_pipeline("lower-to-llvm")
    names = [e.name for e in p]
    assert names[:2] == ["convert-elementwise-to-linalg", "one-shot-bufferize"]
    assert names[-3:] == [
        "reconcile-unrealized-casts",
        "mx-legalize-masked-stores",
        "mx-host-target",
    ]
    assert p.runs("mx-expand-narrow-floats") and "#" not in str(p)
    with pytest.raises(MXError, match="lower-to-llvm"):
        load_pipeline("no-such-pipeline")


def test_add(runner):
    a = np.arange(16, dtype=np.float32).reshape(4, 4)
    b = np.ones((4, 4), np.float32)
    out = runner.add(a, b)
    np.testing.assert_array_equal(out, a + b)
    assert out.flags.c_contiguous and not np.shares_memory(out, a)
    assert runner.functions == ["add", "inplace", "matmul", "scalars", "scale", "two"]


def test_matmul_accumulator_updated_in_place(runner):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((64, 32)).astype(np.float32)
    b = rng.standard_normal((32, 16)).astype(np.float32)
    c = rng.standard_normal((64, 16)).astype(np.float32)
    c0 = c.copy()
    out = runner.invoke("matmul", a, b, c)
    np.testing.assert_allclose(out, c0 + a @ b, rtol=1e-5, atol=1e-4)
    np.testing.assert_array_equal(c, out)  # the accumulator is written in place
    assert not np.shares_memory(out, c)  # the result is a separate, owned copy


def test_two_results_and_scalar_result(runner):
    a = np.array([1.5, -2.0, 3.25])
    sq, ints, first = runner.two(a)
    np.testing.assert_array_equal(sq, a * a)
    np.testing.assert_array_equal(ints, np.array([1, -2, 3], np.int32))
    assert ints.dtype == np.int32 and first == 1.5 and first.dtype == np.float64


def test_scalar_arguments(runner):
    assert runner.scalars(1.5, 2, 3, True) == np.float32(6.5)
    assert runner.scalars(np.float32(1.5), np.int64(2), 3, False) == 0.0


def test_dynamic_shape_and_repeated_calls(runner):
    for n in (0, 1, 7, 1000):
        a = np.arange(n, dtype=np.float32)
        np.testing.assert_array_equal(runner.scale(a, 2.0), a * 2)
    for _ in range(200):  # results are freed; this must not grow or crash
        runner.scale(np.ones(64, np.float32), 3.0)


def test_memref_argument_mutated(runner):
    m = np.zeros(5, np.int32)
    assert runner.inplace(m) is None
    assert m[0] == 42


def test_wrong_number_of_arguments(runner):
    with pytest.raises(TypeError, match=r"add: expected 2 argument\(s\), got 1"):
        runner.add(np.zeros((4, 4), np.float32))


def test_wrong_shape(runner):
    a = np.zeros((64, 32), np.float32)
    with pytest.raises(
        ValueError,
        match=r"matmul: argument 2 \('%arg1'\): expected shape \(32, 16\), got \(32, 8\)",
    ):
        runner.matmul(a, np.zeros((32, 8), np.float32), np.zeros((64, 16), np.float32))
    with pytest.raises(ValueError, match=r"'%arg0'.*expected shape \(\?,\), got \(2, 2\)"):
        runner.scale(np.zeros((2, 2), np.float32), 1.0)


def test_wrong_dtype(runner):
    with pytest.raises(
        TypeError, match=r"add: argument 2 \('%arg1'\): expected dtype float32, got float64"
    ):
        runner.add(np.zeros((4, 4), np.float32), np.zeros((4, 4)))
    with pytest.raises(TypeError, match=r"'%arg1'.*integer"):
        runner.scalars(1.0, 2.5, 3, True)
    with pytest.raises(TypeError, match=r"'%arg0'.*real number"):
        runner.scalars("x", 2, 3, True)
    with pytest.raises(ValueError, match=r"'%arg1'.*does not fit in i64"):
        runner.scalars(1.0, 2**70, 3, True)
    with pytest.raises(TypeError, match=r"'%arg0'.*numpy.ndarray.*list"):
        runner.add([[0.0] * 4] * 4, np.zeros((4, 4), np.float32))


def test_non_contiguous(runner):
    a = np.zeros((4, 8), np.float32)[:, ::2]
    with pytest.raises(ValueError, match=r"add: argument 1 \('%arg0'\): array is not C-contiguous"):
        runner.add(a, np.zeros((4, 4), np.float32))
    with pytest.raises(ValueError, match="'%arg1'.*C-contiguous"):
        runner.add(np.zeros((4, 4), np.float32), np.zeros((4, 4), np.float32).T)


def test_unknown_function(runner):
    with pytest.raises(AttributeError, match=r"no public function 'mul'.*available: add, inplace"):
        runner.invoke("mul")
    with pytest.raises(AttributeError, match="'helper'"):
        runner.helper()  # private declarations are not callable


def test_cache():
    r1 = Runner(SRC)
    r2 = Runner(SRC, options=CompileOptions())
    assert r1._compiled is r2._compiled
    assert compile_module(SRC) is r1._compiled
    assert compile_module(SRC, CompileOptions(opt_level=2)) is not r1._compiled


def test_bad_module_raises():
    with pytest.raises(Exception, match="custom op|expected"):
        Runner("func.func @f( {")


def test_two_results_of_a_call_do_not_abort_the_process():
    # Upstream's dealloc lowering creates memref<?xi1> ownership flags here,
    # and finalize-memref-to-llvm aborts on an i1 store; mx-legalize-i1-memrefs
    # in lower-to-llvm keeps the process alive and the result right.
    text = """
func.func private @ext(%a: tensor<8xf32>) -> (tensor<8xf32>, tensor<8xf32>) {
  %e = tensor.empty() : tensor<8xf32>
  %1 = linalg.generic {indexing_maps = [affine_map<(d0)->(d0)>, affine_map<(d0)->(d0)>], iterator_types = ["parallel"]} ins(%a : tensor<8xf32>) outs(%e : tensor<8xf32>) {
  ^bb0(%in: f32, %o: f32):
    %t = arith.mulf %in, %in : f32
    linalg.yield %t : f32
  } -> tensor<8xf32>
  return %1, %a : tensor<8xf32>, tensor<8xf32>
}
func.func @caller(%a: tensor<8xf32>) -> tensor<8xf32> {
  %r:2 = call @ext(%a) : (tensor<8xf32>) -> (tensor<8xf32>, tensor<8xf32>)
  %e = tensor.empty() : tensor<8xf32>
  %1 = linalg.generic {indexing_maps = [affine_map<(d0)->(d0)>, affine_map<(d0)->(d0)>, affine_map<(d0)->(d0)>], iterator_types = ["parallel"]} ins(%r#0, %r#1 : tensor<8xf32>, tensor<8xf32>) outs(%e : tensor<8xf32>) {
  ^bb0(%in: f32, %in2: f32, %o: f32):
    %t = arith.addf %in, %in2 : f32
    linalg.yield %t : f32
  } -> tensor<8xf32>
  return %1 : tensor<8xf32>
}
"""
    x = np.arange(8, dtype=np.float32)
    out = Runner(text).invoke("caller", x)
    np.testing.assert_array_equal(out, x * x + x)


MX_T = "!mx.tensor<4x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>"
MX_MODULE = f"""
func.func @q(%x: tensor<4x64xf32>) -> {MX_T} {{
  %0 = mx.quantize_block %x : tensor<4x64xf32> -> {MX_T}
  return %0 : {MX_T}
}}
func.func @dq(%t: {MX_T}) -> tensor<4x64xf32> {{
  %0 = mx.dequantize_block %t : {MX_T} -> tensor<4x64xf32>
  return %0 : tensor<4x64xf32>
}}
"""


def _mx_runner():
    from mlir_mx.pipelines import load_pipeline

    return Runner(MX_MODULE, "mx-to-linalg," + load_pipeline("lower-to-llvm"))


def test_mx_arguments_and_results_are_mxarrays():
    from mlir_mx import oracle
    from mlir_mx.numerics import MXArray

    r = _mx_runner()
    x = np.random.default_rng(3).standard_normal((4, 64)).astype(np.float32)
    got = r.q(x)
    assert isinstance(got, MXArray)
    assert got.bitwise_equal(oracle.quantize(x, "f8E4M3FN", 32))
    np.testing.assert_array_equal(r.dq(got), oracle.dequantize(got))
    # a (codes, scales) pair is accepted too
    np.testing.assert_array_equal(r.dq((got.codes, got.scales)), oracle.dequantize(got))


def test_mx_argument_errors_name_the_argument():
    from mlir_mx import oracle

    r = _mx_runner()
    x = np.zeros((4, 64), np.float32)
    with pytest.raises(
        TypeError, match=r"dq: argument 1 \('%arg0'\): expected an MXArray with element f8E4M3FN"
    ):
        r.dq(oracle.quantize(x, "f4E2M1FN", 32))
    with pytest.raises(TypeError, match="expected an MXArray or a"):
        r.dq(x)
    good = oracle.quantize(x, "f8E4M3FN", 32)
    with pytest.raises(
        ValueError, match=r"'%arg0 scales'\): expected shape \(4, 2\), got \(2, 4\)"
    ):
        r.dq((good.codes, np.ascontiguousarray(good.scales.T)))
    with pytest.raises(TypeError, match=r"'%arg0 codes'\): expected dtype float8_e4m3fn"):
        r.dq((good.codes.view(np.uint8), good.scales))


_SCALE_FIRST = (
    "func.func @scale(%x: memref<4x8xf32>) {\n"
    "  %c0 = arith.constant 0 : index\n  %c2 = arith.constant 2.0 : f32\n"
    "  %v = memref.load %x[%c0, %c0] : memref<4x8xf32>\n"
    "  %w = arith.mulf %v, %c2 : f32\n  memref.store %w, %x[%c0, %c0] : memref<4x8xf32>\n"
    "  return\n}\n"
)


class _DLPackOnly:
    """A DLPack producer that is not a numpy array (like a torch tensor)."""

    def __init__(self, a):
        self.a = a

    def __dlpack__(self, **kwargs):
        return self.a.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()


def test_dlpack_inputs_without_copies():
    """Any DLPack producer is viewed, not copied: the function's writes reach it."""
    r = Runner(_SCALE_FIRST)
    a = np.full((4, 8), 3.0, np.float32)
    r.scale(_DLPackOnly(a))
    assert a[0, 0] == 6.0
    with pytest.raises(TypeError, match="expected dtype float32"):
        r.scale(_DLPackOnly(np.zeros((4, 8), np.float64)))


def test_torch_tensors_without_copies():
    torch = pytest.importorskip("torch", reason="torch interop needs torch (mlir-mx[torch])")
    r = Runner(_SCALE_FIRST)
    t = torch.full((4, 8), 3.0)
    r.scale(t)
    assert float(t[0, 0]) == 6.0

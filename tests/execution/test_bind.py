"""Runner.bind (fixed arguments kept, each call checked) and CompileOptions."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from matmul_cases import case, matmul_text

from mlir_mx.errors import MXArgTypeError, MXValueError
from mlir_mx.execution import FREE, CompileOptions, Runner
from mlir_mx.passes.pipeline import Pipeline
from mlir_mx.pipelines import load_pipeline

SAXPY = """
func.func @saxpy(%a: f32, %x: memref<?xf32>, %y: memref<?xf32>) {
  %c0 = arith.constant 0 : index
  %n = memref.dim %x, %c0 : memref<?xf32>
  %c1 = arith.constant 1 : index
  scf.for %i = %c0 to %n step %c1 {
    %xi = memref.load %x[%i] : memref<?xf32>
    %yi = memref.load %y[%i] : memref<?xf32>
    %p = arith.mulf %a, %xi : f32
    %s = arith.addf %p, %yi : f32
    memref.store %s, %y[%i] : memref<?xf32>
  }
  return
}
func.func @copy4(%x: memref<4xf32>, %y: memref<4xf32>) {
  %c3 = arith.constant 3 : index
  %v = memref.load %x[%c3] : memref<4xf32>
  memref.store %v, %y[%c3] : memref<4xf32>
  return
}
func.func @twice(%x: memref<4xf32>) -> f32 {
  %c0 = arith.constant 0 : index
  %v = memref.load %x[%c0] : memref<4xf32>
  return %v : f32
}
"""


@pytest.fixture(scope="module")
def runner() -> Runner:
    return Runner(SAXPY, load_pipeline("lower-to-llvm"))


def test_bind_equals_invoke(runner):
    x = np.arange(8, dtype=np.float32)
    f = runner.bind("saxpy", 2.0, x, FREE)
    y1, y2 = np.ones(8, np.float32), np.ones(8, np.float32)
    f(y1)
    runner.invoke("saxpy", 2.0, x, y2)
    np.testing.assert_array_equal(y1, y2)
    np.testing.assert_array_equal(y1, 2 * x + 1)
    f(y1)  # a second call reuses the fixed descriptors
    np.testing.assert_array_equal(y1, 4 * x + 1)


def test_call_unchecked_takes_addresses_and_only_free_buffers(runner):
    """``BoundFunction.call_unchecked``: each free buffer as (address, shape),
    the same result as a checked call; functions with free scalars or results
    are refused (they need ``__call__``)."""
    x = np.arange(8, dtype=np.float32)
    f = runner.bind("saxpy", 2.0, x, FREE)
    y1, y2 = np.ones(8, np.float32), np.ones(8, np.float32)
    f.call_unchecked((y1.ctypes.data, (8,)))
    f(y2)
    np.testing.assert_array_equal(y1, y2)
    np.testing.assert_array_equal(y1, 2 * x + 1)
    with pytest.raises(MXArgTypeError, match="expected 1 buffer"):
        f.call_unchecked()
    with pytest.raises(MXArgTypeError, match="free buffers only"):
        runner.bind("saxpy", FREE, x, FREE).call_unchecked((x.ctypes.data, (8,)), (y1.ctypes.data, (8,)))
    with pytest.raises(MXArgTypeError, match="free buffers only"):
        runner.bind("twice", FREE).call_unchecked((x.ctypes.data, (4,)))


def test_call_unchecked_shapes_follow_every_call(runner):
    """``call_unchecked`` passes each call's shapes: a change of shape between
    unchecked calls, and a checked call in between (which points the shared
    descriptors at other arrays), are both seen."""
    f = runner.bind("saxpy", 2.0, FREE, FREE)

    def unchecked(n: int) -> np.ndarray:
        x, y = np.arange(n, dtype=np.float32), np.ones(n, np.float32)
        f.call_unchecked((x.ctypes.data, (n,)), (y.ctypes.data, (n,)))
        return y

    for n in (8, 8, 5, 8):
        np.testing.assert_array_equal(unchecked(n), 2 * np.arange(n, dtype=np.float32) + 1)
    x3, y3 = np.arange(3, dtype=np.float32), np.ones(3, np.float32)
    f(x3, y3)  # a checked call: the descriptors now hold shape (3,)
    np.testing.assert_array_equal(y3, 2 * x3 + 1)
    np.testing.assert_array_equal(unchecked(8), 2 * np.arange(8, dtype=np.float32) + 1)


def test_on_shapes_calls_take_addresses_and_see_other_calls(runner):
    """``BoundFunction.on_shapes``: a call with the free buffers' shapes fixed
    that takes addresses only.  Calls of other shapes in between (unchecked
    or checked: they share the descriptors) do not leak into it."""
    f = runner.bind("saxpy", 2.0, FREE, FREE)
    call = f.on_shapes((8,), (8,))

    def fixed() -> np.ndarray:
        x, y = np.arange(8, dtype=np.float32), np.ones(8, np.float32)
        call(x.ctypes.data, y.ctypes.data)
        return y

    want = 2 * np.arange(8, dtype=np.float32) + 1
    np.testing.assert_array_equal(fixed(), want)
    np.testing.assert_array_equal(fixed(), want)
    x5, y5 = np.arange(5, dtype=np.float32), np.ones(5, np.float32)
    f.call_unchecked((x5.ctypes.data, (5,)), (y5.ctypes.data, (5,)))
    np.testing.assert_array_equal(y5, 2 * x5 + 1)
    np.testing.assert_array_equal(fixed(), want)
    x3, y3 = np.arange(3, dtype=np.float32), np.ones(3, np.float32)
    f(x3, y3)  # a checked call: the descriptors now hold shape (3,)
    np.testing.assert_array_equal(y3, 2 * x3 + 1)
    np.testing.assert_array_equal(fixed(), want)


def test_on_shapes_checks_its_shapes_once(runner):
    f = runner.bind("saxpy", 2.0, FREE, FREE)
    with pytest.raises(MXArgTypeError, match="expected 2 shape"):
        f.on_shapes((8,))
    with pytest.raises(MXValueError, match=r"shape \(8, 1\) does not fit"):
        f.on_shapes((8, 1), (8,))
    with pytest.raises(MXValueError, match=r"shape \(-1,\) does not fit"):
        f.on_shapes((-1,), (8,))
    with pytest.raises(MXValueError, match=r"shape \(5,\) does not fit"):
        runner.bind("copy4", FREE, FREE).on_shapes((5,), (4,))  # static memref<4xf32>
    x, y = np.arange(4, dtype=np.float32), np.zeros(4, np.float32)
    runner.bind("copy4", FREE, FREE).on_shapes((4,), (4,))(x.ctypes.data, y.ctypes.data)
    np.testing.assert_array_equal(y, [0, 0, 0, 3])
    one = runner.bind("saxpy", 2.0, x, FREE).on_shapes((4,))  # one free buffer: the loop
    y1 = np.ones(4, np.float32)
    one(y1.ctypes.data)
    np.testing.assert_array_equal(y1, 2 * x + 1)
    with pytest.raises(MXArgTypeError, match="free buffers only"):
        runner.bind("twice", FREE).on_shapes((4,))


def test_bind_free_scalar_and_dynamic_shapes(runner):
    f = runner.bind("saxpy", FREE, FREE, FREE)
    for n in (1, 5, 33):
        x, y = np.ones(n, np.float32), np.zeros(n, np.float32)
        f(3.0, x, y)
        np.testing.assert_array_equal(y, np.full(n, 3.0, np.float32))


def test_bind_checks_each_call_like_invoke(runner):
    f = runner.bind("saxpy", 1.0, np.ones(4, np.float32), FREE)
    with pytest.raises(TypeError, match="expected 1 argument"):
        f()
    with pytest.raises(TypeError, match=r"argument 3 \('%arg2'\): expected dtype float32"):
        f(np.zeros(4, np.float64))
    ro = np.zeros(4, np.float32)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="the function writes this argument"):
        f(ro)  # y is written: refused from the first call on
    with pytest.raises(ValueError, match="not C-contiguous"):
        f(np.zeros(8, np.float32)[::2])


def test_bind_refuses_bad_binds(runner):
    with pytest.raises(TypeError, match="expected 3 argument"):
        runner.bind("saxpy", FREE)
    x = np.arange(4, dtype=np.float32) + 7
    assert runner.bind("twice", FREE)(x) == runner.invoke("twice", x) == 7.0
    with pytest.raises(TypeError, match="expected dtype float32"):
        runner.bind("saxpy", 1.0, np.ones(4, np.int32), FREE)


def test_bind_names_the_arguments_in_messages(runner):
    """``names=``: messages start with the caller's name of the argument,
    at bind time (fixed arguments) and at each call (free ones)."""
    f = runner.bind("saxpy", FREE, np.ones(4, np.float32), FREE, names=["alpha", "x", "y"])
    with pytest.raises(TypeError, match=r"^y: expected dtype float32, got float64$"):
        f(1.0, np.zeros(4, np.float64))
    with pytest.raises(TypeError, match=r"^alpha: expected a real number for f32"):
        f("2", np.zeros(4, np.float32))
    with pytest.raises(TypeError, match=r"^x: expected dtype float32, got int32"):
        runner.bind("saxpy", 1.0, np.ones(4, np.int32), FREE, names=["alpha", "x", "y"])
    with pytest.raises(TypeError, match=r"^names: expected 3 argument name\(s\) \(str\) for saxpy"):
        runner.bind("saxpy", FREE, FREE, FREE, names=["alpha", "x"])
    with pytest.raises(TypeError, match=r"^names: expected a list of argument names, got 'x'"):
        runner.bind("twice", FREE, names="x")


def test_bind_names_the_parts_of_an_mx_argument():
    text = matmul_text(3, 64, 96, "f4E2M1FN", "f8E4M3FN")
    args, acc, _exact, _bound = case(3, 64, 96, "f4E2M1FN", "f8E4M3FN")
    f = Runner(text, threads=1).bind("mm", FREE, args[1], FREE, names=["a", "b", "acc"])
    codes, scales = args[0].held_buffers()
    with pytest.raises(TypeError, match=r"^a scales: expected dtype"):
        f((codes, scales.view(np.uint8)), acc.copy())
    with pytest.raises(TypeError, match=r"^a: expected an MXArray or a \(codes, scales\) pair"):
        f(1.0, acc.copy())
    assert f(args[0], acc.copy()).shape == acc.shape


def test_bind_with_mx_operands_and_threads():
    """An mx function: MXArray arguments fixed or free; calls from threads agree."""
    text = matmul_text(3, 64, 96, "f4E2M1FN", "f8E4M3FN")
    args, acc, exact, bound = case(3, 64, 96, "f4E2M1FN", "f8E4M3FN")
    r = Runner(text, threads=1)
    want = r.invoke("mm", *args, acc.copy())
    f = r.bind("mm", FREE, args[1], FREE)
    outs = [None] * 4

    def call(i):
        outs[i] = f(args[0], acc.copy())

    ts = [threading.Thread(target=call, args=(i,)) for i in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    for o in outs:
        np.testing.assert_array_equal(o.view(np.uint32), want.view(np.uint32))


def test_compile_options_are_the_cache_key_and_state_the_rule():
    assert CompileOptions() == CompileOptions(threads=None)
    assert CompileOptions().key() == CompileOptions().key()
    assert CompileOptions(threads=1).key() != CompileOptions(threads=2).key()
    text_and_typed = CompileOptions("canonicalize"), CompileOptions(Pipeline.parse("canonicalize"))
    assert text_and_typed[0] == text_and_typed[1]
    with pytest.raises(ValueError, match="configure the default pipeline"):
        CompileOptions("canonicalize", threads=2)
    with pytest.raises(ValueError, match="configure the default pipeline"):
        CompileOptions("canonicalize", schedule="prefill")
    with pytest.raises(ValueError, match="unknown schedule 'fast'"):
        CompileOptions(schedule="fast")
    with pytest.raises(ValueError, match="opt_level"):
        CompileOptions(opt_level=7)
    with pytest.raises(TypeError, match="options: expected a CompileOptions"):
        from mlir_mx.execution import compile_module

        compile_module(SAXPY, {"threads": 2})
    r = Runner(SAXPY, options=CompileOptions(load_pipeline("lower-to-llvm"), opt_level=2))
    assert r.options.opt_level == 2
    with pytest.raises(TypeError, match="either options= or"):
        Runner(SAXPY, "canonicalize", options=CompileOptions())

"""The reliability reproducers without a file of IR of their own (the Runner API
scripts, the mx-runner/mx-opt command lines of the READMEs), each as a test.

The IR reproducers are lit tests named after their files in ``tests/lit/Repro/``.
Each test says what it checks: the behaviour the reproducer showed and the
one it must show now.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from mlir_mx import oracle
from mlir_mx.execution import Runner
from mlir_mx.pipelines import load_pipeline

ROOT = Path(__file__).resolve().parents[2]
LOWER = "mx-to-linalg," + load_pipeline("lower-to-llvm")
V1 = (ROOT / "examples" / "v1-matmul.mlir").read_text()
READ_ONLY = "the function writes this argument but the array is read-only"


@pytest.fixture(scope="module")
def v1():
    return Runner(V1, LOWER)


def _operands():
    a = oracle.quantize(np.ones((32, 64), np.float32), "f8E4M3FN", 32)
    return a, np.ones((64, 64), np.float32)


def test_api_readonly_acc_written(v1):
    """api-readonly-acc-written.py: a read-only or bytes-backed accumulator was
    silently written; now a ValueError naming the argument, nothing written."""
    a, b = _operands()
    acc = np.zeros((32, 64), np.float32)
    acc.setflags(write=False)
    with pytest.raises(ValueError, match=rf"block_matmul: argument 4 \('%arg2'\): {READ_ONLY}"):
        v1.block_matmul(a, b, acc)
    assert not acc.any()
    buf = bytes(32 * 64 * 4)
    acc2 = np.frombuffer(buf, dtype=np.float32).reshape(32, 64)
    with pytest.raises(ValueError, match=READ_ONLY):
        v1.block_matmul(a, b, acc2)
    assert buf == bytes(32 * 64 * 4)
    # read-only INPUTS stay fine: the function only reads them
    b.setflags(write=False)
    out = v1.block_matmul(a, b, np.zeros((32, 64), np.float32))
    np.testing.assert_array_equal(out, np.full((32, 64), 64.0, np.float32))


def test_api_readonly_memmap_acc_segv(tmp_path):
    """api-readonly-memmap-acc-segv.py: a read-only np.memmap accumulator was
    written by native code (SIGSEGV).  Run in a subprocess: a regression
    must fail this test, not kill the test run."""
    path = tmp_path / "acc.bin"
    np.zeros((32, 64), np.float32).tofile(path)
    script = textwrap.dedent(
        f"""
        import numpy as np
        from mlir_mx import oracle
        from mlir_mx.execution import Runner
        from mlir_mx.pipelines import load_pipeline
        r = Runner(open({str(ROOT / "examples" / "v1-matmul.mlir")!r}).read(),
                   "mx-to-linalg," + load_pipeline("lower-to-llvm"))
        a = oracle.quantize(np.ones((32, 64), np.float32), "f8E4M3FN", 32)
        b = np.ones((64, 64), np.float32)
        acc = np.memmap({str(path)!r}, dtype=np.float32, mode="r", shape=(32, 64))
        try:
            r.block_matmul(a, b, acc)
        except ValueError as e:
            print("ValueError:", e)
        w = np.memmap({str(path)!r}, dtype=np.float32, mode="r+", shape=(32, 64))
        print("written:", r.block_matmul(a, b, w)[0, 0], w[0, 0])
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    assert f"ValueError: block_matmul: argument 4 ('%arg2'): {READ_ONLY}" in proc.stdout
    assert "written: 64.0 64.0" in proc.stdout  # a writable memmap IS updated in place


T = "!mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>"
FOLD = f"""func.func @fold(%t: {T}, %alpha: f32) -> tensor<32x64xf32> {{
  %0 = mx.fold_scale %t, %alpha : {T}, f32 -> {T}
  %1 = mx.dequantize_block %0 : {T} -> tensor<32x64xf32>
  return %1 : tensor<32x64xf32>
}}"""


def test_api_scalar_overflow():
    """api-scalar-overflow.py: 2**200 silently became +inf, 10**400 raised
    OverflowError; both are a ValueError naming the argument now."""
    r = Runner(FOLD, LOWER)
    a = oracle.quantize(np.ones((32, 64), np.float32), "f8E4M3FN", 32)
    for big in (2**200, 10**400, np.float64(1e39), -(2**129)):
        with pytest.raises(ValueError, match=r"fold: argument 3 \('%arg1'\): .* outside the range of f32"):
            r.fold(a, big)
    # explicit infinities and NaN are values, not overflows
    assert np.isinf(r.fold(a, np.inf)).all() or np.isnan(r.fold(a, np.inf)).all()
    np.testing.assert_array_equal(r.fold(a, 2.0), np.full((32, 64), 2.0, np.float32))


def test_fold_scale_const_vs_runtime():
    """fold-scale-const-vs-runtime.py: alpha = 2^127 gave +inf with a constant
    and NaN at run time.  One meaning now: both paths and the oracle agree
    (the exponent moves: 2.0 x 2^127 = 2^128 exactly, which dequantizes to +inf)."""
    t4 = "!mx.tensor<4x32xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>"
    body = f"""  %0 = mx.fold_scale %t, %p : {t4}, f32 -> {t4}
  %1 = mx.dequantize_block %0 : {t4} -> tensor<4x32xf32>
  return %1 : tensor<4x32xf32>
}}"""
    const = f"func.func @f(%t: {t4}) -> tensor<4x32xf32> {{\n  %p = arith.constant 0x7F000000 : f32\n{body}"
    runtime = f"func.func @f(%t: {t4}, %p: f32) -> tensor<4x32xf32> {{\n{body}"
    a = oracle.quantize(np.full((4, 32), 2.0, np.float32), "f8E4M3FN", 32)
    c = Runner(const, LOWER).f(a)
    r = Runner(runtime, LOWER).f(a, 2.0**127)
    want = oracle.dequantize(oracle.fold_scale(a, 2.0**127))
    np.testing.assert_array_equal(c, r)
    np.testing.assert_array_equal(c, want)
    assert np.isposinf(c).all()


def _mx_runner(*args, stdin=None):
    proc = subprocess.run(
        [sys.executable, "-m", "mlir_mx.tools.mx_runner", *args],
        input=stdin, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    return proc.returncode, proc.stdout, proc.stderr


def test_mx_runner_bogus_matmul_lowering_names_the_allowed_values():
    """README: mx-runner examples/run-roundtrip.mlir --pass-pipeline='mx-to-linalg{matmul-lowering=bogus}'."""
    rc, _, err = _mx_runner(
        str(ROOT / "examples" / "run-roundtrip.mlir"),
        "--pass-pipeline=mx-to-linalg{matmul-lowering=bogus}",
    )
    assert rc == 2 and "Traceback" not in err  # a bad command line: exit 2, as argparse
    assert "'bogus'" in err and "fused, blocked" in err  # the allowed values


def test_mx_runner_checks_the_entry_point_before_compiling():
    """README: a module with no main compiled for 15 minutes before the missing
    entry point was reported.  The check runs on the parsed module: with a
    pipeline that would fail, the entry-point error still comes first."""
    rc, _, err = _mx_runner(
        str(ROOT / "examples" / "run-roundtrip.mlir"),
        "-e", "nope", "--pass-pipeline=canonicalize",  # leaves mx ops: fails to lower
    )  # fmt: skip
    assert rc == 1
    assert "entry point 'nope' not found (public functions: main)" in err
    assert "outside the LLVM dialect" not in err


@pytest.mark.parametrize(
    "body",
    [
        # what mx-fuse-scales leaves: arith.mulf on tensors
        "%c = arith.constant dense<3.0> : tensor<4xf32>\n  %r = arith.mulf %x, %c : tensor<4xf32>",
        # a bitcast on tensors
        "%i = arith.bitcast %x : tensor<4xf32> to tensor<4xi32>\n  %r = arith.bitcast %i : tensor<4xi32> to tensor<4xf32>",
    ],
)
def test_default_pipelines_accept_tensor_elementwise_arith(body):
    """semantics README: tensor-level elementwise arith made the default
    pipelines fail with "op was not bufferized"."""
    text = f"func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {{\n  {body}\n  return %r : tensor<4xf32>\n}}\n"
    x = np.array([1, 2, -3, 0.5], np.float32)
    want = x * 3 if "mulf" in body else x.copy()
    out = Runner(text).f(x)  # (x may be updated in place: bufferization reuses it)
    np.testing.assert_array_equal(out, want)
    main = text.replace("@f(%x: tensor<4xf32>)", "@g(%x: tensor<4xf32>)") + (
        "func.func @main() -> f32 {\n  %x = arith.constant dense<[1.0, 2.0, -3.0, 0.5]> : tensor<4xf32>\n"
        "  %r = call @g(%x) : (tensor<4xf32>) -> tensor<4xf32>\n  %c1 = arith.constant 1 : index\n"
        "  %v = tensor.extract %r[%c1] : tensor<4xf32>\n  return %v : f32\n}\n"
    )
    rc, out, err = _mx_runner("-", "--entry-point-result=f32", stdin=main)
    assert rc == 0, err
    assert float(out) == float(want[1])


def test_runner_without_pipeline_lowers_mx_ops():
    """README: Runner(mx_text) with no pipeline failed with "op was not bufferized"."""
    r = Runner(V1)
    a, b = _operands()
    out = r.block_matmul(a, b, np.zeros((32, 64), np.float32))
    np.testing.assert_array_equal(out, np.full((32, 64), 64.0, np.float32))


def test_runner_masked_arrays_and_matrix(v1):
    """README: masked arrays were accepted with the mask ignored; np.matrix is
    used as the plain ndarray it is."""
    a, b = _operands()
    masked = np.ma.masked_array(np.zeros((32, 64), np.float32), mask=np.zeros((32, 64), bool))
    with pytest.raises(TypeError, match=r"'%arg2'.*masked arrays are not supported"):
        v1.block_matmul(a, b, masked)
    acc = np.zeros((32, 64), np.float32).view(np.matrix)
    out = v1.block_matmul(a, b.view(np.matrix), acc)
    np.testing.assert_array_equal(out, np.full((32, 64), 64.0, np.float32))
    np.testing.assert_array_equal(np.asarray(acc), out)  # updated in place, as an ndarray


def test_the_same_buffer_returned_twice_is_copied_before_it_is_freed():
    """Found by the differential tester (seed 2026, batch 6): after
    --canonicalize, `return %q, %q` returned one buffer twice; the Runner
    freed it after the first copy and read freed memory for the second."""
    t = "!mx.tensor<4x32xf6E2M3FN, block_size = 32, scale_type = f8E8M0FNU>"
    src = (
        f"func.func @f(%x: tensor<4x32xf32>) -> ({t}, {t}) {{\n"
        f"  %q = mx.quantize_block %x : tensor<4x32xf32> -> {t}\n"
        f"  return %q, %q : {t}, {t}\n}}\n"
    )
    x = np.random.default_rng(0).standard_normal((4, 32)).astype(np.float32)
    want = oracle.quantize(x, "f6E2M3FN", 32)
    for _ in range(20):  # freed memory is often reused at once
        a, b = Runner(src).f(x)
        assert a.bitwise_equal(want) and b.bitwise_equal(want)

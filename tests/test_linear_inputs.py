"""``Linear`` / ``matmul`` inputs at the edges: an empty weight, a read-only
activation, torch and half-precision activations, a thread count out of range.
Each bullet is one reproducer (its name in the tests' names):

* ``f2_linear_out0_zerodivision``: an empty weight, (0, 64), gave (M, 0) at
  M = 60 and a ZeroDivisionError from kernel planning at M <= 48; now the
  empty (or zero) product at every M, without a kernel.
* ``f4_readonly_activation``: a read-only activation was refused on a
  kernel's first call ("the function writes this argument", naming an
  internal '%arg0') but accepted after a writeable call.  The Runner's write
  analysis (``execution/effects.py``) now reads a descriptor's sizes field by
  field, so it sees that no kernel writes its activations: read-only x is
  accepted from the first call, and Runner messages name Linear's arguments.
* ``f13_low_api_messages`` (a, b): torch bfloat16 tensors raised RuntimeError
  from numpy, requires_grad tensors BufferError; ``threads=2**31`` was accepted
  and failed at the first call.  Now bfloat16 / float16 activations (torch or
  numpy) are converted to float32 (exactly), requires_grad is a TypeError
  naming x, and threads are checked at construction.  (Part (c), a weight
  changed in place, is the read-only MXArray's business:
  ``tests/numerics/test_mxarray_storage.py``.)
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import mlir_mx
from mlir_mx.host import MAX_THREADS
from mlir_mx.numerics import quantize


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("MLIR_MX_CACHE_DIR", str(tmp_path / "cache"))


def _weight(element="f8E4M3FN", shape=(64, 64), seed=0):
    rng = np.random.default_rng(seed)
    return quantize(rng.standard_normal(shape).astype(np.float32), element, 32)


@pytest.mark.parametrize("shape", [(0, 64), (8, 0), (0, 0)])
@pytest.mark.parametrize("element", ["f8E4M3FN", "f4E2M1FN"])
def test_f2_linear_out0_zerodivision(shape, element):
    lin = mlir_mx.Linear(quantize(np.zeros(shape, np.float32), element, 32), threads=1)
    for m in (0, 1, 8, 48, 49, 60):
        for x in (np.ones((m, shape[1]), np.float32),
                  quantize(np.ones((m, shape[1]), np.float32), "f8E5M2", 32)):  # fmt: skip
            y = lin(x)
            assert y.shape == (m, shape[0]) and y.dtype == np.float32 and not y.any()
    assert lin(np.ones(shape[1], np.float32)).shape == (shape[0],)


def _read_only_forms(x, tmp_path):
    ro = x.copy()
    ro.setflags(write=False)
    over_bytes = np.frombuffer(x.tobytes(), np.float32).reshape(x.shape)
    path = tmp_path / "x.bin"
    x.tofile(path)
    mm = np.memmap(path, np.float32, mode="r", shape=x.shape)
    return {"setflags": ro, "bytes": over_bytes, "memmap": mm}


@pytest.mark.parametrize("element", ["f8E4M3FN", "f4E2M1FN", "i8"])
@pytest.mark.parametrize("threads", [1, 2])
def test_f4_readonly_activation(element, threads, tmp_path):
    """Read-only x at every shape class, on a fresh Linear (first call) and
    after a writeable call: accepted, and the same result bit for bit."""
    rng = np.random.default_rng(1)
    w = _weight(element, (96, 64))
    x = rng.standard_normal((100, 64)).astype(np.float32)
    for m in (1, 8, 100):
        want = mlir_mx.Linear(w, threads=threads)(x[:m].copy())
        for how, ro in _read_only_forms(x[:m].copy(), tmp_path).items():
            assert not ro.flags.writeable
            got = mlir_mx.Linear(w, threads=threads)(ro)  # the first call
            np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32), err_msg=how)
            np.testing.assert_array_equal(np.asarray(ro), x[:m])


def test_f4_readonly_mx_activation_and_the_write_analysis():
    w = _weight("f4E2M1FN", (64, 64))
    lin = mlir_mx.Linear(w, threads=1)
    xq = quantize(np.random.default_rng(2).standard_normal((3, 64)).astype(np.float32), "f8E4M3FN", 32)
    codes, scales = xq.codes.copy(), xq.scales.copy()
    codes.setflags(write=False)
    scales.setflags(write=False)
    ro = type(xq)(codes, scales, xq.element, xq.block_size, xq.axis)
    np.testing.assert_array_equal(lin(ro), lin(xq))
    lin(np.ones((1, 64), np.float32))
    for (prob, _schedule, _threads), runner in lin._runners.items():
        n_act = 1 if prob.a_elem is None else 2
        n_weights = 1 if prob.b_dot else 2  # the dot kernels' records, or codes and scales
        written = runner._compiled.writes("matmul")
        # the activations and the weight are read, the output written
        assert written == {n_act + n_weights}, (prob, written)


def test_f4_messages_name_x_not_arg0():
    lin = mlir_mx.Linear(_weight(), threads=1)
    # The kernel calls Linear binds name its arguments in Linear's terms.
    x, xq = np.ones((1, 64), np.float32), quantize(np.ones((1, 64), np.float32), "f8E4M3FN", 32)
    f32_call = lin._bound((None, False, None), 1, 1)
    with pytest.raises(ValueError, match=r"^x: array is not C-contiguous"):
        f32_call(np.ones((1, 128), np.float32)[:, ::2], np.zeros((1, 64), np.float32))
    with pytest.raises(TypeError, match=r"^the output: expected dtype float32, got float64"):
        f32_call(x, np.zeros((1, 64), np.float64))
    mx_call = lin._bound((xq.element, xq.is_packed, None), 1, 1)
    with pytest.raises(TypeError, match=r"^x \(scales\): expected dtype"):
        mx_call(lin._mx_args(xq)[0], xq.scales.view(np.uint8), np.zeros((1, 64), np.float32))
    raw = np.zeros(64 * 4 + 1, np.uint8)
    misaligned = np.frombuffer(raw.data, np.float32, 64, offset=1).reshape(1, 64)
    assert not misaligned.flags.aligned
    assert lin(misaligned).shape == (1, 64)  # copied, not refused
    strided = np.ones((4, 128), np.float32)[:, ::2]
    np.testing.assert_array_equal(lin(strided), lin(np.ascontiguousarray(strided)))
    for bad in (np.ones((1, 64), np.complex64), np.ones((1, 64), object), np.ones((1, 63), np.float32)):
        with pytest.raises((TypeError, ValueError), match=r"^x: ") as info:
            lin(bad)
        assert "%arg" not in str(info.value)


def test_f13_half_precision_activations_are_converted():
    lin = mlir_mx.Linear(_weight(), threads=1)
    x = np.random.default_rng(3).standard_normal((5, 64)).astype(np.float32)
    for dtype in (np.float16, ml_dtypes.bfloat16):
        xh = x.astype(dtype)
        np.testing.assert_array_equal(lin(xh), lin(xh.astype(np.float32)))
    with pytest.raises(TypeError, match=r"x: expected dtype float32 \(or float16, bfloat16\), got float64"):
        lin(x.astype(np.float64))


def test_f13_low_api_messages_torch():
    torch = pytest.importorskip("torch", reason="the torch part needs torch")
    lin = mlir_mx.Linear(_weight(), threads=1)
    x = torch.randn(2, 64)
    for dtype in (torch.bfloat16, torch.float16):
        xh = x.to(dtype)
        np.testing.assert_array_equal(lin(xh), lin(xh.float().numpy()))
    with pytest.raises(TypeError, match=r"^x: the tensor requires grad.*x\.detach\(\)"):
        lin(x.clone().requires_grad_(True))
    np.testing.assert_array_equal(lin(x.clone().requires_grad_(True).detach()), lin(x.numpy()))


@pytest.mark.parametrize(
    "threads,err",
    [(2**31, ValueError), (MAX_THREADS + 1, ValueError), (0, ValueError), (-1, ValueError),
     (True, TypeError), (1.5, TypeError), ("2", TypeError)],
)  # fmt: skip
def test_f13_threads_are_checked_at_construction(threads, err):
    w = _weight()
    match = r"threads: expected (a positive integer|an integer in \[1, 1024\])"
    with pytest.raises(err, match=match):
        mlir_mx.Linear(w, threads=threads)
    with pytest.raises(err, match=match):
        mlir_mx.matmul(np.ones((1, 64), np.float32), w, threads=threads)
    lin = mlir_mx.Linear(w, threads=1)
    with pytest.raises(err, match=match):
        lin.threads = threads
    assert lin.threads == 1

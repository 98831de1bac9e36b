"""``Linear`` / ``matmul`` inputs at the edges: an empty weight, a read-only
activation, torch and half-precision activations, a thread count out of range.
Each bullet is one reproducer (its name in the tests' names):

* ``f1_linear_mx_activation_unpacked_weight``: FP4/FP6 MX activations failed
  against weights stored one code per byte.  ``tests/test_linear.py`` runs
  every format pair at M = 3 with K = 96, where FP4/FP6 activations always
  pack; here every weight format meets every sub-byte activation format
  stored packed (K a whole packing group, block 32: the dot kernels where the
  CPU has them) and one code per byte (block 3, K = 9: not a whole group of
  2 or 4), the weight packed or not, at decode and prefill batch sizes, bit
  for bit against the blocked order.
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
from mlir_mx import oracle
from mlir_mx.host import MAX_THREADS
from mlir_mx.linear import Activations
from mlir_mx.numerics import ELEMENT_FORMATS, MXArray, is_packed_storage

_SUB_BYTE = [name for name, f in ELEMENT_FORMATS.items() if f.is_sub_byte]



def _weight(element="f8E4M3FN", shape=(64, 64), seed=0):
    rng = np.random.default_rng(seed)
    return oracle.quantize(rng.standard_normal(shape).astype(np.float32), element, 32)


def _same_bits(got, want):
    same = (got.view(np.uint32) == want.view(np.uint32)) | (np.isnan(got) & np.isnan(want))
    assert same.all(), (np.argwhere(~same)[:4], got[~same][:4], want[~same][:4])


def _subbyte_cases():
    """Every weight x sub-byte activation x activation storage.  The default
    run keeps half: every weight meets every sub-byte activation format once,
    in both activation storages and both weight storages over its three
    cases, and each activation format runs both storages; the others are
    ``slow``."""
    assert len(_SUB_BYTE) == 3  # the choice below: storages (0, 0, 1) or (1, 1, 0)
    cases = []
    for i, weight in enumerate(ELEMENT_FORMATS):
        for j, act in enumerate(_SUB_BYTE):
            for act_packed in (True, False):
                quick = act_packed == ((j == 2) != (i % 2 == 1))
                marks = () if quick else pytest.mark.slow
                cases.append(pytest.param(weight, act, act_packed, marks=marks))
    return cases


@pytest.mark.parametrize("weight, act, act_packed", _subbyte_cases())
def test_subbyte_activations_either_storage_at_every_shape_class(weight, act, act_packed):
    """FP4/FP6 activations stored packed (block 32, K = 64) or one code per
    byte (block 3, K = 9), against a weight stored packed (out = 8) or not
    (out = 5 or 6 is not a whole group for FP6; 5 for FP4), at M = 1 (decode)
    and M = 60 (prefill): bit for bit the blocked order, inside the claim."""
    block, k = (32, 64) if act_packed else (3, 9)
    w_packed = (_SUB_BYTE.index(act) + act_packed) % 2 == 1  # each weight: both storages
    out = 8 if w_packed else 5
    rng = np.random.default_rng(_SUB_BYTE.index(act) * 2 + act_packed)
    w = oracle.quantize(rng.standard_normal((out, k)).astype(np.float32), weight, block)
    lin = mlir_mx.Linear(w, threads=1)
    assert lin.packed == (w_packed and ELEMENT_FORMATS[weight].is_sub_byte)
    b = MXArray(w.codes.T.copy(), w.scales.T.copy(), weight, block, 0)
    xf = rng.standard_normal((60, k)).astype(np.float32)
    rows = {}
    for m in (1, 60):
        x = oracle.quantize(xf[:m], act, block)
        assert x.is_packed == act_packed == is_packed_storage((m, k), act)
        rows[m] = y = lin(x)
        zero = np.zeros((m, out), np.float32)
        _same_bits(y, oracle.blocked_order(x, b, zero))
        exact, bound, inside = oracle.matmul_reference(x, b, zero)
        assert inside.all() and np.all(np.abs(y - exact) <= bound)
    assert lin.schedule(oracle.quantize(xf[:60], act, block)).endswith("prefill")
    _same_bits(rows[1], rows[60][:1])  # a row's result does not depend on its batch


@pytest.mark.parametrize("shape", [(0, 64), (8, 0), (0, 0)])
@pytest.mark.parametrize("element", ["f8E4M3FN", "f4E2M1FN"])
def test_a_weight_without_rows_or_columns_gives_zeros(shape, element):
    lin = mlir_mx.Linear(oracle.quantize(np.zeros(shape, np.float32), element, 32), threads=1)
    for m in (0, 1, 8, 48, 49, 60):
        for x in (np.ones((m, shape[1]), np.float32),
                  oracle.quantize(np.ones((m, shape[1]), np.float32), "f8E5M2", 32)):  # fmt: skip
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


@pytest.mark.parametrize(
    "threads, element",
    [(1, "f8E4M3FN"), (2, "f4E2M1FN"), (2, "i8")]
    + [
        pytest.param(t, e, marks=pytest.mark.slow)
        for t, e in [(2, "f8E4M3FN"), (1, "f4E2M1FN"), (1, "i8")]
    ],
)
def test_read_only_activations_in_either_call_order(element, threads, tmp_path):
    """Read-only x at every shape class, in both call histories: on a fresh
    Linear (its first call) and then writeable x on it, and writeable x
    first and then read-only x on the same Linear: accepted, the same result
    bit for bit, and x unchanged."""
    rng = np.random.default_rng(1)
    w = _weight(element, (96, 64))
    x = rng.standard_normal((100, 64)).astype(np.float32)
    for m in (1, 8, 100):
        want = mlir_mx.Linear(w, threads=threads)(x[:m].copy())
        for how, ro in _read_only_forms(x[:m].copy(), tmp_path).items():
            assert not ro.flags.writeable
            read_only_first = mlir_mx.Linear(w, threads=threads)
            got = read_only_first(ro)  # the first call of its kernel
            np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32), err_msg=how)
            again = read_only_first(x[:m].copy())  # then a writeable call
            np.testing.assert_array_equal(again.view(np.uint32), want.view(np.uint32), err_msg=how)
            writeable_first = mlir_mx.Linear(w, threads=threads)
            writeable_first(x[:m].copy())
            got = writeable_first(ro)  # read-only after a writeable call
            np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32), err_msg=how)
            np.testing.assert_array_equal(np.asarray(ro), x[:m])


@pytest.mark.parametrize("threads", [1, 2])
def test_read_only_mx_activations_and_no_kernel_writes_its_inputs(threads):
    """Read-only MX activations (codes and scales), first on a fresh Linear
    and after a writeable call, at 1 and 2 threads, at every shape class;
    and no kernel writes its activations or its weight."""
    w = _weight("f4E2M1FN", (64, 64))
    rng = np.random.default_rng(2)
    for m in (3, 60):
        xq = oracle.quantize(rng.standard_normal((m, 64)).astype(np.float32), "f8E4M3FN", 32)
        codes, scales = xq.codes.copy(), xq.scales.copy()
        codes.setflags(write=False)
        scales.setflags(write=False)
        ro = type(xq)(codes, scales, xq.element, xq.block_size, xq.axis)
        want = mlir_mx.Linear(w, threads=threads)(xq)
        first = mlir_mx.Linear(w, threads=threads)
        np.testing.assert_array_equal(first(ro).view(np.uint32), want.view(np.uint32))
        np.testing.assert_array_equal(first(xq).view(np.uint32), want.view(np.uint32))
        later = mlir_mx.Linear(w, threads=threads)
        later(xq)
        np.testing.assert_array_equal(later(ro).view(np.uint32), want.view(np.uint32))
        assert ro.bitwise_equal(xq)
    lin = mlir_mx.Linear(w, threads=threads)
    lin(ro)
    lin(np.ones((1, 64), np.float32))
    for (prob, *_schedule_threads_parallel), runner in lin._runners.items():
        n_act = 1 if prob.a_element is None else 2
        n_weights = 1 if prob.b_dot else 2  # the dot kernels' records, or codes and scales
        written = runner._compiled.writes("matmul")
        # the activations and the weight are read, the output written
        assert written == {n_act + n_weights}, (prob, written)


def test_kernel_call_messages_name_x_not_arg0():
    lin = mlir_mx.Linear(_weight(), threads=1)
    # The kernel calls Linear binds name its arguments in Linear's terms.
    x = np.ones((1, 64), np.float32)
    xq = oracle.quantize(x, "f8E4M3FN", 32)
    f32_call = lin._bound(Activations(None, False, None), 1, 1)
    with pytest.raises(ValueError, match=r"^x: array is not C-contiguous"):
        f32_call(np.ones((1, 128), np.float32)[:, ::2], np.zeros((1, 64), np.float32))
    with pytest.raises(TypeError, match=r"^the output: expected dtype float32, got float64"):
        f32_call(x, np.zeros((1, 64), np.float64))
    mx_call = lin._bound(Activations(xq.element, xq.is_packed, None), 1, 1)
    with pytest.raises(TypeError, match=r"^x \(scales\): expected dtype"):
        mx_call(lin._mx_args(xq)[0], xq.scales.view(np.uint8), np.zeros((1, 64), np.float32))
    raw = np.zeros(64 * 4 + 1, np.uint8)
    misaligned = np.frombuffer(raw.data, np.float32, 64, offset=1).reshape(1, 64)
    assert not misaligned.flags.aligned
    assert lin(misaligned).shape == (1, 64)  # copied, not refused
    strided = np.ones((4, 128), np.float32)[:, ::2]
    np.testing.assert_array_equal(lin(strided), lin(np.ascontiguousarray(strided)))
    for bad in (
        np.ones((1, 64), np.complex64),
        np.ones((1, 64), object),
        np.ones((1, 63), np.float32),
    ):
        with pytest.raises((TypeError, ValueError), match=r"^x: ") as info:
            lin(bad)
        assert "%arg" not in str(info.value)


def test_half_precision_activations_are_converted():
    lin = mlir_mx.Linear(_weight(), threads=1)
    x = np.random.default_rng(3).standard_normal((5, 64)).astype(np.float32)
    for dtype in (np.float16, ml_dtypes.bfloat16):
        xh = x.astype(dtype)
        np.testing.assert_array_equal(lin(xh), lin(xh.astype(np.float32)))
    with pytest.raises(
        TypeError, match=r"x: expected dtype float32 \(or float16, bfloat16\), got float64"
    ):
        lin(x.astype(np.float64))


def test_torch_half_precision_and_requires_grad_activations():
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
def test_threads_are_checked_at_construction(threads, err):
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


@pytest.mark.parametrize("threads", [2, 3])
def test_one_block_along_k_at_several_threads(threads):
    """A weight with one block along K at 2-3 threads (found by the Linear
    suite: a kept view of the MXArray's read-only scales was refused by the
    multi-threaded kernels; the Linear now holds arrays of its own)."""
    rng = np.random.default_rng(5)
    w = oracle.quantize(rng.standard_normal((128, 64)).astype(np.float32), "i8", 64)
    x = oracle.quantize(rng.standard_normal((17, 64)).astype(np.float32), "f8E4M3FN", 64)
    y = mlir_mx.Linear(w, threads=threads)(x)
    b = MXArray(w.codes.T.copy(), w.scales.T.copy(), "i8", 64, 0)
    _same_bits(y, oracle.blocked_order(x, b, np.zeros((17, 128), np.float32)))

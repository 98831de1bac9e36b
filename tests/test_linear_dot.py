"""``mlir_mx.Linear`` on the dot kernels, and ``activations=``.

* Every weight x activation format pair gives the f32 kernels' bits (the
  dot kernels where the CPU has them, the f32 kernels elsewhere), at every
  shape class; a row's result does not depend on its batch.
* ``Linear(w, activations=F)(x)`` equals ``Linear(w)(quantize(x, F, B))`` bit
  for bit, with the quantization inside the dot kernels or, on a CPU
  without them (simulated), by the oracle.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from dot_cases import AVX2_PAIRS, FP8, INTS, f32_bits, mask_avx2, same_bits

import mlir_mx
from mlir_mx import oracle
from mlir_mx.kernels.dot.units import dot_kind
from mlir_mx.numerics import MXArray

FORMATS = INTS + FP8



def _weight(element, n=96, k=128, seed=0):
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((n, k)) * np.exp2(rng.integers(-8, 8, (n, 1)))
    return oracle.quantize(w.astype(np.float32), element, 32)


def _as_b(w: MXArray) -> MXArray:
    """W (out, in) blocked along in -> B = W^T (in, out) blocked along axis 0."""
    return MXArray(w.codes.T.copy(), w.scales.T.copy(), w.element, w.block_size, axis=0)


PAIRS = list(itertools.product(FORMATS, FORMATS))
#: Quick: each pair at one batch size (decode, small, prefill in turn).
QUICK = [(w, a, (1, 5, 70)[i % 3]) for i, (w, a) in enumerate(PAIRS)]
SLOW = [(w, a, m) for w, a in PAIRS for m in (1, 5, 70)]


def _pair(welem, aelem, m):
    """Rows ``:m`` of a 70-row product equal the f32 kernels on the same
    operands (so a row's result does not depend on its batch)."""
    w = _weight(welem)
    # activations=aelem: the dot kernels' records where they serve the pair
    # (mlir_mx.linear.weight_form.records_unit), else the stored form.
    lin = mlir_mx.Linear(w, threads=2, activations=aelem)
    rng = np.random.default_rng(1)
    x = oracle.quantize(rng.standard_normal((70, 128)).astype(np.float32), aelem, 32)
    xm = MXArray(x.codes[:m], x.scales[:m], aelem, 32)
    want = f32_bits(x, _as_b(w), np.zeros((70, 96), np.float32))
    assert same_bits(lin(xm), want[:m]).all(), m


@pytest.mark.parametrize("welem, aelem, m", QUICK)
def test_every_weight_and_activation_pair(welem, aelem, m):
    _pair(welem, aelem, m)


@pytest.mark.slow
@pytest.mark.parametrize("welem, aelem, m", SLOW)
def test_every_pair_at_every_shape_class(welem, aelem, m):
    _pair(welem, aelem, m)


@pytest.mark.parametrize(
    "act, welem", [("i8", "f4E2M1FN"), ("f6E2M3FN", "i8"), ("f8E4M3FN", "f4E2M1FN")]
)
@pytest.mark.parametrize("cpu", ["host", "baseline"])
@pytest.mark.filterwarnings("ignore:Linear.*f32 kernels")  # ref: the f32 kernels on purpose
def test_activations_quantize_per_call(monkeypatch, act, welem, cpu):
    if cpu == "baseline":  # no dot units: the oracle quantizes, the f32 kernels run
        monkeypatch.setenv("MLIR_MX_CPU_FEATURES", "baseline")
    w = _weight(welem)
    lin = mlir_mx.Linear(w, threads=2, activations=act)
    ref = mlir_mx.Linear(w, threads=2)
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((70, 128)) * np.exp2(rng.integers(-20, 20, (70, 1)))).astype(
        np.float32
    )
    x[3, 50] = np.inf
    for m in (1, 9, 70):
        got, want = lin(x[:m]), ref(oracle.quantize(x[:m], act, 32))
        assert same_bits(got, want).all(), m
    assert np.isnan(lin(x[:9])[3]).all()
    assert lin(x[0]).shape == (96,)


def test_activations_argument_and_records_bytes():
    w = _weight("f4E2M1FN")
    with pytest.raises(ValueError, match="activations"):
        mlir_mx.Linear(w, activations="f9")
    with pytest.raises(TypeError, match="activations"):
        mlir_mx.Linear(w, activations=8)
    lin = mlir_mx.Linear(w, threads=1, activations="i8")
    assert "activations='i8'" in repr(lin)
    before = lin.nbytes
    lin(np.ones((2, 128), np.float32))
    from mlir_mx.kernels.dot.units import KINDS, dot_kind

    # One form of the weight, made at construction; a call adds nothing: the
    # stored codes here (96 columns would pad the records' last 64-column panel).
    assert lin.records_unit is None and lin.nbytes == before == w.nbytes
    lin = mlir_mx.Linear(_weight("f4E2M1FN", n=128), threads=1, activations="i8")
    before = lin.nbytes
    lin(np.ones((2, 128), np.float32))
    if dot_kind("i8", "f4E2M1FN", 32) == KINDS["i8"]:  # the records alone: 4.25 bits per FP4
        assert lin.records_unit == "i8"
    assert lin.nbytes == before and before * 8 / (128 * 128) == 4.25


@pytest.mark.parametrize(
    "cpu, act, welem",
    [
        ("avx2", *AVX2_PAIRS["sign"]),
        ("avx2", *AVX2_PAIRS["i16"]),
        ("avx-vnni", *AVX2_PAIRS["offset"]),
    ],
)
def test_avx2_linear_reaches_the_dot_kernels(monkeypatch, cpu, act, welem):
    """Without AVX-512 (masked) ``activations=`` picks the 256-bit kernels'
    records once and runs the dot kernels at every shape class, with the f32
    kernels' bits for the quantized activations."""
    mask_avx2(monkeypatch, cpu)
    w = _weight(welem, n=128)
    lin = mlir_mx.Linear(w, threads=2, activations=act)
    assert lin.records_unit == dot_kind(act, welem, 32).name
    rng = np.random.default_rng(4)
    x = rng.standard_normal((70, 128)).astype(np.float32)
    for m in (1, 9, 70):
        assert lin.schedule(x[:m]).startswith("int-")
        qx = oracle.quantize(x[:m], act, 32)
        want = f32_bits(qx, _as_b(w), np.zeros((m, 128), np.float32))
        assert same_bits(lin(x[:m], threads=1 + m % 2), want).all(), m


def test_mx_activations_without_records_say_why():
    """A plain ``Linear(w)`` holds no dot records: MX activations of a pair with
    a dot unit here run on the f32 kernels, and the call says so in one line."""
    w = _weight("f4E2M1FN", n=128)
    x = oracle.quantize(np.ones((2, 128), np.float32), "i8", 32)
    lin = mlir_mx.Linear(w, threads=1)
    if dot_kind("i8", "f4E2M1FN", 32) is None:
        pytest.skip("no dot unit for i8 x FP4 on this CPU: nothing to say")
    with pytest.warns(
        UserWarning, match=r"i8 activations run on the f32 kernels.*activations='i8'"
    ):
        lin(x)
    assert lin.schedule(x) == "small"
    assert mlir_mx.Linear(w, threads=1, activations="i8").schedule(x) == "int-small"

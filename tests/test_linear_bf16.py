"""``activations="bf16"`` on ``mlir_mx.Linear``, and bf16 inputs.

* ``Linear(w, activations="bf16")(x)`` equals ``Linear(w)(round_bf16(x))``
  bit for bit for every weight format and shape class, 1 and 2 threads: on
  the ``bf16-*`` dot kernels where they are chosen (``host.bf16_dot_pays``,
  forced here as on AMD), on the f32 kernels otherwise (Intel, no
  AVX512-BF16, AVX2), with the same bits across those CPUs.
* The weight is held once, in its stored form (no records).
* ``activations=`` names are checked: ``"bf16"`` is one more entry.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from dot_cases import AVX2_MASKS, same_bits

import mlir_mx
from mlir_mx import oracle
from mlir_mx.errors import MXValueError
from mlir_mx.host import has_features
from mlir_mx.linear import activations_format
from mlir_mx.numerics import ELEMENT_FORMATS

FORMATS = list(ELEMENT_FORMATS)


def bf16(x: np.ndarray) -> np.ndarray:
    return x.astype(ml_dtypes.bfloat16).astype(np.float32)


def _weight(element, n=128, k=96, seed=0):
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((n, k)) * np.exp2(rng.integers(-8, 8, (n, 1)))
    return oracle.quantize(w.astype(np.float32), element, 32)


def _x(m, k=96, seed=1):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((m, k)) * np.exp2(rng.integers(-30, 30, (m, 1)))
    return x.astype(np.float32)


def _vendor(monkeypatch, name):
    from mlir_mx import host

    monkeypatch.setattr(host, "cpu_vendor", lambda: name)


#: Each format at one shape class per vendor rule (rotated): M = 1, 5, 70.
CASES = [(e, (1, 5, 70)[(i + j) % 3], v) for i, e in enumerate(FORMATS) for j, v in
         enumerate(["AuthenticAMD", "GenuineIntel"])]  # fmt: skip


@pytest.mark.parametrize("element, m, vendor", CASES)
def test_bf16_activations_equal_rounding_then_the_exact_path(monkeypatch, element, m, vendor):
    _vendor(monkeypatch, vendor)
    w = _weight(element)
    lin = mlir_mx.Linear(w, activations="bf16", threads=2)
    exact = mlir_mx.Linear(w, threads=2)
    x = _x(70)[:m]
    got = lin(x)
    assert same_bits(got, exact(bf16(x))).all()
    assert same_bits(lin(x, threads=1), got).all()
    assert lin.activations == "bf16" and lin.records_unit is None and lin.holds_stored
    assert lin.nbytes == exact.nbytes
    dot = vendor == "AuthenticAMD" and has_features("avx512_bf16", "avx512bw") and m > 1
    assert lin.schedule(x).startswith("bf16-") is dot, lin.schedule(x)


@pytest.mark.parametrize("mask", ["-avx512_bf16", *AVX2_MASKS])
def test_bf16_activations_keep_their_bits_on_every_isa(monkeypatch, mask):
    """Without AVX512-BF16 (and on AVX2, AVX-VNNI) the f32 kernels on the
    rounded values: the bits of the bf16 dot kernels here."""
    _vendor(monkeypatch, "AuthenticAMD")
    w = _weight("f4E2M1FN", n=192, k=128)
    x = _x(40, k=128)
    want = mlir_mx.Linear(w, activations="bf16", threads=2)(x)
    monkeypatch.setenv("MLIR_MX_CPU_FEATURES", AVX2_MASKS[mask][0] if mask in AVX2_MASKS else mask)
    lin = mlir_mx.Linear(w, activations="bf16", threads=2)
    assert not lin.schedule(x).startswith("bf16-")
    assert same_bits(lin(x), want).all()


def test_bf16_denormal_inputs_through_linear(monkeypatch):
    """bf16 denormals and values under the floor: the exact path's bits."""
    _vendor(monkeypatch, "AuthenticAMD")
    w = _weight("f8E4M3FN")
    x = _x(9)
    x[2] = np.float32(2.0**-130)
    x[4] *= np.float32(2.0**-112)
    lin = mlir_mx.Linear(w, activations="bf16")
    assert same_bits(lin(x), mlir_mx.Linear(w)(bf16(x))).all()


def test_bf16_numpy_input_is_exact():
    """A bfloat16 x widens exactly: ``activations="bf16"`` gives the same bits."""
    w = _weight("f4E2M1FN")
    xb = _x(6).astype(ml_dtypes.bfloat16)
    a = mlir_mx.Linear(w, activations="bf16")(xb)
    assert same_bits(a, mlir_mx.Linear(w)(xb)).all()


def test_activations_names():
    assert activations_format("bf16") is activations_format(activations_format("bf16"))
    assert activations_format("bf16").name == "bf16"
    with pytest.raises(MXValueError, match="activations"):
        mlir_mx.Linear(_weight("f4E2M1FN"), activations="bf17")
    assert "activations='bf16'" in repr(mlir_mx.Linear(_weight("i8"), activations="bf16"))

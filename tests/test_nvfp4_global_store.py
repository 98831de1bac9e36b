"""NVFP4's global scale in the dot kernels' last store (issue 54,
``Problem.b_global``, ``mlir_mx.kernels.dot.store``): ``Linear``'s integer
kernels divide each output by ``g`` themselves, once, at K's last chunk
(known when emitted, or compared per pass), with the bits of the oracle's
``f32(c / g)``; the f32 path still divides after its kernel.
"""

from __future__ import annotations

import numpy as np
import pytest
from dot_cases import nvfp4_i8_oracle, same_bits

import mlir_mx
from mlir_mx import oracle
from mlir_mx.kernels import Problem
from mlir_mx.kernels.dot.store import last_chunk
from mlir_mx.linear import weight_form
from mlir_mx.numerics.formats import E4M3_SCALE_TYPE

#: 1 / 3 is not an f32: ``c * f32(1 / 3)`` differs from ``c / 3`` on some outputs.
G = np.float32(3.0)


def _case(n: int, k: int, m: int):
    rng = np.random.default_rng(5)
    w = oracle.quantize(
        rng.standard_normal((n, k)).astype(np.float32), "nvfp4", axis=1, global_scale=G
    )
    return w, rng.standard_normal((m, k)).astype(np.float32)


def test_the_case_tells_a_division_from_none_two_or_a_reciprocal():
    """The bits below would catch ``g`` missing, applied twice, or applied as
    a multiply by ``f32(1 / g)``."""
    w, x = _case(64, 512, 53)
    want = nvfp4_i8_oracle(w, x)
    plain = nvfp4_i8_oracle(
        mlir_mx.MXArray(w.codes, w.scales, "nvfp4", 16, axis=1, global_scale=np.float32(1)), x
    )
    assert not same_bits(plain, want).all()  # g missing
    assert not same_bits(want / G, want).all()  # g twice
    assert not same_bits(plain * np.float32(1 / G), want).all()  # a reciprocal multiply
    assert same_bits(plain / G, want).all()  # the oracle is f32(c / g)


def test_the_last_chunk_found_per_pass_divides_once():
    """int-small at K = 512: 4 chunks of 8 blocks, the last one found by a
    compare per tile pass (the other cases are known when emitted, and
    ``test_nvfp4_chunks.py`` runs them under every mask)."""
    w, x = _case(64, 512, 5)
    want = nvfp4_i8_oracle(w, x)
    lin = mlir_mx.Linear(w, activations="i8", threads=2)
    assert lin.schedule(x) == "int-small"
    kind = lin._activations(x)[1]
    for threads in (1, 2):
        assert same_bits(lin(x, threads=threads), want).all(), threads
        assert weight_form.applies_global(lin._bound(kind, 5, threads))


@pytest.mark.slow  # 6 kernels each, ~3-4 s
@pytest.mark.parametrize("k", [512, 4096 + 48])
def test_the_integer_kernels_divide_once_at_the_last_store(k):
    """K = 512: int-small's 4 chunks of 8 blocks (the last found per pass),
    int-prefill's one; K = 4144: int-prefill's chunk of 256 blocks and a tail
    of 3, int-small's tail.  Decode takes all of K in one chunk."""
    w, x = _case(64, k, 53)
    want = nvfp4_i8_oracle(w, x)
    lin = mlir_mx.Linear(w, activations="i8", threads=2)
    for m in (53, 5, 1):
        kind = lin._activations(x[:m])[1]
        for threads in (1, 2):
            got = lin(x[:m], threads=threads)
            assert same_bits(got, want[:m]).all(), (lin.schedule(x[:m]), m, threads)
            assert weight_form.applies_global(lin._bound(kind, m, threads))


def test_call_into_divides_once():
    w, x = _case(64, 512, 5)
    want = nvfp4_i8_oracle(w, x)
    lin = mlir_mx.Linear(w, activations="i8", threads=1)
    out = np.zeros((5, 64), np.float32)
    assert lin.call_into(x.ctypes.data, 5, out.ctypes.data, 1)
    assert same_bits(out, want).all()


def test_the_f32_path_still_divides_after_its_kernel():
    w, x = _case(64, 512, 5)
    got = mlir_mx.Linear(w, threads=1)(x)
    one = mlir_mx.MXArray(w.codes, w.scales, "nvfp4", 16, axis=1, global_scale=np.float32(1))
    assert same_bits(got, mlir_mx.Linear(one, threads=1)(x) / G).all()


def test_b_global_needs_nvfp4_records():
    common = (None, 64, 512, 16, None, "f4E2M1FN")
    Problem(*common, a_quant="i8", b_dot="i8", b_scale_type=E4M3_SCALE_TYPE, b_global=True)
    with pytest.raises(ValueError, match="b_global"):
        Problem(*common, a_quant="i8", b_scale_type=E4M3_SCALE_TYPE, b_global=True)
    with pytest.raises(ValueError, match="b_global"):
        Problem(*common, a_quant="i8", b_dot="i8", b_global=True)


class _K:
    """What :func:`last_chunk` reads of a kernel: the problem and its chunk."""

    def __init__(self, kblocks: int, kcb: int):
        self.prob = Problem(None, 64, 16 * kblocks, 16, None, "f4E2M1FN")
        self.kcb = kcb
        self.kb = None  # a compare is emitted only in the last case below


def test_the_last_chunk_is_known_when_it_can_be():
    assert last_chunk(_K(259, 256), None, 3) is True  # the tail
    assert last_chunk(_K(259, 256), None, 256) is False  # a full chunk before the tail
    assert last_chunk(_K(256, 256), None, 256) is True  # the only chunk

"""The matmul's claim itself (``mlir_mx.numerics.matmul``): the blocked-order
emulation against an independent exact model, and the bound's underflow
term on cases whose roundings are known by hand (docs/numerics.md, "The
claim, as a condition on the operands")."""

from __future__ import annotations

import numpy as np
import pytest
from dot_cases import fma_f32, model

from mlir_mx import oracle
from mlir_mx.numerics import ELEMENT_FORMATS, MXArray, decode_elements, finite_codes
from mlir_mx.numerics.matmul import _fma

M, K, N = 3, 64, 5


def _mx(rng, shape, elem, axis, scales) -> MXArray:
    fmt = ELEMENT_FORMATS[elem]
    codes = rng.choice(finite_codes(fmt), shape).view(np.uint8).copy()
    zero = rng.random(scales.shape) < 0.3
    codes[np.repeat(zero, 32, axis=axis)] = 0
    return MXArray(codes.view(fmt.dtype), scales.astype(np.uint8), elem, 32, axis)


def _same(got, want) -> bool:
    return bool(
        np.all((got.view(np.uint32) == want.view(np.uint32)) | (np.isnan(got) & np.isnan(want)))
    )


@pytest.mark.parametrize("ea", list(ELEMENT_FORMATS))
def test_blocked_order_is_the_exact_model(ea):
    """mx x mx with scales anywhere in 2^-127..2^127 (E8M0 0..254) against
    ``dot_cases.model`` (every FMA rounded once with Fractions)."""
    rng = np.random.default_rng(len(ea))
    for eb in ELEMENT_FORMATS:
        a = _mx(rng, (M, K), ea, 1, rng.integers(0, 255, (M, K // 32)))
        b = _mx(rng, (K, N), eb, 0, rng.integers(0, 255, (K // 32, N)))
        acc = rng.choice(np.float32([0.0, -0.0, 1.5, 2.0**-140, -(2.0**100)]), (M, N))
        assert _same(oracle.blocked_order(a, b, acc), model(a, b, acc)), eb


def test_the_f32_fma_rounds_once():
    """``_fma`` against Fractions: random triples (subnormal to large, f32
    values times E5M2 and INT8 element values), and the case a plain f64 sum
    gets wrong: ``2^31 + (2^7 + 2^-23)`` rounds in f64 to the f32 midpoint
    ``2^31 + 2^7``, which ties to even (2^31), while the exact sum lies
    above it (2^31 + 2^8); here ``x y = (2^30 + 1) 2^-23`` with ``x =
    16519105 * 2^-17`` and the INT8 element 65/64 (2^30 + 1 = 65 * 16519105),
    at many scales and both signs."""
    rng = np.random.default_rng(3)
    n = 3000
    elems = np.concatenate([decode_elements(finite_codes(f), f) for f in ("f8E5M2", "i8")])
    x = np.ldexp(rng.uniform(1, 2, n), rng.integers(-149, 60, n)).astype(np.float32)
    y = rng.choice(elems, n).astype(np.float32)
    z = np.ldexp(rng.uniform(-2, 2, n), rng.integers(-149, 60, n)).astype(np.float32)
    shift = np.arange(-100, 90, 5)
    sign = rng.choice((-1.0, 1.0), shift.size)
    x = np.concatenate([x, np.ldexp(16519105.0 * sign, shift - 17).astype(np.float32)])
    y = np.concatenate([y, np.full(shift.size, 65 / 64, np.float32)])
    z = np.concatenate([z, np.ldexp(sign, shift + 31).astype(np.float32)])
    assert np.all(x[n:].astype(np.float64) * y[n:] == np.ldexp((2.0**30 + 1) * sign, shift - 23))
    got = _fma(x, y, z)
    want = np.array(
        [fma_f32(float(a), float(b), float(c)) for a, b, c in zip(x, y, z, strict=True)]
    )
    assert _same(got, want.astype(np.float32))
    plain = (x.astype(np.float64) * y + z).astype(np.float32)
    assert not _same(plain[n:], got[n:])  # the constructed cases do need the correction


def _one_block(elem, codes_a, sa, codes_b, sb):
    fa = ELEMENT_FORMATS[elem]
    a = MXArray(
        np.array([codes_a], np.uint8).view(fa.dtype), np.array([[sa]], np.uint8), elem, 32, 1
    )
    b = MXArray(
        np.array(codes_b, np.uint8)[:, None].view(fa.dtype), np.array([[sb]], np.uint8), elem, 32, 0
    )
    return a, b


def test_zero_blocks_count_nothing():
    """A zero A block with scale 2^127 against B blocks with scale 2^127 and
    acc = 5: exactly 37, within gamma_n * 37 (no underflow allowance)."""
    one = 0x38  # E4M3 1.0
    codes = np.zeros((1, K), np.uint8)
    codes[0, 32:] = one
    a = MXArray(codes.view(np.dtype("float8_e4m3fn")), np.uint8([[254, 127]]), "f8E4M3FN", 32, 1)
    b = MXArray(np.full((K, 1), one, np.uint8).view(np.dtype("float8_e4m3fn")),
                np.uint8([[254], [127]]), "f8E4M3FN", 32, 0)  # fmt: skip
    exact, bound, inside = oracle.matmul_reference(a, b, np.full((1, 1), 5.0, np.float32))
    assert inside.all() and exact[0, 0] == 37.0 and bound[0, 0] < 37 * 70 * 2.0**-24
    assert oracle.blocked_order(a, b, np.full((1, 1), 5.0, np.float32))[0, 0] == 37.0


def test_which_roundings_count():
    """The underflow term counts the roundings that can land off the 2^-149
    grid, and nothing else (2^-150 each, times the scales after it)."""
    zero = np.zeros((1, 1), np.float32)
    # E5M2 x E5M2 smallest subnormals (2^-16 each): the product 2^-32 times
    # sb = 2^-127 is off the grid, so t may round (sa = 1: counts 1).
    a, b = _one_block("f8E5M2", [1] + [0] * 31, 127, [1] + [0] * 31, 0)
    _, bound, _ = oracle.matmul_reference(a, b, zero)
    assert 2.0**-149 <= bound[0, 0] <= 2.0**-149 * 1.001  # t and the dequantize-first product
    assert oracle.blocked_order(a, b, zero)[0, 0] == 0.0  # 2^-159 rounds to 0
    # E2M1 x E2M1 (0.5 each): 0.25 * 2^-127 = 2^-129 is on the grid: no allowance.
    a, b = _one_block("f4E2M1FN", [1] + [0] * 31, 127, [1] + [0] * 31, 0)
    exact, bound, _ = oracle.matmul_reference(a, b, zero)
    assert exact[0, 0] == 2.0**-129 and bound[0, 0] < 2.0**-129 * 40 * 2.0**-24  # gamma_n T only
    assert oracle.blocked_order(a, b, zero)[0, 0] == np.float32(2.0**-129)
    # ... but with sa = 2^-127 too the final FMA's 2^-256 is off the grid.
    a, b = _one_block("f4E2M1FN", [1] + [0] * 31, 0, [1] + [0] * 31, 0)
    _, bound, _ = oracle.matmul_reference(a, b, zero)
    assert 2.0**-149 <= bound[0, 0] < 2.0**-148  # that FMA and the dequantize-first product
    # f32 activations: x = 2^-149 against 1.0 is on the grid; against 2^-6 (i8 code 1) not.
    w = MXArray(np.int8([[64], [1]]).repeat(32, 1).T.copy(), np.uint8([[187, 187]]), "i8", 32, 0)
    x = np.zeros((1, 32), np.float32)
    x[0, 0] = 2.0**-149
    exact, bound, _ = oracle.matmul_reference(x, w, np.zeros((1, 2), np.float32))
    assert bound[0, 0] < 2.0**-89 * 2.0**-16  # gamma_n * 2^-89 only: 0.0 would be refused
    assert 2.0**-150 * 2.0**60 <= bound[0, 1] < 2.0**-149 * 2.0**60

"""Functions that return their ``!mx.tensor`` arguments (reproducer
``f11_return_mx_argument``): "lowering left 'func.return' outside the LLVM
dialect".  The Runner chose its default pipeline by the presence of mx ops, so
a module with mx types but no mx op skipped mx-to-linalg; it now looks at the
types too.  The values come back as MXArrays, codes and scales bit for bit, in
every element format (packed FP4/FP6 included) and along either axis.
"""

from __future__ import annotations

import numpy as np
import pytest
from matmul_cases import ELEMENTS

from mlir_mx import oracle
from mlir_mx.execution import Runner


def _t(shape, element, axis):
    ax = ", axis = 0" if axis == 0 else ""
    return f"!mx.tensor<{shape[0]}x{shape[1]}x{element}, block_size = 32, scale_type = f8E8M0FNU{ax}>"


@pytest.mark.parametrize("element", ELEMENTS)
@pytest.mark.parametrize("shape,axis", [((4, 64), 1), ((64, 6), 0)])
def test_functions_that_return_their_mx_arguments(element, shape, axis):
    q = _t(shape, element, axis)
    p = _t((shape[1], shape[0]), "f8E4M3FN", 1 - axis)
    text = f"""
func.func @identity(%q: {q}) -> {q} {{ return %q : {q} }}
func.func @twice(%q: {q}) -> ({q}, {q}) {{ return %q, %q : {q}, {q} }}
func.func @swap(%q: {q}, %p: {p}) -> ({p}, {q}) {{ return %p, %q : {p}, {q} }}
"""
    r = Runner(text, threads=1)
    rng = np.random.default_rng(0)
    a = oracle.quantize(rng.standard_normal(shape).astype(np.float32), element, 32, axis=axis)
    b = oracle.quantize(
        rng.standard_normal(shape[::-1]).astype(np.float32), "f8E4M3FN", 32, axis=1 - axis
    )
    assert r.identity(a).bitwise_equal(a)
    x, y = r.twice(a)
    assert x.bitwise_equal(a) and y.bitwise_equal(a)
    x, y = r.swap(a, b)
    assert x.bitwise_equal(b) and y.bitwise_equal(a)

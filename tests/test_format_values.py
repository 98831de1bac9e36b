"""An ElementFormat is taken wherever a format name is (the compiled and the
oracle's quantize, MXArray, Linear, matmul), gives the same bits, and the
objects made hold the table's format itself, not a name to look up again."""

from __future__ import annotations

import numpy as np
import pytest
from format_cases import BY_BEHAVIOUR

import mlir_mx
from mlir_mx import oracle
from mlir_mx.errors import MXValueError
from mlir_mx.numerics import ELEMENT_FORMATS, MXArray, element_format


@pytest.mark.parametrize("name", BY_BEHAVIOUR)
def test_an_element_format_gives_the_bits_of_its_name(name):
    fmt = ELEMENT_FORMATS[name]
    assert element_format(fmt) is fmt and element_format(name) is fmt
    x = np.random.default_rng(0).standard_normal((8, 64)).astype(np.float32)
    a = mlir_mx.quantize(x, fmt, 32, threads=1)
    assert a.format is fmt and a.element == name
    assert a.bitwise_equal(mlir_mx.quantize(x, name, 32, threads=1))
    by_oracle = oracle.quantize(x, fmt, 32)
    assert a.bitwise_equal(by_oracle) and by_oracle.format is fmt
    b = MXArray.from_packed(a.packed_codes(), a.scales, fmt, 32)
    c = MXArray(a.codes, a.scales, fmt, 32)
    assert b.bitwise_equal(a) and c.bitwise_equal(a) and b.format is fmt and c.format is fmt
    lin = mlir_mx.Linear(x, element=fmt, threads=1)  # W (out 8, in 64)
    ref = mlir_mx.Linear(x, element=name, threads=1)
    assert lin.element == name and lin.weight().bitwise_equal(ref.weight())
    assert lin.weight().bitwise_equal(a)
    y = np.random.default_rng(1).standard_normal((3, 64)).astype(np.float32)
    np.testing.assert_array_equal(lin(y), ref(y))
    got = mlir_mx.matmul(y, x, element=fmt, threads=1)
    np.testing.assert_array_equal(got, ref(y))


def test_linear_from_its_held_arrays_takes_an_element_format():
    fmt = ELEMENT_FORMATS["f4E2M1FN"]
    w = mlir_mx.quantize(np.random.default_rng(1).standard_normal((128, 64)), fmt, 32)
    lin = mlir_mx.Linear(w, threads=1)
    codes, scales = lin.stored
    again = mlir_mx.Linear.from_stored(codes, scales, fmt, 32, 64, 128, threads=1)
    assert again.element == "f4E2M1FN" and again.weight().bitwise_equal(w)
    with pytest.raises(MXValueError, match="element: unknown MX element format 'f7'"):
        mlir_mx.Linear.from_stored(codes, scales, "f7", 32, 64, 128)


def test_a_pickled_mxarray_holds_the_tables_format():
    import pickle

    a = mlir_mx.quantize(np.ones((2, 32), np.float32), "f6E2M3FN", 32)
    assert pickle.loads(pickle.dumps(a)).format is ELEMENT_FORMATS["f6E2M3FN"]

"""MXArray holds its stored form only (4.25 bits per MXFP4 element) and is a value.

Memory is measured from the arrays an object really references: every numpy
array among its attributes, followed down to the array that owns the memory,
each owner counted once (``referenced_nbytes``).
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest

import mlir_mx
from mlir_mx import oracle
from mlir_mx.execution import Runner
from mlir_mx.numerics import MXArray


def _owner(a: np.ndarray) -> np.ndarray:
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a


def referenced_nbytes(obj) -> int:
    """Bytes of the distinct memory owners of the numpy arrays ``obj`` references."""
    names = getattr(type(obj), "__slots__", ()) or vars(obj)
    owners = {}
    for name in names:
        value = getattr(obj, name, None)
        if isinstance(value, np.ndarray):
            o = _owner(value)
            owners[id(o)] = o
    return sum(o.nbytes for o in owners.values())


def _fp4(shape=(64, 4096), seed=0) -> MXArray:
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    return oracle.quantize(x, "f4E2M1FN", 32)


def _bits(a: MXArray) -> float:
    return referenced_nbytes(a) * 8 / a.size


def test_after_quantize_an_mxfp4_array_holds_4_25_bits_per_element():
    a = _fp4()
    assert a.is_packed and _bits(a) == 4.25 and a.nbytes == referenced_nbytes(a)
    codes = a.codes  # computed on demand, not kept
    assert codes.shape == a.shape and codes.dtype == a.format.dtype
    assert _bits(a) == 4.25


@pytest.mark.parametrize("copy", [None, True, False])
def test_after_from_packed_still_4_25_bits(copy):
    a = _fp4()
    b = MXArray.from_packed(np.array(a.packed_codes()), np.array(a.scales), "f4E2M1FN", 32, copy=copy)
    assert b.bitwise_equal(a) and _bits(b) == 4.25


def test_after_a_runner_call_still_4_25_bits():
    t = "!mx.tensor<8x256xf4E2M1FN, block_size = 32, scale_type = f8E8M0FNU>"
    text = (
        f"func.func @fs(%t: {t}) -> {t} {{\n  %c = arith.constant 2.0 : f32\n"
        f"  %r = mx.fold_scale %t, %c : {t}, f32 -> {t}\n  return %r : {t}\n}}"
    )
    a = _fp4((8, 256))
    out = Runner(text, threads=1).invoke("fs", a)
    assert _bits(a) == 4.25 and _bits(out) == 4.25  # the argument and the MX result
    assert out.bitwise_equal(MXArray.from_packed(a.packed_codes(), (a.scales.view(np.uint8) + 1), a.element, 32))


def test_linear_holds_4_25_bits_and_does_not_copy_a_b_weight():
    w = _fp4((256, 128))
    lin = mlir_mx.Linear(w, threads=1)
    assert lin.nbytes * 8 / w.size == 4.25
    bf = np.random.default_rng(1).standard_normal((256, 96)).astype(np.float32)
    b = oracle.quantize(bf, "f4E2M1FN", 32, axis=0)
    lin_b = mlir_mx.Linear(b, threads=1)  # (in, out) blocked along in: B as stored, 96 % 64 != 0: untiled
    assert not lin_b.tiled
    codes, scales = lin_b.stored
    assert np.shares_memory(codes, b.packed_codes()) and np.shares_memory(scales, b.scales)


def test_stored_arrays_are_read_only_so_a_prepared_weight_cannot_go_stale():
    # Writing w.codes in place used to leave mlir_mx.matmul serving the weight
    # it prepared before the write.  Every view of the stored form is read-only
    # and the attribute cannot be rebound, so the prepared copy stays right.
    w = oracle.quantize(
        np.random.default_rng(2).standard_normal((64, 64)).astype(np.float32), "f8E4M3FN", 32
    )
    x = np.ones((1, 64), np.float32)
    y = mlir_mx.matmul(x, w, threads=1)
    for view in (w.codes, w.scales, w.packed_codes()):
        with pytest.raises(ValueError, match="read-only"):
            view[...] = 0
    with pytest.raises(AttributeError):
        w.codes = np.zeros((64, 64), np.uint8)
    np.testing.assert_array_equal(mlir_mx.matmul(x, w), y)


def test_arrays_given_are_copied_unless_nothing_can_write_them():
    a = _fp4((4, 64))
    codes = np.array(a.codes)
    b = MXArray(codes, a.scales, "f4E2M1FN", 32)  # one code per byte in, packed bytes kept
    assert b.is_packed and not np.shares_memory(b.packed_codes(), codes) and b.bitwise_equal(a)
    f8 = oracle.quantize(np.ones((2, 32), np.float32), "f8E4M3FN", 32)
    raw = np.array(f8.codes.view(np.uint8))
    c = MXArray(raw, f8.scales, "f8E4M3FN", 32)
    raw[...] = 0  # the caller's array: c kept its own copy
    assert c.bitwise_equal(f8)
    frozen = np.frombuffer(bytes(f8.codes.view(np.uint8)), np.uint8).reshape(2, 32)
    d = MXArray(frozen, f8.scales, "f8E4M3FN", 32)  # read-only all the way down: kept as it is
    assert np.shares_memory(d.codes, frozen)
    with pytest.raises(TypeError, match="copy"):
        MXArray(raw, f8.scales, "f8E4M3FN", 32, copy="no")


def test_pickle_keeps_the_stored_form():
    a = _fp4((4, 64))
    b = pickle.loads(pickle.dumps(a))
    assert b.bitwise_equal(a) and _bits(b) == 4.25 and not b.codes.flags.writeable


def _passed_pointers(monkeypatch) -> list[tuple[int, int]]:
    """Record ``(address, bytes)`` of every buffer the Runner points a memref
    descriptor at (both Runner.invoke and bound calls go through ``point``)."""
    from mlir_mx.execution import arguments

    seen: list[tuple[int, int]] = []
    point = arguments.point

    def spy(d, a):
        seen.append((a.__array_interface__["data"][0], a.nbytes))
        point(d, a)

    monkeypatch.setattr(arguments, "point", spy)
    return seen


def _held_pointers(a: MXArray) -> list[tuple[int, int]]:
    return [(b.__array_interface__["data"][0], b.nbytes) for b in a.held_buffers()]


def test_a_runner_call_passes_the_held_buffers_without_a_copy(monkeypatch):
    """The descriptors point at the arrays the MXArray holds (its packed codes and
    its scales), and the call allocates nothing but its result's copy."""
    import tracemalloc

    t = "!mx.tensor<64x4096xf4E2M1FN, block_size = 32, scale_type = f8E8M0FNU>"
    text = (
        f"func.func @fs(%t: {t}) -> {t} {{\n  %c = arith.constant 2.0 : f32\n"
        f"  %r = mx.fold_scale %t, %c : {t}, f32 -> {t}\n  return %r : {t}\n}}"
    )
    runner = Runner(text, threads=1)
    a = _fp4()
    runner.invoke("fs", a)  # compiled, and the write analysis run, before measuring
    seen = _passed_pointers(monkeypatch)
    tracemalloc.start()
    try:
        out = runner.invoke("fs", a)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert seen[:2] == _held_pointers(a)
    assert peak < 1.25 * out.nbytes  # the result's copy (a copy of `a` would double it)


def test_a_linear_call_passes_mx_activations_without_a_copy(monkeypatch):
    lin = mlir_mx.Linear(_fp4((64, 256)), threads=1)
    x = _fp4((5, 256), seed=1)
    lin(x)
    seen = _passed_pointers(monkeypatch)
    lin(x)
    assert seen[:2] == _held_pointers(x)

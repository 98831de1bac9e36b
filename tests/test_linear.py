"""The library API: ``mlir_mx.matmul`` / ``mlir_mx.Linear`` against the oracle."""

from __future__ import annotations

import numpy as np
import pytest
from format_cases import BY_BEHAVIOUR, INTEGRAL, SUB_BYTE
from matmul_cases import U

import mlir_mx
from mlir_mx import oracle
from mlir_mx.host import has_features, host_arch
from mlir_mx.numerics import ELEMENT_FORMATS, MXArray


def _weight(element, n=200, k=256, seed=0):
    rng = np.random.default_rng(seed)
    return oracle.quantize(rng.standard_normal((n, k)).astype(np.float32), element, 32)


def _check(y, x64, w64):
    ref = x64 @ w64.T
    bound = (w64.shape[1] + 2) * U * (np.abs(x64) @ np.abs(w64.T))
    assert y.dtype == np.float32
    assert np.all(np.abs(y - ref) <= bound)


@pytest.mark.parametrize("element", BY_BEHAVIOUR)
def test_every_batch_size_one_weight(element):
    w = _weight(element)
    lin = mlir_mx.Linear(w, threads=2)
    w64 = oracle.dequantize(w).astype(np.float64)
    rng = np.random.default_rng(1)
    rows = {}
    x_all = rng.standard_normal((33, 256)).astype(np.float32)
    for m in (1, 2, 16, 17, 33):  # decode, small, prefill
        y = lin(x_all[:m])
        _check(y, x_all[:m].astype(np.float64), w64)
        rows[m] = y
    # Batch invariance: a row's result does not depend on the batch it is in.
    for m, y in rows.items():
        np.testing.assert_array_equal(y.view(np.uint32), rows[33][:m].view(np.uint32))


def test_raw_calls_kept_per_row_count_see_each_others_shapes(monkeypatch):
    """``Linear.call_into`` keeps one addresses-only call per ``(m, threads)``;
    row counts of one shape class share a bound kernel and its descriptors,
    so calls alternating between them (2, 5, 2, ...), calls of the Linear's
    own checked path in between, and a full keep (started over) all give the
    checked call's bits."""
    from mlir_mx.linear import layer

    monkeypatch.setattr(layer, "_RAW_CALLS", 3)
    w = _weight("f4E2M1FN", n=128, k=256)
    lin = mlir_mx.Linear(w, threads=1)
    x_all = np.random.default_rng(4).standard_normal((40, 256)).astype(np.float32)
    for m in (2, 5, 2, 1, 5, 40, 2, 7, 1):
        x = np.ascontiguousarray(x_all[:m])
        out = np.zeros((m, 128), np.float32)
        assert lin.call_into(x.ctypes.data, m, out.ctypes.data, 1)
        want = lin(x)  # the checked call, through the same descriptors
        np.testing.assert_array_equal(out.view(np.uint32), want.view(np.uint32))
        assert len(lin._raw_calls) <= 3
    assert not lin.call_into(x_all.ctypes.data, 0, x_all.ctypes.data, 1)  # empty: declined


def test_mx_activations_and_vectors():
    w = _weight("f4E2M1FN")
    lin = mlir_mx.Linear(w, threads=1)
    rng = np.random.default_rng(2)
    xq = oracle.quantize(rng.standard_normal((5, 256)).astype(np.float32), "f4E2M1FN", 32)
    _check(
        lin(xq), oracle.dequantize(xq).astype(np.float64), oracle.dequantize(w).astype(np.float64)
    )
    x = rng.standard_normal(256).astype(np.float32)
    assert lin(x).shape == (200,)
    np.testing.assert_array_equal(lin(x), lin(x[None])[0])


def test_weight_in_either_layout_and_threads():
    w = _weight("f8E5M2", n=96, k=64)
    b = oracle.quantize(oracle.dequantize(w).T.copy(), "f8E5M2", 32, axis=0)  # (in, out), axis 0
    assert b.bitwise_equal(MXArray(w.codes.T.copy(), w.scales.T.copy(), "f8E5M2", 32, 0))
    x = np.random.default_rng(3).standard_normal((7, 64)).astype(np.float32)
    y1 = mlir_mx.matmul(x, w, threads=1)
    y2 = mlir_mx.matmul(x, b, threads=2)
    np.testing.assert_array_equal(y1.view(np.uint32), y2.view(np.uint32))


def test_fp4_weight_takes_4_25_bits_per_element():
    lin = mlir_mx.Linear(_weight("f4E2M1FN", n=128, k=4096))
    assert lin.nbytes * 8 / (128 * 4096) == 4.25


def test_linears_of_one_kernel_share_its_runner(monkeypatch):
    """Two Linears of the same shape and format run one Runner (a new
    Linear's first call made its own: 0.2-0.35 ms, paid by each of a MoE
    layer's experts); another CPU-feature set or a cleared compile cache
    gets another, and each Linear's results stay its own."""
    from mlir_mx.execution import clear_cache

    x = np.random.default_rng(5).standard_normal((3, 64)).astype(np.float32)
    lins = [mlir_mx.Linear(_weight("f4E2M1FN", n=64, k=64, seed=s), threads=1) for s in (1, 2)]
    ys = [lin(x) for lin in lins]
    [r1], [r2] = (list(lin._runners.values()) for lin in lins)
    assert r1 is r2
    assert not np.array_equal(ys[0], ys[1])  # each call bound its own weight
    np.testing.assert_array_equal(lins[0](x), ys[0])
    clear_cache()
    fresh = mlir_mx.Linear(_weight("f4E2M1FN", n=64, k=64, seed=1), threads=1)
    np.testing.assert_array_equal(fresh(x), ys[0])
    assert next(iter(fresh._runners.values())) is not r1
    if host_arch() == "x86_64" and has_features("avx512f"):
        monkeypatch.setenv("MLIR_MX_CPU_FEATURES", "-avx512f")
        masked = mlir_mx.Linear(_weight("f4E2M1FN", n=64, k=64, seed=1), threads=1)
        np.testing.assert_array_equal(masked(x), ys[0])
        assert next(iter(masked._runners.values())) is not next(iter(fresh._runners.values()))


def test_persistent_cache_is_written_and_reused(tmp_path, monkeypatch):
    monkeypatch.setenv("MLIR_MX_CACHE_DIR", str(tmp_path / "c2"))
    w = _weight("f4E2M1FN", n=64, k=64)
    x = np.ones((1, 64), np.float32)
    y = mlir_mx.Linear(w, threads=1)(x)
    files = list((tmp_path / "c2").iterdir())  # machine code (.mxo) where it loads, else .mlirbc
    assert len(files) == 1
    from mlir_mx.execution import clear_cache
    from mlir_mx.execution.objects import machine_code_supported

    assert files[0].suffix == (".mxo" if machine_code_supported() else ".mlirbc")
    clear_cache()
    lin = mlir_mx.Linear(w, threads=1)
    np.testing.assert_array_equal(lin(x), y)
    assert lin.runners and all(r.compiled.from_disk for r in lin.runners)
    assert all(r.compiled.machine_code == machine_code_supported() for r in lin.runners)
    files[0].write_bytes(b"garbage")  # a broken entry is recompiled, not fatal
    clear_cache()
    np.testing.assert_array_equal(mlir_mx.Linear(w, threads=1)(x), y)


@pytest.mark.parametrize(
    "x,err,match",
    [
        (np.ones((2, 63), np.float32), ValueError, r"x: expected shape \(M, 64\)"),
        (np.ones((2, 64), np.float64), TypeError, "x: expected dtype float32"),
        ([1.0] * 64, TypeError, "x: expected a numpy array or an MXArray"),
    ],
)
def test_bad_activations_are_named(x, err, match):
    lin = mlir_mx.Linear(_weight("f8E4M3FN", n=32, k=64))
    with pytest.raises(err, match=match):
        lin(x)


def test_bad_weight_and_threads():
    with pytest.raises(TypeError, match="weight: expected an MXArray"):
        mlir_mx.Linear(np.ones((4, 32), np.float32))
    with pytest.raises(ValueError, match=r"threads: expected an integer in \[1, 1024\]"):
        mlir_mx.Linear(_weight("f8E4M3FN", n=32, k=64), threads=0)


def test_empty_batch():
    lin = mlir_mx.Linear(_weight("f8E4M3FN", n=32, k=64))
    assert lin(np.zeros((0, 64), np.float32)).shape == (0, 32)


@pytest.mark.parametrize(
    "element, n, packed", [("f4E2M1FN", 5, False), ("f6E2M3FN", 6, False), ("f6E2M3FN", 8, True)]
)
def test_out_features_that_do_not_pack_stay_one_code_per_byte(element, n, packed):
    """numerics.is_packed_storage decides: FP4/FP6 pack only whole groups along `out`."""
    w = _weight(element, n=n, k=64)
    lin = mlir_mx.Linear(w, threads=1)
    assert lin.packed == packed
    x = np.random.default_rng(2).standard_normal((3, 64)).astype(np.float32)
    _check(lin(x), x.astype(np.float64), oracle.dequantize(w).astype(np.float64))


@pytest.mark.parametrize("element", ["f4E2M1FN", "f8E4M3FN"])
def test_whole_tiles_are_stored_tiled(element):
    """out_features a multiple of 64: the weight is stored in 64-column tiles
    (Problem.b_tiled), same bytes, right results at every batch size."""
    w = _weight(element, n=128, k=96)
    lin = mlir_mx.Linear(w, threads=2)
    assert lin.tiled and lin.nbytes == w.nbytes
    x = np.random.default_rng(5).standard_normal((60, 96)).astype(np.float32)
    w64 = oracle.dequantize(w).astype(np.float64)
    for m in (1, 7, 60):
        _check(lin(x[:m]), x[:m].astype(np.float64), w64)


#: Every weight x activation format pair, each with out_features 64 (whole
#: 64-column tiles: sub-byte weights packed and tiled) or 33 (one code per
#: byte) in a checkerboard, so that every weight and every activation format
#: meets both storages; ``-m slow`` runs each pair with the other one too.
_FORMAT_GRID = [
    (w, a, (64, 33)[(i + j) % 2])
    for i, w in enumerate(ELEMENT_FORMATS)
    for j, a in enumerate(ELEMENT_FORMATS)
]
_OTHER_STORAGE = [(w, a, 97 - out) for w, a, out in _FORMAT_GRID]


# A plain Linear(w) with MX activations that a dot unit could take warns that it
# runs the f32 kernels (tests/test_linear_dot.py tests the warning): on purpose here.
@pytest.mark.filterwarnings("ignore:Linear.*f32 kernels")
@pytest.mark.parametrize(
    "weight, act, out",
    [*_FORMAT_GRID, *(pytest.param(*case, marks=pytest.mark.slow) for case in _OTHER_STORAGE)],
)
def test_every_weight_by_activation_format_pair(weight, act, out):
    """Every weight x MX activation format pair, with the weight stored packed
    and tiled or one code per byte (reproducer f1_linear_mx_activation_unpacked_weight:
    FP4/FP6 activations failed against unpacked weights), against the claim."""
    rng = np.random.default_rng(7)
    w = oracle.quantize(rng.standard_normal((out, 96)).astype(np.float32), weight, 32)
    x = oracle.quantize(rng.standard_normal((3, 96)).astype(np.float32), act, 32)
    lin = mlir_mx.Linear(w, threads=1)
    assert lin.packed == (
        ELEMENT_FORMATS[weight].is_sub_byte and out % ELEMENT_FORMATS[weight].group[0] == 0
    )
    b = MXArray(w.codes.T.copy(), w.scales.T.copy(), weight, 32, 0)
    exact, bound, inside = oracle.matmul_reference(x, b, np.zeros((3, out), np.float32))
    y = lin(x)
    assert inside.all() and np.all(np.abs(y - exact) <= bound)


#: Each behaviour of the format table, NVFP4, and the two activation kinds that
#: hold other forms (the dot records for "i8", the bf16 kernels).
_PICKLE_CASES = (
    [(el, 32, None) for el in BY_BEHAVIOUR]
    + [("nvfp4", 16, None), (INTEGRAL[0], 32, "i8"), (SUB_BYTE[0], 32, "bf16")]
)


@pytest.mark.parametrize("element, block, activations", _PICKLE_CASES)
@pytest.mark.parametrize("threads", [None, 2])
def test_a_linear_pickles_and_deep_copies(element, block, activations, threads):
    """``pickle`` / ``copy.deepcopy`` of a ``Linear`` (session 60: ``cannot pickle
    '_thread.lock' object``): the copy holds the same weight bit for bit (an
    NVFP4 one with its global scale), threads and activations, and its calls
    give the same bits; the original keeps working."""
    import copy
    import pickle

    rng = np.random.default_rng(5)
    wf = rng.standard_normal((64, 128)).astype(np.float32)
    w = mlir_mx.quantize(wf, element) if element == "nvfp4" else mlir_mx.quantize(wf, element, block)
    lin = mlir_mx.Linear(w, threads=threads, activations=activations)
    x = rng.standard_normal((3, 128)).astype(np.float32)
    y = lin(x)
    for other in (pickle.loads(pickle.dumps(lin)), copy.deepcopy(lin)):
        assert repr(other) == repr(lin) and other.nbytes == lin.nbytes
        a, b = other.weight(), lin.weight()
        assert a.global_scale == b.global_scale and a.block_size == b.block_size
        assert np.array_equal(np.asarray(a.codes).view(np.uint8), np.asarray(b.codes).view(np.uint8))
        assert np.array_equal(np.asarray(a.scales).view(np.uint8), np.asarray(b.scales).view(np.uint8))
        assert np.array_equal(other(x).view(np.uint32), y.view(np.uint32))
    assert np.array_equal(lin(x).view(np.uint32), y.view(np.uint32))

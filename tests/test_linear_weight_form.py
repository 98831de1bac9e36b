"""``mlir_mx.Linear`` holds its weight in one form (``mlir_mx.linear.weight_form``).

* The stored codes, or the dot kernels' records alone: what a Linear
  references (every array, each byte once) is 4.25 bits per MXFP4 element
  after construction and after calls of every kind, on both paths.
* Each form is derived from the other bit for bit (``Linear.stored``,
  ``Linear.weight``, the weight_form functions), including NaN scales, negative
  zeros and every code, over many chunks.
* Building a Linear needs a bounded working set (chunks), not unpacked
  copies of the weight.
* Threads are per call: two Python threads calling one Linear with different
  thread counts get the right results and change nothing shared.
"""

from __future__ import annotations

import threading
import tracemalloc

import numpy as np
import pytest
from memory_cases import referenced_bytes

import mlir_mx
from mlir_mx import oracle
from mlir_mx.kernels.common.problem import tile_b_codes
from mlir_mx.kernels.dot.units import KINDS, RecordLayout, dot_kind, pack_records
from mlir_mx.linear import weight_form
from mlir_mx.numerics import MXArray, element_format, pack_codes

#: The i8 dot unit serves i8 x FP4 here (AVX512-VNNI, AVX-VNNI, or AVX2's
#: vpmaddubsw where it cannot saturate): the FP4 records stand alone.
I8_UNIT = dot_kind("i8", "f4E2M1FN", 32) == KINDS["i8"]



def _weight(element="f4E2M1FN", n=128, k=256, seed=0) -> MXArray:
    rng = np.random.default_rng(seed)
    return oracle.quantize(rng.standard_normal((n, k)).astype(np.float32), element, 32)


def _every_code(element: str, n: int, k: int, seed=0) -> MXArray:
    """W (n, k) with random codes (every code of the format: negative zeros and,
    for INT8, -128) and random scale bytes (255: NaN blocks; 0)."""
    rng = np.random.default_rng(seed)
    if element == "i8":
        codes = rng.integers(-128, 128, (n, k)).astype(np.int8)
    else:
        codes = rng.integers(0, element_format(element).num_codes, (n, k)).astype(np.uint8)
    scales = rng.integers(0, 256, (n, k // 32)).astype(np.uint8)
    scales[0, 0], scales[1, 0] = 255, 0
    return MXArray(codes, scales, element, 32, axis=1)


def _bits(*objs, elements: int) -> float:
    return 8 * referenced_bytes(*objs) / elements


@pytest.mark.parametrize("acts, cpu", [(None, "host"), ("i8", "host"), ("i8", "baseline")])
def test_one_form_is_held_before_and_after_every_kind_of_call(monkeypatch, acts, cpu):
    """4.25 bits per element referenced, before and after calls: f32 x, x
    quantized in the kernel, MX x of the records' unit and of another one; with
    no dot units (cpu 'none') the f32-kernel path, on the stored codes."""
    if cpu == "baseline":
        monkeypatch.setenv("MLIR_MX_CPU_FEATURES", "baseline")
    w = _weight()
    lin = mlir_mx.Linear(w, threads=1, activations=acts)
    records = acts is not None and cpu == "host" and I8_UNIT
    assert lin.records_unit == ("i8" if records else None)
    assert len(lin.held) == (1 if records else 2)
    assert lin.nbytes == w.nbytes and _bits(lin, elements=w.size) == 4.25
    ref = mlir_mx.Linear(w, threads=1)
    x = np.random.default_rng(1).standard_normal((70, 256)).astype(np.float32)
    for m in (1, 5, 70):  # decode, small, prefill
        got = lin(x[:m])
        want = ref(x[:m] if acts is None else oracle.quantize(x[:m], acts, 32))
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
        for aelem in ("i8", "f6E3M2FN"):  # the records' unit, and i16 (derived per call)
            xq = oracle.quantize(x[:m], aelem, 32)
            np.testing.assert_array_equal(lin(xq).view(np.uint32), ref(xq).view(np.uint32))
        assert lin.nbytes == w.nbytes and _bits(lin, elements=w.size) == 4.25


@pytest.mark.parametrize("element", ["f6E2M3FN", pytest.param("f6E3M2FN", marks=pytest.mark.slow)])
def test_records_beside_the_stored_form_where_they_cannot_stand_alone(element):
    """FP6 weights with activations='i8' on a dot unit: the records would lose a
    negative zero, so the Linear holds the stored form and the records beside
    it (both counted), runs the dot kernels on the records and gives the bits
    of the f32 kernels on quantize(x, 'i8', 32) at every shape class; the
    weight comes back from the stored form bit for bit."""
    if dot_kind("i8", element, 32) is None:
        pytest.skip(f"the CPU has no dot unit for i8 x {element} (AVX2 or AVX-512 needed)")
    w = _every_code(element, 128, 256)
    lin = mlir_mx.Linear(w, threads=1, activations="i8")
    g = weight_form.Geometry(w.format, 32, 256, 128)
    i8 = element_format("i8")
    assert lin.holds_stored and lin.records_unit == weight_form.side_records_unit(g, i8)
    assert lin.records_unit in KINDS and len(lin.held) == 3
    assert lin.nbytes == sum(a.nbytes for a in lin.held) == referenced_bytes(lin)
    ref = mlir_mx.Linear(w, threads=1)
    x = np.random.default_rng(3).standard_normal((70, 256)).astype(np.float32)
    for m in (1, 5, 70):
        assert lin.schedule(x[:m]).startswith("int-")
        want = ref(oracle.quantize(x[:m], "i8", 32))
        np.testing.assert_array_equal(lin(x[:m]).view(np.uint32), want.view(np.uint32))
        xq = oracle.quantize(x[:m], "f4E2M1FN", 32)  # MX x: the dot kernels on the records too
        np.testing.assert_array_equal(lin(xq).view(np.uint32), ref(xq).view(np.uint32))
    back = lin.weight()
    np.testing.assert_array_equal(back.packed_codes(), w.packed_codes())
    np.testing.assert_array_equal(back.scales.view(np.uint8), w.scales.view(np.uint8))
    assert lin.nbytes == referenced_bytes(lin)  # calls kept nothing more
    codes, scales, records = lin.held
    again = mlir_mx.Linear.from_stored(
        codes, scales, w.element, 32, 256, 128, threads=1, activations="i8", records=records
    )
    assert all(a is b for a, b in zip(again.held, lin.held, strict=True))
    with pytest.raises(ValueError, match="records: this Linear holds no records"):
        mlir_mx.Linear.from_stored(codes, scales, w.element, 32, 256, 128, records=records)


def test_the_walk_counts_what_a_bound_call_keeps():
    """The memory measure sees arrays kept deep inside a Linear (a bound call's)."""
    lin = mlir_mx.Linear(_weight(), threads=1)
    lin(np.ones((1, 256), np.float32))
    before = referenced_bytes(lin)
    next(iter(lin._calls.values()))._keep.append(np.zeros(1000))
    assert referenced_bytes(lin) == before + 8000


@pytest.mark.parametrize("element, unit", [("f4E2M1FN", "i8"), ("i8", "i8"), ("i8", "i16")])
@pytest.mark.parametrize("n, k", [(128, 96), (192, 512)])
def test_records_give_back_the_weight_and_the_stored_form_bit_for_bit(
    monkeypatch, element, unit, n, k
):
    """Records made chunk by chunk (many chunks here) are pack_records' of the
    whole weight, and the stored form and W come back from them exactly."""
    monkeypatch.setattr(weight_form, "CHUNK_ELEMENTS", 64 * n)  # 64 rows of B per chunk
    w = _every_code(element, n, k)
    g = weight_form.Geometry(element_format(element), 32, k, n)
    rec = weight_form.to_records(weight_form.array_chunks(w, g), unit, g)
    lay = RecordLayout(KINDS[unit], element, 32)
    np.testing.assert_array_equal(rec, pack_records(w.codes.T.copy(), w.scales.T.copy(), lay))
    stored = weight_form.to_stored(weight_form.array_chunks(w, g), g)
    back = weight_form.to_stored(weight_form.records_chunks(rec, unit, g), g)
    for a, b in zip(stored, back, strict=True):
        assert a.dtype == b.dtype and np.array_equal(a.view(np.uint8), b.view(np.uint8))
    assert weight_form.to_weight(weight_form.records_chunks(rec, unit, g), g).bitwise_equal(w)
    assert weight_form.to_weight(weight_form.stored_chunks(*stored, g), g).bitwise_equal(w)


@pytest.mark.parametrize(
    "element, n, k, axis",
    [("f4E2M1FN", 128, 96, 1), ("f4E2M1FN", 33, 64, 1), ("f6E2M3FN", 64, 128, 1),
     ("f6E3M2FN", 36, 64, 0), ("f8E4M3FN", 192, 64, 0), ("i8", 80, 96, 1)],
)  # fmt: skip
def test_the_stored_form_is_b_packed_and_tiled_as_before(monkeypatch, element, n, k, axis):
    """Chunked conversion gives the layout the whole-array one gave (B = W^T
    packed along out, tiled when out % 64 == 0), from either weight layout."""
    monkeypatch.setattr(weight_form, "CHUNK_ELEMENTS", 32 * n)  # one block row of B per chunk
    w = _every_code(element, n, k) if element in ("f4E2M1FN", "i8") else _weight(element, n, k)
    b_codes = w.codes.T.copy()
    given = w if axis == 1 else MXArray(b_codes, w.scales.T.copy(), element, 32, axis=0)
    lin = mlir_mx.Linear(given, threads=1)
    want = pack_codes(b_codes, element) if lin.packed else b_codes
    if lin.tiled:
        want = tile_b_codes(want.view(np.uint8), 32, element, lin.packed)
    codes, scales = lin.stored
    assert np.array_equal(codes.view(np.uint8), want.view(np.uint8))
    assert np.array_equal(scales.view(np.uint8), w.scales.T.view(np.uint8))
    assert lin.weight().bitwise_equal(w)


@pytest.mark.skipif(
    not I8_UNIT, reason="the records form needs the i8 dot unit (AVX512-VNNI, AVX-VNNI or AVX2)"
)
def test_a_records_linear_derives_its_stored_form_and_rebuilds_from_records(monkeypatch):
    w = _every_code("f4E2M1FN", 128, 256)
    lin = mlir_mx.Linear(w, threads=1, activations="i8")
    ref = mlir_mx.Linear(w, threads=1)
    assert lin.records_unit == "i8" and lin.weight().bitwise_equal(w)
    for a, b in zip(lin.stored, ref.stored, strict=True):
        assert np.array_equal(a.view(np.uint8), b.view(np.uint8))
    (rec,) = lin.held
    x = np.random.default_rng(2).standard_normal((3, 256)).astype(np.float32)
    again = mlir_mx.Linear.from_records(rec, "i8", "f4E2M1FN", 32, 256, 128, activations="i8")
    assert again.held[0] is rec  # held as it is
    np.testing.assert_array_equal(again(x).view(np.uint32), lin(x).view(np.uint32))
    with pytest.raises(
        ValueError,
        match=r"records: expected a uint8 array of shape \(16, 1088\), got uint8 \(15, 1088\)",
    ):
        mlir_mx.Linear.from_records(rec[:-1], "i8", "f4E2M1FN", 32, 256, 128, activations="i8")
    with pytest.raises(ValueError, match="unit: expected one of"):
        mlir_mx.Linear.from_records(rec, "i4", "f4E2M1FN", 32, 256, 128)
    monkeypatch.setenv("MLIR_MX_CPU_FEATURES", "baseline")  # no dot unit here: the stored form
    moved = mlir_mx.Linear.from_records(rec, "i8", "f4E2M1FN", 32, 256, 128, activations="i8")
    assert moved.records_unit is None and moved.weight().bitwise_equal(w)
    np.testing.assert_array_equal(moved(x).view(np.uint32), lin(x).view(np.uint32))


@pytest.mark.parametrize("acts", [None, "i8"])
def test_building_a_linear_needs_a_bounded_working_set(acts):
    """An (out, in) weight of 8 M elements is re-laid out chunk by chunk: the
    memory beyond the result stays a few chunks' worth (it was ~1.5 bytes per
    element: unpacked and transposed copies of the whole weight, 12 MiB here)."""
    n, k = 2048, 4096
    w = mlir_mx.quantize(
        np.random.default_rng(0).standard_normal((n, k), np.float32), "f4E2M1FN", 32
    )
    tracemalloc.start()
    try:
        lin = mlir_mx.Linear(w, threads=1, activations=acts)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert lin.nbytes * 8 / (n * k) == 4.25
    assert peak - lin.nbytes <= 24 * weight_form.CHUNK_ELEMENTS  # 6 MiB; 0.75 bytes per element here


@pytest.mark.parametrize("acts", [None, "i8"])
def test_two_python_threads_with_their_own_thread_counts(acts):
    w = _weight()
    lin = mlir_mx.Linear(w, threads=1, activations=acts)
    x = np.random.default_rng(3).standard_normal((70, 256)).astype(np.float32)
    want = {m: lin(x[:m]) for m in (1, 5, 70)}
    errors: list[str] = []

    def work(threads: int) -> None:
        for _ in range(5):
            for m, y in want.items():
                got = lin(x[:m], threads=threads)
                if not np.array_equal(got.view(np.uint32), y.view(np.uint32)):
                    errors.append(f"{threads} threads, M = {m}")

    workers = [threading.Thread(target=work, args=(t,)) for t in (1, 2)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    assert errors == []
    assert lin.threads == 1  # nothing shared was changed
    assert {key[2] for key in lin._calls} == {1, 2}
    with pytest.raises(ValueError, match="threads"):
        lin(x[:1], threads=0)

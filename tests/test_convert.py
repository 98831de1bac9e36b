"""``mlir_mx.quantize`` / ``mlir_mx.dequantize`` (the compiled kernels) against the oracle.

Bit for bit: the packed codes (``MXArray.packed_codes()``) and the scale codes
of :func:`mlir_mx.oracle.quantize`, and the f32 bits of
:func:`mlir_mx.oracle.dequantize` (NaN where the oracle has NaN), for all
six formats, block size 32 and odd ones, ranks 1-4 and every axis, strided
inputs, special values (NaN, Inf, f32 subnormals, signed zeros, saturating
values, ties, code-0 scales) and 1, 2 and 3 threads.  The quick set covers
every kernel kind once per format; ``-m slow`` runs the whole grid.
"""

from __future__ import annotations

import itertools
import tracemalloc

import ml_dtypes
import numpy as np
import pytest
from format_cases import BY_BEHAVIOUR

import mlir_mx
from mlir_mx import oracle
from mlir_mx.convert import quantize_stored
from mlir_mx.numerics import ELEMENT_FORMATS, MXArray

FORMATS = list(ELEMENT_FORMATS)

#: Values every block may meet: specials, f32 subnormals, each format's
#: maximum and the ties around it, saturating values.
SPECIAL = np.array(
    [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, -1e-40, 1.2e-38, 3.4e38, -3.4e38,
     448.0, 464.0, 465.0, 57344.0, 61440.0, 7.5, 7.75, 28.0, 30.0, 6.0, 5.0, 7.0,
     0.25, 0.75, 1.25, 2.5, 1.0 / 128, 127.5 / 64, -1.0 / 256],
    np.float32,
)  # fmt: skip



def special_values(shape, seed=0) -> np.ndarray:
    """Normal values over all exponents, with specials sprinkled in, some
    all-zero and all-tiny (code-0 scale) rows, and one NaN-only stretch."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(np.float32)
    with np.errstate(over="ignore"):
        x *= np.exp2(rng.integers(-150, 128, shape)).astype(np.float32)
    flat = x.reshape(-1)
    idx = rng.integers(0, flat.size, max(1, flat.size // 16))
    flat[idx] = rng.choice(SPECIAL, idx.size)
    if x.ndim > 1 and x.shape[0] > 2:
        x[0] = 0.0
        x[1] = rng.standard_normal(x.shape[1:]).astype(np.float32) * np.float32(2.0**-135)
    return x


def assert_same(got: MXArray, want: MXArray) -> None:
    """Same layout, packed code bytes and scale bytes."""
    assert (got.element, got.block_size, got.axis, got.shape) == (
        want.element, want.block_size, want.axis, want.shape,
    )  # fmt: skip
    np.testing.assert_array_equal(got.packed_codes(), want.packed_codes())
    np.testing.assert_array_equal(got.scales.view(np.uint8), want.scales.view(np.uint8))
    assert got.bitwise_equal(want)


def assert_same_f32(got: np.ndarray, want: np.ndarray) -> None:
    """Identical f32 bits, except that any NaN matches any NaN."""
    assert got.dtype == np.float32 and got.shape == want.shape
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan)
    np.testing.assert_array_equal(got.view(np.uint32)[~nan], want.view(np.uint32)[~nan])


def check(x, element, block, axis, threads) -> None:
    want = oracle.quantize(np.asarray(x), element, block, axis)
    got = mlir_mx.quantize(x, element, block, axis, threads=threads)
    assert_same(got, want)
    assert_same_f32(mlir_mx.dequantize(want, threads=threads), oracle.dequantize(want))


def strided(x: np.ndarray, how: str) -> np.ndarray:
    """A non-contiguous array equal to ``x``: every other element of a larger
    array (``step``), or read backwards (``reversed``), or a transpose of a
    transposed copy (``transposed``)."""
    if how == "step":
        big = np.zeros(tuple(2 * s for s in x.shape), np.float32)
        sl = tuple(slice(None, None, 2) for _ in x.shape)
        big[sl] = x
        return big[sl]
    if how == "reversed":
        return np.ascontiguousarray(x[..., ::-1])[..., ::-1]
    return np.ascontiguousarray(x.T).T


# (id, shape, axis, block, threads, view): every kernel kind (rows with a
# block of 16k, rows with any block, columns; packed or not; strided input)
QUICK = [
    ("r2-rows-b32", (6, 128), -1, 32, 3, None),
    ("r1-rows-odd", (84,), 0, 7, 1, None),
    ("r3-columns-odd", (2, 15, 8), 1, 5, 2, None),
    ("r4-axis0", (6, 2, 3, 4), 0, 3, 3, None),
    ("r3-unpacked-last", (2, 9, 3), 1, 3, 1, None),
    ("r2-rows-b96", (3, 192), 1, 96, 2, None),
    ("r3-step", (4, 6, 32), 2, 32, 2, "step"),
    ("r2-transposed", (64, 12), 0, 16, 1, "transposed"),
    ("r2-reversed", (5, 36), 1, 9, 3, "reversed"),
]


@pytest.mark.parametrize("case", QUICK, ids=[c[0] for c in QUICK])
@pytest.mark.parametrize("element", FORMATS)
def test_bit_exact(element, case):
    _id, shape, axis, block, threads, view = case
    x = special_values(shape)
    check(x if view is None else strided(x, view), element, block, axis, threads)


def _grid():
    """Ranks 1-4, every axis, block 32 and odd ones, 1/2/3 threads, strided views."""
    blocks = (32, 1, 3, 5, 16, 33)
    views = (None, "step", "reversed", "transposed")
    for n, (rank, block) in enumerate(itertools.product((1, 2, 3, 4), blocks)):
        for axis in range(rank):
            shape = [2, 3, 4, 8][:rank]
            shape[axis] = block * (2 + n % 3)
            if rank > 1 and axis != rank - 1:
                shape[-1] = 4 * (1 + n % 4)
            yield tuple(shape), axis, block, 1 + (n + axis) % 3, views[(n + axis) % 4]


GRID = list(_grid())


@pytest.mark.slow
@pytest.mark.parametrize("case", GRID, ids=[f"{c[0]}-a{c[1]}-b{c[2]}-t{c[3]}-{c[4]}" for c in GRID])
@pytest.mark.parametrize("element", FORMATS)
def test_bit_exact_grid(element, case):
    shape, axis, block, threads, view = case
    x = special_values(shape, seed=len(shape) + axis)
    check(x if view is None else strided(x, view), element, block, axis, threads)


@pytest.mark.parametrize("element", FORMATS)
def test_every_f32_bit_pattern_kind(element):
    """Random f32 bit patterns (every exponent, NaN payloads, subnormals)."""
    rng = np.random.default_rng(5)
    x = rng.integers(0, 2**32, (64, 64), dtype=np.uint64).astype(np.uint32).view(np.float32)
    check(x, element, 32, 1, 2)
    check(x, element, 8, 0, 2)


@pytest.mark.parametrize("element", FORMATS)
def test_every_code_and_scale_dequantizes(element):
    """Every element code under every scale code (including 0 and 255), both
    layouts; codes the quantizer never writes (E4M3 NaN, E5M2 Inf/NaN, i8
    -128) decode as the oracle does."""
    fmt = ELEMENT_FORMATS[element]
    cols = max(32, fmt.num_codes)
    row = (np.arange(cols) % fmt.num_codes).astype(np.uint8)
    codes = np.tile(row, (256, 1))  # each row: every code
    scales = np.repeat(np.arange(256, dtype=np.uint8)[:, None], cols // 32, axis=1)  # row r: r
    a = MXArray(codes.view(fmt.dtype), scales, element, 32, 1)
    assert_same_f32(mlir_mx.dequantize(a, threads=2), oracle.dequantize(a))
    b = MXArray(np.ascontiguousarray(codes.T).view(fmt.dtype), scales.T.copy(), element, 32, 0)
    assert_same_f32(mlir_mx.dequantize(b, threads=1), oracle.dequantize(b))


@pytest.mark.parametrize("element", FORMATS)
def test_every_code_round_trips(element):
    """Each finite code's value under several scales quantizes back to itself."""
    from mlir_mx.numerics import finite_codes

    vals = finite_codes(element)
    x = vals.astype(np.float64)
    n = -(-x.size // 32) * 32
    x = np.resize(x, n).astype(np.float32)
    top = np.float32(ELEMENT_FORMATS[element].max_normal)
    x[::32] = top  # every block keeps the format's own scale
    for shift in (-100, 0, 60):
        y = (x * np.float32(2.0**shift)).reshape(-1, 32)
        check(y, element, 32, 1, 1)


@pytest.mark.parametrize("dtype", [np.float64, np.float16, ml_dtypes.bfloat16])
def test_input_types(dtype):
    """float64 (rounded RNE in registers, overflow to Inf), float16 and bfloat16."""
    x = special_values((4, 64), seed=3).astype(np.float64)
    x[0, :3] = [1e300, -1e300, 2.0**-149 * 0.75]
    with np.errstate(over="ignore"):
        x = x.astype(dtype)
    check(x, "f8E4M3FN", 32, 1, 2)
    check(x[:, ::2], "f4E2M1FN", 2, 0, 1)


def test_unusual_layouts():
    """Misaligned, broadcast (zero strides), Fortran-order and read-only inputs."""
    x = special_values((8, 64), seed=9)
    buf = np.zeros(x.nbytes + 1, np.uint8)
    mis = np.ndarray(x.shape, np.float32, buffer=buf, offset=1)
    mis[...] = x
    assert not mis.flags.aligned
    check(mis, "f4E2M1FN", 32, 1, 2)
    check(np.broadcast_to(x[0], (5, 64)), "f8E4M3FN", 5, 0, 1)
    f = np.asfortranarray(special_values((4, 6, 32), seed=10))
    for axis in range(3):
        check(f, "f6E3M2FN", 2, axis, 2)
    x.flags.writeable = False
    check(x, "i8", 32, 1, 3)


def test_lists_and_empty_arrays():
    check([[1.0, -2.0, 3.5, 0.0]], "f4E2M1FN", 2, -1, 1)
    for shape, axis in (((0, 32), 1), ((4, 0), 1), ((0, 3), 0)):
        x = np.zeros(shape, np.float32)
        assert_same(mlir_mx.quantize(x, "f6E3M2FN", 1 if shape[axis] == 0 else 32, axis),
                    oracle.quantize(x, "f6E3M2FN", 1 if shape[axis] == 0 else 32, axis))  # fmt: skip


def test_dlpack_torch_tensors():
    torch = pytest.importorskip("torch", reason="torch is not installed (the optional torch extra)")
    x = special_values((8, 64), seed=4)
    t = torch.from_numpy(x)
    assert_same(mlir_mx.quantize(t, "f4E2M1FN"), oracle.quantize(x, "f4E2M1FN"))
    assert_same(mlir_mx.quantize(t.T, "f8E5M2", axis=0), oracle.quantize(x.T, "f8E5M2", axis=0))
    b = t.to(torch.bfloat16)
    want = oracle.quantize(b.float().numpy(), "f8E4M3FN")
    assert_same(mlir_mx.quantize(b, "f8E4M3FN"), want)


def test_dequantize_into_out():
    a = oracle.quantize(special_values((4, 64), seed=11), "f8E5M2")
    out = np.full((4, 64), 7.0, np.float32)
    assert mlir_mx.dequantize(a, 2, out=out) is out
    assert_same_f32(out, oracle.dequantize(a))
    with pytest.raises(TypeError, match="out: expected a float32"):
        mlir_mx.dequantize(a, out=np.zeros((4, 64)))
    with pytest.raises(ValueError, match="out: must be C-contiguous"):
        mlir_mx.dequantize(a, out=np.zeros((64, 4), np.float32).T)


def test_thread_counts_agree():
    x = special_values((96, 320), seed=6)
    ref = mlir_mx.quantize(x, "f4E2M1FN", 32, threads=1)
    for t in (2, 3, 7):
        assert_same(mlir_mx.quantize(x, "f4E2M1FN", 32, threads=t), ref)
    np.testing.assert_array_equal(mlir_mx.dequantize(ref, threads=3), mlir_mx.dequantize(ref, 1))


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    "call, exc, match",
    [
        (lambda: mlir_mx.quantize(np.zeros((2, 32), np.int32)), TypeError, "x: expected a float32"),
        (lambda: mlir_mx.quantize(np.float32(1.0)), ValueError, "x: .*rank-0"),
        (lambda: mlir_mx.quantize(np.zeros((2, 30), np.float32)), ValueError, "x: blocked axis 1"),
        (lambda: mlir_mx.quantize(np.zeros((2, 32), np.float32), "f9"), ValueError, "element"),
        (lambda: mlir_mx.quantize(np.zeros((2, 32), np.float32), block_size=0), ValueError,
         "block_size"),
        (lambda: mlir_mx.quantize(np.zeros((2, 32), np.float32), axis=2), ValueError, "axis"),
        (lambda: mlir_mx.quantize(np.zeros((2, 32), np.float32), threads=0), ValueError,
         "threads"),
        (lambda: mlir_mx.quantize(np.zeros((2, 32), np.float32), threads=1.5), TypeError,
         "threads"),
        (lambda: mlir_mx.dequantize(np.zeros(4)), TypeError, "a: expected an MXArray"),
    ],
)  # fmt: skip
def test_errors_name_the_argument(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


# --------------------------------------------------------------------------- memory


def _traced_peak(fn) -> int:
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        out = fn()
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    del out
    return peak


@pytest.mark.parametrize("element", BY_BEHAVIOUR)
def test_peak_memory_is_the_output(element):
    """numpy allocations (tracemalloc) during a conversion: the output and
    nothing f32-sized; the kernels' own buffers are checked below."""
    x = np.random.default_rng(0).standard_normal((512, 1024), dtype=np.float32)
    quantize_stored(x, element, 32, 1, 2)  # compile first
    codes, scales = quantize_stored(x, element, 32, 1, 2)
    out = codes.nbytes + scales.nbytes
    assert _traced_peak(lambda: quantize_stored(x, element, 32, 1, 2)) <= 1.1 * out
    # The MXArray holds the same stored bytes (FP4/FP6 packed), nothing more.
    assert _traced_peak(lambda: mlir_mx.quantize(x, element, threads=2)) <= 1.1 * out
    a = mlir_mx.quantize(x, element, threads=2)
    a.packed_codes()
    mlir_mx.dequantize(a, threads=2)
    assert _traced_peak(lambda: mlir_mx.dequantize(a, threads=2)) <= 1.1 * x.nbytes


@pytest.mark.parametrize("layout, block", [("rows", 32), ("columns", 7), ("rows", 7)])
def test_kernel_buffers_are_bounded(layout, block):
    """The kernels allocate nothing, except the rows kernels for a block size
    that is not a multiple of 16: one scratch of SEGMENT_BLOCKS f32 per task
    (a bounded working set, whatever the input size)."""
    from mlir import ir

    from mlir_mx.convert import _kernel
    from mlir_mx.kernels.convert import ConvertSpec, convert_module
    from mlir_mx.kernels.convert.emitter import SEGMENT_BLOCKS

    for op in ("quantize", "dequantize"):
        spec = ConvertSpec(op, "f4E2M1FN", block, layout, True, threads=2)
        with ir.Context(), ir.Location.unknown():
            kernel = str(convert_module(spec))
        lowered = str(_kernel(spec).runner.module)
        generic = layout == "rows" and block % 16
        assert kernel.count("memref.alloc") == (1 if generic else 0)
        assert lowered.count("llvm.call @malloc") == (1 if generic else 0)
        if generic:
            assert f"memref.alloc() {{alignment = 64 : i64}} : memref<{SEGMENT_BLOCKS}xf32>" in kernel


# --------------------------------------------------------------------------- users


def test_linear_and_matmul_take_float_weights():
    """``Linear(w_f32, element=...)`` / ``matmul(x, w_f32, element=...)``
    quantize through the compiled kernels: the same results as with the
    oracle's MXArray."""
    rng = np.random.default_rng(7)
    w = rng.standard_normal((96, 128)).astype(np.float32)
    x = rng.standard_normal((3, 128)).astype(np.float32)
    ref = mlir_mx.Linear(oracle.quantize(w, "f6E2M3FN", 32), threads=1)(x)
    lin = mlir_mx.Linear(w, element="f6E2M3FN", threads=1)
    np.testing.assert_array_equal(lin(x), ref)
    np.testing.assert_array_equal(mlir_mx.matmul(x, w, element="f6E2M3FN", threads=1), ref)
    with pytest.raises(TypeError, match="weight: expected an MXArray"):
        mlir_mx.Linear(w)
    with pytest.raises(TypeError, match="x: expected a float32"):
        mlir_mx.Linear(w.astype(np.int32), element="f4E2M1FN")


def test_write_gguf_from_f32(tmp_path):
    pytest.importorskip("gguf", reason="gguf is not installed (the optional gguf extra)")
    from mlir_mx.interop.gguf import read_gguf, write_gguf

    w = special_values((8, 128), seed=8)
    w[np.isnan(w) | np.isinf(w)] = 1.0  # ggml has no NaN scale
    write_gguf(tmp_path / "w.gguf", {"w": w})
    assert read_gguf(tmp_path / "w.gguf")["w"].bitwise_equal(oracle.quantize(w, "f4E2M1FN", 32))
    with pytest.raises(TypeError, match=r"tensors\['w'\]: x: expected a float32"):
        write_gguf(tmp_path / "bad.gguf", {"w": np.zeros((8, 128), np.int8)})

"""The conversion suite: ``mlir_mx.quantize`` / ``dequantize`` on every array layout.

Each case quantizes one array with the compiled kernels and with the oracle
(:mod:`mlir_mx.numerics`) and compares the stored bytes (packed codes and
scale codes), then dequantizes the oracle's array with the kernels into a
fresh array or into an ``out=`` of some layout.  The arrays are of every
float dtype the API takes (f32, f16, f64, bf16) and of a layout drawn from
:data:`LAYOUTS`: C-contiguous, a step slice, any byte strides (not a
multiple of the item size, negative, zero, smaller than the item so that
elements overlap), a field of a structured array at any byte offset, data
at an odd address, a broadcast, a torch tensor (DLPack).  Shapes are ranks 1
to 4 with any blocking axis, block sizes 1 to 32, 1 to 3 threads, values of
every exponent with NaN, Inf, zeros and subnormals sprinkled in.

The rule: a valid call returns the oracle's bits (``wrong`` otherwise: a
different byte, or a refusal); an ``out=`` the kernel cannot write (not
C-contiguous, misaligned, overlapping the codes) is refused with an
``MXError`` whose message starts with ``out:``.  The layout builders
(:func:`over_bytes`, :func:`field_of`, :func:`layout_array`) are the ones
the property tests (``tests/test_convert_layouts.py``) draw from.
"""

from __future__ import annotations

import random
import traceback

import ml_dtypes
import numpy as np

from mlir_mx.errors import MXError
from mlir_mx_testing.campaign import Outcome

__all__ = ["DTYPES", "LAYOUTS", "case", "field_of", "layout_array", "over_bytes", "random_values"]

#: The input dtypes ``mlir_mx.quantize`` takes.
DTYPES = {
    "f32": np.dtype(np.float32),
    "f16": np.dtype(np.float16),
    "f64": np.dtype(np.float64),
    "bf16": np.dtype(ml_dtypes.bfloat16),
}
#: The layouts a case draws its input from.
LAYOUTS = (
    "contiguous",
    "step",
    "byte-strides",
    "negative",
    "field",
    "misaligned",
    "broadcast",
    "overlap",
    "torch",
)
#: ``out=`` layouts of the dequantize half: the first is valid.
OUTS = ("fresh", "given", "misaligned", "strided", "overlap")


def over_bytes(shape, dtype, byte_strides, offset: int = 0) -> np.ndarray:
    """A writeable array of ``shape`` and ``dtype`` over a fresh byte buffer,
    with ``byte_strides`` (any integers: negative, zero, not a multiple of the
    item size, smaller than it) and its lowest byte ``offset`` bytes past the
    buffer's (16-byte aligned) start."""
    dtype = np.dtype(dtype)
    lo = sum(min(0, (n - 1) * s) for n, s in zip(shape, byte_strides, strict=True))
    hi = sum(max(0, (n - 1) * s) for n, s in zip(shape, byte_strides, strict=True))
    buf = np.zeros(hi - lo + dtype.itemsize + offset + 16, np.uint8)
    start = (-buf.ctypes.data) % 16  # the buffer's first 16-byte aligned byte
    return np.ndarray(
        tuple(shape), dtype, buffer=buf, offset=start + offset - lo, strides=tuple(byte_strides)
    )


def field_of(shape, dtype, before: int, after: int) -> np.ndarray:
    """Field ``"a"`` (``dtype``) of a structured array of ``shape`` whose records
    hold ``before`` bytes, the field, and ``after`` bytes: its byte strides are
    multiples of the record size, its address ``before`` past the record's."""
    dtype = np.dtype(dtype)
    rec = np.dtype(
        {
            "names": ["a"],
            "formats": [dtype],
            "offsets": [before],
            "itemsize": before + dtype.itemsize + after,
        }
    )
    return np.zeros(tuple(shape), rec)["a"]


def random_values(shape, rng: np.random.Generator) -> np.ndarray:
    """float64 values of every f32 exponent, with NaN, +-Inf, +-0 and f32
    subnormals sprinkled in (converted to the input dtype by the caller)."""
    x = rng.standard_normal(shape) * np.exp2(rng.integers(-140, 120, shape))
    special = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, -3e-39, 448.0, 6.0, 0.25])
    pick = rng.random(shape) < 0.08
    return np.where(pick, rng.choice(special, shape), x)


def _set(view: np.ndarray, values: np.ndarray) -> None:
    with np.errstate(over="ignore", invalid="ignore"):
        view[...] = values.astype(view.dtype)


def layout_array(shape, dtype, layout: str, rng: np.random.Generator):
    """An input of ``shape`` and ``dtype`` (a name of :data:`DTYPES`) in
    ``layout`` (:data:`LAYOUTS`), holding :func:`random_values`; a torch tensor
    for ``torch`` (f32, f16, bf16; another dtype gives a step slice)."""
    dt, vals = DTYPES[dtype], random_values(shape, rng)
    item, nd = dt.itemsize, len(shape)
    if layout == "contiguous":
        x = np.empty(shape, dt)
    elif layout == "step" or (layout == "torch" and dtype == "f64"):
        big = np.empty(tuple(2 * n for n in shape), dt)
        x = big[tuple(slice(None, None, 2) for _ in shape)]
    elif layout in ("byte-strides", "negative", "overlap"):
        strides, inner = [], item
        for n in reversed(shape):  # each dim at least as far apart as the ones inside (no overlap)
            s = inner + int(rng.integers(0, 2 * item + 1))
            if layout == "overlap":
                s = int(rng.integers(0, item + 1))
            strides.append(-s if layout == "negative" and rng.random() < 0.6 else s)
            inner = max(inner, s * n)
        x = over_bytes(shape, dt, strides[::-1], int(rng.integers(0, item)))
    elif layout == "field":
        x = field_of(shape, dt, int(rng.integers(0, 2 * item)), int(rng.integers(0, 2 * item)))
    elif layout == "misaligned":
        c = [item * int(np.prod(shape[i + 1 :])) for i in range(nd)]
        x = over_bytes(shape, dt, c, int(rng.integers(1, item)) if item > 1 else 0)
    elif layout == "broadcast":
        row = np.empty((1, *shape[1:]), dt)
        _set(row, vals[:1])
        return np.broadcast_to(row, shape)
    elif layout == "torch":
        import torch

        t = torch.from_numpy(vals.astype(np.float32))
        t = t.to({"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[dtype])
        return t.transpose(0, -1).contiguous().transpose(0, -1) if nd > 1 else t
    else:
        raise ValueError(f"layout: one of {', '.join(LAYOUTS)}, got {layout!r}")
    _set(x, vals)
    return x


def _host(x) -> np.ndarray:
    """``x`` as the oracle takes it (a torch tensor: its float32 values)."""
    if isinstance(x, np.ndarray):
        return x
    return x.float().numpy()


def same_mx(got, want) -> str | None:
    """What differs between two MXArrays' stored bytes (None: nothing)."""
    if (got.element, got.block_size, got.axis, got.shape) != (
        want.element,
        want.block_size,
        want.axis,
        want.shape,
    ):
        return f"layout {got.shape} axis {got.axis}, the oracle's {want.shape} axis {want.axis}"
    for what, a, b in (
        ("codes", got.packed_codes(), want.packed_codes()),
        ("scales", got.scales.view(np.uint8), want.scales.view(np.uint8)),
    ):
        if not np.array_equal(np.asarray(a).view(np.uint8), np.asarray(b).view(np.uint8)):
            i = np.argwhere(np.asarray(a).view(np.uint8) != np.asarray(b).view(np.uint8))[0]
            return f"{what}{tuple(int(v) for v in i)} differ from the oracle's"
    return None


def same_f32(got: np.ndarray, want: np.ndarray) -> bool:
    """Identical f32 bits, except that any NaN matches any NaN."""
    nan = np.isnan(want)
    return (
        got.shape == want.shape
        and np.array_equal(np.isnan(got), nan)
        and np.array_equal(got.view(np.uint32)[~nan], want.view(np.uint32)[~nan])
    )


def _config(seed: int, index: int) -> dict:
    from mlir_mx.numerics import ELEMENT_FORMATS

    rng = random.Random(f"convert:{seed}:{index}")
    rank = rng.choice((1, 2, 2, 3, 4))
    axis = rng.randrange(rank)
    block = rng.choice((1, 2, 3, 5, 8, 16, 32))
    shape = [rng.randint(1, 4) for _ in range(rank)]
    shape[axis] = block * rng.randint(1, 3)
    return dict(
        element=rng.choice(list(ELEMENT_FORMATS)),
        block=block,
        axis=axis,
        shape=shape,
        dtype=rng.choice(list(DTYPES)),
        layout=rng.choice(LAYOUTS),
        threads=rng.randint(1, 3),
        out=rng.choice(OUTS[:1] * 3 + OUTS[1:2] * 2 + OUTS[2:]),
        seed=rng.randrange(2**32),
    )


def _dequantize_into(a, how: str, threads: int):
    """``(result or None, refusal message or None, valid)`` of dequantizing
    ``a`` into an ``out=`` of layout ``how``; ``valid``: whether that ``out``
    is one the kernel may write (C-contiguous, aligned, apart from ``a``)."""
    import mlir_mx

    if how == "fresh":
        return mlir_mx.dequantize(a, threads), None, True
    if how == "given":
        out = np.full(a.shape, 7.0, np.float32)
    elif how == "misaligned":
        out = over_bytes(
            a.shape, np.float32, [4 * int(np.prod(a.shape[i + 1 :])) for i in range(a.ndim)], 1
        )
    elif how == "strided":
        out = np.empty((*a.shape[:-1], 2 * a.shape[-1]), np.float32)[..., ::2]
    else:  # the codes' own memory, handed over writeable (copy=False)
        from mlir_mx.numerics import MXArray

        raw = np.zeros(max(4 * int(np.prod(a.shape)), a.packed_codes().nbytes), np.uint8)
        codes = raw[: a.packed_codes().nbytes].reshape(a.packed_codes().shape)
        codes[...] = a.packed_codes()
        a = MXArray.from_packed(
            codes, np.array(a.scales), a.element, a.block_size, a.axis, copy=False
        )
        out = raw[: 4 * int(np.prod(a.shape))].view(np.float32).reshape(a.shape)
    valid = how == "given" or (how == "strided" and out.flags.c_contiguous)
    try:
        return mlir_mx.dequantize(a, threads, out=out), None, valid
    except MXError as e:
        return None, str(e), valid


def case(seed: int, index: int) -> Outcome:
    """One quantize and one dequantize call; see the module docstring."""
    import mlir_mx
    from mlir_mx import oracle

    cfg = _config(seed, index)
    config = f"{cfg['layout']}/{cfg['dtype']}"
    what = str(cfg)
    try:
        x = layout_array(
            cfg["shape"], cfg["dtype"], cfg["layout"], np.random.default_rng(cfg["seed"])
        )
        want = oracle.quantize(_host(x), cfg["element"], cfg["block"], cfg["axis"])
        try:
            got = mlir_mx.quantize(
                x, cfg["element"], cfg["block"], cfg["axis"], threads=cfg["threads"]
            )
        except (TypeError, ValueError) as e:
            return Outcome(
                index, "wrong", config, f"valid call refused: {type(e).__name__}: {e}", what
            )
        bad = same_mx(got, want)
        if bad:
            return Outcome(index, "wrong", config, f"quantize: {bad}", what)
        y, refused, valid = _dequantize_into(want, cfg["out"], cfg["threads"])
        if valid and (refused is not None or not same_f32(y, oracle.dequantize(want))):
            return Outcome(
                index,
                "wrong",
                config,
                f"dequantize into {cfg['out']}: {refused or 'bits differ'}",
                what,
            )
        if not valid and not (refused or "").startswith("out: "):
            return Outcome(index, "wrong", config, f"out={cfg['out']} not refused naming out", what)
        return Outcome(index, "ok" if valid else "rejected", config)
    except BaseException as e:  # noqa: BLE001 - anything else is the finding
        tb = "".join(traceback.format_exception(e))[-1500:]
        return Outcome(index, "traceback", config, tb, what)

"""The library API suite: ``Linear`` / ``matmul`` calls checked against the oracle.

Calls come in groups of :data:`GROUP` sharing one configuration, drawn from
``random.Random(f"linear:{seed}:{index // GROUP}")``: a weight format and an
activation kind (any of the 6 MX element formats, f32, or f32 quantized per
call by ``Linear(w, activations=F)`` to any of the 6: 78 pairs), the
weight's storage (FP4/FP6 packed, or one code per byte when ``out`` is not a
whole packing group), its layout ((out, in) along axis 1, or (in, out) along
axis 0), a block size (powers of two and 1, 3, 5, 6, 12, 24, 48, 96), odd
shapes (``out`` 0 to 130), a thread count (1, 2, 3, 7), the entry point
(``Linear`` or ``mlir_mx.matmul``) and the range of the values.  Each call
then draws a batch size (0 to 100: every schedule, vectors too) and an
activation; one call in ten is malformed on purpose.

``value_range="full"`` (the default) mixes in the edges of the f32 range:
activations near overflow (2^100..2^127) and subnormal, block scale codes 0,
1, 2, 252, 253, 254, zero blocks against huge scales, and rarely NaN/Inf;
``"normal"`` keeps values and scales within 2^-20..2^20.

The rule: a valid call returns the ``block_matmul`` result bit for bit as
the blocked order computes it (:func:`mlir_mx.oracle.blocked_order`;
for ``activations=F``, on the oracle's ``quantize(x, F, B)``), within the
claim's bound (:func:`mlir_mx.oracle.matmul_reference`: outputs
inside the claim are compared; NaN and Inf must agree), and leaves its input
unchanged; a malformed one raises ``TypeError`` / ``ValueError`` naming ``x``.

Restrictions (named, explicit, for branches where a known defect is not
fixed yet): ``pairs`` (a list of ``"weight/activation"`` names) and
``unpacked_subbyte_activations=False`` (FP4/FP6 MX activations only where
both they and the weight are stored packed: no 8-bit weight, ``out`` and
``K`` whole packing groups).
"""

from __future__ import annotations

import random
import traceback
from functools import lru_cache

import numpy as np

from mlir_mx.errors import MXError, MXValueError
from mlir_mx.numerics.formats import ELEMENT_FORMATS
from mlir_mx_testing.campaign import Outcome

__all__ = ["ACTIVATIONS", "BLOCKS", "ELEMENTS", "GROUP", "all_pairs", "case"]

ELEMENTS = tuple(ELEMENT_FORMATS)
#: MX activations, f32 ones, and f32 ones quantized per call (``"f32:F"``:
#: ``Linear(w, activations=F)``).
ACTIVATIONS = ELEMENTS + ("f32",) + tuple(f"f32:{e}" for e in ELEMENTS)
BLOCKS = (32, 32, 32, 16, 64, 8, 1, 2, 3, 5, 6, 12, 24, 48, 96)
THREADS = (1, 1, 2, 3, 7)
OUTS = (1, 2, 3, 4, 5, 7, 8, 12, 13, 16, 31, 33, 63, 64, 65, 100, 128, 130)
BATCHES = (0, 1, 1, 1, 2, 5, 8, 17, 48, 49, 64, 100)
GROUP = 4
_SUBBYTE = tuple(name for name, f in ELEMENT_FORMATS.items() if f.is_sub_byte)


def all_pairs() -> list[str]:
    """Every ``"weight/activation"`` pair: 6 x 6 MX pairs, 6 with f32 and 36
    with f32 quantized per call."""
    return [f"{w}/{a}" for w in ELEMENTS for a in ACTIVATIONS]


# ------------------------------------------------------------------ configuration


def _config(seed: int, group: int, pairs, unpacked_subbyte: bool, value_range: str) -> dict:
    from mlir_mx.numerics import packing_group

    rng = random.Random(f"linear:{seed}:{group}")
    allowed = list(pairs) if pairs is not None else all_pairs()
    if not unpacked_subbyte:  # 8-bit weights are always one code per byte
        allowed = [p for p in allowed if not (p.split("/")[1] in _SUBBYTE and p.split("/")[0] not in _SUBBYTE)]
    w_elem, a_kind = rng.choice(allowed).split("/")
    block = rng.choice(BLOCKS)
    k = block * rng.choice((1, 2, 3, 5)) if block <= 32 else block * rng.choice((1, 2))
    n = 0 if rng.random() < 0.03 else rng.choice(OUTS)
    group_n = packing_group(w_elem)[0]
    packed = rng.random() < 0.6 or (a_kind in _SUBBYTE and not unpacked_subbyte)
    if group_n > 1 and n:
        n = n + (-n) % group_n if packed else (n if n % group_n else n + 1)
    if a_kind in _SUBBYTE and not unpacked_subbyte:  # the activation packs too: whole groups
        k *= packing_group(a_kind)[0] if k % packing_group(a_kind)[0] else 1
    edge = value_range == "full" and rng.random() < 0.35
    return dict(
        w_elem=w_elem,
        a_kind=a_kind,
        block=block,
        k=k,
        n=n,
        layout=rng.choice(("out_in", "in_out")),
        threads=rng.choice(THREADS),
        entry="Linear" if ":" in a_kind else rng.choice(("Linear", "Linear", "matmul")),
        values="edge" if edge else "normal",
        seed=rng.randrange(2**32),
    )


def _raw_mx(shape, elem, block, axis, rng: np.random.Generator, edge: bool):
    """An MXArray with random finite codes and scale codes (edges when ``edge``)."""
    from mlir_mx import numerics as N

    fmt = N.element_format(elem)
    codes = rng.choice(N.finite_codes(fmt), shape).view(np.uint8)  # the bits, not the values
    sshape = N.scale_shape(shape, block, axis)
    scales = rng.integers(107, 148, sshape)
    if edge:
        odd = rng.choice(np.array((0, 1, 2, 252, 253, 254, 127), np.int64), sshape)
        scales = np.where(rng.random(sshape) < 0.5, odd, scales)
        if rng.random() < 0.05 and scales.size:
            scales.flat[rng.integers(scales.size)] = 255  # a NaN scale: NaN outputs
        zero = np.repeat(rng.random(sshape) < 0.15, block, axis=axis)
        codes = np.where(zero, np.zeros_like(codes), codes)  # zero blocks, any scale
    return N.MXArray(codes.view(fmt.dtype), scales.astype(np.uint8).view(N.SCALE_DTYPE), elem, block, axis)


def _f32(shape, rng: np.random.Generator, edge: bool) -> np.ndarray:
    e = rng.integers(-20, 21, (shape[0], 1)) if len(shape) == 2 else rng.integers(-20, 21)
    x = rng.standard_normal(shape) * np.exp2(e)
    if edge:
        big = np.ldexp(rng.uniform(1, 2, shape), rng.integers(100, 128, shape))
        tiny = np.ldexp(rng.uniform(1, 2, shape), rng.integers(-149, -125, shape))
        pick = rng.random(shape)
        x = np.where(pick < 0.15, big, np.where(pick < 0.3, tiny, x)) * rng.choice((-1, 1), shape)
        x = np.where(rng.random(shape) < 0.05, 0.0, x)
        if rng.random() < 0.05 and x.size:
            x.flat[rng.integers(x.size)] = rng.choice((np.nan, np.inf, -np.inf))
    return x.astype(np.float32)


@lru_cache(maxsize=4)
def _state(seed, group, pairs, unpacked_subbyte, value_range):
    """The configuration of a group, its weight and its Linear (kept across calls)."""
    import mlir_mx
    from mlir_mx import oracle
    from mlir_mx.interop import transpose

    cfg = _config(seed, group, pairs, unpacked_subbyte, value_range)
    rng = np.random.default_rng(cfg["seed"])
    n, k, b = cfg["n"], cfg["k"], cfg["block"]
    if cfg["values"] == "edge":
        w = _raw_mx((n, k), cfg["w_elem"], b, 1, rng, True)
    else:
        data = rng.standard_normal((n, k)) * np.exp2(rng.integers(-20, 21, (n, k // b))).repeat(b, 1)
        w = oracle.quantize(data.astype(np.float32), cfg["w_elem"], b)
    given = w if cfg["layout"] == "out_in" else transpose(w)
    lin = None
    if cfg["entry"] == "Linear":
        lin = mlir_mx.Linear(given, threads=cfg["threads"], activations=_quantized_to(cfg))
    return cfg, w, given, lin


def _quantized_to(cfg: dict) -> str | None:
    """The format ``activations=`` quantizes f32 activations to (None: not quantized)."""
    return cfg["a_kind"].partition(":")[2] or None


# ------------------------------------------------------------------ one call


def _activation(cfg: dict, m: int, rng: np.random.Generator, vector: bool):
    from mlir_mx import oracle

    edge = cfg["values"] == "edge"
    if cfg["a_kind"].startswith("f32"):
        x = _f32((m, cfg["k"]), rng, edge)
        return x[0] if vector else x
    if edge:
        return _raw_mx((m, cfg["k"]), cfg["a_kind"], cfg["block"], 1, rng, True)
    return oracle.quantize(_f32((m, cfg["k"]), rng, False), cfg["a_kind"], cfg["block"])


def _malformed(cfg: dict, x, rng: random.Random):
    from mlir_mx import oracle

    k, choice = cfg["k"], rng.randrange(4)
    if choice == 0:
        return np.ones((2, k + rng.choice((-1, 1, cfg["block"]))), np.float32), "wrong K"
    if choice == 1:
        return np.ones((2, k), rng.choice((np.float64, np.int32, np.complex64))), "wrong dtype"
    if choice == 2:
        other = 2 * cfg["block"] if k % (2 * cfg["block"]) == 0 else 1
        if other == cfg["block"]:
            return np.ones((2, 3, k), np.float32), "rank 3"
        return oracle.quantize(np.ones((2, k), np.float32), "f8E4M3FN", other), "another block size"
    return [[1.0] * k], "a list"


def _check(cfg: dict, w, x, y) -> tuple[str | None, int]:
    """(what is wrong or None, outputs outside the claim)."""
    from mlir_mx import oracle
    from mlir_mx.interop import transpose
    from mlir_mx.numerics import MXArray
    from mlir_mx_testing.differential import same_result, within_bound

    vector = not isinstance(x, MXArray) and x.ndim == 1
    x2 = x[None] if vector else x
    m, n = x2.shape[0], cfg["n"]
    want_shape = (n,) if vector else (m, n)
    if not isinstance(y, np.ndarray) or y.dtype != np.float32 or y.shape != want_shape:
        return f"result {type(y).__name__} {getattr(y, 'shape', '')}, expected f32 {want_shape}", 0
    if m == 0 or n == 0:
        return None, 0
    if _quantized_to(cfg):  # Linear(w, activations=F)(x) is Linear(w)(quantize(x, F, B))
        x2 = oracle.quantize(x2, _quantized_to(cfg), cfg["block"])
    y2 = np.asarray(y).reshape(m, n)
    zero = np.zeros((m, n), np.float32)
    exact, bound, inside = oracle.matmul_reference(x2, transpose(w), zero)
    ok, compared = within_bound(y2, ("matmul", exact, bound, inside))
    outside = int(inside.size - compared)
    if not ok:
        got = y2.astype(np.float64)
        with np.errstate(invalid="ignore"):
            bad = inside & ~(
                (np.abs(got - exact) <= bound)
                | (np.isnan(exact) & np.isnan(got))
                | (np.isinf(exact) & (got == exact))
            )
        i, j = np.argwhere(bad)[0]
        return (f"y[{i}, {j}] = {got[i, j]!r}, exact {exact[i, j]!r}, bound {bound[i, j]:.3g} "
                f"({int(bad.sum())} outputs outside the bound)"), outside  # fmt: skip
    want = oracle.blocked_order(x2, transpose(w), zero)
    if not same_result(y2, want):
        i, j = np.argwhere(
            ~((y2.view(np.uint32) == want.view(np.uint32)) | (np.isnan(y2) & np.isnan(want)))
        )[0]
        return f"y[{i}, {j}] = {y2[i, j]!r}, the blocked order gives {want[i, j]!r}", outside
    return None, outside


def _same_input(x, before) -> bool:
    from mlir_mx.numerics import MXArray

    if isinstance(x, MXArray):
        return x.bitwise_equal(before)
    return np.array_equal(x.view(np.uint8), before.view(np.uint8))


def case(
    seed: int,
    index: int,
    *,
    pairs=None,
    unpacked_subbyte_activations: bool = True,
    value_range: str = "full",
) -> Outcome:
    """One ``Linear`` / ``matmul`` call; see the module docstring."""
    import mlir_mx

    if value_range not in ("full", "normal"):
        raise MXValueError(f"value_range: 'full' or 'normal', got {value_range!r}")
    pairs = tuple(pairs) if pairs is not None else None
    rng = random.Random(f"linear:{seed}:{index}")
    what = f"group {index // GROUP}"
    try:
        cfg, w, given, lin = _state(seed, index // GROUP, pairs, unpacked_subbyte_activations, value_range)
        config = f"{cfg['w_elem']}/{cfg['a_kind']}"
        m = rng.choice(BATCHES)
        vector = m == 1 and cfg["a_kind"].startswith("f32") and rng.random() < 0.3
        x = _activation(cfg, m, np.random.default_rng(rng.randrange(2**32)), vector)
        what = (
            f"{cfg}; M={m}{' (vector)' if vector else ''}; weight shape {given.shape} "
            f"axis {given.axis}"
        )

        def call(arg):
            if lin is not None:
                return lin(arg)
            return mlir_mx.matmul(arg, given, threads=cfg["threads"])

        if rng.random() < 0.1:
            bad, how = _malformed(cfg, x, rng)
            try:
                call(bad)
            except (TypeError, ValueError) as e:
                if not isinstance(e, MXError):
                    return Outcome(index, "not-mx-error", config, f"{type(e).__name__}: {e}", what)
                if str(e).startswith("x: "):
                    return Outcome(index, "rejected", config)
                return Outcome(index, "unlocated", config, f"{type(e).__name__}: {e}", what + "; " + how)
            return Outcome(index, "silent", config, f"malformed x accepted ({how})", what)
        before = x.copy() if isinstance(x, np.ndarray) else type(x)(x.codes.copy(), x.scales.copy(), x.element, x.block_size, x.axis)
        try:
            y = call(x)
        except (TypeError, ValueError) as e:
            return Outcome(index, "wrong", config, f"valid call refused: {type(e).__name__}: {e}", what)
        if not _same_input(x, before):
            return Outcome(index, "wrong", config, "the call modified its input", what)
        bad, outside = _check(cfg, w, x, y)
        if bad:
            return Outcome(index, "wrong", config, bad, what)
        return Outcome(index, "ok", config, f"{outside} outputs outside the claim" if outside else "")
    except BaseException as e:  # noqa: BLE001 - anything else is the finding
        tb = "".join(traceback.format_exception(e))[-1500:]
        return Outcome(index, "traceback", "linear", tb, what)

"""Which dot unit computes an MX pair's block partials exactly, and B's VNNI records.

The dot kernels (:mod:`mlir_mx.kernels.dot.kernel`) compute each block partial
``p = sum_kk a[kk] b[kk]`` of the blocked order (``docs/numerics.md``) with
a dot-product instruction instead of f32 FMAs, and give the same bits:

``i8``   ``vpdpbusd`` (AVX512-VNNI; ``vpmaddubsw`` + ``vpmaddwd`` with AVX512BW
         only when no pair sum can saturate): both operands are integers
         ``value * 2^f`` (:func:`int_factor`: E2M1 x2, E2M3 x8, INT8 x64 on
         values, i.e. the codes) in [-128, 127].  B, the unsigned operand,
         enters as ``b + 128``; A as it is; the accumulator starts at the
         compensation ``-128 * sum_kk a[kk]`` (made with A, once per row and
         block), so it ends at the exact integer partial.  (AVX-512 has no
         ``vpsignb``; putting the offset on B keeps the compensation off the
         weights and out of the inner loop.)  Without AVX-512: ``vpdpbusd``
         ymm (AVX-VNNI) or ``vpmaddubsw`` + ``vpmaddwd`` ymm (AVX2), the same
         records, on 256-bit halves; INT8 activations there use the sign
         trick instead of the offset (:mod:`.isa`, :func:`maddubs_mode`).
``i16``  ``vpdpwssd`` (``vpmaddwd`` + add without VNNI): pairs with E3M2
         (x16, up to 448), both operands int16; also A = INT8 on AVX512BW
         without VNNI, and INT8 x INT8 on AVX2 without AVX-VNNI (the one
         narrow pair whose ``vpmaddubsw`` pair sums can saturate).
``bf16`` ``vdpbf16ps`` (AVX512_BF16): pairs with an FP8 operand.  Every MX
         element value is exact in bf16 and every product exact in f32;
         element ``k`` sits in the odd slot and ``k + 1`` in the even slot of
         each pair ("swapped pairs"), so the instruction's two FMAs (odd
         first) are the in-order FMA chain of the f32 kernels
         (``bench/results/dot-units-findings-2026-12-01.md``).

An integer partial ``P`` is below 2^24 in magnitude (:func:`dot_kind` checks
``block * max|a| * max|b|``), so ``t = float(P) * (sb * 2^-(fa+fb))`` is one
rounding of the exact ``p * sb``: the same bits as the f32 kernels' block
step at every scale (``sb * 2^-12 >= 2^-139`` is still an exact f32).

**B records** (:func:`pack_records`): B (K x N) is stored once as one row
of bytes per (panel of :data:`PANEL` columns, block), row ``j * K/B + kb``::

    [sb:   E8M0 x 64]    the block's scale codes (0 past N)
    [data]               block/g groups of g K-consecutive values per column
                         (g = 4 for i8, 2 for i16/bf16), as 4 vectors of 16
                         columns x g values: one 64-byte register each

tpp-mlir's VNNI layout (K quads or pairs innermost) inside each vector.
FP4 under ``i8`` keeps its 4-bit codes: each group's 4 vectors are 2 x 64
bytes whose low nibbles are vector ``2h`` and high nibbles vector ``2h + 1``
(a ``vpshufb`` table maps a code to its doubled value plus 128), so an
MXFP4 weight takes 4.25 bits per element, like its packed codes.  Columns past N
(the last panel) are zeros.  The kernels expand a chunk of records into
"full" records in a scratch buffer (the scales as f32 times ``2^-(fa+fb)``,
FP4 as bytes) when several row groups reuse it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mlir_mx.host import bf16_dot_pays, has_features
from mlir_mx.kernels.common.codec import BF16
from mlir_mx.numerics import ELEMENT_FORMATS, decode_elements

__all__ = [
    "PANEL",
    "DotKind",
    "KINDS",
    "int_factor",
    "int_max",
    "offset_bytes",
    "value_table",
    "dot_kind",
    "maddubs_mode",
    "a_offset_run",
    "pair_sum_bounds",
    "RecordLayout",
    "pack_records",
    "dot_values",
    "BF16",
    "bf16_floor",
]

#: Columns of one panel of B records (4 vectors of 16 f32/i32 lanes).
PANEL = 64


def int_factor(element: str) -> int | None:
    """``f`` such that every value of ``element`` times ``2^f`` is an integer
    (the format table's ``int_exp2``; None for FP8 and bf16 activations)."""
    return None if element == BF16 else ELEMENT_FORMATS[element].int_exp2


def bf16_floor(b_element: str) -> int:
    """``e`` such that bf16 activations of magnitude at least ``2^e`` (or
    zero) against ``b_element`` weights never meet ``vdpbf16ps``'s flush:
    each nonzero product is then a multiple of ``2^(e-7) q`` (``a``'s bf16
    ulp times ``q``, the format's smallest positive value), and so is every
    partial sum (rounding a multiple of a power of two to f32 keeps it one),
    so each is zero or at least ``2^-126``: normal, never flushed.  Smaller
    nonzero activations send the call to the FMA form (``docs/numerics.md``)."""
    fmt = ELEMENT_FORMATS[b_element]
    q = decode_elements(np.ones(1, np.uint8).view(fmt.dtype), fmt.name)[0]
    return -126 + 7 - int(np.log2(q))


def int_max(element: str) -> int:
    """Largest ``|value * 2^f|`` of ``element`` (INT8: 128, for code -128)."""
    fmt = ELEMENT_FORMATS[element]
    return 128 if fmt.is_int else int(fmt.max_normal * 2**fmt.int_exp2)


def value_table(element: str) -> bool:
    """Whether ``element``'s codes index a 16-entry table (``vpshufb``, and FP4
    records kept as nibbles): the format table's ``widening == "values"``."""
    return ELEMENT_FORMATS[element].widening == "values"


def offset_bytes(element: str, n: int) -> list[int]:
    """The bytes ``value * 2^int_exp2 + 128`` of codes ``0 .. n - 1`` (code
    ``k`` taken modulo the format's number of codes): a byte table of B's
    operand values for the ``i8`` unit."""
    fmt = ELEMENT_FORMATS[element]
    codes = np.arange(n) % fmt.num_codes
    vals = decode_elements(codes.astype(np.uint8).view(fmt.dtype), fmt.name) * 2.0**fmt.int_exp2
    return [int(x) + 128 for x in vals]


@dataclass(frozen=True)
class DotKind:
    """One dot unit: its K group per 32-bit lane and whether B is offset by 128."""

    name: str
    group: int  # K values per 32-bit lane (4: i8 quads, 2: 16-bit pairs)
    comp: bool  # B enters as b + 128 (u8); A's block sums compensate


KINDS = {
    "i8": DotKind("i8", 4, True),
    "i16": DotKind("i16", 2, False),
    "bf16": DotKind("bf16", 2, False),
}


def pair_sum_bounds(a_element: str, b_element: str, mode: str = "offset") -> tuple[int, int]:
    """The least and greatest sum of two products ``u * s`` that ``vpmaddubsw``
    forms (into an int16, saturating) for A x B on the ``i8`` unit, from the
    format tables: ``mode`` ``offset``: ``u = b + 128`` (the records' bytes),
    ``s = a``; ``sign``: ``u = |a|``, ``s = b * sign(a)``; ``a-offset``:
    ``u = a + 128``, ``s = b`` (:mod:`.isa`)."""
    a = _int_values(a_element)
    b = _int_values(b_element)
    if mode == "offset":
        u, s = [x + 128 for x in b], a
    elif mode == "a-offset":
        u, s = [x + 128 for x in a], b
    else:
        u = [abs(x) for x in a]
        s = [y * sg for y in b for sg in {(x > 0) - (x < 0) for x in a}]
    return 2 * max(u) * min(s), 2 * max(u) * max(s)


def _int_values(element: str) -> list[int]:
    """Every finite value of ``element`` times ``2^int_exp2`` (integers)."""
    fmt = ELEMENT_FORMATS[element]
    codes = np.arange(fmt.num_codes).astype(np.uint8).view(fmt.dtype)
    vals = decode_elements(codes, fmt.name) * 2.0**fmt.int_exp2
    return sorted({int(x) for x in vals[np.isfinite(vals)]})


def maddubs_mode(a_element: str, b_element: str) -> str | None:
    """How ``vpmaddubsw`` computes A x B's pair sums exactly: ``offset`` (B as
    ``b + 128``, A's compensation), else ``sign`` (the sign trick, where each
    ``b * sign(a)`` is a signed byte), else None (some pair sum or operand
    would saturate: INT8 x INT8)."""
    for mode in ("offset", "sign"):
        if mode == "sign" and min(_int_values(b_element)) < -127:
            continue
        lo, hi = pair_sum_bounds(a_element, b_element, mode)
        if lo >= -(2**15) and hi < 2**15:
            return mode
    return None


def a_offset_run(a_element: str, b_element: str, block: int) -> int:
    """The K groups (of 4) each int16 lane of the ``a-offset`` mode of
    :mod:`.isa` adds before one ``vpmaddwd``, or 0 where the mode is not
    exact for A x B in blocks of ``block``.  The mode needs B's values as
    signed bytes, every pair sum ``(a + 128) b + (a' + 128) b'`` and every
    ``128 (b + b')`` (the lane's start) inside int16 (``vpmaddubsw``
    saturates), and the lane's true sum over a run of ``r`` groups, ``2 r``
    products ``a * b``, inside int16: its running value starts at ``-128
    *`` the run's sum of B and may wrap, but int16 addition is exact modulo
    2^16, so it ends at that true sum.  ``r`` divides the block's groups."""
    a, b = _int_values(a_element), _int_values(b_element)
    amax, bmax = max(abs(x) for x in a), max(abs(x) for x in b)
    lo, hi = pair_sum_bounds(a_element, b_element, "a-offset")
    if min(b) < -128 or max(b) > 127 or lo < -(2**15) or hi >= 2**15 or 2 * 128 * bmax >= 2**15:
        return 0
    groups = block // 4 if block % 4 == 0 else 0
    runs = [r for r in (1, 2, 4, 8) if groups % r == 0 and 2 * r * amax * bmax < 2**15]
    return max(runs, default=0)


def dot_kind(a_element: str | None, b_element: str | None, block: int) -> DotKind | None:
    """The dot unit for A x B on this CPU (:mod:`mlir_mx.host`), or None (f32 kernels).

    ``a_element`` is A's element format (for an f32 A quantized per call: the
    format it is quantized to).  Integer pairs need every block partial below
    2^24 (exact in f32); bf16 needs an FP8 operand and an even block, or
    bf16 activations (:data:`BF16`, any weight) on a CPU where ``vdpbf16ps``
    pays (:func:`mlir_mx.host.bf16_dot_pays`: not Intel).
    AVX-512 (512-bit) first; else AVX2 with 256-bit halves (:mod:`.isa`):
    ``i8`` with AVX-VNNI or where ``vpmaddubsw`` cannot saturate
    (:func:`maddubs_mode`), else ``i16``.  aarch64 with ``asimddp``: ``i8``
    for the narrow pairs (``sdot`` / ``usdot``, :mod:`.isa`; the same
    records); E3M2 pairs and FP8 take the f32 kernels there.
    """
    if a_element is None or b_element is None:
        return None
    if a_element == BF16:  # bf16 activations: any weight format (exact in bf16)
        ok = block % 2 == 0 and has_features("avx512_bf16", "avx512bw") and bf16_dot_pays()
        return KINDS["bf16"] if ok else None
    fa, fb = int_factor(a_element), int_factor(b_element)
    if fa is not None and fb is not None:
        if block % 4 or block * int_max(a_element) * int_max(b_element) >= 2**24:
            return None
        narrow = max(int_max(a_element), int_max(b_element)) <= 128
        if narrow and has_features("asimddp"):  # aarch64: sdot / usdot (.isa)
            return KINDS["i8"]
        if narrow and has_features("avx512_vnni"):
            return KINDS["i8"]
        # vpmaddubsw saturates its pair sums unless 2 * 255 * max|a| < 2^15.
        if narrow and int_max(a_element) <= 64 and has_features("avx512bw"):
            return KINDS["i8"]
        if has_features("avx512bw"):
            return KINDS["i16"]
        if not has_features("avx2"):
            return None
        if narrow and (has_features("avx_vnni") or maddubs_mode(a_element, b_element)):
            return KINDS["i8"]
        return KINDS["i16"]
    if block % 2 == 0 and has_features("avx512_bf16", "avx512bw"):
        return KINDS["bf16"]
    return None


def dot_values(values: np.ndarray, element: str, kind: DotKind) -> np.ndarray:
    """B's element values (float64) -> the dot unit's operand values: bf16
    (exact), int16 ``value * 2^f``, or (i8) the bytes ``value * 2^f + 128``."""
    if kind.name == "bf16":
        import ml_dtypes  # on first use: its import costs 0.8-1 s

        return values.astype(np.float32).astype(ml_dtypes.bfloat16)
    ints = values * 2.0 ** int_factor(element)
    if kind.name == "i8":
        return (ints + 128).astype(np.uint8)
    return ints.astype(np.int16)


@dataclass(frozen=True)
class RecordLayout:
    """Byte offsets of one B record (one panel of columns, one block).

    ``full``: the expanded form the kernels build in a scratch buffer
    (f32 scales, FP4 as bytes) instead of the
    stored one (E8M0 codes, FP4 nibbles).
    """

    kind: DotKind
    b_element: str
    block: int
    full: bool = False

    @property
    def nibbles(self) -> bool:
        """FP4 codes kept as nibbles (stored i8 records only)."""
        return not self.full and self.kind.name == "i8" and value_table(self.b_element)

    @property
    def data_offset(self) -> int:
        """Bytes before the data: the 64 scales (E8M0 codes, or f32 when full)."""
        return (4 if self.full else 1) * PANEL

    @property
    def groups(self) -> int:
        return self.block // self.kind.group

    @property
    def group_bytes(self) -> int:
        """Bytes of one K group (all 64 columns)."""
        return 2 * 64 if self.nibbles else 4 * 64

    @property
    def nbytes(self) -> int:
        return self.data_offset + self.groups * self.group_bytes

    def shape(self, k: int, n: int) -> tuple[int, int]:
        """Shape of the records buffer of a K x N B."""
        return (-(-n // PANEL) * (k // self.block), self.nbytes)


def pack_records(codes: np.ndarray, scales: np.ndarray, layout: RecordLayout) -> np.ndarray:
    """B's codes (K x N, one code per byte, element dtype) and E8M0 scales
    (K/B x N) -> the stored records buffer (:class:`RecordLayout`, uint8)."""
    if layout.full:
        raise ValueError("pack_records: builds stored records (layout.full is False)")
    k, n = codes.shape
    bs, kind = layout.block, layout.kind
    nb, panels, g = k // bs, -(-n // PANEL), kind.group
    npad = panels * PANEL

    def padded(a: np.ndarray) -> np.ndarray:  # columns up to whole panels (a copy only then)
        return a if npad == n else np.pad(a, ((0, 0), (0, npad - n)))

    sb = padded(np.asarray(scales).view(np.uint8))
    out = np.empty((panels, nb, layout.nbytes), np.uint8)
    out[..., :PANEL] = sb.reshape(nb, panels, PANEL).transpose(1, 0, 2)
    # (K, Npad) -> (panels, nb, groups, 4 vectors, 16 columns, g)
    order = (3, 0, 1, 4, 5, 2)
    if layout.nibbles:  # the codes as they are: no values decoded
        raw = padded(codes.view(np.uint8))
        nib = raw.reshape(nb, bs // g, g, panels, 4, 16).transpose(order)
        nib = nib.reshape(panels, nb, bs // g, 2, 2, 64)  # (.., h, low/high vector, bytes)
        data = nib[..., 0, :] | (nib[..., 1, :] << np.uint8(4))
    else:
        vals = padded(decode_elements(codes, layout.b_element))
        shaped = vals.reshape(nb, bs // g, g, panels, 4, 16).transpose(order)
        data = dot_values(shaped, layout.b_element, kind)
        if kind.name == "bf16":  # swapped pairs: element 2i in the odd slot
            data = data[..., ::-1]
        data = np.ascontiguousarray(data).view(np.uint8)
    out[..., layout.data_offset :] = data.reshape(panels, nb, -1)
    return out.reshape(panels * nb, layout.nbytes)

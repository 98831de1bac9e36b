"""Packed storage of sub-byte MX element codes: FP4 two per byte, FP6 four per three bytes.

The oracle's :class:`MXArray` keeps one code per byte (the ``ml_dtypes`` layout: the
code in the low ``bits`` bits, the rest zero).  These helpers convert between that
and the packed layout, which is a little-endian bit stream along the last
(contiguous) axis of the codes array: element ``k`` of a row occupies bits
``[bits * k, bits * k + bits)``, bit 0 being the least significant bit of byte 0.

* FP4 (``f4E2M1FN``): byte ``i`` holds element ``2i`` in its low nibble (bits 0-3)
  and element ``2i + 1`` in its high nibble (bits 4-7).
* FP6 (``f6E2M3FN``, ``f6E3M2FN``): bytes ``3j .. 3j+2`` hold elements
  ``4j .. 4j+3``; read as the little-endian 24-bit word
  ``w = b0 | b1 << 8 | b2 << 16``, element ``4j + k`` is ``(w >> 6k) & 0x3f``.
* 8-bit formats are stored as they are (packing is the identity), so callers can
  treat every element format alike.

The packed axis is always the last one, whatever the MX blocking axis is.  Its
length must be a multiple of the codes per packing group (2 for FP4, 4 for FP6);
other lengths are rejected with ``ValueError`` (no implicit padding).  The layout,
and why it was chosen over ggml's split-half nibble order, is documented in
``docs/numerics.md`` ("Packed storage").
"""

from __future__ import annotations

import numpy as np

from mlir_mx.errors import MXArgTypeError, MXValueError

from .blocks import check_shape
from .formats import ElementFormat, element_format

__all__ = [
    "is_packed_storage",
    "pack_codes",
    "packed_shape",
    "packing_group",
    "unpack_codes",
    "unpacked_shape",
]

def packing_group(element: str | ElementFormat) -> tuple[int, int]:
    """``(codes, bytes)`` of one packing group (``ElementFormat.group``): (2, 1)
    for FP4, (4, 3) for FP6, (1, 1) else."""
    return element_format(element).group


def is_packed_storage(shape, element: str | ElementFormat) -> bool:
    """True when codes of logical ``shape`` are stored packed in memory.

    The one rule every layer applies (``MXArray``, the lowering's
    ``subbyte-storage=packed`` function boundary, the Runner's ABI): an FP4 or
    FP6 format whose last axis is a non-empty multiple of the packing group (2
    for FP4, 4 for FP6).  Other shapes, and the 8-bit formats, keep one code
    per byte.
    """
    fmt = element_format(element)
    shape = check_shape(shape)
    codes, _nbytes = fmt.group
    return fmt.is_sub_byte and len(shape) > 0 and shape[-1] > 0 and shape[-1] % codes == 0


def packed_shape(shape, element: str | ElementFormat) -> tuple[int, ...]:
    """Shape of the packed ``uint8`` array for codes of logical ``shape``.

    Raises ``ValueError`` when the last axis is not a multiple of the group size.
    """
    fmt = element_format(element)
    shape = check_shape(shape)
    _check_axis(shape, fmt, "codes")
    codes, nbytes = fmt.group
    return shape[:-1] + (shape[-1] // codes * nbytes,)


def unpacked_shape(shape, element: str | ElementFormat) -> tuple[int, ...]:
    """Logical codes shape for a packed ``uint8`` array of ``shape`` (inverse of packed_shape)."""
    fmt = element_format(element)
    shape = check_shape(shape)
    if len(shape) == 0:
        raise MXValueError("packed: packed codes need rank >= 1, got a rank-0 array")
    codes, nbytes = fmt.group
    if shape[-1] % nbytes:
        raise MXValueError(
            f"packed: last axis has {shape[-1]} bytes, not a multiple of {nbytes}: "
            f"{fmt.name} packs {codes} codes into {nbytes} bytes"
        )
    return shape[:-1] + (shape[-1] // nbytes * codes,)


def _check_axis(shape: tuple[int, ...], fmt: ElementFormat, arg: str) -> None:
    if len(shape) == 0:
        raise MXValueError(f"{arg}: packing needs rank >= 1, got a rank-0 array")
    codes, nbytes = fmt.group
    if shape[-1] % codes:
        raise MXValueError(
            f"{arg}: the packed (last) axis has length {shape[-1]}, not a multiple of "
            f"{codes}: {fmt.name} packs {codes} codes into {nbytes} byte(s) along the last "
            f"axis (pad the axis, or pack along an axis whose length is a multiple of {codes})"
        )


def _code_bytes(codes, fmt: ElementFormat) -> np.ndarray:
    """The codes as a C-contiguous ``uint8`` array, validated (no bits above ``fmt.bits``)."""
    codes = np.asarray(codes)
    if codes.ndim == 0:  # checked first: np.ascontiguousarray would make it rank 1
        raise MXValueError("codes: packing needs rank >= 1, got a rank-0 array")
    if codes.dtype == np.uint8 and not fmt.is_int:
        raw = codes
    elif codes.dtype == fmt.dtype:
        raw = codes.view(np.uint8)
    else:
        raise MXArgTypeError(
            f"codes: expected dtype {fmt.dtype} (or uint8 code bytes) for {fmt.name}, "
            f"got {codes.dtype}"
        )
    if fmt.is_sub_byte and raw.size and (raw >> np.uint8(fmt.bits)).any():
        raise MXValueError(
            f"codes: {fmt.name} codes must fit in the low {fmt.bits} bits of each byte"
        )
    return np.ascontiguousarray(raw)


def pack_codes(codes, element: str | ElementFormat) -> np.ndarray:
    """Pack element ``codes`` (one per byte) along the last axis into a new ``uint8`` array.

    ``codes`` has dtype ``element_format(element).dtype`` or ``uint8`` (raw code
    bytes; not for ``i8``), rank >= 1.  FP4: two codes per byte, even element in the
    low nibble; FP6: four codes per three bytes, little-endian bit stream; 8-bit
    formats: the code bytes unchanged (a copy).  The last axis length must be a
    multiple of 2 (FP4) or 4 (FP6), else ``ValueError``.
    """
    fmt = element_format(element)
    raw = _code_bytes(codes, fmt)
    _check_axis(raw.shape, fmt, "codes")
    group, nbytes = fmt.group
    if group == 1:
        return raw.copy()
    if nbytes == 1:  # the group's codes share one byte: code k at bits * k (FP4)
        out = raw[..., 0::group].copy()
        for k in range(1, group):
            out |= raw[..., k::group] << np.uint8(fmt.bits * k)
        return out
    # A group spans several bytes (FP6): its little-endian word, cut into bytes.
    groups = raw.reshape(raw.shape[:-1] + (raw.shape[-1] // group, group)).astype(np.uint32)
    word = groups[..., 0]
    for k in range(1, group):
        word = word | groups[..., k] << (fmt.bits * k)
    out = np.stack([(word >> (8 * j)) & 0xFF for j in range(nbytes)], axis=-1).astype(np.uint8)
    return out.reshape(packed_shape(raw.shape, fmt))


def unpack_codes(packed, element: str | ElementFormat) -> np.ndarray:
    """Inverse of :func:`pack_codes`: one code per byte, dtype ``element_format(element).dtype``.

    ``packed`` is a ``uint8`` array of rank >= 1 whose last axis holds whole packing
    groups (any length for FP4, a multiple of 3 for FP6), else ``ValueError``.
    ``unpack_codes(pack_codes(c, e), e)`` equals ``c`` bit for bit.
    """
    fmt = element_format(element)
    packed = np.asarray(packed)
    if packed.dtype != np.uint8:
        raise MXArgTypeError(f"packed: expected a uint8 array, got dtype {packed.dtype}")
    shape = unpacked_shape(packed.shape, fmt)  # also rejects rank 0
    packed = np.ascontiguousarray(packed)
    group, nbytes = fmt.group
    if group == 1:
        return packed.copy().view(fmt.dtype)
    out = np.empty(shape, np.uint8)
    mask = np.uint8((1 << fmt.bits) - 1)
    if nbytes == 1:  # FP4: code k of a byte at bits * k
        for k in range(group):
            out[..., k::group] = (packed >> np.uint8(fmt.bits * k)) & mask
        return out.view(fmt.dtype)
    b = packed.reshape(packed.shape[:-1] + (packed.shape[-1] // nbytes, nbytes)).astype(np.uint32)
    word = b[..., 0]
    for j in range(1, nbytes):
        word = word | b[..., j] << (8 * j)
    groups = out.reshape(shape[:-1] + (shape[-1] // group, group))
    for k in range(group):
        groups[..., k] = (word >> (fmt.bits * k)) & mask
    return out.view(fmt.dtype)

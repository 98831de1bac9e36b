"""Packed sub-byte storage at function boundaries (``mx-to-linalg{subbyte-storage=packed}``).

Under ``subbyte-storage=packed`` (the default) an ``!mx.tensor`` whose codes
pack (:attr:`MXTensorType.packs_codes`: FP4 / FP6 with a last axis of whole
packing groups) crosses a function boundary (arguments, results, calls) as
``tensor<... x L x i8>`` of packed bytes, the layout of
:func:`mlir_mx.numerics.pack_codes`: FP4 two codes per byte (even element in
the low nibble), FP6 four codes per three bytes (a little-endian bit
stream), along the last axis.  Inside a function the codes are one per
element as before; this module builds the two conversions as
``linalg.generic`` ops (tagged ``mx.kernel = "unpack_codes"`` /
``"pack_codes"``), so every lowering, schedule and pass after it sees the
same logical tensors.  ``mx-matmul-kernels`` reads through an
``unpack_codes`` generic feeding a matmul and loads the packed bytes
directly (unpacking in registers); other consumers use the unpacked
buffer.

For ``L`` packed bytes per row holding ``G`` groups of ``c`` codes in ``n``
bytes (FP4: c = 2, n = 1; FP6: c = 4, n = 3), both generics run over
``(..., G, j)``: the bytes of group ``g`` are combined into a 32-bit word
``w = b0 | b1 << 8 | b2 << 16`` and code ``j`` is ``(w >> bits * j) & mask``
(unpack); byte ``j`` of a group is ``(w >> 8 j) & 0xff`` of the word built
from its codes (pack).
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import tensor

from mlir_mx.dialect.types import MXTensorType
from mlir_mx.ir_utils import KernelTag, tag_kernel
from mlir_mx.kernels.common.builder import ArithBuilder
from mlir_mx.numerics import element_format, packing_group
from mlir_mx.passes.mx_to_linalg import helpers as h

__all__ = ["STORAGES", "pack_codes", "unpack_codes"]

#: Values of the ``subbyte-storage`` option of ``mx-to-linalg``.
STORAGES = ("packed", "unpacked")


def _int(bits: int) -> ir.Type:
    return ir.IntegerType.get_signless(bits)


def _collapse_last(x: ir.Value, shape: list[int], element: ir.Type) -> ir.Value:
    """``tensor.collapse_shape`` merging the last two dims of ``x`` into one."""
    rank = len(shape) - 1
    i64 = _int(64)
    groups = [[i] for i in range(rank - 1)] + [[rank - 1, rank]]
    attr = ir.ArrayAttr.get(
        [ir.ArrayAttr.get([ir.IntegerAttr.get(i64, k) for k in g]) for g in groups]
    )
    out = ir.RankedTensorType.get(shape[:-2] + [shape[-2] * shape[-1]], element)
    return tensor.CollapseShapeOp(out, x, attr).result


def _grouped(x: ir.Value, per_group: int) -> ir.Value:
    """``x`` with its last axis split into (groups, per_group) (a view)."""
    return h.expand_axis(x, ir.RankedTensorType(x.type).rank - 1, per_group)


def _lane_maps(rank: int, lanes: int) -> list[ir.AffineMap]:
    """``(d0, .., d_rank) -> (d0, .., d_{rank-1}, j)`` for each lane ``j``: the
    ``j``-th element of a group, read from a loop nest whose last loop runs
    over the other side's group."""
    dims = [ir.AffineDimExpr.get(d) for d in range(rank)]
    return [
        ir.AffineMap.get(rank + 1, 0, dims + [ir.AffineConstantExpr.get(j)]) for j in range(lanes)
    ]


def _word(parts: list[ir.Value], width: int) -> ir.Value:
    """``parts[0] | parts[1] << width | ...`` as an i32 (parts are ``width``-bit integers)."""
    b = ArithBuilder()
    word = None
    for j, p in enumerate(parts):
        v = b.extui(p, b.i32)
        if j:
            v = b.shli(v, b.const(width * j, b.i32))
        word = v if word is None else b.ori(word, v)
    return word


def _lane_shift(loop: int, width: int) -> ir.Value:
    """``linalg.index loop * width`` as an i32."""
    b = ArithBuilder()
    idx = h.linalg_dialect().IndexOp(ir.IntegerAttr.get(_int(64), loop)).result
    return b.muli(b.index_cast(idx, b.i32), b.const(width, b.i32))


def unpack_codes(packed: ir.Value, t: MXTensorType) -> ir.Value:
    """The ``tensor<shape x element>`` codes of the packed bytes ``packed``."""
    fmt = element_format(t.element_type)
    codes, nbytes = packing_group(fmt)
    elem = ir.Type.parse(fmt.name)
    shape = list(t.shape)
    rank = len(shape)
    groups = shape[-1] // codes
    grouped = _grouped(packed, nbytes)  # (..., G, nbytes) i8
    out = h.empty(shape[:-1] + [groups, codes], elem)

    def body(*args):
        word = _word(list(args[:nbytes]), 8)
        b = ArithBuilder()
        code = b.trunci(b.shrui(word, _lane_shift(rank, fmt.bits)), _int(fmt.bits))
        return [b.bitcast(code, elem)]

    maps = _lane_maps(rank, nbytes) + [h.identity_map(rank + 1)]
    (res,) = h.generic([grouped] * nbytes, [out], maps, [h.PARALLEL] * (rank + 1), body)
    tag_kernel(res, KernelTag.UNPACK_CODES)
    return _collapse_last(res, shape[:-1] + [groups, codes], elem)


def pack_codes(codes_value: ir.Value, t: MXTensorType) -> ir.Value:
    """The packed ``tensor<... x L x i8>`` bytes of the codes ``codes_value``."""
    fmt = element_format(t.element_type)
    codes, nbytes = packing_group(fmt)
    shape = list(t.shape)
    rank = len(shape)
    groups = shape[-1] // codes
    grouped = _grouped(codes_value, codes)  # (..., G, codes) element
    out = h.empty(shape[:-1] + [groups, nbytes], h.i8())

    def body(*args):
        b = ArithBuilder()
        word = _word([b.bitcast(a, _int(fmt.bits)) for a in args[:codes]], fmt.bits)
        return [b.trunci(b.shrui(word, _lane_shift(rank, 8)), b.i8)]

    maps = _lane_maps(rank, codes) + [h.identity_map(rank + 1)]
    (res,) = h.generic([grouped] * codes, [out], maps, [h.PARALLEL] * (rank + 1), body)
    tag_kernel(res, KernelTag.PACK_CODES)
    return _collapse_last(res, shape[:-1] + [groups, nbytes], h.i8())

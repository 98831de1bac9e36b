"""The dequantize kernel: MX codes and E8M0 scales -> f32.

What ``mx.dequantize_block`` computes (``f32(value * 2^(code - 127))``, one
rounding; NaN for scale code 255; ``docs/numerics.md``), with the widening of
the matmul kernels (:mod:`mlir_mx.kernels.common.widen`: the VBMI byte tables, the
f16 path, FP4's ``vpermps``, E8M0 decoding; packed FP4/FP6 unpacked in
registers).  A decoder yields the exact element values; the kernel
multiplies them by the scale, so the only rounding is that of
``value * scale``, as in the oracle.  Layouts and work split: :mod:`mlir_mx.kernels.convert.emitter`.
"""

from __future__ import annotations

from mlir import ir

from mlir_mx.kernels.common.builder import KernelBuilder
from mlir_mx.kernels.common.problem import CodeRows
from mlir_mx.kernels.common.widen import LANES, decode_scales
from mlir_mx.kernels.convert.emitter import ConvertEmitter, ConvertSpec
from mlir_mx.kernels.convert.nvfp4 import e4m3_value

__all__ = ["Dequantize"]


class Dequantize(ConvertEmitter):
    """``codes``, ``scales`` -> ``out`` (f32; :meth:`ConvertSpec.arg_types`)."""

    def __init__(self, kb: KernelBuilder, spec: ConvertSpec, codes, scales, out):
        super().__init__(kb, spec)
        self.codes = CodeRows(kb, codes, spec.element, spec.packed)
        self.dec = self.codes.dec
        self.scales, self.out = scales, out

    def values(self, row, col, n: int, valid=None) -> list[ir.Value]:
        """The exact f32 values of ``n`` codes of ``row`` from ``col`` on."""
        kb, dec = self.kb, self.dec
        pairs = self.spec.packed and dec.pairs
        if pairs and valid is None and n % (2 * LANES) == 0:
            # Packed FP4: even codes from the low nibbles, odd from the high.
            raw = self.codes.raw(row, col, n // 2)
            vals = dec.in_order(kb, dec.decode_pairs(kb, raw))
        else:
            vals = dec.decode(kb, self.codes.load(row, col, n, valid))
        return vals

    def decode(self, codes: ir.Value) -> ir.Value:
        """Block factors of scale codes (``vector<16 x i8>``): E8M0 values, or
        NVFP4's ``f32(e4m3 value / g)``."""
        kb = self.kb
        if not self.spec.global_scale:
            return decode_scales(kb, codes)
        value = e4m3_value(kb, kb.extui(codes, kb.vec(LANES, kb.i32)))
        return kb.fdiv(value, kb.broadcast(self.global_scale, LANES))

    def scale_lanes(self, row, col, valid=None) -> ir.Value:
        """16 decoded scales (block factors) from ``scales[row, col]`` on."""
        kb = self.kb
        return self.decode(kb.load_lanes(self.scales, [row, col], LANES, valid))

    # -- rows ------------------------------------------------------------------------

    def row_sizes(self):
        """(rows, blocks per row) for ``rows``, (block rows, columns) for
        ``columns``: the scales' shape, both."""
        return self.kb.dim(self.scales, 0), self.kb.dim(self.scales, 1)

    column_sizes = row_sizes

    def block(self, r, j) -> None:
        """One block of a row (block size a multiple of 16)."""
        kb, bs = self.kb, self.bs
        code = kb.load(self.scales, [r, j])
        s = self.decode(kb.broadcast(code, LANES))
        e0, width = kb.mul(j, bs), self.width

        def run(col):
            for v, val in enumerate(self.values(r, col, width)):
                kb.vstore(kb.fmul(val, s), self.out, [r, kb.add(col, LANES * v)])

        if width == bs:
            run(e0)
        else:
            with kb.loop(0, bs, width) as c:
                run(kb.add(e0, c.iv))

    def segment_scales(self, r, js, je, scratch) -> None:
        """Any block size: the scales of blocks ``[js, je)`` decoded into ``scratch``."""
        kb = self.kb
        with kb.loop(js, je, LANES) as jj:
            valid = kb.min(kb.sub(je, jj.iv), LANES)
            s = self.scale_lanes(r, jj.iv, valid)
            kb.store_lanes(s, scratch, [kb.sub(jj.iv, js)], valid)

    def element_lanes(self, r, e, factor, valid) -> None:
        (val,) = self.values(r, e, LANES, valid)
        self.kb.store_lanes(self.kb.fmul(val, factor), self.out, [r, e], valid)

    # -- columns -------------------------------------------------------------------

    def tile(self, g, q, nv: int, valid) -> None:
        """Block row ``g`` (``B`` code rows) at columns ``q .. q + 16 nv``."""
        kb, bs = self.kb, self.bs
        cols = [kb.add(q, LANES * v) for v in range(nv)]
        svals = [self.scale_lanes(g, c, valid) for c in cols]
        row0 = kb.mul(g, bs)
        with kb.loop(0, bs, 1) as i:
            row = kb.add(row0, i.iv)
            vals = self.values(row, q, LANES * nv, valid)
            for val, s, c in zip(vals, svals, cols, strict=True):
                kb.store_lanes(kb.fmul(val, s), self.out, [row, c], valid)

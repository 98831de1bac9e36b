"""The dequantize kernel: MX codes and E8M0 scales -> f32.

What ``mx.dequantize_block`` computes (``f32(value * 2^(code - 127))``, one
rounding; NaN for scale code 255; ``docs/numerics.md``), with the widening of
the matmul kernels (:mod:`mlir_mx.kernels.widen`: the VBMI byte tables, the
f16 path, FP4's ``vpermps``, E8M0 decoding; packed FP4/FP6 unpacked in
registers).  A decoder yields the exact element values; the kernel
multiplies them by the scale, so the only rounding is that of
``value * scale``, as in the oracle.  Layouts and work split: :mod:`mlir_mx.kernels.convert`.
"""

from __future__ import annotations

import math

from mlir import ir

from mlir_mx.kernels.builder import KernelBuilder
from mlir_mx.kernels.convert import (
    COLUMN_CHUNK,
    SEGMENT_BLOCKS,
    ConvertSpec,
    parallel_items,
    split_items,
)
from mlir_mx.kernels.problem import CodeRows
from mlir_mx.kernels.stream import interleave_pairs
from mlir_mx.kernels.widen import LANES, decode_scales

__all__ = ["emit_dequantize"]


def emit_dequantize(kb: KernelBuilder, spec: ConvertSpec, codes, scales, out) -> None:
    """Emit the kernel of ``spec`` at the insertion point (``codes``, ``scales``,
    ``out``: the memrefs of :meth:`ConvertSpec.arg_types`)."""
    d = _Dequantize(kb, spec, codes, scales, out)
    if spec.layout == "rows":
        d.rows()
    else:
        d.columns()


class _Dequantize:
    def __init__(self, kb: KernelBuilder, spec: ConvertSpec, codes, scales, out):
        self.kb, self.spec = kb, spec
        self.codes = CodeRows(kb, codes, spec.element, spec.packed)
        self.dec = self.codes.dec
        self.scales, self.out = scales, out
        self.bs = spec.block
        self.v16 = kb.vec(LANES, kb.f32)

    def values(self, row, col, n: int, valid=None) -> list[ir.Value]:
        """The exact f32 values of ``n`` codes of ``row`` from ``col`` on."""
        kb, dec = self.kb, self.dec
        pairs = self.spec.packed and dec.values16
        if pairs and valid is None and n % (2 * LANES) == 0:
            # Packed FP4: even codes from the low nibbles, odd from the high.
            raw = self.codes.raw(row, col, n // 2)
            vals = interleave_pairs(kb, dec.decode_pairs(kb, raw))
        else:
            vals = dec.decode(kb, self.codes.load(row, col, n, valid))
        return vals

    def scale_lanes(self, row, col, valid=None) -> ir.Value:
        """16 decoded scales from ``scales[row, col]`` on."""
        kb = self.kb
        return decode_scales(kb, kb.load_lanes(self.scales, [row, col], LANES, valid))

    # -- rows ------------------------------------------------------------------------

    def rows(self) -> None:
        kb = self.kb
        p_rows, nb = kb.dim(self.scales, 0), kb.dim(self.scales, 1)
        per_row = kb.ceildivu(nb, SEGMENT_BLOCKS)
        generic = self.bs % LANES != 0

        def body(first, end):
            scratch = kb.alloc([SEGMENT_BLOCKS], kb.f32) if generic else None
            with kb.loop(first, end, 1) as w:
                r, k = split_items(kb, w.iv, per_row)
                js = kb.mul(k, SEGMENT_BLOCKS)
                je = kb.min(kb.add(js, SEGMENT_BLOCKS), nb)
                if generic:
                    self.segment_generic(r, js, je, scratch)
                else:
                    with kb.loop(js, je, 1) as j:
                        self.block(r, j.iv)
            if scratch is not None:
                kb.dealloc(scratch)

        parallel_items(kb, kb.mul(p_rows, per_row), self.spec.threads, body)

    def block(self, r, j) -> None:
        """One block of a row (block size a multiple of 16)."""
        kb, bs = self.kb, self.bs
        code = kb.load(self.scales, [r, j])
        s = decode_scales(kb, kb.broadcast(code, LANES))
        e0 = kb.mul(j, bs)
        width = bs if bs <= 64 else LANES * math.gcd(bs // LANES, 4)

        def run(col):
            for v, val in enumerate(self.values(r, col, width)):
                kb.vstore(kb.fmul(val, s), self.out, [r, kb.add(col, LANES * v)])

        if width == bs:
            run(e0)
        else:
            with kb.loop(0, bs, width) as c:
                run(kb.add(e0, c.iv))

    def segment_generic(self, r, js, je, scratch) -> None:
        """Blocks ``[js, je)`` of row ``r``, any block size: the scales decoded
        into ``scratch``, then the elements with their block's scale gathered."""
        kb, bs = self.kb, self.bs
        with kb.loop(js, je, LANES) as jj:
            valid = kb.min(kb.sub(je, jj.iv), LANES)
            s = self.scale_lanes(r, jj.iv, valid)
            kb.store_lanes(s, scratch, [kb.sub(jj.iv, js)], valid)
        start = kb.mul(js, bs)
        count = kb.mul(kb.sub(je, js), bs)
        full = kb.add(start, kb.mul(kb.divu(count, LANES), LANES))
        lanes = kb.const_array(list(range(LANES)), kb.vec(LANES, kb.i32))
        bsv = kb.const(bs, kb.vec(LANES, kb.i32))

        def elements(e, valid):
            rel = kb.index_cast(kb.sub(e, start), kb.i32)
            idx = kb.divu(kb.addi(kb.broadcast(rel, LANES), lanes), bsv)
            mask = kb.mask(LANES, LANES if valid is None else valid)
            s = kb.gather(scratch, [0], idx, mask, kb.const(0.0, self.v16))
            (val,) = self.values(r, e, LANES, valid)
            kb.store_lanes(kb.fmul(val, s), self.out, [r, e], valid)

        with kb.loop(start, full, LANES) as e:
            elements(e.iv, None)
        rest = kb.sub(kb.add(start, count), full)
        with kb.if_(kb.icmp("ugt", rest, 0)):
            elements(full, rest)

    # -- columns -------------------------------------------------------------------

    def columns(self) -> None:
        kb = self.kb
        rows, q = kb.dim(self.scales, 0), kb.dim(self.scales, 1)
        chunks = kb.ceildivu(q, COLUMN_CHUNK)

        def body(first, end):
            with kb.loop(first, end, 1) as w:
                g, c = split_items(kb, w.iv, chunks)
                q0 = kb.mul(c, COLUMN_CHUNK)
                q1 = kb.min(kb.add(q0, COLUMN_CHUNK), q)
                width = kb.sub(q1, q0)
                full4 = kb.add(q0, kb.mul(kb.divu(width, 4 * LANES), 4 * LANES))
                full1 = kb.add(q0, kb.mul(kb.divu(width, LANES), LANES))
                with kb.loop(q0, full4, 4 * LANES) as t:
                    self.tile(g, t.iv, 4, None)
                with kb.loop(full4, full1, LANES) as t:
                    self.tile(g, t.iv, 1, None)
                rest = kb.sub(q1, full1)
                with kb.if_(kb.icmp("ugt", rest, 0)):
                    self.tile(g, full1, 1, rest)

        parallel_items(kb, kb.mul(rows, chunks), self.spec.threads, body)

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

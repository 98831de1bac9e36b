"""The quantize kernel: f32 (f64, f16, bf16) -> MX codes and E8M0 scales.

What ``mx.quantize_block`` computes (its ``mx-to-linalg`` lowering: block
amax, E8M0 code, scaled and rounded elements; ``docs/numerics.md``), as one
pass over the input in vector registers (:mod:`mlir_mx.kernels.convert.encode`
holds the per-register numerics).  Layouts and work split:
:mod:`mlir_mx.kernels.convert.emitter`.

``rows`` with a block size that is a multiple of 16: each block is loaded
once, its amax is an integer ``umax`` of the magnitude bits reduced to a
scalar, and its codes are encoded and packed from the same registers
(blocks above 64 elements are read twice, 64 at a time, from L1).

``rows`` with any other block size: per segment of blocks, the scales
first (masked loads of each block), their ``2^-shared_exp`` in a small
scratch buffer, then the elements in 16-lane vectors that gather their
block's factor (``vector.gather``).

``columns``: a block is ``B`` rows of a column tile; the amax is a lane-wise
``umax`` down the rows (no reduction across lanes), so 16 or 64 blocks are
encoded at once; the tile is then read again from L1 and encoded.
"""

from __future__ import annotations

from mlir import ir

from mlir_mx.kernels.common.builder import KernelBuilder
from mlir_mx.kernels.common.codec import abs_bits, e8m0_code, e8m0_inverse
from mlir_mx.kernels.convert.emitter import ConvertEmitter, ConvertSpec, split_items
from mlir_mx.kernels.convert.encode import LANES, Encoder, pack
from mlir_mx.kernels.convert.nvfp4 import block_scale, scaled_codes_input
from mlir_mx.numerics.packing import packing_group

__all__ = ["Quantize"]


class Quantize(ConvertEmitter):
    """``x`` (f32, f64, f16 or bf16) -> ``codes``, ``scales`` (:meth:`ConvertSpec.arg_types`)."""

    def __init__(self, kb: KernelBuilder, spec: ConvertSpec, x, codes, scales):
        super().__init__(kb, spec)
        self.x, self.codes, self.scales = x, codes, scales
        self.fmt = spec.format
        self.enc = Encoder(self.fmt)
        self.group = packing_group(self.fmt) if spec.packed else (1, 1)
        self.nb = None  # columns: blocks per column of x
        self.pj = None  # columns: (p, j) of the block row being emitted

    # -- reading and writing ---------------------------------------------------------

    def load(self, idx: list, valid=None) -> ir.Value:
        """16 input elements from ``x[idx]`` on, as f32 (lanes past ``valid`` are
        0, or, for a strided input, copies of the last valid one)."""
        kb = self.kb
        if self.spec.contiguous:
            v = kb.load_lanes(self.x, idx, LANES, valid)
        else:
            *outer, last = idx
            lanes = []
            for lane in range(LANES):
                off = lane if valid is None else kb.min(lane, kb.sub(valid, 1))
                lanes.append(kb.load(self.x, outer + [kb.add(last, off)]))
            v = kb.from_elements(lanes)
        src = self.spec.source
        if src == "f32":
            return v
        if src == "f64":
            return kb.truncf(v, self.v16)  # RNE, overflow to +-Inf: numpy's astype
        return kb.extf(v, self.v16)  # f16 / bf16: exact

    def byte_col(self, col) -> ir.Value:
        """Byte offset of code column ``col`` (a packing group boundary)."""
        codes, nbytes = self.group
        if codes == 1:
            return col
        return self.kb.mul(self.kb.divu(col, codes), nbytes)

    def store_codes(self, vals: list[ir.Value], row, col, valid=None) -> None:
        """Encode and store the codes of scaled values ``vals`` (16 lanes each)
        at code ``(row, col)``; with ``valid``, only that many codes."""
        kb = self.kb
        data = pack(kb, self.fmt, [self.enc.codes(kb, v) for v in vals], self.spec.packed)
        bvalid = None
        if valid is not None:
            codes, nbytes = self.group
            bvalid = valid if codes == 1 else kb.mul(kb.divu(valid, codes), nbytes)
        kb.store_lanes(data, self.codes, [row, self.byte_col(col)], bvalid)

    def scale_code(self, m: ir.Value) -> tuple[ir.Value, ir.Value]:
        """(scale code i32, the block's multiplier ``2^-shared_exp``, or for
        NVFP4 its divisor ``f32(s / g)``) from the magnitude bits ``m``."""
        kb = self.kb
        if self.spec.global_scale:
            return block_scale(kb, m, self.global_scale)
        code = e8m0_code(kb, m, self.fmt.emax)
        return code, e8m0_inverse(kb, code)

    def scaled(self, v: ir.Value, factor: ir.Value) -> ir.Value:
        """The value to encode: ``v * 2^-shared_exp``, or NVFP4's ``v / f``
        (+0 for a zero or NaN quotient)."""
        if self.spec.global_scale:
            return scaled_codes_input(self.kb, v, factor)
        return self.kb.fmul(v, factor)

    def scale_vector(self, m: ir.Value, row, col, valid=None) -> ir.Value:
        """Scale codes of 16 blocks from their magnitude bits ``m``: stored at
        ``scales[row, col..]``; returns their factors (:meth:`scale_code`)."""
        kb = self.kb
        code, factor = self.scale_code(m)
        kb.store_lanes(kb.trunci(code, kb.vec(LANES, kb.i8)), self.scales, [row, col], valid)
        return factor

    def scale_scalar(self, m_vec: ir.Value, row, col) -> ir.Value:
        """Scale code of one block from lane-wise magnitude bits: stored at
        ``scales[row, col]``; returns its factor (f32 scalar, :meth:`scale_code`)."""
        kb = self.kb
        code, factor = self.scale_code(kb.reduce("maxui", m_vec))
        kb.store(kb.trunci(code, kb.i8), self.scales, [row, col])
        return factor

    # -- rows ------------------------------------------------------------------------

    def row_sizes(self):
        return self.kb.dim(self.x, 0), self.kb.divu(self.kb.dim(self.x, 1), self.bs)

    def block(self, r, j) -> None:
        """One block of a row (block size a multiple of 16)."""
        kb, bs, width = self.kb, self.bs, self.width
        e0 = kb.mul(j, bs)
        nv = width // LANES
        if width == bs:  # the whole block in registers
            xs = [self.load([r, kb.add(e0, LANES * v)]) for v in range(nv)]
            mult = kb.broadcast(self.scale_scalar(_umax_all(kb, xs), r, j), LANES)
            self.store_codes([self.scaled(v, mult) for v in xs], r, e0)
            return
        zero = kb.const(0, kb.vec(LANES, kb.i32))
        with kb.loop(0, bs, width, [zero]) as c:
            col = kb.add(e0, c.iv)
            xs = [self.load([r, kb.add(col, LANES * v)]) for v in range(nv)]
            c.yield_([kb.maxui(c.args[0], _umax_all(kb, xs))])
        mult = kb.broadcast(self.scale_scalar(c.results[0], r, j), LANES)
        with kb.loop(0, bs, width) as c:
            col = kb.add(e0, c.iv)
            xs = [self.load([r, kb.add(col, LANES * v)]) for v in range(nv)]
            self.store_codes([self.scaled(v, mult) for v in xs], r, col)

    def segment_blocks(self, r, js, je) -> None:
        """NVFP4: 16 blocks at a time (:meth:`nvfp4_blocks`: their scales in one
        vector), the rest one by one; other formats one by one."""
        if not self.spec.global_scale:
            super().segment_blocks(r, js, je)
            return
        kb = self.kb
        full = kb.add(js, kb.mul(kb.divu(kb.sub(je, js), LANES), LANES))
        with kb.loop(js, full, LANES) as j:
            self.nvfp4_blocks(r, j.iv)
        super().segment_blocks(r, full, je)

    def nvfp4_blocks(self, r, j0) -> None:
        """16 NVFP4 blocks of 16 from block ``j0`` of row ``r``: each block's
        amax reduced to a scalar, the 16 scales and factors computed in one
        vector (:func:`block_scale`: its divisions and rounding once per 16
        blocks), then each block's codes with its factor broadcast."""
        kb = self.kb
        e0 = kb.mul(j0, self.bs)
        xs = [self.load([r, kb.add(e0, LANES * b)]) for b in range(LANES)]
        amax_bits = kb.from_elements([kb.reduce("maxui", abs_bits(kb, v)) for v in xs])
        code, factor = block_scale(kb, amax_bits, self.global_scale)
        kb.store_lanes(kb.trunci(code, kb.vec(LANES, kb.i8)), self.scales, [r, j0])
        vals = [self.scaled(v, kb.shuffle(factor, factor, [b] * LANES)) for b, v in enumerate(xs)]
        self.store_codes(vals, r, e0)

    def segment_scales(self, r, js, je, scratch) -> None:
        """Any block size: the scales of blocks ``[js, je)`` (their codes stored,
        their ``2^-shared_exp`` into ``scratch``)."""
        kb, bs = self.kb, self.bs
        with kb.loop(js, je, 1) as j:
            e0 = kb.mul(j.iv, bs)
            m = kb.const(0, kb.vec(LANES, kb.i32))
            for t in range(0, bs, LANES):
                valid = None if t + LANES <= bs else kb.idx(bs - t)
                m = kb.maxui(m, abs_bits(kb, self.load([r, kb.add(e0, t)], valid)))
            kb.store(self.scale_scalar(m, r, j.iv), scratch, [kb.sub(j.iv, js)])

    def element_lanes(self, r, e, factor, valid) -> None:
        x = self.load([r, e], valid)
        self.store_codes([self.scaled(x, factor)], r, e, valid)

    # -- columns -------------------------------------------------------------------

    def column_sizes(self):
        kb = self.kb
        p_rows, n, q = (kb.dim(self.x, i) for i in range(3))
        self.nb = kb.divu(n, self.bs)
        return kb.mul(p_rows, self.nb), q

    def column_tiles(self, g, q0, q1) -> None:
        self.pj = split_items(self.kb, g, self.nb)  # x's (p, j) of block row g, once per item
        super().column_tiles(g, q0, q1)

    def tile(self, g, q, nv: int, valid) -> None:
        """Block row ``g``, blocks ``(p, j)`` of x, at columns ``q .. q + 16 nv``
        (``valid``: a tail)."""
        kb, bs = self.kb, self.bs
        p, j = self.pj
        n0 = kb.mul(j, bs)
        cols = [kb.add(q, LANES * v) for v in range(nv)]
        zero = kb.const(0, kb.vec(LANES, kb.i32))
        with kb.loop(0, bs, 1, [zero] * nv) as i:
            n = kb.add(n0, i.iv)
            i.yield_(
                [
                    kb.maxui(m, abs_bits(kb, self.load([p, n, c], valid)))
                    for m, c in zip(i.args, cols, strict=True)
                ]
            )
        mults = [self.scale_vector(m, g, c, valid) for m, c in zip(i.results, cols, strict=True)]
        row0 = kb.mul(g, bs)
        with kb.loop(0, bs, 1) as i:
            n = kb.add(n0, i.iv)
            vals = [
                self.scaled(self.load([p, n, c], valid), m)
                for m, c in zip(mults, cols, strict=True)
            ]
            self.store_codes(vals, kb.add(row0, i.iv), q, valid)


def _umax_all(kb: KernelBuilder, xs: list[ir.Value]) -> ir.Value:
    """Lane-wise max of the magnitude bits of f32 vectors ``xs``."""
    m = abs_bits(kb, xs[0])
    for v in xs[1:]:
        m = kb.maxui(m, abs_bits(kb, v))
    return m

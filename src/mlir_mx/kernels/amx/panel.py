"""B's K panel for one column group of the guarded AMX matmul, widened in the
kernel from the MX codes (issue 51; :mod:`mlir_mx.kernels.amx.matmul`).

The weight stays as its codes and E8M0 scales (:func:`mlir_mx.linear.
amx_matmul.pack_weight`: the same bytes as the MXArray's packed codes, in
another order).  Per column group, every block's ``b * sb`` in bf16, in AMX's
pair layout, is written to a scratch panel (``nb x tn x 16 x 32`` bf16: 4 KiB
per block for 2 column tiles), which every row group then reads:

- ``codes``: ``memref<?x?x16xRxi8>`` (N/16, K/32, tile row, R bytes): tile
  row ``r`` of column tile ``t`` and block ``j`` holds the 32 codes of rows
  ``k = 32 j + 2 r + p`` and columns ``16 t + n`` in the pair order
  ``2 n + p``, packed as the format packs a row (``numerics.packing``: FP4 16
  bytes, FP6 24, 8-bit formats 32);
- ``scales``: ``memref<?x?xi8>`` (K/32, N padded to 16): E8M0 codes (or, for
  NVFP4, K/16 blocks of 8 tile rows and E4M3 codes: ``widen_panel``'s
  ``block`` and ``scale_type``).

Per tile row: the bytes unpacked and widened to their exact f32 values by
the project's decoders (:func:`mlir_mx.kernels.common.widen.decoder`: FP4 by
``vpermps``, FP6/FP8 by the f16 path, INT8 by ``sitofp``), times ``sb`` (each
column's scale twice: the pair layout), and the bf16 bits taken as the top
16 bits of the f32.  Exact where ``amx_prepare`` does not flag the block:
``b sb`` is then zero or a normal number with the format's few significand
bits, so the product is exact and its low 16 bits are zero (the driver
never runs a weight with a flagged block here, and writes scale 1 in their
place).  The bits equal ``AMXWeight.tiles``' (``tests/kernels/test_amx_matmul.py``).
"""

from __future__ import annotations

from mlir import ir

from mlir_mx.host import has_features
from mlir_mx.kernels.common.builder import KernelBuilder
from mlir_mx.kernels.common.widen import Decoder, decode_scales, decoder
from mlir_mx.numerics.formats import SCALE_TYPE, element_format

__all__ = ["code_bytes", "unscaled_row", "widen_panel"]

#: Columns of a C tile (a B tile has block_size / 2 rows: K pairs).
_COLS = 16


def code_bytes(element: str) -> int:
    """Bytes of one tile row's 32 codes (FP4 16, FP6 24, 8-bit formats 32)."""
    codes, nbytes = element_format(element).group
    return 32 // codes * nbytes


def _row(kb: KernelBuilder, dec: Decoder, raw: ir.Value, halves: list[ir.Value]) -> ir.Value:
    """One tile row: ``R`` code bytes -> 32 bf16 ``b sb`` in the pair order."""
    v16i, v16w = kb.vec(16, kb.i32), kb.vec(16, kb.i16)
    vals = dec.decode(kb, dec.unpack(kb, raw))
    words = [
        kb.trunci(kb.shrui(kb.bitcast(kb.fmul(v, s), v16i), kb.const(16, v16i)), v16w)
        for v, s in zip(vals, halves, strict=True)
    ]
    row = kb.shuffle(words[0], words[1], list(range(32)))
    return kb.vbitcast(row, 32, ir.BF16Type.get())


def _words(kb: KernelBuilder, dec: Decoder) -> ir.Value:
    """FP4: the bf16 bits of the 16 values (``vector<32xi16>``, repeated)."""
    import numpy as np

    bits = np.array(dec.table_values(), np.float32).view(np.uint32) >> 16
    return kb.const_array([int(b) - (1 << 16 if b >> 15 else 0) for b in bits] * 2,
                          kb.vec(32, kb.i16))  # fmt: skip


def _row_fp4(kb: KernelBuilder, table: ir.Value, raw: ir.Value, shift: ir.Value) -> ir.Value:
    """FP4 on the integer pipes: 16 bytes -> 32 words (dword ``i`` holds byte
    ``i``'s low nibble in its low word, the high one in its high word: the
    pair order), ``vpermw`` from the table of bf16 bits, then ``sb``'s
    exponent added to every nonzero word (``shift``: ``(e - 127) << 7`` per
    lane; exact: ``b sb`` is normal where ``b`` is not zero, the block not
    flagged; ±0 stay)."""
    v16i, v32w = kb.vec(16, kb.i32), kb.vec(32, kb.i16)
    x = kb.extui(raw, v16i)
    both = kb.ori(x, kb.shli(x, kb.const(12, v16i)))  # vpermw reads a word's low 5 bits
    words = kb.intrinsic(
        "llvm.x86.avx512.permvar.hi.512", v32w, [table, kb.vbitcast(both, 32, kb.i16)]
    )
    nonzero = kb.cmpi("ne", kb.andi(words, kb.const(0x7FFF, v32w)), kb.const(0, v32w))
    out = kb.select(nonzero, kb.addi(words, shift), words)
    return kb.vbitcast(out, 32, ir.BF16Type.get())


def unscaled_row(kb: KernelBuilder, element: str, codes, nt, j, r) -> ir.Value:
    """Tile row ``r`` of column tile ``nt`` and block ``j``: the 32 codes'
    exact f32 values (``vector<32xf32>``, the pair order), unscaled (the
    fallback chains' B where the scale is not a power of two: NVFP4's
    ``(b s) / s`` from the panel would cost a division per value)."""
    dec = decoder(element)
    raw = kb.vload(codes, [nt, j, r, 0], code_bytes(element))
    vals = dec.decode(kb, dec.unpack(kb, raw))
    return kb.shuffle(vals[0], vals[1], list(range(32)))


def widen_panel(
    kb: KernelBuilder, element: str, codes, scales, panel, nb, nt0, tn: int, lo=0, ahead=None,
    block: int = 32, scale_type: str = SCALE_TYPE, at=None,
) -> None:
    """``panel[j - lo, jn]`` = block ``j`` of column tile ``nt0 + jn`` as bf16
    ``b sb`` in the pair layout, for every block ``lo <= j < nb`` and ``jn <
    tn`` (the kernel widens one K chunk at a time; FP4 with AVX-512 and E8M0
    scales: :func:`_row_fp4`, 10 instructions a tile row against 16 for the
    f32 route).  ``ahead``: then the codes of blocks ``nb <= j < ahead`` (the
    next chunk's) prefetched into L2: a chunk's codes are a short run (2 KiB
    a column tile for FP4), too short for the hardware's stream prefetch.
    ``block``: the blocks' K (32, or NVFP4's 16: ``block / 2`` tile rows);
    ``scale_type``: E8M0, or E4M3 (NVFP4: ``sb = m 2^e`` is not a power of
    two, so the f32 route: ``b sb`` has at most 6 significant bits for E2M1,
    an exact f32 product and an exact bf16)."""
    dec = decoder(element)
    nbytes = code_bytes(element)
    words = dec.values16 and has_features("avx512bw") and scale_type == SCALE_TYPE
    table = _words(kb, dec) if words else None
    with kb.loop(lo, nb, 1) as blocks:
        j = blocks.iv
        jp = kb.sub(j, lo) if at is None else kb.add(kb.sub(j, lo), at)
        for jn in range(tn):
            nt = kb.add(nt0, jn)
            raw_sb = kb.vload(scales, [j, kb.mul(nt, _COLS)], _COLS)
            pairs = [[c for c in range(8 * h, 8 * h + 8) for _ in range(2)] for h in range(2)]
            if words:
                v16w = kb.vec(16, kb.i16)
                e = kb.shli(kb.subi(kb.extui(raw_sb, v16w), kb.const(127, v16w)), kb.const(7, v16w))
                shift = kb.shuffle(e, e, pairs[0] + pairs[1])
            else:
                sb = decode_scales(kb, raw_sb, scale_type)
                halves = [kb.shuffle(sb, sb, pairs[h]) for h in range(2)]
            if words:  # unrolled: constant offsets (10 instructions a row)
                for r in range(block // 2):
                    raw = kb.vload(codes, [nt, j, r, 0], nbytes)
                    kb.vstore(_row_fp4(kb, table, raw, shift), panel, [jp, jn, r, 0])
                continue
            with kb.loop(0, block // 2, 1) as rows:
                raw = kb.vload(codes, [nt, j, rows.iv, 0], nbytes)
                kb.vstore(_row(kb, dec, raw, halves), panel, [jp, jn, rows.iv, 0])
    if ahead is not None:
        with kb.loop(nb, ahead, 1) as blocks:
            for jn in range(tn):
                for r in range(0, block // 2, max(1, 64 // nbytes)):  # each 64-byte line
                    kb.prefetch(codes, [kb.add(nt0, jn), blocks.iv, r, 0], locality=2)

"""The dot kernels' tile parameters that depend on the CPU or on M, and the
row tiles of a column sub-tile (:func:`row_tiles`)."""

from __future__ import annotations

from collections.abc import Callable

from mlir_mx.kernels.common.builder import KernelBuilder

__all__ = [
    "DECODE_PREFETCH",
    "DECODE_STREAMS",
    "EXPAND_AHEAD",
    "HALF_ROWS",
    "HALF_ROWS_VNNI",
    "ONE_ROW_KCB",
    "RECORDS_AHEAD",
    "SCALES_AHEAD",
    "TAIL_ROWS",
    "row_tiles",
]

#: Rows of a register tile on 256-bit halves without VNNI (``vpmaddubsw`` /
#: ``vpmaddwd``).  llc -mcpu=haswell counts 240 stack accesses per block step
#: for the 6 x 2 int-prefill tile, 123 for 3 x 2 and 80 for 2 x 2; measured on
#: an AMD EPYC (Zen 3), 256 x 4096 x 4096 through ``Linear``, one new process
#: per run, 1 thread, the runs interleaved (``bench/results/avx2-zen3-targets-
#: 2026-12-02-afternoon.md``), 3 rows were faster than 2 all the same: FP4 x
#: FP4 in 6 of 6 pairs of runs (1.09-1.43x, median 1.17x), INT8 x INT8 (the
#: i16 unit) in 3 of 3 (1.22-1.48x), INT8 x FP4 and FP6 x FP6 even within the
#: noise, M = 8 unchanged (3.2 against 3.3 ms at best); the same bits.
HALF_ROWS = 3
#: With AVX-VNNI (``vpdpbusd`` ymm): 2 x 2 has 10 stack accesses per block step
#: against 52 for 3 x 2 (llc -mcpu=alderlake, where no add is reassociated).
#: Not measured on such a CPU.
HALF_ROWS_VNNI = 2

#: The heights of the tiles after a schedule's full tiles of ``mr`` rows (those
#: below ``mr``; :func:`row_tiles`): M = 16 on the 7-row tile runs 7 + 7
#: + 2 rows, where one more 7-row tile computed 5 rows past M.  A tile's cost
#: grows with its rows (``vdpbf16ps``, FP4 2880 x 2880, chunks of 8 blocks, on
#: Zen 5: 7.6, 10.8, 14.3, 20.5, 25.1, 29.3 and 31.0 ps a weight for 1 .. 7
#: rows), so the rest of up to 6 rows in tiles of 3, 2 and 1 costs what its
#: rows do, within a tile; tiles of every height would save little and
#: compile 6 tail microkernels instead of 3.
TAIL_ROWS = (3, 2, 1)

#: The expanding kernels prefetch ``Linear``'s B ahead of the chunk they
#: expand (the same bits):
#:
#: * ``EXPAND_AHEAD``: B as tiled codes (bf16 activations, :mod:`.codes`;
#:   chunks outermost, panels inner): each K group of panel ``j`` prefetches
#:   the same rows of panel ``j + 2``, and each block (``SCALES_AHEAD``) its
#:   scale line of that panel.  A chunk reads ``kcb`` runs side by side, each
#:   crossing a 4 KiB page every 4 panels, and the hardware's prefetchers alone
#:   left it waiting on memory wherever B was not in cache: 32 MXFP4 weights
#:   5760 x 2880 called in turn (a MoE's experts), Zen 5, 1 thread, M = 4 /
#:   16 / 24: 0.97 -> 0.68, 1.87 -> 1.48, 2.45 -> 2.02 ms (1.21-1.43x; the
#:   scale line is 0.1x of it; 1 panel ahead 1.17x, 3 the same as 2).  MXFP8
#:   1.50x, MXFP6 1.25x at M = 16; B in L3 (one 4096 x 4096 weight): M = 16
#:   1.14x, 64 1.09x, 256 1.02-1.03x; 2 threads alike.
#: * ``RECORDS_AHEAD``: B as VNNI records (integer and FP8 activations,
#:   :mod:`.expand`; one panel's records are one run down K): each record
#:   prefetches the record 6 on.  W4A8, the same 32 weights: M = 8 / 16 / 32
#:   1.06 -> 0.60, 1.35 -> 0.91, 1.95 -> 1.60 ms (1.2-1.8x; 2 records
#:   ahead 1.2-1.5x, 4-8 the same, 16 and 32 less); MXFP8 x i8 and x E4M3
#:   1.12-1.2x; in L3 1.01-1.06x.  x86 only: not measured on an aarch64
#:   core (``neon_scratch.py``: Apple's hardware prefetchers run ahead of
#:   LLVM's own ``prfm``), which keeps the records' expansion as it was.
#:
#: ``bench/results/zen5-s68-2026-12-07.md``; 0 turns either off.
EXPAND_AHEAD = 2
SCALES_AHEAD = True
RECORDS_AHEAD = 6

#: The expanding kernels' tile on 256-bit halves without VNNI where B can be
#: the multiply's memory operand (the A-offset mode, :func:`.kernel._a_offset`, and
#: the ``i16`` unit): one row of 32 columns over chunks of 8 blocks of B (16
#: KiB of i8 expanded, in L1).  Each ``vpmaddubsw`` / ``vpmaddwd`` then reads
#: B straight from the chunk and the tile needs 8 of the 16 ymm registers:
#: ``llc -mcpu=znver4`` counts 96 instructions per block step of 32
#: ``vpmaddubsw``, no stack access, where 3 rows x 16 columns (B loaded once
#: for 3 rows) spilled 52 times per 48 (i16: 186 per 64 ``vpmaddwd``, none,
#: against 634 with 220 stack accesses per 192 at 3 x 32).  Measured on an
#: AMD EPYC (Zen 4), AVX-512 masked: bench/results/avx2-a-offset-2026-12-03.md.
ONE_ROW_KCB = 8

#: Decode from records with AVX-512 on Intel CPUs (:func:`~mlir_mx.host.
#: software_prefetch`; elsewhere one run, no prefetch): each thread reads
#: ``DECODE_STREAMS`` panels side by side (a panel's records are one run down
#: K), each prefetched ``DECODE_PREFETCH`` records (8.5 KiB of FP4) ahead.  On
#: an Intel Xeon one run alone was bound by its L1 misses in flight; ``Linear``
#: 1 x 8192 x 8192 W4A8 went 4.93 -> 3.51 ms at 1 thread, 2.61 -> 1.86 at 2
#: (bench/results/decode-streams-2026-12-03.md).  On an AMD EPYC (Zen 4) the
#: prefetch made it 1.6-2.6x slower (bench/results/decode-prefetch-amd-2026-12-03.md).
DECODE_STREAMS = 2
DECODE_PREFETCH = 8


def row_tiles(kb: KernelBuilder, pa, mr: int, tails: tuple, body: Callable, m=None) -> None:
    """``body(m0, rows)`` for each register tile of rows ``m0 .. m0 + rows``
    of A (``pa``: :mod:`.prep`'s prepared A): tiles of ``mr`` rows; where M
    may not be a multiple of ``mr`` (``tails``, descending and ending in 1:
    :data:`TAIL_ROWS`), those up to the last full one, then the rest in
    tiles of the ``tails`` heights below ``mr``, largest first, so that
    every tile's rows are rows of A (none computed past M, no row guarded).
    Without ``tails`` (empty): ``pa.mp / mr`` full tiles.  ``m``: M where
    the kernel knows it (``Problem.m``): only the tiles it runs are
    emitted (M = 61 on 7 rows: the 7-row loop, one 3-row and one 2-row
    tile), not every tail height's microkernel."""
    if not tails:
        with kb.loop(0, pa.mp, mr) as g:
            body(g.iv, mr)
        return
    if m is not None:
        start = 0
        for h in (mr, *[h for h in tails if h < mr]):
            end = start + (m - start) // h * h
            if end > start:
                with kb.loop(start, end, h) as g:
                    body(g.iv, h)
            start = end
        return
    m = pa.m
    start = kb.mul(kb.divu(m, mr), mr)
    with kb.loop(0, start, mr) as g:
        body(g.iv, mr)
    for h in [h for h in tails if h < mr]:
        end = kb.add(start, kb.mul(kb.divu(kb.sub(m, start), h), h)) if h > 1 else m
        with kb.loop(start, end, h) as g:
            body(g.iv, h)
        start = end

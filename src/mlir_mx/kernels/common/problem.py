"""What a generated matmul kernel computes, and the parts every schedule shares.

A kernel computes ``C += A x B`` with ``A`` an MX matrix (M x K, blocked along
K) and ``B`` either an MX matrix (K x N, blocked along K: ``axis = 0``) or an
f32 matrix, in the **blocked order** that defines ``mx.block_matmul``'s
numerics in this project (``docs/numerics.md``)::

    for each (m, n):  c = C[m, n]
      for kb in 0 .. K/B:                       # blocks, in order
        p = 0
        for kk in 0 .. B:                       # elements of the block, in order
          p = fma(a[m, kb*B+kk], b[kb*B+kk, n], p)
        t = p * sb[kb, n]                       # B's scale: one f32 multiply
        c = fma(t, sa[m, kb], c)                # then A's, fused with the sum
      C[m, n] = c

with ``a``/``b`` the exact f32 element values and ``sa``/``sb`` the E8M0
scales as f32 (for an f32 ``B`` there is no ``sb``: ``c = fma(p, sa, c)``).
The two scales are applied one after the other, never multiplied together:
``sa * sb`` can overflow (or underflow) where the block's contribution is
finite (``docs/numerics.md``).  Every schedule, tile size and thread count
performs exactly these f32 operations on each output element, so they all
give bit-identical results; the ``mx-to-linalg`` blocked lowering spells the
same operations as two ``linalg.generic`` ops.

:func:`prepare_a` widens ``A`` once per call into an f32 buffer (the exact
element values, no factor: an f32 ``A`` is copied as it is) and decodes
``A``'s scales.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from mlir import ir

from mlir_mx.kernels.common.builder import KernelBuilder
from mlir_mx.kernels.common.codec import BF16, round_bf16
from mlir_mx.kernels.common.widen import LANES, decode_scales, decoder
from mlir_mx.numerics.formats import SCALE_TYPE, ElementFormat
from mlir_mx.numerics.packing import packing_group

__all__ = [
    "Problem",
    "Operands",
    "CodeRows",
    "TILE_COLUMNS",
    "tile_b_codes",
    "KernelState",
    "MIN_TASK_MACS",
    "prepare_a",
    "task_count",
    "vector_loop",
    "PreparedA",
    "BF16",
]


#: Columns of one tile of a tiled B (:attr:`Problem.b_tiled`): the decode
#: and small schedules' column tile (4 vectors of 16 lanes) and the prefill
#: schedule's B packing width.
TILE_COLUMNS = 64


def tile_b_codes(
    codes: np.ndarray, block: int, element: str | ElementFormat, packed: bool
) -> np.ndarray:
    """B's code bytes (K, N) (packed rows when ``packed``) in the tiled layout
    of :attr:`Problem.b_tiled`: row ``(k // block) * (N / 64) + n // 64`` holds
    rows ``k`` of the block, 64 columns each, one after the other."""
    k, width = codes.shape
    codes_per, nbytes = packing_group(element) if packed else (1, 1)
    tile_bytes = TILE_COLUMNS // codes_per * nbytes
    tiles = width // tile_bytes
    t = np.ascontiguousarray(codes).reshape(k // block, block, tiles, tile_bytes)
    return np.ascontiguousarray(t.transpose(0, 2, 1, 3)).reshape(k // block * tiles, block * tile_bytes)


@dataclass(frozen=True)
class Problem:
    """Static description of one matmul: shapes (M may be dynamic), formats."""

    m: int | None  # None: dynamic
    n: int
    k: int
    block: int
    a_element: str | None  # None: an f32 A (the library's activations; no scales)
    b_element: str | None  # None: an f32 B
    #: A's / B's FP4/FP6 codes packed along each row
    #: (``mlir_mx.numerics.packing``) instead of one code per byte; each
    #: operand on its own (no effect on 8-bit formats).
    a_packed: bool = False
    b_packed: bool = False
    #: B's codes in tiles of :data:`TILE_COLUMNS` columns (:func:`tile_b_codes`):
    #: the rows of one block of one tile are contiguous, so a decode kernel
    #: reads B as one sequential stream.  Needs ``n % TILE_COLUMNS == 0``.
    b_tiled: bool = False
    #: An f32 A quantized per call, inside the kernel, to this MX element
    #: format (``mlir_mx.oracle.quantize`` semantics; dot kernels only), or
    #: rounded to bf16 (:data:`BF16`: every kernel; ``sa = 1``).
    a_quant: str | None = None
    #: B stored as the dot kernels' VNNI records of this dot kind ("i8",
    #: "i16", "bf16"; :mod:`mlir_mx.kernels.dot.units`), scales included.
    b_dot: str | None = None
    #: The type of B's block scales: E8M0 (OCP MX), or E4M3 (NVFP4: the
    #: kernels decode them exactly; the global scale is ``b_global``'s, or
    #: ``mlir_mx.Linear`` divides by it once per output, ``docs/numerics.md``).
    b_scale_type: str = SCALE_TYPE
    #: NVFP4 on the dot records: the kernel takes B's global scale ``g`` as an
    #: operand (a ``(1,)`` f32 buffer before C) and stores ``f32(c / g)`` at
    #: each output's last store (``kernels.dot.store``): the same division.
    b_global: bool = False
    #: B's E8M0 scales (records, ``b_dot``) are all at most ``2^105`` or NaN,
    #: so the expanding dot kernels may take the lifted block step
    #: (``kernels.dot.biased``; E4M3 scales always may): ``mlir_mx.Linear``
    #: reads its records' scales once.
    b_lift: bool = False

    def __post_init__(self) -> None:
        if self.b_tiled and (not self.b_is_mx or self.n % TILE_COLUMNS):
            raise ValueError(
                f"b_tiled needs an MX B with N a multiple of {TILE_COLUMNS}, got N = {self.n}"
            )
        if self.a_quant is not None and self.a_is_mx:
            raise ValueError("a_quant quantizes an f32 A: a_element must be None")
        if self.b_dot is not None and (not self.b_is_mx or self.b_tiled):
            raise ValueError("b_dot needs an MX B that is not b_tiled")
        if self.b_scale_type != SCALE_TYPE and not self.b_is_mx:
            raise ValueError("b_scale_type is B's scale type: it needs an MX B")
        if self.b_global and (self.b_dot is None or self.b_scale_type == SCALE_TYPE):
            raise ValueError("b_global needs B as dot records with E4M3 scales (NVFP4)")
        if self.b_lift and self.b_dot is None:
            raise ValueError("b_lift is about B's dot records: it needs b_dot")

    @property
    def kblocks(self) -> int:
        return self.k // self.block

    @property
    def a_is_mx(self) -> bool:
        return self.a_element is not None

    @property
    def b_is_mx(self) -> bool:
        return self.b_element is not None

    def b_codes_shape(self) -> tuple[int, int]:
        """Shape of the B codes buffer (bytes for packed codes or records)."""
        if self.b_dot is not None:
            from mlir_mx.kernels.dot.units import KINDS, RecordLayout

            return RecordLayout(KINDS[self.b_dot], self.b_element, self.block).shape(self.k, self.n)
        cols = code_columns(self.b_element, self.n, self.b_packed)
        if not self.b_tiled:
            return (self.k, cols)
        tile_bytes = code_columns(self.b_element, TILE_COLUMNS, self.b_packed)
        return (self.kblocks * (self.n // TILE_COLUMNS), self.block * tile_bytes)


def code_columns(elem: str, columns: int, packed: bool) -> int:
    """Columns of the codes memref holding ``columns`` codes of ``elem``
    (bytes of whole packing groups when ``packed``)."""
    if not packed:
        return columns
    codes, nbytes = packing_group(elem)
    return columns // codes * nbytes


@dataclass(frozen=True)
class Operands:
    """The kernel's buffers: codes and scales of A (and B when MX), and C."""

    a: ir.Value
    sa: ir.Value | None  # None for an f32 A
    b: ir.Value
    sb: ir.Value | None
    c: ir.Value
    g: ir.Value | None = None  # B's global scale, (1,) f32 (Problem.b_global)


class CodeRows:
    """Reads runs of codes from a codes buffer, one code per byte out (packed
    FP4/FP6 rows are unpacked in registers).  The buffer is row-major, or
    tiled (B's layout under :attr:`Problem.b_tiled`: ``tiled = (rows per
    block, tiles per row)``); a run never crosses a tile of
    :data:`TILE_COLUMNS` columns."""

    def __init__(
        self,
        kb: KernelBuilder,
        mem: ir.Value,
        element: str,
        packed: bool,
        tiled: tuple[int, int] | None = None,
    ):
        self.kb = kb
        self.mem = kb.as_bytes(mem)
        self.dec = decoder(element)
        self.group = self.dec.group if packed else (1, 1)
        self.tiled = tiled

    def byte_column(self, col) -> ir.Value:
        """The byte offset in a row of code column ``col`` (a group boundary)."""
        codes, nbytes = self.group
        if codes == 1:
            return col
        return self.kb.mul(self.kb.divu(col, codes), nbytes)

    def address(self, row, col, split=None) -> list[ir.Value]:
        """Indices into the buffer of code ``(row, col)`` (a group boundary).

        ``split``: ``(blk, kk)`` with ``row = blk * bs + kk`` (``kk < bs``),
        which a tiled buffer's address then takes as they are instead of
        dividing ``row`` by the block size: in a loop over ``kk`` the address
        becomes one increment (the same address).
        """
        if self.tiled is None:
            return [row, self.byte_column(col)]
        kb, (bs, tiles) = self.kb, self.tiled
        codes, nbytes = self.group
        tile_bytes = TILE_COLUMNS // codes * nbytes
        blk, kk = split if split is not None else (kb.divu(row, bs), kb.remu(row, bs))
        tiles_row = kb.add(kb.mul(blk, tiles), kb.divu(col, TILE_COLUMNS))
        in_tile = self.byte_column(kb.remu(col, TILE_COLUMNS))
        return [tiles_row, kb.add(kb.mul(kk, tile_bytes), in_tile)]

    def prefetch_ahead(self, col, split, rows: int, ahead: int) -> None:
        """Prefetch ``rows`` rows of a tiled buffer from ``split`` (``(blk,
        kk)``) in the tile ``ahead`` tiles on: the same block's rows of the
        panel ``ahead`` panels to the right, or past the last panel the next
        block's first ones (past the buffer's end: its last tile row)."""
        kb = self.kb
        codes, nbytes = self.group
        tile_row, at = self.address(None, col, split)
        last = kb.sub(kb.dim(self.mem, 0), 1)
        ahead_row = kb.min(kb.add(tile_row, ahead), last)
        for off in range(0, rows * (TILE_COLUMNS // codes * nbytes), 64):
            kb.prefetch(self.mem, [ahead_row, kb.add(at, off)])

    def raw(self, row, col, nbytes: int, split=None) -> ir.Value:
        """``nbytes`` bytes of the buffer from code ``(row, col)`` on (no mask)."""
        return self.kb.vload(self.mem, self.address(row, col, split), nbytes)

    def load(self, row, col, n: int, valid=None, split=None) -> ir.Value:
        """``n`` codes of ``row`` from column ``col`` (codes past ``valid`` read 0)."""
        kb = self.kb
        codes, nbytes = self.group
        address = self.address(row, col, split)
        if codes == 1:
            return kb.load_lanes(self.mem, address, n, valid)
        bvalid = None if valid is None else kb.mul(kb.ceildivu(valid, codes), nbytes)
        raw = kb.load_lanes(self.mem, address, n // codes * nbytes, bvalid)
        return self.dec.unpack(kb, raw)


@dataclass(frozen=True)
class PreparedA:
    af: ir.Value  # (Mp, K) f32: A's element values; rows >= M are 0
    saf: ir.Value  # (Mp, K/B) f32 decoded scales; rows >= M are 0
    m: ir.Value  # M (index)
    mp: ir.Value  # M rounded up to the row-group size


def vector_loop(kb: KernelBuilder, total: int, width: int, body: Callable) -> None:
    """Call ``body(offset, valid)`` over ``[0, total)`` in vectors of ``width``.

    Full vectors run in an ``scf.for`` with ``valid = None``; a static tail
    (``total % width`` lanes) gets one call with ``valid`` its lane count.
    """
    full = total - total % width
    if full:
        with kb.loop(0, full, width) as lp:
            body(lp.iv, None)
    if total % width:
        body(kb.idx(full), kb.idx(total % width))


#: The least work (multiply-adds, ``M N K``) worth a task of its own: about
#: 0.1 ms of one core's f32-kernel work, several times what starting a task of
#: upstream's async runtime and waiting for it costs (0.02-0.2 ms measured: a
#: 5 x 96 x 40 call took 0.04 ms on 1 thread and 0.23 ms on 2 on an AMD EPYC).
MIN_TASK_MACS = 1 << 21


def task_count(
    kb: KernelBuilder, prob: Problem, m: ir.Value | None, threads: int
) -> int | ir.Value:
    """The tasks a call of ``prob`` starts: ``threads``, fewer where the work
    (``M N K``) gives a task less than :data:`MIN_TASK_MACS`, at least 1.

    An ``int`` for a static M, else an ``index`` value computed per call from
    ``m`` (a single task then runs inline: ``async-parallel-for``'s
    single-block path).  Tasks split columns, and every output element gets
    the same operations on any split, so the count changes speed, never bits.
    """
    if threads <= 1:
        return 1
    per_row = prob.n * prob.k
    if prob.m is not None:
        return max(1, min(threads, prob.m * per_row // MIN_TASK_MACS))
    worth = kb.divu(kb.mul(m, per_row), MIN_TASK_MACS)
    return kb.max(kb.min(worth, threads), 1)


def prepare_a(kb: KernelBuilder, prob: Problem, ops: Operands, group: int) -> PreparedA:
    """Widen A's codes and decode A's scales into f32 buffers (rows padded to ``group``).

    An f32 A is copied as it is (rounded to bf16 where ``a_quant`` is
    :data:`BF16`), with scales 1.
    """
    rows_a = CodeRows(kb, ops.a, prob.a_element, prob.a_packed) if prob.a_is_mx else None
    sa8 = kb.as_bytes(ops.sa) if prob.a_is_mx else None
    if prob.m is None:
        m = kb.dim(ops.a, 0)
        mp = kb.mul(kb.ceildivu(m, group), group)
        dyn = [mp]
        rows = -1
    else:
        m = kb.idx(prob.m)
        rows = -(-prob.m // group) * group
        mp = kb.idx(rows)
        dyn = []
    # Rows of af a multiple of 4 KiB apart would share one L1 set: the
    # microkernel reads mr rows at once, so pad the row by one cache line.
    ld = prob.k + (LANES if (prob.k * 4) % 4096 == 0 else 0)
    af = kb.alloc([rows, ld], kb.f32, dyn)
    saf = kb.alloc([rows, prob.kblocks], kb.f32, dyn)
    zero = kb.const(0.0, kb.vec(LANES, kb.f32))
    one = kb.const(1.0, kb.vec(LANES, kb.f32))

    with kb.loop(0, m, 1) as row:
        r = row.iv

        def widen(off, valid):
            if rows_a is None:
                v = kb.load_lanes(ops.a, [r, off], LANES, valid)
                v = round_bf16(kb, v) if prob.a_quant == BF16 else v
            else:
                (v,) = rows_a.dec.decode(kb, rows_a.load(r, off, LANES, valid))
            kb.store_lanes(v, af, [r, off], valid)

        def scales(off, valid):
            if sa8 is None:
                v = one
            else:
                v = decode_scales(kb, kb.load_lanes(sa8, [r, off], LANES, valid))
            kb.store_lanes(v, saf, [r, off], valid)

        vector_loop(kb, prob.k, LANES, widen)
        vector_loop(kb, prob.kblocks, LANES, scales)
    with kb.loop(m, mp, 1) as row:  # padding rows: zeros
        vector_loop(kb, prob.k, LANES, lambda off, v: kb.store_lanes(zero, af, [row.iv, off], v))
        vector_loop(
            kb, prob.kblocks, LANES, lambda off, v: kb.store_lanes(zero, saf, [row.iv, off], v)
        )
    return PreparedA(af, saf, m, mp)


class KernelState:
    """What every schedule reads: the problem, its buffers, A widened once,
    and B's codes/scales readers (``b`` is the f32 buffer for an f32 B)."""

    def __init__(self, kb: KernelBuilder, prob: Problem, ops: Operands, cfg, pa: PreparedA):
        self.kb, self.prob, self.ops, self.cfg, self.pa = kb, prob, ops, cfg, pa
        self.b = ops.b
        if prob.b_is_mx:
            tiled = (prob.block, prob.n // TILE_COLUMNS) if prob.b_tiled else None
            self.b = CodeRows(kb, ops.b, prob.b_element, prob.b_packed, tiled)
        self.sb = kb.as_bytes(ops.sb) if prob.b_is_mx else None
        self.dec = decoder(prob.b_element) if prob.b_is_mx else None

    def free(self) -> None:
        """Free A's widened buffers (after the kernel's loops)."""
        self.kb.dealloc(self.pa.af)
        self.kb.dealloc(self.pa.saf)

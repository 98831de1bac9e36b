"""The dot kernels' instructions on this CPU: 512-bit AVX-512 or 256-bit AVX2 halves.

The kernels (:mod:`.kernel`, :mod:`.codes`, :mod:`.sweep`) think in 16
lanes: a B vector is 64 bytes (16 columns x one K group), an accumulator 16
i32.  :class:`DotOps` turns one such dot step into instructions:

``avx512-vnni``  ``vpdpbusd`` / ``vpdpwssd`` zmm (AVX512-VNNI);
``avx512bw``     ``vpmaddubsw`` + ``vpmaddwd`` / ``vpmaddwd`` zmm;
``avx-vnni``     ``vpdpbusd`` / ``vpdpwssd`` ymm (AVX-VNNI, VEX encoded), on
                 each 256-bit half of the 16 lanes;
``avx2``         ``vpmaddubsw`` + ``vpmaddwd`` / ``vpmaddwd`` ymm, per half;
``neon-sdot``    aarch64 ``asimddp``: ``sdot`` on each 128-bit quarter (B signed:
                 FP4 through a signed ``tbl`` table, other B by an ``eor``);
``neon-usdot``   aarch64 ``i8mm``, B without an FP4 table: ``usdot`` (u8 x s8,
                 the records' bytes as ``vpdpbusd`` takes them);
``neon-smmla``   aarch64 ``i8mm``, the kernels that expand B's chunks: ``smmla``
                 (2 x 8 by 8 x 2, :mod:`.neon_mmla`) on the chunk stored signed
                 in its own layout.

The AVX-512 entries emit what they always did; the 256-bit ones split each
16-lane step into two 8-lane ones (``vector.extract_strided_slice``, the
instruction, a ``vector.shuffle`` concatenation that LLVM folds away along
an accumulator chain) and the FP4 table lookup into two ``vpshufb`` ymm.

**Saturation.** ``vpmaddubsw`` multiplies unsigned bytes by signed bytes and
adds each pair of products into an int16 *with saturation*; the VNNI
instructions and ``vpmaddwd`` cannot saturate for our operands.  The ``i8``
unit's operands are ``u = b + 128`` (B, the records' bytes) and ``s = a``
(A's integers ``value * 2^fa``); the accumulator starts at A's
compensation ``-128 * sum a`` (:mod:`.units`).  A pair sum lies in
``2 * max(u) * [min(s), max(s)]`` (:func:`~.units.pair_sum_bounds`), which
fits int16 when A is FP4 or FP6 E2M3 (``2 * 255 * 60 = 30600``).  With INT8
activations it does not (``2 * 140 * 128 = 35840`` against FP4), and there
the 256-bit path uses the **sign trick** instead: ``u = |a|`` (``vpsignb a,
a``: -128 gives the byte 0x80, i.e. 128 as unsigned) and ``s = b * sign(a)``
(``vpsignb``, B's signed value ``u ^ 0x80``), so each product ``|a| * b
sign(a) = a * b`` is exact and the accumulator starts at 0.  It needs ``b *
sign(a)`` to fit a signed byte: ``|b| <= 127``, so it serves B in FP4
(``|2b| <= 12``) or E2M3 (``|8b| <= 60``), and the pair sums stay within
``2 * 128 * 60 = 15360``.  INT8 x INT8 is the one narrow pair neither fits
(``b = -128`` with ``a < 0`` overflows ``b * sign(a)``, and ``2 * 128 * 128
= 32768`` is one above int16): :func:`~.units.dot_kind` gives it the
``i16`` unit (int16 pairs, ``vpmaddwd``, exact).  With AVX-VNNI every narrow
pair takes ``vpdpbusd`` (4 products summed in int32, no saturation).
Without VNNI, the pair sums of :attr:`DotOps.run` consecutive K groups add
up in int16 (``vpaddw``) before one ``vpmaddwd``, ``run`` times the bound
inside int16 (the sign trick's FP4 x INT8: 8 groups, a whole block of 32):
one multiply per step instead of two, on cores where both share a port.
The kernels that expand B's chunks (several row groups share them) use the
**A-offset** mode instead for the ``i8`` pairs with FP4 or E2M3 B
(:class:`DotOps`, ``a_offset``; ``docs/numerics.md``).
``tests/kernels/test_dot_kernels.py`` enumerates these bounds from the format
tables for every pair.
"""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir

from mlir_mx.host import has_features
from mlir_mx.kernels.common.builder import KernelBuilder
from mlir_mx.kernels.dot import neon_scratch, units
from mlir_mx.kernels.dot.neon_mmla import mmla_block, mmla_tile, store_chunk
from mlir_mx.kernels.dot.units import DotKind

__all__ = ["DotISA", "DotOps", "NEON_ROWS", "dot_isa", "mmla_block", "neon_tile", "routed"]


@dataclass(frozen=True)
class DotISA:
    """The instruction set of one dot kernel."""

    name: str  # avx512-vnni, avx512bw, avx-vnni, avx2, neon-sdot, neon-usdot
    wide: bool  # 512-bit registers (else 256-bit halves, or 128-bit NEON quarters)
    vnni: bool  # vpdpbusd / vpdpwssd (NEON: sdot / usdot, a fused dot-accumulate)
    sign: bool  # i8 with B signed (the sign trick; NEON sdot): no compensation
    neon: bool = False  # aarch64: sdot / usdot / tbl on 128-bit quarters
    mmla: bool = False  # aarch64 i8mm: smmla on the expanded chunk (neon_mmla.py)


def dot_isa(kind: DotKind, a_element: str, b_element: str, expand: bool = False) -> DotISA:
    """The instructions a kernel of ``kind`` for A x B uses on this CPU
    (:func:`~.units.dot_kind` chose ``kind`` from the same features).

    aarch64 (``asimddp``; no x86 CPU reports it): ``usdot`` (``i8mm``,
    ``u8 x s8`` like ``vpdpbusd``: the records' ``b + 128`` as they are, A's
    compensation) where B has no 16-entry table, else ``sdot`` (signed x
    signed: FP4 B through a signed ``tbl`` table, other B made signed by one
    ``eor`` with 0x80 per 16 bytes; no compensation): the fewer instructions.
    A kernel that expands B's chunks (``expand``) stores them signed
    (:attr:`DotOps.signed_scratch`), so its inner loop has neither the ``eor``
    nor A's compensation: ``smmla`` where the CPU has ``i8mm`` (the chunk in
    the smmla layout, :mod:`.neon_mmla`), else ``sdot``, for every B."""
    if has_features("asimddp"):
        if expand and has_features("i8mm"):
            return DotISA("neon-smmla", False, True, True, True, True)
        usdot = has_features("i8mm") and not units.value_table(b_element) and not expand
        return DotISA("neon-usdot" if usdot else "neon-sdot", False, True, not usdot, True)
    if (
        kind.name == "bf16"
        or has_features("avx512bw")
        or (kind.name == "i8" and has_features("avx512_vnni"))
    ):
        vnni = has_features("avx512_vnni")
        return DotISA("avx512-vnni" if vnni else "avx512bw", True, vnni, False)
    if has_features("avx_vnni"):
        return DotISA("avx-vnni", False, True, False)
    sign = kind.name == "i8" and units.maddubs_mode(a_element, b_element) == "sign"
    return DotISA("avx2", False, False, sign)


class DotOps:
    """Emits a dot kernel's instructions for one :class:`DotISA`.

    ``a_offset``: the pairs by the **A-offset** mode instead of the sign
    trick or B's offset (``u = a + 128``, A's words stored offset; ``s = b``,
    B's signed values; each int16 lane starts at ``-128 *`` its sum of B
    over a run of K groups, which the kernel computes once per expanded
    chunk): one ``vpmaddubsw`` per step, no ``vpsignb``, and B's bytes can
    be its memory operand.  ``a_offset`` is the run (0: off), from
    :func:`~.units.a_offset_run`: the lane adds that many groups with
    wrapping ``vpaddw`` and ends at its exact sum of products; the kernel
    passes it only in the dot kernels that expand B's chunks.

    ``expand``: the kernel expands B's chunks into a scratch (several row
    groups share them).  On NEON the scratch then holds B signed
    (:attr:`signed_scratch`, :meth:`store_block`): for ``sdot`` the ``eor``
    with 0x80 of a B without a signed table (INT8, FP6 E2M3) runs once per
    chunk, not once per B vector in the inner loop; for ``smmla`` every B's
    chunk is stored in the smmla layout."""

    def __init__(
        self, kind: DotKind, isa: DotISA, a_element: str, b_element: str, kb: KernelBuilder,
        a_offset: int = 0, expand: bool = False,
    ):  # fmt: skip
        self.kb, self.kind, self.isa = kb, kind, isa
        self.a_offset = a_offset
        self.kcb = 0  # blocks per chunk of the expanding kernels' scratch (scratch_shape)
        #: bf16: the pairs as two f32 FMAs each (:func:`routed`), not ``vdpbf16ps``.
        self.fma_form = False
        #: B's FP4 table gives ``b`` itself, not ``b + 128``: the sign trick's
        #: operand without an xor (every FP4 B vector comes through the table).
        self.signed_table = (isa.sign or a_offset) and units.value_table(b_element)
        #: The expanded chunks hold B's signed values ``b`` (NEON: the records'
        #: bytes turned, or FP4's table; smmla: in its layout, every B).
        self.signed_scratch = bool(
            expand and isa.neon and isa.sign and (isa.mmla or not self.signed_table)
        )
        #: K groups whose ``vpmaddubsw`` pair sums add up in int16 (``vpaddw``)
        #: before one ``vpmaddwd``: as many as keep the sum of their bounds
        #: (:func:`~.units.pair_sum_bounds`) inside int16 (1: every group).
        self.run = 1
        if a_offset:  # runs of K groups in int16 (wrapping; units.a_offset_run)
            self.run = a_offset
        elif kind.name == "i8" and not isa.wide and not isa.vnni:
            lo, hi = units.pair_sum_bounds(a_element, b_element, "sign" if isa.sign else "offset")
            self.run = max(r for r in (1, 2, 4, 8) if r * lo >= -(2**15) and r * hi < 2**15)

    def take_fma_form(self, on: bool) -> None:
        """:attr:`fma_form` on or off (:func:`routed`)."""
        self.fma_form = on

    def a_words(self, words, rows, blk, groups: int):
        """``(r, g) ->`` A's word of K group ``g`` of block ``blk`` for row
        ``rows[r]`` (``words``: :mod:`.prep`'s i32 words), as 16 lanes: loaded
        and broadcast per group; on NEON a lane of the row's ``groups`` words,
        loaded once per block (LLVM then emits the indexed ``sdot v.4s,
        b.16b, a.4b[i]``: no broadcast per group)."""
        kb, first = self.kb, self.kb.mul(blk, groups)
        if self.isa.neon and groups % 4 == 0:
            rw = [kb.vload(words, [m, first], groups) for m in rows]
            return lambda r, g: kb.shuffle(rw[r], rw[r], [g] * 16)
        return lambda r, g: kb.broadcast(kb.load(words, [rows[r], kb.add(first, g)]), 16)

    def scratch_bytes(self, b_bytes: ir.Value) -> ir.Value:
        """B's bytes as the expanding kernels store them in their scratch: the
        records' ``b + 128`` turned into ``b`` under :attr:`signed_scratch`
        (the ``eor`` :meth:`_dot_neon` then leaves out), else as they are."""
        if not self.signed_scratch or self.signed_table:
            return b_bytes
        return self.kb.xori(b_bytes, self.kb.const(0x80, b_bytes.type))

    def store_block(self, ds, at, base, groups: list[list[ir.Value]]) -> None:
        """One block's B vectors (``groups[g][v]``: K group ``g``, columns
        ``16v ..``, as :meth:`dot` takes them) into row ``at`` of an expanding
        kernel's scratch ``ds`` from byte ``base`` (int or index): 256 bytes
        per group, :meth:`scratch_bytes` each, or in the smmla layout
        (:func:`~.neon_mmla.store_chunk`, pairs of groups)."""
        kb = self.kb
        groups = [[self.scratch_bytes(w) for w in vecs] for vecs in groups]
        if self.isa.mmla:
            store_chunk(kb, ds, at, base, groups, self.kcb)
            return
        for g, vecs in enumerate(groups):
            for v, w in enumerate(vecs):
                if self.isa.neon:  # sub-tile major (neon_scratch)
                    col = neon_scratch.scratch_col(kb, base, 64 * g)
                    kb.vstore(w, ds, neon_scratch.scratch_at(kb, self.kcb, at, v, col))
                    continue
                off = 256 * g + 64 * v
                kb.vstore(w, ds, [at, base + off if isinstance(base, int) else kb.add(base, off)])

    def scratch_shape(self, kcb: int, full) -> list[int]:
        """The expanding kernels' B scratch for chunks of ``kcb`` blocks of
        the full records ``full``: a row per block, or on NEON a row per
        sub-tile and block (:mod:`.neon_scratch`: no LLVM ``prfm``)."""
        self.kcb = kcb
        nbytes = full.nbytes - full.data_offset
        return neon_scratch.scratch_shape(kcb, nbytes) if self.isa.neon else [kcb, nbytes]

    def scratch_at(self, b, g: int, v: int) -> list:
        """The scratch index of K group ``g`` of sub-tile ``v`` of block ``b``."""
        if self.isa.neon:
            return neon_scratch.scratch_at(self.kb, self.kcb, b, v, 64 * g)
        return [b, 256 * g + 64 * v]

    def table_bytes(self, element: str) -> list[int]:
        """The 16-entry ``vpshufb`` table of ``element``'s codes (4 lanes): the
        bytes ``2^f value + 128`` (:func:`~.units.offset_bytes`), or the
        values themselves under :attr:`signed_table`."""
        table = units.offset_bytes(element, 16) * 4
        return [x - 128 for x in table] if self.signed_table else table

    def dot(self, acc, a_words, b_bytes) -> ir.Value:
        """``acc + sum over each lane's group of a * b`` (16 i32 lanes; B the
        records' 64 bytes, A a 16-lane broadcast of one word)."""
        if self.fma_form:
            return self._fma_pairs(acc, a_words, b_bytes)
        if self.isa.neon:
            return self._dot_neon(acc, a_words, b_bytes)
        if self.isa.wide:
            return self._dot512(acc, a_words, b_bytes)
        kb = self.kb
        halves = [
            self._dot256(
                kb.slice(acc, 8 * h, 8), kb.slice(a_words, 8 * h, 8), kb.slice(b_bytes, 32 * h, 32)
            )
            for h in (0, 1)
        ]
        return kb.shuffle(halves[0], halves[1], list(range(16)))

    def pairs(self, a_words, b_bytes) -> ir.Value:
        """The ``vpmaddubsw`` pair sums (32 i16) of one step (256-bit halves, no VNNI)."""
        kb = self.kb
        halves = [
            self._pairs256(kb.slice(a_words, 8 * h, 8), kb.slice(b_bytes, 32 * h, 32))
            for h in (0, 1)
        ]
        return kb.shuffle(halves[0], halves[1], list(range(32)))

    def add_pairs(self, acc, pairs) -> ir.Value:
        """``acc`` (16 i32) plus each two of ``pairs`` (32 i16, ``vpmaddwd`` by ones)."""
        kb = self.kb
        v8i, v16h = kb.vec(8, kb.i32), kb.vec(16, kb.i16)
        ones = kb.const(1, v16h)
        halves = [
            kb.add(
                kb.slice(acc, 8 * h, 8),
                kb.intrinsic("llvm.x86.avx2.pmadd.wd", v8i, [kb.slice(pairs, 16 * h, 16), ones]),
            )
            for h in (0, 1)
        ]
        return kb.shuffle(halves[0], halves[1], list(range(16)))

    def lookup(self, table: ir.Value, idx: ir.Value) -> ir.Value:
        """64 bytes through a 16-entry table per 128-bit lane (``vpshufb``)."""
        kb = self.kb
        if self.isa.neon:  # tbl: the same 16 entries in each lane (codes 0 .. 15)
            v16 = kb.vec(16, kb.i8)
            quarters = [
                kb.intrinsic(NEON_TBL, v16, [kb.slice(table, 0, 16), kb.slice(idx, 16 * q, 16)])
                for q in range(4)
            ]
            return _concat(kb, quarters)
        if self.isa.wide:
            return kb.intrinsic("llvm.x86.avx512.pshuf.b.512", idx.type, [table, idx])
        v32 = kb.vec(32, kb.i8)
        halves = [
            kb.intrinsic(
                "llvm.x86.avx2.pshuf.b",
                v32,
                [kb.slice(table, 32 * h, 32), kb.slice(idx, 32 * h, 32)],
            )
            for h in (0, 1)
        ]
        return kb.shuffle(halves[0], halves[1], list(range(64)))

    def _fma_pairs(self, acc, a_words, b_bytes) -> ir.Value:
        """``vdpbf16ps`` as its two FMAs, odd slot first (``docs/numerics.md``),
        without its flush: each bf16 widened to f32 by a shift."""
        kb = self.kb
        v16i, v16f = kb.vec(16, kb.i32), kb.vec(16, kb.f32)
        a, b = a_words, kb.vbitcast(b_bytes, 16, kb.i32)
        for slot in (kb.const(-65536, v16i), None):  # odd (high half), then even
            if slot is None:
                x, y = (kb.shli(w, kb.const(16, v16i)) for w in (a, b))
            else:
                x, y = kb.andi(a, slot), kb.andi(b, slot)
            acc = kb.fma(kb.bitcast(x, v16f), kb.bitcast(y, v16f), acc)
        return acc

    def _dot_neon(self, acc, a_words, b_bytes) -> ir.Value:
        """Four 128-bit ``sdot`` / ``usdot``: each i32 lane adds its 4 products
        exactly (no saturation; ``docs/portability.md``)."""
        kb, v4i = self.kb, self.kb.vec(4, self.kb.i32)
        b = b_bytes
        # the records' b + 128 -> b (the expanded scratch holds b already)
        if self.isa.sign and not (self.signed_table or self.signed_scratch):
            b = kb.xori(b_bytes, kb.const(0x80, b_bytes.type))
        name = NEON_SDOT if self.isa.sign else NEON_USDOT
        quarters = []
        for q in range(4):
            a = kb.vbitcast(kb.slice(a_words, 4 * q, 4), 16, kb.i8)
            args = [kb.slice(acc, 4 * q, 4), kb.slice(b, 16 * q, 16), a]
            quarters.append(kb.intrinsic(name, v4i, args))
        return _concat(kb, quarters)

    def _dot512(self, acc, a_words, b_bytes) -> ir.Value:
        kb, name, vnni = self.kb, self.kind.name, self.isa.vnni
        v16i = kb.vec(16, kb.i32)
        if name == "bf16":
            bf = ir.BF16Type.get()
            a = kb.vbitcast(a_words, 32, bf)
            b = kb.vbitcast(b_bytes, 32, bf)
            return kb.intrinsic("llvm.x86.avx512bf16.dpbf16ps.512", acc.type, [acc, a, b])
        if name == "i16":
            a = kb.vbitcast(a_words, 32, kb.i16)
            b = kb.vbitcast(b_bytes, 32, kb.i16)
            if vnni:
                return kb.intrinsic("llvm.x86.avx512.vpdpwssd.512", v16i, [acc, a, b])
            return kb.add(acc, kb.intrinsic("llvm.x86.avx512.pmaddw.d.512", v16i, [a, b]))
        a = kb.vbitcast(a_words, 64, kb.i8)
        # B (b + 128) is the unsigned operand, A the signed one.
        if vnni:
            return kb.intrinsic("llvm.x86.avx512.vpdpbusd.512", v16i, [acc, b_bytes, a])
        # No VNNI: u8 x s8 pair sums (exact: dot_kind checked the pair sum bounds).
        pairs = kb.intrinsic("llvm.x86.avx512.pmaddubs.w.512", kb.vec(32, kb.i16), [b_bytes, a])
        ones = kb.const(1, kb.vec(32, kb.i16))
        return kb.add(acc, kb.intrinsic("llvm.x86.avx512.pmaddw.d.512", v16i, [pairs, ones]))

    def _dot256(self, acc, a_words, b_bytes) -> ir.Value:
        """One 8-lane half: ``acc`` 8 i32, ``a_words`` 8 words, ``b_bytes`` 32 bytes."""
        kb, name, isa = self.kb, self.kind.name, self.isa
        v8i, v16h = kb.vec(8, kb.i32), kb.vec(16, kb.i16)
        if name == "i16":
            a = kb.vbitcast(a_words, 16, kb.i16)
            b = kb.vbitcast(b_bytes, 16, kb.i16)
            if isa.vnni:
                return kb.intrinsic("llvm.x86.avx512.vpdpwssd.256", v8i, [acc, a, b])
            return kb.add(acc, kb.intrinsic("llvm.x86.avx2.pmadd.wd", v8i, [a, b]))
        if isa.vnni:  # the VEX vpdpbusd where only AVX-VNNI is enabled
            a = kb.vbitcast(a_words, 32, kb.i8)
            return kb.intrinsic("llvm.x86.avx512.vpdpbusd.256", v8i, [acc, b_bytes, a])
        pairs = self._pairs256(a_words, b_bytes)
        ones = kb.const(1, v16h)
        return kb.add(acc, kb.intrinsic("llvm.x86.avx2.pmadd.wd", v8i, [pairs, ones]))

    def _pairs256(self, a_words, b_bytes) -> ir.Value:
        """``vpmaddubsw`` of one 8-lane half: 16 i16 pair sums."""
        kb = self.kb
        a = kb.vbitcast(a_words, 32, kb.i8)
        u, s = b_bytes, a
        if self.a_offset:  # a + 128 (unsigned; the words hold it) x b (signed)
            u, s = a, b_bytes
        elif self.isa.sign:  # |a| (unsigned) x b sign(a) (signed): the products a * b
            v32 = b_bytes.type
            b = b_bytes  # the table's b, else the records' b + 128 -> b
            if not self.signed_table:
                b = kb.xori(b_bytes, kb.const(0x80, v32))
            u = kb.intrinsic("llvm.x86.avx2.psign.b", v32, [a, a])
            s = kb.intrinsic("llvm.x86.avx2.psign.b", v32, [b, a])
        return kb.intrinsic("llvm.x86.avx2.pmadd.ub.sw", kb.vec(16, kb.i16), [u, s])


#: The NEON instructions (LLVM's overloaded names; ``cpu_features.INTRINSICS``
#: knows the features each needs): ``sdot`` (s8 x s8, ``asimddp``), ``usdot``
#: (u8 x s8, ``i8mm``; the first operand unsigned) and the 16-byte table ``tbl``.
NEON_SDOT = "llvm.aarch64.neon.sdot.v4i32.v16i8"
NEON_USDOT = "llvm.aarch64.neon.usdot.v4i32.v16i8"
NEON_TBL = "llvm.aarch64.neon.tbl1.v16i8"


#: Rows of a register tile of the NEON kernels (``sdot``/``usdot`` on 128-bit
#: quarters, 32 q registers), one vector of 16 columns wide: 12 accumulators,
#: 4 B registers and each row's 8 words of A in 2 (the indexed ``sdot``).
#: ``llc -mcpu=neoverse-n1`` (``bench/probes/neon_counts.py``) counts 177
#: instructions per block step of 96 ``sdot`` (54 %) and no stack access for
#: W4A8, against 268 with 26 stack accesses (48 %) for 2 rows x 32 columns and
#: 245 with 16 (52 %) for 4 x 16.  Decode (one row) keeps 32 columns: 333
#: instructions per 64 ``sdot`` with 8 stack accesses, against 699 with 54 at
#: 64 columns.  Not measured on an aarch64 CPU (docs/portability.md).
NEON_ROWS = 3


def neon_tile(mr: int, nv: int, mmla: bool = False) -> dict[str, int]:
    """A dot schedule's rows ``mr`` and vectors of 16 columns ``nv`` on NEON:
    :data:`NEON_ROWS` x 1 where it has several rows, else (decode) at most 2;
    on ``smmla`` (``mmla``) :func:`~.neon_mmla.mmla_tile`."""
    if mmla:
        return mmla_tile(mr)
    return {"mr": min(mr, NEON_ROWS), "nv": 1} if mr > 1 else {"mr": 1, "nv": min(nv, 2)}


def _concat(kb: KernelBuilder, parts: list[ir.Value]) -> ir.Value:
    """Four equal vectors as one (LLVM keeps them in their four registers)."""
    n = ir.VectorType(parts[0].type).shape[0]
    lo = kb.shuffle(parts[0], parts[1], list(range(2 * n)))
    hi = kb.shuffle(parts[2], parts[3], list(range(2 * n)))
    return kb.shuffle(lo, hi, list(range(4 * n)))


def routed(kb: KernelBuilder, flag, run, form):
    """``run(lo, hi)`` emitted twice where the ``flag`` buffer (16 i32) is
    given: as it is, taken unless some lane of ``flag`` is set, and after
    ``form(True)``, taken where one is (``form(False)`` restores it).  bf16
    activations (:mod:`.prep`'s ``tiny``): ``vdpbf16ps``, else the FMA form
    (:attr:`DotOps.fma_form`): the calls whose products or partial sums
    could reach the instruction's flush of denormals get the f32 kernels'
    operations.  The lifted step (:mod:`.biased`, ``huge``): the biased
    (E4M3) or plain (E8M0) step where some A scale is ``2^127``."""
    if flag is None:
        return run

    def both(lo, hi):
        on = kb.cmpi("ne", kb.reduce("or", kb.vload(flag, [0], 16)), kb.const(0, kb.i32))
        with kb.if_(kb.cmpi("eq", on, kb.const(0, kb.i1))):
            run(lo, hi)
        form(True)
        with kb.if_(on):
            run(lo, hi)
        form(False)

    return both

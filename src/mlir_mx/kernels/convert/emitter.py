"""Stand-alone quantize / dequantize kernels: what one compiled kernel does.

A :class:`ConvertSpec` names one kernel: ``quantize`` (f32, f64, f16 or
bf16 -> MX codes and E8M0 scales) or ``dequantize`` (MX -> f32) of one
element format and block size, in one of two layouts, for a number of
threads.  Every size is dynamic, so one compiled kernel serves every shape
(and every rank and axis: the library folds them into the layouts,
``mlir_mx.convert``):

``rows``     blocks along the contiguous last axis: ``x`` is ``(P, N)``,
             codes ``(P, N')`` (``N'`` bytes: ``N`` codes, packed or not),
             scales ``(P, N / B)``.
``columns``  blocks along a middle axis: ``x`` is ``(P, N, Q)`` blocked
             along ``N``, codes ``(P N, Q')``, scales ``(P N / B, Q)``;
             registers run along ``Q``.

The input ``x`` may have any strides (``contiguous=False``: its innermost
stride is not 1, elements are loaded one by one); codes, scales and the f32
output of ``dequantize`` have a unit innermost stride and any row stride.
:func:`~mlir_mx.kernels.convert.convert_module` builds the module (``func @quantize(x, codes,
scales)`` or ``func @dequantize(codes, scales, out)``); the emitters live
in :mod:`~mlir_mx.kernels.convert.quantize` and :mod:`~mlir_mx.kernels.convert.dequantize`.

Work is split into items (a segment of up to :data:`SEGMENT_BLOCKS` blocks of
one row, or one block row of up to :data:`COLUMN_CHUNK` columns), and the
items into one contiguous range per thread (``scf.parallel``, lowered by
``async-parallel-for``).  Each code and scale is computed by exactly one
item in the same way, so results do not depend on the thread count.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from mlir import ir

from mlir_mx.kernels.common.builder import KernelBuilder
from mlir_mx.kernels.common.widen import LANES
from mlir_mx.numerics.formats import SCALE_TYPE, ElementFormat, element_format, scale_rule

__all__ = [
    "COLUMN_CHUNK",
    "ConvertEmitter",
    "ConvertSpec",
    "SEGMENT_BLOCKS",
    "RUNTIME_THREADS",
    "SOURCES",
    "parallel_items",
]

#: Input element types ``quantize`` reads (converted to f32 in registers,
#: exactly as the oracle converts them first).
SOURCES = ("f32", "f64", "f16", "bf16")
#: Blocks of one row per work item (a multiple of 16, so that a segment
#: starts on a packing group and on a 16-code vector).
SEGMENT_BLOCKS = 256
#: Columns of one work item in the ``columns`` layout (a multiple of 64).
COLUMN_CHUNK = 1024
#: ``ConvertSpec.threads`` of a kernel that takes its thread count at run
#: time, as an ``index`` argument after its memrefs: one compiled kernel
#: serves every count (``mlir_mx.quantize`` / ``dequantize`` use these).
RUNTIME_THREADS = 0


@dataclass(frozen=True)
class ConvertSpec:
    """One compiled conversion kernel (see the module docstring)."""

    op: str  # "quantize" | "dequantize"
    element: str  # the format's name (an ElementFormat given is held as its name)
    block: int
    layout: str  # "rows" | "columns"
    packed: bool = False  # FP4/FP6 codes in their packed storage (numerics.packing)
    source: str = "f32"  # quantize: the input's element type
    contiguous: bool = True  # quantize: the input's innermost stride is 1
    threads: int = 1  # RUNTIME_THREADS: an argument of the kernel
    #: ``f8E8M0FNU`` (OCP MX) or ``f8E4M3FN`` (NVFP4: E2M1 in blocks of 16,
    #: and the global scale an f32 argument after the memrefs)
    scale_type: str = SCALE_TYPE
    #: ``element``'s format (derived; not part of the key or the repr)
    format: ElementFormat = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        fmt = element_format(self.element)
        object.__setattr__(self, "element", fmt.name)
        object.__setattr__(self, "format", fmt)
        if self.op not in ("quantize", "dequantize"):
            raise ValueError(f"op: expected 'quantize' or 'dequantize', got {self.op!r}")
        if self.layout not in ("rows", "columns"):
            raise ValueError(f"layout: expected 'rows' or 'columns', got {self.layout!r}")
        if self.source not in SOURCES:
            raise ValueError(f"source: expected one of {', '.join(SOURCES)}, got {self.source!r}")
        if self.block < 1 or self.threads < 0:
            raise ValueError("block must be positive, threads positive or RUNTIME_THREADS")
        if self.packed and not fmt.is_sub_byte:
            raise ValueError(f"packed: {fmt.name} codes are one byte each")
        rule = scale_rule(fmt.name, self.scale_type, self.block)
        if rule is not None:
            raise ValueError(f"scale_type: {rule}")

    @property
    def global_scale(self) -> bool:
        """True for NVFP4: the kernel takes the f32 global scale."""
        return self.scale_type != SCALE_TYPE

    @property
    def name(self) -> str:
        """The kernel function's name."""
        return self.op

    def arg_types(self) -> list[ir.Type]:
        """Types of the function's arguments (inside a context): three memrefs,
        the global scale (``f32``) for NVFP4, then the thread count
        (``index``) for :data:`RUNTIME_THREADS`."""
        i8 = ir.IntegerType.get_signless(8)
        dyn = ir.ShapedType.get_dynamic_size()
        rank = 3 if self.layout == "columns" and self.op == "quantize" else 2

        def strided(elem: ir.Type, rank: int, unit: bool) -> ir.Type:
            strides = [dyn] * (rank - 1) + [1 if unit else dyn]
            layout = ir.StridedLayoutAttr.get(dyn, strides)
            return ir.MemRefType.get([dyn] * rank, elem, layout=layout)

        codes, scales = strided(i8, 2, True), strided(i8, 2, True)
        runtime = [ir.IndexType.get()] if self.threads == RUNTIME_THREADS else []
        if self.global_scale:
            runtime.insert(0, ir.F32Type.get())
        if self.op == "dequantize":
            return [codes, scales, strided(ir.F32Type.get(), 2, True), *runtime]
        src = ir.Type.parse(self.source)
        return [strided(src, rank, self.contiguous), codes, scales, *runtime]


def parallel_items(
    kb: KernelBuilder,
    total: ir.Value,
    threads: int | ir.Value,
    body: Callable[[ir.Value, ir.Value], None],
) -> None:
    """``body(first, end)`` over ``[0, total)`` items, one contiguous range per
    thread (``scf.parallel`` when ``threads > 1``, or a run-time count: one
    range runs inline, ``async-parallel-for``'s single-block path); nothing
    when ``total`` is 0."""
    with kb.if_(kb.icmp("ugt", total, 0)):
        if isinstance(threads, int) and threads == 1:
            body(kb.idx(0), total)
            return
        per = kb.ceildivu(total, threads)
        chunks = kb.ceildivu(total, per)
        with kb.parallel(0, chunks, 1) as t:
            first = kb.mul(t, per)
            body(first, kb.min(kb.add(first, per), total))


def split_items(kb: KernelBuilder, w: ir.Value, inner) -> tuple[ir.Value, ir.Value]:
    """``(w / inner, w % inner)`` for index values."""
    outer = kb.divu(w, inner)
    return outer, kb.sub(w, kb.mul(outer, inner))


class ConvertEmitter:
    """The loops both conversion kernels share; a subclass gives its sizes and
    its bodies (:mod:`~mlir_mx.kernels.convert.quantize`, :mod:`~mlir_mx.kernels.convert.dequantize`).

    ``rows``: items are segments of up to :data:`SEGMENT_BLOCKS` blocks of a
    row; a block size that is a multiple of 16 runs :meth:`block` per block,
    any other one the segment's scale factors into a scratch buffer
    (:meth:`segment_scales`) and then its elements, 16 lanes at a time, each
    lane gathering its block's factor (:meth:`element_lanes`).  ``columns``:
    items are (block row, chunk of :data:`COLUMN_CHUNK` columns), cut into
    tiles of 64 and 16 columns and a masked tail (:meth:`tile`).
    """

    def __init__(self, kb: KernelBuilder, spec: ConvertSpec):
        self.kb, self.spec, self.bs = kb, spec, spec.block
        #: The thread count: ``spec.threads``, or the kernel's argument (an
        #: ``index`` value) for :data:`RUNTIME_THREADS` (:func:`emit_convert`).
        self.threads: int | ir.Value = spec.threads
        self.v16 = kb.vec(LANES, kb.f32)
        #: NVFP4's global scale (an ``f32`` argument; :func:`emit_convert`).
        self.global_scale: ir.Value | None = None
        #: Elements of a block handled at once by :meth:`block` (blocks above
        #: 64 elements run in pieces of 16, 32 or 64, read from L1 again).
        self.width = self.bs if self.bs <= 64 else LANES * math.gcd(self.bs // LANES, 4)

    def emit(self) -> None:
        """The kernel at the insertion point."""
        if self.spec.layout == "rows":
            self.rows()
        else:
            self.columns()

    # -- what a subclass gives ---------------------------------------------------

    def row_sizes(self) -> tuple[ir.Value, ir.Value]:
        """``rows``: (rows, blocks per row)."""
        raise NotImplementedError

    def column_sizes(self) -> tuple[ir.Value, ir.Value]:
        """``columns``: (block rows, columns)."""
        raise NotImplementedError

    def block(self, r, j) -> None:
        """Block ``j`` of row ``r`` (block size a multiple of 16)."""
        raise NotImplementedError

    def segment_scales(self, r, js, je, scratch) -> None:
        """The f32 factor of each block ``js .. je`` of row ``r`` into ``scratch``."""
        raise NotImplementedError

    def element_lanes(self, r, e, factor, valid) -> None:
        """16 elements of row ``r`` from ``e`` on (``valid`` of them, or all)
        with their blocks' factors ``factor``."""
        raise NotImplementedError

    def tile(self, g, q, nv: int, valid) -> None:
        """Block row ``g`` at columns ``q .. q + 16 nv`` (``valid``: a tail)."""
        raise NotImplementedError

    # -- rows --------------------------------------------------------------------

    def rows(self) -> None:
        kb = self.kb
        p_rows, nb = self.row_sizes()
        per_row = kb.ceildivu(nb, SEGMENT_BLOCKS)
        generic = self.bs % LANES != 0

        def body(first, end):
            scratch = kb.alloc([SEGMENT_BLOCKS], kb.f32) if generic else None
            with kb.loop(first, end, 1) as w:
                r, k = split_items(kb, w.iv, per_row)
                js = kb.mul(k, SEGMENT_BLOCKS)
                je = kb.min(kb.add(js, SEGMENT_BLOCKS), nb)
                if generic:
                    self.segment_scales(r, js, je, scratch)
                    self.segment_elements(r, js, je, scratch)
                else:
                    self.segment_blocks(r, js, je)
            if scratch is not None:
                kb.dealloc(scratch)

        parallel_items(kb, kb.mul(p_rows, per_row), self.threads, body)

    def segment_blocks(self, r, js, je) -> None:
        """Blocks ``js .. je`` of row ``r`` (a block size a multiple of 16),
        one by one (:meth:`block`)."""
        with self.kb.loop(js, je, 1) as j:
            self.block(r, j.iv)

    def segment_elements(self, r, js, je, scratch) -> None:
        """The elements of blocks ``js .. je`` of row ``r``, 16 at a time, each
        lane with its block's factor gathered from ``scratch``."""
        kb, bs = self.kb, self.bs
        start = kb.mul(js, bs)
        count = kb.mul(kb.sub(je, js), bs)
        full = kb.add(start, kb.mul(kb.divu(count, LANES), LANES))
        lanes = kb.const_array(list(range(LANES)), kb.vec(LANES, kb.i32))
        bsv = kb.const(bs, kb.vec(LANES, kb.i32))

        def elements(e, valid):
            rel = kb.index_cast(kb.sub(e, start), kb.i32)
            idx = kb.divu(kb.addi(kb.broadcast(rel, LANES), lanes), bsv)
            mask = kb.mask(LANES, LANES if valid is None else valid)
            factor = kb.gather(scratch, [0], idx, mask, kb.const(0.0, self.v16))
            self.element_lanes(r, e, factor, valid)

        with kb.loop(start, full, LANES) as e:
            elements(e.iv, None)
        rest = kb.sub(kb.add(start, count), full)
        with kb.if_(kb.icmp("ugt", rest, 0)):
            elements(full, rest)

    # -- columns -------------------------------------------------------------------

    def columns(self) -> None:
        kb = self.kb
        block_rows, q = self.column_sizes()
        chunks = kb.ceildivu(q, COLUMN_CHUNK)

        def body(first, end):
            with kb.loop(first, end, 1) as w:
                g, c = split_items(kb, w.iv, chunks)
                q0 = kb.mul(c, COLUMN_CHUNK)
                self.column_tiles(g, q0, kb.min(kb.add(q0, COLUMN_CHUNK), q))

        parallel_items(kb, kb.mul(block_rows, chunks), self.threads, body)

    def column_tiles(self, g, q0, q1) -> None:
        """Columns ``q0 .. q1`` of block row ``g``: tiles of 64, of 16, a tail."""
        kb = self.kb
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

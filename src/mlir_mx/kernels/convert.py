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
:func:`convert_module` builds the module (``func @quantize(x, codes,
scales)`` or ``func @dequantize(codes, scales, out)``); the emitters live
in :mod:`~mlir_mx.kernels.quantize` and :mod:`~mlir_mx.kernels.dequantize`.

Work is split into items (a segment of up to :data:`SEGMENT_BLOCKS` blocks of
one row, or one block row of up to :data:`COLUMN_CHUNK` columns), and the
items into one contiguous range per thread (``scf.parallel``, lowered by
``async-parallel-for``).  Each code and scale is computed by exactly one
item in the same way, so results do not depend on the thread count.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from mlir import ir
from mlir.dialects import arith, func

from mlir_mx.kernels.builder import KernelBuilder
from mlir_mx.numerics.formats import element_format

__all__ = [
    "COLUMN_CHUNK",
    "ConvertSpec",
    "SEGMENT_BLOCKS",
    "SOURCES",
    "convert_module",
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


@dataclass(frozen=True)
class ConvertSpec:
    """One compiled conversion kernel (see the module docstring)."""

    op: str  # "quantize" | "dequantize"
    element: str
    block: int
    layout: str  # "rows" | "columns"
    packed: bool = False  # FP4/FP6 codes in their packed storage (numerics.packing)
    source: str = "f32"  # quantize: the input's element type
    contiguous: bool = True  # quantize: the input's innermost stride is 1
    threads: int = 1

    def __post_init__(self) -> None:
        fmt = element_format(self.element)
        if self.op not in ("quantize", "dequantize"):
            raise ValueError(f"op: expected 'quantize' or 'dequantize', got {self.op!r}")
        if self.layout not in ("rows", "columns"):
            raise ValueError(f"layout: expected 'rows' or 'columns', got {self.layout!r}")
        if self.source not in SOURCES:
            raise ValueError(f"source: expected one of {', '.join(SOURCES)}, got {self.source!r}")
        if self.block < 1 or self.threads < 1:
            raise ValueError("block and threads must be positive")
        if self.packed and not fmt.is_sub_byte:
            raise ValueError(f"packed: {fmt.name} codes are one byte each")

    @property
    def name(self) -> str:
        """The kernel function's name."""
        return self.op

    def arg_types(self) -> list[ir.Type]:
        """Memref types of the function's three arguments (inside a context)."""
        i8 = ir.IntegerType.get_signless(8)
        dyn = ir.ShapedType.get_dynamic_size()
        rank = 3 if self.layout == "columns" and self.op == "quantize" else 2

        def strided(elem: ir.Type, rank: int, unit: bool) -> ir.Type:
            strides = [dyn] * (rank - 1) + [1 if unit else dyn]
            layout = ir.StridedLayoutAttr.get(dyn, strides)
            return ir.MemRefType.get([dyn] * rank, elem, layout=layout)

        codes, scales = strided(i8, 2, True), strided(i8, 2, True)
        if self.op == "dequantize":
            return [codes, scales, strided(ir.F32Type.get(), 2, True)]
        src = ir.Type.parse(self.source)
        return [strided(src, rank, self.contiguous), codes, scales]


def convert_module(spec: ConvertSpec) -> ir.Module:
    """A module with the one kernel of ``spec`` (in the current context)."""
    from mlir_mx.kernels.dequantize import emit_dequantize
    from mlir_mx.kernels.quantize import emit_quantize

    module = ir.Module.create()
    with ir.InsertionPoint(module.body):
        fn = func.FuncOp(spec.name, ir.FunctionType.get(spec.arg_types(), []))
        entry = fn.add_entry_block()
        with ir.InsertionPoint(entry):
            anchor = arith.ConstantOp(ir.IndexType.get(), 0)
            kb = KernelBuilder(ir.InsertionPoint(anchor))
            args = list(entry.arguments)
            if spec.op == "quantize":
                emit_quantize(kb, spec, *args)
            else:
                emit_dequantize(kb, spec, *args)
            func.ReturnOp([])
            anchor.operation.erase()
    return module


def parallel_items(
    kb: KernelBuilder, total: ir.Value, threads: int, body: Callable[[ir.Value, ir.Value], None]
) -> None:
    """``body(first, end)`` over ``[0, total)`` items, one contiguous range per
    thread (``scf.parallel`` when ``threads > 1``); nothing when ``total`` is 0."""
    with kb.if_(kb.icmp("ugt", total, 0)):
        if threads == 1:
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

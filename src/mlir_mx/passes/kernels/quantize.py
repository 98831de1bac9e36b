"""``mx-quantize-kernels``: replace the lowered quantize/dequantize by generated kernels.

Runs on buffers, after ``bufferize``, like ``mx-matmul-kernels``.
``mx-to-linalg`` lowers ``mx.quantize_block`` to three tagged generics (the
block amax into a filled ``f32`` buffer, ``"quantize_amax"``; the E8M0 codes,
``"quantize_scales"``; the scaled and rounded elements,
``"quantize_elements"``) and ``mx.dequantize_block`` to one
(``"dequantize"``).  The pass puts one kernel of :mod:`mlir_mx.kernels.convert.emitter`
in place of each group: vectorized, multi-threaded (``threads``), the same
bits (the kernels implement the same numerics; ``docs/numerics.md``).  The
amax buffer, its fill and its deallocation go away; FP4/FP6 codes packed at
the function boundary (``subbyte-storage=packed``) are written packed by the
quantize kernel and read packed by the dequantize kernel, and the
``pack_codes`` / ``unpack_codes`` generics and their buffers go away too.

A group it cannot handle (an input that is not an identity-layout ``f32``
buffer, a buffer with another user) is left to the generic lowering.
"""

from __future__ import annotations

from contextlib import contextmanager

from mlir import ir
from mlir.dialects import arith, memref

from mlir_mx.host import default_threads
from mlir_mx.ir_utils import KernelTag, collect, indexing_maps, kernel_tag, owner_op, users
from mlir_mx.kernels.common.builder import KernelBuilder
from mlir_mx.kernels.convert import ConvertSpec, emit_convert
from mlir_mx.numerics import element_format
from mlir_mx.passes.kernels.packed_sources import erase_unpack, packed_source
from mlir_mx.passes.registry import Option, PassError, register_pass

__all__ = ["mx_quantize_kernels"]


@register_pass(
    "mx-quantize-kernels",
    "Replace each lowered MX quantize/dequantize (after bufferization) by a generated, "
    "vectorized and optionally multi-threaded kernel",
    options=[Option("threads", int, 0, "Threads; 0: this machine's cores")],
)
def mx_quantize_kernels(op: ir.Operation, *, threads: int = 0) -> None:
    """Rewrite every tagged quantize and dequantize group under ``op``."""
    op = getattr(op, "operation", op)
    if threads < 0:
        raise PassError(f"mx-quantize-kernels: threads must be >= 0, got {threads}", op.location)
    threads = threads or default_threads()
    for g in collect(op, lambda o: kernel_tag(o) == KernelTag.QUANTIZE_ELEMENTS):
        _quantize(g, threads)
    for g in collect(op, lambda o: kernel_tag(o) == KernelTag.DEQUANTIZE):
        _dequantize(g, threads)


# ------------------------------------------------------------------ matching


def _identity(v: ir.Value) -> bool:
    """A static memref with the identity (row-major, offset 0) layout."""
    t = ir.MemRefType(v.type)
    if not t.has_static_shape:
        return False
    strides, offset = t.get_strides_and_offset()
    want, acc = [], 1
    for n in reversed(t.shape):
        want.insert(0, acc)
        acc *= n
    return offset == 0 and all(s == w or n == 1 for s, w, n in zip(strides, want, t.shape, strict=True))


def _blocking(generic: ir.Operation, rank: int) -> tuple[int, int]:
    """(axis, block size) from the scale operand's map ``(.., d_axis floordiv B, ..)``;
    block size 1 (no floordiv left) reads as the last axis."""
    for axis, e in enumerate(indexing_maps(generic)[1].results):
        e = e.maybe_downcast()
        if isinstance(e, ir.AffineFloorDivExpr):
            return axis, e.rhs.maybe_downcast().value
    return rank - 1, 1


def _deallocs(buf: ir.Value) -> list[ir.Operation] | None:
    """The deallocations of ``buf`` (possibly in an ``scf.if``), None if other users."""
    out = []
    for u in users(buf):
        if u.name != "memref.dealloc":
            return None
        out.append(u)
    return out


def _packed_target(mant: ir.Value, writer: ir.Operation):
    """``(packed bytes buffer, ops to erase)`` when ``mant`` (written by
    ``writer``) is only packed by a ``pack_codes`` generic (and freed), else None."""
    rest = [u for u in users(mant) if u != writer]
    views = [u for u in rest if u.name == "memref.expand_shape"]
    others = [u for u in rest if u.name != "memref.expand_shape"]
    if len(views) != 1 or any(u.name != "memref.dealloc" for u in others):
        return None
    view = views[0]
    packs = users(view.results[0])  # the pack generic reads the view twice
    if not packs or any(u != packs[0] for u in packs) or kernel_tag(packs[0]) != KernelTag.PACK_CODES:
        return None
    pack = packs[0]
    return pack.operands[len(pack.operands) - 1], [pack, view] + others


def _quantize(elems: ir.Operation, threads: int) -> None:
    x, scale, mant = elems.operands[0], elems.operands[1], elems.operands[2]
    x_t = ir.MemRefType(x.type)
    if str(x_t.element_type) != "f32" or not _identity(x) or not _identity(mant):
        return
    writers = [u for u in users(scale) if kernel_tag(u) == KernelTag.QUANTIZE_SCALES]
    if len(writers) != 1 or not _identity(scale):
        return
    amax = writers[0].operands[0]
    alloc = owner_op(amax)
    fill = [u for u in users(amax) if u.name == "linalg.fill"]
    red = [u for u in users(amax) if kernel_tag(u) == KernelTag.QUANTIZE_AMAX]
    rest = [u for u in users(amax) if u not in fill + red + writers]
    if alloc is None or alloc.name != "memref.alloc" or len(fill) != 1 or len(red) != 1:
        return
    if any(u.name != "memref.dealloc" for u in rest):
        return
    element = str(ir.MemRefType(mant.type).element_type)
    axis, block = _blocking(elems, x_t.rank)
    packed = _packed_target(mant, elems) if element_format(element).is_sub_byte else None
    codes = packed[0] if packed else mant
    anchor = packed[1][0] if packed else elems
    spec = ConvertSpec("quantize", element, block, _layout(axis, x_t.rank), bool(packed),
                       threads=threads)  # fmt: skip
    with _builder(anchor) as kb:
        xs, cs, ss = _views(kb, x_t.shape, axis, block, x, codes, scale)
        emit_convert(kb, spec, xs, cs, ss)
    view = owner_op(red[0].operands[0])
    dead = [elems, writers[0], red[0], fill[0], *rest, alloc]
    if packed:
        dead += packed[1] + [owner_op(mant)]
    for d in dead:
        d.erase()
    if view is not None and view.name == "memref.expand_shape" and not users(view.results[0]):
        view.erase()


def _dequantize(gen: ir.Operation, threads: int) -> None:
    mant, scale, out = gen.operands[0], gen.operands[1], gen.operands[2]
    out_t = ir.MemRefType(out.type)
    if not all(_identity(v) for v in (scale, out)):
        return
    element = str(ir.MemRefType(mant.type).element_type)
    source = packed_source(mant) if element_format(element).is_sub_byte else None
    codes = source[0] if source else mant
    if not _identity(codes):
        return
    axis, block = _blocking(gen, out_t.rank)
    spec = ConvertSpec("dequantize", element, block, _layout(axis, out_t.rank), bool(source),
                       threads=threads)  # fmt: skip
    with _builder(gen) as kb:
        cs, ss, os_ = _views(kb, out_t.shape, axis, block, None, codes, scale, out)
        emit_convert(kb, spec, cs, ss, os_)
    gen.erase()
    if source:
        erase_unpack(source[1])


# ------------------------------------------------------------------ emitting


def _layout(axis: int, rank: int) -> str:
    return "rows" if axis == rank - 1 else "columns"


@contextmanager
def _builder(anchor: ir.Operation):
    """A KernelBuilder emitting before ``anchor``; its constants go before a
    temporary op that precedes the kernel (``emit_matmul``'s way)."""
    with ir.InsertionPoint(anchor), anchor.location:
        first = arith.ConstantOp(ir.IndexType.get(), 0)
        yield KernelBuilder(ir.InsertionPoint(first))
        first.operation.erase()


def _reshape(kb: KernelBuilder, mem: ir.Value, shape: list[int]) -> ir.Value:
    """``mem`` (identity layout, one byte or one f32 per element) as a row-major
    memref of ``shape`` (``memref.reinterpret_cast``; i8 for codes and scales)."""
    t = ir.MemRefType(mem.type)
    if str(t.element_type) != "f32":
        mem = kb.as_bytes(mem)
    strides, acc = [], 1
    for n in reversed(shape):
        strides.insert(0, acc)
        acc *= n
    elem = ir.MemRefType(mem.type).element_type
    layout = ir.StridedLayoutAttr.get(0, strides)
    rt = ir.MemRefType.get(shape, elem, layout=layout)
    return memref.ReinterpretCastOp(rt, mem, [], [], [], [0], shape, strides).result


def _views(kb, shape, axis, block, x, codes, scale, out=None):
    """The kernel's views of the buffers (the layouts of ``mlir_mx.kernels.convert.emitter``):
    ``x`` ``(P, N)`` (rows) or ``(P, N, Q)`` (columns), codes, scales and ``out``
    2-D with their rows as the kernel counts them."""
    p = _prod(shape[:axis])
    n, q = shape[axis], _prod(shape[axis + 1 :])
    rows_layout = axis == len(shape) - 1
    rows = p if rows_layout else p * n
    scale_rows = rows if rows_layout else rows // block
    vs = [
        _reshape(kb, codes, [rows, _numel(codes) // rows]),
        _reshape(kb, scale, [scale_rows, _numel(scale) // scale_rows]),
    ]
    if out is not None:
        return vs + [_reshape(kb, out, [rows, _numel(out) // rows])]
    return [_reshape(kb, x, [p, n] if rows_layout else [p, n, q])] + vs


def _prod(dims) -> int:
    out = 1
    for d in dims:
        out *= d
    return out


def _numel(v: ir.Value) -> int:
    return _prod(ir.MemRefType(v.type).shape)

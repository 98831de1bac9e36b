"""A small IR builder for the generated matmul kernels.

The kernels are loop nests of ``scf``/``memref``/``vector``/``arith`` ops built
directly on the upstream Python bindings.  :class:`KernelBuilder` keeps the
emitting code short: typed constants (hoisted to one insertion point and
reused), loops as context managers, vector loads and stores, and the few casts
the kernels need.  It builds at the current insertion point and location,
like every other builder of this project.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import contextmanager

from mlir import ir
from mlir.dialects import arith, builtin, llvm, math, memref, scf, vector

__all__ = ["ArithBuilder", "KernelBuilder", "Loop"]


class Loop:
    """An ``scf.for`` under construction: ``iv``, ``args`` and ``results``."""

    def __init__(self, op: scf.ForOp):
        self.op = op
        self.iv = op.induction_variable
        self.args = list(op.inner_iter_args)
        self._yielded = False

    def yield_(self, values: Sequence[ir.Value] = ()) -> None:
        scf.YieldOp(list(values))
        self._yielded = True

    @property
    def results(self) -> list[ir.Value]:
        return list(self.op.results)


class ArithBuilder:
    """Elementwise ``arith`` ops on scalars, vectors or static tensors.

    Type arguments are full types, or element types that :meth:`shaped`
    gives this builder's shape (``like``, when set).  Constants are created
    at the current insertion point (:class:`KernelBuilder` hoists them).
    Codecs (:mod:`mlir_mx.kernels.common.codec`) are written against this class, so
    the kernels and the ``mx-expand-narrow-floats`` pass share them.
    """

    def __init__(self, like: ir.Type | None = None, loc: ir.Location | None = None):
        self.like = like if isinstance(like, ir.ShapedType) else None
        self.loc = loc
        self.f32 = ir.F32Type.get()
        self.f16 = ir.F16Type.get()
        self.index = ir.IndexType.get()
        self.i1 = ir.IntegerType.get_signless(1)
        self.i8 = ir.IntegerType.get_signless(8)
        self.i16 = ir.IntegerType.get_signless(16)
        self.i32 = ir.IntegerType.get_signless(32)

    # -- types ---------------------------------------------------------------

    @staticmethod
    def vec(n: int, elem: ir.Type) -> ir.VectorType:
        return ir.VectorType.get([n], elem)

    def shaped(self, t: ir.Type) -> ir.Type:
        """``t`` itself when shaped (or without ``like``), else ``t`` in ``like``'s shape."""
        s = self.like
        if s is None or isinstance(t, ir.ShapedType):
            return t
        if isinstance(s, ir.VectorType):
            return ir.VectorType.get(s.shape, t, scalable=s.scalable_dims)
        return ir.RankedTensorType.get(s.shape, t)

    @staticmethod
    def same_shape(v: ir.Value, elem: ir.Type) -> ir.Type:
        """The type of ``v`` with element type ``elem``."""
        t = v.type
        if isinstance(t, ir.VectorType):
            return ir.VectorType.get(t.shape, elem, scalable=t.scalable_dims)
        if isinstance(t, ir.RankedTensorType):
            return ir.RankedTensorType.get(t.shape, elem)
        return elem

    # -- constants -------------------------------------------------------------

    def const(self, value, t: ir.Type) -> ir.Value:
        """A constant of type ``t`` (splat when shaped)."""
        t = self.shaped(t)
        key = (str(t), value if not isinstance(value, float) else ("f", value.hex()))
        elem = t.element_type if isinstance(t, ir.ShapedType) else t
        if isinstance(elem, ir.IndexType):
            attr = ir.IntegerAttr.get(elem, int(value))
        elif isinstance(elem, ir.IntegerType):
            w = elem.width
            v = int(value) & ((1 << w) - 1)
            if w > 1 and v >= 1 << (w - 1):  # IntegerAttr wants the signed value
                v -= 1 << w
            attr = ir.IntegerAttr.get(elem, v)
        else:
            attr = ir.FloatAttr.get(elem, float(value))
        if isinstance(t, ir.ShapedType):
            attr = ir.DenseElementsAttr.get_splat(t, attr)
        return self._constant(key, t, attr)

    def const_array(self, values: Sequence[int], t: ir.VectorType) -> ir.Value:
        """A constant integer vector with the given lane values."""
        import numpy as np

        w = t.element_type.width
        arr = np.array([int(v) & ((1 << w) - 1) for v in values], dtype=f"uint{w}")
        attr = ir.DenseElementsAttr.get(arr.view(f"int{w}"), type=t)
        return self._constant((str(t), "array", tuple(values)), t, attr)

    def const_array_f32(self, values: Sequence[float], t: ir.VectorType) -> ir.Value:
        """A constant f32 vector with the given lane values."""
        import numpy as np

        attr = ir.DenseElementsAttr.get(np.array(values, dtype=np.float32), type=t)
        key = (str(t), "f32array", tuple(float(v).hex() for v in values))
        return self._constant(key, t, attr)

    def _constant(self, key, t: ir.Type, attr) -> ir.Value:
        return arith.ConstantOp(t, attr, loc=self.loc).result

    # -- elementwise arith (scalars, vectors or tensors) -----------------------

    def fadd(self, a, b):
        return arith.AddFOp(a, b, loc=self.loc).result

    def fsub(self, a, b):
        return arith.SubFOp(a, b, loc=self.loc).result

    def fmul(self, a, b):
        return arith.MulFOp(a, b, loc=self.loc).result

    def fdiv(self, a, b):
        return arith.DivFOp(a, b, loc=self.loc).result

    def addi(self, a, b):
        return arith.AddIOp(a, b, loc=self.loc).result

    def subi(self, a, b):
        return arith.SubIOp(a, b, loc=self.loc).result

    def muli(self, a, b):
        return arith.MulIOp(a, b, loc=self.loc).result

    def andi(self, a, b):
        return arith.AndIOp(a, b, loc=self.loc).result

    def ori(self, a, b):
        return arith.OrIOp(a, b, loc=self.loc).result

    def xori(self, a, b):
        return arith.XOrIOp(a, b, loc=self.loc).result

    def shli(self, a, b):
        return arith.ShLIOp(a, b, loc=self.loc).result

    def shrui(self, a, b):
        return arith.ShRUIOp(a, b, loc=self.loc).result

    def cmpi(self, pred: str, a, b):
        return arith.CmpIOp(getattr(arith.CmpIPredicate, pred), a, b, loc=self.loc).result

    def select(self, c, a, b):
        return arith.SelectOp(c, a, b, loc=self.loc).result

    def extsi(self, v, t):
        return arith.ExtSIOp(self.shaped(t), v, loc=self.loc).result

    def extui(self, v, t):
        return arith.ExtUIOp(self.shaped(t), v, loc=self.loc).result

    def trunci(self, v, t):
        return arith.TruncIOp(self.shaped(t), v, loc=self.loc).result

    def extf(self, v, t):
        return arith.ExtFOp(self.shaped(t), v, loc=self.loc).result

    def truncf(self, v, t):
        return arith.TruncFOp(self.shaped(t), v, loc=self.loc).result

    def sitofp(self, v, t):
        return arith.SIToFPOp(self.shaped(t), v, loc=self.loc).result

    def uitofp(self, v, t):
        return arith.UIToFPOp(self.shaped(t), v, loc=self.loc).result

    def bitcast(self, v, t):
        return arith.BitcastOp(self.shaped(t), v, loc=self.loc).result

    def fptosi(self, v, t):
        return arith.FPToSIOp(self.shaped(t), v, loc=self.loc).result

    def shrsi(self, a, b):
        return arith.ShRSIOp(a, b, loc=self.loc).result

    def index_cast(self, v, t):
        return arith.IndexCastOp(self.shaped(t), v, loc=self.loc).result

    def maxui(self, a, b):
        return arith.MaxUIOp(a, b, loc=self.loc).result

    def fneg(self, a):
        return arith.NegFOp(a, loc=self.loc).result

    def absf(self, a):
        return math.AbsFOp(a, loc=self.loc).result

    def maximumf(self, a, b):
        """``arith.maximumf`` (NaN if either is NaN)."""
        return arith.MaximumFOp(a, b, loc=self.loc).result

    def minimumf(self, a, b):
        return arith.MinimumFOp(a, b, loc=self.loc).result

    def cmpf(self, pred: str, a, b):
        return arith.CmpFOp(getattr(arith.CmpFPredicate, pred.upper()), a, b, loc=self.loc).result

    def minui(self, a, b):
        return arith.MinUIOp(a, b, loc=self.loc).result

    def maxsi(self, a, b):
        return arith.MaxSIOp(a, b, loc=self.loc).result

    def minsi(self, a, b):
        return arith.MinSIOp(a, b, loc=self.loc).result

    def roundeven(self, v):
        return math.RoundEvenOp(v, loc=self.loc).result

    def is_nan(self, v):
        """``v != v`` lane by lane (``cmpf uno``)."""
        return arith.CmpFOp(arith.CmpFPredicate.UNO, v, v, loc=self.loc).result


class KernelBuilder(ArithBuilder):
    """Emit kernel IR; constants go to ``const_ip`` (before the kernel), once each."""

    def __init__(self, const_ip: ir.InsertionPoint):
        super().__init__()
        self.const_ip = const_ip
        self._consts: dict[tuple, ir.Value] = {}

    def _constant(self, key, t: ir.Type, attr) -> ir.Value:
        hit = self._consts.get(key)
        if hit is None:
            with self.const_ip:
                hit = arith.ConstantOp(t, attr).result
            self._consts[key] = hit
        return hit

    def idx(self, value: int) -> ir.Value:
        return self.const(value, self.index)

    # -- index arithmetic (folded when static) ------------------------------

    def add(self, a, b) -> ir.Value:
        return arith.AddIOp(self._i(a), self._i(b)).result

    def mul(self, a, b) -> ir.Value:
        return arith.MulIOp(self._i(a), self._i(b)).result

    def sub(self, a, b) -> ir.Value:
        return arith.SubIOp(self._i(a), self._i(b)).result

    def min(self, a, b) -> ir.Value:
        return arith.MinSIOp(self._i(a), self._i(b)).result

    def max(self, a, b) -> ir.Value:
        return arith.MaxSIOp(self._i(a), self._i(b)).result

    def divu(self, a, b) -> ir.Value:
        return arith.DivUIOp(self._i(a), self._i(b)).result

    def remu(self, a, b) -> ir.Value:
        return arith.RemUIOp(self._i(a), self._i(b)).result

    def ceildivu(self, a, b) -> ir.Value:
        return arith.CeilDivUIOp(self._i(a), self._i(b)).result

    def icmp(self, pred: str, a, b) -> ir.Value:
        return arith.CmpIOp(getattr(arith.CmpIPredicate, pred), self._i(a), self._i(b)).result

    def _i(self, v) -> ir.Value:
        return self.idx(v) if isinstance(v, int) else v

    # -- loops -------------------------------------------------------------------

    @contextmanager
    def loop(self, lb, ub, step, iter_args: Sequence[ir.Value] = ()):
        """``scf.for``; the body must call ``loop.yield_`` when it carries values."""
        op = scf.ForOp(self._i(lb), self._i(ub), self._i(step), list(iter_args))
        loop = Loop(op)
        with ir.InsertionPoint(op.body):
            yield loop
            if not loop._yielded:
                scf.YieldOp([])

    @contextmanager
    def if_(self, cond: ir.Value):
        """``scf.if`` without results or else branch."""
        op = scf.IfOp(cond)
        with ir.InsertionPoint(op.then_block):
            yield
            scf.YieldOp([])

    @contextmanager
    def parallel(self, lb, ub, step):
        """One-dimensional ``scf.parallel`` without reductions; yields the iv."""
        op = scf.ParallelOp([], [self._i(lb)], [self._i(ub)], [self._i(step)], [])
        block = op.regions[0].blocks.append(self.index)
        with ir.InsertionPoint(block):
            yield block.arguments[0]
            scf.ReduceOp([], 0)

    # -- memory ------------------------------------------------------------------

    def vload(self, mem: ir.Value, indices, n: int, elem: ir.Type | None = None) -> ir.Value:
        elem = elem or ir.MemRefType(mem.type).element_type
        return vector.LoadOp(self.vec(n, elem), mem, [self._i(i) for i in indices]).result

    def vstore(self, v: ir.Value, mem: ir.Value, indices) -> None:
        vector.StoreOp(v, mem, [self._i(i) for i in indices])

    def load_lanes(self, mem: ir.Value, indices, n: int, valid=None) -> ir.Value:
        """``n`` lanes from ``mem``; with ``valid`` (lane count), lanes past it read 0."""
        if valid is None:
            return self.vload(mem, indices, n)
        elem = ir.MemRefType(mem.type).element_type
        zero = 0.0 if isinstance(elem, ir.FloatType) else 0
        return self.masked_vload(
            mem, indices, self.mask(n, valid), self.const(zero, self.vec(n, elem))
        )

    def store_lanes(self, v: ir.Value, mem: ir.Value, indices, valid=None) -> None:
        """Store ``v``; with ``valid`` (lane count), only the lanes before it."""
        if valid is None:
            self.vstore(v, mem, indices)
        else:
            n = ir.VectorType(v.type).shape[0]
            self.masked_vstore(v, mem, indices, self.mask(n, valid))

    def masked_vload(self, mem, indices, mask, passthru) -> ir.Value:
        return vector.MaskedLoadOp(
            passthru.type, mem, [self._i(i) for i in indices], mask, passthru
        ).result

    def masked_vstore(self, v, mem, indices, mask) -> None:
        vector.MaskedStoreOp(mem, [self._i(i) for i in indices], mask, v)

    def load(self, mem: ir.Value, indices) -> ir.Value:
        return memref.LoadOp(mem, [self._i(i) for i in indices]).result

    def store(self, v: ir.Value, mem: ir.Value, indices) -> None:
        memref.StoreOp(v, mem, [self._i(i) for i in indices])

    def prefetch(self, mem: ir.Value, indices, locality: int = 3, write: bool = False) -> None:
        """``memref.prefetch`` into the data cache, for reading or (``write``)
        for writing (x86 ``prefetchw`` where the CPU has it)."""
        i32 = ir.IntegerType.get_signless(32)
        memref.PrefetchOp(
            mem, [self._i(i) for i in indices], write, ir.IntegerAttr.get(i32, locality), True
        )

    def alloc(
        self,
        shape: Sequence[int],
        elem: ir.Type,
        dynamic: Sequence[ir.Value] = (),
        *,
        alignment: int = 64,
    ) -> ir.Value:
        """``memref.alloc`` (``-1`` in ``shape`` marks a dynamic size)."""
        t = ir.MemRefType.get(
            [ir.ShapedType.get_dynamic_size() if s < 0 else s for s in shape], elem
        )
        i64 = ir.IntegerType.get_signless(64)
        return memref.AllocOp(
            t, list(dynamic), [], alignment=ir.IntegerAttr.get(i64, alignment)
        ).result

    def dealloc(self, mem: ir.Value) -> None:
        memref.DeallocOp(mem)

    def as_bytes(self, mem: ir.Value) -> ir.Value:
        """The same buffer seen as ``i8`` elements (one byte per element).

        FIXME(upstream): there is no memref element-type cast.  Every
        element type this is used on (f8/f6/f4/E8M0/i8) is one byte per
        element in memory, and both memref types lower to the same LLVM
        descriptor, so ``reconcile-unrealized-casts`` folds this cast away.
        No upstream issue found (the closest: a ``memref.bitcast`` proposed
        in iree-org/iree#22712; ``arith.bitcast`` on memrefs lowers to a
        no-op since llvm-project#125148).
        """
        t = ir.MemRefType(mem.type)
        if t.element_type == self.i8:
            return mem
        shape = [
            ir.ShapedType.get_dynamic_size() if t.is_dynamic_dim(i) else t.shape[i]
            for i in range(t.rank)
        ]
        to = ir.MemRefType.get(shape, self.i8, layout=t.layout)
        return builtin.UnrealizedConversionCastOp([to], [mem]).results[0]

    def dim(self, mem: ir.Value, i: int) -> ir.Value:
        return memref.DimOp(mem, self.idx(i)).result

    # -- vectors -------------------------------------------------------------------

    def broadcast(self, s: ir.Value, n: int) -> ir.Value:
        return vector.BroadcastOp(self.vec(n, s.type), s).result

    def slice(self, v: ir.Value, offset: int, size: int) -> ir.Value:
        vt = ir.VectorType(v.type)
        if offset == 0 and size == vt.shape[0]:
            return v
        return vector.ExtractStridedSliceOp(
            self.vec(size, vt.element_type), v, [offset], [size], [1]
        ).result

    def fma(self, a, b, c) -> ir.Value:
        return vector.FMAOp(a, b, c).result

    def shuffle(self, a: ir.Value, b: ir.Value, mask: Sequence[int]) -> ir.Value:
        return vector.ShuffleOp(a, b, list(mask)).result

    def vbitcast(self, v: ir.Value, n: int, elem: ir.Type) -> ir.Value:
        """``vector.bitcast`` to ``vector<n x elem>`` (same total width)."""
        return vector.BitCastOp(self.vec(n, elem), v).result

    def intrinsic(self, name: str, result: ir.Type, args: Sequence[ir.Value]) -> ir.Value:
        """``llvm.call_intrinsic`` (only for features :mod:`.cpu` reports)."""
        return llvm.CallIntrinsicOp(result, ir.StringAttr.get(name), list(args), [], []).result

    def mask(self, n: int, count) -> ir.Value:
        """``vector.create_mask`` of ``n`` lanes, the first ``count`` set (clamped to [0, n])."""
        return vector.CreateMaskOp(self.vec(n, self.i1), [self._i(count)]).result

    # -- vector reductions and gathers (the quantize/dequantize kernels) ------------

    def reduce(self, kind: str, v: ir.Value) -> ir.Value:
        """``vector.reduction <kind>`` (``maxui``, ``add``, ...) to a scalar."""
        attr = ir.Attribute.parse(f"#vector.kind<{kind}>")
        return vector.ReductionOp(ir.VectorType(v.type).element_type, attr, v).result

    def gather(self, mem: ir.Value, indices, idx: ir.Value, mask, passthru) -> ir.Value:
        """``vector.gather``: lane ``l`` reads ``mem[indices..., + idx[l]]`` where ``mask``."""
        return vector.GatherOp(
            passthru.type, mem, [self._i(i) for i in indices], idx, mask, passthru
        ).result

    def from_elements(self, values: Sequence[ir.Value]) -> ir.Value:
        """A vector of the given scalars (``vector.from_elements``)."""
        return vector.FromElementsOp(self.vec(len(values), values[0].type), list(values)).result

"""The ``mx-to-linalg`` lowerings of ``mx.quantize_block`` and
``mx.dequantize_block`` for ``f8E4M3FN`` scales (NVFP4), with their f32
``global_scale`` operand fed to the generics as a rank-0 tensor.

The numerics of the oracle (:mod:`mlir_mx.numerics.nvfp4`, compressed-tensors'
order, ``docs/numerics.md``), one f32 rounding per step:

* scales: ``s = min(g * (amax / 6), 448)`` rounded to E4M3 by ``truncf``
  (RNE), 0.125 where that is zero, E4M3 NaN (0x7f) where the block holds a
  NaN or an Inf;
* elements: ``p = x / (extf(s) / g)`` (+0 where ``p`` is zero or NaN),
  clamped to +-6, rounded to E2M1 by ``truncf``;
* dequantize: ``extf(code) * (extf(s) / g)``;
* ``mx.block_matmul`` with an NVFP4 rhs (``numerics.matmul``, "NVFP4 B"):
  the matmul into a zero-filled ``c`` with the E4M3 scales as ``sb`` (the
  tagged pair ``mx-matmul-kernels`` replaces), then one elementwise generic
  ``acc + c / g`` (:func:`divide_into_acc`): one f32 division, one f32
  addition per output.

The generics carry no kernel tag: ``mx-quantize-kernels``' compiled
kernels are OCP MX (E8M0) ones, so these lower through the stock path.

FIXME(upstream): not lowered to ``arith.scaling_extf`` /
``arith.scaling_truncf``: at 22.1.8 their verifier accepts an ``f8E4M3FN``
scale, but ``arith-expand`` (their only lowering) expands ``f8E8M0FNU``
scales only and fails with "failed to legalize operation
'arith.scaling_extf'" on any other (``tests/execution/test_nvfp4_e2e.py``
checks it); non-E8M0 scales are under review upstream (llvm-project PR
#217892).  Even then the ops hold no global scale: NVFP4's division by it
and the zero-block scale are compressed-tensors' arithmetic around them.
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import tensor

from mlir_mx.dialect.types import MXTensorType
from mlir_mx.kernels.common.builder import ArithBuilder
from mlir_mx.numerics.formats import E4M3_SCALE_TYPE, ELEMENT_FORMATS
from mlir_mx.numerics.nvfp4 import E4M3_NAN_CODE, ZERO_BLOCK_SCALE
from mlir_mx.passes.mx_to_linalg import helpers as h

__all__ = ["dequantize_nvfp4", "divide_into_acc", "quantize_nvfp4", "zeros_like"]

_E4M3 = ELEMENT_FORMATS[E4M3_SCALE_TYPE]


def _scalar_tensor(g: ir.Value) -> ir.Value:
    """``g`` (an f32) as a ``tensor<f32>``, read through an empty map."""
    return tensor.FromElementsOp(ir.RankedTensorType.get([], h.f32()), [g]).result


def _factor(b: ArithBuilder, s: ir.Value, g: ir.Value) -> ir.Value:
    """A block's factor ``f32(extf(s) / g)``."""
    return b.fdiv(b.extf(s, b.f32), g)


def _elementwise_maps(t: MXTensorType) -> list:
    """The maps of an elementwise generic over (values, block scales, the
    global scale as a 0-d tensor, out)."""
    rank = t.rank
    return [
        h.identity_map(rank),
        h.block_map(rank, t.block_axis, t.block_size),
        ir.AffineMap.get(rank, 0, []),
        h.identity_map(rank),
    ]


def dequantize_nvfp4(mant: ir.Value, scale: ir.Value, g: ir.Value, t: MXTensorType) -> ir.Value:
    """One elementwise generic: ``extf(m) * (extf(s) / g)``."""
    rank, maps = t.rank, _elementwise_maps(t)

    def body(m, s, gv, _o):
        b = ArithBuilder()
        return [b.fmul(h.element_to_f32(m, t.element_type), _factor(b, s, gv))]

    out = h.empty(t.shape, h.f32())
    return h.generic(
        [mant, scale, _scalar_tensor(g)], [out], maps, [h.PARALLEL] * rank, body
    )[0]


def _scale_body(fmt, scale_t):
    def body(a, gv, _o):
        b = ArithBuilder()
        f = lambda v: b.const(v, b.f32)  # noqa: E731
        s = b.fmul(gv, b.fdiv(a, f(fmt.max_normal)))
        s = b.truncf(b.minimumf(s, f(_E4M3.max_normal)), scale_t)  # Inf saturates first
        zero = b.cmpf("oeq", b.extf(s, b.f32), f(0.0))
        s = b.select(zero, b.truncf(f(ZERO_BLOCK_SCALE), scale_t), s)
        finite = b.cmpf("olt", a, f(float("inf")))  # false for NaN and Inf
        nan = b.bitcast(b.const(E4M3_NAN_CODE, b.i8), scale_t)
        return [b.select(finite, s, nan)]

    return body


def quantize_nvfp4(x: ir.Value, g: ir.Value, t: MXTensorType) -> tuple[ir.Value, ir.Value]:
    """Three generics: block amax, E4M3 scales, elements."""
    fmt = ELEMENT_FORMATS[t.element_type]
    g0 = _scalar_tensor(g)
    amax = h.block_amax(x, t)
    srank = len(t.scale_shape)
    scale_t = h.scalar_type(t.scale_type)
    scale = h.generic(
        [amax, g0],
        [h.empty(t.scale_shape, scale_t)],
        [h.identity_map(srank), ir.AffineMap.get(srank, 0, []), h.identity_map(srank)],
        [h.PARALLEL] * srank,
        _scale_body(fmt, scale_t),
    )[0]
    rank, maps = t.rank, _elementwise_maps(t)

    def body(v, s, gv, _o):
        b = ArithBuilder()
        f = lambda c: b.const(c, b.f32)  # noqa: E731
        p = b.fdiv(v, _factor(b, s, gv))
        p = b.select(b.cmpf("one", p, f(0.0)), p, f(0.0))  # zero (either sign) and NaN: +0
        p = b.minimumf(b.maximumf(p, f(-fmt.max_normal)), f(fmt.max_normal))
        return [b.truncf(p, h.scalar_type(t.element_type))]

    out = h.empty(t.shape, h.scalar_type(t.element_type))
    mant = h.generic([x, scale, g0], [out], maps, [h.PARALLEL] * rank, body)[0]
    return mant, scale


def zeros_like(acc: ir.Value) -> ir.Value:
    """A zero-filled f32 tensor of ``acc``'s type: where an NVFP4 matmul
    accumulates before the division by the global scale."""
    zero = ArithBuilder().const(0.0, h.f32())
    shape = ir.RankedTensorType(acc.type).shape
    return h.linalg_dialect().fill(zero, outs=[h.empty(shape, h.f32())])


def divide_into_acc(c: ir.Value, g: ir.Value, acc: ir.Value) -> list[ir.Value]:
    """One elementwise generic into ``acc`` (``outs``): ``acc + c / g``."""
    rank = ir.RankedTensorType(acc.type).rank
    maps = [h.identity_map(rank), ir.AffineMap.get(rank, 0, []), h.identity_map(rank)]

    def body(cv, gv, a):
        b = ArithBuilder()
        return [b.fadd(a, b.fdiv(cv, gv))]

    return h.generic([c, _scalar_tensor(g)], [acc], maps, [h.PARALLEL] * rank, body)

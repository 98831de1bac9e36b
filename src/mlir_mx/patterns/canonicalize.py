"""Canonicalization patterns of the mx dialect, one small function each.

Each pattern is a callback for ``mlir.rewrite.RewritePatternSet.add``: it
returns a truthy value when it does NOT match (upstream's convention for
Python patterns) and ``None`` after rewriting.  Guards come first.

v1 patterns (same behaviour as the C++ v1):

* :func:`fold_scale_chain`     ``fold_scale(fold_scale(t, c1), c2) -> fold_scale(t, c1*c2)``
* :func:`fold_scale_identity`  ``fold_scale(t, 1.0) -> t``
* :func:`dequantize_of_fold_scale`
  ``dequantize_block(fold_scale(t, a)) -> mulf(dequantize_block(t), splat(a))``

New:

* :func:`quantize_of_dequantize` ``quantize_block(dequantize_block(t)) -> t``
  when the types match (see ``docs/dialect.md``: exact on real values because
  E8M0 scales are powers of two).
* :func:`erase_dead_mx_op` erases an mx op whose result is unused: IRDL ops
  have no ``Pure`` trait at 22.1.8, so upstream's DCE keeps them.

A ``fold_scale`` that reaches a ``return`` or a ``block_matmul`` is left as
one op; ``mx-to-linalg`` lowers it.  No pattern here produces IR that
``mx-to-linalg`` cannot lower.
"""

from __future__ import annotations

import numpy as np
from mlir import ir
from mlir.dialects import arith, tensor
from mlir.rewrite import RewritePatternSet

from mlir_mx.dialect import ops as mx

__all__ = ["populate_canonicalization_patterns", "constant_f32"]

NO_MATCH = True  # truthy return = pattern did not apply


def constant_f32(value: ir.Value) -> float | None:
    """The value of an ``arith.constant`` f32 scalar, else None."""
    owner = value.owner
    if not isinstance(owner, ir.OpView | ir.Operation):
        return None
    op = getattr(owner, "operation", owner)
    if op.name != "arith.constant" or not isinstance(value.type.maybe_downcast(), ir.F32Type):
        return None
    attr = op.attributes["value"]
    fattr = attr.maybe_downcast() if hasattr(attr, "maybe_downcast") else attr
    if not isinstance(fattr, ir.FloatAttr):
        return None
    return float(fattr.value)


def _producer(value: ir.Value, name: str):
    """The op named ``name`` that defines ``value``, else None."""
    owner = value.owner
    op = getattr(owner, "operation", owner)
    if isinstance(op, ir.Operation) and op.name == name:
        return op
    return None


def _f32_constant(v: float, loc) -> ir.Value:
    f32 = ir.F32Type.get()
    return arith.ConstantOp(f32, ir.FloatAttr.get(f32, float(v)), loc=loc).result


def fold_scale_chain(op, rewriter) -> bool | None:
    """``fold_scale(fold_scale(t, c1), c2)`` -> ``fold_scale(t, c1 * c2)`` (constants).

    The product is rounded to f32 once; for powers of two it is exact.
    """
    op = op.operation
    inner = _producer(op.operands[0], "mx.fold_scale")
    if inner is None:
        return NO_MATCH
    c2, c1 = constant_f32(op.operands[1]), constant_f32(inner.operands[1])
    if c1 is None or c2 is None:
        return NO_MATCH
    product = float(np.float32(c1) * np.float32(c2))
    with rewriter.ip, op.location:
        alpha = _f32_constant(product, op.location)
        new = mx.fold_scale(inner.operands[0], alpha)
    rewriter.replace_op(op, [new])
    return None


def _chain_foldable(fs: ir.Operation) -> bool:
    """True when fold_scale_chain or fold_scale_identity applies to ``fs``."""
    alpha = constant_f32(fs.operands[1])
    if alpha == 1.0:
        return True
    inner = _producer(fs.operands[0], "mx.fold_scale")
    return alpha is not None and inner is not None and constant_f32(inner.operands[1]) is not None


def fold_scale_identity(op, rewriter) -> bool | None:
    """``fold_scale(t, 1.0)`` -> ``t``."""
    op = op.operation
    if constant_f32(op.operands[1]) != 1.0:
        return NO_MATCH
    rewriter.replace_op(op, [op.operands[0]])
    return None


def dequantize_of_fold_scale(op, rewriter) -> bool | None:
    """``dequantize_block(fold_scale(t, a))`` -> ``mulf(dequantize_block(t), splat(a))``.

    ``a`` may be a runtime value.  fold_scale multiplies the real values by
    ``a``; dequantize yields the real values, so the product is the same.
    """
    op = op.operation
    fs = _producer(op.operands[0], "mx.fold_scale")
    if fs is None or _chain_foldable(fs):
        return NO_MATCH  # let fold_scale_chain/identity fold the chain first
    result_type = op.results[0].type
    with rewriter.ip, op.location:
        d = mx.dequantize_block(fs.operands[0], result_type)
        splat = tensor.SplatOp(result_type, fs.operands[1], []).result
        prod = arith.MulFOp(d, splat).result
    rewriter.replace_op(op, [prod])
    return None


def quantize_of_dequantize(op, rewriter) -> bool | None:
    """``quantize_block(dequantize_block(t))`` -> ``t`` when the types match."""
    op = op.operation
    dq = _producer(op.operands[0], "mx.dequantize_block")
    if dq is None or str(dq.operands[0].type) != str(op.results[0].type):
        return NO_MATCH
    rewriter.replace_op(op, [dq.operands[0]])
    return None


def erase_dead_mx_op(op, rewriter) -> bool | None:
    """Erase an mx op whose result has no use (all mx ops are pure)."""
    op = op.operation
    if any(True for _ in op.results[0].uses):
        return NO_MATCH
    rewriter.erase_op(op)
    return None


def populate_canonicalization_patterns(patterns: RewritePatternSet) -> RewritePatternSet:
    """Add every mx canonicalization pattern to ``patterns``."""
    patterns.add("mx.fold_scale", fold_scale_chain)
    patterns.add("mx.fold_scale", fold_scale_identity, benefit=2)
    patterns.add("mx.dequantize_block", dequantize_of_fold_scale)
    patterns.add("mx.quantize_block", quantize_of_dequantize)
    for name in ("mx.quantize_block", "mx.dequantize_block", "mx.block_matmul", "mx.fold_scale"):
        patterns.add(name, erase_dead_mx_op, benefit=3)
    return patterns

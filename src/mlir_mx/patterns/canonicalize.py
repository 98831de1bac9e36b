"""Canonicalization patterns of the mx dialect, one small function each.

Each pattern is a callback for ``mlir.rewrite.RewritePatternSet.add``: it
returns a truthy value when it does NOT match (upstream's convention for
Python patterns) and ``None`` after rewriting.  Guards come first.

A canonicalization never changes what a program computes, bit for bit, on
any input (``docs/dialect.md``).  The patterns of ``mx-canonicalize``:

* :func:`fold_scale_identity`  ``fold_scale(t, 1.0) -> t`` (fold_scale by
  ``2^0`` moves no scale code and keeps NaN blocks: exact).
* :func:`quantize_of_dequantize` ``quantize_block(dequantize_block(t)) -> t``
  when the types match AND ``t`` is produced by a ``quantize_block``: its
  encoding is canonical, so requantizing reproduces it bit for bit.
* :func:`erase_dead_mx_op` erases an mx op whose result is unused: IRDL ops
  have no ``Pure`` trait at 22.1.8, so upstream's DCE keeps them.

The v1 rewrites that skip a requantization (``fold_scale`` chains,
``dequantize(fold_scale(t, a)) -> dequantize(t) * a``) are not exact; they
are the opt-in pass ``mx-fuse-scales`` (:mod:`mlir_mx.passes.fuse_scales`).
No pattern here produces IR that ``mx-to-linalg`` cannot lower.
"""

from __future__ import annotations

from mlir import ir
from mlir.rewrite import RewritePatternSet

__all__ = ["populate_canonicalization_patterns", "constant_f32", "producer"]

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


def producer(value: ir.Value, name: str):
    """The op named ``name`` that defines ``value``, else None."""
    owner = value.owner
    op = getattr(owner, "operation", owner)
    if isinstance(op, ir.Operation) and op.name == name:
        return op
    return None


def fold_scale_identity(op, rewriter) -> bool | None:
    """``fold_scale(t, 1.0)`` -> ``t``."""
    op = op.operation
    if constant_f32(op.operands[1]) != 1.0:
        return NO_MATCH
    rewriter.replace_op(op, [op.operands[0]])
    return None


def quantize_of_dequantize(op, rewriter) -> bool | None:
    """``quantize_block(dequantize_block(t))`` -> ``t`` when the types match and
    ``t = quantize_block(x)``.

    Other encodings of ``t`` (function arguments, fold_scale results) may be
    non-canonical or hold element NaN codes, which requantizing changes (a
    NaN element makes the whole block NaN): no rewrite there.
    """
    op = op.operation
    dq = producer(op.operands[0], "mx.dequantize_block")
    if dq is None or str(dq.operands[0].type) != str(op.results[0].type):
        return NO_MATCH
    if producer(dq.operands[0], "mx.quantize_block") is None:
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
    patterns.add("mx.fold_scale", fold_scale_identity, benefit=2)
    patterns.add("mx.quantize_block", quantize_of_dequantize)
    for name in ("mx.quantize_block", "mx.dequantize_block", "mx.block_matmul", "mx.fold_scale"):
        patterns.add(name, erase_dead_mx_op, benefit=3)
    return patterns

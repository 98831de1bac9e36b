"""``mx-canonicalize`` and the combined ``canonicalize``, with their patterns.

``mx-canonicalize`` applies the mx patterns below greedily (with op folding)
to a fixed point.  ``canonicalize`` runs ``mx-canonicalize`` and then
upstream's ``canonicalize`` with the options given, so ``mx-opt
--canonicalize`` does what a user of mlir-opt expects on a module that
contains mx ops.

Each pattern is a callback for ``mlir.rewrite.RewritePatternSet.add``: it
returns a truthy value when it does NOT match (upstream's convention for
Python patterns) and ``None`` after rewriting.  Guards come first.

A canonicalization never changes what a program computes, bit for bit, on
any input (``docs/dialect.md``).  The patterns:

* :func:`fold_scale_identity`  ``fold_scale(t, 1.0) -> t`` (fold_scale by
  ``2^0`` moves no scale code and keeps NaN blocks: exact).
* :func:`quantize_of_dequantize` ``quantize_block(dequantize_block(t)) -> t``
  when the types match AND ``t`` is produced by a ``quantize_block``: its
  encoding is canonical, so requantizing reproduces it bit for bit.  Not
  for ``f8E4M3FN`` scales (NVFP4), whose encoding is not canonical: a
  negative value that rounds to zero is the code -0, which dequantizes to
  -0.0 and requantizes to +0 (and E4M3-subnormal block scales move).
* :func:`erase_dead_mx_op` erases an mx op whose result is unused: IRDL ops
  have no ``Pure`` trait at 22.1.8, so upstream's DCE keeps them.

The v1 rewrites that skip a requantization (``fold_scale`` chains,
``dequantize(fold_scale(t, a)) -> dequantize(t) * a``) are not exact; they
are the opt-in pass ``mx-fuse-scales`` (:mod:`mlir_mx.passes.fuse_scales`),
which reuses :func:`fold_scale_identity` and :func:`erase_dead_mx_op`.
No pattern here produces IR that ``mx-to-linalg`` cannot lower.
"""

from __future__ import annotations

from mlir import ir
from mlir.rewrite import RewritePatternSet, apply_patterns_and_fold_greedily

from mlir_mx.dialect.irdl import OP_NAMES
from mlir_mx.ir_utils import constant_float, producer
from mlir_mx.passes.registry import register_pass, register_upstream_extension

__all__ = [
    "NO_MATCH",
    "erase_dead_mx_op",
    "fold_scale_identity",
    "mx_canonicalize",
    "populate_canonicalization_patterns",
    "quantize_of_dequantize",
]

NO_MATCH = True  # truthy return = pattern did not apply


def fold_scale_identity(op, rewriter) -> bool | None:
    """``fold_scale(t, 1.0)`` -> ``t``."""
    op = op.operation
    if constant_float(op.operands[1]) != 1.0:
        return NO_MATCH
    rewriter.replace_op(op, [op.operands[0]])
    return None


def quantize_of_dequantize(op, rewriter) -> bool | None:
    """``quantize_block(dequantize_block(t))`` -> ``t`` when the types match and
    ``t = quantize_block(x)``.

    Other encodings of ``t`` (function arguments, fold_scale results) may be
    non-canonical or hold element NaN codes, which requantizing changes (a
    NaN element makes the whole block NaN): no rewrite there.  Nor for
    NVFP4 (``f8E4M3FN`` scales: a global_scale operand), whose
    quantize_block encodings are not canonical (the module docstring).
    """
    op = op.operation
    dq = producer(op.operands[0], "mx.dequantize_block")
    if dq is None or str(dq.operands[0].type) != str(op.results[0].type):
        return NO_MATCH
    if len(list(op.operands)) > 1:  # NVFP4
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
    for name in OP_NAMES:
        patterns.add(name, erase_dead_mx_op, benefit=3)
    return patterns


def _frozen(context: ir.Context):
    with context:
        return populate_canonicalization_patterns(RewritePatternSet()).freeze()


@register_pass(
    "mx-canonicalize",
    "Apply the mx dialect's canonicalization patterns, all exact: fold_scale(t, 1.0) -> t, "
    "quantize(dequantize(quantize(x))) -> quantize(x), dead mx op erasure",
)
def mx_canonicalize(op: ir.Operation) -> None:
    """Rewrite ``op`` (usually the module) with the mx patterns to a fixed point."""
    apply_patterns_and_fold_greedily(op, _frozen(op.context))


register_upstream_extension(
    "canonicalize",
    before="mx-canonicalize",
    summary="Canonicalize: the mx patterns (mx-canonicalize), then upstream's canonicalizer",
)

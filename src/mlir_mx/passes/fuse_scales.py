"""``mx-fuse-scales``: opt-in rewrites that skip the requantization of ``fold_scale``.

``fold_scale(t, alpha)`` is an MX tensor (``docs/dialect.md``): alpha = 2^p
moves the scale codes when that stays in range, anything else requantizes.
These rewrites trade that definition for fewer ops, so they are NOT
canonicalizations and run only when asked for:

* ``fold_scale(fold_scale(t, c1), c2)`` -> ``fold_scale(t, c1 * c2)`` for
  constant alphas (the product rounded to f32 once);
* ``dequantize_block(fold_scale(t, a))`` -> ``dequantize_block(t) * a``
  (``a`` may be a runtime value; the multiply stays on tensors and
  ``lower-to-llvm`` converts it with ``convert-elementwise-to-linalg``);
* ``fold_scale(t, 1.0)`` -> ``t`` (exact; also in ``mx-canonicalize``).

What changes (``docs/passes/mx-fuse-scales.md``): the fused forms skip one
requantization, so a non-power-of-two alpha gives the f32 product instead
of its MX rounding (3.375 instead of 3.5 for 1.125 x 3 in E4M3); a block
whose scale code would leave [0, 254] is no longer requantized (no NaN
block from an overflow, no flush at the bottom of the range); a chain of
powers of two can move a code out of range and back.  Results never get
less accurate than the f32 arithmetic of the fused form.
"""

from __future__ import annotations

import numpy as np
from mlir import ir
from mlir.dialects import arith, tensor
from mlir.rewrite import RewritePatternSet, apply_patterns_and_fold_greedily

from mlir_mx.dialect import ops as mx
from mlir_mx.passes.registry import register_pass
from mlir_mx.patterns.canonicalize import (
    NO_MATCH,
    constant_f32,
    erase_dead_mx_op,
    fold_scale_identity,
    producer,
)

__all__ = ["mx_fuse_scales", "fold_scale_chain", "dequantize_of_fold_scale"]


def _f32_constant(v: float, loc) -> ir.Value:
    f32 = ir.F32Type.get()
    return arith.ConstantOp(f32, ir.FloatAttr.get(f32, float(v)), loc=loc).result


def fold_scale_chain(op, rewriter) -> bool | None:
    """``fold_scale(fold_scale(t, c1), c2)`` -> ``fold_scale(t, c1 * c2)`` (constants).

    The product is rounded to f32 once.
    """
    op = op.operation
    inner = producer(op.operands[0], "mx.fold_scale")
    if inner is None:
        return NO_MATCH
    c2, c1 = constant_f32(op.operands[1]), constant_f32(inner.operands[1])
    if c1 is None or c2 is None:
        return NO_MATCH
    with np.errstate(over="ignore", invalid="ignore"):
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
    inner = producer(fs.operands[0], "mx.fold_scale")
    return alpha is not None and inner is not None and constant_f32(inner.operands[1]) is not None


def dequantize_of_fold_scale(op, rewriter) -> bool | None:
    """``dequantize_block(fold_scale(t, a))`` -> ``mulf(dequantize_block(t), splat(a))``."""
    op = op.operation
    fs = producer(op.operands[0], "mx.fold_scale")
    if fs is None or _chain_foldable(fs):
        return NO_MATCH  # let the chain/identity fold first
    result_type = op.results[0].type
    with rewriter.ip, op.location:
        d = mx.dequantize_block(fs.operands[0], result_type)
        splat = tensor.SplatOp(result_type, fs.operands[1], []).result
        prod = arith.MulFOp(d, splat).result
    rewriter.replace_op(op, [prod])
    return None


def _frozen(context: ir.Context):
    with context:
        patterns = RewritePatternSet()
        patterns.add("mx.fold_scale", fold_scale_chain)
        patterns.add("mx.fold_scale", fold_scale_identity, benefit=2)
        patterns.add("mx.dequantize_block", dequantize_of_fold_scale)
        for name in ("mx.quantize_block", "mx.dequantize_block", "mx.block_matmul", "mx.fold_scale"):
            patterns.add(name, erase_dead_mx_op, benefit=3)
        return patterns.freeze()


@register_pass(
    "mx-fuse-scales",
    "Opt-in, not exact: fold constant fold_scale chains and fuse "
    "dequantize(fold_scale(t, a)) into dequantize(t) * a, skipping the "
    "requantization fold_scale defines (results may differ by one MX rounding)",
)
def mx_fuse_scales(op: ir.Operation) -> None:
    """Rewrite ``op`` (usually the module) with the fusion patterns to a fixed point."""
    apply_patterns_and_fold_greedily(op, _frozen(op.context))

"""``mx-canonicalize`` and the combined ``canonicalize``.

``mx-canonicalize`` applies the mx patterns of
:mod:`mlir_mx.patterns.canonicalize` greedily (with op folding) to a fixed
point.  ``canonicalize`` runs ``mx-canonicalize`` and then upstream's
``canonicalize`` with the options given, so ``mx-opt --canonicalize`` does
what a user of mlir-opt expects on a module that contains mx ops.
"""

from __future__ import annotations

from mlir import ir
from mlir.rewrite import RewritePatternSet, apply_patterns_and_fold_greedily

from mlir_mx.passes.registry import register_pass, register_upstream_extension
from mlir_mx.patterns.canonicalize import populate_canonicalization_patterns


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

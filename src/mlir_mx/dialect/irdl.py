"""The ``mx`` dialect as IRDL, loaded at run time into an upstream context.

IRDL is the mechanism MLIR 22.1.8 offers for defining a dialect without C++.
It gives us registered op names, a parametric type and operand/result counts;
everything IRDL cannot express (the v1 verifier rules, custom assembly) lives
in :mod:`mlir_mx.dialect.verifier` and :mod:`mlir_mx.dialect.syntax`.

FIXME(upstream): IRDL ops carry no traits at 22.1.8 (no ``Pure``), so
upstream ``canonicalize``/``cse`` neither erase dead mx ops nor merge them;
``mx-canonicalize`` erases dead mx ops itself.  ``mlir.dialects.ext``
(Python-defined dialects with traits) is newer than 22.1.8.
"""

from __future__ import annotations

import weakref

from mlir import ir
from mlir.dialects import irdl

__all__ = ["MX_IRDL", "load_dialect", "OP_NAMES"]

#: name -> (number of operands, number of results)
OP_NAMES = {
    "mx.quantize_block": (1, 1),
    "mx.dequantize_block": (1, 1),
    "mx.block_matmul": (3, 1),
    "mx.fold_scale": (2, 1),
}


def _op(name: str, operands: list[str]) -> str:
    lines = [f"  irdl.operation @{name} {{"]
    for i, _ in enumerate(operands):
        lines.append(f"    %o{i} = irdl.any")
    lines.append("    %r = irdl.any")
    ops = ", ".join(f"{n}: %o{i}" for i, n in enumerate(operands))
    lines.append(f"    irdl.operands({ops})")
    lines.append("    irdl.results(result: %r)")
    lines.append("  }")
    return "\n".join(lines)


#: The IRDL source of the dialect.  Each constraint variable is separate:
#: IRDL unifies uses of one SSA constraint, so sharing one ``irdl.any``
#: would force all parameters to be equal.
MX_IRDL = "\n".join(
    [
        "irdl.dialect @mx {",
        "  irdl.type @tensor {",
        "    %shape = irdl.any",
        "    %elem = irdl.any",
        "    %bs = irdl.any",
        "    %st = irdl.any",
        "    %axis = irdl.any",
        "    irdl.parameters(shape: %shape, element_type: %elem, block_size: %bs,"
        " scale_type: %st, axis: %axis)",
        "  }",
        _op("quantize_block", ["input"]),
        _op("dequantize_block", ["input"]),
        _op("block_matmul", ["lhs", "rhs", "acc"]),
        _op("fold_scale", ["input", "alpha"]),
        "}",
    ]
)

_loaded: weakref.WeakSet = weakref.WeakSet()


def load_dialect(context: ir.Context | None = None) -> ir.Context:
    """Load the mx dialect into ``context`` (default: the current one).

    Idempotent per context: loading twice is a no-op, and every context
    (fresh, repeated, interleaved) gets its own copy.
    """
    ctx = context or ir.Context.current
    if ctx in _loaded or ctx.is_registered_operation("mx.quantize_block"):
        _loaded.add(ctx)
        return ctx
    with ctx, ir.Location.unknown(ctx):
        module = ir.Module.parse(MX_IRDL)
        irdl.load_dialects(module)
    _loaded.add(ctx)
    return ctx

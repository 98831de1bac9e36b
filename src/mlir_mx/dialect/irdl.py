"""The ``mx`` dialect as IRDL, loaded at run time into an upstream context.

IRDL is the mechanism MLIR 22.1.8 offers for defining a dialect without C++.
It gives us registered op names, a parametric type and operand/result counts;
everything IRDL cannot express (the v1 verifier rules, custom assembly) lives
in :mod:`mlir_mx.dialect.verifier` and :mod:`mlir_mx.dialect.syntax`.

FIXME(upstream): IRDL ops carry no traits at 22.1.8 (no ``Pure``), so
upstream ``canonicalize``/``cse`` neither erase dead mx ops nor merge them;
``mx-canonicalize`` erases dead mx ops itself.  ``mlir.dialects.ext``
(Python-defined dialects, llvm-project#169045) with traits (#177735,
#179705; ``Pure`` effects #216773) is newer than 22.1.8.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

from mlir import ir
from mlir.dialects import irdl

from mlir_mx.errors import MXValueError, expect_type

__all__ = ["MX_IRDL", "OPS", "OP_NAMES", "OP_OPTIONAL", "OpDef", "load_dialect"]


@dataclass(frozen=True)
class OpDef:
    """One mx op: the one place its name, operands and meaning are written.

    Every other list of the ops (the IRDL text, the op counts the syntax
    layer checks, :class:`~mlir_mx.dialect.ops.OpView`'s accessors, the
    verifier's rules, the lowerings, the canonicalization patterns) is
    derived from :data:`OPS` or checked against it by
    ``tests/dialect/test_tables.py``.
    """

    mnemonic: str  # the name inside the dialect, ``quantize_block``
    operands: tuple[str, ...]  # operand names, in order; every op has one result
    summary: str
    #: Optional operands after ``operands`` (IRDL ``optional``): the NVFP4
    #: ``global_scale``, present exactly when an ``!mx.tensor`` involved has
    #: ``f8E4M3FN`` scales (the verifier's rule).
    optional: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        """The full op name, ``mx.quantize_block``."""
        return f"mx.{self.mnemonic}"


#: The four ops of the dialect (semantics: :mod:`mlir_mx.dialect.ops`).
OPS: tuple[OpDef, ...] = (
    OpDef(
        "quantize_block", ("input",), "f32 tensor -> !mx.tensor: OCP MX (or NVFP4) quantization",
        ("global_scale",),
    ),
    OpDef(
        "dequantize_block", ("input",), "!mx.tensor -> f32 tensor: element x scale",
        ("global_scale",),
    ),
    OpDef(
        "block_matmul", ("lhs", "rhs", "acc"), "acc + dequant(lhs) x rhs (rhs f32 or mx)",
        ("global_scale",),
    ),
    OpDef("fold_scale", ("input", "alpha"), "!mx.tensor x f32 alpha -> the same type"),
)

#: Full op name -> (number of operands, number of results); the optional
#: operands (:data:`OP_OPTIONAL`) are not counted.
OP_NAMES: dict[str, tuple[int, int]] = {op.name: (len(op.operands), 1) for op in OPS}
#: Full op name -> the names of its optional operands (may follow the others).
OP_OPTIONAL: dict[str, tuple[str, ...]] = {op.name: op.optional for op in OPS}


def _irdl_op(op: OpDef) -> str:
    lines = [f"  irdl.operation @{op.mnemonic} {{"]
    names = op.operands + op.optional
    for i, _ in enumerate(names):
        lines.append(f"    %o{i} = irdl.any")
    lines.append("    %r = irdl.any")
    operands = ", ".join(
        f"{n}: {'optional ' if i >= len(op.operands) else ''}%o{i}" for i, n in enumerate(names)
    )
    lines.append(f"    irdl.operands({operands})")
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
        *(_irdl_op(op) for op in OPS),
        "}",
    ]
)

_loaded: weakref.WeakSet = weakref.WeakSet()


def load_dialect(context: ir.Context | None = None) -> ir.Context:
    """Load the mx dialect into ``context`` (default: the current one).

    Idempotent per context: loading twice is a no-op, and every context
    (fresh, repeated, interleaved) gets its own copy.
    """
    if context is not None:
        expect_type(context, ir.Context, "context", "an ir.Context or None")
    ctx = context or ir.Context.current
    if ctx is None:
        raise MXValueError("context: None given and no ir.Context is current (use `with ir.Context():`)")
    if ctx in _loaded or ctx.is_registered_operation(OPS[0].name):
        _loaded.add(ctx)
        return ctx
    with ctx, ir.Location.unknown(ctx):
        module = ir.Module.parse(MX_IRDL)
        irdl.load_dialects(module)
    _loaded.add(ctx)
    return ctx

"""Checks on a module lowered to the LLVM dialect, before the JIT sees it.

The ExecutionEngine reports neither an op the pipeline left unconverted nor
an external function nothing defines in a useful way (the first fails with
an opaque message, the second prints "Symbols not found" from the lazy JIT
and hands back no function).  These checks name the op or the symbol, at
its location, as a :class:`~mlir_mx.diagnostics.DiagnosticError`.
"""

from __future__ import annotations

from pathlib import Path

from mlir import ir

from mlir_mx.diagnostics import Diagnostic, DiagnosticError
from mlir_mx.execution.libraries import symbol_address
from mlir_mx.ir_utils import collect, find_first

__all__ = ["check_lowered", "check_symbols", "external_functions"]


def check_lowered(module: ir.Module) -> None:
    """Name the first op the pipeline left outside the LLVM dialect.

    Conversions to LLVM are partial: an op nobody converts (an n-D
    ``vector.load``, an f8 ``arith.extf`` without our expansion) stays, and the
    ExecutionEngine then fails with an opaque message.  Say which op it is.
    """
    casts: list[ir.Operation] = []

    def outside(o) -> bool:
        if o.name == "builtin.unrealized_conversion_cast":
            casts.append(o)  # reported only when nothing else is left
            return False
        return not o.name.startswith("llvm.") and o.name != "builtin.module"

    first = find_first(module, outside) or (casts[0] if casts else None)
    if first is not None:
        raise DiagnosticError(
            Diagnostic.from_location(
                first.location,
                "error",
                f"lowering left '{first.name}' outside the LLVM dialect; "
                "the pipeline does not convert it",
            )
        )


def external_functions(module: ir.Module) -> list[str]:
    """The functions a lowered module declares without defining them."""
    return [
        ir.StringAttr(op.operation.attributes["sym_name"]).value
        for op in module.body.operations
        if op.operation.name == "llvm.func" and not op.operation.regions[0].blocks
    ]


def _referenced_symbols(module: ir.Module) -> set[str]:
    """Symbols called (``llvm.call``) or taken the address of (``llvm.mlir.addressof``)."""
    used: set[str] = set()
    for o in collect(module, lambda o: o.name in ("llvm.call", "llvm.mlir.addressof")):
        for attr in ("callee", "global_name"):
            if attr in o.attributes:
                used.add(ir.FlatSymbolRefAttr(o.attributes[attr]).value)
    return used


def check_symbols(module: ir.Module, shared_libs) -> None:
    """Refuse a used external function nothing defines, before the JIT links
    lazily (it would print "Symbols not found" and hand back no function).
    Declarations nobody calls are harmless and left alone."""
    unresolved = []
    for op in module.body.operations:
        op = op.operation
        if op.name == "llvm.func" and not op.regions[0].blocks:
            name = ir.StringAttr(op.attributes["sym_name"]).value
            if symbol_address(name, shared_libs) is None:
                unresolved.append((op, name))
    if not unresolved:
        return  # the usual case: no walk of the module's uses
    used = _referenced_symbols(module)
    for op, name in unresolved:
        if name in used:
            libs = ", ".join(Path(p).name for p in shared_libs) or "none"
            raise DiagnosticError(
                Diagnostic.from_location(
                    op.location,
                    "error",
                    f"unresolved external function '{name}': not defined in the module, "
                    f"the process or the shared libraries ({libs})",
                )
            )

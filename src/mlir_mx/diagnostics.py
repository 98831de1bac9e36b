"""MLIR-style diagnostics and the one error model of mlir-mx.

A :class:`Diagnostic` prints as ``file:line:col: error: message`` (the form
mlir-opt uses).  Every error mlir-mx raises on purpose is an :class:`MXError`
carrying one or more diagnostics (located when the failure has a place in
the input, unlocated for a bad flag or option); the subclasses only say
which stage failed.  :func:`capture_diagnostics` collects what upstream MLIR
emits through a context's diagnostic handler, and :func:`from_mlir_error`
turns an upstream ``MLIRError`` into diagnostics, so that the tools can
check (``--verify-diagnostics``) and print everything uniformly.
"""

from __future__ import annotations

from contextlib import contextmanager

from mlir import ir

from mlir_mx.errors import Diagnostic, DiagnosticError, MXError, location_parts

__all__ = [
    "Diagnostic",
    "DiagnosticError",
    "MXError",
    "capture_diagnostics",
    "from_mlir_error",
    "location_parts",
]

_SEVERITY = {
    ir.DiagnosticSeverity.ERROR: "error",
    ir.DiagnosticSeverity.WARNING: "warning",
    ir.DiagnosticSeverity.NOTE: "note",
    ir.DiagnosticSeverity.REMARK: "remark",
}

def _from_upstream(info) -> Diagnostic:
    file, line, col = location_parts(info.location)
    message = str(info.message)
    loc = str(info.location)
    if file is None and loc != "loc(unknown)":
        message = f"{loc}: {message}"  # a location without a file: say it, as mlir-opt does
    d = Diagnostic(_SEVERITY.get(info.severity, "error"), message, file, line, col)
    d.notes = [_from_upstream(n) for n in info.notes]
    return d


@contextmanager
def capture_diagnostics(context: ir.Context):
    """Collect every diagnostic emitted in ``context`` into a list (yielded).

    Diagnostics are consumed (not printed to stderr by MLIR); the caller
    decides what to print.  Disables the context's multithreading (see the
    FIXME below).
    """
    collected: list[Diagnostic] = []
    # FIXME(upstream): the 22.1.8 bindings call a Python diagnostic handler
    # from MLIR's worker threads without taking the GIL (nanobind aborts the
    # process: "incref_check ... while the GIL was not held"; a verifier error
    # emitted while canonicalize runs on several functions in parallel).
    # llvm-project#215781, fix in review as #215848.  So a context we attach
    # a handler to runs its passes on one thread.
    context.enable_multithreading(False)

    def handler(d) -> bool:
        collected.append(_from_upstream(d))
        return True

    h = context.attach_diagnostic_handler(handler)
    try:
        yield collected
    finally:
        h.detach()


def from_mlir_error(err: ir.MLIRError, default_file: str | None = None) -> list[Diagnostic]:
    """The diagnostics an ``MLIRError`` carries (falls back to its message).

    Upstream sometimes fails without any diagnostic (an op without custom
    assembly in statement position: "Unable to parse module assembly");
    the fallback is then located at ``default_file`` when given.
    """
    diags = [_from_upstream(d) for d in getattr(err, "error_diagnostics", [])]
    if not diags:
        text = str(err).strip() or "upstream MLIR failed without a diagnostic"
        diags = [Diagnostic("error", text, default_file)]
    return diags

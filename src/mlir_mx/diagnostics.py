"""MLIR-style diagnostics shared by the text layer, the verifier and the tools.

A :class:`Diagnostic` prints as ``file:line:col: error: message`` (the form
mlir-opt uses), a :class:`DiagnosticError` carries one or more of them, and
:func:`capture_diagnostics` collects what upstream MLIR emits through a
context's diagnostic handler so that the tools can remap, check
(``--verify-diagnostics``) and print them uniformly.
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from dataclasses import dataclass, field

from mlir import ir

__all__ = ["Diagnostic", "DiagnosticError", "capture_diagnostics", "from_mlir_error"]

_SEVERITY = {
    ir.DiagnosticSeverity.ERROR: "error",
    ir.DiagnosticSeverity.WARNING: "warning",
    ir.DiagnosticSeverity.NOTE: "note",
    ir.DiagnosticSeverity.REMARK: "remark",
}

_FILE_LOC = re.compile(r'^loc\("(?P<file>(?:[^"\\]|\\.)*)":(?P<line>\d+):(?P<col>\d+)')


@dataclass
class Diagnostic:
    """One diagnostic with an optional file location and attached notes."""

    severity: str
    message: str
    file: str | None = None
    line: int | None = None
    col: int | None = None
    notes: list[Diagnostic] = field(default_factory=list)

    def where(self) -> str:
        if self.file is None:
            return "<unknown>"
        if self.line is None:
            return self.file
        return f"{self.file}:{self.line}:{self.col}"

    def __str__(self) -> str:
        text = f"{self.where()}: {self.severity}: {self.message}"
        for note in self.notes:
            text += "\n" + str(note)
        return text

    @classmethod
    def from_location(cls, loc: ir.Location, severity: str, message: str) -> Diagnostic:
        file, line, col = location_parts(loc)
        return cls(severity, message, file, line, col)


class DiagnosticError(Exception):
    """User-facing failure carrying MLIR-style diagnostics (never a traceback)."""

    def __init__(self, diagnostics: list[Diagnostic] | Diagnostic):
        if isinstance(diagnostics, Diagnostic):
            diagnostics = [diagnostics]
        self.diagnostics = list(diagnostics)
        super().__init__("\n".join(str(d) for d in self.diagnostics))


def location_parts(loc: ir.Location) -> tuple[str | None, int | None, int | None]:
    """(file, line, col) of the first file location inside ``loc``."""
    m = _FILE_LOC.match(str(loc).replace("loc(callsite(", "loc(").replace("loc(fused[", "loc("))
    if m:
        return m.group("file"), int(m.group("line")), int(m.group("col"))
    text = str(loc)
    m = re.search(r'"((?:[^"\\]|\\.)*)":(\d+):(\d+)', text)
    if m:
        return m.group(1), int(m.group(2)), int(m.group(3))
    return None, None, None


def _convert(info) -> Diagnostic:
    file, line, col = location_parts(info.location)
    d = Diagnostic(_SEVERITY.get(info.severity, "error"), str(info.message), file, line, col)
    d.notes = [_convert(n) for n in info.notes]
    return d


@contextmanager
def capture_diagnostics(context: ir.Context):
    """Collect every diagnostic emitted in ``context`` into a list (yielded).

    Diagnostics are consumed (not printed to stderr by MLIR); the caller
    decides what to print.
    """
    collected: list[Diagnostic] = []

    def handler(d) -> bool:
        collected.append(_convert(d))
        return True

    h = context.attach_diagnostic_handler(handler)
    try:
        yield collected
    finally:
        h.detach()


def from_mlir_error(err: ir.MLIRError) -> list[Diagnostic]:
    """The diagnostics an ``MLIRError`` carries (falls back to its message)."""
    diags = [_convert(d) for d in getattr(err, "error_diagnostics", [])]
    if not diags:
        diags = [Diagnostic("error", str(err).strip())]
    return diags

"""The one error model of mlir-mx: :class:`MXError` and its diagnostics.

A :class:`Diagnostic` prints as ``file:line:col: error: message`` (the form
mlir-opt uses).  Every error mlir-mx raises on purpose for bad input is an
:class:`MXError` carrying one or more diagnostics (located when the failure
has a place in the input, unlocated for a bad argument, flag or option).
Subclasses say which stage failed and also derive from the builtin exception
a Python user expects (``ValueError``, ``TypeError``), so both
``except mlir_mx.MXError`` and ``except ValueError`` catch them.

This module imports nothing from MLIR, so the numpy oracle
(:mod:`mlir_mx.numerics`) and the interop layer raise the same errors
without loading the bindings; :mod:`mlir_mx.diagnostics` adds what needs
MLIR (capturing upstream diagnostics, reading locations).
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Diagnostic", "MXError", "MXValueError", "MXArgTypeError", "user_error"]


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
    def from_location(cls, loc, severity: str, message: str) -> Diagnostic:
        """A diagnostic at an ``ir.Location`` (its first file location)."""
        from mlir_mx.diagnostics import location_parts

        file, line, col = location_parts(loc)
        return cls(severity, message, file, line, col)


class MXError(Exception):
    """Base of every error mlir-mx raises for bad input: located diagnostics.

    ``MXError("message")`` is one unlocated error; ``MXError(diagnostic)`` or
    ``MXError([diagnostics])`` carries located ones.  ``str(err)`` is the
    diagnostics, one per line, as mlir-opt prints them.  The tools print
    them and exit 1 (:func:`mlir_mx.tools.driver.tool_main`); library users
    catch ``MXError`` (subclasses also derive from the builtin exception the
    old API raised, e.g. ``ValueError``, so existing handlers still work).
    """

    def __init__(self, diagnostics: list[Diagnostic] | Diagnostic | str):
        if isinstance(diagnostics, str):
            diagnostics = [Diagnostic("error", diagnostics)]
        elif isinstance(diagnostics, Diagnostic):
            diagnostics = [diagnostics]
        self.diagnostics = list(diagnostics) or [Diagnostic("error", "unknown error")]
        #: The first diagnostic's message, without its location.
        self.message = self.diagnostics[0].message
        super().__init__(self.text())

    def text(self) -> str:
        """Located diagnostics as ``file:line:col: error: msg``; unlocated ones as the message."""
        lines = []
        for d in self.diagnostics:
            if d.file is not None:
                lines.append(str(d))
            else:
                lines.append(d.message if d.severity == "error" else f"{d.severity}: {d.message}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.text()




class MXValueError(MXError, ValueError):
    """A bad argument value from the user: a shape, a range, an unknown name."""


class MXArgTypeError(MXError, TypeError):
    """An argument of the wrong type or dtype from the user."""


def user_error(err: Exception, message: str) -> MXError:
    """``message`` as the MXError of ``err``'s kind: an :class:`MXArgTypeError`
    for a ``TypeError``, else an :class:`MXValueError` (re-raising a checked
    argument's error with more context, e.g. its place in a container)."""
    return MXArgTypeError(message) if isinstance(err, TypeError) else MXValueError(message)

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
MLIR (capturing upstream diagnostics).  Every subclass of :class:`MXError` is
defined here; the modules that raise one also export it where users import
it from (``mlir_mx.passes.pipeline.PipelineError``, ``mlir_mx.torch.InferenceOnlyError``).
So is the one error class that is not an :class:`MXError`, :class:`ObjectError`
(the compile cache's, never raised to a user).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mlir import ir

__all__ = [
    "Diagnostic", "MXError", "MXValueError", "MXArgTypeError", "expect_type", "user_error",
    "location_parts",
    "DiagnosticError", "TextError", "MXTypeError", "PassError", "OptionError", "PipelineError",
    "UnknownPassError", "ModelError", "ToolError", "UsageError", "InferenceOnlyError", "UnknownFunctionError",
    "MXUnsupportedHostError", "ObjectError", "ObjectDumpError",
]  # fmt: skip

_FILE_LOC = re.compile(r'^loc\("(?P<file>(?:[^"\\]|\\.)*)":(?P<line>\d+):(?P<col>\d+)')


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


def expect_type(value, types, name: str, what: str):
    """``value`` when it is an instance of ``types`` (``bool`` is never an ``int``
    here); else an :class:`MXArgTypeError` naming the argument ``name``:
    ``"<name>: expected <what>, got <type>"``."""
    if isinstance(value, types) and not (isinstance(value, bool) and bool not in _tuple(types)):
        return value
    raise MXArgTypeError(f"{name}: expected {what}, got {type(value).__name__}")


def _tuple(types) -> tuple:
    return types if isinstance(types, tuple) else (types,)


def user_error(err: Exception, message: str) -> MXError:
    """``message`` as the MXError of ``err``'s kind: an :class:`MXArgTypeError`
    for a ``TypeError``, else an :class:`MXValueError` (re-raising a checked
    argument's error with more context, e.g. its place in a container)."""
    return MXArgTypeError(message) if isinstance(err, TypeError) else MXValueError(message)


# The stages' errors, each raised by the module named.


class DiagnosticError(MXError):
    """IR that does not parse, verify or survive a pass: located diagnostics
    (:mod:`mlir_mx.diagnostics`)."""


class TextError(DiagnosticError):
    """A malformed mx construct at a source offset (becomes a located diagnostic;
    :mod:`mlir_mx.dialect.tokens`)."""

    def __init__(self, message: str, offset: int):
        super().__init__(message)
        self.offset = offset


class MXTypeError(MXError, ValueError):
    """An ``!mx.tensor`` spelling or parameter set that does not verify
    (:mod:`mlir_mx.dialect.types`).

    ``offset`` is the character offset (inside the type text) the message
    refers to, when known, so the text layer can point at it.
    """

    def __init__(self, message: str, offset: int = 0):
        super().__init__(message)
        self.offset = offset


class PassError(MXError):
    """Raised by a pass to fail with a located diagnostic (:mod:`mlir_mx.passes.registry`)."""

    def __init__(self, message: str, location: ir.Location | None = None):
        diag = (
            Diagnostic.from_location(location, "error", message)
            if location is not None
            else Diagnostic("error", message)
        )
        super().__init__(diag)
        self.message = message
        self.location = location


class OptionError(MXError, ValueError):
    """A pass option string that does not parse or names no option
    (:mod:`mlir_mx.passes.registry`)."""


class PipelineError(MXError, ValueError):
    """A pipeline that does not parse, or names an unknown pass or option
    (:mod:`mlir_mx.passes.pipeline`)."""


class UnknownPassError(PipelineError):
    """A pipeline element naming no pass of ours or of upstream's registry;
    ``name`` is the pass it names."""

    def __init__(self, name: str, message: str):
        super().__init__(message)
        self.name = name


class ModelError(MXError, ValueError):
    """The IR cannot be modelled (no function, a dynamic shape, ...; :mod:`mlir_mx.roofline`)."""


class ToolError(MXError):
    """A user error of a tool found in its input or on the way (an unreadable
    input file, IR that does not verify, a wrong result); exit code 1, as
    mlir-opt (:mod:`mlir_mx.tools.driver`)."""


class UsageError(ToolError):
    """A bad command line (an unknown flag, a value out of range, two modes
    that exclude each other, a size too large for this machine); exit code 2,
    argparse's convention, through :func:`mlir_mx.tools.driver.tool_main`."""


class InferenceOnlyError(MXError, RuntimeError):
    """An input that requires grad while grad mode is on: ``MXLinear`` has no
    backward.  A ``RuntimeError`` too (what torch raises for a missing backward;
    :mod:`mlir_mx.torch`)."""


class UnknownFunctionError(MXError, AttributeError):
    """A call of a function the module does not define publicly
    (:mod:`mlir_mx.execution.runner`)."""


class MXUnsupportedHostError(MXError, RuntimeError):
    """A machine mlir-mx cannot compile for correctly: an x86 CPU without FMA
    or F16C, a platform without MLIR wheels (:func:`mlir_mx.host.check_host`)."""


class ObjectDumpError(OSError):
    """The object code of a compiled module could not be had to store
    (:mod:`mlir_mx.execution.object_dump`).  An ``OSError``, as the failed
    writes it stands for: the cache logs it and the kernel runs all the same."""


class ObjectError(Exception):
    """An object file the compile cache's loader does not take (or a malformed
    one; :mod:`mlir_mx.execution.objects`).  Not an :class:`MXError`: it never
    reaches a user, the cache drops the entry and compiles the kernel again."""

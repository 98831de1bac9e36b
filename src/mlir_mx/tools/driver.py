"""Shared pieces of the mlir-opt-like tools: reading input, splitting it,
printing diagnostics with the source line and a caret, and checking
``expected-*`` annotations for ``--verify-diagnostics``.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path

from mlir import ir

from mlir_mx.diagnostics import Diagnostic, MXError, from_mlir_error
from mlir_mx.errors import ToolError, UsageError

__all__ = [
    "tool_main",
    "ArgParser",
    "print_diagnostics",
    "register_source",
    "Chunk",
    "ToolError",
    "UsageError",
    "check_fits",
    "read_input",
    "split_input",
    "format_diagnostic",
    "verify_expected",
]

SPLIT_MARKER = "// -----"


class ArgParser(argparse.ArgumentParser):
    """argparse for the tools: a usage error is a :class:`UsageError` (one
    line, exit code 2 through :func:`tool_main`, as argparse) and
    ``-h``/``--help`` returns the help text instead of exiting."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, add_help=False, **kwargs)
        self.add_argument("-h", "--help", action="store_true", help="show this help and exit")

    def error(self, message):
        raise UsageError(message)

    def parse(self, argv):
        """Parsed arguments, or the help text when ``-h``/``--help`` is given."""
        args = self.parse_args(argv)
        return self.format_help().rstrip() if args.help else args


#: Texts read by the running tool, by file name, so that located diagnostics
#: can show the source line and a caret.
_SOURCES: ContextVar[dict[str, str] | None] = ContextVar("mlir_mx_tool_sources", default=None)


def register_source(filename: str, text: str) -> None:
    """Remember ``text`` as the contents of ``filename`` for the diagnostics."""
    sources = _SOURCES.get()
    if sources is not None:
        sources[filename] = text


def print_diagnostics(prog: str, diags: list[Diagnostic], file=None) -> None:
    """Print diagnostics as the tools do: located ones as mlir-opt prints them
    (with the source line and a caret when the text is known), unlocated
    ones as ``prog: error: message``."""
    file = file or sys.stderr
    sources = _SOURCES.get() or {}
    for d in diags:
        if d.file is None:
            # a message that spells its severity already ("error: ...") keeps one
            message = d.message.removeprefix(f"{d.severity}: ")
            print(f"{prog}: {d.severity}: {message}", file=file)
        else:
            print(format_diagnostic(d, sources), file=file)


def tool_main(prog: str, parse, run, argv: list[str] | None) -> int:
    """The shared ``main()`` of every CLI: ``parse(argv)`` returns options or a
    string to print (``--help``); ``run(options)`` returns the exit code.

    A :class:`UsageError` (a bad command line) is one ``prog: error: ...``
    line, exit code 2 (argparse's).  Any other :class:`MXError` (a
    :class:`ToolError`, IR that does not parse or verify, a failing pass) and
    any upstream ``MLIRError`` that escapes a stage are printed as
    diagnostics, exit code 1 (mlir-opt's).  A ``MemoryError`` is one line,
    exit code 1.  A closed standard output (``mx-opt ... | head``) exits 1
    quietly.
    """
    argv = sys.argv[1:] if argv is None else argv
    token = _SOURCES.set({})
    try:
        opts = parse(argv)
        if isinstance(opts, str):
            print(opts)
            return 0
        return run(opts)
    except UsageError as err:
        print_diagnostics(prog, err.diagnostics)
        return 2
    except MXError as err:
        print_diagnostics(prog, err.diagnostics)
        return 1
    except MemoryError as err:
        detail = f": {err}" if str(err) else ""
        print(f"{prog}: error: out of memory{detail}", file=sys.stderr)
        return 1
    except ir.MLIRError as err:  # a stage that forgot run_pipeline: still a diagnostic
        print_diagnostics(prog, from_mlir_error(err))
        return 1
    except BrokenPipeError:
        _silence_stdout()
        return 1
    except KeyboardInterrupt:
        return 130
    finally:
        _SOURCES.reset(token)


def check_out_dir(out, flag: str = "--out") -> Path:
    """The output directory ``out`` of a tool, created if missing; a
    :class:`UsageError` when it is a file, cannot be created or is not writable
    (checked before the tool's work, so a long run is not lost at the end)."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise UsageError(f"{flag} '{out}' exists and is not a directory")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UsageError(f"cannot create {flag} directory '{out}': {err.strerror or err}") from None
    if not os.access(out, os.W_OK):
        raise UsageError(f"{flag} directory '{out}' is not writable")
    return out


def physical_memory() -> int | None:
    """The memory this process may use, in bytes: the machine's, or less where
    a limit says so (``ulimit -v``, a cgroup's ``memory.max``); None where
    the OS does not say."""
    limits = []
    try:
        limits.append(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        pass
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_AS)[0]
        if soft != resource.RLIM_INFINITY:
            limits.append(soft)
    except (ImportError, OSError, ValueError, AttributeError):
        pass
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(path) as f:
                text = f.read().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < 2**60:  # "max" or a huge number: no limit
            limits.append(int(text))
    return min(limits) if limits else None


def check_fits(what: str, nbytes: int) -> None:
    """A :class:`UsageError` when ``nbytes`` (what a run of ``what``, e.g.
    ``"--shapes 99999999x99999x99968"``, would allocate) exceed this
    machine's memory: checked before allocating anything."""
    ram = physical_memory()
    if ram is not None and nbytes > ram:
        raise UsageError(
            f"{what}: needs about {_size_text(nbytes)} of memory, more than the "
            f"{_size_text(ram)} this process may use"
        )


def _size_text(n: int) -> str:
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} bytes"


def _silence_stdout() -> None:
    """After EPIPE, point stdout at /dev/null so the interpreter's final flush is quiet."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass


@dataclass
class Chunk:
    """One piece of a split input; ``text`` is padded with the newlines that
    precede it so line numbers match the whole file."""

    text: str


def read_input(path: str) -> str:
    """Contents of ``path`` (``-`` = stdin), or :class:`ToolError`."""
    if path == "-":
        try:
            text = sys.stdin.read()
        except UnicodeDecodeError:
            raise ToolError("could not read standard input: not UTF-8 text") from None
        register_source("<stdin>", text)
        return text
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        register_source(path, text)
        return text
    except FileNotFoundError:
        raise ToolError(f"could not open input file '{path}': No such file or directory") from None
    except IsADirectoryError:
        raise ToolError(f"could not open input file '{path}': Is a directory") from None
    except UnicodeDecodeError:
        raise ToolError(f"could not read input file '{path}': not UTF-8 text") from None
    except OSError as err:
        raise ToolError(f"could not open input file '{path}': {err.strerror}") from None


def split_input(text: str, enabled: bool, marker: str = SPLIT_MARKER) -> list[Chunk]:
    """Split on lines that are exactly ``marker`` (mlir-opt's convention)."""
    if not enabled:
        return [Chunk(text)]
    chunks: list[Chunk] = []
    lines = text.splitlines(keepends=True)
    start = 0
    for i, line in enumerate(lines + [None]):
        if line is None or line.rstrip("\r\n").strip() == marker:
            body = "".join(lines[start:i])
            chunks.append(Chunk("\n" * start + body))
            start = i + 1
    return chunks


def format_diagnostic(d: Diagnostic, sources: dict[str, str]) -> str:
    """``file:line:col: error: msg`` followed by the source line and a caret."""
    out = [f"{d.where()}: {d.severity}: {d.message}"]
    src = sources.get(d.file or "")
    if src is not None and d.line:
        lines = src.splitlines()
        if 0 < d.line <= len(lines):
            line = lines[d.line - 1]
            out.append(line)
            out.append(" " * max((d.col or 1) - 1, 0) + "^")
    text = "\n".join(out)
    for n in d.notes:
        if n.message.startswith("see current operation"):
            continue
        text += "\n" + format_diagnostic(n, sources)
    return text


_EXPECT = re.compile(
    r"expected-(?P<sev>error|warning|note|remark)"
    # spaces before "@" allowed, as upstream's verifier does (`expected-error @+1`)
    r" *(?:@(?P<where>[+-]\d+|above|below))?\s*\{\{(?P<msg>.*?)\}\}"
)


@dataclass
class _Expect:
    severity: str
    line: int
    message: str
    annotation_line: int
    matched: bool = False


def _expectations(text: str) -> list[_Expect]:
    exps: list[_Expect] = []
    lines = text.splitlines()
    for i, line in enumerate(lines, start=1):
        for m in _EXPECT.finditer(line):
            where, target = m.group("where"), i
            if where in ("above", "below"):
                step = -1 if where == "above" else 1
                j = i + step
                while 0 < j <= len(lines) and (
                    not lines[j - 1].strip() or "expected-" in lines[j - 1]
                ):
                    j += step
                target = j
            elif where:
                target = i + int(where)
            exps.append(_Expect(m.group("sev"), target, m.group("msg"), i))
    return exps


def verify_expected(text: str, filename: str, diags: list[Diagnostic]) -> list[Diagnostic]:
    """Match ``diags`` against the ``expected-*`` annotations of ``text``.

    Returns the mismatches as diagnostics (empty list = verified): every
    error/warning/remark must be expected; every expectation must be met.
    Notes are checked only when annotated (upstream attaches "see current
    operation" notes that tests do not spell out).
    """
    exps = _expectations(text)
    problems: list[Diagnostic] = []

    def match(d: Diagnostic) -> bool:
        for e in exps:
            if (
                not e.matched
                and e.severity == d.severity
                and d.line == e.line
                and (d.file in (filename, None, "-"))
                and e.message in d.message
            ):
                e.matched = True
                return True
        return False

    for d in diags:
        if not match(d):
            problems.append(
                Diagnostic(
                    "error",
                    f"unexpected {d.severity}: {d.message}",
                    (d.file or filename) if d.line is not None else None,
                    d.line,
                    d.col,
                )
            )
        for n in d.notes:
            match(n)
    for e in exps:
        if not e.matched:
            problems.append(
                Diagnostic(
                    "error",
                    f"expected {e.severity} \"{e.message}\" was not produced",
                    filename,
                    e.annotation_line,
                    1,
                )
            )
    return problems

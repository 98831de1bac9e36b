"""``mx-roofline``: the byte/FLOP model of matmul variants on a machine, as a
table and as roofline and time plots.

Examples::

    mx-roofline --shape 32x64x64 --shape 1x64x64 --variants f32,mx-a,mx-ab
    mx-roofline --machine measure --measure-kernels --shape 1x4096x4096 --out plots/
    mx-roofline kernel.mlir --machine m4

Inputs are mx IR files (every public function is modelled) or named shapes
(MxNxK) with ``--variants`` (``f32``, ``mx-a``, ``mx-ab``, ``mx-ab-blocked``).
Bad input (a bad shape, an unknown variant, an unreadable file, invalid IR)
prints one ``mx-roofline: error: ...`` line and exits 1.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mlir_mx.diagnostics import DiagnosticError

PROG = "mx-roofline"
DEFAULT_SHAPES = ("32x64x64", "1x64x64")
DEFAULT_VARIANTS = "f32,mx-a,mx-ab,mx-ab-blocked"


class _Error(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 1 (argparse would exit 2)
        raise _Error(message)


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("files", nargs="*", help="mx IR files ('-' for standard input)")
    p.add_argument("--shape", action="append", default=[], help="MxNxK (repeatable)")
    p.add_argument(
        "--variants", default=DEFAULT_VARIANTS, help=f"comma-separated (default {DEFAULT_VARIANTS})"
    )
    p.add_argument("--element", default="f8E4M3FN", help="mx element type (default f8E4M3FN)")
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
        choices=("fused", "blocked"),
        help="mx-to-linalg matmul lowering for IR files (default: the pass's default)",
    )
    p.add_argument("--breakdown", action="store_true", help="print the per-buffer breakdown")
    p.add_argument("--out", help="directory for roofline.{png,svg} and time.{png,svg}")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    return p


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def _file_rows(args, say):
    from mlir_mx.model.ir_model import analyze_all
    from mlir_mx.model.report import Row

    rows = []
    for f in args.files:
        try:
            text = sys.stdin.read() if f == "-" else Path(f).read_text()
        except (OSError, UnicodeDecodeError) as err:
            raise _Error(f"cannot read '{f}': {getattr(err, 'strerror', None) or err}") from None
        name = "<stdin>" if f == "-" else f
        try:
            models = analyze_all(text, filename=name, matmul_lowering=args.matmul_lowering)
        except DiagnosticError as err:
            raise _Error(_first_line(err)) from None
        for km in models:
            if args.function and km.function != args.function:
                continue
            km.label = f"{Path(name).name}:@{km.function}"
            row = Row("file", None, km, label=km.label)
            row.source_text = text  # type: ignore[attr-defined]
            rows.append(row)
    if args.function and not rows:
        raise _Error(f"no function '{args.function}' in the input files")
    return rows


def _time_file_row(row, say):
    """Time a function of an IR file with random inputs (Python call overhead included)."""
    import numpy as np

    from mlir_mx.execution import Runner
    from mlir_mx.model.ir_model import lower_to_linalg
    from mlir_mx.model.measure import time_repeated

    runner = Runner(lower_to_linalg(row.source_text))
    sig = runner.signature(row.model.function)
    rng = np.random.default_rng(0)
    vals = []
    for p in sig.args:
        if p.error or not p.is_buffer or any(s is None for s in p.shape):
            raise _Error(f"cannot time @{row.model.function}: argument {p.name} ({p.type})")
        if p.dtype.kind == "f":
            vals.append(rng.standard_normal(p.shape).astype(p.dtype))
        else:
            vals.append(np.ones(p.shape, dtype=p.dtype))  # narrow floats/ints: 1.0 / 1

    def run(n):
        for _ in range(n):
            runner.invoke(row.model.function, *vals)

    row.measured = time_repeated(run)


def run(argv) -> int:
    args = _parser().parse_args(argv)
    say = (lambda s: None) if args.quiet else (lambda s: print(s, file=sys.stderr, flush=True))

    from mlir_mx.model.ir_model import ModelError
    from mlir_mx.model.kernels import VARIANTS, VariantUnavailable, parse_shape
    from mlir_mx.model.machines import get_machine
    from mlir_mx.model.report import model_rows, roofline_table

    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    for v in variants:
        if v not in VARIANTS:
            raise _Error(f"unknown variant '{v}' (available: {', '.join(VARIANTS)})")
    if args.threads < 1:
        raise _Error("--threads must be at least 1")
    try:
        shapes = [parse_shape(s, args.block_size) for s in args.shape]
    except ValueError as err:
        raise _Error(str(err)) from None
    from mlir_mx.numerics import ELEMENT_FORMATS

    if args.element not in ELEMENT_FORMATS:
        raise _Error(
            f"unknown element type '{args.element}' (available: {', '.join(ELEMENT_FORMATS)})"
        )
    if not shapes and not args.files:
        shapes = [parse_shape(s, args.block_size) for s in DEFAULT_SHAPES]
    try:
        machine = get_machine(args.machine, threads=args.threads, progress=say)
    except KeyError as err:
        raise _Error(err.args[0]) from None

    rows = _file_rows(args, say) if args.files else []
    try:
        rows += model_rows(shapes, variants, args.element, args.block_size)
    except (ModelError, DiagnosticError) as err:
        raise _Error(_first_line(err)) from None

    if args.measure_kernels:
        from mlir_mx.model.measure import time_kernel

        for r in rows:
            if r.model is None:
                continue
            say(f"timing {r.name} {r.shape_text}...")
            if r.shape is None:
                _time_file_row(r, say)
                continue
            try:
                kt = time_kernel(r.variant, r.shape, args.element, args.block_size)
            except VariantUnavailable as err:
                r.unavailable = str(err)
                continue
            r.measured = kt.timing

    print(f"machine: {machine.describe()}")
    if machine.source:
        print(f"  source: {machine.source}")
    if args.measure_kernels:
        print("  measured: median per call of @bench (n calls in one native loop), 1 thread")
    print(roofline_table(rows, machine))
    if args.breakdown:
        for r in rows:
            if r.model is not None:
                print()
                print(r.model.breakdown())
    if args.out:
        from mlir_mx.model.plots import roofline_plot, time_plot

        paths = roofline_plot(rows, machine, args.out) + time_plot(rows, machine, args.out)
        say("wrote " + ", ".join(str(p) for p in paths))
    return 0


def main(argv=None) -> int:
    """Console entry point; returns the exit status."""
    try:
        return run(sys.argv[1:] if argv is None else argv)
    except _Error as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return 1
    except (DiagnosticError, ValueError) as err:
        print(f"{PROG}: error: {_first_line(err)}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())

"""No CLI prints a Python traceback for any input file of the test suite, or
for a bad command line (reproducers ../shared/repro/round3/r3_cli_messages.sh,
r3_llama_example_bad_args.sh and r3_mx_bench_huge_shape_traceback.sh).

Every piece (``// -----``) of every ``.mlir`` file under ``tests/lit/`` (valid,
invalid and reproducer inputs alike) goes through ``mx-opt``, ``mx-runner``
and ``mx-roofline`` in-process; each must return 0 or 1, print nothing that
looks like a traceback, and say why when it returns 1.  Every CLI and every
example answers a bad command line (a bad value, an impossible size, two
modes at once) with one ``PROG: error: ...`` line and exit status 2.
"""

from __future__ import annotations

import contextlib
import io
import sys
from pathlib import Path

import pytest

from mlir_mx.tools import mx_opt, mx_roofline, mx_runner
from mlir_mx.tools.driver import split_input

ROOT = Path(__file__).resolve().parents[2]
FILES = sorted(p for p in (ROOT / "tests" / "lit").rglob("*.mlir") if "Output" not in p.parts)


def _pieces():
    for path in FILES:
        text = path.read_text()
        if len(text) > 20_000:  # the 5000-deep nesting reproducer: mx-opt's lit test
            continue
        for i, chunk in enumerate(split_input(text, True)):
            yield pytest.param(chunk.text, id=f"{path.relative_to(ROOT / 'tests' / 'lit')}#{i}")


def _run(main, argv, text):
    out, err = io.StringIO(), io.StringIO()
    old = sys.stdin
    sys.stdin = io.StringIO(text)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                rc = main(argv)
            except SystemExit as stop:  # the examples: argparse's exit
                rc = stop.code
    finally:
        sys.stdin = old
    return rc, err.getvalue()


@pytest.mark.parametrize("text", list(_pieces()))
def test_no_traceback_from_any_cli(text):
    runs = [
        (mx_opt.main, ["-"]),
        (mx_opt.main, ["-", "--mx-to-linalg"]),
        (mx_roofline.main, ["-", "--quiet"]),
    ]
    if "@main" in text:  # compile and run only what has an entry point
        runs.append((mx_runner.main, ["-", "-e", "main", "-O0"]))
    for main, argv in runs:
        rc, err = _run(main, argv, text)
        assert rc in (0, 1), (argv, err)
        assert "Traceback" not in err, (argv, err)
        if rc == 1:
            assert "error" in err, (argv, err)


# -- bad command lines: one "PROG: error: ..." line, exit status 2 (issue 29) -------

EXAMPLES = ROOT / "examples"
HUGE = "99999999x99999x99968"

#: (program, argv, what the one line must say: the value as typed where one was)
BAD_ARGS = [
    ("mx-opt", ["--no-such-pass"], "Unknown command line argument '--no-such-pass'"),
    ("mx-opt", ["-", "-o"], "option '-o' requires a value"),
    ("mx-opt", ["a.mlir", "b.mlir"], "too many positional arguments: a.mlir b.mlir"),
    ("mx-opt", ["--canonicalize", "--pass-pipeline=builtin.module(cse)"], "can't be used with"),
    ("mx-opt", ["--pass-pipeline=builtin.module(cse"], "invalid --pass-pipeline"),
    ("mx-opt", ["--mx-canonicalize=x=1"], "no such option 'x' for pass 'mx-canonicalize'"),
    ("mx-runner", ["--threads", "-3"], "--threads: expected an integer in [1, 1024], got '-3'"),
    ("mx-runner", ["--threads=99999"], "got '99999'"),
    ("mx-runner", ["--entry-point-result=f16"], "got 'f16'"),
    ("mx-runner", ["--schedule=fast"], "unknown schedule 'fast'"),
    ("mx-runner", ["-e"], "option '-e' requires a value"),
    ("mx-runner", ["--bogus"], "Unknown command line argument '--bogus'"),
    ("mx-roofline", ["--shape", "8x8"], "bad shape '8x8'"),
    ("mx-roofline", ["--variants", "f32,nope"], "unknown variant 'nope'"),
    ("mx-roofline", ["--machine", "m9"], "unknown machine 'm9'"),
    ("mx-roofline", ["--threads", "0"], "--threads: expected an integer in [1, 1024], got 0"),
    ("mx-roofline", ["--report"], "--report needs --out"),
    ("mx-roofline", ["--measure-kernels", "--shape", HUGE], f"--shape {HUGE}: needs about"),
    ("mx-demo", ["--seed", "-1"], "--seed: expected 0 or more, got -1"),
    ("mx-demo", ["--seed", "x"], "invalid int value: 'x'"),
    ("mx-bench", ["--shapes", HUGE], f"--shapes {HUGE}: needs about"),
    ("mx-bench", ["--quantize", "1000000x1000000"], "--quantize 1000000x1000000: needs about"),
    ("mx-bench", ["--mlp", "1048576,1048576"], "--mlp 1048576,1048576: needs about"),
    ("mx-bench", ["--model", "--quick", "--layers", "100000"], "--layers 100000: needs about"),
    ("mx-bench", ["--threads", "0"], "--threads: values must be positive, got '0'"),
    ("mx-bench", ["--quantize", "0x0"], "--quantize: values must be positive, got '0x0'"),
    ("mx-bench", ["--quantize", "64x3a"], "got '64x3a'"),
    ("mx-bench", ["--shapes", "1x64x64", "--mlp"], "--shapes and --mlp are two benchmarks"),
    ("mx-bench", ["--quantize", "--model"], "--quantize and --model are two benchmarks"),
    ("mx-bench", ["--mlp", "--formats", "i8"], "--formats is not used by the MLP benchmark"),
    ("mx-bench", ["--layers", "2"], "--layers is not used by the matmul benchmark"),
    ("mx-bench", ["--samples", "x"], "invalid int value: 'x'"),
    ("llama_mx.py", ["--tiny", "--layers", "0"], "--layers: expected 1 or more, got 0"),
    ("llama_mx.py", ["--tiny", "--weights", "bogus"], "--weights: unknown MX element format 'bogus'"),
    ("llama_mx.py", ["--tiny", "--activations", "q8"], "--activations: unknown MX element format 'q8'"),
    ("llama_mx.py", ["--tiny", "--prompt", "0"], "--prompt: expected 1 or more, got 0"),
    ("llama_mx.py", ["--tiny", "--tokens", "-1"], "--tokens: expected 0 or more, got -1"),
    ("llama_mx.py", ["--tiny", "--threads", "0"], "--threads: expected an integer in [1, 1024], got 0"),
    ("llama_mx.py", ["--layers", "100000"], "--layers 100000: needs about"),
    ("llama_mx.py", ["--tiny", "--save", "no-such-dir/x.pt"], "--save: cannot write 'no-such-dir/x.pt'"),
    ("mx-generate", ["no-such-folder", "--prompt", "hi"], "PATH: no such file or folder: 'no-such-folder'"),
    ("mx-generate", [".", "--prompt", "hi", "--max-new-tokens", "0"], "--max-new-tokens: expected 1 or more, got 0"),
    ("gguf_roundtrip.py", ["--shape", "0", "32"], "got 0 32"),
    ("gguf_roundtrip.py", ["--shape", "99999999", "99999968"], "needs about"),
    ("gguf_roundtrip.py", ["--out", "/no/such/dir/w.gguf"], "--out: cannot write a file '/no/such/dir/w.gguf'"),
    ("mlp_mxfp4.py", ["--dims", "1048576", "1048576"], "--dims 1048576 1048576: needs about"),
    ("mlp_mxfp4.py", ["--tokens", "0"], "--tokens: expected positive counts, got 0"),
    ("mlp_mxfp4.py", ["--dims", "33", "64"], "got 33 64"),
]


def _main_of(prog: str):
    """The ``main(argv)`` of a console script or an example."""
    if prog.endswith(".py"):
        import runpy

        if prog == "llama_mx.py":
            pytest.importorskip("torch", reason="torch not installed (pip install 'mlir-mx[test]')")
            pytest.importorskip("transformers", reason="transformers not installed")
        return runpy.run_path(str(EXAMPLES / prog), run_name=prog)["main"]
    if prog == "mx-generate":
        pytest.importorskip("torch", reason="torch not installed (pip install 'mlir-mx[test]')")
        pytest.importorskip("transformers", reason="transformers not installed")
        from mlir_mx.torch.generate import main

        return main
    from mlir_mx.tools import mx_demo
    from mlir_mx_bench import cli as mx_bench

    return {"mx-opt": mx_opt.main, "mx-runner": mx_runner.main, "mx-roofline": mx_roofline.main,
            "mx-demo": mx_demo.main, "mx-bench": mx_bench.main}[prog]  # fmt: skip


@pytest.mark.parametrize("prog, argv, message", BAD_ARGS, ids=[" ".join([p, *a]) for p, a, _ in BAD_ARGS])
def test_a_bad_command_line_is_one_line_and_exit_2(prog, argv, message, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # nothing is written beside the tests (--out, --save)
    main = _main_of(prog)
    if prog.startswith("mx-b"):
        argv = [*argv, "--out", str(tmp_path / "out")]
    rc, err = _run(main, argv, "")
    assert rc == 2, err
    assert err.startswith(f"{prog}: error: ") and err.count("\n") == 1, err
    assert message in err, err
    assert "Traceback" not in err and "error: error:" not in err
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())



def test_tool_main_exit_statuses():
    """UsageError 2, other MXErrors 1 (bad input, as mlir-opt), MemoryError one line, 1."""
    from mlir_mx.tools.driver import ToolError, UsageError, tool_main

    def fails(exc):
        def run(_opts):
            raise exc

        return lambda argv: tool_main("prog", lambda a: a, run, argv)

    for exc, rc, line in [
        (UsageError("--x: bad"), 2, "prog: error: --x: bad\n"),
        (ToolError("could not open input file 'f'"), 1, "prog: error: could not open input file 'f'\n"),
        (MemoryError(), 1, "prog: error: out of memory\n"),
    ]:
        assert _run(fails(exc), [], "") == (rc, line)

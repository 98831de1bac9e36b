"""No CLI prints a Python traceback for any input file of the test suite.

Every piece (``// -----``) of every ``.mlir`` file under ``tests/lit/`` (valid,
invalid and reproducer inputs alike) goes through ``mx-opt``, ``mx-runner``
and ``mx-roofline`` in-process; each must return 0 or 1, print nothing that
looks like a traceback, and say why when it returns 1.
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
            rc = main(argv)
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

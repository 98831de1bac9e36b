"""Modules sized to one job: no module of ``src/`` over 500
lines, no function (or method) over 80."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "mlir_mx"
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 80


def oversized(source: str, path: str) -> list[str]:
    """What in ``source`` breaks a limit, one line each."""
    out = []
    lines = source.count("\n")
    if lines > MAX_MODULE_LINES:
        out.append(f"{path}: {lines} lines (at most {MAX_MODULE_LINES})")
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            n = node.end_lineno - node.lineno + 1
            if n > MAX_FUNCTION_LINES:
                out.append(f"{path}:{node.lineno}: {node.name} has {n} lines (at most {MAX_FUNCTION_LINES})")
    return out


def test_no_module_or_function_is_too_long():
    files = sorted(SRC.parent.rglob("*.py"))  # mlir_mx, mlir_mx_bench, mlir_mx_testing
    assert len(files) > 50
    found = [msg for f in files for msg in oversized(f.read_text(), str(f.relative_to(SRC.parent)))]
    assert found == []


def test_the_check_finds_a_long_function_and_a_long_module():
    body = "\n".join(f"    x{i} = {i}" for i in range(80))
    assert oversized(f"def f():\n{body}\n", "m.py") == ["m.py:1: f has 81 lines (at most 80)"]
    assert oversized("x = 1\n" * 501, "m.py") == ["m.py: 501 lines (at most 500)"]
    assert oversized(f"def f():\n{body[: body.rindex(chr(10))]}\n", "m.py") == []

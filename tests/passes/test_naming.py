"""Names that find each other, for EVERY registered pass:
pass ``mx-foo-bar`` lives in ``passes/foo_bar.py`` (or ``passes/mx_foo_bar.py``,
or a package of that name with its helpers, like ``passes/mx_to_linalg/``), or
in a group of passes (``passes/legalize/``, ``passes/kernels/``) under that
name or under that name without the group's word (``mx-legalize-i1-memrefs``
in ``passes/legalize/i1_memrefs.py``, ``mx-matmul-kernels`` in
``passes/kernels/matmul.py``); its lit test is
``tests/lit/Transforms/mx-foo-bar.mlir`` (or a directory of that name), its
pytest ``tests/passes/test_foo_bar.py`` (in the group's folder for a grouped
pass: ``tests/passes/legalize/test_legalize_i1_memrefs.py``) and its page
``docs/passes/mx-foo-bar.md``, which names the module."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlir_mx.passes.registry import all_passes

ROOT = Path(__file__).resolve().parents[2]
PASSES = all_passes()
#: The folders of passes/ that group passes (each pass a module of its own).
GROUPS = ("legalize", "kernels")


def module_names(argument: str, group: str = "") -> set[str]:
    """The module names the convention allows for pass ``argument`` (in
    ``group``: also without the group's word)."""
    snake = argument.replace("-", "_")
    names = {snake, snake.removeprefix("mx_")}
    if group:
        names |= {n.removeprefix(f"{group}_").removesuffix(f"_{group}") for n in names}
    return names


@pytest.mark.parametrize("spec", PASSES, ids=lambda s: s.argument)
def test_pass_names_find_each_other(spec):
    assert spec.run.__module__.startswith("mlir_mx.passes.")
    where = spec.run.__module__.removeprefix("mlir_mx.passes.").split(".")
    names = module_names(spec.argument)
    if len(where) == 2 and where[0] in GROUPS:  # passes/legalize/i1_memrefs.py
        group, module = where
        assert module in module_names(spec.argument, group), f"{spec.argument} is in {group}/{module}.py"
        named = (f"passes/{group}/{module}.py", f"passes.{group}.{module}`")
    else:  # passes/foo_bar.py, or the package passes/foo_bar/
        group, module = "", where[0]
        assert module in names and len(where) <= 2, f"{spec.argument} is in {'/'.join(where)}.py"
        named = (f"passes/{module}.py", f"passes/{module}/", f"passes.{module}`")
    lit = ROOT / "tests" / "lit" / "Transforms" / spec.argument
    assert lit.with_suffix(".mlir").is_file() or any(lit.glob("*.mlir")), f"no lit test for {spec.argument}"
    tests = ROOT / "tests" / "passes" / group
    assert any((tests / f"test_{name}.py").is_file() for name in names), f"no pytest in {tests}"
    page = ROOT / "docs" / "passes" / f"{spec.argument}.md"
    assert page.is_file()
    text = page.read_text()
    assert any(f in text for f in named), f"{page.name} does not name {named[0]}"


def test_every_transform_test_and_page_names_a_pass():
    arguments = {s.argument for s in PASSES}
    lit = {p.name.removesuffix(".mlir") for p in (ROOT / "tests" / "lit" / "Transforms").iterdir()}
    pages = {p.stem for p in (ROOT / "docs" / "passes").glob("*.md")}
    assert lit - {"Output"} <= arguments
    assert pages == arguments


def test_the_convention_is_checkable():
    assert module_names("mx-to-linalg") == {"mx_to_linalg", "to_linalg"}
    assert "i1_memrefs" in module_names("mx-legalize-i1-memrefs", "legalize")
    assert "matmul" in module_names("mx-matmul-kernels", "kernels")
    assert "matmul" not in module_names("mx-matmul-kernels")
    assert len(PASSES) >= 8

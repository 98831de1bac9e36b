"""Names that find each other, for EVERY registered pass:
pass ``mx-foo-bar`` lives in ``passes/foo_bar.py`` (or ``passes/mx_foo_bar.py``,
or a package of that name with its helpers, like ``passes/mx_to_linalg/``),
its lit test is ``tests/lit/Transforms/mx-foo-bar.mlir`` (or a directory of that
name), its pytest ``tests/passes/test_<module>.py`` and its page
``docs/passes/mx-foo-bar.md``, which names the module."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlir_mx.passes.registry import all_passes

ROOT = Path(__file__).resolve().parents[2]
PASSES = all_passes()


def module_names(argument: str) -> set[str]:
    """The module names the convention allows for pass ``argument``."""
    snake = argument.replace("-", "_")
    return {snake, snake.removeprefix("mx_")}


@pytest.mark.parametrize("spec", PASSES, ids=lambda s: s.argument)
def test_pass_names_find_each_other(spec):
    package, _, module = spec.run.__module__.rpartition(".")
    assert package == "mlir_mx.passes"
    assert module in module_names(spec.argument), f"{spec.argument} is defined in {module}.py"
    lit = ROOT / "tests" / "lit" / "Transforms" / spec.argument
    assert lit.with_suffix(".mlir").is_file() or any(lit.glob("*.mlir")), f"no lit test for {spec.argument}"
    assert (ROOT / "tests" / "passes" / f"test_{module}.py").is_file()
    page = ROOT / "docs" / "passes" / f"{spec.argument}.md"
    assert page.is_file()
    text = page.read_text()
    assert any(f in text for f in (f"passes/{module}.py", f"passes/{module}/", f"passes.{module}`"))


def test_every_transform_test_and_page_names_a_pass():
    arguments = {s.argument for s in PASSES}
    lit = {p.name.removesuffix(".mlir") for p in (ROOT / "tests" / "lit" / "Transforms").iterdir()}
    pages = {p.stem for p in (ROOT / "docs" / "passes").glob("*.md")}
    assert lit - {"Output"} <= arguments
    assert pages == arguments


def test_the_convention_is_checkable():
    assert module_names("mx-to-linalg") == {"mx_to_linalg", "to_linalg"}
    assert len(PASSES) >= 8

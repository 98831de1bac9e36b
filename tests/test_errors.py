"""Bad input raises an ``MXError`` that is also the builtin a Python user
expects: ``mlir_mx.MXError`` is importable without MLIR, and the unknown
names and misused objects below (a machine preset, an op that is not an mx
op, a pass registered twice, a campaign suite) are ``MXValueError``s."""

import subprocess
import sys

import pytest
from mlir import ir

import mlir_mx
from mlir_mx.errors import MXArgTypeError, MXError, MXValueError


def test_the_error_classes_are_importable_from_the_package_without_mlir():
    code = (
        "import sys, mlir_mx\n"
        "E = mlir_mx.MXError\n"
        "assert issubclass(mlir_mx.MXValueError, E) and issubclass(mlir_mx.MXValueError, ValueError)\n"
        "assert issubclass(mlir_mx.MXArgTypeError, E) and issubclass(mlir_mx.MXArgTypeError, TypeError)\n"
        "print('mlir' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
    assert (mlir_mx.MXError, mlir_mx.MXValueError, mlir_mx.MXArgTypeError) == (
        MXError,
        MXValueError,
        MXArgTypeError,
    )
    assert {"MXError", "MXValueError", "MXArgTypeError"} <= set(mlir_mx.__all__)


def test_an_unknown_machine_preset():
    from mlir_mx.roofline import get_machine

    with pytest.raises(MXValueError, match=r"unknown machine 'm9' \(available: m4.*, measure\)"):
        get_machine("m9")
    assert get_machine("m4").name == "m4"


def test_an_op_that_is_not_an_mx_op():
    from mlir_mx.dialect.ops import OpView

    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse("func.func @f() { return }")
        with pytest.raises(MXValueError, match="not an mx op: func.func"):
            OpView(module.body.operations[0])


def test_a_pass_registered_twice(monkeypatch):
    from mlir_mx.passes import registry

    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))  # undone after
    registry.register_pass("test-twice", "once")(lambda op: None)
    with pytest.raises(MXValueError, match="pass 'test-twice' registered twice"):
        registry.register_pass("test-twice", "again")(lambda op: None)


def test_an_unknown_campaign_suite():
    from mlir_mx_testing.campaign import run_inline

    with pytest.raises(MXValueError, match="unknown suite 'nope' .*fuzz"):
        run_inline("nope", 0, [0])


def test_every_error_class_of_mlir_mx_is_defined_in_errors():
    """``mlir_mx/errors.py`` holds every exception class of the library, the
    compile cache's ``ObjectError`` too (importable without MLIR, like the rest)."""
    import ast
    from pathlib import Path

    src = Path(mlir_mx.__file__).parent
    elsewhere = [
        f"{path.relative_to(src)}:{node.lineno}: {node.name}"
        for path in sorted(src.rglob("*.py"))
        if path.name != "errors.py" or path.parent != src
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ClassDef)
        and any(ast.unparse(b).endswith(("Error", "Exception")) for b in node.bases)
    ]
    assert elsewhere == []
    code = "import sys\nfrom mlir_mx.errors import ObjectError\nprint('mlir' in sys.modules)\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_expect_type_names_the_argument_and_never_takes_a_bool_for_an_int():
    from mlir_mx.errors import MXArgTypeError, expect_type

    assert expect_type(3, int, "n", "an int") == 3
    assert expect_type(True, (int, bool), "flag", "a bool") is True
    with pytest.raises(MXArgTypeError, match=r"^n: expected an int, got bool$"):
        expect_type(True, int, "n", "an int")
    with pytest.raises(MXArgTypeError, match=r"^text: expected a str, got bytes$"):
        expect_type(b"x", str, "text", "a str")

"""The public API at the top of ``mlir_mx``, the oracle named as such, and the
old import paths of the modules moved in 0.2 (docs/architecture.md, "Moved in 0.2")."""

from __future__ import annotations

import subprocess
import sys
import warnings


def test_the_top_level_names():
    import mlir_mx
    from mlir_mx import convert, errors, linear, numerics, oracle

    assert mlir_mx.MXArray is numerics.MXArray
    assert mlir_mx.quantize is convert.quantize and mlir_mx.dequantize is convert.dequantize
    assert mlir_mx.Linear is linear.Linear and mlir_mx.matmul is linear.matmul
    assert mlir_mx.MXError is errors.MXError
    assert set(mlir_mx.__all__) >= {"MXArray", "quantize", "dequantize", "Linear", "matmul", "MXError"}
    assert oracle.quantize.__module__ == oracle.dequantize.__module__ == "mlir_mx.numerics.mx"
    assert oracle.quantize is not mlir_mx.quantize


def test_import_mlir_mx_loads_neither_mlir_nor_numpy():
    code = "import sys, mlir_mx; print(sorted({m.split('.')[0] for m in sys.modules} & {'mlir', 'numpy'}))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_errors_are_defined_in_errors_and_exported_where_raised():
    from mlir_mx import errors
    from mlir_mx.passes.pipeline import PipelineError
    from mlir_mx.tools.driver import ToolError

    assert PipelineError is errors.PipelineError and ToolError is errors.ToolError
    assert issubclass(errors.UnknownPassError, ValueError)


def test_the_old_model_path_is_a_deprecated_alias_of_roofline():
    sys.modules.pop("mlir_mx.model", None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        from mlir_mx.model.measure import get_machine

        import mlir_mx.model
    import mlir_mx.roofline.measure

    assert any(issubclass(w.category, DeprecationWarning) for w in caught)
    assert get_machine is mlir_mx.roofline.measure.get_machine
    assert mlir_mx.model.analyze is mlir_mx.roofline.analyze


def test_the_old_testing_and_bench_paths():
    import mlir_mx_bench.cli
    import mlir_mx_testing.differential
    from mlir_mx.testing.differential import Compiler
    from mlir_mx.tools.mx_bench import main

    assert Compiler is mlir_mx_testing.differential.Compiler
    assert main is mlir_mx_bench.cli.main
    for module in ("mlir_mx.tools.mx_bench", "mlir_mx.testing.differential", "mlir_mx.testing.fuzz"):
        out = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True, text=True)
        assert out.returncode == 0 and "usage:" in out.stdout, (module, out.stderr[-500:])

"""The public API at the top of ``mlir_mx`` and the oracle named as such."""

from __future__ import annotations

import subprocess
import sys


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

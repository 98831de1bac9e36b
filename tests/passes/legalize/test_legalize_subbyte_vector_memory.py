"""``mx-legalize-subbyte-vector-memory`` from Python: vector loads and stores
of f4/f6 memrefs (one code per byte) move every code unchanged, for every
sub-byte format of the table, and an access it cannot scalarize is a located
error.  The IR shapes are pinned by
``tests/lit/Transforms/mx-legalize-subbyte-vector-memory.mlir``."""

from __future__ import annotations

import numpy as np
import pytest
from mlir import ir

from mlir_mx.diagnostics import DiagnosticError
from mlir_mx.dialect import parse_module
from mlir_mx.execution import Runner
from mlir_mx.numerics.formats import ELEMENT_FORMATS
from mlir_mx.passes.pipeline import run_pipeline
from mlir_mx.pipelines import load_pipeline

SUB_BYTE = [f for f in ELEMENT_FORMATS.values() if f.is_sub_byte]


def copy_module(elem: str, n: int) -> str:
    return f"""
func.func @copy(%src: memref<{n}x{elem}>, %dst: memref<{n}x{elem}>) {{
  %c0 = arith.constant 0 : index
  %v = vector.load %src[%c0] : memref<{n}x{elem}>, vector<{n}x{elem}>
  vector.store %v, %dst[%c0] : memref<{n}x{elem}>, vector<{n}x{elem}>
  return
}}
"""


@pytest.mark.parametrize("fmt", SUB_BYTE, ids=lambda f: f.name)
def test_vector_copy_keeps_every_code(fmt):
    """Every code of the format, 16 per vector: LLVM's packed <16 x i4> /
    <16 x i6> layout would read 8 or 12 bytes and scramble them."""
    runner = Runner(copy_module(fmt.name, 16), load_pipeline("lower-to-llvm"))
    codes = np.arange(fmt.num_codes, dtype=np.uint8)
    for start in range(0, fmt.num_codes, 16):
        src = codes[start : start + 16].view(fmt.dtype).copy()
        dst = np.zeros(16, np.uint8).view(fmt.dtype)
        runner.invoke("copy", src, dst)
        assert np.array_equal(dst.view(np.uint8), src.view(np.uint8))


def test_a_two_d_access_is_a_located_error():
    text = """
func.func @f(%m: memref<2x4xf4E2M1FN>) -> vector<2x4xf4E2M1FN> {
  %c0 = arith.constant 0 : index
  %v = vector.load %m[%c0, %c0] : memref<2x4xf4E2M1FN>, vector<2x4xf4E2M1FN>
  return %v : vector<2x4xf4E2M1FN>
}
"""
    module = parse_module(text, ir.Context(), "t.mlir")
    with pytest.raises(DiagnosticError) as err:
        run_pipeline(module, "mx-legalize-subbyte-vector-memory", filename="t.mlir")
    assert "t.mlir:4:" in str(err.value) and "2-D vector" in str(err.value)

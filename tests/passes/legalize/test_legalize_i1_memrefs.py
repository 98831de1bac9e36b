"""``mx-legalize-i1-memrefs`` from Python: i1 memrefs become i8 memrefs in
signatures, block arguments and results, and a program storing booleans runs
(``finalize-memref-to-llvm`` aborts the process on an i1 store without the
pass: the reproducer in ``tests/lit/Transforms/mx-legalize-i1-memrefs.mlir``)."""

from __future__ import annotations

import numpy as np
from mlir import ir

from mlir_mx.dialect import parse_module
from mlir_mx.execution import Runner
from mlir_mx.ir_utils import collect, function_type
from mlir_mx.passes.pipeline import run_pipeline
from mlir_mx.pipelines import load_pipeline

FLAGS = """
func.func @flags(%m: memref<3xi1>, %b: i1) -> i1 {
  %c0 = arith.constant 0 : index
  %c2 = arith.constant 2 : index
  %tmp = memref.alloc() : memref<2xi1>
  memref.store %b, %tmp[%c0] : memref<2xi1>
  %v = memref.load %tmp[%c0] : memref<2xi1>
  memref.store %v, %m[%c2] : memref<3xi1>
  %first = memref.load %m[%c0] : memref<3xi1>
  return %first : i1
}
"""


def test_no_i1_memref_is_left():
    module = parse_module(FLAGS, ir.Context())
    run_pipeline(module, "mx-legalize-i1-memrefs")
    (fn,) = collect(module, lambda o: o.name == "func.func")
    assert [str(t) for t in function_type(fn).inputs] == ["memref<3xi8>", "i1"]
    text = str(module)
    assert "xi1>" not in text
    assert text.count("arith.trunci") == 2 and text.count("arith.extui") == 2


def test_booleans_round_trip_through_memory():
    runner = Runner(FLAGS, load_pipeline("lower-to-llvm"))
    for first, b in ((True, False), (False, True)):
        m = np.array([first, True, not b], dtype=np.bool_)
        assert runner.invoke("flags", m, b) == first
        assert m.tolist() == [first, True, b]  # the store reached the caller's array

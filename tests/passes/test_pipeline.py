"""Pipelines as data: elements built with typed, checked
options; composition; text only at the edges (parse, str); buffer ownership
as a property of the pipeline and of the compiled artifact."""

from __future__ import annotations

import numpy as np
import pytest
from mlir import ir

from mlir_mx.execution import Runner
from mlir_mx.passes.mx_to_linalg import MATMUL_LOWERINGS
from mlir_mx.passes.pipeline import (
    Pipeline,
    PipelineElement,
    PipelineError,
    as_pipeline,
    build_pass_manager,
)
from mlir_mx.passes.registry import OptionError, lookup
from mlir_mx.pipelines import load_pipeline
from mlir_mx.roofline import ModelError, analyze


def test_options_are_checked_when_the_element_is_built():
    e = PipelineElement.of("mx-to-linalg", matmul_lowering="fused")
    assert str(e) == "mx-to-linalg{matmul-lowering=fused}"
    assert str(PipelineElement.of("mx-to-linalg", matmul_lowering=None)) == "mx-to-linalg"
    with pytest.raises(OptionError, match="'tiled' is not one of: fused, blocked"):
        PipelineElement.of("mx-to-linalg", matmul_lowering="tiled")
    with pytest.raises(OptionError, match="expected a value of type int, got True"):
        PipelineElement.of("mx-matmul-kernels", threads=True)
    with pytest.raises(OptionError, match=r"no such option 'tile' .*\(options: schedule, threads\)"):
        PipelineElement.of("mx-matmul-kernels", tile=4)


def test_rendered_options_parse_back_to_the_same_values():
    spec = lookup("mx-matmul-kernels")
    e = PipelineElement.of("mx-matmul-kernels", schedule="prefill", threads=3)
    assert spec.parse_options(e.options) == {"schedule": "prefill", "threads": 3}
    flag = PipelineElement.of("mx-expand-narrow-floats", f16_widening=False)
    assert lookup("mx-expand-narrow-floats").parse_options(flag.options) == {"f16_widening": False}


def test_the_allowed_values_are_the_option_choices():
    assert lookup("mx-to-linalg").option("matmul-lowering").choices == MATMUL_LOWERINGS


def test_upstream_options_are_rendered_as_written():
    e = PipelineElement.of("async-parallel-for", num_workers=2, min_task_size=1)
    assert str(e) == "async-parallel-for{num-workers=2 min-task-size=1}"
    build_pass_manager(Pipeline((e,)), ir.Context())  # upstream accepts it


def test_parse_render_and_compose():
    p = load_pipeline("lower-to-llvm")
    text = str(p)
    assert Pipeline.parse(text) == p
    assert len(p) == text.count(",") + 1 - text.count(",", text.index("{"), text.index("}"))
    head = PipelineElement.of("mx-to-linalg", matmul_lowering="blocked")
    whole = head + p
    assert whole.elements[0] == head and whole.elements[1:] == p.elements
    assert "a,b" + Pipeline.parse("c") + "d" == Pipeline.parse("a,b,c,d")
    assert as_pipeline([head]) == Pipeline((head,)) == as_pipeline(str(head))
    with pytest.raises(TypeError, match="expected a Pipeline or pipeline text"):
        as_pipeline(3)
    with pytest.raises(PipelineError, match="expected '\\)'"):
        Pipeline.parse("builtin.module(canonicalize")


def test_pipeline_files_are_read_line_by_line_with_includes(tmp_path, monkeypatch):
    import mlir_mx.pipelines.shipped as shipped

    head = PipelineElement("convert-elementwise-to-linalg")
    assert load_pipeline("lower-to-llvm") == (
        head + load_pipeline("bufferize") + load_pipeline("memref-to-llvm")
    )
    (tmp_path / "a.txt").write_text("# a\ncanonicalize,\ninclude b\n")
    (tmp_path / "b.txt").write_text("cse\n\ninclude a\n")
    (tmp_path / "c.txt").write_text("func.func(canonicalize, cse)\ninclude d\n")
    (tmp_path / "d.txt").write_text("cse\n")
    monkeypatch.setattr(shipped, "_files", lambda: tmp_path)
    assert load_pipeline("c") == Pipeline.parse("func.func(canonicalize,cse),cse")
    with pytest.raises(PipelineError, match=r"pipeline 'a' includes itself \(a -> b -> a\)"):
        load_pipeline("a")


def test_runs_looks_into_nested_pipelines():
    p = Pipeline.parse("builtin.module(func.func(canonicalize),cse)")
    assert p.runs("canonicalize") and p.runs("func.func") and not p.runs("mx-to-linalg")


def test_ownership_follows_the_deallocation_pass():
    assert load_pipeline("lower-to-llvm").returns_owned_buffers
    assert load_pipeline("bufferize").returns_owned_buffers
    assert not load_pipeline("memref-to-llvm").returns_owned_buffers


RETURNS = """
func.func @twice(%x: memref<4xf32>) -> memref<4xf32> {
  %y = memref.alloc() : memref<4xf32>
  %c0 = arith.constant 0 : index
  %c4 = arith.constant 4 : index
  %c1 = arith.constant 1 : index
  scf.for %i = %c0 to %c4 step %c1 {
    %v = memref.load %x[%i] : memref<4xf32>
    %w = arith.addf %v, %v : f32
    memref.store %w, %y[%i] : memref<4xf32>
  }
  return %y : memref<4xf32>
}
"""


def test_the_compiled_artifact_carries_the_ownership():
    """A memref-level module through memref-to-llvm: nothing guarantees the
    caller owns the returned buffer, so the Runner must not free it; through
    a pipeline with the deallocation pass it is the caller's."""
    x = np.arange(4, dtype=np.float32)
    plain = Runner(RETURNS, load_pipeline("memref-to-llvm"))
    assert plain._compiled.owns_results is False
    assert plain.invoke("twice", x).tolist() == [0.0, 2.0, 4.0, 6.0]
    owned = Runner(RETURNS, load_pipeline("lower-to-llvm"))
    assert owned._compiled.owns_results is True
    assert owned.invoke("twice", x).tolist() == [0.0, 2.0, 4.0, 6.0]


def test_the_model_refuses_a_lowering_before_running_anything():
    text = """
func.func @f(%a: !mx.tensor<1x32xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>,
             %b: tensor<32x4xf32>, %c: tensor<1x4xf32>) -> tensor<1x4xf32> {
  %0 = mx.block_matmul %a, %b, %c : !mx.tensor<1x32xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>, tensor<32x4xf32>, tensor<1x4xf32> -> tensor<1x4xf32>
  return %0 : tensor<1x4xf32>
}
"""
    with pytest.raises(ModelError, match="mx-to-linalg: option 'matmul-lowering': 'tiled' is not one of"):
        analyze(text, matmul_lowering="tiled")
    assert analyze(text, matmul_lowering="fused").flops_useful == 2 * 32 * 4


def test_an_unknown_pass_is_an_error_carrying_its_name():
    from mlir_mx.errors import MXError
    from mlir_mx.passes.pipeline import UnknownPassError

    with pytest.raises(UnknownPassError) as err:
        build_pass_manager("canonicalize,no-such-pass{x=1}", ir.Context())
    assert err.value.name == "no-such-pass"
    assert isinstance(err.value, MXError) and isinstance(err.value, ValueError)

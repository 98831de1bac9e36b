"""Structural tests of ``mx-to-linalg`` from Python (no execution).

The IR shape of each lowering is pinned by the lit tests in
``tests/lit/Transforms/mx-to-linalg/``; here: no mx type or bridging cast is left,
signatures split correctly (several mx arguments, calls, returns, blocks),
fold_scale always lowers, and the failure paths give located errors rather
than crashes.
"""

from __future__ import annotations

import pytest
from mlir import ir

from mlir_mx.diagnostics import capture_diagnostics, from_mlir_error
from mlir_mx.dialect import parse_module, print_module
from mlir_mx.passes.pipeline import PipelineError, build_pass_manager
from mlir_mx.passes.registry import lookup

A = "!mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>"
B0 = "!mx.tensor<64x16xf8E5M2, block_size = 32, scale_type = f8E8M0FNU, axis = 0>"
T8 = "!mx.tensor<8x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>"


#: The v1 structure tests pin the fused lowering (the default is blocked).
FUSED = "mx-to-linalg{matmul-lowering=fused}"


def lower(text: str, pipeline: str = "mx-to-linalg") -> tuple[ir.Module, str]:
    ctx = ir.Context()
    module = parse_module(text, ctx, "t.mlir")
    build_pass_manager(pipeline, ctx).run(module.operation)
    assert module.operation.verify()
    return module, print_module(module)


def lower_fails(text: str, pipeline: str = "mx-to-linalg"):
    ctx = ir.Context()
    module = parse_module(text, ctx, "t.mlir")
    pm = build_pass_manager(pipeline, ctx)
    with capture_diagnostics(ctx) as diags:
        with pytest.raises(ir.MLIRError) as err:
            pm.run(module.operation)
    return diags + from_mlir_error(err.value)


def func_types(module: ir.Module) -> dict[str, tuple[list[str], list[str]]]:
    out = {}
    for op in module.body.operations:
        if op.operation.name != "func.func":
            continue
        ft = ir.FunctionType(ir.TypeAttr(op.attributes["function_type"]).value)
        name = ir.StringAttr(op.attributes["sym_name"]).value
        out[name] = ([str(t) for t in ft.inputs], [str(t) for t in ft.results])
    return out


def assert_clean(text: str) -> None:
    assert "!mx.tensor" not in text
    # no mx op (maximumf/maxsi and the mx.kernel tags of the generics are fine)
    assert "mx." not in text.replace("max", "").replace("mx.kernel", "")
    assert "unrealized_conversion_cast" not in text


def test_registered_with_option():
    spec = lookup("mx-to-linalg")
    assert spec is not None
    assert spec.option("matmul-lowering").default == "blocked"


def test_matmul_signature_goes_from_three_to_four_arguments():
    text = f"""
    func.func @mm(%a: {A}, %b: tensor<64x64xf32>, %acc: tensor<32x64xf32>) -> tensor<32x64xf32> {{
      %0 = mx.block_matmul %a, %b, %acc : {A}, tensor<64x64xf32>, tensor<32x64xf32> -> tensor<32x64xf32>
      return %0 : tensor<32x64xf32>
    }}"""
    module, out = lower(text, FUSED)
    assert_clean(out)
    ins, res = func_types(module)["mm"]
    assert ins == [
        "tensor<32x64xf8E4M3FN>",
        "tensor<32x2xf8E8M0FNU>",
        "tensor<64x64xf32>",
        "tensor<32x64xf32>",
    ]
    assert res == ["tensor<32x64xf32>"]
    assert out.count("linalg.generic") == 1
    assert "tensor.empty" not in out  # the accumulator is the output


def test_mx_times_mx_has_five_arguments_and_one_generic():
    text = f"""
    func.func @mm(%a: {A}, %b: {B0}, %acc: tensor<32x16xf32>) -> tensor<32x16xf32> {{
      %0 = mx.block_matmul %a, %b, %acc : {A}, {B0}, tensor<32x16xf32> -> tensor<32x16xf32>
      return %0 : tensor<32x16xf32>
    }}"""
    module, out = lower(text, FUSED)
    assert_clean(out)
    ins, _ = func_types(module)["mm"]
    assert ins[2:4] == ["tensor<64x16xf8E5M2>", "tensor<2x16xf8E8M0FNU>"]
    assert out.count("linalg.generic") == 1
    assert "(d0, d1, d2) -> (d2 floordiv 32, d1)" in out


def test_multiple_mx_arguments_results_calls_and_returns():
    text = f"""
    func.func private @ext({A}, f32, {B0}) -> ({B0}, {A})
    func.func @f(%x: f32, %a: {A}, %b: {B0}) -> ({A}, i32, {B0}) {{
      %r:2 = call @ext(%a, %x, %b) : ({A}, f32, {B0}) -> ({B0}, {A})
      %c = arith.constant 7 : i32
      return %r#1, %c, %r#0 : {A}, i32, {B0}
    }}"""
    module, out = lower(text)
    assert_clean(out)
    types = func_types(module)
    a_pair = ["tensor<32x64xf8E4M3FN>", "tensor<32x2xf8E8M0FNU>"]
    b_pair = ["tensor<64x16xf8E5M2>", "tensor<2x16xf8E8M0FNU>"]
    assert types["ext"] == (a_pair + ["f32"] + b_pair, b_pair + a_pair)
    assert types["f"] == (["f32"] + a_pair + b_pair, a_pair + ["i32"] + b_pair)
    assert "call @ext(%arg1, %arg2, %arg0, %arg3, %arg4)" in out
    assert "return %0#2, %0#3, %c7_i32, %0#0, %0#1" in out


def test_arg_attrs_follow_the_split():
    text = f"""
    func.func @f(%a: {A} {{test.a}}, %x: f32 {{test.x}}) -> tensor<32x64xf32> {{
      %d = mx.dequantize_block %a : {A} -> tensor<32x64xf32>
      return %d : tensor<32x64xf32>
    }}"""
    _, out = lower(text)
    assert "%arg0: tensor<32x64xf8E4M3FN> {test.a}" in out
    assert "%arg1: tensor<32x2xf8E8M0FNU> {test.a}" in out
    assert "%arg2: f32 {test.x}" in out


def test_block_arguments_through_branches():
    text = f"""
    func.func @f(%c: i1, %a: {A}, %b: {A}) -> tensor<32x64xf32> {{
      cf.cond_br %c, ^bb1(%a : {A}), ^bb1(%b : {A})
    ^bb1(%x: {A}):
      %d = mx.dequantize_block %x : {A} -> tensor<32x64xf32>
      return %d : tensor<32x64xf32>
    }}"""
    _, out = lower(text)
    assert_clean(out)
    assert "^bb1(%0: tensor<32x64xf8E4M3FN>, %1: tensor<32x2xf8E8M0FNU>)" in out


@pytest.mark.parametrize("rank_shape,axis", [((64,), None), ((64, 4), 0), ((2, 32, 3), 1)])
def test_quantize_dequantize_any_rank_and_axis(rank_shape, axis):
    dims = "x".join(str(d) for d in rank_shape)
    ax = f", axis = {axis}" if axis is not None else ""
    t = f"!mx.tensor<{dims}xf6E2M3FN, block_size = 32, scale_type = f8E8M0FNU{ax}>"
    text = f"""
    func.func @f(%x: tensor<{dims}xf32>) -> tensor<{dims}xf32> {{
      %q = mx.quantize_block %x : tensor<{dims}xf32> -> {t}
      %d = mx.dequantize_block %q : {t} -> tensor<{dims}xf32>
      return %d : tensor<{dims}xf32>
    }}"""
    _, out = lower(text)
    assert_clean(out)
    assert out.count("linalg.generic") == 4  # amax, scale, mantissa, dequantize
    assert out.count("tensor.expand_shape") == 1
    assert "floordiv 32" in out


@pytest.mark.parametrize(
    "alpha,generics",
    [
        ("1.0", 0),  # identity
        ("8.0", 6),  # exponent add: requantized fallback (4) + new scale + new mantissa
        ("0.125", 6),
        ("3.0", 4),  # requantize: dequantize*alpha, amax, scale, mantissa
        ("-2.0", 4),  # a negative power of two cannot be an exponent add
    ],
)
def test_fold_scale_constant_alpha_always_lowers(alpha, generics):
    text = f"""
    func.func @f(%t: {T8}) -> {T8} {{
      %c = arith.constant {alpha} : f32
      %r = mx.fold_scale %t, %c : {T8}, f32 -> {T8}
      return %r : {T8}
    }}"""
    _, out = lower(text)
    assert_clean(out)
    assert out.count("linalg.generic") == generics


def test_fold_scale_runtime_alpha_requantizes_or_moves_exponents():
    text = f"""
    func.func @f(%t: {T8}, %a: f32) -> tensor<8x64xf32> {{
      %r = mx.fold_scale %t, %a : {T8}, f32 -> {T8}
      %d = mx.dequantize_block %r : {T8} -> tensor<8x64xf32>
      return %d : tensor<8x64xf32>
    }}"""
    _, out = lower(text)
    assert_clean(out)
    assert "tensor.from_elements %arg2 : tensor<f32>" in out
    # requantize (dequantize*alpha, amax, codes, elements) + exponent add
    # (scales, elements, chosen per call from alpha's bits) + dequantize
    assert out.count("linalg.generic") == 7
    assert "arith.bitcast %arg2 : f32 to i32" in out


def test_unsupported_use_is_a_located_error_not_a_crash():
    text = f"""
    func.func @f(%t: {T8}, %n: index) -> tensor<8x64xf32> {{
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %r = scf.for %i = %c0 to %n step %c1 iter_args(%x = %t) -> ({T8}) {{
        scf.yield %x : {T8}
      }}
      %d = mx.dequantize_block %r : {T8} -> tensor<8x64xf32>
      return %d : tensor<8x64xf32>
    }}"""
    diags = lower_fails(text)
    assert len(diags) == 1
    d = diags[0]
    assert "'scf.for'" in d.message and "!mx.tensor" in d.message
    assert (d.line, d.col) == (5, 12)


def test_unknown_matmul_lowering_names_the_available_values():
    # Checked when the pipeline is built, like an upstream option's values.
    with pytest.raises(PipelineError, match="'tiled' is not one of: fused, blocked"):
        build_pass_manager("mx-to-linalg{matmul-lowering=tiled}", ir.Context())


def test_unknown_option_is_a_pipeline_error():
    with pytest.raises(PipelineError, match="no such option 'tile'"):
        build_pass_manager("mx-to-linalg{tile=1}", ir.Context())


def test_module_without_mx_is_unchanged():
    text = """
    func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
      return %x : tensor<4xf32>
    }"""
    ctx = ir.Context()
    before = print_module(parse_module(text, ctx))
    _, after = lower(text)
    assert before == after


def test_then_bufferize_is_copy_free_for_matmul():
    text = f"""
    func.func @mm(%a: {A}, %b: tensor<64x64xf32>, %acc: tensor<32x64xf32>) -> tensor<32x64xf32> {{
      %0 = mx.block_matmul %a, %b, %acc : {A}, tensor<64x64xf32>, tensor<32x64xf32> -> tensor<32x64xf32>
      return %0 : tensor<32x64xf32>
    }}"""
    _, out = lower(text, FUSED + ",one-shot-bufferize{bufferize-function-boundaries=1}")
    assert "memref.copy" not in out
    assert "memref.alloc" not in out
    assert "bufferization.to_tensor" not in out
    assert "return %arg3" in out

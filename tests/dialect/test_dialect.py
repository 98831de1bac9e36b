"""The mx dialect from Python: loading, typed accessors, builders, syntax layer."""

import pytest
from mlir import ir
from mlir.dialects import func

from mlir_mx.diagnostics import DiagnosticError
from mlir_mx.dialect import (
    MXTensorType,
    MXTypeError,
    OpView,
    block_matmul,
    dequantize_block,
    fold_scale,
    load_dialect,
    mx_type,
    parse_module,
    print_module,
    quantize_block,
)
from mlir_mx.dialect.syntax import to_custom, to_generic

V1 = "!mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>"
MATMUL = f"""
func.func @mm(%a: {V1}, %b: tensor<64x64xf32>, %c: tensor<32x64xf32>) -> tensor<32x64xf32> {{
  %0 = mx.block_matmul %a, %b, %c : {V1}, tensor<64x64xf32>, tensor<32x64xf32> -> tensor<32x64xf32>
  return %0 : tensor<32x64xf32>
}}
"""


def test_load_fresh_repeated_and_interleaved_contexts():
    c1, c2 = ir.Context(), ir.Context()
    load_dialect(c1)
    load_dialect(c1)  # idempotent
    m1 = parse_module(MATMUL, c1)
    load_dialect(c2)
    m2 = parse_module(MATMUL, c2)
    m1b = parse_module(MATMUL, c1)  # back to the first context
    assert print_module(m1) == print_module(m2) == print_module(m1b)
    assert c1.is_registered_operation("mx.block_matmul")
    assert c2.is_registered_operation("mx.fold_scale")
    c3 = ir.Context()
    assert not c3.is_registered_operation("mx.block_matmul")  # loading is per context


def test_type_accessors():
    t = MXTensorType.parse("!mx.tensor<64x48xf4E2M1FN, block_size=32, scale_type=f8E8M0FNU, axis = 0>")
    assert t.shape == (64, 48)
    assert t.element_type == "f4E2M1FN"
    assert t.block_size == 32
    assert t.scale_type == "f8E8M0FNU"
    assert t.axis == 0 and t.block_axis == 0
    assert t.scale_shape == (2, 48)
    v1 = MXTensorType.parse(V1)
    assert v1.axis is None and v1.block_axis == 1 and v1.scale_shape == (32, 2)
    assert str(v1) == V1
    # default axis and explicit last axis are the same type and print the same
    assert MXTensorType.parse(V1.replace(">", ", axis = 1>")) == v1
    assert MXTensorType.parse(V1.replace(">", ", axis = 1>")).custom_str() == V1


def test_split_types():
    ctx = ir.Context()
    t = MXTensorType((32, 64), "f8E4M3FN", 32)
    assert str(t.mantissa_tensor_type(ctx)) == "tensor<32x64xf8E4M3FN>"
    assert str(t.scale_tensor_type(ctx)) == "tensor<32x2xf8E8M0FNU>"


@pytest.mark.parametrize(
    "text, message",
    [
        ("!mx.tensor<32x63xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>", "last dimension (63)"),
        ("!mx.tensor<32xf8E4M3FN, block_size = 32, scale_type = f16>", "scaleType f16 is not supported"),
        ("!mx.tensor<32xbf16, block_size = 32, scale_type = f8E8M0FNU>", "not an MX element type"),
        ("!mx.tensor<32x32xi8, block_size = 32, scale_type = f8E8M0FNU, axis = -1>", "axis -1 is out of range"),
        ("!mx.tensor<32xf8E4M3FN, block_size = x, scale_type = f8E8M0FNU>", "block_size must be an integer"),
    ],
)
def test_type_errors(text, message):
    with pytest.raises(MXTypeError, match=message.replace("(", r"\(").replace(")", r"\)")):
        MXTensorType.parse(text)


def test_builders_and_accessors():
    ctx = ir.Context()
    load_dialect(ctx)
    t = MXTensorType((32, 64), "f8E4M3FN", 32)
    with ctx, ir.Location.unknown():
        module = ir.Module.create()
        f32 = ir.F32Type.get()
        x_t = ir.RankedTensorType.get([32, 64], f32)
        b_t = ir.RankedTensorType.get([64, 16], f32)
        c_t = ir.RankedTensorType.get([32, 16], f32)
        with ir.InsertionPoint(module.body):

            @func.FuncOp.from_py_func(x_t, f32, b_t, c_t)
            def build(x, alpha, b, c):
                q = quantize_block(x, t)
                s = fold_scale(q, alpha)
                d = dequantize_block(s)
                mm = block_matmul(s, b, c)
                return d, mm

    text = print_module(module)
    assert "mx.quantize_block %arg0 : tensor<32x64xf32> -> " + V1 in text
    assert "mx.fold_scale" in text and "mx.dequantize_block" in text
    assert "mx.block_matmul %1, %arg2, %arg3" in text
    # and the printed text parses back to the same thing
    assert print_module(parse_module(text, ir.Context())) == text
    ops = [op for op in module.body.operations[0].regions[0].blocks[0].operations]
    q = OpView(ops[0])
    assert q.name == "mx.quantize_block"
    assert q.result_type == t
    assert mx_type(q.result).scale_shape == (32, 2)
    mm = OpView(ops[3])
    assert mm.lhs_type == t and str(mm.rhs_type) == "tensor<64x16xf32>"


def test_parse_error_is_located():
    bad = MATMUL.replace("tensor<64x64xf32>, tensor<32x64xf32> ->", "tensor<64x64xf32> ->")
    with pytest.raises(DiagnosticError) as info:
        parse_module(bad, ir.Context(), "mm.mlir")
    d = info.value.diagnostics[0]
    assert (d.file, d.line) == ("mm.mlir", 3)
    assert "expects 3 operand types, got 2" in d.message


def test_verifier_error_is_located():
    bad = MATMUL.replace("%c: tensor<32x64xf32>", "%c: tensor<16x64xf32>").replace(
        "tensor<32x64xf32> -> tensor<32x64xf32>", "tensor<16x64xf32> -> tensor<32x64xf32>"
    )
    with pytest.raises(DiagnosticError) as info:
        parse_module(bad, ir.Context(), "mm.mlir")
    d = info.value.diagnostics[0]
    assert str(d).startswith("mm.mlir:3:8: error: 'mx.block_matmul' op M dimension mismatch")


def test_upstream_error_columns_are_remapped():
    # The long custom type before the error shifts columns in the generic text;
    # the diagnostic must point at the original column.
    src = f"func.func @f(%a: {V1}, %b: tensor<4xf32>) -> () {{\n  return %b : tensor<4xf32>\n}}\n"
    with pytest.raises(DiagnosticError) as info:
        parse_module(src, ir.Context(), "f.mlir")
    d = info.value.diagnostics[0]
    assert d.line == 2
    assert src.splitlines()[1][d.col - 1 :].startswith("return")


def test_syntax_layer_round_trip_and_line_preservation():
    src = f"""!a = {V1}
// a comment mentioning mx.quantize_block and {V1}
func.func @f(%x: tensor<32x64xf32>) -> !a {{
  %q = mx.quantize_block %x {{note = "mx.fold_scale %x"}} :
       tensor<32x64xf32> -> !a loc("x.py":1:2)
  return %q : !a
}}
"""
    generic, smap = to_generic(src)
    assert generic.count("\n") == src.count("\n")
    assert '"mx.quantize_block"(%x) {note = "mx.fold_scale %x"} : (tensor<32x64xf32>) -> !a' in generic
    # comments and strings are left alone
    assert "// a comment mentioning mx.quantize_block and " + V1 in generic
    back = to_custom(generic)
    assert "mx.quantize_block %x {note = \"mx.fold_scale %x\"} : tensor<32x64xf32> -> !a" in back
    assert print_module(parse_module(src, ir.Context())).count("mx.quantize_block") == 1


def test_nvfp4_block_matmul_builder_and_accessor():
    """``block_matmul(a, b, acc, global_scale)`` with an NVFP4 rhs: the fourth
    operand prints after the accumulator, verifies, round-trips, and is
    ``OpView(...).global_scale`` (None on an E8M0 matmul)."""
    from mlir_mx.numerics.formats import E4M3_SCALE_TYPE

    ctx = ir.Context()
    load_dialect(ctx)
    ta = MXTensorType((4, 32), "f8E4M3FN", 16)
    tb = MXTensorType((32, 8), "f4E2M1FN", 16, E4M3_SCALE_TYPE, 0)
    with ctx, ir.Location.unknown():
        module = ir.Module.create()
        f32 = ir.F32Type.get()
        x_t, w_t = ir.RankedTensorType.get([4, 32], f32), ir.RankedTensorType.get([32, 8], f32)
        c_t = ir.RankedTensorType.get([4, 8], f32)
        with ir.InsertionPoint(module.body):

            @func.FuncOp.from_py_func(x_t, w_t, c_t, f32)
            def build(x, w, c, g):
                a = quantize_block(x, ta)
                b = quantize_block(w, tb, g)
                return block_matmul(a, b, c, g), block_matmul(a, dequantize_block(b, None, g), c)

    text = print_module(module)
    assert "mx.block_matmul %0, %1, %arg2, %arg3 : !mx.tensor<4x32xf8E4M3FN, block_size = 16, " in text
    assert "scale_type = f8E4M3FN, axis = 0>, tensor<4x8xf32>, f32 -> tensor<4x8xf32>" in text
    assert print_module(parse_module(text, ir.Context())) == text
    ops = list(module.body.operations[0].regions[0].blocks[0].operations)
    nv, plain = OpView(ops[2]), OpView(ops[4])
    assert (nv.name, plain.name) == ("mx.block_matmul", "mx.block_matmul")
    assert nv.rhs_type == tb and nv.global_scale is not None
    assert str(nv.global_scale.type) == "f32" and plain.global_scale is None

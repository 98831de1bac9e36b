"""The syntax layer as one tokenizer: adversarial inputs (see also the lit test
tests/lit/Dialect/mx/syntax-adversarial.mlir): comments and strings holding mx
syntax, affine sets with >=, aliases, CRLF, nesting, operand columns and
debuginfo locations."""

from __future__ import annotations

import re

import pytest
from mlir import ir

from mlir_mx.diagnostics import DiagnosticError
from mlir_mx.dialect import parse_module, print_module
from mlir_mx.dialect.syntax import MAX_NESTING, to_custom, to_generic, tokenize

T = "!mx.tensor<4x32xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>"
FOLD = f"""func.func @f(%t: {T}, %a: f32) -> {T} {{
  %0 = mx.fold_scale %t, %a : {T}, f32 -> {T}
  return %0 : {T}
}}
"""


def _error(text: str, filename: str = "f.mlir"):
    with pytest.raises(DiagnosticError) as info:
        parse_module(text, ir.Context(), filename)
    return info.value.diagnostics[0]


def test_tokens_keep_offsets_and_match_brackets():
    text = 'x = affine_set<(d0) : (d0 >= 0)> // a > b\n"s>" -> <f32>'
    toks = tokenize(text)
    assert "".join(t.text for t in toks) == text
    assert all(text[t.start : t.end] == t.text for t in toks)
    kinds = {t.text: t.kind for t in toks}
    assert kinds[">="] == "cmp" and kinds["->"] == "arrow"
    assert kinds["// a > b"] == "comment" and kinds['"s>"'] == "string"
    opener = next(i for i, t in enumerate(toks) if t.text == "<")
    assert toks[toks[opener].match].text == ">" and toks[toks[opener].match].start == text.index(">", 30)


def test_comment_inside_op_and_mx_syntax_in_comments():
    text = FOLD.replace(
        "mx.fold_scale %t, %a :", "mx.fold_scale %t, // mx.fold_scale %x, %y : f32 -> f32\n    %a :"
    )
    out = print_module(parse_module(text, ir.Context()))
    assert f"mx.fold_scale %arg0, %arg1 : {T}, f32 -> {T}" in out


def test_strings_with_mx_syntax_are_left_alone():
    note = f'"%r = mx.fold_scale %t, %a : {T}, f32 -> {T} // >= <= \\"q\\""'
    text = FOLD.replace("mx.fold_scale %t, %a :", f"mx.fold_scale %t, %a {{note = {note}}} :")
    generic, _ = to_generic(text)
    assert note in generic
    out = print_module(parse_module(text, ir.Context()))
    assert "{note = " + note.replace('\\"', "\\22") + "}" in out  # the printer escapes '"' as \\22
    # a string equal to an op name is not an op when printing
    assert to_custom('{n = "mx.fold_scale"} : () -> ()') == '{n = "mx.fold_scale"} : () -> ()'


def test_affine_set_with_ge_on_an_mx_op():
    attr = "{s = affine_set<(d0)[s0] : (d0 - s0 >= 0, -d0 + 31 >= 0)>}"
    text = FOLD.replace("mx.fold_scale %t, %a :", f"mx.fold_scale %t, %a {attr} :")
    out = print_module(parse_module(text, ir.Context()))
    assert "#set = affine_set<(d0)[s0] : (d0 - s0 >= 0, -d0 + 31 >= 0)>" in out
    assert "mx.fold_scale %arg0, %arg1 {s = #set}" in out


def test_aliases_of_mx_types_and_attributes():
    text = f"!a = {T}\n#l = loc(\"src.py\":7:3)\n" + FOLD.replace(T, "!a").replace(
        "return %0", "return %0 loc(#l)"
    ).replace("return %0 loc(#l) : !a", "return %0 : !a loc(#l)")
    module = parse_module(text, ir.Context())
    out = print_module(module, debug_info=True, filename="f.mlir")
    assert f"mx.fold_scale %arg0, %arg1 : {T}, f32 -> {T}" in out
    assert 'loc("src.py":7:3)' in out  # an explicit location is kept as written


def test_crlf_line_endings():
    text = FOLD.replace("\n", "\r\n")
    out = print_module(parse_module(text, ir.Context()))
    assert f"mx.fold_scale %arg0, %arg1 : {T}, f32 -> {T}" in out
    bad = text.replace("%t, %a :", "%t, %nope :")
    d = _error(bad)
    assert (d.line, d.col) == (2, 26) and "undeclared SSA value" in d.message


def test_operand_errors_point_at_the_operand():
    d = _error(FOLD.replace("%t, %a :", "%t, %nope :"))
    assert (d.file, d.line, d.col) == ("f.mlir", 2, 26)
    line = FOLD.replace("%t, %a :", "%t, %nope :").splitlines()[1]
    assert line[d.col - 1 :].startswith("%nope")
    d = _error(FOLD.replace("%0 = mx.fold_scale %t, %a", "%0 = mx.fold_scale %a, %t"))
    assert (d.line, d.col) == (2, 22) and "expects different type" in d.message
    assert T in d.message  # the message spells the type in the custom syntax


def test_debuginfo_columns_after_custom_types():
    module = parse_module(FOLD, ir.Context(), "f.mlir")
    out = print_module(module, debug_info=True, filename="f.mlir")
    line1 = FOLD.splitlines()[0]
    # %a comes after a long custom type on line 1; its column is the source's
    col_a = line1.index("%a") + 1
    assert f'%arg1: f32 loc("f.mlir":1:{col_a})' in out
    locs = set(re.findall(r'loc\("f.mlir":(\d+):(\d+)\)', out))
    assert ("2", "8") in locs and ("3", "3") in locs  # the op, the return


def test_debuginfo_columns_of_a_multi_line_op():
    text = FOLD.replace(f"%t, %a : {T}, f32", f"%t, %a :\n      {T},\n      f32")
    module = parse_module(text, ir.Context(), "f.mlir")
    out = print_module(module, debug_info=True, filename="f.mlir")
    ret_line = text.splitlines().index(f"  return %0 : {T}") + 1
    assert f'loc("f.mlir":{ret_line}:3)' in out or f"{ret_line}:3" in out


def _nested(depth: int) -> str:
    return "module {\n" * depth + "}\n" * depth


def test_nesting_limit():
    parse_module(_nested(MAX_NESTING), ir.Context())  # at the limit: fine
    d = _error(_nested(MAX_NESTING + 1))
    assert (d.line, d.col) == (MAX_NESTING + 1, 8)
    assert f"nest deeper than {MAX_NESTING} levels" in d.message
    d = _error("func.func @f() {\n  %x = \"t.op\"() {a = " + "[" * 3000 + "]" * 3000 + "} : () -> ()\n}")
    assert d.line == 2 and "nest deeper" in d.message


def test_no_result_and_statement_position():
    d = _error(FOLD.replace("%0 = mx.fold_scale", "mx.fold_scale"))
    assert (d.line, d.col) == (2, 3) and "produces a result" in d.message
    # an attribute named like an op, on its own line, is not an op
    text = FOLD.replace("mx.fold_scale %t, %a :", "mx.fold_scale %t, %a {\n    mx.fold_scale = 1 : i32} :")
    assert "mx.fold_scale = 1 : i32" in print_module(parse_module(text, ir.Context()))


def test_every_truncation_is_an_error_or_a_module():
    """No malformed prefix makes the layer raise anything but a diagnostic."""
    text = FOLD + f'!b = {T}\n#s = affine_set<(d0) : (d0 >= 0)>\nfunc.func @g(%x: tensor<4x32xf32>) -> !b {{\n  %q = mx.quantize_block %x {{n = "//<"}} : tensor<4x32xf32> -> !b // c\n  return %q : !b\n}}\n'
    for end in range(0, len(text), 5):
        try:
            parse_module(text[:end], ir.Context(), "t.mlir")
        except DiagnosticError as err:
            for d in err.diagnostics:
                assert d.file == "t.mlir" or d.file is None, str(d)


# The reduced fuzzer mutant (seed 7, case 3081): upstream's parser resolves the
# forward use of %c to the constant inside the generic's region, the region
# fails to parse, and the process aborts ("LLVM ERROR: operation destroyed but
# still has uses"; mlir-opt 22.1.8 too).  FIXME(upstream): no upstream issue
# found for this variant (searched 2026-12-01; llvm-project#128011 and
# #127778 fixed related ones).
INVISIBLE = """#map = affine_map<(d0, d1) -> (d0, d1)>
      %17 = arith.select %16, %c255_i32_1, %15 : i32
    %6 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%4 : tensor<1x1xf32>) outs(%5 : tensor<1x1xf8E8M0FNU>) {
      %c255_i32_1 = arith.constant 255 : i32
    ^bb0(%in: f8E4M3FN, %in_0: f8E8M0FNU, %out: f32):
"""


def test_invisible_forward_use():
    d = _error(INVISIBLE)
    assert (d.line, d.col) == (2, 31) and "use of undeclared SSA value name" in d.message


def test_visible_uses_are_not_refused():
    # names defined in an enclosing header ((%i) of scf.forall), block
    # arguments, CFG forward references and names reused in other functions
    text = """func.func @a(%n: index) -> index {
  scf.forall (%i) in (4) {
    %k = arith.addi %i, %i : index
  }
  cf.br ^bb2
^bb1:
  return %x : index
^bb2:
  %x = arith.addi %n, %n : index
  cf.br ^bb1
}
func.func @b(%n: index) {
  %c1 = arith.constant 1 : index
  scf.for %i = %n to %n step %c1 {
    %k = arith.addi %i, %i : index
  }
  return
}
"""
    parse_module(text, ir.Context())


@pytest.mark.parametrize("op", ["mod", "floordiv", "ceildiv"])
def test_affine_division_by_zero(op):
    """Fuzzer mutant (seed 2026, case 4824): a linalg indexing map with
    `d1 mod 0` aborts upstream's verifier (AffineMap::compose; mlir-opt
    22.1.8 too).  FIXME(upstream): refused in the text layer; related:
    llvm-project#173374, fixed for other maps by #173434 (see
    ``dialect.guards.scan``)."""
    text = f"""func.func @f(%a: tensor<33xf32>, %s: tensor<32xf32>, %c: tensor<4x33xf32>) -> tensor<4x33xf32> {{
  %0 = linalg.generic {{indexing_maps = [affine_map<(d0, d1) -> (d1)>, affine_map<(d0, d1) -> (d1 {op} (0))>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]}} ins(%a, %s : tensor<33xf32>, tensor<32xf32>) outs(%c : tensor<4x33xf32>) {{
  ^bb0(%x: f32, %y: f32, %o: f32):
    linalg.yield %x : f32
  }} -> tensor<4x33xf32>
  return %0 : tensor<4x33xf32>
}}
"""
    d = _error(text)
    assert d.line == 2 and text.splitlines()[1][d.col - 1 :].startswith(op)
    assert "divides by zero" in d.message
    parse_module(text.replace(f"{op} (0)", f"{op} 32"), ir.Context())  # a real divisor is fine

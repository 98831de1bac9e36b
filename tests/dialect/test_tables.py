"""One table per fact: the ops, the formats, the kernel schedules.

The four ops are written once, in :data:`mlir_mx.dialect.irdl.OPS`; the MX
element and scale formats once, in :mod:`mlir_mx.numerics.formats`.  Every
other list of them is derived, and these tests compare each derived list with
its table.  The last tests scan ``src/`` and ``tests/`` and fail when a NEW
literal list of two or more op names or format names (or of records naming
them) appears anywhere else, or when code dispatches on a format's bit width
instead of its behaviour in the table: add an op or a format in one place.
"""

import ast
import re
from pathlib import Path

import numpy as np
import pytest
from mlir import ir

from mlir_mx.dialect import irdl, ops, verifier
from mlir_mx.dialect.types import ELEMENT_TYPES, SCALE_TYPES, MXTensorType
from mlir_mx.execution.runner import numpy_dtype
from mlir_mx.kernels import SCHEDULES
from mlir_mx.numerics import formats
from mlir_mx.numerics.formats import ELEMENT_FORMATS, SCALE_BITS, SCALE_DTYPE, SCALE_TYPE
from mlir_mx.passes.legalize.expand_narrow_floats import narrow_format
from mlir_mx.passes.legalize.subbyte_vector_memory import _subbyte_memref
from mlir_mx.passes.mx_to_linalg import lowerings
from mlir_mx_testing import fuzz

SRC = Path(__file__).resolve().parents[2] / "src" / "mlir_mx"
OP_NAMES = {op.name for op in irdl.OPS}


# ------------------------------------------------------------------- ops


def test_op_names_and_counts_come_from_the_table():
    assert irdl.OP_NAMES == {op.name: (len(op.operands), 1) for op in irdl.OPS}
    assert len(OP_NAMES) == len(irdl.OPS)  # no op listed twice


def test_irdl_defines_exactly_the_table():
    ctx = ir.Context()
    irdl.load_dialect(ctx)
    for op in irdl.OPS:
        assert ctx.is_registered_operation(op.name)
        assert f"irdl.operation @{op.mnemonic} " in irdl.MX_IRDL
        names = op.operands + op.optional
        operands = ", ".join(
            f"{n}: {'optional ' if i >= len(op.operands) else ''}%o{i}" for i, n in enumerate(names)
        )
        assert f"irdl.operands({operands})" in irdl.MX_IRDL
    assert irdl.MX_IRDL.count("irdl.operation") == len(irdl.OPS)


def test_every_op_has_a_builder_accessors_rules_and_a_lowering():
    assert ops.OpView._NAMES == {op.name: op.operands for op in irdl.OPS}
    assert set(verifier.RULES) == OP_NAMES
    assert set(lowerings.LOWERINGS) == OP_NAMES
    for op in irdl.OPS:
        assert callable(getattr(ops, op.mnemonic)), op.mnemonic
        assert op.mnemonic in ops.__all__


def test_is_mx_op_follows_the_table():
    class Named:
        def __init__(self, name):
            self.name = name

    assert all(ops.is_mx_op(Named(n)) for n in OP_NAMES)
    assert not ops.is_mx_op(Named("mx.kernel")) and not ops.is_mx_op(Named("arith.addf"))


def test_the_fuzz_dictionary_names_every_op():
    assert OP_NAMES <= set(fuzz._TOKENS)


# --------------------------------------------------------------- formats


def test_dialect_element_and_scale_types_are_the_table():
    assert ELEMENT_TYPES == tuple(ELEMENT_FORMATS)
    assert SCALE_TYPES == formats.SCALE_TYPES and SCALE_TYPES[0] == SCALE_TYPE
    for name in ELEMENT_FORMATS:
        assert MXTensorType((32,), name, 32).errors() == []
    assert MXTensorType((32,), "f8E4M3", 32).errors()  # an MLIR float, not MX


@pytest.mark.parametrize("name", list(ELEMENT_FORMATS))
def test_narrow_float_expansion_reads_the_table(name):
    f = ELEMENT_FORMATS[name]
    with ir.Context():
        n = narrow_format(ir.Type.parse(name))
    if f.is_int:
        assert n is None  # i8 needs no expansion
        return
    assert (n.ebits, n.mbits, n.bias, n.width, n.max_finite) == (
        f.ebits, f.mbits, f.bias, f.bits, f.max_normal,
    )  # fmt: skip
    assert n.kind == ("ieee" if f.has_inf else "nan" if f.has_nan else "sat")


def test_narrow_float_expansion_scale():
    with ir.Context():
        n = narrow_format(ir.Type.parse(SCALE_TYPE))
    assert (n.kind, n.width, n.ebits, n.mbits) == ("e8m0", SCALE_BITS, SCALE_BITS, 0)
    assert n.max_finite == float(np.asarray([254], np.uint8).view(SCALE_DTYPE)[0])


@pytest.mark.parametrize("name", list(ELEMENT_FORMATS))
def test_subbyte_legalization_and_runner_dtypes_read_the_table(name):
    f = ELEMENT_FORMATS[name]
    with ir.Context():
        assert _subbyte_memref(ir.Type.parse(f"memref<4x{name}>")) == f.is_sub_byte
    assert numpy_dtype(name) == f.dtype
    assert numpy_dtype(SCALE_TYPE) == SCALE_DTYPE


# ------------------------------------------------------------ no copies

#: The literal lists of op or format names ``src/`` and ``tests/`` may hold,
#: each with why it is not a copy of a table: (file, the name it is assigned
#: to or the function it is in) -> reason.  Keys of tables derived per op are
#: checked above.
ALLOWED = {
    ("src/mlir_mx/dialect/verifier.py", "RULES"): "one rule per op, keys checked against OPS",
    (
        "src/mlir_mx/passes/mx_to_linalg/lowerings.py",
        "LOWERINGS",
    ): "one lowering per op, keys checked against OPS",
    (
        "src/mlir_mx/interop/torchao.py",
        "torchao_modules",
    ): "torchao's dtype for each float format (another library's names)",
    (
        "src/mlir_mx_testing/fuzz.py",
        "_TOKENS",
    ): "a fuzzing dictionary: chosen tokens, its order fixes recorded cases",
    ("src/mlir_mx_testing/misuse.py", "_break"): "three formats picked to re-encode an argument",
    (
        "src/mlir_mx/tools/mx_demo.py",
        "QUICK_FORMATS",
    ): "mx-demo --quick's two formats: a packed FP4 and a byte FP8, picked",
    (
        "src/mlir_mx/kernels/registry.py",
        "SHAPE_CLASSES",
    ): "the shape classes (named like the schedules serving them)",
    (
        "src/mlir_mx_bench/models/llama/run.py",
        "ROWS",
    ): "the model benchmark's rows, each naming the one format it runs",
    (
        "src/mlir_mx/torch/checkpoint_layouts.py",
        "_QUARK_DTYPES",
    ): "AMD Quark's dtype names for the formats it writes (another library's names)",
    # tests: cases pinned to particular formats (the sample IS the test), the
    # table's values written out independently, another library's names.
    **{
        ("tests/" + f, owner): why
        for (f, owner), why in {
            (
                "numerics/test_formats.py",
                "EXPECTED",
            ): "the table's values, written out independently",
            ("torch_mx/family_cases.py", "QUARK_DTYPES"): "Quark's dtype names (another library's)",
            ("torch_mx/test_checkpoint_families.py", "test_mlx_mx_modes"): "MLX's mode names",
            ("numerics/test_formats.py", "test_finite_codes"): "expected code counts, written out",
            (
                "numerics/test_packing.py",
                "STORAGE_CASES",
            ): "shapes against each format's packing group",
            (
                "roofline/test_ir_model.py",
                "test_sub_byte_elements",
            ): "expected bytes per packing, written out",
            (
                "interop/test_torchao.py",
                "test_torchao_quantize_floor_equals_the_oracle",
            ): "torchao's dtypes",
            (
                "interop/test_torchao.py",
                "test_torch_gets_copies_an_mxarray_stays_a_value",
            ): "one format per torchao storage (a dtype, FP6 one per byte, FP4 packed)",
            (
                "interop/test_torchao.py",
                "test_axis0_weights_map_to_transposed_mxtensors",
            ): "an 8-bit and a packed format through torchao's transposed layout",
            (
                "kernels/test_dot_kernels.py",
                "test_special_values_follow_the_blocked_order",
            ): "one pair per dot unit (i8, i16, bf16)",
            (
                "kernels/test_dot_kernels.py",
                "test_without_vnni_the_bw_fallback_gives_the_same_bits",
            ): "pairs whose unit changes without VNNI",
            (
                "kernels/test_dot_kernels.py",
                "test_decode_reads_panels_side_by_side_with_the_same_bits",
            ): "one pair per record kind (FP4 nibbles, i8 bytes, i16 pairs)",
            (
                "kernels/test_dot_quantize.py",
                "test_quantized_activations_equal_the_oracle_quantized_mx",
            ): "one activation/weight pair per dot schedule",
            (
                "kernels/test_dot_units.py",
                "test_swapped_pair_chain_equals_in_order_fma_chain",
            ): "bf16-unit pairs: each FP8 format against formats of the other kinds",
            ("execution/test_matmul_lowerings.py", "test_shapes"): "shapes pinned per lowering",
            ("aarch64_subset.py", "SUBSET"): "the aarch64 job's test ids, parameters included",
            (
                "kernels/test_bf16_activations.py",
                "test_denormal_inputs_and_partials_follow_the_rule",
            ): "one weight format per bf16 floor (2^-103 .. 2^-118), on both bf16 schedules",
            (
                "torch_mx/test_generate_cli.py",
                "FIGURES",
            ): "mx-generate's figure lines (load, compile, prefill, decode), not schedules",
            (
                "execution/test_matmul_lowerings.py",
                "test_vectorized_pipeline_sub_byte_stays_correct",
            ): "sub-byte operands of the stock vectorizer, on either side",
            (
                "execution/test_matmul_lowerings.py",
                "test_vectorized_pipeline_leaves_sub_byte_scalar",
            ): "the sub-byte element types the vectorizer must not read as vectors",
            (
                "passes/kernels/test_matmul_kernels.py",
                "_PAIRS",
            ): "two mx x f32 cases beside the rotated pairs",
            (
                "passes/kernels/test_matmul_kernels.py",
                "test_packed_subbyte_codes",
            ): "packed A, packed B, both, and mx x f32",
            ("repro/test_f32_range_edges.py", "_PAIRS"): "a reproducer's pairs",
            (
                "numerics/test_nvfp4.py",
                "test_scale_rule",
            ): "(element, scale, block) triples the scale rule takes and refuses, written out",
            (
                "repro/test_f32_range_edges.py",
                "test_large_activations_are_exact",
            ): "a reproducer's formats",
            (
                "test_linear.py",
                "test_out_features_that_do_not_pack_stay_one_code_per_byte",
            ): "widths of out_features against each packing group",
            ("test_linear.py", "test_whole_tiles_are_stored_tiled"): "a packed and an 8-bit weight",
            ("test_linear_dot.py", "test_activations_quantize_per_call"): "one pair per dot unit",
            (
                "test_linear_inputs.py",
                "test_a_weight_without_rows_or_columns_gives_zeros",
            ): "a reproducer's formats",
            (
                "test_linear_inputs.py",
                "test_read_only_activations_in_either_call_order",
            ): "a reproducer's formats",
            ("tools/test_mx_bench.py", "test_quick_quantize_run"): "the rows a quick run must show",
            (
                "torch_mx/test_llama.py",
                "test_logits_within_the_bound_and_greedy_tokens_equal",
            ): "MXFP4 and MXFP8, the formats a model is converted to",
            (
                "torch_mx/test_mxlinear.py",
                "test_the_op_on_other_tensors_builds_a_linear_over_them",
            ): "widths of n_out against each packing group",
            (
                "torch_mx/test_mxlinear.py",
                "test_quantized_activations_equal_linear_on_quantized_x",
            ): "one activation format per dot unit",
            (
                "numerics/test_matmul_claim.py",
                "test_the_f32_fma_rounds_once",
            ): "the two formats whose elements give a tie at an f32 midpoint",
            (
                "test_linear_weight_form.py",
                "test_one_form_is_held_before_and_after_every_kind_of_call",
            ): "an MX x of the records' unit (i8) and of another unit (i16)",
            (
                "test_linear_weight_form.py",
                "test_records_give_back_the_weight_and_the_stored_form_bit_for_bit",
            ): "one weight format per lossless record unit",
            (
                "test_linear_weight_form.py",
                "test_the_stored_form_is_b_packed_and_tiled_as_before",
            ): "one weight per stored layout (packed, padded, tiled, one code per byte)",
        }.items()
    },
}

ROOT = SRC.parents[1]
#: The packages under src/: the library, mx-bench's machinery, the fuzzers.
PACKAGES = (SRC, SRC.parent / "mlir_mx_bench", SRC.parent / "mlir_mx_testing")
#: Where the scans look: the packages and their tests.
SCANNED = (*PACKAGES, ROOT / "tests")


def _src_files() -> list[Path]:
    """Every module of the packages under src/."""
    return sorted(path for top in PACKAGES for path in top.rglob("*.py"))


def _sources() -> list[tuple[str, str]]:
    """``(path relative to the repository, text)`` of every scanned module."""
    return [
        (path.relative_to(ROOT).as_posix(), path.read_text())
        for top in SCANNED
        for path in sorted(top.rglob("*.py"))
    ]


def _elements(node: ast.AST) -> list[ast.AST] | None:
    """The elements of a tuple/list/set display, or the keys and values of a dict."""
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return node.elts
    if isinstance(node, ast.Dict):
        return [k for k in node.keys if k is not None] + node.values
    return None


def _owners(tree: ast.Module) -> dict[ast.AST, str]:
    """Each node's owner: its top-level function or class, else the
    module-level name it is assigned to."""
    owner_of: dict[ast.AST, str] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            name = node.name
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            name = next((t.id for t in targets if isinstance(t, ast.Name)), "<module>")
        else:
            name = "<module>"
        for sub in ast.walk(node):
            owner_of[sub] = name
    return owner_of


def literal_lists(source: str, names: set[str], nested: bool = False) -> list[tuple[int, str]]:
    """(line, owner) of every tuple/list/set/dict display holding two or more
    different strings of ``names`` (with ``nested``: also counting those in
    the displays it holds, so that a list of ``(name, label)`` records is a
    list of names too); owner: the enclosing top-level function, else the
    module-level name it is assigned to.  A display compared with ``==`` (an
    expected value: ``assert got == ["mx.quantize_block", ...]``) is not a list."""
    tree = ast.parse(source)
    owner_of = _owners(tree)
    expected = {
        id(e)
        for n in ast.walk(tree)
        if isinstance(n, ast.Compare)
        for e in [n.left, *n.comparators]
    }

    def hits(elts) -> set[str]:
        return {e.value for e in elts if isinstance(e, ast.Constant) and e.value in names}

    found = []
    for node in ast.walk(tree):
        elts = _elements(node)
        if elts is None or id(node) in expected:
            continue
        got = hits(elts)
        if nested:
            got |= {v for e in elts for v in hits(_elements(e) or [])}
        if len(got) >= 2:
            found.append((node.lineno, owner_of.get(node, "<module>")))
    return found


def _copies(names: set[str], nested: bool = False) -> list[str]:
    return [
        f"{rel}:{line} ({owner})"
        for rel, text in _sources()
        for line, owner in literal_lists(text, names, nested)
        if (rel, owner) not in ALLOWED
    ]


def test_no_second_list_of_ops():
    assert _copies(OP_NAMES) == [], "derive these from mlir_mx.dialect.irdl.OPS"


def test_no_second_list_of_formats():
    names = set(ELEMENT_FORMATS) | {SCALE_TYPE}
    assert _copies(names, nested=True) == [], (
        "derive these from mlir_mx.numerics.formats (tests: tests/format_cases.py)"
    )


def test_every_allowance_is_still_needed():
    names = set(ELEMENT_FORMATS) | {SCALE_TYPE} | OP_NAMES | set(SCHEDULES) | {"auto"}
    used = {
        (rel, o) for rel, text in _sources() for _, o in literal_lists(text, names, nested=True)
    }
    assert sorted(set(ALLOWED) - used) == []


def test_the_scan_finds_a_copy():
    src = 'X = ("f8E4M3FN", "f8E5M2")\ndef f():\n    return {"mx.fold_scale": 1, "mx.block_matmul": 2}\n'
    names = set(ELEMENT_FORMATS) | OP_NAMES
    assert literal_lists(src, names) == [(1, "X"), (3, "f")]
    assert literal_lists('Y = ("f8E4M3FN", "f32")\n', names) == []
    records = 'Z = (("f8E4M3FN", "MXFP8"), ("f4E2M1FN", "MXFP4"))\n'
    assert literal_lists(records, names, nested=True) == [(1, "Z")]
    assert literal_lists(records, names) == []
    assert literal_lists('W = [("f8E4M3FN", 1), ("f8E4M3FN", 2)]\n', names, nested=True) == []
    assert literal_lists('assert got == ["f8E4M3FN", "i8"]\n', names) == []


#: The widths of the format table: a comparison of a ``bits`` or ``width``
#: attribute with one of them dispatches on a format's width instead of its
#: behaviour (``ElementFormat.is_sub_byte``, ``group``, ``widening``).
_WIDTHS = {f.bits for f in ELEMENT_FORMATS.values()} | {SCALE_BITS}


def width_dispatch(source: str) -> list[tuple[int, str]]:
    """(line, text) of every comparison of a ``.bits`` / ``.width`` attribute
    with a format width (``fmt.bits < 8``, ``fmt.bits == 4``, ...)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Compare):
            continue
        parts = [node.left, *node.comparators]
        attr = any(isinstance(p, ast.Attribute) and p.attr in ("bits", "width") for p in parts)
        width = any(isinstance(p, ast.Constant) and p.value in _WIDTHS for p in parts)
        if attr and width:
            found.append((node.lineno, ast.unparse(node)))
    return found


def test_no_dispatch_on_format_widths():
    """Behaviour comes from the format table's fields, never from a width:
    only the table itself derives ``is_sub_byte`` from ``bits``."""
    bad = [
        f"{rel}:{line}: {text}"
        for rel, src in _sources()
        if rel != "src/mlir_mx/numerics/formats.py"
        for line, text in width_dispatch(src)
    ]
    assert bad == [], "use ElementFormat.is_sub_byte / group / widening"
    assert width_dispatch("if fmt.bits < 8 and f.width == 4:\n    pass\n") == [
        (1, "fmt.bits < 8"), (1, "f.width == 4"),
    ]  # fmt: skip
    assert width_dispatch("ok = t.width == 1 or fmt.bits + 1\n") == []


def test_no_second_list_of_schedules():
    """Schedule names live in the one registry (kernels/registry.py SCHEDULES)."""
    assert _copies(set(SCHEDULES) | {"auto"}) == [], "iterate mlir_mx.kernels.SCHEDULES"
    for path in _src_files():
        if path == SRC / "kernels" / "registry.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            assert not (isinstance(node, ast.Constant) and node.value in SCHEDULES), (
                f"{path}:{node.lineno}: the schedule name {node.value!r} outside the registry"
            )


#: Pipeline text built by string formatting: ``pass{{...}}`` or
#: ``anchor(...)`` (``f"func.func({el})"``) in an f-string, or pipeline pieces
#: joined with ``+ ","``.
_PIPELINE_TEXT = re.compile(r'f"[a-z0-9.-]+\{\{|f"[a-z._-]+\(|\+\s*","|","\s*\+')


def test_no_pipeline_text_built_by_formatting():
    """Pipelines are Pipeline objects built with PipelineElement.of; text only
    at the edges (Pipeline.parse, str())."""
    bad = [
        f"{path.relative_to(SRC.parent)}:{i}: {line.strip()}"
        for path in _src_files()
        for i, line in enumerate(path.read_text().splitlines(), 1)
        if _PIPELINE_TEXT.search(line)
    ]
    assert bad == []
    assert _PIPELINE_TEXT.search('x = f"mx-matmul-kernels{{threads={t}}}"')
    assert _PIPELINE_TEXT.search('p = head + "," + tail')
    assert _PIPELINE_TEXT.search('add(pm, f"func.func({el})", el)')
    assert not _PIPELINE_TEXT.search('msg = f"({n} outside the claim)"')


def test_the_schedules_match_kernel_tags_of_the_enum():
    """``mx.kernel`` values are one enum (ir_utils.KernelTag): the shipped
    transform schedules match only its members, and src/ spells none as a
    literal outside it."""
    from mlir_mx.ir_utils import KernelTag

    tags = {t.value for t in KernelTag}
    for mlir in (SRC / "pipelines").glob("*.mlir"):
        for found in re.findall(r'mx\\.kernel = "([a-z_]+)"', mlir.read_text()):
            assert found in tags, (mlir.name, found)
    for path in _src_files():
        if path.name == "ir_utils.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") in ("tag_kernel",):
                assert not any(isinstance(a, ast.Constant) for a in node.args), path

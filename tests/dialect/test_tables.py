"""One table per fact: the ops, the formats, the kernel schedules.

The four ops are written once, in :data:`mlir_mx.dialect.irdl.OPS`; the MX
element and scale formats once, in :mod:`mlir_mx.numerics.formats`.  Every
other list of them is derived, and these tests compare each derived list with
its table.  The last tests scan ``src/`` and fail when a NEW literal list of
two or more op names or format names appears anywhere else: add an op or a
format in one place.
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
from mlir_mx.numerics.formats import ELEMENT_FORMATS, SCALE_BITS, SCALE_DTYPE, SCALE_TYPE
from mlir_mx.passes import mx_to_linalg
from mlir_mx.passes.expand_narrow_floats import narrow_format
from mlir_mx.passes.legalize_subbyte_vector_memory import _subbyte_memref
from mlir_mx.testing import fuzz

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
        operands = ", ".join(f"{n}: %o{i}" for i, n in enumerate(op.operands))
        assert f"irdl.operands({operands})" in irdl.MX_IRDL
    assert irdl.MX_IRDL.count("irdl.operation") == len(irdl.OPS)


def test_every_op_has_a_builder_accessors_rules_and_a_lowering():
    assert ops.OpView._NAMES == {op.name: op.operands for op in irdl.OPS}
    assert set(verifier.RULES) == OP_NAMES
    assert set(mx_to_linalg.LOWERINGS) == OP_NAMES
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
    assert SCALE_TYPES == (SCALE_TYPE,)
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

#: The literal lists of op or format names ``src/`` may hold, each with why
#: it is not a copy of a table: (file, the name it is assigned to or the
#: function it is in) -> reason.  Keys of tables derived per op are checked
#: above.
ALLOWED = {
    ("dialect/verifier.py", "RULES"): "one rule per op, keys checked against OPS",
    ("passes/mx_to_linalg/ops.py", "LOWERINGS"): "one lowering per op, keys checked against OPS",
    ("interop/torchao.py", "_torch"): "torchao's dtype for each float format (another library's names)",
    ("testing/fuzz.py", "_TOKENS"): "a fuzzing dictionary: chosen tokens, its order fixes recorded cases",
    ("testing/misuse.py", "_break"): "three formats picked to re-encode an argument",
    ("kernels/registry.py", "SHAPE_CLASSES"): "the shape classes (named like the schedules serving them)",
}


def literal_lists(source: str, names: set[str]) -> list[tuple[int, str]]:
    """(line, owner) of every tuple/list/set/dict display holding two or more
    strings of ``names``; owner: the enclosing top-level function, else the
    module-level name it is assigned to."""
    tree = ast.parse(source)
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
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Tuple | ast.List | ast.Set):
            elts = node.elts
        elif isinstance(node, ast.Dict):
            elts = [k for k in node.keys if k is not None] + node.values
        else:
            continue
        hits = [e for e in elts if isinstance(e, ast.Constant) and e.value in names]
        if len(hits) >= 2:
            found.append((node.lineno, owner_of.get(node, "<module>")))
    return found


def _copies(names: set[str]) -> list[str]:
    bad = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        for line, owner in literal_lists(path.read_text(), names):
            if (rel, owner) not in ALLOWED:
                bad.append(f"src/mlir_mx/{rel}:{line} ({owner})")
    return bad


def test_no_second_list_of_ops():
    assert _copies(OP_NAMES) == [], "derive these from mlir_mx.dialect.irdl.OPS"


def test_no_second_list_of_formats():
    names = set(ELEMENT_FORMATS) | {SCALE_TYPE}
    assert _copies(names) == [], "derive these from mlir_mx.numerics.formats"


def test_the_scan_finds_a_copy():
    src = 'X = ("f8E4M3FN", "f8E5M2")\ndef f():\n    return {"mx.fold_scale": 1, "mx.block_matmul": 2}\n'
    names = set(ELEMENT_FORMATS) | OP_NAMES
    assert literal_lists(src, names) == [(1, "X"), (3, "f")]
    assert literal_lists('Y = ("f8E4M3FN", "f32")\n', names) == []


def test_no_second_list_of_schedules():
    """Schedule names live in the one registry (kernels/registry.py SCHEDULES)."""
    assert _copies(set(SCHEDULES) | {"auto"}) == [], "iterate mlir_mx.kernels.SCHEDULES"
    for path in sorted(SRC.rglob("*.py")):
        if path.relative_to(SRC).as_posix() == "kernels/registry.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            assert not (isinstance(node, ast.Constant) and node.value in SCHEDULES), (
                f"{path}:{node.lineno}: the schedule name {node.value!r} outside the registry"
            )


#: Pipeline text built by string formatting: ``pass{{...}}`` in an f-string,
#: or pipeline pieces joined with ``+ ","``.
_PIPELINE_TEXT = re.compile(r'f"[a-z0-9.-]+\{\{|\+\s*","|","\s*\+')


def test_no_pipeline_text_built_by_formatting():
    """Pipelines are Pipeline objects built with PipelineElement.of; text only
    at the edges (Pipeline.parse, str())."""
    bad = [
        f"{path.relative_to(SRC)}:{i}: {line.strip()}"
        for path in sorted(SRC.rglob("*.py"))
        for i, line in enumerate(path.read_text().splitlines(), 1)
        if _PIPELINE_TEXT.search(line)
    ]
    assert bad == []
    assert _PIPELINE_TEXT.search('x = f"mx-matmul-kernels{{threads={t}}}"')
    assert _PIPELINE_TEXT.search('p = head + "," + tail')


def test_the_schedules_match_kernel_tags_of_the_enum():
    """``mx.kernel`` values are one enum (ir_utils.KernelTag): the shipped
    transform schedules match only its members, and src/ spells none as a
    literal outside it."""
    from mlir_mx.ir_utils import KernelTag

    tags = {t.value for t in KernelTag}
    for mlir in (SRC / "pipelines").glob("*.mlir"):
        for found in re.findall(r'mx\\.kernel = "([a-z_]+)"', mlir.read_text()):
            assert found in tags, (mlir.name, found)
    for path in sorted(SRC.rglob("*.py")):
        if path.name == "ir_utils.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") in ("tag_kernel",):
                assert not any(isinstance(a, ast.Constant) for a in node.args), path

"""The byte and FLOP model, read from IR.

:func:`analyze` takes a module (text or ``ir.Module``), lowers it as far as
the model needs, and reads two things off the result:

* **bytes**: the memref arguments and results of the *bufferized* function,
  each buffer once (a result that is an argument, or a view of one, is not
  counted again), at the element type's bit width (``f4E2M1FN`` = 0.5 byte,
  ``f6*`` = 0.75 byte, ``f8*`` = 1, ``f32`` = 4).  Buffers allocated inside
  the function are listed as temporaries and not counted.
* **FLOPs**: every float arithmetic op in a ``linalg.generic`` payload counts
  once per point of the op's iteration space (the product of the loop
  ranges, read from the operand shapes through the indexing maps); named
  linalg ops are generalized first (``linalg-generalize-named-ops``), so a
  ``linalg.matmul`` comes out as ``2*M*N*K`` by the same rule.  Conversions
  (``extf``, ``truncf``, ``sitofp``, ``bitcast``, ...) are counted apart.

FLOPs are split into *useful* (the contraction's multiply-add: the ``addf``
that accumulates into an ``outs`` block argument of a generic with a
reduction loop, and the ``mulf`` feeding it when neither of its operands is
a scale value), *dequant* (every other ``mulf``: the multiplies that undo
the block scaling) and *other* (any remaining float op).  ``docs/model.md``
states the rule in full.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mlir import ir

from mlir_mx.diagnostics import DiagnosticError, MXError
from mlir_mx.dialect import parse_module
from mlir_mx.passes.pipeline import PipelineError, run_pipeline

__all__ = [
    "BUFFERIZE",
    "Buffer",
    "KernelModel",
    "LinalgCount",
    "ModelError",
    "Shift",
    "analyze",
    "analyze_all",
    "element_bits",
    "lower_to_linalg",
    "shift",
]

#: The bufferization the byte rule reads (identity layouts at the boundary).
BUFFERIZE = (
    "one-shot-bufferize{bufferize-function-boundaries=1 "
    "function-boundary-type-conversion=identity-layout-map}"
)

#: The MX scale type; an operand of this element type is a scale.
_SCALE_ELEMENT = "f8E8M0FNU"

# FLOPs per execution of each float op (per iteration-space point).
_FLOAT_OPS = {
    "arith.addf": 1,
    "arith.subf": 1,
    "arith.mulf": 1,
    "arith.divf": 1,
    "arith.remf": 1,
    "arith.negf": 1,
    "arith.maximumf": 1,
    "arith.minimumf": 1,
    "arith.maxnumf": 1,
    "arith.minnumf": 1,
    "math.fma": 2,
    "math.sqrt": 1,
    "math.rsqrt": 1,
    "math.exp": 1,
    "math.exp2": 1,
    "math.log": 1,
    "math.log2": 1,
    "math.tanh": 1,
    "math.absf": 1,
    "math.powf": 1,
}
# Conversions: counted separately, never as FLOPs.
_CONVERSIONS = {
    "arith.extf",
    "arith.truncf",
    "arith.sitofp",
    "arith.uitofp",
    "arith.fptosi",
    "arith.fptoui",
    "arith.bitcast",
    "arith.scaling_extf",
    "arith.scaling_truncf",
}
# Ops that only re-view a buffer (the byte rule follows them to the root).
_VIEWS = {
    "memref.expand_shape",
    "memref.collapse_shape",
    "memref.subview",
    "memref.cast",
    "memref.reinterpret_cast",
    "memref.reshape",
    "memref.transpose",
    "memref.view",
    "memref.assume_alignment",
}


class ModelError(MXError, ValueError):
    """The IR cannot be modelled (no function, a dynamic shape, ...)."""


def element_bits(t: ir.Type) -> int:
    """Bit width of one element of type ``t`` (``index`` counts as 64)."""
    if isinstance(t, ir.FloatType):
        return t.width
    if isinstance(t, ir.IntegerType):
        return t.width
    if isinstance(t, ir.IndexType):
        return 64
    if isinstance(t, ir.ComplexType):
        return 2 * element_bits(t.element_type)
    raise ModelError(f"no bit width for element type {t}")


def _fmt_num(x: float) -> str:
    return f"{int(x):,}" if float(x).is_integer() else f"{x:,.2f}"


@dataclass
class Buffer:
    """One buffer at the function boundary (or a temporary)."""

    index: int | None  # argument index; None for a returned fresh buffer / temporary
    name: str  # role: "A mantissa", "A scale", "B", "C (accumulator)", "arg3", ...
    type: str
    shape: tuple[int, ...]
    element: str
    bits: int
    returned: bool = False

    @property
    def elements(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def bytes(self) -> float:
        """``elements * bits / 8``: fractional for sub-byte types (f6: 0.75 byte)."""
        b = self.elements * self.bits / 8
        return int(b) if float(b).is_integer() else b


@dataclass
class LinalgCount:
    """The count of one linalg op: its iteration space and per-point ops."""

    op: str
    iterations: int
    loop_ranges: tuple[int, ...]
    useful: int = 0  # FLOPs per point
    dequant: int = 0
    other: int = 0
    conversions: int = 0
    classified: list[tuple[str, str]] = field(default_factory=list)  # (op, class)


@dataclass
class KernelModel:
    """Bytes and FLOPs of one function, read from its lowered IR."""

    function: str
    buffers: list[Buffer]
    temporaries: list[Buffer]
    ops: list[LinalgCount]
    bufferized_ir: str = ""
    notes: list[str] = field(default_factory=list)
    label: str = ""

    # ---------------------------------------------------------------- totals
    @property
    def bytes(self) -> float:
        b = sum(buf.bytes for buf in self.buffers)
        return int(b) if float(b).is_integer() else b

    @property
    def flops_useful(self) -> int:
        return sum(c.useful * c.iterations for c in self.ops)

    @property
    def flops_dequant(self) -> int:
        return sum(c.dequant * c.iterations for c in self.ops)

    @property
    def flops_other(self) -> int:
        return sum(c.other * c.iterations for c in self.ops)

    @property
    def flops(self) -> int:
        return self.flops_useful + self.flops_dequant + self.flops_other

    @property
    def conversions(self) -> int:
        return sum(c.conversions * c.iterations for c in self.ops)

    @property
    def intensity(self) -> float:
        """FLOPs per byte (``inf`` when no bytes move)."""
        return self.flops / self.bytes if self.bytes else float("inf")

    # -------------------------------------------------------- on a machine
    def attainable(self, machine) -> float:
        """``min(peak, BW * I)`` in FLOP/s."""
        return min(machine.peak, machine.bandwidth * self.intensity)

    def time_floor(self, machine) -> float:
        """``max(bytes / BW, FLOPs / peak)`` in seconds."""
        return max(self.bytes / machine.bandwidth, self.flops / machine.peak)

    def bound(self, machine) -> str:
        """``"memory"`` or ``"compute"``: which ceiling sets the time floor."""
        return (
            "memory" if self.bytes / machine.bandwidth >= self.flops / machine.peak else "compute"
        )

    def breakdown(self) -> str:
        """Multi-line text: one line per buffer, then the FLOP split."""
        head = f"{self.label} (@{self.function})" if self.label else f"@{self.function}"
        lines = [f"{head}: {_fmt_num(self.bytes)} bytes"]
        for b in self.buffers:
            ret = " (returned)" if b.returned else ""
            lines.append(f"  {b.name:<18} {b.type:<32} {_fmt_num(b.bytes):>12} B{ret}")
        for b in self.temporaries:
            lines.append(
                f"  {b.name:<18} {b.type:<32} {_fmt_num(b.bytes):>12} B (temporary, not counted)"
            )
        lines.append(
            f"  FLOPs: {self.flops:,} = useful {self.flops_useful:,} + dequant "
            f"{self.flops_dequant:,} + other {self.flops_other:,}; conversions {self.conversions:,}"
        )
        for c in self.ops:
            per = ", ".join(f"{o}:{k}" for o, k in c.classified)
            lines.append(f"  {c.op} over {'x'.join(map(str, c.loop_ranges))}: {per}")
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


@dataclass(frozen=True)
class Shift:
    """``I_v / I_base = (B_base / B_v) x (F_v / F_base)``."""

    intensity_ratio: float
    byte_ratio: float
    flop_ratio: float

    @property
    def label(self) -> str:
        return (
            f"{self.intensity_ratio:.2f}x = {self.byte_ratio:.2f}x bytes x "
            f"{self.flop_ratio:.2f}x FLOPs"
        )


def shift(base: KernelModel, variant: KernelModel) -> Shift:
    """Decompose the intensity shift of ``variant`` against ``base``."""
    br = base.bytes / variant.bytes
    fr = variant.flops / base.flops
    return Shift(variant.intensity / base.intensity, br, fr)


# ======================================================================= analysis


def _run(pipeline: str, module: ir.Module, filename: str = "-") -> None:
    """Run ``pipeline``; a failure becomes a :class:`ModelError` with its located diagnostics."""
    try:
        run_pipeline(module, pipeline, filename=filename)
    except PipelineError as err:
        raise ModelError(f"{pipeline.split('{')[0]}: {err}") from None
    except DiagnosticError as err:
        raise ModelError(err.diagnostics) from None


def lower_to_linalg(module_or_text: ir.Module | str, matmul_lowering: str | None = None) -> str:
    """The module after ``mx-to-linalg`` (unchanged text when it has no mx ops)."""
    text = str(module_or_text) if isinstance(module_or_text, ir.Module) else module_or_text
    ctx = ir.Context()
    with ctx, ir.Location.unknown():
        module = parse_module(text, ctx)
        if not _has_mx(module):
            return str(module)
        opt = f"{{matmul-lowering={matmul_lowering}}}" if matmul_lowering else ""
        _run("mx-to-linalg" + opt, module)
        return str(module)


def analyze(
    module_or_text: ir.Module | str,
    function: str | None = None,
    *,
    matmul_lowering: str | None = None,
    filename: str = "-",
) -> KernelModel:
    """Model one function (``function``, or the first public one with a body)."""
    models = analyze_all(module_or_text, matmul_lowering=matmul_lowering, filename=filename)
    if not models:
        raise ModelError("no function with a body to model")
    if function is None:
        return models[0]
    for m in models:
        if m.function == function:
            return m
    known = ", ".join(m.function for m in models)
    raise ModelError(f"no function '{function}' (available: {known})")


def analyze_all(
    module_or_text: ir.Module | str,
    *,
    matmul_lowering: str | None = None,
    filename: str = "-",
) -> list[KernelModel]:
    """Model every public function with a body, in module order.

    Runs ``mx-to-linalg`` (with ``{matmul-lowering=...}`` when given) when the
    module holds mx ops or types, then :data:`BUFFERIZE`, then
    ``linalg-generalize-named-ops``; all in a fresh context.
    """
    text = str(module_or_text) if isinstance(module_or_text, ir.Module) else module_or_text
    ctx = ir.Context()
    with ctx, ir.Location.unknown():
        module = parse_module(text, ctx, filename=filename)
        steps = []
        if _has_mx(module):
            opt = f"{{matmul-lowering={matmul_lowering}}}" if matmul_lowering else ""
            steps.append("mx-to-linalg" + opt)
        elif matmul_lowering:
            raise ModelError("matmul-lowering given but the module has no mx ops")
        steps += [BUFFERIZE, "canonicalize"]
        for step in steps:
            _run(step, module, filename)
        bufferized = str(module)
        _run("linalg-generalize-named-ops", module, filename)
        models = []
        for fn in module.body.operations:
            fn = fn.operation
            if fn.name != "func.func" or not fn.regions[0].blocks:
                continue
            attrs = fn.attributes
            if (
                "sym_visibility" in attrs
                and ir.StringAttr(attrs["sym_visibility"]).value != "public"
            ):
                continue
            m = _model_function(fn)
            m.bufferized_ir = bufferized
            models.append(m)
    return models


def _has_mx(module: ir.Module) -> bool:
    found = []

    def visit(op):
        o = op.operation
        if o.name.startswith("mx.") or any("!mx." in str(r.type) for r in o.results):
            found.append(o)
            return ir.WalkResult.INTERRUPT
        if o.name == "func.func" and "!mx." in str(o.attributes["function_type"]):
            found.append(o)
            return ir.WalkResult.INTERRUPT
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return bool(found)


def _walk(op: ir.Operation, pred) -> list[ir.Operation]:
    out: list[ir.Operation] = []

    def visit(o):
        o = o.operation
        if pred(o):
            out.append(o)
        return ir.WalkResult.ADVANCE

    op.walk(visit, ir.WalkOrder.PRE_ORDER)
    return out


def _owner(v: ir.Value) -> ir.Operation | None:
    if isinstance(v, ir.BlockArgument):
        return None
    o = v.owner
    return getattr(o, "operation", o)


def _root(v: ir.Value) -> ir.Value:
    """Follow view ops (expand_shape, subview, cast, ...) back to the viewed buffer."""
    while True:
        op = _owner(v)
        if op is None or op.name not in _VIEWS:
            return v
        v = op.operands[0]


def _static_shape(t: ir.Type, what: str) -> tuple[int, ...]:
    st = ir.ShapedType(t)
    if not st.has_static_shape:
        raise ModelError(f"{what} has a dynamic shape ({t}); the model needs static shapes")
    return tuple(st.shape)


def _same(a: ir.Value, b: ir.Value) -> bool:
    return a == b


def _index_of(values: list[ir.Value], v: ir.Value) -> int | None:
    for i, x in enumerate(values):
        if _same(x, v):
            return i
    return None


def _model_function(fn: ir.Operation) -> KernelModel:
    name = ir.StringAttr(fn.attributes["sym_name"]).value
    block = fn.regions[0].blocks[0]
    args = list(block.arguments)
    linalg_ops = _walk(fn, lambda o: o.name.startswith("linalg.") and o.name != "linalg.yield")

    # ---- buffers at the boundary -------------------------------------------------
    buffers: list[Buffer] = []
    for i, a in enumerate(args):
        if isinstance(a.type, ir.MemRefType):
            t = a.type
            buffers.append(
                Buffer(
                    i,
                    f"arg{i}",
                    str(t),
                    _static_shape(t, f"argument {i} of @{name}"),
                    str(t.element_type),
                    element_bits(t.element_type),
                )
            )
    notes: list[str] = []
    if any(isinstance(a.type, ir.RankedTensorType) for a in args):
        notes.append("tensor arguments left after bufferization are not counted")
    returns = _walk(fn, lambda o: o.name == "func.return")
    extra_results: list[Buffer] = []
    for ret in returns[:1]:
        for j, v in enumerate(ret.operands):
            if not isinstance(v.type, ir.MemRefType):
                continue
            root = _root(v)
            k = _index_of(args, root)
            if k is not None:
                for b in buffers:
                    if b.index == k:
                        b.returned = True
                continue
            t = v.type
            extra_results.append(
                Buffer(
                    None,
                    f"result{j}",
                    str(t),
                    _static_shape(t, f"result {j} of @{name}"),
                    str(t.element_type),
                    element_bits(t.element_type),
                    returned=True,
                )
            )
    temporaries = []
    for k, alloc in enumerate(_walk(fn, lambda o: o.name in ("memref.alloc", "memref.alloca"))):
        t = alloc.results[0].type
        if not ir.ShapedType(t).has_static_shape:
            continue
        temporaries.append(
            Buffer(
                None,
                f"temp{k}",
                str(t),
                tuple(t.shape),
                str(t.element_type),
                element_bits(t.element_type),
            )
        )
    # A returned fresh buffer that is also an alloc is a result, not a temporary.
    returned_types = {b.type for b in extra_results}
    temporaries = [t for t in temporaries if t.type not in returned_types]
    _name_roles(buffers, args, linalg_ops)
    buffers += extra_results

    # ---- FLOPs -------------------------------------------------------------------
    counts = []
    for op in linalg_ops:
        if op.name == "linalg.generic":
            counts.append(_count_generic(op))
        elif op.name not in ("linalg.index",):
            notes.append(f"'{op.name}' was not generalized and is not counted")
    loose = _walk(
        fn,
        lambda o: o.name in _FLOAT_OPS and not _inside_linalg(o),
    )
    if loose:
        notes.append(
            f"{len(loose)} float op(s) outside linalg payloads are not counted "
            f"(first: '{loose[0].name}')"
        )
    return KernelModel(name, buffers, temporaries, counts, notes=notes)


def _inside_linalg(op: ir.Operation) -> bool:
    p = op.parent
    while p is not None:
        p = getattr(p, "operation", p)
        if p.name.startswith("linalg."):
            return True
        if p.name in ("func.func", "builtin.module"):
            return False
        p = p.parent
    return False


def _maps(op: ir.Operation) -> list[ir.AffineMap]:
    return [ir.AffineMapAttr(a).value for a in ir.ArrayAttr(op.attributes["indexing_maps"])]


def _iterators(op: ir.Operation) -> list[str]:
    return [
        "reduction" if "reduction" in str(a) else "parallel"
        for a in ir.ArrayAttr(op.attributes["iterator_types"])
    ]


def _split_operands(op: ir.Operation) -> tuple[list[ir.Value], list[ir.Value]]:
    seg = list(ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"]))
    ops = list(op.operands)
    return ops[: seg[0]], ops[seg[0] : seg[0] + seg[1]]


def _loop_ranges(op: ir.Operation) -> tuple[int, ...]:
    """Range of each loop: the size of an operand dimension a map reads as a bare ``d_i``."""
    maps = _maps(op)
    ranges: list[int | None] = [None] * maps[0].n_dims
    for v, m in zip(op.operands, maps, strict=True):
        if not isinstance(v.type, ir.ShapedType):
            continue
        shape = _static_shape(v.type, f"an operand of '{op.name}'")
        for r, size in zip(m.results, shape, strict=True):
            if isinstance(r, ir.AffineDimExpr) and ranges[r.position] is None:
                ranges[r.position] = size
    if any(r is None for r in ranges):
        raise ModelError(f"cannot infer the loop ranges of '{op.name}' from its operand shapes")
    return tuple(ranges)  # type: ignore[arg-type]


def _is_scale_operand(v: ir.Value, m: ir.AffineMap) -> bool:
    t = v.type
    if isinstance(t, ir.ShapedType) and str(t.element_type) == _SCALE_ELEMENT:
        return True
    return False


def _count_generic(op: ir.Operation) -> LinalgCount:
    ranges = _loop_ranges(op)
    iterations = 1
    for r in ranges:
        iterations *= r
    has_reduction = "reduction" in _iterators(op)
    ins, outs = _split_operands(op)
    maps = _maps(op)
    body = op.regions[0].blocks[0]
    bargs = list(body.arguments)
    out_args = bargs[len(ins) :]

    # Scale values: scale operands' block arguments, their conversions, and
    # arithmetic on nothing but scale values and constants (a combined scale).
    scale_vals: list[ir.Value] = [
        bargs[i] for i, v in enumerate(ins) if _is_scale_operand(v, maps[i])
    ]
    const_vals: list[ir.Value] = []
    payload = _walk_block(body)
    for o in payload:
        if o.name == "arith.constant":
            const_vals += list(o.results)
            continue
        operands = list(o.operands)
        if not operands or not o.results:
            continue
        non_const = [x for x in operands if _index_of(const_vals, x) is None]
        if non_const and all(_index_of(scale_vals, x) is not None for x in non_const):
            if o.name in _CONVERSIONS or o.name in _FLOAT_OPS:
                scale_vals += list(o.results)

    def is_scale(v):
        return _index_of(scale_vals, v) is not None

    # The accumulation: yield operand j = addf(out_j, p) in a reduction.
    useful: list[ir.Operation] = []
    accumulators_other: list[ir.Operation] = []
    yields = [o for o in body.operations if o.operation.name == "linalg.yield"]
    if has_reduction and yields:
        for j, y in enumerate(yields[0].operation.operands):
            if j >= len(out_args):
                break
            acc = _owner(y)
            if acc is None:
                continue
            if acc.name in ("arith.addf",):
                a, b = acc.operands
                if _same(a, out_args[j]):
                    p = b
                elif _same(b, out_args[j]):
                    p = a
                else:
                    continue
                prod = _owner(p)
                if (
                    prod is not None
                    and prod.name == "arith.mulf"
                    and not any(is_scale(x) for x in prod.operands)
                ):
                    useful += [acc, prod]
                else:
                    accumulators_other.append(acc)
            elif acc.name == "math.fma":
                x, z, c = acc.operands
                if _same(c, out_args[j]) and not (is_scale(x) or is_scale(z)):
                    useful.append(acc)

    def in_list(o, lst):
        return any(o == x for x in lst)

    count = LinalgCount(op.name, iterations, ranges)
    for o in payload:
        if o.name in _CONVERSIONS:
            count.conversions += 1
            count.classified.append((o.name.split(".")[-1], "conversion"))
            continue
        k = _FLOAT_OPS.get(o.name)
        if k is None:
            continue
        if in_list(o, useful):
            count.useful += k
            cls = "useful"
        elif o.name == "arith.mulf":
            count.dequant += k
            cls = "dequant"
        else:
            count.other += k
            cls = "other"
        count.classified.append((o.name.split(".")[-1], cls))
    return count


def _walk_block(block: ir.Block) -> list[ir.Operation]:
    """Every op in ``block`` and its nested regions, in order."""
    out: list[ir.Operation] = []
    for o in block.operations:
        o = o.operation
        out.append(o)
        for r in o.regions:
            for b in r.blocks:
                out += _walk_block(b)
    return out


# ======================================================================= roles


def _name_roles(buffers: list[Buffer], args: list[ir.Value], linalg_ops) -> None:
    """Name argument buffers by their role in the linalg ops that read them.

    In a contraction (a generic with a reduction loop), the ``outs`` buffer is
    ``C`` (``C (accumulator)`` when the payload reads it); an input indexed by
    the output's first parallel dimension and not its second is ``A``, the
    converse ``B``; a scale-typed input is that operand's ``scale`` (and the
    other buffer of the same operand its ``mantissa``).  Otherwise: ``argN``.
    """
    roles: dict[int, tuple[str, str]] = {}  # arg index -> (operand, part)
    for op in linalg_ops:
        if op.name != "linalg.generic":
            continue
        ins, outs = _split_operands(op)
        maps = _maps(op)
        reduction = "reduction" in _iterators(op)
        body = op.regions[0].blocks[0]
        bargs = list(body.arguments)
        out_dims: list[int] = []
        for j, (v, m) in enumerate(zip(outs, maps[len(ins) :], strict=False)):
            out_dims = [r.position for r in m.results if isinstance(r, ir.AffineDimExpr)]
            k = _index_of(args, _root(v))
            if k is not None and k not in roles:
                reads = _is_used(bargs[len(ins) + j], body)
                roles[k] = ("C", "accumulator" if reduction and reads else "")
        if not reduction or len(out_dims) < 2:
            continue
        for v, m in zip(ins, maps, strict=False):
            k = _index_of(args, _root(v))
            if k is None or k in roles:
                continue
            used = set()
            for r in m.results:
                used |= _dims_of(r)
            a, b = out_dims[0] in used, out_dims[1] in used
            who = "A" if a and not b else "B" if b and not a else None
            if who is None:
                continue
            part = "scale" if str(ir.ShapedType(v.type).element_type) == _SCALE_ELEMENT else ""
            roles[k] = (who, part)
    scaled = {who for who, part in roles.values() if part == "scale"}
    for b in buffers:
        if b.index is None or b.index not in roles:
            continue
        who, part = roles[b.index]
        if who == "C":
            b.name = "C (accumulator)" if part else "C"
        elif part == "scale":
            b.name = f"{who} scale"
        elif who in scaled:
            b.name = f"{who} mantissa"
        else:
            b.name = who


def _is_used(v: ir.Value, block: ir.Block) -> bool:
    return any(_index_of(list(o.operands), v) is not None for o in _walk_block(block))


def _dims_of(e: ir.AffineExpr) -> set[int]:
    if isinstance(e, ir.AffineDimExpr):
        return {e.position}
    if isinstance(e, ir.AffineBinaryExpr):
        return _dims_of(e.lhs) | _dims_of(e.rhs)
    return set()

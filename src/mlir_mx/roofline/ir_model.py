"""The byte and FLOP model, read from IR.

:func:`analyze` takes a module (text or ``ir.Module``), lowers it as far as
the model needs (here), and reads two things off the result, each rule in a
module of its own (:mod:`~mlir_mx.roofline.buffers`, :mod:`~mlir_mx.roofline.flops`;
the result types are in :mod:`~mlir_mx.roofline.kernel_model`):

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
the block scaling) and *other* (any remaining float op).  ``docs/roofline.md``
states the rule in full.
"""

from __future__ import annotations

from mlir import ir

from mlir_mx.diagnostics import DiagnosticError
from mlir_mx.dialect import parse_module
from mlir_mx.errors import expect_type
from mlir_mx.ir_utils import collect, find_first, public_functions
from mlir_mx.passes.pipeline import Pipeline, PipelineElement, PipelineError, run_pipeline
from mlir_mx.passes.registry import OptionError
from mlir_mx.roofline.buffers import boundary_buffers, temporaries
from mlir_mx.roofline.flops import flop_counts
from mlir_mx.roofline.kernel_model import (
    Buffer,
    KernelModel,
    LinalgCount,
    ModelError,
    Shift,
    element_bits,
    shift,
)

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
BUFFERIZE = PipelineElement.of(
    "one-shot-bufferize",
    bufferize_function_boundaries=1,
    function_boundary_type_conversion="identity-layout-map",
)


def _mx_to_linalg(matmul_lowering: str | None) -> PipelineElement:
    """``mx-to-linalg`` with ``matmul_lowering`` (None: the pass's default); a
    value the option does not allow is a :class:`ModelError` naming the allowed ones."""
    try:
        return PipelineElement.of("mx-to-linalg", matmul_lowering=matmul_lowering)
    except OptionError as err:
        raise ModelError(f"mx-to-linalg: {err}") from None


def _run(step: PipelineElement, module: ir.Module, filename: str = "-") -> None:
    """Run ``step``; a failure becomes a :class:`ModelError` with its located diagnostics."""
    try:
        run_pipeline(module, Pipeline((step,)), filename=filename)
    except PipelineError as err:
        raise ModelError(f"{step.name}: {err}") from None
    except DiagnosticError as err:
        raise ModelError(err.diagnostics) from None


def _module_text(module_or_text) -> str:
    """The text of an ``ir.Module`` or MLIR text, else ``MXArgTypeError``."""
    if isinstance(module_or_text, ir.Module):
        return str(module_or_text)
    return expect_type(module_or_text, str, "module_or_text", "an ir.Module or MLIR text")


def lower_to_linalg(module_or_text: ir.Module | str, matmul_lowering: str | None = None) -> str:
    """The module after ``mx-to-linalg`` (unchanged text when it has no mx ops)."""
    text = _module_text(module_or_text)
    ctx = ir.Context()
    with ctx, ir.Location.unknown():
        module = parse_module(text, ctx)
        if not _has_mx(module):
            return str(module)
        _run(_mx_to_linalg(matmul_lowering), module)
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
    text = _module_text(module_or_text)
    ctx = ir.Context()
    with ctx, ir.Location.unknown():
        module = parse_module(text, ctx, filename=filename)
        steps = []
        if _has_mx(module):
            steps.append(_mx_to_linalg(matmul_lowering))
        elif matmul_lowering:
            raise ModelError("matmul-lowering given but the module has no mx ops")
        steps += [BUFFERIZE, PipelineElement("canonicalize")]
        for step in steps:
            _run(step, module, filename)
        _run(PipelineElement("linalg-generalize-named-ops"), module, filename)
        return [_model_function(fn) for fn in public_functions(module)]


def _has_mx(module: ir.Module) -> bool:
    def mx(o) -> bool:
        if o.name.startswith("mx.") or any("!mx." in str(r.type) for r in o.results):
            return True
        return o.name == "func.func" and "!mx." in str(o.attributes["function_type"])

    return find_first(module, mx) is not None


def _model_function(fn: ir.Operation) -> KernelModel:
    name = ir.StringAttr(fn.attributes["sym_name"]).value
    linalg_ops = collect(
        fn,
        lambda o: o.name.startswith("linalg.") and o.name != "linalg.yield",
        ir.WalkOrder.PRE_ORDER,
    )
    buffers, notes = boundary_buffers(fn, linalg_ops)
    counts, flop_notes = flop_counts(fn, linalg_ops)
    return KernelModel(name, buffers, temporaries(fn, buffers), counts, notes=notes + flop_notes)

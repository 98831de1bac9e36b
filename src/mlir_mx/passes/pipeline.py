"""Pass pipelines that mix mlir-mx passes with upstream ones.

A pipeline is a :class:`Pipeline`: a sequence of :class:`PipelineElement`
(a pass with options, or ``anchor(nested, ...)``).  Code builds them from
elements (:meth:`PipelineElement.of` checks typed option values against the
registry when the element is built) and composes them with ``+``; text is
only read and written at the edges: :meth:`Pipeline.parse` reads upstream's
textual form, ``builtin.module(mx-to-linalg, canonicalize,
func.func(convert-linalg-to-loops))`` or the flat list the per-pass flags of
``mx-opt`` produce (and the shipped pipeline files), and ``str()`` renders
it.  Elements naming a pass of our registry become Python callables;
everything else is handed to upstream's pipeline parser as rendered.  All of
it lands, in order, in one upstream ``PassManager``.

Upstream passes anchored on ``func.func`` (like ``convert-linalg-to-loops``)
may be named at module level, as ``mlir-opt`` allows: they are nested into
``func.func(...)`` automatically.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mlir import ir, passmanager

from mlir_mx.diagnostics import (
    Diagnostic,
    DiagnosticError,
    capture_diagnostics,
    from_mlir_error,
)
from mlir_mx.dialect import remap_diagnostics
from mlir_mx.errors import MXArgTypeError, PipelineError, UnknownPassError
from mlir_mx.ir_utils import declared_types, find_first
from mlir_mx.passes.registry import (
    OptionError,
    lookup,
    lookup_extension,
    render_option_value,
)

__all__ = [
    "OWNERSHIP_DEALLOCATION",
    "Pipeline",
    "PipelineElement",
    "PipelineError",
    "UnknownPassError",
    "as_pipeline",
    "split_pipeline",
    "build_pass_manager",
    "run_pipeline",
]

#: The upstream pass after which every buffer a public function returns is
#: owned by the caller (it clones a result that would alias an argument or a
#: global), so the Runner may free it after copying it out.
OWNERSHIP_DEALLOCATION = "ownership-based-buffer-deallocation"


@dataclass(frozen=True)
class PipelineElement:
    """One element: ``name{options}`` or ``anchor(nested, ...)``.

    ``options`` is the option text as upstream's syntax spells it.  For a
    pass of our registry it is parsed once, when the element is made, into
    typed :attr:`values` (a bad value fails here, as a
    :class:`PipelineError`); upstream's parser checks its own passes' options.
    """

    name: str
    options: str = ""
    nested: tuple[PipelineElement, ...] | None = None
    #: Typed option values of a pass of our registry (all of its options,
    #: defaults included, keyed in snake_case); None for upstream passes.
    values: dict[str, Any] | None = field(default=None, init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        spec = lookup(self.name) if self.nested is None else None
        if spec is not None:
            try:
                object.__setattr__(self, "values", spec.parse_options(self.options))
            except OptionError as err:
                raise PipelineError(str(err)) from None

    def __str__(self) -> str:
        if self.nested is not None:
            return f"{self.name}({','.join(str(e) for e in self.nested)})"
        return f"{self.name}{{{self.options}}}" if self.options else self.name

    @classmethod
    def of(cls, name: str, **options: Any) -> PipelineElement:
        """Pass ``name`` with typed option values (keyword names in snake_case;
        None leaves an option at its default).

        For a pass of our registry every value is checked against the
        option's type and allowed values now, so a wrong value fails where the
        pipeline is built, with an :class:`OptionError` listing the allowed
        values.  Upstream passes get the values rendered as written.
        """
        spec = lookup(name)
        parts = []
        for key, value in options.items():
            if value is None:
                continue
            flag = key.replace("_", "-")
            if spec is None:  # upstream's pass: its parser checks the value
                parts.append(f"{flag}={render_option_value(value)}")
                continue
            opt = spec.option(flag) or spec.option(key)
            if opt is None:
                known = ", ".join(o.name for o in spec.options) or "none"
                raise OptionError(f"no such option '{flag}' for pass '{name}' (options: {known})")
            parts.append(f"{opt.name}={opt.render(value)}")
        return cls(name, " ".join(parts))


@dataclass(frozen=True)
class Pipeline:
    """A pass pipeline as data: elements in order, composable with ``+``
    (another Pipeline, an element, or pipeline text, parsed), rendered by
    ``str()`` in upstream's textual form."""

    elements: tuple[PipelineElement, ...] = ()

    @classmethod
    def parse(cls, text: str) -> Pipeline:
        """Read upstream's textual form (``builtin.module(...)`` or a bare list)."""
        return cls(tuple(split_pipeline(text)))

    @classmethod
    def of(cls, *parts: Pipeline | PipelineElement | str) -> Pipeline:
        """The concatenation of ``parts``, in order."""
        out = cls()
        for p in parts:
            out = out + p
        return out

    def __add__(self, other: Pipeline | PipelineElement | str) -> Pipeline:
        return Pipeline(self.elements + as_pipeline(other).elements)

    def __radd__(self, other: PipelineElement | str) -> Pipeline:
        return as_pipeline(other) + self

    def __iter__(self):
        return iter(self.elements)

    def __len__(self) -> int:
        return len(self.elements)

    def __str__(self) -> str:
        return ",".join(str(e) for e in self.elements)

    def runs(self, name: str) -> bool:
        """True when pass ``name`` is an element, at any nesting depth."""
        return self.find(name) is not None

    def find(self, name: str) -> PipelineElement | None:
        """The first element running pass ``name``, at any nesting depth."""

        def first(elements):
            for e in elements:
                if e.name == name:
                    return e
                found = first(e.nested) if e.nested is not None else None
                if found is not None:
                    return found
            return None

        return first(self.elements)

    def with_options(self, name: str, **options: Any) -> Pipeline:
        """This pipeline with pass ``name`` (of our registry, at any depth)
        given the typed ``options`` on top of those it has."""
        if lookup(name) is None:
            raise PipelineError(f"with_options: '{name}' is not a pass of mlir-mx")
        if self.find(name) is None:
            raise PipelineError(f"with_options: the pipeline does not run '{name}'")

        def rebuilt(elements):
            out = []
            for e in elements:
                if e.nested is not None:
                    e = PipelineElement(e.name, nested=tuple(rebuilt(e.nested)))
                elif e.name == name:
                    e = PipelineElement.of(name, **{**e.values, **options})
                out.append(e)
            return out

        return Pipeline(tuple(rebuilt(self.elements)))

    @property
    def packs_subbyte_codes(self) -> bool:
        """True unless the pipeline's ``mx-to-linalg`` has
        ``subbyte-storage=unpacked``: sub-byte mx codes cross function
        boundaries packed (the Runner's ABI follows this)."""
        e = self.find("mx-to-linalg")
        return e is None or e.values["subbyte_storage"] != "unpacked"

    @property
    def returns_owned_buffers(self) -> bool:
        """True when every buffer a public function returns is the caller's to
        free: the pipeline runs :data:`OWNERSHIP_DEALLOCATION`."""
        return self.runs(OWNERSHIP_DEALLOCATION)


def as_pipeline(pipeline: Pipeline | PipelineElement | list[PipelineElement] | str) -> Pipeline:
    """``pipeline`` as a :class:`Pipeline` (text is parsed: the edge)."""
    if isinstance(pipeline, Pipeline):
        return pipeline
    if isinstance(pipeline, PipelineElement):
        return Pipeline((pipeline,))
    if isinstance(pipeline, str):
        return Pipeline.parse(pipeline)
    if isinstance(pipeline, list | tuple) and all(isinstance(e, PipelineElement) for e in pipeline):
        return Pipeline(tuple(pipeline))
    raise MXArgTypeError(
        f"pipeline: expected a Pipeline or pipeline text, got {type(pipeline).__name__}"
    )


def split_pipeline(text: str) -> list[PipelineElement]:
    """Parse a comma-separated pipeline text into elements (bracket aware)."""
    elems, pos = _parse_list(text.strip(), 0, closing=None)
    return elems


def _parse_list(text: str, i: int, closing: str | None):
    elems: list[PipelineElement] = []
    n = len(text)
    while True:
        while i < n and (text[i].isspace() or text[i] == ","):
            i += 1
        if i >= n:
            if closing:
                raise PipelineError(f"expected '{closing}' at end of pipeline '{text}'")
            return elems, i
        if closing and text[i] == closing:
            return elems, i + 1
        j = i
        while j < n and text[j] not in "{(),":
            j += 1
        name = text[i:j].strip()
        if not name:
            raise PipelineError(f"expected a pass name at offset {i} in '{text}'")
        if j < n and text[j] == "{":
            depth, k = 0, j
            while k < n:
                if text[k] == "{":
                    depth += 1
                elif text[k] == "}":
                    depth -= 1
                    if depth == 0:
                        break
                k += 1
            if depth:
                raise PipelineError(f"unbalanced '{{' in pipeline '{text}'")
            elems.append(PipelineElement(name, text[j + 1 : k].strip()))
            i = k + 1
        elif j < n and text[j] == "(":
            nested, i = _parse_list(text, j + 1, closing=")")
            elems.append(PipelineElement(name, nested=tuple(nested)))
        else:
            elems.append(PipelineElement(name))
            i = j


_ANCHORS = ("builtin.module", "func.func", "gpu.module", "any")


def build_pass_manager(
    elements: Pipeline | list[PipelineElement] | str,
    context: ir.Context | None = None,
    anchor: str = "builtin.module",
) -> passmanager.PassManager:
    """Build one upstream PassManager running ``elements`` in order.

    ``elements`` may be pipeline text: either ``builtin.module(...)`` or a
    bare list.  Raises :class:`PipelineError` naming the offending element.
    """
    elements = list(as_pipeline(elements))
    if len(elements) == 1 and elements[0].nested is not None and elements[0].name == anchor:
        elements = list(elements[0].nested)
    pm = passmanager.PassManager(anchor, context=context)
    for el in elements:
        _add(pm, el, anchor)
    return pm


def run_pipeline(
    module,
    pipeline: Pipeline | list[PipelineElement] | str,
    *,
    filename: str | None = None,
    anchor: str = "builtin.module",
) -> list[Diagnostic]:
    """Run ``pipeline`` on ``module`` (an ``ir.Module`` or operation): the one
    way every stage of mlir-mx runs passes.

    Diagnostics are captured rather than printed.  An upstream failure (an
    ``MLIRError``: a pass that fails, a verifier error after a pass) raises
    :class:`DiagnosticError` with every diagnostic emitted, located
    (``filename`` replaces upstream's ``"-"`` buffer name).  A pipeline that
    does not parse raises :class:`PipelineError` before anything runs.
    Returns the warnings and remarks emitted by a successful run.
    """
    op = getattr(module, "operation", module)
    pm = build_pass_manager(pipeline, op.context, anchor)
    with capture_diagnostics(op.context) as diags:
        try:
            pm.run(op)
        except ir.MLIRError as err:
            seen = {str(d) for d in diags}
            found = list(diags) + [d for d in from_mlir_error(err) if str(d) not in seen]
            raise DiagnosticError(remap_diagnostics(found, None, filename or "-")) from None
    return remap_diagnostics([d for d in diags if d.severity != "error"], None, filename or "-")


def _add(pm, el: PipelineElement, anchor: str) -> None:
    if el.nested is not None:
        if el.name not in _ANCHORS and "." not in el.name:
            raise PipelineError(f"'{el.name}' is not an operation name to nest a pipeline on")
        for sub in el.nested:
            if sub.nested is None and lookup(sub.name) is not None:
                raise PipelineError(
                    f"mlir-mx pass '{sub.name}' must run at the top level, not nested in '{el.name}'"
                )
        _add_upstream(pm, str(el), el)
        return
    ext = lookup_extension(el.name)
    if ext is not None:
        before = lookup(ext.before)
        before.add_to(pm, before.parse_options(""))
        _add_upstream(pm, str(el), el)
        return
    spec = lookup(el.name)
    if spec is not None:
        spec.add_to(pm, el.values)
        return
    if anchor == "builtin.module" and el.name.endswith("bufferize"):
        pm.add(
            _bufferizable_guard,
            name="MxBufferizableGuard",
            argument="mx-bufferizable-guard",
            description="refuse tensors of non-memref element types before bufferization",
        )
    try:
        _add_upstream(pm, str(el), el)
    except PipelineError:
        # mlir-opt nests op-specific passes implicitly; do the same for the
        # common case of function passes named at module level.
        if anchor == "builtin.module":
            try:
                _add_upstream(pm, str(PipelineElement("func.func", nested=(el,))), el)
                return
            except PipelineError:
                pass
        raise


def _bufferizable_guard(op, pass_) -> None:
    """Fail, located, on a tensor whose element type no memref can hold.

    FIXME(upstream): one-shot-bufferize asserts (aborting the process) when
    it builds ``memref<2x!transform.any_op>`` from ``tensor<2x!transform.any_op>``
    (llvm-project#114730, fixed by llvm-project#173692, newer than 22.1.8).
    Reproducer: upstream-bufferize-tensor-of-transform-abort.mlir.  The
    check is upstream's own: ``MemRefType.get`` raises for such an element.
    """
    seen: dict = {}
    bad: list = []

    def invalid(t) -> bool:
        if t not in seen:
            seen[t] = False
            tt = t.maybe_downcast()
            if isinstance(tt, ir.RankedTensorType | ir.UnrankedTensorType):
                try:
                    ir.MemRefType.get([1], tt.element_type)
                except (ir.MLIRError, ValueError):
                    seen[t] = True
        return seen[t]

    def offends(o) -> bool:
        types = [(r.type, o.location) for r in o.results]
        types += [(t, o.location) for t in declared_types(o)]
        for region in o.regions:
            for block in region.blocks:
                types += [(a.type, a.location) for a in block.arguments]
        first = next(((loc, t) for t, loc in types if invalid(t)), None)
        if first is not None:
            bad.append(first)
        return first is not None

    with op.context, ir.Location.unknown():
        find_first(op, offends)
    if bad:
        loc, t = bad[0]
        loc.emit_error(
            f"cannot bufferize a value of type {t}: its element type is not a valid memref "
            "element type (upstream bufferization would abort the process)"
        )
        pass_.signal_pass_failure()


def _add_upstream(pm, text: str, el: PipelineElement) -> None:
    try:
        pm.add(text)
    except (ValueError, ir.MLIRError) as err:
        lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
        detail = next((ln.split("error: ", 1)[1] for ln in lines if "error: " in ln), None)
        if detail is None:
            detail = next((ln for ln in lines if "no such option" in ln), lines[-1] if lines else "")
            detail = detail.replace("<Pass-Options-Parser>: ", "")
        if el.nested is None and "does not refer to a registered pass" in detail:
            raise UnknownPassError(el.name, f"pass '{el.name}': {detail}") from None
        raise PipelineError(f"pass '{el.name}': {detail}") from None

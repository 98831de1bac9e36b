"""The one registry of mlir-mx passes.

Every pass of this project is a Python function registered here under a
kebab-case argument (``mx-to-linalg``), with typed options parsed from the
upstream ``name{k=v k2=v2}`` syntax.  The ``mx-opt`` driver, the pipeline
parser (:mod:`mlir_mx.passes.pipeline`) and the tests all go through this
module; nothing else keeps a list of passes.

A pass function receives the operation it runs on (normally the
``builtin.module``) and its parsed options as keyword arguments::

    @register_pass("mx-example", "One-line summary.",
                   options=[Option("flag", bool, False, "What it does.")])
    def mx_example(op: ir.Operation, *, flag: bool) -> None:
        ...

To fail, a pass raises :class:`PassError` with a message and (ideally) the
location of the offending op; the wrapper turns that into an MLIR error
diagnostic at that location and signals pass failure, exactly as a C++ pass
would with ``emitError`` + ``signalPassFailure``.

FIXME(upstream): Python-defined passes cannot be named inside a textual
pipeline (``PassManager.parse`` does not see them), so the pipeline parser
splits pipelines itself and adds our passes as callables.  Upstream:
llvm-project#155996 (issue), #157850 (open PR registering Python passes by
name).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from mlir_mx.errors import MXValueError, OptionError, PassError

__all__ = [
    "Option",
    "PassError",
    "PassSpec",
    "register_pass",
    "register_upstream_extension",
    "lookup_extension",
    "all_extensions",
    "lookup",
    "all_passes",
    "parse_options",
    "render_option_value",
]


@dataclass(frozen=True)
class Option:
    """A typed pass option, written ``name=value`` inside ``pass{...}``."""

    name: str
    type: type  # bool, int, float, str, or list (comma-separated strings)
    default: Any
    help: str
    #: The allowed values (checked when the option is parsed), if restricted.
    choices: tuple | None = None

    def parse(self, text: str) -> Any:
        """The typed value of ``text`` (what follows ``name=``)."""
        return self._allowed(self._parse(text), text)

    def render(self, value: Any) -> str:
        """A typed value as option text, checked like a parsed one: of this
        option's type and among its choices, else :class:`OptionError`."""
        kinds = {bool: (bool,), int: (int,), float: (int, float), str: (str,), list: (list, tuple)}
        ok = isinstance(value, kinds[self.type])
        if self.type is not bool and isinstance(value, bool):
            ok = False  # a bool is an int to Python, not to an option
        if self.type is list and ok:
            ok = all(isinstance(v, str) for v in value)
        if not ok:
            raise OptionError(
                f"option '{self.name}': expected a value of type {self.type.__name__}, got {value!r}"
            )
        text = render_option_value(float(value) if self.type is float else value)
        self._allowed(value, text)
        return text

    def _allowed(self, value: Any, text: str) -> Any:
        if self.choices is not None and value not in self.choices:
            allowed = ", ".join(str(c) for c in self.choices)
            raise OptionError(f"option '{self.name}': '{text}' is not one of: {allowed}")
        return value

    def _parse(self, text: str) -> Any:
        if self.type is bool:
            low = text.strip().lower()
            if low in ("1", "true", "on", "yes", ""):
                return True
            if low in ("0", "false", "off", "no"):
                return False
            raise OptionError(f"option '{self.name}': '{text}' is not a boolean")
        if self.type is int:
            try:
                return int(text, 0)
            except ValueError:
                raise OptionError(f"option '{self.name}': '{text}' is not an integer") from None
        if self.type is float:
            try:
                return float(text)
            except ValueError:
                raise OptionError(f"option '{self.name}': '{text}' is not a number") from None
        if self.type is list:
            return [s.strip() for s in text.split(",") if s.strip()]
        return text


@dataclass(frozen=True)
class PassSpec:
    """A registered pass: its argument, summary, options and implementation."""

    argument: str
    summary: str
    run: Callable[..., None]
    options: tuple[Option, ...] = field(default_factory=tuple)

    def option(self, name: str) -> Option | None:
        for o in self.options:
            if o.name == name:
                return o
        return None

    def defaults(self) -> dict[str, Any]:
        return {o.name: o.default for o in self.options}

    def parse_options(self, text: str) -> dict[str, Any]:
        """Parse ``k=v k2=v2`` (the inside of ``pass{...}``) into typed values."""
        values = self.defaults()
        for key, val in parse_options(text):
            opt = self.option(key)
            if opt is None:
                known = ", ".join(o.name for o in self.options) or "none"
                raise OptionError(
                    f"no such option '{key}' for pass '{self.argument}' (options: {known})"
                )
            values[opt.name.replace("-", "_")] = opt.parse(val)
            if opt.name != opt.name.replace("-", "_"):
                values.pop(opt.name, None)
        return {k.replace("-", "_"): v for k, v in values.items()}

    def add_to(self, pm, opts: dict[str, Any]) -> None:
        """Append this pass, with typed option values (:meth:`parse_options`),
        to an upstream ``PassManager``."""
        spec = self

        def _run(op, pass_):
            try:
                spec.run(op, **opts)
            except PassError as err:
                loc = err.location or op.location
                loc.emit_error(err.message)
                pass_.signal_pass_failure()

        pm.add(_run, name=_camel(self.argument), argument=self.argument, description=self.summary)


def render_option_value(value: Any) -> str:
    """A value in upstream's option syntax: ``true``/``false``, numbers as
    written, lists comma-separated; braced when it holds a separator."""
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, list | tuple):
        text = ",".join(str(v) for v in value)
    else:
        text = str(value)
    return f"{{{text}}}" if any(c in text for c in " \t{}\"'") else text


def parse_options(text: str) -> list[tuple[str, str]]:
    """Split ``a=1 b={x y} c="q r"`` into ``[(a, '1'), (b, 'x y'), ...]``.

    Follows upstream's pass-option lexing: whitespace separates options, a
    value may be quoted or braced, and a bare key means ``key=true``.
    """
    out: list[tuple[str, str]] = []
    i, n = 0, len(text)
    while i < n:
        while i < n and text[i].isspace():
            i += 1
        if i >= n:
            break
        j = i
        while j < n and text[j] not in "= \t\n":
            j += 1
        key = text[i:j]
        if not key:
            raise OptionError(f"malformed option string '{text}'")
        if j < n and text[j] == "=":
            j += 1
            if j < n and text[j] in "\"'":
                q = text[j]
                k = text.find(q, j + 1)
                if k < 0:
                    raise OptionError(f"unterminated quote in option string '{text}'")
                val, j = text[j + 1 : k], k + 1
            elif j < n and text[j] == "{":
                depth, k = 0, j
                while k < n:
                    depth += text[k] == "{"
                    depth -= text[k] == "}"
                    if depth == 0:
                        break
                    k += 1
                if depth:
                    raise OptionError(f"unbalanced '{{' in option string '{text}'")
                val, j = text[j + 1 : k], k + 1
            else:
                k = j
                while k < n and not text[k].isspace():
                    k += 1
                val, j = text[j:k], k
        else:
            val = "true"
        out.append((key, val))
        i = j
    return out


def _camel(argument: str) -> str:
    return "".join(p.capitalize() for p in argument.split("-")) + "Pass"


_REGISTRY: dict[str, PassSpec] = {}

# Modules that define passes; imported lazily on first lookup so that merely
# importing the registry stays cheap and free of import cycles.
_PASS_MODULES = (
    "mlir_mx.passes.canonicalize",
    "mlir_mx.passes.fuse_scales",
    "mlir_mx.passes.mx_to_linalg.split",
    "mlir_mx.passes.legalize.expand_narrow_floats",
    "mlir_mx.passes.pin_map_constants",
    "mlir_mx.passes.legalize.i1_memrefs",
    "mlir_mx.passes.legalize.subbyte_vector_memory",
    "mlir_mx.passes.kernels.matmul",
    "mlir_mx.passes.kernels.quantize",
    "mlir_mx.passes.legalize.masked_stores",
    "mlir_mx.passes.legalize.host_target",
    "mlir_mx.passes.kernels.parallel_tasks",
)
_loaded = False


def register_pass(
    argument: str, summary: str, options: Sequence[Option] = ()
) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Decorator: register ``fn(op, **options)`` as pass ``argument``."""

    def deco(fn: Callable[..., None]) -> Callable[..., None]:
        if argument in _REGISTRY and _REGISTRY[argument].run is not fn:
            raise MXValueError(f"pass '{argument}' registered twice")
        _REGISTRY[argument] = PassSpec(argument, summary, fn, tuple(options))
        return fn

    return deco


@dataclass(frozen=True)
class UpstreamExtension:
    """An upstream pass that, when named, first runs one of our passes.

    ``canonicalize`` is the example: our ``mx-canonicalize`` runs, then
    upstream's ``canonicalize`` with the options the user gave.
    """

    argument: str
    before: str
    summary: str


_EXTENSIONS: dict[str, UpstreamExtension] = {}


def register_upstream_extension(argument: str, before: str, summary: str) -> None:
    """Make the upstream pass ``argument`` run our pass ``before`` first."""
    _EXTENSIONS[argument] = UpstreamExtension(argument, before, summary)


def lookup_extension(argument: str) -> UpstreamExtension | None:
    """The extension registered for upstream pass ``argument``, or None."""
    _ensure_loaded()
    return _EXTENSIONS.get(argument)


def all_extensions() -> list[UpstreamExtension]:
    _ensure_loaded()
    return [_EXTENSIONS[k] for k in sorted(_EXTENSIONS)]


def _ensure_loaded() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    for mod in _PASS_MODULES:
        importlib.import_module(mod)


def lookup(argument: str) -> PassSpec | None:
    """The registered pass named ``argument``, or None."""
    _ensure_loaded()
    return _REGISTRY.get(argument)


def all_passes() -> list[PassSpec]:
    """All registered passes, sorted by argument."""
    _ensure_loaded()
    return [_REGISTRY[k] for k in sorted(_REGISTRY)]

"""Seed syntax at the text boundary: the custom forms of ``!mx.tensor`` and the
four mx ops, translated to and from the generic forms upstream MLIR parses.

IRDL ops (MLIR 22.1.8) only have the generic assembly, and an IRDL type
prints its parameters positionally.  Users write the v1 custom syntax::

    %r = mx.quantize_block %x {tag} : tensor<32x64xf32> -> !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU> loc(#l)

which this module rewrites, before parsing, to::

    %r = "mx.quantize_block"(%x) {tag} : (tensor<32x64xf32>) -> !mx.tensor<array<i64: 32, 64>, f8E4M3FN, 32 : i64, f8E8M0FNU, 1 : i64> loc(#l)

and back after printing.

Both directions run on ONE tokenizer (:func:`tokenize`): MLIR tokens with
their source offsets (comments, strings, SSA values, ``!``/``#`` names,
``->``, ``>=``/``<=`` and brackets, which are matched once, tolerantly).
So a ``//`` comment or a string never looks like mx syntax, an
``affine_set<(d0) : (d0 >= 0)>`` never closes a bracket early, and the
translation knows where every operand and type came from: the
:class:`SourceMap` maps each emitted piece back to the source (operands and
upstream types verbatim, character for character), so a diagnostic on an
operand points at the operand, and :func:`remap_locations` gives the parsed
IR its source columns (``--mlir-print-debuginfo``).  Line numbers never
change.  Nesting deeper than :data:`MAX_NESTING` brackets is refused with a
located error before upstream's recursive parser can overflow the stack.
``!mx.tensor`` parameters are verified here, at the location of the type in
the source, which is where mlir-opt reports a type verifier error.  The
generic forms are accepted as input too.

FIXME(upstream): custom assembly formats for IRDL ops/types do not exist at
22.1.8; with ``mlir.dialects.ext`` (newer upstream) this layer can go away.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field

from mlir import ir

from mlir_mx.diagnostics import Diagnostic, DiagnosticError
from mlir_mx.dialect.irdl import OP_NAMES
from mlir_mx.dialect.types import MXTensorType, MXTypeError

__all__ = [
    "MAX_NESTING",
    "SourceMap",
    "Token",
    "tokenize",
    "to_generic",
    "to_custom",
    "remap_locations",
    "silent_failure",
    "invisible_use",
]

#: Deepest bracket/region nesting accepted.  Upstream's parser recurses per
#: level and overflows an 8 MiB stack at a few thousand nested regions
#: (SIGSEGV, the mlir-opt binary included); real IR stays far below this.
MAX_NESTING = 500
_TYPE_NAME = "!mx.tensor"

_TOKEN_RE = re.compile(
    r"""(?P<ws>[ \t\r\n\f\v]+)
      |(?P<comment>//[^\n]*)
      |(?P<string>"(?:[^"\\\n]|\\.)*"?)
      |(?P<value>%(?:[A-Za-z0-9_$.\-]+|"(?:[^"\\\n]|\\.)*")(?:\#[0-9]+)?)
      |(?P<sym>@(?:[A-Za-z_$.\-][\w$.\-]*|"(?:[^"\\\n]|\\.)*"))
      |(?P<caret>\^[\w$.\-]+)
      |(?P<bang>![A-Za-z_][\w$.]*)
      |(?P<hash>\#[A-Za-z_][\w$.]*)
      |(?P<arrow>->)
      |(?P<cmp>>=|<=|==)
      |(?P<ident>[A-Za-z_][\w$.]*)
      |(?P<number>[0-9][\w.]*)
      |(?P<open>[<(\[{])
      |(?P<close>[>)\]}])
      |(?P<punct>.)""",
    re.VERBOSE | re.DOTALL,
)
_PAIRS = {">": "<", ")": "(", "]": "[", "}": "{"}
_SKIP = ("ws", "comment")


@dataclass
class Token:
    """One token: its kind (a group name of the tokenizer), text and offsets."""

    kind: str
    text: str
    start: int
    end: int
    match: int = -1  # brackets: index of the matching bracket token (-1: none)


class _Error(DiagnosticError):
    """A malformed mx construct at a source offset (becomes a located diagnostic)."""

    def __init__(self, message: str, offset: int):
        super().__init__(message)
        self.offset = offset


def tokenize(text: str) -> list[Token]:
    """The tokens of ``text`` (whitespace and comments included) with brackets matched.

    Matching is tolerant (a stray closer is ignored, a closer pops to its
    opener), because malformed input is upstream's to report.  Raises
    ``_Error`` when brackets nest deeper than :data:`MAX_NESTING`.
    """
    toks: list[Token] = []
    stack: list[int] = []
    for m in _TOKEN_RE.finditer(text):
        kind = m.lastgroup
        tok = Token(kind, m.group(), m.start(), m.end())
        if kind == "open":
            if len(stack) >= MAX_NESTING:
                raise _Error(
                    f"brackets and regions nest deeper than {MAX_NESTING} levels; "
                    "refusing to parse (upstream's recursive parser would overflow the stack)",
                    m.start(),
                )
            stack.append(len(toks))
        elif kind == "close":
            want = _PAIRS[tok.text]
            for depth in range(len(stack) - 1, -1, -1):
                if toks[stack[depth]].text == want:
                    opener = stack[depth]
                    del stack[depth:]
                    toks[opener].match = len(toks)
                    tok.match = opener
                    break
        toks.append(tok)
    return toks


# ------------------------------------------------------------------ source map


def _line_starts(text: str) -> list[int]:
    starts = [0]
    pos = text.find("\n")
    while pos >= 0:
        starts.append(pos + 1)
        pos = text.find("\n", pos + 1)
    return starts


@dataclass
class SourceMap:
    """Maps (line, col) in translated text back to (line, col) in the source."""

    source: str
    output: str = ""
    # (output offset, source offset, verbatim?) for each emitted piece
    anchors: list[tuple[int, int, bool]] = field(default_factory=list)

    def __post_init__(self) -> None:
        #: Source offset of a use :func:`invisible_use` suspects, else None.
        self.suspect: int | None = None
        self._src_lines: list[int] | None = None
        self._out_lines: list[int] | None = None
        self._keys: list[int] | None = None

    @property
    def identity(self) -> bool:
        """True when every position maps to itself (nothing was translated)."""
        return all(v and o == s for o, s, v in self.anchors)

    def to_source_offset(self, out_off: int) -> int:
        if self._keys is None:
            self._keys = [a[0] for a in self.anchors]
        i = bisect.bisect_right(self._keys, out_off) - 1
        if i < 0:
            return out_off
        o, s, verbatim = self.anchors[i]
        return s + (out_off - o) if verbatim else s

    def to_source(self, line: int, col: int) -> tuple[int, int]:
        if self._out_lines is None:
            self._out_lines = _line_starts(self.output)
            self._src_lines = _line_starts(self.source)
        if not self.anchors or not 0 < line <= len(self._out_lines):
            return line, col
        src = self.to_source_offset(self._out_lines[line - 1] + max(col - 1, 0))
        sline = bisect.bisect_right(self._src_lines, src)
        return sline, src - self._src_lines[sline - 1] + 1


def remap_locations(module_op, smap: SourceMap) -> None:
    """Give every op and block argument parsed from translated text its source
    line and column (upstream located them in the generic text).

    Only plain ``"-"`` file locations (the ones upstream's parser assigns) are
    rewritten; explicit ``loc(...)`` from the source are left alone.
    """
    if smap.identity:
        return
    root = getattr(module_op, "operation", module_op)
    ctx = root.context

    def fix(loc):
        if not loc.is_a_file() or loc.filename != "-":
            return None
        line, col = smap.to_source(loc.start_line, loc.start_col)
        if (line, col) == (loc.start_line, loc.start_col):
            return None
        return ir.Location.file("-", line, col, context=ctx)

    def visit(op):
        op = getattr(op, "operation", op)
        new = fix(op.location)
        if new is not None:
            op.location = new
        for region in op.regions:
            for block in region.blocks:
                for arg in block.arguments:
                    new = fix(arg.location)
                    if new is not None:
                        arg.set_location(new)
        return ir.WalkResult.ADVANCE

    root.walk(visit)


# ------------------------------------------------------------------ parsing


class _Translator:
    """Translates custom syntax to generic over the token list, emitting into a SourceMap."""

    def __init__(self, text: str):
        self.text = text
        self.toks = tokenize(text)
        self.out: list[str] = []
        self.out_len = 0
        self.newlines = 0
        self.map = SourceMap(text)

    def emit(self, piece: str, src_off: int, verbatim: bool) -> None:
        if piece:
            self.map.anchors.append((self.out_len, src_off, verbatim))
            self.out.append(piece)
            self.out_len += len(piece)
            self.newlines += piece.count("\n")

    # -- token navigation --------------------------------------------------
    def sig(self, i: int) -> int:
        """Index of the first significant (not ws/comment) token at or after ``i``."""
        toks = self.toks
        while i < len(toks) and toks[i].kind in _SKIP:
            i += 1
        return i

    def prev_sig(self, i: int) -> int:
        i -= 1
        while i >= 0 and self.toks[i].kind in _SKIP:
            i -= 1
        return i

    def is_(self, i: int, kind: str, text: str | None = None) -> bool:
        return i < len(self.toks) and self.toks[i].kind == kind and (
            text is None or self.toks[i].text == text
        )

    def off(self, i: int) -> int:
        return self.toks[i].start if i < len(self.toks) else len(self.text)

    def type_end(self, i: int) -> int:
        """Index just past the type starting at significant token ``i`` (``i`` if none)."""
        if self.is_(i, "open", "("):
            return self.toks[i].match + 1 if self.toks[i].match > 0 else i
        if i < len(self.toks) and self.toks[i].kind in ("bang", "ident"):
            j = self.sig(i + 1)
            if self.is_(j, "open", "<"):
                return self.toks[j].match + 1 if self.toks[j].match > 0 else i
            return i + 1
        return i

    # -- the walk ----------------------------------------------------------
    def run(self) -> str:
        _check_zero_divisors(self.toks)
        self.map.suspect = invisible_use(self.toks)
        toks, i, copied = self.toks, 0, 0
        while i < len(toks):
            t = toks[i]
            end = None
            if t.kind == "bang" and t.text == _TYPE_NAME and self.is_(i + 1, "open", "<"):
                self.emit(self.text[copied : t.start], copied, True)
                end = self.type_end(i)
                if end == i:
                    raise _Error(f"unbalanced '<' in {_TYPE_NAME} type", t.start)
                self.emit(self.translate_type(i, end), t.start, False)
            elif t.kind == "ident" and t.text.startswith("mx."):
                end = self.op_site(i, copied)
            if end is None:
                i += 1
                continue
            copied = self.off(end)
            i = end
        self.emit(self.text[copied:], copied, True)
        self.map.output = "".join(self.out)
        return self.map.output

    def op_site(self, i: int, copied: int) -> int | None:
        """Translate (or diagnose) an ``mx.`` name at token ``i``; the index past it."""
        t, toks = self.toks[i], self.toks
        p, n = self.prev_sig(i), self.sig(i + 1)
        assigned = p >= 0 and toks[p].kind == "punct" and toks[p].text == "="
        if t.text in OP_NAMES and assigned:
            self.emit(self.text[copied : t.start], copied, True)
            return self.translate_op(i)
        if assigned and i + 1 < len(toks) and toks[i + 1].kind in ("ws", "value", "open", "punct"):
            if toks[i + 1].text not in ("[", "<", ",", "="):
                raise _Error(
                    f"custom op '{t.text}' is unknown (mx ops: {', '.join(OP_NAMES)})", t.start
                )
        statement = p < 0 or toks[p].text in ("{", "}") or "\n" in self.text[toks[p].end : t.start]
        if t.text in OP_NAMES and statement and not (n < len(toks) and toks[n].text in "=,}"):
            raise _Error(
                f"'{t.text}' produces a result: bind it, as in '%r = {t.text} ...'", t.start
            )
        return None

    def translate_type(self, i: int, end: int) -> str:
        a, b = self.toks[i].start, self.toks[end - 1].end
        # comments inside the type become spaces (same offsets)
        body = "".join(
            " " * len(tk.text) if tk.kind == "comment" else tk.text for tk in self.toks[i:end]
        )
        try:
            ty = MXTensorType.parse_unverified(body)
        except MXTypeError as e:
            raise _Error(e.message, a + e.offset) from None
        errs = ty.errors()
        if errs:
            raise _Error(errs[0], a)
        return ty.generic_str() + "\n" * self.text.count("\n", a, b)

    def emit_span(self, i: int, end: int) -> None:
        """Emit tokens [i, end) verbatim, with the mx types inside translated."""
        copied = self.toks[i].start
        while i < end:
            t = self.toks[i]
            if t.kind == "bang" and t.text == _TYPE_NAME and self.is_(i + 1, "open", "<"):
                e = self.type_end(i)
                if e == i or e > end:
                    raise _Error(f"unbalanced '<' in {_TYPE_NAME} type", t.start)
                self.emit(self.text[copied : t.start], copied, True)
                self.emit(self.translate_type(i, e), t.start, False)
                copied, i = self.off(e), e
                continue
            i += 1
        self.emit(self.text[copied : self.toks[end - 1].end], copied, True)

    def type_list(self, k: int, what: str, name: str) -> tuple[list[tuple[int, int]], int]:
        """Comma-separated types from token ``k``: [(start, end)] and the next index."""
        spans = []
        while True:
            e = self.type_end(k)
            if e == k:
                raise _Error(f"expected {what} of '{name}'", self.off(k))
            spans.append((k, e))
            k = self.sig(e)
            if not self.is_(k, "punct", ","):
                return spans, k
            k = self.sig(k + 1)

    def translate_op(self, i: int) -> int:
        name, toks = self.toks[i].text, self.toks
        nopnd = OP_NAMES[name][0]
        start = toks[i].start
        k = self.sig(i + 1)
        if self.is_(k, "open", "("):
            raise _Error(f"'{name}' in generic form must be quoted: \"{name}\"(...)", start)
        operands: list[Token] = []
        while True:
            if not self.is_(k, "value"):
                raise _Error(f"expected SSA operand for '{name}'", self.off(k))
            operands.append(toks[k])
            k = self.sig(k + 1)
            if not self.is_(k, "punct", ","):
                break
            k = self.sig(k + 1)
        if len(operands) != nopnd:
            s = "s" if nopnd > 1 else ""
            raise _Error(f"'{name}' expects {nopnd} operand{s}, got {len(operands)}", start)
        attrs = None
        if self.is_(k, "open", "{"):
            if toks[k].match < 0:
                raise _Error("unbalanced '{' in attribute dictionary", toks[k].start)
            attrs, k = (k, toks[k].match + 1), self.sig(toks[k].match + 1)
        if not self.is_(k, "punct", ":"):
            raise _Error(f"expected ':' and the operand types of '{name}'", self.off(k))
        colon = toks[k].start
        in_types, k = self.type_list(self.sig(k + 1), "an operand type", name)
        if len(in_types) != nopnd:
            s = "s" if nopnd > 1 else ""
            raise _Error(
                f"'{name}' expects {nopnd} operand type{s}, got {len(in_types)}", self.off(k)
            )
        if not self.is_(k, "arrow"):
            raise _Error(f"expected '->' and the result type of '{name}'", self.off(k))
        arrow = toks[k].start
        k = self.sig(k + 1)
        res = (k, self.type_end(k))
        if res[1] == k:
            raise _Error(f"expected a result type of '{name}'", self.off(k))
        lines_before = self.newlines
        self.emit(f'"{name}"(', start, False)
        for j, v in enumerate(operands):
            if j:
                self.emit(", ", operands[j - 1].end, False)
            self.emit(v.text, v.start, True)
        self.emit(")", operands[-1].end, False)
        if attrs:
            self.emit(" ", toks[attrs[0]].start, False)
            self.emit_span(*attrs)
        self.emit(" : (", colon, False)
        for j, (a, b) in enumerate(in_types):
            if j:
                self.emit(", ", toks[a].start, False)
            self.emit_span(a, b)
        self.emit(") -> ", arrow, False)
        self.emit_span(*res)
        end = toks[res[1] - 1].end
        emitted = self.newlines - lines_before
        self.emit("\n" * (self.text.count("\n", start, end) - emitted), end, False)
        return res[1]


def silent_failure(text: str, filename: str = "-") -> Diagnostic:
    """A located diagnostic for an upstream parse failure that came without one.

    Upstream fails silently on an op without custom assembly written in
    custom form outside an assignment (e.g. a bare ``mx.block_matmul`` that
    the translation leaves alone because it looks like an attribute name):
    point at the first such mx op name, else at the start of the input.
    """
    toks = tokenize(text)
    for i, t in enumerate(toks):
        if t.kind == "ident" and t.text in OP_NAMES:
            p = i - 1
            while p >= 0 and toks[p].kind in _SKIP:
                p -= 1
            if p < 0 or toks[p].text != "=":
                line = text.count("\n", 0, t.start) + 1
                col = t.start - (text.rfind("\n", 0, t.start) + 1) + 1
                msg = f"'{t.text}' produces a result: bind it, as in '%r = {t.text} ...'"
                return Diagnostic("error", msg, filename, line, col)
    return Diagnostic("error", "unable to parse module assembly (upstream gave no location)", filename, 1, 1)


def _check_zero_divisors(toks: list[Token]) -> None:
    """Refuse ``mod 0``, ``floordiv 0`` and ``ceildiv 0`` in affine expressions.

    Undefined, and upstream aborts on them: composing such an indexing map
    (linalg's verifier, ``AffineMap::compose``) casts the folded division to
    a constant and asserts (mlir-opt 22.1.8 too; FIXME(upstream), reproducer
    tests/dialect/test_syntax.py::test_affine_division_by_zero).
    """
    for i, t in enumerate(toks):
        if t.kind != "ident" or t.text not in ("mod", "floordiv", "ceildiv"):
            continue
        j = i + 1
        while j < len(toks) and (toks[j].kind in _SKIP or toks[j].text == "("):
            j += 1
        if j < len(toks) and toks[j].kind == "number" and toks[j].text.strip("0") == "":
            raise _Error(f"affine expression divides by zero ('{t.text} 0')", t.start)


def _defines(toks: list[Token], i: int) -> bool:
    """Whether value token ``i`` is a definition ``%x =`` or ``%x:N =``."""
    j = i + 1
    while j < len(toks) and toks[j].kind in _SKIP:
        j += 1
    if j < len(toks) and toks[j].text == ":":  # %x:2 = ...
        j += 1
        while j < len(toks) and toks[j].kind in _SKIP:
            j += 1
        if j >= len(toks) or toks[j].kind != "number":
            return False
        j += 1
        while j < len(toks) and toks[j].kind in _SKIP:
            j += 1
    return j < len(toks) and toks[j].text == "="


def invisible_use(toks: list[Token]) -> int | None:
    """Offset of a ``%x`` that looks unable to see any definition, else None.

    The candidate: no other ``%x`` sits in a block enclosing it, and ``%x`` is
    defined (``%x = ...``) only inside regions that do not enclose it.  Such
    IR never verifies, and upstream's parser can ABORT on it: it resolves the
    forward reference to the op of a region that then fails to parse and is
    destroyed while still used ("LLVM ERROR: operation destroyed but still
    has uses"; mlir-opt 22.1.8 too; FIXME(upstream), reproducer
    tests/dialect/test_syntax.py::test_invisible_forward_use).  Custom
    syntax can define names in forms this scan does not know (``scf.forall
    (%i)``), so a candidate is only a suspicion: :func:`parse_module` then
    parses in a subprocess first (:func:`mlir_mx.dialect.parse_module`).
    """
    stack: list[int] = [-1]
    seen: dict[str, list[tuple[int, int, bool]]] = {}  # name -> (token, block, defines)
    chains: dict[int, tuple[int, ...]] = {}
    for i, t in enumerate(toks):
        if t.kind == "open" and t.text == "{":
            stack.append(i)
        elif t.kind == "close" and t.text == "}" and len(stack) > 1:
            stack.pop()
        elif t.kind == "value":
            name = t.text.split("#", 1)[0]
            seen.setdefault(name, []).append((i, stack[-1], _defines(toks, i)))
            chains[i] = tuple(stack)
    for occurrences in seen.values():
        if len(occurrences) < 2 or not any(d for _, _, d in occurrences):
            continue
        for i, _, defines in occurrences:
            if not defines and not any(
                j != i and blk in chains[i] for j, blk, _ in occurrences
            ):
                return toks[i].start
    return None


def to_generic(text: str, filename: str = "-") -> tuple[str, SourceMap]:
    """Rewrite custom mx syntax in ``text`` to the generic forms.

    Returns the translated text and the map back to ``text``'s positions.
    Raises :class:`DiagnosticError` (``file:line:col: error: ...``) for a
    malformed or invalid mx construct, or for nesting deeper than
    :data:`MAX_NESTING`.
    """
    try:
        tr = _Translator(text)
        out = tr.run()
    except _Error as e:
        line = text.count("\n", 0, e.offset) + 1
        col = e.offset - (text.rfind("\n", 0, e.offset) + 1) + 1
        raise DiagnosticError(Diagnostic("error", e.message, filename, line, col)) from None
    return out, tr.map


# ---------------------------------------------------------------- printing --


def to_custom(text: str, generic_ops: bool = False) -> str:
    """Rewrite printed IR: mx types to their custom spelling, and (unless
    ``generic_ops``) generic mx ops to the v1 custom op syntax."""
    if "mx." not in text:
        return text
    toks = tokenize(text)
    out, copied, i = [], 0, 0
    while i < len(toks):
        t = toks[i]
        piece = None
        if t.kind == "bang" and t.text == _TYPE_NAME and i + 1 < len(toks) and toks[i + 1].text == "<":
            end = toks[i + 1].match + 1 if toks[i + 1].match > 0 else i
            if end > i:
                raw = text[t.start : toks[end - 1].end]
                try:
                    piece = MXTensorType.parse_unverified(raw).custom_str()
                except MXTypeError:
                    piece = raw
        elif not generic_ops and t.kind == "string" and t.text[1:-1] in OP_NAMES:
            end, piece = _generic_op_to_custom(text, toks, i)
        if piece is None:
            i += 1
            continue
        out += [text[copied : t.start], piece]
        copied, i = toks[end - 1].end, end
    out.append(text[copied:])
    return "".join(out)


def _items(text: str, toks: list[Token], a: int, b: int) -> list[str]:
    """The comma-separated items of tokens [a, b) at bracket depth 0, as custom text."""
    items, start, i = [], a, a
    while i <= b:
        if i == b or toks[i].text == ",":
            if i > start:
                items.append(to_custom(text[toks[start].start : toks[i - 1].end]).strip())
            start = i + 1
        elif toks[i].kind == "open" and toks[i].match > i:
            i = toks[i].match
        i += 1
    return items


def _generic_op_to_custom(text: str, toks: list[Token], i: int) -> tuple[int, str | None]:
    """``"mx.op"(%a, %b) {attrs} : (T1, T2) -> R`` at token ``i`` in custom form."""

    def sig(k):
        while k < len(toks) and toks[k].kind in _SKIP:
            k += 1
        return k

    name = toks[i].text[1:-1]
    k = i + 1
    if k >= len(toks) or toks[k].text != "(" or toks[k].match < 0:
        return i, None
    operands = _items(text, toks, k + 1, toks[k].match)
    k = sig(toks[k].match + 1)
    attrs = ""
    if k < len(toks) and toks[k].text == "{" and toks[k].match > 0:
        attrs = " " + to_custom(text[toks[k].start : toks[toks[k].match].end])
        k = sig(toks[k].match + 1)
    if k >= len(toks) or toks[k].text != ":":
        return i, None
    k = sig(k + 1)
    if k >= len(toks) or toks[k].text != "(" or toks[k].match < 0:
        return i, None
    in_types = _items(text, toks, k + 1, toks[k].match)
    k = sig(toks[k].match + 1)
    if k >= len(toks) or toks[k].kind != "arrow":
        return i, None
    k = sig(k + 1)
    end = k + 1
    if k < len(toks) and toks[k].kind in ("bang", "ident"):
        j = sig(k + 1)
        if j < len(toks) and toks[j].text == "<" and toks[j].match > 0:
            end = toks[j].match + 1
    else:
        return i, None
    res = to_custom(text[toks[k].start : toks[end - 1].end])
    return end, f"{name} {', '.join(operands)}{attrs} : {', '.join(in_types)} -> {res}"

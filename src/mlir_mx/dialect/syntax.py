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
22.1.8, nor in newer upstream's ``mlir.dialects.ext`` (which lowers to IRDL
plus traits); no upstream issue found.
"""

from __future__ import annotations

from mlir_mx.diagnostics import Diagnostic, DiagnosticError
from mlir_mx.dialect.guards import scan, silent_failure
from mlir_mx.dialect.irdl import OP_NAMES, OP_OPTIONAL
from mlir_mx.dialect.tokens import (
    MAX_NESTING,
    SKIP,
    SourceMap,
    TextError,
    Token,
    remap_locations,
    tokenize,
)
from mlir_mx.dialect.types import MXTensorType, MXTypeError

_TYPE_NAME = "!mx.tensor"

__all__ = [
    "MAX_NESTING",
    "SourceMap",
    "Token",
    "tokenize",
    "to_generic",
    "to_custom",
    "remap_locations",
    "silent_failure",
]

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
        while i < len(toks) and toks[i].kind in SKIP:
            i += 1
        return i

    def prev_sig(self, i: int) -> int:
        i -= 1
        while i >= 0 and self.toks[i].kind in SKIP:
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
        toks, i, copied = self.toks, 0, 0
        while i < len(toks):
            t = toks[i]
            end = None
            if t.kind == "bang" and t.text == _TYPE_NAME and self.is_(i + 1, "open", "<"):
                self.emit(self.text[copied : t.start], copied, True)
                end = self.type_end(i)
                if end == i:
                    raise TextError(f"unbalanced '<' in {_TYPE_NAME} type", t.start)
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
                raise TextError(
                    f"custom op '{t.text}' is unknown (mx ops: {', '.join(OP_NAMES)})", t.start
                )
        statement = p < 0 or toks[p].text in ("{", "}") or "\n" in self.text[toks[p].end : t.start]
        if t.text in OP_NAMES and statement and not (n < len(toks) and toks[n].text in "=,}"):
            raise TextError(
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
            raise TextError(e.message, a + e.offset) from None
        errs = ty.errors()
        if errs:
            raise TextError(errs[0], a)
        return ty.generic_str() + "\n" * self.text.count("\n", a, b)

    def emit_span(self, i: int, end: int) -> None:
        """Emit tokens [i, end) verbatim, with the mx types inside translated."""
        copied = self.toks[i].start
        while i < end:
            t = self.toks[i]
            if t.kind == "bang" and t.text == _TYPE_NAME and self.is_(i + 1, "open", "<"):
                e = self.type_end(i)
                if e == i or e > end:
                    raise TextError(f"unbalanced '<' in {_TYPE_NAME} type", t.start)
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
                raise TextError(f"expected {what} of '{name}'", self.off(k))
            spans.append((k, e))
            k = self.sig(e)
            if not self.is_(k, "punct", ","):
                return spans, k
            k = self.sig(k + 1)

    def translate_op(self, i: int) -> int:
        name, toks = self.toks[i].text, self.toks
        nopnd = OP_NAMES[name][0]
        nmax = nopnd + len(OP_OPTIONAL[name])
        start = toks[i].start
        k = self.sig(i + 1)
        if self.is_(k, "open", "("):
            raise TextError(f"'{name}' in generic form must be quoted: \"{name}\"(...)", start)
        operands: list[Token] = []
        while True:
            if not self.is_(k, "value"):
                raise TextError(f"expected SSA operand for '{name}'", self.off(k))
            operands.append(toks[k])
            k = self.sig(k + 1)
            if not self.is_(k, "punct", ","):
                break
            k = self.sig(k + 1)
        if not nopnd <= len(operands) <= nmax:
            raise TextError(f"'{name}' expects {_count(nopnd, nmax)}, got {len(operands)}", start)
        attrs = None
        if self.is_(k, "open", "{"):
            if toks[k].match < 0:
                raise TextError("unbalanced '{' in attribute dictionary", toks[k].start)
            attrs, k = (k, toks[k].match + 1), self.sig(toks[k].match + 1)
        if not self.is_(k, "punct", ":"):
            raise TextError(f"expected ':' and the operand types of '{name}'", self.off(k))
        colon = toks[k].start
        in_types, k = self.type_list(self.sig(k + 1), "an operand type", name)
        if len(in_types) != len(operands):
            raise TextError(
                f"'{name}' expects {_count(len(operands), len(operands), 'operand type')}, "
                f"got {len(in_types)}",
                self.off(k),
            )
        if not self.is_(k, "arrow"):
            raise TextError(f"expected '->' and the result type of '{name}'", self.off(k))
        arrow = toks[k].start
        k = self.sig(k + 1)
        res = (k, self.type_end(k))
        if res[1] == k:
            raise TextError(f"expected a result type of '{name}'", self.off(k))
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


def _count(lo: int, hi: int, what: str = "operand") -> str:
    """``1 operand``, ``3 operands``, ``1 or 2 operands``."""
    if lo == hi:
        return f"{lo} {what}{'s' if lo > 1 else ''}"
    return f"{lo} to {hi} {what}s" if hi > lo + 1 else f"{lo} or {hi} {what}s"


def to_generic(text: str, filename: str = "-", guard: bool = True) -> tuple[str, SourceMap]:
    """Rewrite custom mx syntax in ``text`` to the generic forms.

    Returns the translated text and the map back to ``text``'s positions
    (``map.suspect``: the offset :func:`guards.scan` suspects, if any).
    Raises :class:`DiagnosticError` (``file:line:col: error: ...``) for a
    malformed or invalid mx construct, or for input upstream would crash on
    (:mod:`mlir_mx.dialect.guards`).  Text without mx syntax is not
    tokenized at all (a 50 MB LLVM-dialect module costs one regex scan).
    ``guard=False`` skips that scan too (text mlir-mx generated itself).
    """
    try:
        suspect = scan(text) if guard else None
        if "mx." in text:
            tr = _Translator(text)
            out, smap = tr.run(), tr.map
        else:
            smap = SourceMap(text, text, [(0, 0, True)])
            out = text
    except TextError as e:
        line = text.count("\n", 0, e.offset) + 1
        col = e.offset - (text.rfind("\n", 0, e.offset) + 1) + 1
        raise DiagnosticError(Diagnostic("error", e.message, filename, line, col)) from None
    smap.suspect = suspect
    return out, smap


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
        while k < len(toks) and toks[k].kind in SKIP:
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

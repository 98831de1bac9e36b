"""Seed syntax at the text boundary: the custom forms of ``!mx.tensor`` and the
four mx ops, translated to and from the generic forms upstream MLIR parses.

IRDL ops (MLIR 22.1.8) only have the generic assembly, and an IRDL type
prints its parameters positionally.  Users write the v1 custom syntax::

    %r = mx.quantize_block %x {tag} : tensor<32x64xf32> -> !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU> loc(#l)

which this module rewrites, before parsing, to::

    %r = "mx.quantize_block"(%x) {tag} : (tensor<32x64xf32>) -> !mx.tensor<array<i64: 32, 64>, f8E4M3FN, 32 : i64, f8E8M0FNU, 1 : i64> loc(#l)

and back after printing.  The scanner is bracket aware (types nest ``<...>``
and contain commas), skips string literals and ``//`` comments, and never
changes the number of lines, so parse errors keep their line; a
:class:`SourceMap` maps columns shifted by a translation back to the
original text.  ``!mx.tensor`` parameters are verified here, at the location
of the type in the source, which is where mlir-opt reports a type verifier
error.  The generic forms are accepted as input too.

FIXME(upstream): custom assembly formats for IRDL ops/types do not exist at
22.1.8; with ``mlir.dialects.ext`` (newer upstream) this layer can go away.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field

from mlir_mx.diagnostics import Diagnostic, DiagnosticError
from mlir_mx.dialect.irdl import OP_NAMES
from mlir_mx.dialect.types import MXTensorType, MXTypeError

__all__ = ["SourceMap", "to_generic", "to_custom"]

_OPS = tuple(n for n in OP_NAMES)  # "mx.quantize_block", ...
_ID_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.$")
_TYPE_START = "!mx.tensor<"
_VALUE_RE = re.compile(r"%[A-Za-z0-9_$.\-]+(?:#[0-9]+)?")


@dataclass
class SourceMap:
    """Maps (line, col) in translated text back to (line, col) in the source."""

    source: str
    output: str = ""
    # (output offset, source offset, verbatim?) for each emitted piece
    anchors: list[tuple[int, int, bool]] = field(default_factory=list)

    def to_source(self, line: int, col: int) -> tuple[int, int]:
        out_off = _offset(self.output, line, col)
        if out_off is None or not self.anchors:
            return line, col
        keys = [a[0] for a in self.anchors]
        i = bisect.bisect_right(keys, out_off) - 1
        if i < 0:
            return line, col
        o, s, verbatim = self.anchors[i]
        src_off = s + (out_off - o) if verbatim else s
        return _line_col(self.source, src_off)


def _offset(text: str, line: int, col: int) -> int | None:
    pos = 0
    for _ in range(line - 1):
        pos = text.find("\n", pos)
        if pos < 0:
            return None
        pos += 1
    return pos + max(col - 1, 0)


def _line_col(text: str, off: int) -> tuple[int, int]:
    line = text.count("\n", 0, off) + 1
    start = text.rfind("\n", 0, off) + 1
    return line, off - start + 1


class _Error(Exception):
    def __init__(self, message: str, offset: int):
        super().__init__(message)
        self.message, self.offset = message, offset


class _Scanner:
    """Translates custom syntax to generic, emitting into a SourceMap."""

    def __init__(self, text: str):
        self.text = text
        self.out: list[str] = []
        self.out_len = 0
        self.map = SourceMap(text)

    def emit(self, piece: str, src_off: int, verbatim: bool) -> None:
        if piece:
            self.map.anchors.append((self.out_len, src_off, verbatim))
            self.out.append(piece)
            self.out_len += len(piece)

    def run(self) -> str:
        t, i, n = self.text, 0, len(self.text)
        start = 0
        while i < n:
            c = t[i]
            if c == '"':
                i = _skip_string(t, i)
                continue
            if c == "/" and t.startswith("//", i):
                j = t.find("\n", i)
                i = n if j < 0 else j
                continue
            if c == "!" and t.startswith(_TYPE_START, i):
                self.emit(t[start:i], start, True)
                end = _match_close(t, i + len(_TYPE_START) - 1)
                if end < 0:
                    raise _Error("unbalanced '<' in !mx.tensor type", i)
                self.emit(self.translate_type(i, end), i, False)
                i = start = end
                continue
            if c == "m" and t.startswith("mx.", i) and (i == 0 or t[i - 1] not in _ID_CHARS | {'"', "!", "#", "@", "^"}):
                j = i
                while j < n and t[j] in _ID_CHARS:
                    j += 1
                name = t[i:j]
                if name in _OPS and _after_assignment(t, i):
                    self.emit(t[start:i], start, True)
                    end, generic = self.translate_op(name, i, j)
                    self.emit(generic, i, False)
                    i = start = end
                    continue
                if _after_assignment(t, i) and j < n and t[j] in " \t\n%{:(":
                    raise _Error(f"custom op '{name}' is unknown (mx ops: {', '.join(_OPS)})", i)
                i = j
                continue
            i += 1
        self.emit(t[start:], start, True)
        self.map.output = "".join(self.out)
        return self.map.output

    # -- pieces ---------------------------------------------------------------
    def translate_type(self, i: int, end: int) -> str:
        try:
            ty = MXTensorType.parse_unverified(self.text[i:end])
        except MXTypeError as e:
            raise _Error(e.message, i + e.offset) from None
        errs = ty.errors()
        if errs:
            raise _Error(errs[0], i)
        return ty.generic_str() + "\n" * self.text.count("\n", i, end)

    def translate_span(self, a: int, b: int) -> str:
        """Translate the mx types inside text[a:b] (types, attr-dicts)."""
        t, out, i, start = self.text, [], a, a
        while i < b:
            if t[i] == '"':
                i = _skip_string(t, i)
                continue
            if t.startswith(_TYPE_START, i):
                end = _match_close(t, i + len(_TYPE_START) - 1)
                if end < 0 or end > b:
                    raise _Error("unbalanced '<' in !mx.tensor type", i)
                out.append(t[start:i])
                out.append(self.translate_type(i, end))
                i = start = end
                continue
            i += 1
        out.append(t[start:b])
        return "".join(out)

    def translate_op(self, name: str, i: int, j: int) -> tuple[int, str]:
        t, n = self.text, len(self.text)
        nopnd = OP_NAMES[name][0]
        k = _ws(t, j)
        if k < n and t[k] == "(":
            raise _Error(
                f"'{name}' in generic form must be quoted: \"{name}\"(...)", i
            )
        operands: list[str] = []
        while True:
            m = _VALUE_RE.match(t, k)
            if not m:
                raise _Error(f"expected SSA operand for '{name}'", k)
            operands.append(m.group(0))
            k = _ws(t, m.end())
            if k < n and t[k] == ",":
                k = _ws(t, k + 1)
                continue
            break
        if len(operands) != nopnd:
            raise _Error(
                f"'{name}' expects {nopnd} operand{'s' if nopnd > 1 else ''}, got {len(operands)}", i
            )
        attrs = ""
        if k < n and t[k] == "{":
            e = _match_close(t, k)
            if e < 0:
                raise _Error("unbalanced '{' in attribute dictionary", k)
            attrs = " " + self.translate_span(k, e)
            k = _ws(t, e)
        if k >= n or t[k] != ":":
            raise _Error(f"expected ':' and the operand types of '{name}'", k)
        k = _ws(t, k + 1)
        in_types: list[str] = []
        while True:
            e = _scan_type(t, k)
            if e == k:
                raise _Error("expected a type", k)
            in_types.append(self.translate_span(k, e).strip())
            k = _ws(t, e)
            if k < n and t[k] == ",":
                k = _ws(t, k + 1)
                continue
            break
        if len(in_types) != nopnd:
            raise _Error(
                f"'{name}' expects {nopnd} operand type{'s' if nopnd > 1 else ''}, got {len(in_types)}",
                k,
            )
        if not t.startswith("->", k):
            raise _Error(f"expected '->' and the result type of '{name}'", k)
        k = _ws(t, k + 2)
        e = _scan_type(t, k)
        if e == k:
            raise _Error("expected a result type", k)
        res = self.translate_span(k, e).strip()
        generic = f'"{name}"({", ".join(operands)}){attrs} : ({", ".join(in_types)}) -> {res}'
        generic += "\n" * (t.count("\n", i, e) - generic.count("\n"))
        return e, generic


def _after_assignment(t: str, i: int) -> bool:
    """True when t[i] starts an op: it follows ``%r =`` (every mx op has a result)."""
    k = i - 1
    while k >= 0 and t[k] in " \t\r\n":
        k -= 1
    return k >= 0 and t[k] == "=" and (k == 0 or t[k - 1] not in "=!<>")


def _ws(t: str, k: int) -> int:
    n = len(t)
    while k < n and t[k] in " \t\r\n":
        k += 1
    return k


def _skip_string(t: str, i: int) -> int:
    j = i + 1
    n = len(t)
    while j < n:
        if t[j] == "\\":
            j += 2
            continue
        if t[j] == '"':
            return j + 1
        if t[j] == "\n":
            return j
        j += 1
    return n


def _match_close(t: str, i: int) -> int:
    """Given an opening bracket at t[i] (``<``, ``(``, ``[`` or ``{``), the offset
    just past its matching closer (-1 if none).  Brackets of all kinds nest;
    strings and the ``->`` arrow are skipped."""
    depth, j, n = 0, i, len(t)
    while j < n:
        c = t[j]
        if c == '"':
            j = _skip_string(t, j)
            continue
        if c == "-" and t.startswith("->", j):
            j += 2
            continue
        if c in "<([{":
            depth += 1
        elif c in ">)]}":
            depth -= 1
            if depth == 0:
                return j + 1
        j += 1
    return -1


def _scan_type(t: str, k: int) -> int:
    """End offset of one type starting at ``k`` (``!dialect.x<...>``, ``tensor<..>``, ``f32``...)."""
    n = len(t)
    j = k
    if j < n and t[j] == "(":
        e = _match_close(t, j)
        return k if e < 0 else e
    if j < n and t[j] == "!":
        j += 1
    while j < n and t[j] in _ID_CHARS:
        j += 1
    if j < n and t[j] == "<" and j > k:
        e = _match_close(t, j)
        return k if e < 0 else e
    return j


def to_generic(text: str, filename: str = "-") -> tuple[str, SourceMap]:
    """Rewrite custom mx syntax in ``text`` to the generic forms.

    Returns the translated text and the map back to ``text``'s positions.
    Raises :class:`DiagnosticError` (``file:line:col: error: ...``) for a
    malformed or invalid mx construct.
    """
    sc = _Scanner(text)
    try:
        out = sc.run()
    except _Error as e:
        line, col = _line_col(text, e.offset)
        raise DiagnosticError(Diagnostic("error", e.message, filename, line, col)) from None
    return out, sc.map


# ---------------------------------------------------------------- printing --

_GENERIC_OP = re.compile(r'"(mx\.(?:quantize_block|dequantize_block|block_matmul|fold_scale))"\(')


def to_custom(text: str, generic_ops: bool = False) -> str:
    """Rewrite printed IR: mx types to their custom spelling, and (unless
    ``generic_ops``) generic mx ops to the v1 custom op syntax."""
    out, i, start, n = [], 0, 0, len(text)
    while i < n:
        c = text[i]
        if c == '"':
            m = None if generic_ops else _GENERIC_OP.match(text, i)
            if m:
                res = _generic_op_to_custom(text, i, m)
                if res is not None:
                    end, custom = res
                    out.append(text[start:i])
                    out.append(custom)
                    i = start = end
                    continue
            i = _skip_string(text, i)
            continue
        if c == "!" and text.startswith(_TYPE_START, i):
            end = _match_close(text, i + len(_TYPE_START) - 1)
            if end > 0:
                try:
                    custom = MXTensorType.parse_unverified(text[i:end]).custom_str()
                except MXTypeError:
                    custom = text[i:end]
                out.append(text[start:i])
                out.append(custom)
                i = start = end
                continue
        i += 1
    out.append(text[start:])
    return "".join(out)


def _split_commas(s: str) -> list[str]:
    parts, depth, cur = [], 0, []
    i = 0
    while i < len(s):
        ch = s[i]
        if s.startswith("->", i):
            cur.append("->")
            i += 2
            continue
        if ch in "<([{":
            depth += 1
        elif ch in ">)]}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
        i += 1
    if "".join(cur).strip():
        parts.append("".join(cur).strip())
    return parts


def _generic_op_to_custom(text: str, i: int, m: re.Match) -> tuple[int, str] | None:
    name = m.group(1)
    k = m.end()
    close = text.find(")", k)
    if close < 0:
        return None
    operands = [s.strip() for s in text[k:close].split(",") if s.strip()]
    k = _ws(text, close + 1)
    attrs = ""
    if k < len(text) and text[k] == "{":
        e = _match_close(text, k)
        if e < 0:
            return None
        attrs = " " + to_custom(text[k:e])
        k = _ws(text, e)
    if not text.startswith(":", k):
        return None
    k = _ws(text, k + 1)
    if not text.startswith("(", k):
        return None
    e = _match_close(text, k)
    in_types = [to_custom(x) for x in _split_commas(text[k + 1 : e - 1])]
    k = _ws(text, e)
    if not text.startswith("->", k):
        return None
    k = _ws(text, k + 2)
    e = _scan_type(text, k)
    res = to_custom(text[k:e])
    return e, f"{name} {', '.join(operands)}{attrs} : {', '.join(in_types)} -> {res}"

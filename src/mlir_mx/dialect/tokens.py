"""The one tokenizer of the text layer, and the map back to the source.

:func:`tokenize` splits MLIR text into tokens with their source offsets
(whitespace, comments, strings, SSA values, ``@``/``^``/``!``/``#`` names,
``->``, ``>=``/``<=``/``==``, identifiers, numbers, brackets, punctuation)
and matches brackets once.  :class:`SourceMap` maps positions of translated
text back to the source; :func:`remap_locations` applies it to a parsed
module's locations.  Used by :mod:`mlir_mx.dialect.syntax` (both directions
of the custom syntax) and :mod:`mlir_mx.dialect.guards`.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field

from mlir import ir

from mlir_mx.errors import TextError
from mlir_mx.ir_utils import collect

__all__ = ["BRACKET_PAIRS", "MAX_NESTING", "Token", "TextError", "tokenize", "SourceMap", "remap_locations", "SKIP"]

#: Deepest bracket/region nesting accepted.  Upstream's parser recurses per
#: level and overflows an 8 MiB stack at a few thousand nested regions
#: (SIGSEGV, the mlir-opt binary included); real IR stays far below this.
MAX_NESTING = 500

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
BRACKET_PAIRS = {">": "<", ")": "(", "]": "[", "}": "{"}
#: Token kinds that carry no syntax.
SKIP = ("ws", "comment")


@dataclass(slots=True)
class Token:
    """One token: its kind (a group name of the tokenizer), text and offsets."""

    kind: str
    text: str
    start: int
    end: int
    match: int = -1  # brackets: index of the matching bracket token (-1: none)


def tokenize(text: str) -> list[Token]:
    """The tokens of ``text`` (whitespace and comments included) with brackets matched.

    Matching is tolerant (a stray closer is ignored, a closer pops to its
    opener), because malformed input is upstream's to report (and nesting
    deeper than :data:`MAX_NESTING` is refused before, by
    :func:`mlir_mx.dialect.guards.scan`).
    """
    toks: list[Token] = []
    stack: list[int] = []
    for m in _TOKEN_RE.finditer(text):
        kind = m.lastgroup
        tok = Token(kind, m.group(), m.start(), m.end())
        if kind == "open":
            stack.append(len(toks))
        elif kind == "close":
            want = BRACKET_PAIRS[tok.text]
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

    for op in collect(root, lambda o: True):
        new = fix(op.location)
        if new is not None:
            op.location = new
        for region in op.regions:
            for block in region.blocks:
                for arg in block.arguments:
                    new = fix(arg.location)
                    if new is not None:
                        arg.set_location(new)

"""Guards against inputs upstream's parser and verifiers crash on, or fail
on without a location.

Each is an upstream bug of MLIR 22.1.8 (``mlir-opt`` crashes too), found by
the fuzzer (``docs/testing.md``); each check refuses (or suspects) only IR
that is invalid anyway, with a located diagnostic.
FIXME(upstream): drop a guard once its upstream fix is in the wheel; each
guard's docstring names its upstream issue, or says none was found.
"""

from __future__ import annotations

import re

from mlir_mx.diagnostics import Diagnostic
from mlir_mx.dialect.irdl import OP_NAMES
from mlir_mx.dialect.tokens import BRACKET_PAIRS, MAX_NESTING, SKIP, TextError, tokenize

__all__ = ["silent_failure", "scan"]


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
            while p >= 0 and toks[p].kind in SKIP:
                p -= 1
            if p < 0 or toks[p].text != "=":
                line = text.count("\n", 0, t.start) + 1
                col = t.start - (text.rfind("\n", 0, t.start) + 1) + 1
                msg = f"'{t.text}' produces a result: bind it, as in '%r = {t.text} ...'"
                return Diagnostic("error", msg, filename, line, col)
    return Diagnostic("error", "unable to parse module assembly (upstream gave no location)", filename, 1, 1)


#: The tokens the guards look at (everything else is skipped unseen):
#: strings and comments (to skip them), brackets, affine divisions by a
#: literal zero, SSA values (with a trailing ``=`` / ``:N =`` when defined).
_SCAN_RE = re.compile(
    r"""(?P<string>"(?:[^"\\\n]|\\.)*"?)
      |(?P<comment>//[^\n]*)
      |(?P<zero>(?<![\w$.])(?:mod|floordiv|ceildiv)\s*(?:\(\s*)*0+(?![\w.]))
      |(?P<value>%(?:[A-Za-z0-9_$.\-]+|"(?:[^"\\\n]|\\.)*")(?:\#[0-9]+)?)
       (?P<defines>\s*(?::\s*[0-9]+\s*)?=(?!=))?
      |(?P<skip>->|>=|<=)
      |(?P<open>[<(\[{])
      |(?P<close>[>)\]}])""",
    re.VERBOSE,
)


def scan(text: str) -> int | None:
    """Refuse what upstream would crash on; return the offset of a suspect use.

    * Nesting deeper than :data:`MAX_NESTING` brackets/regions: upstream's
      recursive parser overflows the stack (SIGSEGV).
    * ``mod 0``, ``floordiv 0``, ``ceildiv 0`` in an affine expression:
      undefined, and composing such an indexing map (linalg's verifier,
      ``AffineMap::compose``) asserts (reproducer
      tests/dialect/test_syntax.py::test_affine_division_by_zero; related:
      llvm-project#173374, fixed for other maps by #173434).
    * A use of ``%x`` that no definition can reach: no other ``%x`` sits in
      a block enclosing it, and ``%x`` is defined (``%x = ...``) only inside
      regions that do not enclose it.  Such IR never verifies, and
      upstream's parser can ABORT on it (it resolves the forward reference
      into a region that then fails to parse: "operation destroyed but still
      has uses"; reproducer test_syntax.py::test_invisible_forward_use; a
      variant llvm-project#128011 did not cover; no upstream issue found).
      Custom syntax can define names in forms this scan does not know
      (``scf.forall (%i)``), so this is only a suspicion: the offset is
      returned and :func:`mlir_mx.dialect.parse_module` parses in a
      subprocess first.

    One pass, no token objects: it runs on every input, 50 MB modules too.
    """
    stack: list[str] = []
    blocks: list[int] = [0]  # enclosing '{' blocks, innermost last (0: top level)
    parent: list[int] = [0]
    # name -> block -> [occurrences, definitions, offset of the first occurrence]
    seen: dict[str, dict[int, list[int]]] = {}
    for m in _SCAN_RE.finditer(text):
        kind = m.lastgroup
        if kind == "value" or kind == "defines":
            name = m.group("value").split("#", 1)[0]
            entry = seen.setdefault(name, {}).setdefault(blocks[-1], [0, 0, m.start()])
            entry[0] += 1
            entry[1] += m.group("defines") is not None
        elif kind == "open":
            if len(stack) >= MAX_NESTING:
                raise TextError(
                    f"brackets and regions nest deeper than {MAX_NESTING} levels; refusing to "
                    "parse (upstream's recursive parser would overflow the stack)",
                    m.start(),
                )
            stack.append(m.group())
            if m.group() == "{":
                parent.append(blocks[-1])
                blocks.append(len(parent) - 1)
        elif kind == "close":
            want = BRACKET_PAIRS[m.group()]
            if want in stack:  # tolerant, as tokenize: pop to the opener
                while True:
                    top = stack.pop()
                    if top == "{":
                        blocks.pop()
                    if top == want:
                        break
        elif kind == "zero":
            word = m.group().split()[0].split("(")[0]
            raise TextError(f"affine expression divides by zero ('{word} 0')", m.start())
    return _invisible(seen, parent)


def _invisible(seen: dict[str, dict[int, list[int]]], parent: list[int]) -> int | None:
    """The first use no definition can reach (see :func:`scan`), else None."""
    for by_block in seen.values():
        if not any(e[1] for e in by_block.values()):
            continue
        for blk, (count, defs, offset) in by_block.items():
            if count != 1 or defs:
                continue
            b, reached = blk, False
            while b != 0 and not reached:  # another occurrence in an enclosing block?
                b = parent[b]
                reached = b in by_block
            if not reached:
                return offset
    return None

"""Guards on the token stream against inputs upstream's parser and verifiers
crash on, or fail on without a location.

Each is an upstream bug of MLIR 22.1.8 (``mlir-opt`` crashes too), found by
the fuzzer (``docs/testing.md``); each check refuses (or suspects) only IR
that is invalid anyway, with a located diagnostic.
FIXME(upstream): drop a guard once its upstream fix is in the wheel.
"""

from __future__ import annotations

from mlir_mx.diagnostics import Diagnostic
from mlir_mx.dialect.irdl import OP_NAMES
from mlir_mx.dialect.tokens import SKIP, TextError, Token, tokenize

__all__ = ["silent_failure", "check_zero_divisors", "invisible_use"]


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


def check_zero_divisors(toks: list[Token]) -> None:
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
        while j < len(toks) and (toks[j].kind in SKIP or toks[j].text == "("):
            j += 1
        if j < len(toks) and toks[j].kind == "number" and toks[j].text.strip("0") == "":
            raise TextError(f"affine expression divides by zero ('{t.text} 0')", t.start)


def _defines(toks: list[Token], i: int) -> bool:
    """Whether value token ``i`` is a definition ``%x =`` or ``%x:N =``."""
    j = i + 1
    while j < len(toks) and toks[j].kind in SKIP:
        j += 1
    if j < len(toks) and toks[j].text == ":":  # %x:2 = ...
        j += 1
        while j < len(toks) and toks[j].kind in SKIP:
            j += 1
        if j >= len(toks) or toks[j].kind != "number":
            return False
        j += 1
        while j < len(toks) and toks[j].kind in SKIP:
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

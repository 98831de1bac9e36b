"""The element formats the tests run, read from the one format table.

Tests iterate :data:`mlir_mx.numerics.formats.ELEMENT_FORMATS` (every format)
or one of these picks, all derived from its rows, never a literal list of
names: a format added to the table is tested the day it is added
(``tests/dialect/test_tables.py`` fails on a literal list).
"""

from __future__ import annotations

from itertools import cycle

from mlir_mx.numerics.formats import ELEMENT_FORMATS

__all__ = ["ALL", "BY_BEHAVIOUR", "INTEGRAL", "NON_INTEGRAL", "SUB_BYTE", "cycled", "pairs"]

#: Every element format, in table order.
ALL = tuple(ELEMENT_FORMATS)
#: Formats whose codes are narrower than a byte (packed in storage).
SUB_BYTE = tuple(n for n, f in ELEMENT_FORMATS.items() if f.is_sub_byte)
#: Formats whose values times ``2^int_exp2`` are integers (the integer dot units).
INTEGRAL = tuple(n for n, f in ELEMENT_FORMATS.items() if f.int_exp2 is not None)
#: The others (FP8: the bf16 dot unit).
NON_INTEGRAL = tuple(n for n, f in ELEMENT_FORMATS.items() if f.int_exp2 is None)


def _by_behaviour() -> tuple[str, ...]:
    first: dict[tuple, str] = {}
    for name, f in ELEMENT_FORMATS.items():
        first.setdefault((f.group, f.widening, f.int_exp2 is None), name)
    return tuple(first.values())


#: One format per behaviour of the table (packing group, widening recipe,
#: integer factor or not): the first of each, for tests too slow to run on
#: every format.  A format with a new behaviour joins by itself.
BY_BEHAVIOUR = _by_behaviour()


def pairs() -> list[tuple[str, str]]:
    """``(A, B)`` format pairs in which every format is A once and B once."""
    return [(a, ALL[(i + 1) % len(ALL)]) for i, a in enumerate(ALL)]


def cycled(values) -> list[tuple]:
    """``values`` each paired with a format, cycling through every format
    (and at least once through all of them)."""
    values = list(values)
    n = max(len(values), len(ALL))
    return [(v, f) for v, f, _ in zip(cycle(values), cycle(ALL), range(n))]

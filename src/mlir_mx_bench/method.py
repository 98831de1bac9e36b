"""What the harness needs from each benchmarked method."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .cases import Oracle, Problem

__all__ = ["Method", "Skipped", "linear_call_method"]


@dataclass
class Method:
    """One way of computing the product, ready to check and time.

    ``run(n)`` performs ``n`` back-to-back calls (timed); ``result()`` returns
    the (M, N) product of one call for the oracle check; ``bytes_moved`` is the
    compulsory traffic of one call (see ``docs/bench.md``).  ``threads`` is the
    number of threads the method really uses (a single-threaded kernel in a
    2-thread group says 1).
    """

    name: str
    kind: str  # "baseline" or "ours"
    threads: int
    bytes_moved: int
    run: Callable[[int], object]
    result: Callable[[], np.ndarray]
    oracle: Oracle
    #: unit roundoff of the output type (0: f32 output)
    out_unit: float = 0.0
    #: "mx-ab" (mx x mx) / "mx-a" (mx x f32) for methods that take MX operands;
    #: "f32-a" for f32 activations times the MX weights (mlir_mx.Linear)
    operands: str | None = None
    compile_s: float | None = None
    note: str = ""
    close: Callable[[], None] | None = None
    #: more fields for the method's results row (e.g. the kernel a library reports)
    extra: dict | None = None


@dataclass
class Skipped:
    """A method family that cannot run here, and why (printed and recorded)."""

    name: str
    reason: str


def linear_call_method(p: Problem, threads: int, lin, label: str, t0: float, **kw) -> Method:
    """The row timing ``lin(p.a)`` (an ``mlir_mx.Linear`` already compiled,
    f32 activations; bytes: A, B as held, C written); ``kw``: its ``oracle``
    and ``note``."""
    s = p.shape
    return Method(
        label,
        "ours",
        threads,
        4 * s.M * s.K + lin.nbytes + 4 * s.M * s.N,
        run=lambda n, f=lin, a=p.a: [f(a) for _ in range(n)],
        result=lambda f=lin, a=p.a: f(a),
        compile_s=time.perf_counter() - t0,
        operands="f32-a",
        **kw,
    )

"""The one registry of matmul kernel schedules.

Each :class:`Schedule` is one entry: its config dataclass (whose field
defaults are the schedule's defaults), its emitter, the shape class it
serves, which problems it supports, its priority in the automatic choice and
a one-line help.  Everything that names schedules iterates
:data:`SCHEDULES`: the automatic choice (:func:`choose`, used by
``mx-matmul-kernels{schedule=auto}`` and ``mlir_mx.Linear``), the pass's and
``mx-runner``'s option values and help, ``mx-bench``'s rows, the
differential tester's variants and the tests.  Adding a schedule is one
emitter module plus one entry here (``docs/adding-a-kernel.md``).

Every schedule computes the same f32 operations per output element (the
blocked order of :mod:`mlir_mx.kernels.problem`), so the choice changes
speed, never results.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from mlir_mx.kernels.dot import DotConfig, emit_dot, supports_bf16, supports_int
from mlir_mx.kernels.prefill import PrefillConfig, emit_prefill
from mlir_mx.kernels.problem import Problem
from mlir_mx.kernels.stream import StreamConfig, emit_stream

__all__ = [
    "SCHEDULES",
    "SHAPE_CLASSES",
    "SMALL_MAX_M",
    "Schedule",
    "choose",
    "schedule_names",
    "shape_class",
]

#: The shape classes, by M: one row (decode), a few rows (small), many (prefill).
SHAPE_CLASSES = ("decode", "small", "prefill")

#: Largest M of the ``small`` class.
SMALL_MAX_M = 48


def shape_class(m: int | None) -> str:
    """The shape class of ``M`` (a dynamic M, None, is ``small``: any M runs)."""
    if m == 1:
        return "decode"
    if m is None or m <= SMALL_MAX_M:
        return "small"
    return "prefill"


def _any(prob: Problem) -> bool:
    return True


def _f32(prob: Problem) -> bool:
    """The f32 schedules: B as codes (not dot records), A as codes or f32."""
    return prob.b_dot is None and prob.a_quant is None


@dataclass(frozen=True)
class Schedule:
    """One kernel schedule: how to configure it and emit it, and when to use it."""

    name: str
    help: str
    #: The shape class :func:`choose` picks it for.
    shape_class: str
    #: A frozen dataclass with a ``threads`` field; its defaults are the
    #: schedule's, and an optional ``adapt(prob)`` returns it fitted to a problem.
    config: type
    #: ``emit(kb, prob, ops, cfg)`` builds the kernel at the current insertion point.
    emit: Callable[..., None]
    #: Config fields this schedule sets differently from the config's defaults.
    settings: Mapping[str, Any] = field(default_factory=dict)
    #: Whether it can run ``prob`` (formats, block size, CPU features).
    supports: Callable[[Problem], bool] = _any
    #: Among the schedules of a shape class that support a problem, the
    #: automatic choice takes the highest priority.
    priority: int = 0

    def configure(self, prob: Problem, threads: int) -> Any:
        """The config for ``prob`` on ``threads`` threads."""
        cfg = self.config(**{**self.settings, "threads": threads})
        adapt = getattr(cfg, "adapt", None)
        return adapt(prob) if adapt is not None else cfg

    def describe(self, cfg) -> str:
        """``name (field=value, ...)`` of a config of this schedule."""
        fields = ", ".join(f"{f.name}={getattr(cfg, f.name)}" for f in dataclasses.fields(cfg))
        return f"{self.name} ({fields})"


SCHEDULES: dict[str, Schedule] = {
    s.name: s
    for s in (
        Schedule(
            "decode",
            "M = 1: B streamed once and widened in registers, one row of A",
            "decode",
            StreamConfig,
            emit_stream,
            {"mr": 1},
            _f32,
        ),
        Schedule(
            "small",
            f"M <= {SMALL_MAX_M}: streaming, groups of 4 rows sharing each widened B tile",
            "small",
            StreamConfig,
            emit_stream,
            {"mr": 4},
            _f32,
        ),
        Schedule(
            "prefill",
            "large M: B widened once into packed f32 panels, an 8x32 register microkernel",
            "prefill",
            PrefillConfig,
            emit_prefill,
            supports=_f32,
        ),
        # The dot kernels (kernels/dot.py): exact block dots on the CPU's dot
        # units, the f32 kernels' bits; B as dot records (mlir_mx.Linear).
        Schedule(
            "int-decode",
            "M = 1, FP4/FP6/INT8 pairs: exact integer block dots (VNNI), B records streamed",
            "decode",
            DotConfig,
            emit_dot,
            {"mr": 1, "nv": 4},
            supports_int,
            priority=10,
        ),
        Schedule(
            "int-small",
            "small M, FP4/FP6/INT8 pairs: exact integer block dots, 4-row groups, L1 K chunks",
            "small",
            DotConfig,
            emit_dot,
            {"mr": 4, "nv": 2, "kcb": 8, "expand": True},
            supports_int,
            priority=10,
        ),
        Schedule(
            "int-prefill",
            "large M, FP4/FP6/INT8 pairs: exact integer block dots, 6x32 tiles, L2 K chunks",
            "prefill",
            DotConfig,
            emit_dot,
            {"mr": 6, "nv": 2, "kcb": 128, "expand": True},
            supports_int,
            priority=10,
        ),
        Schedule(
            "bf16-small",
            "small M, pairs with FP8: vdpbf16ps in the f32 kernels' order (swapped pairs)",
            "small",
            DotConfig,
            emit_dot,
            {"mr": 4, "nv": 2, "kcb": 8, "expand": True},
            supports_bf16,
            priority=10,
        ),
        Schedule(
            "bf16-prefill",
            "large M, pairs with FP8: vdpbf16ps in the f32 kernels' order, 6x32 tiles",
            "prefill",
            DotConfig,
            emit_dot,
            {"mr": 6, "nv": 2, "kcb": 64, "expand": True},
            supports_bf16,
            priority=10,
        ),
    )
}


def schedule_names(auto: bool = True) -> tuple[str, ...]:
    """The names a user may give: ``auto`` (when ``auto``) and every schedule's."""
    return (("auto",) if auto else ()) + tuple(SCHEDULES)


def choose(prob: Problem, m: int | None = None) -> Schedule:
    """The automatic choice for ``prob`` at ``M = m`` (default ``prob.m``): the
    highest-priority schedule of M's shape class that supports the problem."""
    cls = shape_class(prob.m if m is None else m)
    fits = [s for s in SCHEDULES.values() if s.shape_class == cls and s.supports(prob)]
    if not fits:  # pragma: no cover - every class has a schedule supporting everything
        raise ValueError(f"no kernel schedule supports {prob} in shape class {cls}")
    return max(fits, key=lambda s: s.priority)

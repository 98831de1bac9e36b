"""The dot kernels as schedules: one entry per (dot unit family, shape class).

Each entry has the shape of the schedule registry's ``Schedule`` (issue 16):
a name, a frozen config with a ``threads`` field and its defaults, the
emitter ``emit(kb, prob, ops, cfg)``, the shape class it serves, a
``supports(prob)`` test (format pair, block size, CPU features), a priority
for the automatic choice and a one-line help.

``int-*`` run the exact integer block dots (``vpdpbusd`` / ``vpdpwssd`` or
their AVX512BW fallbacks) for every pair of FP4, FP6 and INT8 operands;
``bf16-*`` run ``vdpbf16ps`` for pairs with an FP8 operand (no decode
entry: its records hold 2 bytes per element, more than the f32 decode
schedule streams).  All need B as dot records (``Problem.b_dot``), which
``mlir_mx.Linear`` builds once per weight.

FIXME(coordination): until ``mlir_mx.kernels.registry`` lands on main,
:class:`DotPlan` adapts an entry to ``kernel_module(prob, plan)`` (``emit``
and ``threads``); it goes away when the entries are registered there.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, replace

from mlir_mx.kernels.dot import DotConfig, emit_dot
from mlir_mx.kernels.dot_layout import dot_kind
from mlir_mx.kernels.problem import Problem

__all__ = ["DotSchedule", "DOT_SCHEDULES", "DotPlan", "plan_dot", "dot_schedule_for"]


@dataclass(frozen=True)
class DotSchedule:
    """One dot kernel schedule (the registry's ``Schedule`` fields)."""

    name: str
    config: DotConfig  # the defaults
    emit: Callable
    shape_class: str  # "decode", "small" or "prefill"
    family: str  # "int" or "bf16"
    priority: int
    help: str

    def supports(self, prob: Problem) -> bool:
        """B in dot records of the dot unit this CPU uses for the pair."""
        kind = dot_kind(prob.a_elem or prob.a_quant, prob.b_elem, prob.block)
        if kind is None or prob.b_dot != kind.name or prob.k % 16:
            return False
        return (kind.name == "bf16") == (self.family == "bf16")


def _entry(name, shape_class, family, help_, **cfg) -> DotSchedule:
    return DotSchedule(name, DotConfig(**cfg), emit_dot, shape_class, family, 10, help_)


DOT_SCHEDULES: dict[str, DotSchedule] = {
    s.name: s
    for s in (
        _entry(
            "int-decode", "decode", "int",
            "M = 1: exact integer block dots (VNNI), B records streamed panel by panel",
            mr=1, nv=4,
        ),
        _entry(
            "int-small", "small", "int",
            "small M: exact integer block dots, 4-row groups over L1-sized K chunks",
            mr=4, nv=2, kcb=8, expand=True,
        ),
        _entry(
            "int-prefill", "prefill", "int",
            "large M: exact integer block dots, 6 x 32 register tiles over L2-sized K chunks",
            mr=6, nv=2, kcb=128, expand=True,
        ),
        _entry(
            "bf16-small", "small", "bf16",
            "small M, FP8 pairs: vdpbf16ps in the f32 kernels' order (swapped pairs)",
            mr=4, nv=2, kcb=8, expand=True,
        ),
        _entry(
            "bf16-prefill", "prefill", "bf16",
            "large M, FP8 pairs: vdpbf16ps in the f32 kernels' order, 6 x 32 tiles",
            mr=6, nv=2, kcb=64, expand=True,
        ),
    )
}  # fmt: skip


@dataclass(frozen=True)
class DotPlan:
    """A dot schedule with its config, ready for ``kernel_module(prob, plan)``."""

    schedule: str
    config: DotConfig

    @property
    def threads(self) -> int:
        return self.config.threads

    def emit(self, kb, prob: Problem, ops) -> None:
        DOT_SCHEDULES[self.schedule].emit(kb, prob, ops, self.config)

    def describe(self) -> str:
        fields = ", ".join(
            f"{f.name}={getattr(self.config, f.name)}" for f in dataclasses.fields(self.config)
        )
        return f"{self.schedule} ({fields})"


def dot_schedule_for(prob: Problem, shape_class: str) -> DotSchedule | None:
    """The dot schedule for ``prob`` at ``shape_class`` (highest priority), or None."""
    found = [s for s in DOT_SCHEDULES.values() if s.shape_class == shape_class and s.supports(prob)]
    return max(found, key=lambda s: s.priority, default=None)


def plan_dot(prob: Problem, schedule: str, threads: int, **overrides) -> DotPlan:
    """The plan of dot schedule ``schedule`` on ``threads`` threads."""
    entry = DOT_SCHEDULES[schedule]
    return DotPlan(schedule, replace(entry.config, threads=threads, **overrides))

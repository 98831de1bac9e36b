"""A kernel plan: the schedule and its config for one problem.

:func:`plan_kernel` turns a schedule name (or ``auto``) and a thread count
into a :class:`KernelPlan` through the registry
(:mod:`mlir_mx.kernels.registry`); the plan emits the kernel.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mlir_mx.host import check_threads
from mlir_mx.kernels.common.problem import Operands, Problem
from mlir_mx.kernels.registry import SCHEDULES, Schedule, check_schedule, choose

__all__ = ["KernelPlan", "plan_kernel"]


@dataclass(frozen=True)
class KernelPlan:
    """A schedule with its config, ready to emit."""

    schedule: Schedule
    config: Any

    @property
    def name(self) -> str:
        return self.schedule.name

    @property
    def threads(self) -> int:
        return self.config.threads

    def emit(self, kb, prob: Problem, ops: Operands) -> None:
        self.schedule.emit(kb, prob, ops, self.config)

    def describe(self) -> str:
        return self.schedule.describe(self.config)


def plan_kernel(prob: Problem, schedule: str = "auto", threads: int | None = None) -> KernelPlan:
    """The kernel for ``prob``: ``schedule`` a name of :data:`SCHEDULES` or
    ``auto`` (:func:`~mlir_mx.kernels.registry.choose`); ``threads`` None
    for this machine's cores.  A named schedule that does not support the
    problem gives way to the automatic choice."""
    check_schedule(schedule)
    threads = check_threads(threads)
    chosen = SCHEDULES.get(schedule)
    if chosen is None or not chosen.supports(prob):
        chosen = choose(prob)
    return KernelPlan(chosen, chosen.configure(prob, threads))

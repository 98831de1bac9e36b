"""Choosing a kernel: shape classes, tiles and threads.

Three shape classes, one schedule each (``docs/passes/mx-matmul-kernels.md``):

``decode``   M = 1: the streaming schedule with one row of A in registers.
``small``    M up to :data:`SMALL_MAX_M`: streaming, row groups of
             :data:`SMALL_MR` rows sharing each widened B tile.
``prefill``  larger M: packed B panels and a register-tiled microkernel.

``auto`` picks the class from M (a dynamic M gets the class given
explicitly, or ``small`` so that any M runs correctly).  Every schedule
computes the same f32 operations per output element (the blocked order of
:mod:`mlir_mx.kernels.problem`), so the choice changes speed, never results.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass

from mlir_mx.kernels.packed import PackedConfig, emit_packed
from mlir_mx.kernels.problem import Operands, Problem
from mlir_mx.kernels.stream import StreamConfig, emit_stream

__all__ = ["SCHEDULES", "KernelPlan", "plan_kernel", "default_threads", "SMALL_MAX_M"]

SCHEDULES = ("auto", "decode", "small", "prefill")

#: Largest M the streaming schedule is chosen for by ``auto``.
SMALL_MAX_M = 48
#: Rows of A per register group in the ``small`` schedule.
SMALL_MR = 4


def default_threads() -> int:
    """The cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - non-Linux
        return max(1, os.cpu_count() or 1)


@dataclass(frozen=True)
class KernelPlan:
    """A schedule with its parameters, ready to emit."""

    schedule: str
    config: StreamConfig | PackedConfig

    @property
    def threads(self) -> int:
        return self.config.threads

    def emit(self, kb, prob: Problem, ops: Operands) -> None:
        if isinstance(self.config, PackedConfig):
            emit_packed(kb, prob, ops, self.config)
        else:
            emit_stream(kb, prob, ops, self.config)

    def describe(self) -> str:
        fields = ", ".join(
            f"{f.name}={getattr(self.config, f.name)}" for f in dataclasses.fields(self.config)
        )
        return f"{self.schedule} ({fields})"


def classify(m: int | None) -> str:
    """The shape class of a static M (``small`` for a dynamic M)."""
    if m == 1:
        return "decode"
    if m is None or m <= SMALL_MAX_M:
        return "small"
    return "prefill"


#: Software prefetch distance, in column tiles, for a tiled B.
TILED_PREFETCH = 4


def plan_kernel(prob: Problem, schedule: str = "auto", threads: int | None = None) -> KernelPlan:
    """The kernel for ``prob``: ``schedule`` one of :data:`SCHEDULES`."""
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown schedule '{schedule}' (available: {', '.join(SCHEDULES)})")
    threads = default_threads() if threads is None or threads <= 0 else threads
    if schedule == "auto":
        schedule = classify(prob.m)
    # A tiled B is one sequential stream: prefetching 4 tiles (4 KiB of FP4)
    # ahead measured 1.4x (1 thread) / 1.3x (2) on the MXFP4 MLP's three
    # layers (bench/results/kernels-findings-2026-11-30.md); row-major B
    # reads 32 rows at once and was slower with prefetching, so it has none.
    prefetch = TILED_PREFETCH if prob.b_tiled else 0
    if schedule == "decode":
        return KernelPlan(
            "decode", StreamConfig(mr=1, nv=4, ku=8, threads=threads, prefetch=prefetch)
        )
    if schedule == "small":
        return KernelPlan(
            "small", StreamConfig(mr=SMALL_MR, nv=4, ku=8, threads=threads, prefetch=prefetch)
        )
    return KernelPlan("prefill", PackedConfig(threads=threads))

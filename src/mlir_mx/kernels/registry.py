"""The one registry of matmul kernel schedules.

Each :class:`Schedule` is one entry: its config dataclass (whose field
defaults are the schedule's defaults), its emitter, the shape class it
serves, which problems it supports, its priority in the automatic choice and
a one-line help.  Everything that names schedules iterates
:data:`SCHEDULES`: the automatic choice (:func:`choose`, used by
``mx-matmul-kernels{schedule=auto}`` and ``mlir_mx.Linear``), the pass's and
``mx-runner``'s option values and help, ``mx-bench``'s rows, the
differential tester's compilers and the tests.  Adding a schedule is one
emitter module plus one entry here (``docs/adding-a-kernel.md``).

Every schedule computes the same f32 operations per output element (the
blocked order of :mod:`mlir_mx.kernels.common.problem`), so the choice changes
speed, never results.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from mlir_mx.errors import MXValueError
from mlir_mx.kernels.common.problem import BF16, Problem
from mlir_mx.kernels.dot.kernel import DotConfig, emit_dot, supports_bf16, supports_int
from mlir_mx.kernels.matmul.prefill import PrefillConfig, emit_prefill
from mlir_mx.kernels.matmul.stream import StreamConfig, emit_stream
from mlir_mx.kernels.matmul.stream_config import SWEEP_AHEAD, memory_ahead

__all__ = [
    "SCHEDULES",
    "SHAPE_CLASSES",
    "SMALL_MAX_M",
    "Schedule",
    "check_schedule",
    "choose",
    "find",
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
    """The f32 schedules: B as codes (not dot records), A as codes or f32
    (rounded to bf16 in ``prepare_a`` for bf16 activations)."""
    return prob.b_dot is None and prob.a_quant in (None, BF16)


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
    #: The unit computing the block partials: None for the f32 kernels (FMAs
    #: on widened values), else a dot-unit family of :mod:`.dot` (``int``:
    #: VNNI / AVX512BW, ``bf16``: AVX512_BF16).  Tests and ``mx-bench``
    #: select a schedule by ``(unit, shape_class)`` (:func:`find`).
    unit: str | None = None

    def configure(self, prob: Problem, threads: int) -> Any:
        """The config for ``prob`` on ``threads`` threads: the config's own
        ``adapt``, then, for a config with an ``ahead`` (the decode sweeps of
        a row-major B), :func:`~mlir_mx.kernels.matmul.stream_config.memory_ahead`."""
        cfg = self.config(**{**self.settings, "threads": threads})
        adapt = getattr(cfg, "adapt", None)
        cfg = adapt(prob) if adapt is not None else cfg
        if getattr(cfg, "ahead", None) == 0 and cfg.mr == 1:  # a decode sweep from memory
            cfg = dataclasses.replace(cfg, ahead=memory_ahead(prob))
        return cfg

    def describe(self, cfg) -> str:
        """``name (field=value, ...)`` of a config of this schedule."""
        fields = ", ".join(f"{f.name}={getattr(cfg, f.name)}" for f in dataclasses.fields(cfg))
        return f"{self.name} ({fields})"


def _dot(unit: str, cls: str, help: str, suffix: str = "", priority=10, **settings) -> Schedule:
    """The dot schedule ``<unit>-<cls><suffix>`` (:mod:`.dot`): :class:`DotConfig`
    with ``settings``, above the f32 kernels where it supports the problem."""
    supports = {"int": supports_int, "bf16": supports_bf16}[unit]
    name = f"{unit}-{cls}{suffix}"
    return Schedule(name, help, cls, DotConfig, emit_dot, settings, supports, priority, unit=unit)


#: The ``-ahead`` variants of the decode schedules (issue 51): the same kernel,
#: which on a row-major B (the Runner's ABI) always prefetches the rows of the
#: next sweep (``ahead``, :func:`mlir_mx.kernels.matmul.stream.prefetch_sweep`);
#: the same bits.  Below the plain schedule in the automatic choice (opt-in:
#: ``schedule=decode-ahead`` / ``int-decode-ahead``): the plain schedules
#: prefetch so themselves where B is larger than the L3
#: (:func:`~mlir_mx.kernels.matmul.stream_config.memory_ahead`), and with B
#: in cache the prefetch measured 0.91-1.02x (docs/passes/mx-matmul-kernels.md,
#: "Prefetching the next sweep").
AHEAD = SWEEP_AHEAD


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
        # The dot kernels (kernels/dot/kernel.py): exact block dots on the CPU's dot
        # units, the f32 kernels' bits; B as dot records (mlir_mx.Linear).
        _dot(
            "int",
            "decode",
            "M = 1, FP4/FP6/INT8 pairs: exact integer block dots (VNNI, AVX2), B records streamed",
            mr=1,
            nv=4,
        ),
        _dot(
            "int",
            "small",
            "small M, FP4/FP6/INT8 pairs: exact integer block dots, 4-row groups, L1 K chunks",
            mr=4,
            nv=2,
            kcb=8,
            expand=True,
        ),
        _dot(
            "int",
            "prefill",
            "large M, FP4/FP6/INT8 pairs: exact integer block dots, 6x32 tiles, L2 K chunks",
            mr=6,
            nv=2,
            kcb=128,
            expand=True,
        ),
        _dot(
            "bf16",
            "small",
            "small M, pairs with FP8 or bf16 activations: vdpbf16ps in the f32 kernels' order",
            mr=7,
            nv=2,
            kcb=8,
            expand=True,
        ),
        _dot(
            "bf16",
            "prefill",
            "large M, pairs with FP8 or bf16 activations: vdpbf16ps in the f32 order, 7x32 tiles",
            mr=7,
            nv=2,
            kcb=64,
            expand=True,
        ),
        # Opt-in variants (after the others, so that option lists keep their order).
        Schedule(
            "decode-ahead",
            "decode, also prefetching a row-major B's next sweep of rows (opt-in)",
            "decode",
            StreamConfig,
            emit_stream,
            {"mr": 1, "ahead": AHEAD},
            _f32,
            priority=-1,
        ),
        _dot(
            "int",
            "decode",
            "int-decode, also prefetching a row-major B's next sweep of rows (opt-in)",
            "-ahead",
            9,
            mr=1,
            nv=4,
            ahead=AHEAD,
        ),
    )
}


def schedule_names(auto: bool = True) -> tuple[str, ...]:
    """The names a user may give: ``auto`` (when ``auto``) and every schedule's."""
    return (("auto",) if auto else ()) + tuple(SCHEDULES)


def check_schedule(name, arg: str = "schedule") -> str:
    """``name``, a name of :func:`schedule_names`, else ``MXValueError``
    naming ``arg`` and listing the names (the one check of a user's
    schedule: ``CompileOptions``, ``plan_kernel``, ``mx-runner``)."""
    if name not in schedule_names():
        raise MXValueError(
            f"{arg}: unknown schedule {name!r} (available: {', '.join(schedule_names())})"
        )
    return name


def _best(schedules) -> Schedule | None:
    """The highest-priority schedule of ``schedules`` (None: none)."""
    return max(schedules, key=lambda s: s.priority, default=None)


def find(cls: str, unit: str | None = None) -> Schedule | None:
    """The schedule of ``unit`` (None: the f32 kernels) serving shape class
    ``cls``, the highest-priority one where there are several; None where
    the unit has none there (e.g. no ``bf16`` schedule for ``decode``)."""
    return _best(s for s in SCHEDULES.values() if (s.shape_class, s.unit) == (cls, unit))


def choose(
    prob: Problem, m: int | None = None, *, cls: str | None = None, required: bool = True
) -> Schedule | None:
    """The automatic choice for ``prob``: the highest-priority schedule of the
    shape class ``cls`` (default: that of ``M = m``, default ``prob.m``)
    that supports the problem.  Where none does: ``MXValueError`` when
    ``required``, else None (``mlir_mx.Linear`` then tries another form of
    the problem)."""
    cls = cls or shape_class(prob.m if m is None else m)
    chosen = _best(s for s in SCHEDULES.values() if s.shape_class == cls and s.supports(prob))
    if chosen is None and required:
        raise MXValueError(f"no kernel schedule supports {prob} in shape class {cls}")
    return chosen

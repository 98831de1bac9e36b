"""The kernels a :class:`~mlir_mx.linear.Linear` compiles: one Runner per
problem, schedule, thread count and parallel mode in the process (shared by
every Linear of that kernel), its text generated only
when no cache (in memory or on disk, :class:`~mlir_mx.execution.compiled.GeneratedModule`)
holds the machine code."""

from __future__ import annotations

import functools
import threading
import weakref
from collections import OrderedDict
from pathlib import Path

from mlir import ir

from mlir_mx.dialect import load_dialect
from mlir_mx.execution import CompileOptions, Runner
from mlir_mx.execution.compiled import GeneratedModule, cache_generation
from mlir_mx.execution.options import default_cache_dir
from mlir_mx.host import host_features
from mlir_mx.kernels import Problem, kernel_module, plan_kernel
from mlir_mx.kernels.common import problem as kernel_problem
from mlir_mx.pipelines import kernel_library_pipeline

__all__ = ["kernel_options", "kernel_runner", "kernel_text"]


@functools.lru_cache(maxsize=64)
def kernel_options(threads: int, parallel: str, cache: Path | None) -> CompileOptions:
    """The options of a Linear's kernel (``parallel="tasks"``: run on torch's
    OpenMP team when loaded; ``docs/library.md``, "Threads")."""
    return CompileOptions(kernel_library_pipeline(threads, parallel), cache_dir=cache)


def kernel_text(prob: Problem, schedule: str, threads: int) -> str:
    """The kernel module of ``prob`` as text (``mlir_mx.kernels``)."""
    with ir.Context() as ctx, ir.Location.unknown():
        load_dialect(ctx)
        return str(kernel_module(prob, plan_kernel(prob, schedule, threads)))


def kernel_runner(prob: Problem, schedule: str, threads: int, parallel: str) -> Runner:
    """The Runner of ``prob``'s kernel, one per process for every Linear of
    the same kernel (the 32 experts of a gpt-oss layer share two): making a
    Runner costs 0.2-0.35 ms of key computing, each new Linear's first call
    at a shape class paid it (0.9 against 0.33 ms for a 2880 x 5760 W4A8
    decode call), and a Runner holds nothing of its callers (``bind`` keeps
    a Linear's weights in the bound function).  The key names everything
    the kernel depends on: the plan with every config field (what ``adapt``
    chose for this CPU, e.g. ``host.software_prefetch``), ``task_count``'s
    threshold (read now: tests lower it), the CPU features and the cache
    directory (``MLIR_MX_CPU_FEATURES`` / ``MLIR_MX_CACHE_DIR`` may change),
    and the compile cache's generation (``clear_cache``)."""
    plan = plan_kernel(prob, schedule, threads).describe()
    name = f"linear {prob!r} {plan} tasks>={kernel_problem.MIN_TASK_MACS}"
    return _shared_runner(
        prob,
        schedule,
        threads,
        parallel,
        name,
        default_cache_dir(),
        host_features(),
        cache_generation(),
    )


#: The Runners kept for the next Linear after their last Linear is gone (the
#: most recently asked for): each holds a compiled kernel, about 5.4 MiB of
#: RSS.  A Runner some live Linear holds is found whatever this count
#: (:data:`_LIVE`); with the compile cache's 64 (``execution.compiled``),
#: this bounds the kernels a process keeps after its Linears are deleted
#: (``docs/library.md``, "Kernel memory"; reliability round 4, ``10``).
RUNNERS_KEPT = 32

#: key -> the Runner, while any Linear (or caller) holds it.
_LIVE: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
#: The last :data:`RUNNERS_KEPT` Runners asked for, held.
_RECENT: OrderedDict = OrderedDict()
_LOCK = threading.Lock()


def _shared_runner(*key) -> Runner:
    """The one Runner of ``key`` in this process: a live one, else a new one
    (made outside the lock: making it may generate and compile the kernel)."""
    with _LOCK:
        runner = _LIVE.get(key)
    if runner is None:
        made = _make_runner(*key)
        with _LOCK:
            runner = _LIVE.setdefault(key, made)  # another thread's, if it won
    with _LOCK:
        _RECENT[key] = runner
        _RECENT.move_to_end(key)
        while len(_RECENT) > RUNNERS_KEPT:
            _RECENT.popitem(last=False)
    return runner


def _make_runner(prob, schedule, threads, parallel, name, cache, _features, _generation):
    make = functools.partial(kernel_text, prob, schedule, threads)
    options = kernel_options(threads, parallel, cache)
    return Runner(GeneratedModule(name, make), options=options)

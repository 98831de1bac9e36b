"""Parallel kernels run on a team of threads that divide their work dynamically.

A function lowered with ``parallel="tasks"`` (the ``mx-parallel-tasks`` pass,
:func:`mlir_mx.pipelines.threads_pipeline`) takes one more ``index``
argument, ``claims``: the address of a counter from which every thread that
runs it claims the iterations of its parallel loop (an atomic add each).
:func:`run_tasks` and :class:`TaskCall` zero the counter and run the function
on a team:

* ``"pool"`` (:func:`set_team`): our own small team
  (:mod:`mlir_mx.execution.pool`): the caller and up to ``threads - 1``
  workers; the call returns when every worker that joined has left, so a
  descheduled worker never holds it (it finds the work taken and the job
  closed when it wakes); waiting spins a bounded while, then sleeps.
* ``"openmp"`` (the default, :func:`_initial_team`): the OpenMP runtime already in the process (torch's
  ``libgomp``; also LLVM's ``libomp`` and Intel's ``libiomp5``, which export
  the same ``GOMP_parallel``): ``GOMP_parallel(fn, array, threads, 0)``
  through ctypes (which releases the GIL), ``fn`` the kernel's packed C
  interface and ``array`` its arguments, so every team thread calls the
  kernel; the region ends at OpenMP's barrier, which waits for every thread.
  Where no OpenMP runtime is loaded (a numpy user without torch), our pool
  runs the team instead: tasks-only kernels (the AMX matmul) would otherwise
  run on the caller alone whatever ``threads`` says.
* either team, on a machine with more runnable threads than CPUs
  (:func:`oversubscribed`, looked at every few calls): the calling thread
  alone; a ``Linear`` call then runs the **1-thread kernels** (:func:`call_threads`),
  what a 1-thread process runs, not the team's kernels on one thread.
* neither (no pool on this platform and no OpenMP runtime, or the pool busy
  with another Python thread's call): the calling thread alone, which claims every
  iteration (correct, not parallel).

:func:`regions` counts the team calls (parallel regions) made so far;
:func:`one_region` runs the tasks kernels a block calls as one region.

Why (measured): ``docs/library.md``, "Threads".
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
import time
from contextlib import contextmanager

from mlir_mx.execution import pool as pool_
from mlir_mx.execution import pool_load
from mlir_mx.execution.c_interface import C_INTERFACE
from mlir_mx.passes.kernels.parallel_tasks import TASK_ARGS, TASKS_ATTR

__all__ = [
    "TASKS_ATTR",
    "TASK_ARGS",
    "OpenMP",
    "TaskCall",
    "batch_entry",
    "busy_kernels",
    "call_threads",
    "one_region",
    "openmp_runtime",
    "oversubscribed",
    "parallel_mode",
    "regions",
    "run_tasks",
    "set_busy_kernels",
    "set_parallel",
    "set_team",
    "task_functions",
]

#: Library names (``/proc/self/maps``) that may export ``GOMP_parallel``.
_OPENMP_NAMES = ("libgomp", "libiomp5", "libomp")

class OpenMP:
    """An OpenMP runtime loaded in the process: its ``GOMP_parallel``."""

    def __init__(self, path: str, lib: ctypes.CDLL):
        self.path = path
        self._lib = lib
        self.parallel = lib.GOMP_parallel
        self.parallel.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint, ctypes.c_uint]
        self.parallel.restype = None

    def __repr__(self) -> str:
        return f"OpenMP({self.path!r})"


_lock = threading.Lock()
_found: dict[str, OpenMP] = {}
#: The last scan that found none: ``[len(sys.modules), time.monotonic()]`` then.
_missed: list = [-1, 0.0]


def openmp_runtime() -> OpenMP | None:
    """The OpenMP runtime loaded in this process (torch's ``libgomp``), or None.

    Found in ``/proc/self/maps`` (Linux) by name, opened without loading
    anything new (``RTLD_NOLOAD``), and kept when it exports ``GOMP_parallel``.  Until one is
    found (torch may be imported later), looked for again once a module has
    been imported since the last look or a second has passed (the scan costs
    about 0.3 ms: not on every parallel call of a process without one)."""
    if _found:  # found once, kept: no lock on a call's path
        return next(iter(_found.values()))
    if _missed[0] == len(sys.modules) and time.monotonic() - _missed[1] < 1.0:
        return None
    with _lock:
        if _found:
            return next(iter(_found.values()))
        for path in _mapped_openmp():
            try:
                lib = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_LOCAL)
                lib.GOMP_parallel  # noqa: B018
            except (OSError, AttributeError):
                continue
            _found[path] = OpenMP(path, lib)
            return _found[path]
        _missed[:] = [len(sys.modules), time.monotonic()]
    return None


def _mapped_openmp() -> list[str]:
    try:
        with open("/proc/self/maps") as f:
            lines = f.read().splitlines()
    except OSError:  # not Linux: no runtime found, the async runtime serves
        return []
    paths: list[str] = []
    for line in lines:
        parts = line.split(None, 5)
        if len(parts) == 6:
            path = parts[5].strip()
            base = os.path.basename(path)
            if base.startswith(_OPENMP_NAMES) and ".so" in base and path not in paths:
                paths.append(path)
    return paths


def task_functions(module) -> dict[str, int]:
    """``{name: threads}`` of the functions of a lowered module that
    ``mx-parallel-tasks`` rewrote (their ``mx.tasks``: the most threads with work)."""
    from mlir import ir

    found = {}
    for op in module.body.operations:
        op = op.operation
        if op.name in ("llvm.func", "func.func") and TASKS_ATTR in op.attributes:
            name = ir.StringAttr(op.attributes["sym_name"]).value
            if not name.startswith(C_INTERFACE):  # its wrapper carries it too
                found[name] = ir.IntegerAttr(op.attributes[TASKS_ATTR]).value
    return found


_TEAMS = ("pool", "openmp")


def _initial_team() -> str:
    """The default, "openmp": measured on a quiet 2-vCPU Xeon (docs/library.md,
    "Threads", session 50), our pool's 2-thread decode was 1.45x slower than
    torch's team (its worker meets torch's spinning workers for the core).
    ``MLIR_MX_TEAM=pool|openmp`` sets it for a process (``mx-bench --env-row``)."""
    team = os.environ.get("MLIR_MX_TEAM", "").strip().lower() or "openmp"
    if team not in _TEAMS:
        from mlir_mx.errors import MXValueError

        raise MXValueError(f"MLIR_MX_TEAM: expected one of {', '.join(_TEAMS)}, got {team!r}")
    return team


_team = [_initial_team()]
_regions = [0]


def set_team(team: str) -> str:
    """Which team runs ``parallel="tasks"`` kernels from now on: ``"openmp"``
    (default, or ``MLIR_MX_TEAM``'s: the process's OpenMP team, dynamic division) or ``"pool"``
    (:mod:`mlir_mx.execution.pool`, whose join waits only for the workers
    that joined).  Returns the previous setting."""
    if team not in _TEAMS:
        from mlir_mx.errors import MXValueError

        raise MXValueError(f"team: expected one of {', '.join(_TEAMS)}, got {team!r}")
    previous, _team[0] = _team[0], team
    return previous


def oversubscribed(threads: int) -> bool:
    """Whether a team of ``threads`` would oversubscribe the machine now (more
    runnable threads than CPUs, :mod:`mlir_mx.execution.pool_load`); such calls
    run on the caller alone (with the decode policy, a step on one thread throughout)."""
    return threads > 1 and pool_load.oversubscribed(threads)


_BUSY_KERNELS = ("one", "team")


def _initial_busy_kernels() -> str:
    """``"one"``, or ``MLIR_MX_BUSY_KERNELS``'s (``one`` / ``team``) for a
    process (``mx-bench --env-row``, ``bench/probes/decode_team_matrix.py``)."""
    kernels = os.environ.get("MLIR_MX_BUSY_KERNELS", "").strip().lower() or "one"
    if kernels not in _BUSY_KERNELS:
        from mlir_mx.errors import MXValueError

        raise MXValueError(
            f"MLIR_MX_BUSY_KERNELS: expected one of {', '.join(_BUSY_KERNELS)}, got {kernels!r}"
        )
    return kernels


_busy_kernels = [_initial_busy_kernels()]


def set_busy_kernels(kernels: str) -> str:
    """Which kernels a call asked for on ``n > 1`` threads runs while the
    machine is oversubscribed: ``"one"`` (default) the 1-thread kernels, what a
    1-thread process runs (:func:`call_threads`); ``"team"`` the ``n``-thread
    kernels on the caller alone (session 51; measured 3-5 % slower,
    ``docs/library.md``, "Threads").  Same bits either way.  Returns the previous setting."""
    if kernels not in _BUSY_KERNELS:
        from mlir_mx.errors import MXValueError

        raise MXValueError(
            f"kernels: expected one of {', '.join(_BUSY_KERNELS)}, got {kernels!r}"
        )
    previous, _busy_kernels[0] = _busy_kernels[0], kernels
    return previous


def busy_kernels() -> str:
    """The current :func:`set_busy_kernels` setting."""
    return _busy_kernels[0]


def call_threads(threads: int) -> int:
    """The thread count whose kernels a call asked for on ``threads`` runs now:
    1 while a team of ``threads`` would oversubscribe the machine
    (:func:`oversubscribed`; with :func:`set_busy_kernels` ``"one"``), else
    ``threads``.  ``Linear`` picks its kernel by it at each call; both are
    compiled by ``precompile``.  Every kernel gives the same bits on any
    thread count, so the result does not depend on it."""
    if threads > 1 and _busy_kernels[0] == "one" and pool_load.oversubscribed(threads):
        return 1
    return threads


def regions() -> int:
    """How many parallel regions (calls of a tasks kernel on a team of more
    than one thread) this process has run: for tests and benchmarks."""
    return _regions[0]


_PACKED = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


def _launch(fn: int, array: ctypes.Array, counter: ctypes.c_int64, threads: int, alone=None) -> None:
    """Run the packed C interface ``fn`` on ``array`` (its last slot the claims
    cell, which holds ``counter``'s address) on a team of ``threads``;
    ``alone``: ``fn`` as a ctypes function, if the caller keeps one."""
    counter.value = 0
    if threads > 1:
        _regions[0] += 1
        if _team[0] == "pool":
            p = pool_.pool()
            if p is not None and p.run(fn, ctypes.addressof(array), threads):
                return
        else:
            omp = openmp_runtime()
            if omp is None:  # no OpenMP runtime in the process (no torch): our pool
                p = pool_.pool()
                if p is not None and p.run(fn, ctypes.addressof(array), threads):
                    return
            elif not pool_load.oversubscribed(threads):
                omp.parallel(fn, ctypes.addressof(array), threads, 0)
                return
    (alone or _PACKED(fn))(array)  # the caller claims every task


def _with_claims(array: ctypes.Array, nargs: int, counter: ctypes.c_int64):
    """``array``'s ``nargs`` slots and one more, the claims cell (``counter``'s
    address); returns the new array and the cell (keep both alive)."""
    full = (ctypes.c_void_p * (nargs + TASK_ARGS))()
    ctypes.memmove(full, array, nargs * ctypes.sizeof(ctypes.c_void_p))
    cell = ctypes.c_int64(ctypes.addressof(counter))
    full[nargs] = ctypes.addressof(cell)
    return full, cell


def run_tasks(entry: int, array: ctypes.Array, nargs: int, threads: int) -> None:
    """Call the C interface at ``entry`` (a function rewritten by
    ``mx-parallel-tasks``) with the ``nargs`` argument pointers of ``array``
    and a fresh claims counter, on a team of ``threads`` (:func:`set_team`),
    or on the calling thread alone."""
    counter = ctypes.c_int64(0)
    full, cell = _with_claims(array, nargs, counter)
    _launch(entry, full, counter, threads)
    del cell


class TaskCall:
    """:func:`run_tasks` of one entry on one argument array that stays put
    (a bound function's, ``Runner.bind``): the array with its claims cell and
    the counter are made once; a call copies the array's slots (the bound
    function may repoint them) and launches the team."""

    __slots__ = ("_entry", "_array", "_threads", "_full", "_cell", "_counter", "_bytes", "_alone")

    def __init__(self, entry: int, array: ctypes.Array, threads: int):
        self._entry, self._array, self._threads = entry, array, threads
        self._counter = ctypes.c_int64(0)
        self._full, self._cell = _with_claims(array, len(array), self._counter)
        self._bytes = len(array) * ctypes.sizeof(ctypes.c_void_p)
        self._alone = _PACKED(entry)

    def __call__(self, array: ctypes.Array) -> None:
        if array is not self._array:
            run_tasks(self._entry, array, len(array), self._threads)
            return
        ctypes.memmove(self._full, array, self._bytes)
        held = getattr(_held, "calls", None)
        if held is None:
            _launch(self._entry, self._full, self._counter, self._threads, self._alone)
            return
        if any(c is self for c in held):  # its held call's arguments were just rewritten
            held.clear()
            raise RuntimeError("one_region: a bound function called twice in one region")
        self._counter.value = 0
        held.append(self)


#: Calls one after another: ``list`` = ``[n, fn_0, args_0, ..., fn_n-1, args_n-1]``
#: (packed C interfaces and their argument arrays): every thread of a region
#: runs it, so the region's kernels share one join (:func:`batch_entry`).
_BATCH = """
llvm.func @mx_tasks_batch(%list: !llvm.ptr) {
  %zero = llvm.mlir.constant(0 : i64) : i64
  %one = llvm.mlir.constant(1 : i64) : i64
  %two = llvm.mlir.constant(2 : i64) : i64
  %n = llvm.load %list : !llvm.ptr -> i64
  llvm.br ^loop(%zero : i64)
^loop(%i: i64):
  %more = llvm.icmp "slt" %i, %n : i64
  llvm.cond_br %more, ^call, ^done
^call:
  %j = llvm.mul %i, %two : i64
  %jf = llvm.add %j, %one : i64
  %ja = llvm.add %j, %two : i64
  %pf = llvm.getelementptr %list[%jf] : (!llvm.ptr, i64) -> !llvm.ptr, !llvm.ptr
  %pa = llvm.getelementptr %list[%ja] : (!llvm.ptr, i64) -> !llvm.ptr, !llvm.ptr
  %fn = llvm.load %pf : !llvm.ptr -> !llvm.ptr
  %args = llvm.load %pa : !llvm.ptr -> !llvm.ptr
  llvm.call %fn(%args) : !llvm.ptr, (!llvm.ptr) -> ()
  %i1 = llvm.add %i, %one : i64
  llvm.br ^loop(%i1 : i64)
^done:
  llvm.return
}
"""


def batch_entry() -> int:
    """The packed C interface of :data:`_BATCH` (JIT-compiled once): its one
    slot points to a cell holding the list's address."""
    found = _batch.get("entry")
    if found is None:
        from mlir import ir
        from mlir.execution_engine import ExecutionEngine

        with _lock:
            context = ir.Context()
            with context, ir.Location.unknown():
                module = ir.Module.parse(_BATCH)
                engine = ExecutionEngine(module, opt_level=2)
            found = _batch["entry"] = (engine.raw_lookup("mx_tasks_batch"), context, module, engine)
    return found[0]


_batch: dict = {}
_held = threading.local()


@contextmanager
def one_region():
    """Inside the block, this thread's :class:`TaskCall` calls (a bound
    function's: ``Linear.call_into``) are held, and run at its end as **one**
    parallel region, in order: every thread of the team runs the kernels one
    after another, each claiming tasks from each kernel's counter, so a thread
    done with one kernel goes on to the next without waiting and the region
    has one join (``MXExperts``' decode: the ``k`` experts' projections).

    Only for calls whose results are not read inside the block and do not read
    each other's (a held call has not run yet), each bound function at most
    once: its second call has already rewritten the arguments of the first,
    so it raises RuntimeError (and drops the held calls).  An exception in the
    block drops the held calls.  Nested blocks join the outer one."""
    if getattr(_held, "calls", None) is not None:
        yield
        return
    _held.calls = held = []
    try:
        yield
    finally:
        _held.calls = None
    _launch_held(held)


def _launch_held(held: list) -> None:
    calls, held[:] = list(held), []
    if len(calls) == 1:
        c = calls[0]
        _launch(c._entry, c._full, c._counter, c._threads)
    elif calls:
        slots = [len(calls)]
        for c in calls:
            slots += [c._entry, ctypes.addressof(c._full)]
        listing = (ctypes.c_void_p * len(slots))(*slots)
        cell = ctypes.c_void_p(ctypes.addressof(listing))
        array = (ctypes.c_void_p * 1)(ctypes.addressof(cell))
        threads = max(c._threads for c in calls)
        _launch(batch_entry(), array, ctypes.c_int64(0), threads)


_MODES = ("auto", "async", "tasks")
_mode = "auto"


def set_parallel(mode: str) -> str:
    """Set how ``mlir_mx.Linear`` compiles its parallel kernels from now on
    (kernels already compiled keep theirs): ``"auto"`` (default: ``"tasks"``
    when an OpenMP runtime is in the process, else ``"async"``), ``"async"``
    or ``"tasks"``.  Returns the previous setting (for benchmarks and tests)."""
    global _mode
    if mode not in _MODES:
        from mlir_mx.errors import MXValueError

        raise MXValueError(f"parallel: expected one of {', '.join(_MODES)}, got {mode!r}")
    previous, _mode = _mode, mode
    return previous


def parallel_mode(threads: int) -> str:
    """The ``parallel`` lowering for a kernel on ``threads`` threads: ``"tasks"``
    (the process's OpenMP team runs it) when :func:`set_parallel` says so, or
    on ``"auto"`` when ``threads > 1`` and :func:`openmp_runtime` finds one;
    else ``"async"``."""
    if _mode != "auto":
        return _mode
    return "tasks" if threads > 1 and openmp_runtime() is not None else "async"

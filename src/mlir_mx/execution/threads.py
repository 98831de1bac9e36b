"""Parallel kernels run on the OpenMP team already in the process (torch's).

A function lowered with ``parallel="tasks"`` (the ``mx-parallel-tasks`` pass,
:func:`mlir_mx.pipelines.threads_pipeline`) takes two more ``index``
arguments, ``thread`` and ``team``, and runs the iterations ``thread, thread +
team, ...`` of its parallel loop.  :func:`run_tasks` calls it once on every
thread of a team:

* with an OpenMP runtime in the process (torch's ``libgomp``; also LLVM's
  ``libomp`` and Intel's ``libiomp5``, which export the same ``GOMP_parallel``):
  ``GOMP_parallel(trampoline, data, threads, 0)`` through ctypes (which
  releases the GIL).  The calling thread is the team's thread 0, and the
  workers are the ones torch's own parallel regions use: after a torch op they
  still spin, waiting for work, and take ours at once; nothing else competes
  for the cores.  The trampoline, a few lines of LLVM IR compiled once, asks
  ``omp_get_thread_num``/``omp_get_num_threads`` (their addresses in
  ``data``: nothing is resolved by name), copies the call's argument array,
  appends its two cells and calls the function's C interface.
* without one: the tasks one after another on the calling thread (correct,
  not parallel); :func:`openmp_runtime` tells callers to choose the async
  runtime instead (``mlir_mx.Linear`` does).

Why (measured): ``docs/library.md``, "Threads".
"""

from __future__ import annotations

import ctypes
import os
import threading

from mlir_mx.execution.c_interface import C_INTERFACE
from mlir_mx.passes.kernels.parallel_tasks import TASKS_ATTR

__all__ = [
    "TASKS_ATTR",
    "OpenMP",
    "TaskCall",
    "openmp_runtime",
    "parallel_mode",
    "run_tasks",
    "set_parallel",
    "task_functions",
]

#: Library names (``/proc/self/maps``) that may export ``GOMP_parallel``.
_OPENMP_NAMES = ("libgomp", "libiomp5", "libomp")

_TRAMPOLINE = """
llvm.func @mx_tasks_trampoline(%data: !llvm.ptr) {
  %fn = llvm.load %data : !llvm.ptr -> !llvm.ptr
  %p1 = llvm.getelementptr %data[1] : (!llvm.ptr) -> !llvm.ptr, !llvm.ptr
  %args = llvm.load %p1 : !llvm.ptr -> !llvm.ptr
  %p2 = llvm.getelementptr %data[2] : (!llvm.ptr) -> !llvm.ptr, i64
  %n = llvm.load %p2 : !llvm.ptr -> i64
  %p3 = llvm.getelementptr %data[3] : (!llvm.ptr) -> !llvm.ptr, !llvm.ptr
  %get_thread = llvm.load %p3 : !llvm.ptr -> !llvm.ptr
  %p4 = llvm.getelementptr %data[4] : (!llvm.ptr) -> !llvm.ptr, !llvm.ptr
  %get_team = llvm.load %p4 : !llvm.ptr -> !llvm.ptr
  %t32 = llvm.call %get_thread() : !llvm.ptr, () -> i32
  %team32 = llvm.call %get_team() : !llvm.ptr, () -> i32
  %t = llvm.sext %t32 : i32 to i64
  %team = llvm.sext %team32 : i32 to i64
  %one = llvm.mlir.constant(1 : i64) : i64
  %two = llvm.mlir.constant(2 : i64) : i64
  %cells = llvm.alloca %two x i64 : (i64) -> !llvm.ptr
  llvm.store %t, %cells : i64, !llvm.ptr
  %team_cell = llvm.getelementptr %cells[1] : (!llvm.ptr) -> !llvm.ptr, i64
  llvm.store %team, %team_cell : i64, !llvm.ptr
  %slots = llvm.add %n, %two : i64
  %array = llvm.alloca %slots x !llvm.ptr : (i64) -> !llvm.ptr
  %eight = llvm.mlir.constant(8 : i64) : i64
  %bytes = llvm.mul %n, %eight : i64
  "llvm.intr.memcpy"(%array, %args, %bytes) <{isVolatile = false}>
      : (!llvm.ptr, !llvm.ptr, i64) -> ()
  %s0 = llvm.getelementptr %array[%n] : (!llvm.ptr, i64) -> !llvm.ptr, !llvm.ptr
  llvm.store %cells, %s0 : !llvm.ptr, !llvm.ptr
  %n1 = llvm.add %n, %one : i64
  %s1 = llvm.getelementptr %array[%n1] : (!llvm.ptr, i64) -> !llvm.ptr, !llvm.ptr
  llvm.store %team_cell, %s1 : !llvm.ptr, !llvm.ptr
  llvm.call %fn(%array) : !llvm.ptr, (!llvm.ptr) -> ()
  llvm.return
}
"""


class _Data(ctypes.Structure):
    """What the trampoline reads: the C interface, its argument array (without
    the two task cells), the array's length and the two OpenMP queries."""

    _fields_ = [
        ("fn", ctypes.c_void_p),
        ("args", ctypes.c_void_p),
        ("nargs", ctypes.c_int64),
        ("get_thread", ctypes.c_void_p),
        ("get_team", ctypes.c_void_p),
    ]


class OpenMP:
    """An OpenMP runtime loaded in the process: its ``GOMP_parallel`` and the
    two queries, and the trampoline (compiled once)."""

    def __init__(self, path: str, lib: ctypes.CDLL):
        self.path = path
        self._lib = lib
        self.parallel = lib.GOMP_parallel
        self.parallel.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint, ctypes.c_uint]
        self.parallel.restype = None
        self.get_thread = ctypes.cast(lib.omp_get_thread_num, ctypes.c_void_p).value
        self.get_team = ctypes.cast(lib.omp_get_num_threads, ctypes.c_void_p).value
        self._engine, self.trampoline = _compile_trampoline()

    def __repr__(self) -> str:
        return f"OpenMP({self.path!r})"


def _compile_trampoline():
    from mlir import ir
    from mlir.execution_engine import ExecutionEngine

    context = ir.Context()
    with context, ir.Location.unknown():
        module = ir.Module.parse(_TRAMPOLINE)
        engine = ExecutionEngine(module, opt_level=2)
    # raw_lookup gives the packed wrapper (``void (void **)``), as for every function.
    address = engine.raw_lookup("mx_tasks_trampoline")
    if not address:  # pragma: no cover - the JIT always emits it
        raise RuntimeError("the JIT did not produce the tasks trampoline")
    return (context, module, engine), address


_lock = threading.Lock()
_found: dict[str, OpenMP] = {}


def openmp_runtime() -> OpenMP | None:
    """The OpenMP runtime loaded in this process (torch's ``libgomp``), or None.

    Found in ``/proc/self/maps`` (Linux) by name, opened without loading
    anything new (``RTLD_NOLOAD``), and kept when it exports ``GOMP_parallel``,
    ``omp_get_thread_num`` and ``omp_get_num_threads``.  Asked again on each
    call until one is found (torch may be imported later)."""
    with _lock:
        if _found:
            return next(iter(_found.values()))
        for path in _mapped_openmp():
            try:
                lib = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_LOCAL)
                lib.GOMP_parallel, lib.omp_get_thread_num, lib.omp_get_num_threads  # noqa: B018
            except (OSError, AttributeError):
                continue
            _found[path] = OpenMP(path, lib)
            return _found[path]
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


def run_tasks(entry: int, array: ctypes.Array, nargs: int, threads: int) -> None:
    """Call the C interface at ``entry`` (a function rewritten by
    ``mx-parallel-tasks``) once per thread of a team of ``threads``, each with
    the ``nargs`` argument pointers of ``array`` and its own ``(thread, team)``
    cells: on the process's OpenMP team when there is one, else in turn on the
    calling thread."""
    omp = openmp_runtime() if threads > 1 else None
    if omp is not None:
        data = _Data(entry, ctypes.addressof(array), nargs, omp.get_thread, omp.get_team)
        # The engine's lookup gives the trampoline's packed form: its argument
        # is an array whose slot 0 points to the trampoline's argument.
        cell = ctypes.c_void_p(ctypes.addressof(data))
        slots = (ctypes.c_void_p * 1)(ctypes.addressof(cell))
        omp.parallel(omp.trampoline, ctypes.addressof(slots), threads, 0)
        return
    fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(entry)
    full = (ctypes.c_void_p * (nargs + 2))()
    ctypes.memmove(full, array, nargs * ctypes.sizeof(ctypes.c_void_p))
    team = ctypes.c_int64(threads)
    full[nargs + 1] = ctypes.addressof(team)
    for t in range(threads):
        cell = ctypes.c_int64(t)
        full[nargs] = ctypes.addressof(cell)
        fn(full)


class TaskCall:
    """:func:`run_tasks` of one entry on one argument array that stays put
    (a bound function's, ``Runner.bind``): the OpenMP call's data is made on
    the first call that finds the runtime and kept, so a call is one
    ``GOMP_parallel``: 15.1 -> 12.5 and 12.0 -> 7.4 us per
    ``call_unchecked`` of a 1 x 256 x 256 ``MXLinear`` kernel in two runs
    (W4A8, 2 threads, medians of 7 x 20,000 calls, the two paths alternating
    in one process).  Until a runtime is found, and for any other array,
    each call is :func:`run_tasks`."""

    __slots__ = ("_entry", "_array", "_threads", "_omp", "_slots", "_keep")

    def __init__(self, entry: int, array: ctypes.Array, threads: int):
        self._entry, self._array, self._threads = entry, array, threads
        self._omp: OpenMP | None = None
        self._slots = 0
        self._keep: tuple = ()

    def __call__(self, array: ctypes.Array) -> None:
        if self._omp is None or array is not self._array:
            omp = openmp_runtime() if self._threads > 1 else None
            if omp is None or array is not self._array:
                run_tasks(self._entry, array, len(array), self._threads)
                return
            data = _Data(self._entry, ctypes.addressof(array), len(array), omp.get_thread, omp.get_team)
            cell = ctypes.c_void_p(ctypes.addressof(data))
            slots = (ctypes.c_void_p * 1)(ctypes.addressof(cell))
            self._keep, self._slots, self._omp = (data, cell, slots), ctypes.addressof(slots), omp
        self._omp.parallel(self._omp.trampoline, self._slots, self._threads, 0)


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

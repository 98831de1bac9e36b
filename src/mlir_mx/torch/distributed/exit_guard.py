"""At exit, gloo's worker threads done with their last collective before Python
finalizes (issue 56: the rare ``terminate called without an active exception``).

What aborted a rank now and then (sessions 53-55; the core's backtrace in
``docs/distributed.md``, "The abort at exit"): a gloo ``ProcessGroup``'s
worker thread (``pt_gloo_runloop``) drops its reference to a finished
collective's ``Work`` only after it has woken the caller.  When the caller's
Python reference to a tensor of that collective is gone first, torch hands
the tensor's Python object to the C++ tensor, so the worker's drop needs the
GIL.  A rank pinned to one CPU (``affinity.pin_rank``), beside a busy process,
can run from the wake-up to the end of the script without the worker getting
the CPU back; if it gets it only once the interpreter finalizes, taking the
GIL ends the thread (``PyThread_exit_thread``), whose unwinding through the
``Work``'s ``noexcept`` destructor calls ``std::terminate``: SIGABRT.
FIXME(upstream): torch's gloo workers can outlive the interpreter's
finalization holding Python objects (pytorch/pytorch#190489, open; an
at-exit ``destroy_process_group`` was proposed in pytorch/pytorch#179291 and
abandoned).  ``destroy_process_group`` does not help while anything still
holds the group (a split model's ``DeviceMesh``): its workers live on.

:func:`guard_exit` registers, once a process, an ``atexit`` function (it runs
before the interpreter finalizes) that waits, at most :data:`SETTLE_S`
seconds, until every gloo worker thread of the process sleeps twice in a row
:data:`SAMPLE_S` apart with no context switch between (:func:`settle_gloo_workers`):
a worker sleeps only once it has dropped its ``Work`` (waiting for the next),
or inside a collective that never ends (nothing to wait for).  The wait
releases the GIL and the CPU, so the worker runs; one found ``SCHED_IDLE`` or
``SCHED_BATCH`` is put back to ``SCHED_OTHER`` (behind another process on its
CPU it could wait out the whole bound).  The tensor parallel entry points call
it (:func:`.launch.tensor_mesh`, :func:`.tensor_parallel.parallelize`,
:func:`.experts.shard_experts`), and so do the test harness's ranks
(``mlir_mx_testing.distributed``).  Without gloo workers it costs one look
at ``/proc/self/task`` at exit.
"""

from __future__ import annotations

import atexit
import os
import time

from .affinity import threads_named

__all__ = ["GLOO_WORKER", "SAMPLE_S", "SETTLE_S", "guard_exit", "settle_gloo_workers"]

#: The name (``comm``) torch gives a gloo process group's worker threads.
GLOO_WORKER = "pt_gloo_runloop"
#: The longest the exit waits for the workers (a worker busy in a collective
#: that does not end: the exit goes on after it).
SETTLE_S = 2.0
#: Two looks at the workers this many seconds apart, neither switched in
#: between, make them settled.
SAMPLE_S = 0.002

_guarded: list = [None]  # the process that registered the atexit function


def _look(tid: int) -> tuple[str, str, str] | None:
    """Thread ``tid``'s state letter and its voluntary and involuntary context
    switch counts (``/proc/self/task/<tid>/status``); None when it ended."""
    try:
        with open(f"/proc/self/task/{tid}/status") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    fields = dict(line.split(":", 1) for line in lines if ":" in line)
    try:
        return (fields["State"].split()[0], fields["voluntary_ctxt_switches"].strip(),
                fields["nonvoluntary_ctxt_switches"].strip())  # fmt: skip
    except (KeyError, IndexError):
        return None


def _runnable(tids: list[int]) -> None:
    """Any of ``tids`` running ``SCHED_IDLE`` / ``SCHED_BATCH``: ``SCHED_OTHER``."""
    slow = {getattr(os, "SCHED_IDLE", None), getattr(os, "SCHED_BATCH", None)} - {None}
    for tid in tids:
        try:
            if os.sched_getscheduler(tid) in slow:
                os.sched_setscheduler(tid, os.SCHED_OTHER, os.sched_param(0))
        except OSError:  # ended meanwhile, or not allowed: waited for as it is
            pass


def settle_gloo_workers(timeout: float = SETTLE_S, sample: float = SAMPLE_S) -> bool:
    """Wait until every gloo worker thread of this process (:data:`GLOO_WORKER`)
    sleeps in two looks ``sample`` seconds apart without a context switch
    between (the module docstring); True when they did (or there are none),
    False after ``timeout`` seconds.  Sleeps between looks (the GIL and the
    CPU free for the workers)."""
    deadline = time.monotonic() + timeout
    before = None
    while True:
        tids = threads_named(GLOO_WORKER)
        if not tids:
            return True
        _runnable(tids)
        now = {tid: seen for tid in tids if (seen := _look(tid)) is not None}
        if all(seen[0] == "S" for seen in now.values()):
            if now == before:
                return True
            before = now
        else:
            before = None
        if time.monotonic() >= deadline:
            return False
        time.sleep(sample)


def _at_exit() -> None:
    if _guarded[0] == os.getpid():  # not in a forked child that never joined a group
        try:
            settle_gloo_workers()
        except (Exception, KeyboardInterrupt):  # noqa: BLE001 (Ctrl-C in the wait: exit as it was)
            pass


def guard_exit() -> None:
    """Register :func:`settle_gloo_workers` to run at this process's exit
    (``atexit``: before the interpreter finalizes), once a process."""
    if _guarded[0] != os.getpid():
        if _guarded[0] is None:
            atexit.register(_at_exit)
        _guarded[0] = os.getpid()

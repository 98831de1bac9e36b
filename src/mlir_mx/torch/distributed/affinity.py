"""Each rank's threads on its own CPUs, for ranks that share one machine.

Without it the scheduler moves a rank's threads (its compute thread, gloo's
I/O thread and worker threads) over every CPU, so a rank's gloo thread that
wakes for a message often lands on the CPU where the other rank computes, and
waits there for a time slice: on the 2-CPU machine (loaded) a decode-sized
``all_to_all_single`` between two ranks that compute took about 1.9 ms a
round that way against 0.29 ms with each rank on its own CPU
(``bench/probes/gloo_latency.py``; ``docs/distributed.md``, "Where the time
goes (session 53)").  :func:`pin_rank` puts every thread of this process
on this rank's share of the CPUs; threads made later inherit it.
"""

from __future__ import annotations

import os
import weakref

from mlir_mx.errors import MXValueError

__all__ = [
    "IDLE_BACKOFF_MAX_S",
    "IDLE_BACKOFF_S",
    "IDLE_GLOO_IO",
    "done_gloo_io",
    "idle_gloo_io",
    "normal_gloo_io",
    "pin_rank",
    "pinned_cpus",
    "rank_cpus",
    "threads_named",
]

_pinned: list = [None]  # the CPUs pin_rank pinned this process to, in this process


def rank_cpus(local_rank: int, local_world: int, cpus: set[int] | None = None) -> set[int] | None:
    """This rank's share of ``cpus`` (default: the CPUs this process may run
    on), in order, ``len(cpus) // local_world`` each (the remainder to no
    rank); None when there are fewer CPUs than ranks (nothing to pin)."""
    if local_world < 1 or not 0 <= local_rank < local_world:
        raise MXValueError(f"local_rank: expected 0 <= local_rank < {local_world}, got {local_rank}")
    if cpus is None:
        cpus = os.sched_getaffinity(0)
    ordered = sorted(cpus)
    share = len(ordered) // local_world
    if share < 1:
        return None
    return set(ordered[local_rank * share : (local_rank + 1) * share])


def pin_rank(local_rank: int, local_world: int) -> set[int] | None:
    """Every thread of this process (``/proc/self/task``) on
    :func:`rank_cpus`; the CPUs pinned to, or None when nothing was pinned
    (fewer CPUs than ranks, or no ``sched_setaffinity``)."""
    mine = rank_cpus(local_rank, local_world)
    if mine is None or not hasattr(os, "sched_setaffinity"):
        return None
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), mine)
        except OSError:  # a thread that ended meanwhile
            pass
    _pinned[0] = (os.getpid(), frozenset(mine))
    return mine


def pinned_cpus() -> frozenset[int] | None:
    """The CPUs :func:`pin_rank` pinned this process to (None: not pinned, or
    pinned in a parent before a fork).  A pinned rank's decode collectives
    are polled whatever the machine's load (``decode_collectives.POLL_S``):
    its poller yields only its own CPUs."""
    pid_cpus = _pinned[0]
    if pid_cpus is None or pid_cpus[0] != os.getpid():
        return None
    return pid_cpus[1]


#: A pinned rank's gloo TCP I/O threads (``gloo_tcp_loop``) run ``SCHED_IDLE``
#: while its decode collectives are polled (:func:`idle_gloo_io`);
#: ``MLIR_MX_TP_IDLE_IO=0``: never.
IDLE_GLOO_IO = os.environ.get("MLIR_MX_TP_IDLE_IO", "1").strip() != "0"
#: After a collective the I/O thread did not finish within
#: ``decode_collectives.IDLE_LATE_S`` (another process on the CPU starves a
#: ``SCHED_IDLE`` thread), it runs ``SCHED_OTHER`` for this many seconds,
#: twice as long after each late collective in a row, at most
#: :data:`IDLE_BACKOFF_MAX_S`; a collective done in time resets it.
IDLE_BACKOFF_S = 0.005
IDLE_BACKOFF_MAX_S = 0.5
#: The name (``comm``) torch's gloo transport gives its TCP I/O threads.
GLOO_IO = "gloo_tcp_loop"
#: The I/O threads found (``tids``) in process ``pid`` for the group ``group``
#: (a weak reference); ``stale``: one of them has ended since.
_io: dict = {"pid": None, "group": None, "tids": [], "stale": False, "idle": False,
             "until": 0.0, "backoff": IDLE_BACKOFF_S}  # fmt: skip


def threads_named(name: str) -> list[int]:
    """The ids of this process's threads named ``name`` (``/proc/self/task/*/comm``;
    none where there is no ``/proc``)."""
    tids = []
    try:
        listed = os.listdir("/proc/self/task")
    except OSError:
        return tids
    for tid in listed:
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                if f.read().strip() == name:
                    tids.append(int(tid))
        except OSError:  # a thread that ended meanwhile
            pass
    return tids


def _set_io(idle: bool) -> None:
    policy = os.SCHED_IDLE if idle else os.SCHED_OTHER
    for tid in _io["tids"]:
        try:
            os.sched_setscheduler(tid, policy, os.sched_param(0))
        except OSError:  # a thread that ended meanwhile: look again next time
            _io["stale"] = True  # (its id reused meanwhile: not checked, 5 us a look)
    _io["idle"] = idle


def _same_group(group) -> bool:
    """Whether ``group`` is the last look's (``None``: the default group, kept
    as ``None``; a dead reference matches nothing, so a destroyed group's
    threads are looked up again)."""
    ref = _io["group"]
    if ref is None:
        return group is None and _io.get("default", False)
    target = ref()
    return target is not None and target is group


def _found(group) -> None:
    """The I/O threads looked up again: in a new process, for another group
    (a group made or rebuilt since has threads of its own), or after one of
    those found ended."""
    try:
        ref = weakref.ref(group) if group is not None else None
    except TypeError:  # not weakly referable: looked up every time
        ref = None
    _io.update(pid=os.getpid(), group=ref, default=group is None, tids=threads_named(GLOO_IO),
               stale=False)  # fmt: skip


def idle_gloo_io(now: float, group=None) -> bool:
    """Before a pinned rank's (:func:`pinned_cpus`) decode collective on
    ``group`` (its ``ProcessGroup``): gloo's TCP I/O threads ``SCHED_IDLE``
    (looked up again for another group than the last call's, in a new
    process, or after one of them ended; every I/O thread of the process, since
    none names its group), unless
    :func:`normal_gloo_io` backed off less than :data:`IDLE_BACKOFF_S` before
    ``now`` (``time.perf_counter()``); whether they are idle.  On one CPU with
    the rank's own thread and gloo's worker, an I/O thread woken while the
    worker sends would otherwise preempt it and spin on the pair's lock the
    worker holds until the kernel's next tick (2-5 ms); ``SCHED_IDLE``, it
    neither preempts the worker nor runs before it (``docs/distributed.md``,
    "The tails removed (session 54)").  False when not pinned, or
    :data:`IDLE_GLOO_IO` off."""
    if not IDLE_GLOO_IO or pinned_cpus() is None or not hasattr(os, "SCHED_IDLE"):
        return False
    if _io["pid"] != os.getpid():
        _io.update(idle=False, until=0.0, backoff=IDLE_BACKOFF_S)
        _found(group)
    elif _io["stale"] or not _same_group(group):
        _found(group)
        _io["idle"] = None  # the new ones set whatever the old ones were
    want = now >= _io["until"]
    if want != _io["idle"]:
        _set_io(want)
    return want


def done_gloo_io() -> None:
    """A polled collective done in time: the I/O threads back to
    ``SCHED_OTHER`` (collectives outside the polled decode path, DTensor's
    redistributions, barriers, a large all-reduce, run with them as torch
    made them) and the back-off reset to :data:`IDLE_BACKOFF_S`."""
    _io["backoff"] = IDLE_BACKOFF_S
    if _io.get("idle"):
        _set_io(False)


def normal_gloo_io(now: float) -> None:
    """A collective the idle I/O thread was late for: it runs ``SCHED_OTHER``
    from ``now`` for the back-off (:data:`IDLE_BACKOFF_S`, doubled for each
    late one in a row; a ``SCHED_IDLE`` thread gets the CPU only when nothing
    else wants it: another process on the rank's CPU starves it)."""
    _io["until"] = now + _io["backoff"]
    _io["backoff"] = min(2 * _io["backoff"], IDLE_BACKOFF_MAX_S)
    if _io["idle"]:
        _set_io(False)

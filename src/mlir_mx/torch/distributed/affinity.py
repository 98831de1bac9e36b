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

from mlir_mx.errors import MXValueError

__all__ = ["IDLE_GLOO_IO", "idle_gloo_io", "pin_rank", "pinned_cpus", "rank_cpus"]

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


#: A pinned rank's gloo TCP I/O thread (``gloo_tcp_loop``) runs
#: ``SCHED_IDLE`` (:func:`idle_gloo_io`); ``MLIR_MX_TP_IDLE_IO=0``: not.
IDLE_GLOO_IO = os.environ.get("MLIR_MX_TP_IDLE_IO", "1").strip() != "0"
_idled: list = [None]  # the pid whose gloo I/O threads idle_gloo_io set


def idle_gloo_io() -> int:
    """In a pinned rank (:func:`pinned_cpus`), gloo's TCP I/O threads
    (``gloo_tcp_loop``) ``SCHED_IDLE``, once a process (at its first decode
    collective, ``decode_collectives``: made with the process group); the
    number set.  On one CPU with the rank's own thread and gloo's worker, the
    I/O thread woken while the worker sends would otherwise preempt it and spin
    on the pair's lock the worker holds until the kernel's next tick (2-5 ms);
    ``SCHED_IDLE``, it neither preempts the worker nor runs before it
    (``docs/distributed.md``, "The tails removed (session 54)").  A rank's own
    thread polls a collective for at most ``decode_collectives.POLL_S``, then
    sleeps, so the I/O thread is not starved.  0 when not pinned,
    :data:`IDLE_GLOO_IO` off, or done already in this process."""
    pid = os.getpid()
    if not IDLE_GLOO_IO or _idled[0] == pid or pinned_cpus() is None:
        return 0
    _idled[0] = pid
    if not hasattr(os, "SCHED_IDLE"):
        return 0
    done = 0
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                if f.read().strip() != "gloo_tcp_loop":
                    continue
            os.sched_setscheduler(int(tid), os.SCHED_IDLE, os.sched_param(0))
            done += 1
        except OSError:  # a thread that ended meanwhile
            pass
    return done

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

__all__ = ["pin_rank", "pinned_cpus", "rank_cpus"]

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

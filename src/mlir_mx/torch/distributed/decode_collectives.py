"""How tensor parallel's decode step makes a rank's local output ``Replicate``
(and expert parallel's decode step combines its slots: ``experts.py``).

A decode step makes two collectives a layer, each of a row of a few KiB, so a
message round's latency is their cost, not their bytes
(``docs/distributed.md``, "Where the time goes"):

* :func:`replicated`: ``Partial`` summed, ``Shard(-1)`` concatenated, in rank
  order, by one ``dist.all_to_all_single`` round (``"exchange"``, the
  default) or torch's ``dist.all_reduce`` / ``dist.all_gather``
  (``"torch"``, :func:`set_decode_collective`);
* each collective waited for by polling while the machine has a core free,
  or always in a rank pinned to its own CPUs (:data:`POLL_S`).
"""

from __future__ import annotations

import os
import time

import torch
import torch.distributed as dist
from torch.distributed.tensor import Partial

from mlir_mx.errors import MXValueError
from mlir_mx.execution import pool_load

from .affinity import done_gloo_io, idle_gloo_io, normal_gloo_io, pinned_cpus

__all__ = [
    "COLLECTIVES",
    "EXCHANGE_BYTES",
    "IDLE_LATE_S",
    "POLL_S",
    "replicated",
    "set_decode_collective",
]


#: How the decode step's collectives are made (:func:`set_decode_collective`).
COLLECTIVES = ("exchange", "torch")
_collective = ["exchange"]

#: Past 2 ranks the exchange's all-reduce sends ``N - 1`` copies of a rank's
#: output where the ring sends ``2 (N - 1) / N``: it is used for partial sums
#: up to this many bytes (a decode step's rows; a long prompt's prefill takes
#: the ring).  A gather sends the same bytes either way: always exchanged.
EXCHANGE_BYTES = 1 << 16


def set_decode_collective(kind: str) -> str:
    """How a local output is made ``Replicate`` on the decode hot path:
    ``"exchange"`` (default): one ``dist.all_to_all_single`` in which every
    rank sends its whole output to every rank, then each rank sums the parts
    (``Partial``) or concatenates them (``Shard(-1)``) in rank order: one
    message round (past 2 ranks, partial sums up to :data:`EXCHANGE_BYTES`);
    ``"torch"``: ``dist.all_reduce`` / ``dist.all_gather``
    (gloo's ring: 2 (N - 1) rounds for the all-reduce, N - 1 for the gather).
    A decode row is a few KiB, so a round's latency is the cost, not its bytes
    (``docs/distributed.md``, "Where the time goes").  Both give every rank the
    same bits; with 2 ranks they are the same bits (``a + b == b + a``).
    Returns the previous setting."""
    if kind not in COLLECTIVES:
        raise MXValueError(f"kind: expected one of {', '.join(COLLECTIVES)}, got {kind!r}")
    previous, _collective[0] = _collective[0], kind
    return previous


def replicated(y: torch.Tensor, made, mesh) -> torch.Tensor:
    """What ``DTensor.redistribute(Replicate())`` computes, with the collective
    called directly on the mesh's group (the decode step's hot path: no
    DTensor made, ~0.1 ms of Python a call less): ``Partial`` summed,
    ``Shard(-1)`` concatenated, in rank order (:func:`set_decode_collective`).
    ``mesh``: a 1-D ``DeviceMesh``, or a ``ProcessGroup`` (expert parallel's)."""
    if isinstance(mesh, dist.ProcessGroup):
        group, world = mesh, dist.get_world_size(mesh)
    else:
        group, world = mesh.get_group(), mesh.size()
    y = y.contiguous()
    gather = not isinstance(made, Partial)  # the same bytes as the ring's all-gather
    small = gather or world == 2 or y.numel() * y.element_size() <= EXCHANGE_BYTES
    if _collective[0] == "exchange" and small:
        send = y.unsqueeze(0).expand(world, *y.shape).contiguous()
        parts = torch.empty_like(send)
        _polled(_all_to_all, parts, send, group=group)
        if not gather:
            out = parts[0]
            for part in parts[1:]:
                out = out + part  # rank order: the same bits on every rank
            return out
        return torch.cat(parts.unbind(0), dim=-1)
    if not gather:
        _polled(dist.all_reduce, y, group=group)  # in place: y is this call's own new output
        return y
    parts = [torch.empty_like(y) for _ in range(world)]
    _polled(dist.all_gather, parts, y, group=group)
    return torch.cat(parts, dim=-1)


def _all_to_all(parts, send, group, async_op: bool = False):
    """``dist.all_to_all_single(parts, send, group=group)`` of equal splits,
    called on the group itself (``ProcessGroup.alltoall_base``, the call that
    wrapper makes after its checks, which these tensors pass by construction:
    ``send`` and ``parts`` contiguous, of one dtype, the group this rank's).
    The wrapper costs about 10 us a call more back to back (25 against 14 us
    from the call to its return, 2 ranks); a token makes 18
    (``docs/distributed.md``, "Where the time goes (session 54)")."""
    work = group.alltoall_base(parts, send, [], [], dist.AllToAllOptions())
    if async_op:
        return work
    work.wait()
    return None


#: A decode collective is waited for by polling its ``Work`` (yielding the core
#: between looks) for at most this many seconds, then by sleeping as torch
#: waits; polled only while the machine has a core free for the poller
#: (``execution.pool_load.oversubscribed(1)``), else waited for as torch does,
#: except in a rank pinned to its own CPUs (``affinity.pinned_cpus``: under
#: ``torchrun``), which always polls: its poller yields only its own CPUs, and
#: a sleeping waiter pays a wake-up per message round (``docs/distributed.md``,
#: "Where the time goes (session 53)").  0: never polled.
#: (``MLIR_MX_LOAD_CHECK=0`` turns the check off, so every wait polls.)
POLL_S = 0.002


#: A polled collective not done this many seconds after its start, with the
#: rank's gloo I/O thread ``SCHED_IDLE`` (``affinity.idle_gloo_io``): the
#: thread runs ``SCHED_OTHER`` again (``affinity.normal_gloo_io``; another
#: process on the CPU starves an idle thread).  A decode collective takes
#: 150-350 us (``docs/distributed.md``).
IDLE_LATE_S = 0.001


def _polled(collective, *args, group) -> None:
    """``collective(*args, group=group)``, waited for by polling (:data:`POLL_S`):
    between the collectives of a decode step a rank computes for about a
    millisecond, and a sleeping waiter pays a thread wake-up for each of gloo's
    message rounds (``docs/distributed.md``, "Where the time goes")."""
    if POLL_S <= 0 or (pinned_cpus() is None and pool_load.oversubscribed(1)):
        collective(*args, group=group)
        return
    start = time.perf_counter()
    idle = idle_gloo_io(start, group)  # a pinned rank's gloo I/O thread SCHED_IDLE while polled
    work = collective(*args, group=group, async_op=True)
    end, late = start + POLL_S, start + IDLE_LATE_S
    while not work.is_completed() and (now := time.perf_counter()) < end:
        if idle and now > late:  # starved by another process on the CPU?
            normal_gloo_io(now)
            idle = False
        os.sched_yield()
    if idle and not work.is_completed():
        normal_gloo_io(time.perf_counter())
        idle = False
    work.wait()
    if idle:  # done in time: SCHED_OTHER again until the next polled collective
        done_gloo_io()

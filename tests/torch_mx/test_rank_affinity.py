"""Each rank's threads on its own CPUs (issue 56: ``distributed/affinity.py``,
``launch.pin_local_rank``): the shares, the refusal, and 2 real gloo ranks
whose every thread (their own and gloo's) ends up on the rank's share."""

from __future__ import annotations

import os
import threading

import pytest

pytest.importorskip("torch", reason="torch not installed (pip install 'mlir-mx[test]')")

from mlir_mx.errors import MXValueError  # noqa: E402
from mlir_mx.torch.distributed.affinity import rank_cpus  # noqa: E402
from mlir_mx_testing.distributed import run_ranks  # noqa: E402


def test_each_rank_gets_its_own_share_in_order():
    cpus = {0, 1, 2, 3, 4, 5, 6, 7, 8}
    assert [rank_cpus(r, 2, cpus) for r in range(2)] == [{0, 1, 2, 3}, {4, 5, 6, 7}]
    assert [rank_cpus(r, 3, {5, 9, 2}) for r in range(3)] == [{2}, {5}, {9}]
    assert rank_cpus(1, 4, {0, 1, 2}) is None  # fewer CPUs than ranks: nothing pinned
    assert rank_cpus(0, 1, {3, 4}) == {3, 4}


@pytest.mark.parametrize("rank, world", [(2, 2), (-1, 2), (0, 0)])
def test_a_rank_outside_the_world_is_refused(rank, world):
    with pytest.raises(MXValueError, match="local_rank: expected 0 <= local_rank <"):
        rank_cpus(rank, world, {0, 1})


def _waits(group) -> list[bool]:
    """Whether gloo's all-reduce of a decode row was waited for by polling
    (``async_op=True``), on a machine the load check always finds busy."""
    import torch
    import torch.distributed as dist
    from torch.distributed.tensor import Partial

    from mlir_mx.torch.distributed import decode_collectives as dc

    real, seen = dist.all_reduce, []

    def spy(*args, **kwargs):
        seen.append(kwargs.get("async_op", False))
        return real(*args, **kwargs)

    dist.all_reduce = spy
    try:
        previous = dc.set_decode_collective("torch")
        got = dc.replicated(torch.ones(1, 1, 8), Partial(), group)
        dc.set_decode_collective(previous)
    finally:
        dist.all_reduce = real
    assert torch.equal(got, torch.full((1, 1, 8), 2.0))
    return seen


def _policies() -> dict[str, set[int]]:
    """Each thread name's scheduling policies (``os.SCHED_*``)."""
    out: dict[str, set[int]] = {}
    for t in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{t}/comm") as f:
            out.setdefault(f.read().strip(), set()).add(os.sched_getscheduler(int(t)))
    return out


def _pinned(rank: int, world: int) -> dict:
    """torchrun's variables set as it sets them, then ``pin_local_rank``: each
    thread's CPUs (gloo's, made at ``init_process_group``, and one made after),
    and how a decode collective is waited for before and after."""
    import torch
    import torch.distributed as dist

    from mlir_mx.execution import pool_load
    from mlir_mx.torch.distributed import affinity
    from mlir_mx.torch.distributed.affinity import pinned_cpus
    from mlir_mx.torch.distributed.launch import pin_local_rank

    pool_load.configure(1, -1000)  # every look finds the machine busy
    everyone = os.sched_getaffinity(0)
    os.environ.update(LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world), MLIR_MX_PIN_RANKS="0")
    off = pin_local_rank()
    unchanged = os.sched_getaffinity(0) == everyone
    before = (pinned_cpus(), _waits(dist.group.WORLD))
    unpinned = _policies()  # not pinned: gloo's I/O thread left as it is
    os.environ["MLIR_MX_PIN_RANKS"] = "1"
    torch.set_num_threads(len(everyone) // world + 1)  # more threads than the share: not pinned
    crowded = pin_local_rank(), os.sched_getaffinity(0) == everyone
    torch.set_num_threads(1)
    pinned = pin_local_rank()
    after = (pinned_cpus(), _waits(dist.group.WORLD))
    after_polled = _policies()  # the polled collective done: SCHED_OTHER again
    affinity.IDLE_GLOO_IO = False  # MLIR_MX_TP_IDLE_IO=0: gloo's I/O thread left as it is
    affinity.normal_gloo_io(0.0)  # whatever the collective above left
    switched_off = affinity.idle_gloo_io(100.0), _policies()
    affinity.IDLE_GLOO_IO = True
    idle = affinity.idle_gloo_io(100.0), _policies()
    affinity.normal_gloo_io(100.0)  # a late collective: SCHED_OTHER for a back-off
    backed_off = _policies()
    within = affinity.idle_gloo_io(100.0 + affinity.IDLE_BACKOFF_S / 2), _policies()  # at least
    past = affinity.idle_gloo_io(100.0 + affinity.IDLE_BACKOFF_MAX_S), _policies()
    affinity.done_gloo_io()  # done in time: back to SCHED_OTHER, the back-off reset
    done = _policies(), affinity.IDLE_BACKOFF_S
    affinity.normal_gloo_io(200.0)
    reset = affinity.idle_gloo_io(200.0 + 1.5 * affinity.IDLE_BACKOFF_S)  # not doubled: idle again
    regrouped = _regrouped(affinity)
    seen = {}
    later = threading.Thread(target=lambda: seen.update(later=os.sched_getaffinity(0)))
    later.start()
    later.join()
    tasks = {int(t): os.sched_getaffinity(int(t)) for t in os.listdir("/proc/self/task")}
    return dict(everyone=everyone, off=off, unchanged=unchanged, pinned=pinned, tasks=tasks,
                later=seen["later"], before=before, after=after, crowded=crowded,
                unpinned_policies=unpinned, switched_off=switched_off, idle=idle,
                backed_off=backed_off, within=within, past=past, after_polled=after_polled,
                done=done, reset=reset, regrouped=regrouped)  # fmt: skip


def _regrouped(affinity) -> dict:
    """The I/O threads looked up again for a group made after the last lookup,
    and after a thread found ended (``affinity.idle_gloo_io(now, group)``):
    whether each new group's own I/O thread was made ``SCHED_IDLE``."""
    import gc

    import torch.distributed as dist

    world = dist.group.WORLD

    def new_group() -> tuple:
        before = set(affinity.threads_named(affinity.GLOO_IO))
        group = dist.new_group([0, 1])
        dist.barrier(group=group)
        return group, set(affinity.threads_named(affinity.GLOO_IO)) - before

    affinity.idle_gloo_io(300.0, world)  # looked up with the world's group
    affinity.done_gloo_io()
    g2, g2_io = new_group()
    found = affinity.idle_gloo_io(301.0, g2), {os.sched_getscheduler(t) for t in g2_io}
    affinity.done_gloo_io()
    affinity.idle_gloo_io(302.0, world)  # the world's again: g2's thread among those found
    dist.destroy_process_group(g2)
    del g2
    gc.collect()  # the group gone: its I/O thread ends
    ended = not set(affinity.threads_named(affinity.GLOO_IO)) & g2_io
    affinity.done_gloo_io()  # meets the ended thread
    g3, g3_io = new_group()
    again = affinity.idle_gloo_io(303.0, world), {os.sched_getscheduler(t) for t in g3_io}
    affinity.done_gloo_io()
    dist.destroy_process_group(g3)
    return dict(g2_io=len(g2_io), found=found, ended=ended, g3_io=len(g3_io), again=again)


def test_two_ranks_pin_every_thread_to_their_share():
    """Each of 2 gloo ranks pins all its threads (the main thread, gloo's I/O
    and worker threads) to its half of the CPUs; a thread made after inherits
    it; ``MLIR_MX_PIN_RANKS=0``, or more torch threads than the share, leave
    the process as it was.  On a machine
    the load check finds busy, a decode collective is waited for as torch
    waits, except in a pinned rank, which polls it (same bits either way)
    and makes gloo's I/O thread ``SCHED_IDLE`` (``affinity.idle_gloo_io``;
    ``IDLE_GLOO_IO`` off: not; ``SCHED_OTHER`` for a while after a late
    collective: ``normal_gloo_io``)."""
    results = run_ranks(_pinned, 2, timeout=120)
    for rank, r in enumerate(results):
        assert r["off"] is None and r["unchanged"]
        assert r["before"] == (None, [False])  # busy and not pinned: torch's sleeping wait
        assert r["crowded"] == (None, True)
        want = rank_cpus(rank, 2, r["everyone"])
        assert r["pinned"] == want
        if want is None:  # a 1-CPU machine: nothing to pin
            assert r["after"] == (None, [False])
            continue
        assert r["after"] == (want, [True])  # pinned: polled, whatever the load
        assert len(r["tasks"]) >= 3  # the rank's own thread and gloo's
        assert all(cpus == want for cpus in r["tasks"].values()), r["tasks"]
        assert r["later"] == want
        # pinned: gloo's I/O thread SCHED_IDLE, every other thread as it was;
        # SCHED_OTHER again for a back-off after a late collective; not
        # pinned, or switched off: unchanged
        other, idle = {os.SCHED_OTHER}, {os.SCHED_IDLE}
        assert r["unpinned_policies"]["gloo_tcp_loop"] == other
        assert r["switched_off"][0] is False and r["switched_off"][1]["gloo_tcp_loop"] == other
        made, policies = r["idle"]
        assert made is True and policies.pop("gloo_tcp_loop") == idle
        assert all(p == other for p in policies.values()), policies
        assert r["backed_off"]["gloo_tcp_loop"] == other
        assert r["within"][0] is False and r["within"][1]["gloo_tcp_loop"] == other
        assert r["past"][0] is True and r["past"][1]["gloo_tcp_loop"] == idle
        # only while a polled collective is in flight: after it, and after
        # done_gloo_io, SCHED_OTHER (other collectives run as torch made them)
        assert r["after_polled"]["gloo_tcp_loop"] == other
        assert r["done"][0]["gloo_tcp_loop"] == other
        assert r["reset"] is True
        # a group made since the last lookup: its own I/O thread found (issue 56's review)
        g = r["regrouped"]
        assert g["g2_io"] == 1 and g["found"] == (True, idle)
        # a thread found has ended: the same group's next call looks again
        # and finds the thread of a group made since
        assert g["ended"] and g["g3_io"] == 1 and g["again"] == (True, idle)
    if results[0]["pinned"] is not None:
        assert not results[0]["pinned"] & results[1]["pinned"]


def test_the_idle_io_switch_reads_its_variable():
    """``MLIR_MX_TP_IDLE_IO=0`` turns ``affinity.IDLE_GLOO_IO`` off (read at import)."""
    import subprocess
    import sys

    code = "from mlir_mx.torch.distributed import affinity; print(affinity.IDLE_GLOO_IO)"
    got = [
        subprocess.run([sys.executable, "-c", code], env={**os.environ, "MLIR_MX_TP_IDLE_IO": v},
                       capture_output=True, text=True, timeout=60).stdout.strip()  # fmt: skip
        for v in ("0", "1")
    ]
    assert got == ["False", "True"]


def test_a_destroyed_groups_lookup_is_not_the_default_groups():
    """The last lookup's group gone (its reference dead) matches no group, not
    even ``None`` (the default group): its I/O threads are looked up again."""
    import gc

    from mlir_mx.torch.distributed import affinity

    class Group:  # weakly referable, as a ProcessGroup is
        pass

    saved = dict(affinity._io)
    try:
        group = Group()
        affinity._found(group)
        assert affinity._same_group(group) and not affinity._same_group(None)
        del group
        gc.collect()
        assert not affinity._same_group(None)
        affinity._found(None)
        assert affinity._same_group(None) and not affinity._same_group(Group())
    finally:
        affinity._io.clear()
        affinity._io.update(saved)

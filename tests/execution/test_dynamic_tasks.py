"""Tasks claimed dynamically, on our own pool (``mlir_mx.execution.pool``; issue 51).

* the bits do not depend on which thread ran which task: 1, 2 and 3 threads,
  and runs where one worker is forced late (the pool's test hooks: worker 1
  sleeps before it joins, after it joined, or the caller sleeps so the
  workers take the tasks), give the bits of one thread;
* a late worker finds the job closed and touches nothing (the pool counts it);
* two Python threads calling at once: one gets the pool, the other runs alone;
* after a call nothing spins: the process's CPU time over an idle second
  stays near zero, and no thread is started per call;
* a forked child gets a pool of its own.
"""

from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest

import mlir_mx
from mlir_mx.execution import pool as pool_
from mlir_mx.execution import threads as threads_

pytestmark = pytest.mark.usefixtures("tasks_for_small_work")

needs_pool = pytest.mark.skipif(
    pool_.pool() is None, reason="the pool needs Linux on x86-64 or AArch64 (futex)"
)


@pytest.fixture
def tasks():
    """Linear's kernels lowered as tasks on our pool for one test; hooks off after.
    The load is not looked at (this machine may be busy: the calls would then
    run the 1-thread kernels, tested below)."""
    previous, team = threads_.set_parallel("tasks"), threads_.set_team("pool")
    if pool_.pool() is not None:
        pool_.pool().hooks(backoff=False)  # no stretch alone left by an earlier call
        pool_.pool().hooks(load_check=0)
    yield pool_.pool()
    if pool_.pool() is not None:
        pool_.pool().hooks(backoff=False)
        pool_.pool().hooks()
    threads_.set_parallel(previous)
    threads_.set_team(team)


def _bits(a):
    return np.ascontiguousarray(a).view(np.uint32)


def _problem(m, seed=0, n=200, k=256):
    rng = np.random.default_rng(seed)
    w = mlir_mx.quantize(rng.standard_normal((n, k)).astype(np.float32), "f4E2M1FN", 32)
    return w, rng.standard_normal((m, k)).astype(np.float32)


#: microseconds a hook sleeps: far longer than a call of these problems takes
SLEEP_US = 200_000


@needs_pool
@pytest.mark.parametrize("m,activations", [(1, None), (40, "i8")])
def test_bits_do_not_depend_on_which_thread_ran_which_task(tasks, m, activations):
    w, x = _problem(m)
    ref = _bits(mlir_mx.Linear(w, threads=1, activations=activations)(x))
    for t in (2, 3):
        lin = mlir_mx.Linear(w, threads=t, activations=activations)
        lin(x)
        [runner] = lin.runners
        assert 2 <= runner.compiled.tasks["matmul"] <= t  # tasks claimed by a team of t
        # worker 1 late to join; joined (the caller waits for it to join) and late
        # inside; the caller late, so the workers run the tasks
        hooks = ({"late": SLEEP_US}, {"caller": SLEEP_US, "inside": SLEEP_US}, {"caller": SLEEP_US})
        for hook in ({}, *hooks):
            tasks.hooks(**hook, backoff=False)  # every call on the team
            for _ in range(2):
                np.testing.assert_array_equal(_bits(lin(x)), ref, err_msg=f"{t} threads, {hook}")
            tasks.hooks(load_check=0)


@needs_pool
def test_a_late_worker_finds_the_job_closed(tasks):
    w, x = _problem(1, seed=1)
    lin = mlir_mx.Linear(w, threads=2)
    ref = _bits(lin(x))
    skipped = tasks.skipped
    tasks.hooks(late=SLEEP_US, load_check=0)  # on the team, however busy the machine
    # worker 1 sleeps before it joins: the caller claims both tasks, closes
    # the job and returns; the worker wakes to a closed job (or a newer one)
    np.testing.assert_array_equal(_bits(lin(x)), ref)
    tasks.hooks()
    time.sleep(2 * SLEEP_US / 1e6)
    assert tasks.skipped > skipped
    for _ in range(3):  # and the next calls find it back at work
        np.testing.assert_array_equal(_bits(lin(x)), ref)


@needs_pool
def test_a_call_held_by_a_late_worker_makes_the_next_ones_run_alone(tasks):
    w, x = _problem(1, seed=8)
    lin = mlir_mx.Linear(w, threads=2)
    ref = _bits(lin(x))
    tasks.hooks(backoff=False)  # whatever the calls above met
    # the caller sleeps first, so worker 1 joins; then worker 1 sleeps inside
    tasks.hooks(caller=SLEEP_US, inside=2 * SLEEP_US, load_check=0)
    np.testing.assert_array_equal(_bits(lin(x)), ref)  # waited 0.2 s, worked far less
    tasks.hooks(load_check=0)  # the hooks off; the pool backs off (not for the load)
    alone = tasks.alone
    for _ in range(8):  # the next 8 calls on the caller alone, the same bits
        np.testing.assert_array_equal(_bits(lin(x)), ref)
    assert tasks.alone == alone + 8
    np.testing.assert_array_equal(_bits(lin(x)), ref)  # then on the team again
    assert tasks.alone == alone + 8


@needs_pool
def test_calls_from_two_threads_at_once(tasks):
    problems = [_problem(3, seed=s) for s in (2, 3)]
    lins = [mlir_mx.Linear(w, threads=2) for w, _ in problems]
    refs = [_bits(mlir_mx.Linear(w, threads=1)(x)) for w, x in problems]
    bad = []

    def run(i):
        for _ in range(200):
            if not np.array_equal(_bits(lins[i](problems[i][1])), refs[i]):
                bad.append(i)

    workers = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    assert bad == []


@needs_pool
def test_nothing_spins_after_a_call(tasks):
    w, x = _problem(5, seed=4)
    lin = mlir_mx.Linear(w, threads=3)
    tasks.hooks(load_check=0)  # on the team, however busy the machine
    for _ in range(50):
        lin(x)
    assert tasks.workers == 2  # the team, not a thread per call
    time.sleep(0.05)  # past the bounded spin
    t0, c0 = time.perf_counter(), time.process_time()
    time.sleep(1.0)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    assert cpu < 0.05 * wall, f"{cpu:.3f} s of CPU over {wall:.3f} s idle"


@needs_pool
def test_stop_and_restart(tasks):
    tasks.hooks(backoff=False)  # every call on the team, however loaded the machine
    w, x = _problem(2, seed=5)
    lin = mlir_mx.Linear(w, threads=2)
    ref = _bits(lin(x))
    tasks.stop()
    assert tasks.workers == 0
    np.testing.assert_array_equal(_bits(lin(x)), ref)
    assert tasks.workers == 1


@needs_pool
def test_a_forked_child_gets_a_pool_of_its_own(tasks):
    tasks.hooks(load_check=0)  # the child's call on its team, however busy the machine
    w, x = _problem(2, seed=6)
    lin = mlir_mx.Linear(w, threads=2)
    ref = _bits(lin(x))
    parent = pool_.pool()
    pid = os.fork()
    if pid == 0:  # the child: its own pool, the parent's threads are gone
        ok = pool_.pool() is not parent and np.array_equal(_bits(lin(x)), ref)
        os._exit(0 if ok and pool_.pool().workers == 1 else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_tasks_run_on_the_caller_alone_without_a_pool(tasks, monkeypatch):
    monkeypatch.setattr(pool_, "pool", lambda: None)
    w, x = _problem(5, seed=7)
    ref = _bits(mlir_mx.Linear(w, threads=1)(x))
    lin = mlir_mx.Linear(w, threads=3)
    before = threads_.regions()
    np.testing.assert_array_equal(_bits(lin(x)), ref)
    assert threads_.regions() == before + 1  # one region, its three tasks claimed by one thread


def test_team_must_be_known():
    from mlir_mx.errors import MXValueError

    with pytest.raises(MXValueError, match="team: expected one of pool, openmp"):
        threads_.set_team("gomp")


@needs_pool
def test_one_region_runs_several_kernels_with_one_join(tasks):
    problems = [_problem(1, seed=s) for s in (9, 10, 11)]
    lins = [mlir_mx.Linear(w, threads=2) for w, _ in problems]
    refs = [_bits(mlir_mx.Linear(w, threads=1)(x)) for w, x in problems]
    outs = [np.zeros((1, 200), np.float32) for _ in problems]
    before = threads_.regions()
    with threads_.one_region():
        for lin, (_, x), out in zip(lins, problems, outs, strict=True):
            assert lin.call_into(x.ctypes.data, 1, out.ctypes.data, 2)
        assert not any(out.any() for out in outs)  # held until the block ends
    assert threads_.regions() == before + 1
    for out, ref in zip(outs, refs, strict=True):
        np.testing.assert_array_equal(_bits(out), ref)
    # a bound function twice in one region: its first call's arguments are gone
    with pytest.raises(RuntimeError, match="called twice in one region"):
        with threads_.one_region():
            for _ in range(2):
                lins[0].call_into(problems[0][1].ctypes.data, 1, outs[0].ctypes.data, 2)


@pytest.fixture
def team_kernels():
    """Busy calls run the team's kernels on the caller (session 51's way)."""
    previous = threads_.set_busy_kernels("team")
    yield
    threads_.set_busy_kernels(previous)


@needs_pool
def test_a_busy_machine_runs_the_calls_on_the_caller_alone(tasks, team_kernels):
    w, x = _problem(1, seed=9)
    lin = mlir_mx.Linear(w, threads=2)
    ref = _bits(lin(x))
    # every look at the load (1 us apart) finds more runnable threads than CPUs
    tasks.hooks(load_check=1, load_slack=-1000)
    alone = tasks.alone
    for _ in range(5):
        np.testing.assert_array_equal(_bits(lin(x)), ref)
    assert tasks.alone == alone + 5


class _Spy:
    """Records the thread count of every kernel ``Linear`` binds, and every
    launch of a tasks kernel (a team's kernel, on a team or alone)."""

    def __init__(self, monkeypatch):
        self.bound, self.launched = [], 0
        bound, launch = mlir_mx.Linear._bound, threads_._launch

        def spy_bound(lin, kind, m, threads):
            self.bound.append(threads)
            return bound(lin, kind, m, threads)

        def spy_launch(*args, **kwargs):
            self.launched += 1
            return launch(*args, **kwargs)

        monkeypatch.setattr(mlir_mx.Linear, "_bound", spy_bound)
        monkeypatch.setattr(threads_, "_launch", spy_launch)


@needs_pool
@pytest.mark.parametrize("team", ["pool", "openmp"])
@pytest.mark.parametrize("m,activations", [(1, None), (40, None), (3, "i8")])
def test_a_busy_machine_runs_the_one_thread_kernels(tasks, monkeypatch, team, m, activations):
    from mlir_mx.execution import compiled

    threads_.set_team(team)
    w, x = _problem(m, seed=11)
    one = mlir_mx.Linear(w, threads=1, activations=activations)
    ref = _bits(one(x))
    lin = mlir_mx.Linear(w, threads=2, activations=activations)
    lin.precompile(m)  # the 2- and the 1-thread kernels
    kernels = {r.compiled.tasks.get("matmul", 1) for r in lin.runners}
    assert kernels == {1, 2} and set(one.runners) <= set(lin.runners)  # the 1-thread process's
    np.testing.assert_array_equal(_bits(lin(x)), ref)  # quiet: the team's kernel
    monkeypatch.setattr(compiled, "Compiled", _refuse)  # nothing compiled from here on
    spy = _Spy(monkeypatch)
    tasks.hooks(load_check=1, load_slack=-1000)  # every look finds the machine oversubscribed
    regions, alone = threads_.regions(), tasks.alone
    out = np.zeros((m, 200), np.float32)
    for _ in range(3):
        np.testing.assert_array_equal(_bits(lin(x)), ref)
        out[:] = 0
        if lin.call_into(x.ctypes.data, m, out.ctypes.data, 2):
            np.testing.assert_array_equal(_bits(out), ref)
    assert set(spy.bound) <= {1} and spy.launched == 0  # the 1-thread kernel, never a team's
    assert (threads_.regions(), tasks.alone) == (regions, alone)
    assert threads_.call_threads(2) == 1 and threads_.call_threads(1) == 1
    tasks.hooks(load_check=0)  # quiet again: the team's kernel
    np.testing.assert_array_equal(_bits(lin(x)), ref)
    assert spy.launched == 1 and threads_.regions() == regions + 1


def _refuse(*args, **kwargs):
    raise AssertionError("a kernel was compiled")


def test_busy_kernels_must_be_known(monkeypatch):
    from mlir_mx.errors import MXValueError

    with pytest.raises(MXValueError, match="kernels: expected one of one, team"):
        threads_.set_busy_kernels("two")
    monkeypatch.setenv("MLIR_MX_BUSY_KERNELS", "all")
    with pytest.raises(MXValueError, match="MLIR_MX_BUSY_KERNELS"):
        threads_._initial_busy_kernels()


@needs_pool
def test_the_load_check_reads_the_runnable_threads():
    from mlir_mx.execution.pool_load import LoadCheck

    # /proc/loadavg's runnable count includes the reading thread: at least 1,
    # so 1 + a team of 1 > the CPUs less all of them
    assert LoadCheck(1, -(os.cpu_count() or 1)).busy(team=1, ours=0)
    assert not LoadCheck(1, 10_000).busy(team=2, ours=1)  # never beyond 10,000 CPUs
    assert not LoadCheck(0, -10_000).busy(team=2, ours=1)  # 0: never looks
    check = LoadCheck(10**9, -10_000)  # looks at the first call, then not for 1,000 s
    assert check.busy(2, 1)
    check.slack = 10_000  # would never be busy, but the last verdict stands until the next look
    assert check.busy(2, 1) and check.busy(2, 1)

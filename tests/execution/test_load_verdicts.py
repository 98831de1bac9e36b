"""The load check's verdicts over a run of looks (``execution.pool_load``; issue 51).

Readings and the clock come in through ``LoadCheck``'s own ``read`` and
``clock`` (what ``/proc`` would have said at each look), so each case is
deterministic whatever this machine's load:

* busy from the first look that finds the machine oversubscribed; back to the
  team only after ``calm`` looks in a row that do not (1: at once, the
  session-53 behaviour);
* two copies of us that each read the other's runnable threads settle on
  busy and stay there through one copy's momentary dip;
* the bounds that spare a look reading this process's threads one by one
  never change a verdict;
* after ``hold`` busy looks in a row the looks come ``HOLD_PERIODS`` periods
  apart, and every period again from the first quiet one;
* a ``Linear`` on 2 threads whose verdict flips from look to look gives the
  1-thread bits on every call, and runs both its team's and its 1-thread kernels.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import mlir_mx
from mlir_mx.execution import pool as pool_
from mlir_mx.execution import pool_load
from mlir_mx.execution import threads as threads_
from mlir_mx.execution.pool_load import LoadCheck, deciding_ours


class _Clock:
    """A monotonic clock in ns that moves only when told."""

    def __init__(self):
        self.ns = 0

    def __call__(self) -> int:
        return self.ns


def _verdicts(readings, calm, cpus=2, team=2):
    """The verdict after each look: one look a millisecond (``every`` 1 ms),
    eight calls between looks as in a decode (the clock is read every 8th)."""
    script, clock = iter(readings), _Clock()
    check = LoadCheck(1000, 0, calm=calm, read=lambda team, ours: next(script), clock=clock)
    check.cpus = cpus
    out = []
    for _ in readings:
        out.append([check.busy(team) for _ in range(8)][-1])
        clock.ns += 1_000_000
    assert check.reads == len(readings)  # one look a millisecond, no more
    return out


Q, B = (1, 1), (3, 1)  # (runnable, ours) on 2 CPUs, a team of 2: quiet / one other thread


def test_busy_at_once_and_the_team_back_after_calm_quiet_looks():
    looks = [Q, B, Q, Q, B, Q, Q, Q, Q]
    assert _verdicts(looks, calm=3) == [0, 1, 1, 1, 1, 1, 1, 0, 0]
    assert _verdicts(looks, calm=2) == [0, 1, 1, 0, 1, 1, 0, 0, 0]
    assert _verdicts(looks, calm=1) == [0, 1, 0, 0, 1, 0, 0, 0, 0]  # each look's own finding


def test_between_looks_the_verdict_stands():
    clock, found = _Clock(), iter([B, Q, Q, Q])
    check = LoadCheck(5000, 0, calm=1, read=lambda team, ours: next(found), clock=clock)
    check.cpus = 2
    assert all(check.busy(2) for _ in range(100))  # 100 calls inside 5 ms: the first look's
    clock.ns = 5_000_000
    assert [check.busy(2) for _ in range(8)][-1] is False and check.reads == 2


def _looks_at(times_ms, readings, hold):
    """The verdict and the looks so far at each time (ms; 8 calls each, as in
    a decode), ``every`` 1 ms, ``calm`` 1."""
    clock, found = _Clock(), iter(readings)
    check = LoadCheck(1000, 0, calm=1, read=lambda team, ours: next(found), clock=clock, hold=hold)
    check.cpus = 2
    out = []
    for t in times_ms:
        clock.ns = t * 1_000_000
        out.append(([check.busy(2) for _ in range(8)][-1], check.reads))
    return out


def test_a_lasting_load_is_looked_at_less_often():
    """After ``hold`` busy looks in a row the next look comes ``HOLD_PERIODS``
    periods later (a look costs 23-80 us beside a spinner); a quiet look puts
    the calls back on their team at once and the looks back to every period."""
    assert pool_load.HOLD_PERIODS == 4
    times = [0, 1, 2, 3, 4, 5, 6, 9, 10, 11, 12]
    got = _looks_at(times, [B, B, B, B, Q, Q, B], hold=3)
    assert got == [(True, 1), (True, 2), (True, 3),  # the third busy look in a row: held
                   (True, 3), (True, 3), (True, 3),  # no look for 4 periods
                   (True, 4), (True, 4),  # busy again: held again
                   (False, 5), (False, 6), (True, 7)]  # fmt: skip
    # hold 0: a look every period, as before
    assert [r for _, r in _looks_at(times[:6], [B] * 6, hold=0)] == [1, 2, 3, 4, 5, 6]
    # a false busy look on a quiet machine still lasts one period
    assert _looks_at([0, 1, 2], [B, Q, Q], hold=8) == [(True, 1), (False, 2), (False, 3)]


def _copies(calm, dip_at):
    """Two processes on 2 CPUs, each with a team of 2, looking in turn: a
    copy's runnable threads are its team while not busy and its caller alone
    while busy; a look counts both copies' (its own included).  At look
    ``dip_at`` copy B has nothing runnable for a moment (between two calls)
    while A looks.  Returns both verdicts after each round of looks."""
    checks = [LoadCheck(1000, 0, calm=calm) for _ in range(2)]
    history = []
    for i in range(12):
        for me, check in enumerate(checks):
            runs = [1 if c.over else 2 for c in checks]
            if i == dip_at and me == 0:
                runs[1] = 0
            check.cpus = 2
            check.judge(sum(runs) - runs[me] + 2 > check.cpus)
        history.append(tuple(c.over for c in checks))
    return history


def test_two_copies_that_see_each_other_stay_busy():
    assert _copies(calm=3, dip_at=4) == [(True, True)] * 12  # the dip moves neither
    one = _copies(calm=1, dip_at=4)  # session 53's: A's one look in B's dip puts A on its team
    assert one[3] == (True, True) and one[4] == (False, True) and one[5] == (True, True)


@pytest.mark.parametrize("room", range(-3, 4))
def test_the_bounds_never_change_a_verdict(room):
    for running, threads in itertools.product(range(1, 10), range(1, 6)):
        for mine in range(1, threads + 1):  # the looking thread is always one of ours
            truth = running - mine > room
            for known in (None, threads):
                bound = deciding_ours(running, room, known)
                if bound is not None:
                    assert (running - bound > room) == truth, (running, threads, mine, known)
    assert deciding_ours(2, 1) == 1 and deciding_ours(9, 0, 3) == 3 and deciding_ours(3, 0, 3) is None


def test_a_busy_verdict_is_looked_at_again_on_the_next_call_after_a_period():
    """Quiet, the check looks on every 8th call (the clock costs); busy, on
    any call once a period has passed, so a false busy verdict costs one
    period on 1 thread, not eight calls (a 20 ms prefill call each)."""
    clock, found = _Clock(), iter([B, Q, Q])
    check = LoadCheck(1000, 0, calm=1, read=lambda team, ours: next(found), clock=clock)
    check.cpus = 2
    assert check.busy(2) is True and check.reads == 1
    clock.ns = 2_000_000
    assert check.busy(2) is False and check.reads == 2  # the very next call looked
    clock.ns = 4_000_000
    assert check.busy(2) is False and check.reads == 2  # quiet: the last verdict, no look


def test_a_look_at_proc_returns_counts_in_range():
    check = LoadCheck(1, 0)
    running, mine = check.read_proc(team=2, ours=None)
    assert running >= 1 and 1 <= mine  # the looking thread runs
    assert check.read_proc(team=2, ours=5)[1] == 5  # a count given is taken as it is
    check.close()


def test_the_trace_keeps_every_look():
    clock, found = _Clock(), iter([B, Q])
    check = LoadCheck(1000, 0, trace=True, calm=3, read=lambda team, ours: next(found), clock=clock)
    check.cpus = 2
    check.busy(2)
    clock.ns = 2_000_000
    [check.busy(2) for _ in range(7)]
    assert [(t, r, o, team, v) for t, r, o, team, v, _ns in check.trace] == [
        (0, 3, 1, 2, True),
        (2_000_000, 1, 1, 2, True),  # quiet, but not yet calm
    ]
    assert LoadCheck(1000, 0).trace is None


@pytest.mark.usefixtures("tasks_for_small_work")
@pytest.mark.parametrize("team", ["pool", "openmp"])
def test_bits_do_not_change_with_the_verdict(team):
    """A 2-thread Linear whose every look flips the verdict (calm 1): the calls
    alternate between the team's and the 1-thread kernels; each gives 1 thread's bits."""
    if team == "pool" and pool_.pool() is None:
        pytest.skip("the pool needs Linux on x86-64 or AArch64 (futex)")
    previous, parallel = threads_.set_team(team), threads_.set_parallel("tasks")
    clock = _Clock()
    flips = itertools.cycle([B, Q])

    def read(team, ours):
        clock.ns += 1_000_000  # every look is due at the next clock read
        return next(flips)

    rng = np.random.default_rng(5)
    w = mlir_mx.quantize(rng.standard_normal((96, 256)).astype(np.float32), "f4E2M1FN", 32)
    x = rng.standard_normal((1, 256)).astype(np.float32)
    ref = np.ascontiguousarray(mlir_mx.Linear(w, threads=1)(x)).view(np.uint32)
    lin = mlir_mx.Linear(w, threads=2)
    lin.precompile(1)
    try:
        pool_load.configure(1000, 0, calm=1, read=read, clock=clock)
        regions, ran = threads_.regions(), []
        for _ in range(64):
            before = threads_.regions()
            np.testing.assert_array_equal(np.ascontiguousarray(lin(x)).view(np.uint32), ref)
            ran.append(threads_.regions() - before)
        assert pool_load.shared_reads() >= 8
    finally:
        pool_load.configure(0)
        threads_.set_team(previous)
        threads_.set_parallel(parallel)
    assert 0 < threads_.regions() - regions < 64 and set(ran) == {0, 1}  # both kernels ran

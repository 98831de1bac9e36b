"""How busy the machine is, for the teams of :mod:`mlir_mx.execution.threads`.

A call on a team (our pool or the OpenMP runtime's) on a machine with more
runnable threads than CPUs gains little from a second thread (it takes a core's time from a thread that would
otherwise have it) and risks much: a worker the OS deschedules after it
joined a call holds that call until it runs again, and a decode token makes
dozens of calls. So the calls look at the machine's runnable threads now and
then (:class:`LoadCheck`, :func:`oversubscribed`) and run on the caller alone
while the machine is oversubscribed (``Linear``'s calls on their 1-thread
kernels, ``threads.call_threads``); with the decode policy
(``mlir_mx.torch.thread_policy``) a step then runs on one thread throughout
(``docs/library.md``, "Threads").  The verdict turns busy at the first look
that finds the machine oversubscribed and back after :data:`LOAD_CALM` looks
in a row that do not (1 by default; more keeps two copies of us that each see
the other on one thread each through a moment when one has nothing runnable).
While busy, every call may look (at most once a period), so a false busy
verdict lasts one period, not eight calls; once :data:`LOAD_HOLD` looks in a
row were busy (a lasting load), it looks once in :data:`HOLD_PERIODS` periods.
"""

from __future__ import annotations

import os
import threading
import time

__all__ = [
    "HOLD_PERIODS",
    "LOAD_CALM",
    "LOAD_CHECK",
    "LOAD_HOLD",
    "LOAD_SLACK",
    "LOAD_TRACE",
    "LoadCheck",
    "configure",
    "deciding_ours",
    "looks",
    "oversubscribed",
    "shared_reads",
]

def _env_int(name: str, default: int) -> int:
    text = os.environ.get(name, "").strip()
    try:
        return int(text) if text else default
    except ValueError:
        from mlir_mx.errors import MXValueError

        raise MXValueError(f"{name}: expected an integer, got {text!r}") from None


#: Looking at the machine's load: at most once in this many microseconds (0:
#: never), a call reads how many threads are runnable now: ``/proc/loadavg``'s fourth field
#: (every process of the machine) less this process's own (about 2 us, and
#: 3.5 us a thread of the process). When those not ours, plus the call's team,
#: exceed the CPUs by more than :data:`LOAD_SLACK`, the calls until the next
#: look run on the caller alone (a decode token makes 50-100 calls; once in
#: 5 ms costs 3-4 reads of ~20 us a token, and a call between two looks a
#: counter, every 8th a clock read): a second thread of ours would only take a
#: core's time from a thread that would otherwise have it, and a joined worker
#: the OS deschedules holds the call (``docs/library.md``, "Threads").
#: ``MLIR_MX_LOAD_CHECK`` / ``MLIR_MX_LOAD_SLACK`` set them for a process
#: (``mx-bench --env-row``).
LOAD_CHECK = _env_int("MLIR_MX_LOAD_CHECK", 5000)
LOAD_SLACK = _env_int("MLIR_MX_LOAD_SLACK", 0)
#: Back to the team only after this many looks in a row find the machine not
#: oversubscribed (``MLIR_MX_LOAD_CALM``): with more than 1, a runnable count
#: that dips for a moment (another copy of us between two calls) does not put
#: a team on a machine that is full.  Default 1 (each look's own finding):
#: 3 measured the same in the quiet decode matrix (session 54: 20.93 / 29.25 /
#: 29.46 ms a token against 20.85 / 29.28 / 29.38 quiet / beside a spinner /
#: two copies) and cost a quiet 256-row AMX call its second thread in most
#: calls (a false busy look held for 3 looks: 2t/1t 1.00x against 1.82x;
#: ``docs/library.md``, "Threads").
LOAD_CALM = _env_int("MLIR_MX_LOAD_CALM", 1)
#: Once this many looks in a row found the machine oversubscribed, look once
#: in :data:`HOLD_PERIODS` periods until a look does not (``MLIR_MX_LOAD_HOLD``;
#: 0: every period).  Beside a CPU-bound process a look reads ``/proc/loadavg``,
#: ``/proc/self/stat`` and every thread's ``stat``: 23-80 us on the 2-vCPU Zen 5
#: (session 66), once a 5 ms period, 1-2 % of a one-token MoE call that runs
#: on the caller anyway.  Eight looks first, so a false busy look on a quiet
#: machine (frequent on session 54's Xeon) still lasts one period; a load that
#: ends is seen at most ``HOLD_PERIODS`` periods late (20 ms by default).
LOAD_HOLD = _env_int("MLIR_MX_LOAD_HOLD", 8)
HOLD_PERIODS = 4
#: ``MLIR_MX_LOAD_TRACE=1``: the process's check keeps every look
#: (:func:`looks`), for probes that lay its verdicts along a decode.
LOAD_TRACE = _env_int("MLIR_MX_LOAD_TRACE", 0) > 0


def deciding_ours(running: int, room: int, threads: int | None = None) -> int | None:
    """A count of this process's runnable threads that gives the verdict
    ``running - ours > room`` without reading them thread by thread, or None.
    The looking thread is one of ``running`` and of ours (it runs), so 1 where
    even then the others fit in ``room``; ``threads`` (how many the process
    has, None: not read yet) where even all of them running leave too many."""
    if running - 1 <= room:
        return 1
    if threads is not None and running - threads > room:
        return threads
    return None


class LoadCheck:
    """Whether the machine has more runnable threads than CPUs (:data:`LOAD_CHECK`).

    Runnable threads of the machine: ``/proc/loadavg``'s fourth field; of this
    process: its threads in state ``R`` (``/proc/self/task/*/stat``, each kept
    open; the list read again when ``/proc/self/stat`` counts other threads).
    About 2 + 3.5 us a thread, at most once in :data:`LOAD_CHECK` microseconds."""

    def __init__(
        self, every: int = LOAD_CHECK, slack: int = LOAD_SLACK, trace: bool = LOAD_TRACE,
        calm: int = LOAD_CALM, read=None, clock=time.monotonic_ns, hold: int = LOAD_HOLD,
    ):  # fmt: skip
        self.every, self.slack, self.next, self.over, self.calls = every, slack, 0, False, 0
        #: looks in a row that must find the machine not oversubscribed before
        #: the calls go back to their team (:data:`LOAD_CALM`); ``quiet``: so far
        self.calm, self.quiet = max(1, calm), 0
        #: busy looks in a row after which it looks once in :data:`HOLD_PERIODS`
        #: periods (:data:`LOAD_HOLD`; 0: never); ``streak``: so far
        self.hold, self.streak = max(0, hold), 0
        #: ``read(team, ours) -> (runnable threads of the machine, of this
        #: process)`` and ``clock() -> ns``: ``/proc`` and the monotonic clock,
        #: or a test's readings
        self.read = self.read_proc if read is None else read
        self.clock = clock
        #: with ``trace``: ``(monotonic ns, runnable, ours, team, verdict, look's ns)`` a look
        self.trace: list[tuple[int, int, int, int, bool, int]] | None = [] if trace else None
        #: how many times it looked at ``/proc``
        self.reads = 0
        self.cpus = os.cpu_count() or 1
        self.pid, self.fds, self.tasks = -1, {}, {}
        self.lock = threading.Lock()

    def busy(self, team: int, ours: int | None = None) -> bool:
        """Looked at on the first call and then at most once in ``every``
        microseconds (once in ``HOLD_PERIODS`` times that after ``hold`` busy
        looks in a row, :data:`LOAD_HOLD`): the runnable threads not this
        process's (``ours``: how many of its threads are runnable, None: read)
        and the ``team`` exceed the CPUs by more than ``slack``.  Busy from the
        first look that finds so; not busy again only after ``calm`` looks in
        a row that do not (:data:`LOAD_CALM`); between looks, the last verdict."""
        if self.every <= 0:
            return False
        self.calls += 1
        if self.calls & 7 and self.next and not self.over:  # the clock costs 0.5 us in a VM:
            return self.over  # every 8th call; busy (the calls on 1 thread), every call
        now = self.clock()
        if now >= self.next and self.lock.acquire(blocking=False):
            self.next = now + 1000 * self.every  # one thread looks; the others take the last
            self.reads += 1
            try:
                running, mine = self.read(team, ours)
            except (OSError, ValueError, IndexError, KeyError):  # no /proc: never busy
                self.every, running, mine = 0, 0, 0
            finally:
                self.lock.release()
            self.judge(running - mine + team > self.cpus + self.slack)
            self.streak = self.streak + 1 if self.over else 0
            if self.hold and self.streak >= self.hold:  # a lasting load: look less often
                self.next = now + 1000 * self.every * HOLD_PERIODS
            if self.trace is not None:
                self.trace.append((now, running, mine, team, self.over, self.clock() - now))
        return self.over

    def judge(self, over: bool) -> bool:
        """One look's finding into the verdict: busy at once (a wrong busy
        verdict costs a look's period on 1 thread); back to the team after
        ``calm`` quiet looks in a row (a wrong quiet one can cost a time slice
        per region, a joined thread descheduled).  Returns the verdict."""
        if over:
            self.over, self.quiet = True, 0
        elif self.over:
            self.quiet += 1
            if self.quiet >= self.calm:
                self.over, self.quiet = False, 0
        return self.over

    def read_proc(self, team: int, ours: int | None) -> tuple[int, int]:
        """``(runnable threads of the machine, of this process)`` from ``/proc``.
        This process's are read thread by thread only where the machine's
        count does not decide alone: the looking thread is one of them (it
        runs), and there are at most as many as the process has threads; where
        a bound decides, it is the count returned."""
        if self.pid != os.getpid():  # first use, or a forked child
            self._open()
        running = int(os.pread(self.fds["load"], 128, 0).split()[3].split(b"/")[0])
        if ours is not None:
            return running, ours
        room = self.cpus + self.slack - team
        mine = deciding_ours(running, room)
        if mine is None:
            threads = self._threads()
            mine = deciding_ours(running, room, threads)
            if mine is None:
                mine = self._runnable(threads)
        return running, mine

    def _open(self) -> None:
        self.close()
        self.pid = os.getpid()
        self.fds = {"load": os.open("/proc/loadavg", os.O_RDONLY),
                    "self": os.open("/proc/self/stat", os.O_RDONLY)}  # fmt: skip
        self.tasks = {}

    def _threads(self) -> int:
        """How many threads this process has (``/proc/self/stat``)."""
        stat = os.pread(self.fds["self"], 1024, 0)
        return int(stat[stat.rindex(b")") + 2 :].split()[17])

    def _runnable(self, threads: int) -> int:
        """This process's threads in state R now (``threads``: how many it has)."""
        if threads != len(self.tasks):
            for fd in self.tasks.values():
                if fd >= 0:
                    os.close(fd)
            self.tasks = {}
            for tid in os.listdir("/proc/self/task"):
                try:
                    self.tasks[tid] = os.open(f"/proc/self/task/{tid}/stat", os.O_RDONLY)
                except OSError:  # the thread ended
                    pass
        n, ended = 0, False
        for fd in self.tasks.values():
            try:
                b = os.pread(fd, 512, 0)
            except OSError:
                b = b""
            if b.count(b")") == 0:  # the thread ended: list them again next time
                ended = True
                continue
            n += b[b.rindex(b")") + 2] == ord("R")
        if ended:
            self.tasks["ended"] = -1
        return n

    def close(self) -> None:
        for fd in (*self.fds.values(), *self.tasks.values()):
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self.fds, self.tasks = {}, {}

    def __del__(self):
        if self.pid == os.getpid():
            self.close()


_shared: list[LoadCheck] = []


def configure(
    every: int = LOAD_CHECK, slack: int = LOAD_SLACK, trace: bool = LOAD_TRACE,
    calm: int = LOAD_CALM, read=None, clock=time.monotonic_ns, hold: int = LOAD_HOLD,
) -> LoadCheck:  # fmt: skip
    """How the process looks at the load from now on (``every`` 0: never;
    ``Pool.hooks``' ``load_check`` and ``load_slack``, for tests and probes;
    ``trace``: keep every look, :func:`looks`; ``calm``, ``read``, ``clock``,
    ``hold``: :class:`LoadCheck`'s, a test's readings).  Returns the new check."""
    _shared[:] = [LoadCheck(every, slack, trace, calm, read, clock, hold)]
    return _shared[0]


def oversubscribed(team: int) -> bool:
    """Whether a call on a team of ``team`` threads would oversubscribe the
    machine now: the process's :class:`LoadCheck` (made on first use)."""
    if not _shared:
        configure()
    return _shared[0].busy(team)


def looks() -> list[tuple[int, int, int, int, bool, int]]:
    """The process's check's looks so far, ``(monotonic ns, runnable threads
    of the machine, of this process, team, verdict, the look's ns)`` each
    (this process's count a bound where the machine's decided), when made with
    ``trace`` (``MLIR_MX_LOAD_TRACE=1``); else empty."""
    return list(_shared[0].trace or ()) if _shared else []


def shared_reads() -> int:
    """How many times the process's :class:`LoadCheck` looked at ``/proc``
    since it was made (:func:`configure`): for probes and tests."""
    return _shared[0].reads if _shared else 0

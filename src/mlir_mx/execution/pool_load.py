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
(``docs/library.md``, "Threads").
"""

from __future__ import annotations

import os
import threading
import time

__all__ = ["LOAD_CHECK", "LOAD_SLACK", "LoadCheck", "configure", "oversubscribed", "shared_reads"]

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


class LoadCheck:
    """Whether the machine has more runnable threads than CPUs (:data:`LOAD_CHECK`).

    Runnable threads of the machine: ``/proc/loadavg``'s fourth field; of this
    process: its threads in state ``R`` (``/proc/self/task/*/stat``, each kept
    open; the list read again when ``/proc/self/stat`` counts other threads).
    About 2 + 3.5 us a thread, at most once in :data:`LOAD_CHECK` microseconds."""

    def __init__(self, every: int = LOAD_CHECK, slack: int = LOAD_SLACK):
        self.every, self.slack, self.next, self.over, self.calls = every, slack, 0, False, 0
        #: how many times it looked at ``/proc``
        self.reads = 0
        self.cpus = os.cpu_count() or 1
        self.pid, self.fds, self.tasks = -1, {}, {}
        self.lock = threading.Lock()

    def busy(self, team: int, ours: int | None = None) -> bool:
        """Looked at on the first call and then at most once in ``every``
        microseconds: the runnable threads not this process's (``ours``: how
        many of its threads are runnable, None: read) and the ``team`` exceed
        the CPUs by more than ``slack``; between looks, the last verdict."""
        if self.every <= 0:
            return False
        self.calls += 1
        if self.calls & 7 and self.next:  # the clock itself costs 0.5 us in a VM: every 8th call
            return self.over
        now = time.monotonic_ns()
        if now >= self.next and self.lock.acquire(blocking=False):
            self.next = now + 1000 * self.every  # one thread looks; the others take the last
            self.reads += 1
            try:
                if self.pid != os.getpid():  # first use, or a forked child
                    self._open()
                running = int(os.pread(self.fds["load"], 128, 0).split()[3].split(b"/")[0])
                mine = self._runnable() if ours is None else ours
            except (OSError, ValueError, IndexError, KeyError):  # no /proc: never busy
                self.every, running, mine = 0, 0, 0
            finally:
                self.lock.release()
            self.over = running - mine + team > self.cpus + self.slack
        return self.over

    def _open(self) -> None:
        self.close()
        self.pid = os.getpid()
        self.fds = {"load": os.open("/proc/loadavg", os.O_RDONLY),
                    "self": os.open("/proc/self/stat", os.O_RDONLY)}  # fmt: skip
        self.tasks = {}

    def _runnable(self) -> int:
        """This process's threads in state R now."""
        stat = os.pread(self.fds["self"], 1024, 0)
        threads = int(stat[stat.rindex(b")") + 2 :].split()[17])
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


def configure(every: int = LOAD_CHECK, slack: int = LOAD_SLACK) -> None:
    """How the process looks at the load from now on (``every`` 0: never;
    ``Pool.hooks``' ``load_check`` and ``load_slack``, for tests and probes)."""
    _shared[:] = [LoadCheck(every, slack)]


def oversubscribed(team: int) -> bool:
    """Whether a call on a team of ``team`` threads would oversubscribe the
    machine now: the process's :class:`LoadCheck` (made on first use)."""
    if not _shared:
        configure()
    return _shared[0].busy(team)


def shared_reads() -> int:
    """How many times the process's :class:`LoadCheck` looked at ``/proc``
    since it was made (:func:`configure`): for probes and tests."""
    return _shared[0].reads if _shared else 0

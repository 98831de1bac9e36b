"""Threads pinned one per CPU, each running its call at once: the host
probe's team at more than one thread (:class:`~mlir_mx.roofline.measure.FmaProbe`).

Unpinned, a worker woken after an idle gap was placed on the waking
thread's vCPU and the two shared it (``docs/bench.md``, the host probe).
"""

from __future__ import annotations

import os
import threading
import time

__all__ = ["PinnedTeam", "probe_cpus"]


def probe_cpus(threads: int) -> list[int] | None:
    """The first ``threads`` CPUs of this process's affinity mask, where
    ``threads > 1`` and the OS lets a thread pin itself; else None."""
    if threads < 2 or not hasattr(os, "sched_getaffinity"):
        return None
    cpus = sorted(os.sched_getaffinity(0))
    return cpus[:threads] if len(cpus) >= threads else None


class PinnedTeam:
    """One daemon thread per CPU, pinned there, each running its call when
    :meth:`run` releases them (native code: the GIL is released)."""

    def __init__(self, calls: list, cpus: list[int]):
        self._start = threading.Barrier(len(cpus) + 1)
        self._end = threading.Barrier(len(cpus) + 1)
        self._seconds = [0.0] * len(cpus)
        self._error: BaseException | None = None
        self._stop = False
        self._threads = [
            threading.Thread(target=self._loop, args=(i, call, cpu), daemon=True)
            for i, (call, cpu) in enumerate(zip(calls, cpus, strict=True))
        ]
        for t in self._threads:
            t.start()

    def _loop(self, i: int, call, cpu: int) -> None:
        try:
            os.sched_setaffinity(0, {cpu})  # this thread only
        except OSError:  # a cpuset that changed under us: the probe runs unpinned
            pass
        while True:
            self._start.wait()
            if self._stop:
                return
            t0 = time.perf_counter()
            try:
                call()
            except BaseException as e:  # noqa: BLE001 - handed to run(), never a hang
                self._error = e
            self._seconds[i] = time.perf_counter() - t0
            self._end.wait()

    def run(self) -> float:
        """Every thread's call at once; the slowest one's seconds."""
        self._start.wait()
        self._end.wait()
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        return max(self._seconds)

    def close(self) -> None:
        self._stop = True
        self._start.wait()
        for t in self._threads:
            t.join()

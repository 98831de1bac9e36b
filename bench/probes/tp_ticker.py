"""Probe (not used by mlir_mx: it did not help, ``docs/distributed.md``,
"Tails (session 54, later)"): a native thread that wakes every :data:`TICK_US` while a pinned rank's
decode collective is in flight, so that the scheduler looks again long before
its tick.

Why (``docs/distributed.md``, "Where the time goes (session 54)"): a pinned
rank's three threads share one CPU; when gloo's worker is switched out in the
middle of a send, gloo's TCP I/O thread spins on the pair's lock it holds
until the kernel's next tick (``CONFIG_HZ=250``: up to 4 ms).  Each wake-up of
this thread is a scheduling decision (wake-up preemption) inside that spin.

The loop is JIT-compiled (upstream MLIR's ``ExecutionEngine``, LLVM dialect)
and called through ``ctypes`` (the GIL released for the whole loop): idle it
sleeps on a futex (no wake-ups while the rank computes); :func:`on` / :func:`off`
switch it on and off around a collective (``tp_collective_trace.py``'s
polling).  ``MLIR_MX_TP_TICK_US=0`` (or :data:`TICK_US` ``= 0`` before
:func:`start`): no ticker; the probe starts one in ``pin`` rows.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import platform
import sys
import threading

__all__ = ["TICK_US", "off", "on", "start", "stop", "thread_id", "ticks"]

#: The ticker's period while a collective is in flight, in microseconds
#: (``MLIR_MX_TP_TICK_US``; 0: no ticker).
TICK_US = int(os.environ.get("MLIR_MX_TP_TICK_US", "100") or 0)

_SYSCALL_FUTEX = {"x86_64": 202, "aarch64": 98}
_IDLE, _ON, _STOP = 0, 1, 2

# cells (i64): 0 the state (its low 32 bits the futex word), 1 ticks made,
# 2-3 the period as a ``struct timespec``.
_IR = """
llvm.func @syscall(i64, ...) -> i64

llvm.func @mx_tp_ticker(%cells: !llvm.ptr) {
  %one = llvm.mlir.constant(1 : i64) : i64
  %two = llvm.mlir.constant(2 : i64) : i64
  %nr = llvm.mlir.constant(FUTEX : i64) : i64
  %wait = llvm.mlir.constant(128 : i64) : i64
  %null = llvm.mlir.zero : !llvm.ptr
  %count = llvm.getelementptr %cells[1] : (!llvm.ptr) -> !llvm.ptr, i64
  %ts = llvm.getelementptr %cells[2] : (!llvm.ptr) -> !llvm.ptr, i64
  llvm.br ^loop
^loop:
  %s = llvm.load %cells atomic acquire {alignment = 8 : i64} : !llvm.ptr -> i64
  %stop = llvm.icmp "eq" %s, %two : i64
  llvm.cond_br %stop, ^done, ^more
^more:
  %on = llvm.icmp "eq" %s, %one : i64
  llvm.cond_br %on, ^tick, ^idle
^tick:
  %r1 = llvm.call @syscall(%nr, %cells, %wait, %s, %ts) vararg(!llvm.func<i64 (i64, ...)>)
      : (i64, !llvm.ptr, i64, i64, !llvm.ptr) -> i64
  %c = llvm.atomicrmw add %count, %one monotonic {alignment = 8 : i64} : !llvm.ptr, i64
  llvm.br ^loop
^idle:
  %r2 = llvm.call @syscall(%nr, %cells, %wait, %s, %null) vararg(!llvm.func<i64 (i64, ...)>)
      : (i64, !llvm.ptr, i64, i64, !llvm.ptr) -> i64
  llvm.br ^loop
^done:
  llvm.return
}

llvm.func @mx_tp_ticker_set(%cells: !llvm.ptr, %state: i64) {
  %nr = llvm.mlir.constant(FUTEX : i64) : i64
  %wake = llvm.mlir.constant(129 : i64) : i64
  %one = llvm.mlir.constant(1 : i64) : i64
  %null = llvm.mlir.zero : !llvm.ptr
  %two = llvm.mlir.constant(2 : i64) : i64
  %old = llvm.atomicrmw xchg %cells, %state seq_cst {alignment = 8 : i64} : !llvm.ptr, i64
  %changed = llvm.icmp "ne" %old, %state : i64
  %on = llvm.icmp "eq" %state, %one : i64
  %stopping = llvm.icmp "eq" %state, %two : i64
  %waking = llvm.or %on, %stopping : i1
  %go = llvm.and %changed, %waking : i1
  llvm.cond_br %go, ^wake, ^done
^wake:
  %r = llvm.call @syscall(%nr, %cells, %wake, %one, %null) vararg(!llvm.func<i64 (i64, ...)>)
      : (i64, !llvm.ptr, i64, i64, !llvm.ptr) -> i64
  llvm.br ^done
^done:
  llvm.return
}
"""


def _machine() -> str:
    m = platform.machine().lower()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(m, m)


class _Ticker:
    def __init__(self, period_us: int):
        from mlir import ir
        from mlir.execution_engine import ExecutionEngine

        self._context = ir.Context()
        with self._context, ir.Location.unknown():
            text = _IR.replace("FUTEX", str(_SYSCALL_FUTEX[_machine()]))
            self._module = ir.Module.parse(text)
            self._engine = ExecutionEngine(self._module, opt_level=2)
        packed = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
        self._loop = packed(self._engine.raw_lookup("mx_tp_ticker"))
        self._set = packed(self._engine.raw_lookup("mx_tp_ticker_set"))
        self.cells = (ctypes.c_int64 * 4)(_IDLE, 0, period_us // 1_000_000,
                                          1000 * (period_us % 1_000_000))  # fmt: skip
        self._ptr = ctypes.c_void_p(ctypes.addressof(self.cells))
        self._state = ctypes.c_int64(_IDLE)
        slots = (ctypes.c_void_p * 1)(ctypes.addressof(self._ptr))
        self._slots = slots
        self._set_slots = (ctypes.c_void_p * 2)(ctypes.addressof(self._ptr),
                                                ctypes.addressof(self._state))  # fmt: skip
        self.pid = os.getpid()
        self.thread = threading.Thread(target=self._loop, args=(slots,), daemon=True,
                                       name="mlir-mx-tp-ticker")  # fmt: skip
        self.thread.start()

    def set(self, state: int) -> None:
        self._state.value = state
        self._set(self._set_slots)


_current: list = [None]


def start(period_us: int | None = None) -> bool:
    """Start this process's ticker (on the calling thread's CPUs: call it
    after pinning); False where none runs (``TICK_US`` 0, not Linux on x86-64
    or AArch64).  Idempotent."""
    period = TICK_US if period_us is None else period_us
    t = _current[0]
    if t is not None and t.pid == os.getpid() and t.thread.is_alive():
        return True
    if period <= 0 or not sys.platform.startswith("linux") or _machine() not in _SYSCALL_FUTEX:
        return False
    _current[0] = _Ticker(period)
    return True


def stop() -> None:
    """Stop and join this process's ticker (at exit too)."""
    t = _current[0]
    if t is None or t.pid != os.getpid():
        return
    t.set(_STOP)
    t.thread.join(timeout=1.0)
    _current[0] = None


def thread_id() -> int | None:
    """The native id of this process's ticker thread (None: none runs)."""
    t = _current[0]
    return t.thread.native_id if t is not None and t.pid == os.getpid() else None


def ticks() -> int:
    """Ticks this process's ticker has made (0: none runs)."""
    t = _current[0]
    return int(t.cells[1]) if t is not None and t.pid == os.getpid() else 0


def on() -> None:
    """This process's ticker (if one runs) wakes every period until :func:`off`."""
    t = _current[0]
    if t is not None and t.pid == os.getpid():
        t.set(_ON)


def off() -> None:
    """This process's ticker (if one runs) sleeps on its futex until :func:`on`."""
    t = _current[0]
    if t is not None and t.pid == os.getpid():
        t.set(_IDLE)


atexit.register(stop)

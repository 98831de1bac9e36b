"""Our own small team of threads for ``mx-parallel-tasks`` kernels.

A call (:meth:`Pool.run`) publishes one job (the kernel's C interface, its
argument array, how many workers may join) under a new generation number,
runs the kernel on the calling thread, and returns when every worker that
*joined* the job has left it, not when every worker has arrived: the kernel's
threads claim its iterations from a shared counter (``mx-parallel-tasks``), so
a worker the OS has descheduled finds the work done when it wakes, and finds
the job closed, so it never touches a finished call's arguments.

The protocol (the caller and the workers are a few lines of LLVM IR,
JIT-compiled once, :data:`_IR`), on one block of 64-bit cells:

* ``entry`` = ``generation << 32 | joined``: a worker joins the job of the
  generation it woke for with a compare-and-swap that fails when the
  generation moved on, the caller closed the job (bit 31) or enough workers
  joined; after its own share the caller closes it (an atomic or) and reads
  how many joined, then waits until ``exited`` says they all left.
* Waiting: bounded spinning (``pause``), then a futex sleep (Linux
  ``FUTEX_WAIT_PRIVATE``) on the generation (workers) or on ``exited`` (the
  caller); a waker calls ``FUTEX_WAKE`` only when someone sleeps.  Between
  calls nothing spins longer than the bound.
* Backing off (:data:`SLOW_WAIT`): a worker descheduled *after* it joined
  holds the call until it runs again; when the caller waited longer for the
  joined workers than it worked itself, the next calls run on the caller
  alone, for a stretch that doubles while that recurs.
* A busy machine (:mod:`mlir_mx.execution.pool_load`): every few
  milliseconds a caller reads how many threads the machine has runnable; while those not
  ours and the call's team exceed the CPUs, calls run on the caller alone.
* The workers are native loops hosted by daemon Python threads (a ctypes call
  releases the GIL; they never hold it while they run or wait), started on
  the first call that needs them, stopped at exit and replaced after a fork.

Test hooks (:meth:`Pool.hooks`, reachable only by calling it; the tests use
it to force a late thread): worker 1 sleeps before it tries to join each job
(``late``), after it joined and before it runs the kernel (``inside``), or the
caller sleeps before it runs its own share (``caller``); microseconds, 0 off.

Linux on x86-64 and AArch64 (the futex system call's number); elsewhere
:func:`pool` is None and the kernels run on the calling thread alone.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import platform
import sys
import threading

from mlir_mx.execution import pool_load

__all__ = ["MAX_ALONE", "SLOW_WAIT", "SPIN", "Pool", "pool"]

# Cell indices (8 bytes each); the written-often ones on their own cache lines.
_GEN, _ENTRY, _EXITED = 0, 8, 16
_FN, _ARGS, _WANT, _SPIN, _STOP, _LATE_US, _INSIDE_US, _CALLER_US = range(32, 40)
_SKIPPED, _WORK, _WAIT, _SLEEPERS, _CALLER_SLEEPS = 40, 41, 42, 48, 56
_CELLS = 64

#: Backing off: when the caller waited for the workers that joined its call
#: longer than it worked on its own share, and longer than this many cycles
#: of the CPU's counter (``llvm.readcyclecounter``: the TSC, about 20-50 us),
#: a worker was descheduled while holding a task (a busy machine); the next
#: 8 calls, doubled while it recurs up to :data:`MAX_ALONE`, halved by each
#: call that does not, run on the caller alone.
SLOW_WAIT = 100_000
MAX_ALONE = 1024

#: Polls (``pause``) before a waiting thread sleeps: about 30-60 us on the
#: hosts measured (``docs/library.md``, "Threads").
SPIN = 2000

_FUTEX = {"x86_64": 202, "amd64": 202, "aarch64": 98, "arm64": 98}
_PAUSE = {
    "x86_64": 'llvm.call_intrinsic "llvm.x86.sse2.pause"() : () -> ()',
    "aarch64": "%h = llvm.mlir.constant(1 : i32) : i32\n"
    '  llvm.call_intrinsic "llvm.aarch64.hint"(%h) : (i32) -> ()',
}

_IR = """
llvm.func @syscall(i64, ...) -> i64
llvm.func @usleep(i32) -> i32

llvm.func @mx_pause() {
  PAUSE
  llvm.return
}

llvm.func @mx_cell(%pool: !llvm.ptr, %i: i64) -> !llvm.ptr {
  %p = llvm.getelementptr %pool[%i] : (!llvm.ptr, i64) -> !llvm.ptr, i64
  llvm.return %p : !llvm.ptr
}

llvm.func @mx_futex(%word: !llvm.ptr, %op: i64, %val: i64) {
  %nr = llvm.mlir.constant(FUTEX : i64) : i64
  %null = llvm.mlir.zero : !llvm.ptr
  %r = llvm.call @syscall(%nr, %word, %op, %val, %null) vararg(!llvm.func<i64 (i64, ...)>)
      : (i64, !llvm.ptr, i64, i64, !llvm.ptr) -> i64
  llvm.return
}

llvm.func @mx_hook(%pool: !llvm.ptr, %cell: i64) {
  %p = llvm.call @mx_cell(%pool, %cell) : (!llvm.ptr, i64) -> !llvm.ptr
  %us = llvm.load %p atomic monotonic {alignment = 8 : i64} : !llvm.ptr -> i64
  %zero = llvm.mlir.constant(0 : i64) : i64
  %on = llvm.icmp "ne" %us, %zero : i64
  llvm.cond_br %on, ^sleep, ^done
^sleep:
  %us32 = llvm.trunc %us : i64 to i32
  %r = llvm.call @usleep(%us32) : (i32) -> i32
  llvm.br ^done
^done:
  llvm.return
}

// Wait until the 32-bit word at cell %i of the pool differs from %old (or
// %stop is set): %spin polls, then futex sleeps; %flag counts the sleepers.
llvm.func @mx_wait(%pool: !llvm.ptr, %i: i64, %old: i64, %spin: i64, %flag: i64) {
  %zero = llvm.mlir.constant(0 : i64) : i64
  %one = llvm.mlir.constant(1 : i64) : i64
  %wait_op = llvm.mlir.constant(128 : i64) : i64
  %mask = llvm.mlir.constant(4294967295 : i64) : i64
  %word = llvm.call @mx_cell(%pool, %i) : (!llvm.ptr, i64) -> !llvm.ptr
  %stopi = llvm.mlir.constant(STOP : i64) : i64
  %stop = llvm.call @mx_cell(%pool, %stopi) : (!llvm.ptr, i64) -> !llvm.ptr
  %sleepers = llvm.call @mx_cell(%pool, %flag) : (!llvm.ptr, i64) -> !llvm.ptr
  llvm.br ^poll(%zero : i64)
^poll(%n: i64):
  %v = llvm.load %word atomic acquire {alignment = 8 : i64} : !llvm.ptr -> i64
  %s = llvm.load %stop atomic monotonic {alignment = 8 : i64} : !llvm.ptr -> i64
  %moved = llvm.icmp "ne" %v, %old : i64
  %stopped = llvm.icmp "ne" %s, %zero : i64
  %out = llvm.or %moved, %stopped : i1
  llvm.cond_br %out, ^done, ^more
^more:
  %spinning = llvm.icmp "ult" %n, %spin : i64
  llvm.cond_br %spinning, ^pause, ^sleep
^pause:
  llvm.call @mx_pause() : () -> ()
  %n1 = llvm.add %n, %one : i64
  llvm.br ^poll(%n1 : i64)
^sleep:
  %a = llvm.atomicrmw add %sleepers, %one seq_cst {alignment = 8 : i64} : !llvm.ptr, i64
  %v2 = llvm.load %word atomic seq_cst {alignment = 8 : i64} : !llvm.ptr -> i64
  %s2 = llvm.load %stop atomic seq_cst {alignment = 8 : i64} : !llvm.ptr -> i64
  %same = llvm.icmp "eq" %v2, %old : i64
  %going = llvm.icmp "eq" %s2, %zero : i64
  %both = llvm.and %same, %going : i1
  llvm.cond_br %both, ^futex, ^woke
^futex:
  %low = llvm.and %old, %mask : i64
  llvm.call @mx_futex(%word, %wait_op, %low) : (!llvm.ptr, i64, i64) -> ()
  llvm.br ^woke
^woke:
  %b = llvm.atomicrmw sub %sleepers, %one seq_cst {alignment = 8 : i64} : !llvm.ptr, i64
  llvm.br ^poll(%zero : i64)
^done:
  llvm.return
}

// Wake up to %count sleepers on cell %i when cell %flag says some sleep.
llvm.func @mx_wake(%pool: !llvm.ptr, %i: i64, %flag: i64, %count: i64) {
  %zero = llvm.mlir.constant(0 : i64) : i64
  %wake_op = llvm.mlir.constant(129 : i64) : i64
  %f = llvm.call @mx_cell(%pool, %flag) : (!llvm.ptr, i64) -> !llvm.ptr
  %n = llvm.load %f atomic seq_cst {alignment = 8 : i64} : !llvm.ptr -> i64
  %some = llvm.icmp "ne" %n, %zero : i64
  llvm.cond_br %some, ^wake, ^done
^wake:
  %word = llvm.call @mx_cell(%pool, %i) : (!llvm.ptr, i64) -> !llvm.ptr
  llvm.call @mx_futex(%word, %wake_op, %count) : (!llvm.ptr, i64, i64) -> ()
  llvm.br ^done
^done:
  llvm.return
}

llvm.func @mx_pool_worker(%pool: !llvm.ptr, %id: i64) {
  %zero = llvm.mlir.constant(0 : i64) : i64
  %one = llvm.mlir.constant(1 : i64) : i64
  %c32 = llvm.mlir.constant(32 : i64) : i64
  %low31 = llvm.mlir.constant(2147483647 : i64) : i64
  %closed = llvm.mlir.constant(2147483648 : i64) : i64
  %mask = llvm.mlir.constant(4294967295 : i64) : i64
  %geni = llvm.mlir.constant(GEN : i64) : i64
  %entryi = llvm.mlir.constant(ENTRY : i64) : i64
  %exitedi = llvm.mlir.constant(EXITED : i64) : i64
  %stopi = llvm.mlir.constant(STOP : i64) : i64
  %spini = llvm.mlir.constant(SPIN : i64) : i64
  %wanti = llvm.mlir.constant(WANT : i64) : i64
  %fni = llvm.mlir.constant(FN : i64) : i64
  %argsi = llvm.mlir.constant(ARGS : i64) : i64
  %skippedi = llvm.mlir.constant(SKIPPED : i64) : i64
  %sleepersi = llvm.mlir.constant(SLEEPERS : i64) : i64
  %callersi = llvm.mlir.constant(CALLER_SLEEPS : i64) : i64
  %latei = llvm.mlir.constant(LATE_US : i64) : i64
  %insidei = llvm.mlir.constant(INSIDE_US : i64) : i64
  %gen = llvm.call @mx_cell(%pool, %geni) : (!llvm.ptr, i64) -> !llvm.ptr
  %entry = llvm.call @mx_cell(%pool, %entryi) : (!llvm.ptr, i64) -> !llvm.ptr
  %exited = llvm.call @mx_cell(%pool, %exitedi) : (!llvm.ptr, i64) -> !llvm.ptr
  %stop = llvm.call @mx_cell(%pool, %stopi) : (!llvm.ptr, i64) -> !llvm.ptr
  %spinp = llvm.call @mx_cell(%pool, %spini) : (!llvm.ptr, i64) -> !llvm.ptr
  %wantp = llvm.call @mx_cell(%pool, %wanti) : (!llvm.ptr, i64) -> !llvm.ptr
  %fnp = llvm.call @mx_cell(%pool, %fni) : (!llvm.ptr, i64) -> !llvm.ptr
  %argsp = llvm.call @mx_cell(%pool, %argsi) : (!llvm.ptr, i64) -> !llvm.ptr
  %skipped = llvm.call @mx_cell(%pool, %skippedi) : (!llvm.ptr, i64) -> !llvm.ptr
  %first = llvm.load %gen atomic acquire {alignment = 8 : i64} : !llvm.ptr -> i64
  %is1 = llvm.icmp "eq" %id, %one : i64
  llvm.br ^top(%first : i64)
^top(%seen: i64):
  %spin = llvm.load %spinp atomic monotonic {alignment = 8 : i64} : !llvm.ptr -> i64
  llvm.call @mx_wait(%pool, %geni, %seen, %spin, %sleepersi) : (!llvm.ptr, i64, i64, i64, i64) -> ()
  %s = llvm.load %stop atomic acquire {alignment = 8 : i64} : !llvm.ptr -> i64
  %stopped = llvm.icmp "ne" %s, %zero : i64
  llvm.cond_br %stopped, ^exit, ^job
^job:
  %g = llvm.load %gen atomic acquire {alignment = 8 : i64} : !llvm.ptr -> i64
  llvm.cond_br %is1, ^late, ^join
^late:
  llvm.call @mx_hook(%pool, %latei) : (!llvm.ptr, i64) -> ()
  llvm.br ^join
^join:
  %w0 = llvm.load %entry atomic acquire {alignment = 8 : i64} : !llvm.ptr -> i64
  llvm.br ^try(%w0 : i64)
^try(%w: i64):
  %wg = llvm.lshr %w, %c32 : i64
  %gl = llvm.and %g, %mask : i64
  %same = llvm.icmp "eq" %wg, %gl : i64
  %cl = llvm.and %w, %closed : i64
  %open = llvm.icmp "eq" %cl, %zero : i64
  %joined = llvm.and %w, %low31 : i64
  %want = llvm.load %wantp atomic monotonic {alignment = 8 : i64} : !llvm.ptr -> i64
  %room = llvm.icmp "ult" %joined, %want : i64
  %ok1 = llvm.and %same, %open : i1
  %ok = llvm.and %ok1, %room : i1
  llvm.cond_br %ok, ^cas, ^skip
^cas:
  %w1 = llvm.add %w, %one : i64
  %pair = llvm.cmpxchg %entry, %w, %w1 acq_rel acquire {alignment = 8 : i64} : !llvm.ptr, i64
  %cur = llvm.extractvalue %pair[0] : !llvm.struct<(i64, i1)>
  %won = llvm.extractvalue %pair[1] : !llvm.struct<(i64, i1)>
  llvm.cond_br %won, ^run, ^try(%cur : i64)
^skip:
  %k = llvm.atomicrmw add %skipped, %one monotonic {alignment = 8 : i64} : !llvm.ptr, i64
  llvm.br ^top(%g : i64)
^run:
  llvm.cond_br %is1, ^inside, ^call
^inside:
  llvm.call @mx_hook(%pool, %insidei) : (!llvm.ptr, i64) -> ()
  llvm.br ^call
^call:
  %fn = llvm.load %fnp atomic monotonic {alignment = 8 : i64} : !llvm.ptr -> !llvm.ptr
  %args = llvm.load %argsp atomic monotonic {alignment = 8 : i64} : !llvm.ptr -> !llvm.ptr
  llvm.call %fn(%args) : !llvm.ptr, (!llvm.ptr) -> ()
  %e = llvm.atomicrmw add %exited, %one seq_cst {alignment = 8 : i64} : !llvm.ptr, i64
  llvm.call @mx_wake(%pool, %exitedi, %callersi, %one) : (!llvm.ptr, i64, i64, i64) -> ()
  llvm.br ^top(%g : i64)
^exit:
  llvm.return
}

llvm.func @mx_pool_run(%pool: !llvm.ptr, %fn: !llvm.ptr, %args: !llvm.ptr, %want: i64) {
  %zero = llvm.mlir.constant(0 : i64) : i64
  %one = llvm.mlir.constant(1 : i64) : i64
  %c32 = llvm.mlir.constant(32 : i64) : i64
  %low31 = llvm.mlir.constant(2147483647 : i64) : i64
  %closed = llvm.mlir.constant(2147483648 : i64) : i64
  %mask = llvm.mlir.constant(4294967295 : i64) : i64
  %geni = llvm.mlir.constant(GEN : i64) : i64
  %entryi = llvm.mlir.constant(ENTRY : i64) : i64
  %exitedi = llvm.mlir.constant(EXITED : i64) : i64
  %spini = llvm.mlir.constant(SPIN : i64) : i64
  %wanti = llvm.mlir.constant(WANT : i64) : i64
  %fni = llvm.mlir.constant(FN : i64) : i64
  %argsi = llvm.mlir.constant(ARGS : i64) : i64
  %sleepersi = llvm.mlir.constant(SLEEPERS : i64) : i64
  %callersi = llvm.mlir.constant(CALLER_SLEEPS : i64) : i64
  %calleri = llvm.mlir.constant(CALLER_US : i64) : i64
  %gen = llvm.call @mx_cell(%pool, %geni) : (!llvm.ptr, i64) -> !llvm.ptr
  %entry = llvm.call @mx_cell(%pool, %entryi) : (!llvm.ptr, i64) -> !llvm.ptr
  %exited = llvm.call @mx_cell(%pool, %exitedi) : (!llvm.ptr, i64) -> !llvm.ptr
  %spinp = llvm.call @mx_cell(%pool, %spini) : (!llvm.ptr, i64) -> !llvm.ptr
  %wantp = llvm.call @mx_cell(%pool, %wanti) : (!llvm.ptr, i64) -> !llvm.ptr
  %fnp = llvm.call @mx_cell(%pool, %fni) : (!llvm.ptr, i64) -> !llvm.ptr
  %argsp = llvm.call @mx_cell(%pool, %argsi) : (!llvm.ptr, i64) -> !llvm.ptr
  llvm.store %fn, %fnp atomic monotonic {alignment = 8 : i64} : !llvm.ptr, !llvm.ptr
  llvm.store %args, %argsp atomic monotonic {alignment = 8 : i64} : !llvm.ptr, !llvm.ptr
  llvm.store %want, %wantp atomic monotonic {alignment = 8 : i64} : i64, !llvm.ptr
  llvm.store %zero, %exited atomic monotonic {alignment = 8 : i64} : i64, !llvm.ptr
  %g0 = llvm.load %gen atomic monotonic {alignment = 8 : i64} : !llvm.ptr -> i64
  %g = llvm.add %g0, %one : i64
  %gl = llvm.and %g, %mask : i64
  %opened = llvm.shl %gl, %c32 : i64
  llvm.store %opened, %entry atomic release {alignment = 8 : i64} : i64, !llvm.ptr
  llvm.store %g, %gen atomic seq_cst {alignment = 8 : i64} : i64, !llvm.ptr
  llvm.call @mx_wake(%pool, %geni, %sleepersi, %want) : (!llvm.ptr, i64, i64, i64) -> ()
  llvm.call @mx_hook(%pool, %calleri) : (!llvm.ptr, i64) -> ()
  %t0 = llvm.call_intrinsic "llvm.readcyclecounter"() : () -> i64
  llvm.call %fn(%args) : !llvm.ptr, (!llvm.ptr) -> ()
  %t1 = llvm.call_intrinsic "llvm.readcyclecounter"() : () -> i64
  %w = llvm.atomicrmw _or %entry, %closed acq_rel {alignment = 8 : i64} : !llvm.ptr, i64
  %joined = llvm.and %w, %low31 : i64
  %spin = llvm.load %spinp atomic monotonic {alignment = 8 : i64} : !llvm.ptr -> i64
  llvm.br ^check
^check:
  %e = llvm.load %exited atomic acquire {alignment = 8 : i64} : !llvm.ptr -> i64
  %all = llvm.icmp "eq" %e, %joined : i64
  llvm.cond_br %all, ^done, ^wait
^wait:
  llvm.call @mx_wait(%pool, %exitedi, %e, %spin, %callersi) : (!llvm.ptr, i64, i64, i64, i64) -> ()
  llvm.br ^check
^done:
  %t2 = llvm.call_intrinsic "llvm.readcyclecounter"() : () -> i64
  %worki = llvm.mlir.constant(WORK : i64) : i64
  %waiti = llvm.mlir.constant(WAIT : i64) : i64
  %workp = llvm.call @mx_cell(%pool, %worki) : (!llvm.ptr, i64) -> !llvm.ptr
  %waitp = llvm.call @mx_cell(%pool, %waiti) : (!llvm.ptr, i64) -> !llvm.ptr
  %work = llvm.sub %t1, %t0 : i64
  %waited = llvm.sub %t2, %t1 : i64
  llvm.store %work, %workp {alignment = 8 : i64} : i64, !llvm.ptr
  llvm.store %waited, %waitp {alignment = 8 : i64} : i64, !llvm.ptr
  llvm.return
}
"""


def _source(machine: str) -> str:
    text = _IR.replace("PAUSE", _PAUSE.get(machine, "")).replace("FUTEX", str(_FUTEX[machine]))
    names = {
        "CALLER_SLEEPS": _CALLER_SLEEPS, "CALLER_US": _CALLER_US, "INSIDE_US": _INSIDE_US,
        "LATE_US": _LATE_US, "SKIPPED": _SKIPPED, "WORK": _WORK, "WAIT": _WAIT, "SLEEPERS": _SLEEPERS, "EXITED": _EXITED, "ENTRY": _ENTRY, "STOP": _STOP, "SPIN": _SPIN, "WANT": _WANT,
        "ARGS": _ARGS, "GEN": _GEN, "FN": _FN,
    }  # fmt: skip
    for name, cell in names.items():  # longest names first: no name is a prefix of a later one
        text = text.replace(f"({name} :", f"({cell} :")
    return text


class Pool:
    """The native team: ``workers`` threads beside the caller, a block of
    cells, and the JIT-compiled caller and worker loops (:data:`_IR`)."""

    def __init__(self, machine: str):
        from mlir import ir
        from mlir.execution_engine import ExecutionEngine

        self._context = ir.Context()
        with self._context, ir.Location.unknown():
            self._module = ir.Module.parse(_source(machine))
            self._engine = ExecutionEngine(self._module, opt_level=2)
        # Packed entry points (``void (void **)``: one slot per argument's cell).
        packed = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
        self._run = packed(self._address("mx_pool_run"))
        self._worker = packed(self._address("mx_pool_worker"))
        self._fn, self._args, self._want = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_int64()
        # 64-byte aligned cells (the hot ones on their own cache lines).
        self._block = (ctypes.c_int64 * (_CELLS + 8))()
        base = ctypes.addressof(self._block)
        self.cells = base + (-base) % 64
        self._view = (ctypes.c_int64 * _CELLS).from_address(self.cells)
        self._view[_SPIN] = SPIN
        self._threads: list[threading.Thread] = []
        self._keep: list = []
        #: calls the caller ran alone while backing off (:data:`SLOW_WAIT`)
        self.alone = 0
        self._alone = self._penalty = 0
        self._backoff = True
        self._lock = threading.Lock()
        self.pid = os.getpid()
        self._pool = ctypes.c_void_p(self.cells)
        cells = (self._pool, self._fn, self._args, self._want)
        self._slots = (ctypes.c_void_p * 4)(*(ctypes.addressof(c) for c in cells))

    def _address(self, name: str) -> int:
        address = self._engine.raw_lookup(name)
        if not address:  # pragma: no cover - the JIT always emits them
            raise RuntimeError(f"the JIT did not produce {name}")
        return address

    def _grow(self, workers: int) -> None:
        while len(self._threads) < workers:
            cells = (self._pool, ctypes.c_int64(len(self._threads) + 1))
            slots = (ctypes.c_void_p * 2)(*(ctypes.addressof(c) for c in cells))
            self._keep.append((cells, slots))
            t = threading.Thread(
                target=self._worker,
                args=(slots,),
                name=f"mlir-mx-worker-{len(self._threads) + 1}",
                daemon=True,
            )
            t.start()
            self._threads.append(t)

    def run(self, fn: int, args: int, team: int) -> bool:
        """Run the packed C interface ``fn`` on the argument array at ``args``
        (its last slot: the cell of the kernel's claims counter, zeroed by the caller) on
        the caller and up to ``team - 1`` workers.  False (nothing run) when
        another thread's call holds the pool: the caller then runs it alone."""
        if not self._lock.acquire(blocking=False):
            return False
        try:
            if self._alone or pool_load.oversubscribed(team):
                self._alone = max(0, self._alone - 1)  # backing off, or a busy machine
                self.alone += 1
                return False
            self._grow(team - 1)
            self._fn.value, self._args.value, self._want.value = fn, args, team - 1
            self._run(self._slots)
            wait, work = self._view[_WAIT], self._view[_WORK]
            if self._backoff and wait > max(work, SLOW_WAIT):
                self._penalty = min(max(2 * self._penalty, 8), MAX_ALONE)
                self._alone = self._penalty
            else:
                self._penalty //= 2
        finally:
            self._lock.release()
        return True

    @property
    def workers(self) -> int:
        """The worker threads started (the caller not counted)."""
        return len(self._threads)

    @property
    def skipped(self) -> int:
        """How many times a worker woke for a job it could not join (closed,
        moved on or full): each one a late worker that touched nothing."""
        return self._view[_SKIPPED]

    def hooks(
        self, *, late: int = 0, inside: int = 0, caller: int = 0, spin: int = SPIN,
        backoff: bool = True, load_check: int = pool_load.LOAD_CHECK,
        load_slack: int = pool_load.LOAD_SLACK,
    ) -> None:  # fmt: skip
        """Test hooks (microseconds, 0 = off), the spin bound, whether to back
        off (:data:`SLOW_WAIT`; False also ends a stretch and stops looking at the
        load) and how often to look at the machine's load (``pool_load``'s
        ``LOAD_CHECK``, 0 never; ``load_slack`` its ``LOAD_SLACK``): see the module's docstring."""
        if not backoff:
            self._alone = self._penalty = 0
        self._backoff = backoff
        pool_load.configure(load_check if backoff else 0, load_slack)
        self._view[_LATE_US], self._view[_INSIDE_US] = late, inside
        self._view[_CALLER_US], self._view[_SPIN] = caller, spin

    def stop(self) -> None:
        """Stop and join the workers (at exit; the next call would start new ones)."""
        with self._lock:
            self._view[_STOP] = 1
            _wake_all(self)
            for t in self._threads:
                t.join(timeout=1.0)
            self._threads = [t for t in self._threads if t.is_alive()]
            self._view[_STOP] = 0


def _wake_all(p: Pool) -> None:
    libc = ctypes.CDLL(None)
    libc.syscall(ctypes.c_long(_FUTEX[_machine()]), ctypes.c_void_p(p.cells + 8 * _GEN),
                 ctypes.c_long(129), ctypes.c_long(1 << 30))  # fmt: skip


def _machine() -> str:
    m = platform.machine().lower()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(m, m)


_state: dict = {}
_state_lock = threading.Lock()


def pool() -> Pool | None:
    """The process's pool (made on first use; a new one after a fork), or None
    where it cannot run (not Linux on x86-64 or AArch64)."""
    p = _state.get("pool")
    if p is not None and p.pid == os.getpid():
        return p
    if not sys.platform.startswith("linux") or _machine() not in _FUTEX:
        return None
    with _state_lock:
        p = _state.get("pool")
        if p is None or p.pid != os.getpid():
            p = _state["pool"] = Pool(_machine())
    return p


@atexit.register
def _stop_at_exit() -> None:
    p = _state.get("pool")
    if p is not None and p.pid == os.getpid():
        p.stop()

"""Measure this machine's ceilings and time kernels through the Runner.

Ceilings (both written as MLIR and compiled by :class:`~mlir_mx.execution.Runner`
with the ``lower-to-llvm`` pipeline):

* **bandwidth**: a STREAM triad ``a[i] = b[i] + s * c[i]`` over three f32
  arrays much larger than the last-level cache (``vector<16xf32>`` loads,
  ``vector.fma``, stores); bytes counted the STREAM way, 12 per element
  (write-allocate traffic is not counted).
* **peak**: a register-resident loop of ``vector.fma`` on one vector
  register's f32 lanes (:func:`fma_lanes`: 16 with AVX-512, 8 with AVX2, 4
  on NEON) with :data:`FMA_ACCUMULATORS` independent accumulators (enough to
  cover the FMA latency, and with the two constants within AVX2's 16
  registers), 2 FLOPs per lane per FMA.

With ``threads > 1`` both run as ``threads`` parallel tasks of the kernels'
own threading (``scf.parallel`` on upstream's async runtime), each on its
own slice (bandwidth) or its own loop (peak), best of several tries; the
figures are the sums.
numpy's figures are reported beside them for reference: ``np.copyto``
bandwidth (2 x nbytes per copy) and a large ``np.dot`` in GFLOP/s (numpy's
BLAS uses its own threads).

Kernels: :func:`time_kernel` runs a variant's ``@bench`` (the contraction in
an ``scf.for``, ``n`` calls per native entry) and reports per-call times:
median, min, max and spread over several samples after a warm-up.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from mlir_mx.errors import MXValueError, expect_type
from mlir_mx.execution import Runner
from mlir_mx.host import has_features, host_arch, machine_description
from mlir_mx.roofline.machines import MACHINES, Machine
from mlir_mx.roofline.pinned import PinnedTeam, probe_cpus
from mlir_mx.roofline.variants import VARIANTS, Shape, variant_module_text

__all__ = [
    "FMA_ACCUMULATORS",
    "fma_lanes",
    "FmaProbe",
    "host_share",
    "KernelTiming",
    "Timing",
    "get_machine",
    "measure_bandwidth",
    "measure_machine",
    "measure_peak",
    "numpy_bandwidth",
    "numpy_gflops",
    "time_kernel",
    "time_repeated",
]

FMA_ACCUMULATORS = 12
_LANES = 16


@dataclass
class Timing:
    """Per-call seconds over ``samples`` samples of ``calls`` calls each."""

    median: float
    min: float
    max: float
    samples: int
    calls: int

    @property
    def spread(self) -> float:
        """``(max - min) / median``."""
        return (self.max - self.min) / self.median if self.median else 0.0


def time_repeated(
    run: Callable[[int], None],
    *,
    samples: int = 7,
    target_s: float = 0.02,
    budget_s: float = 3.0,
) -> Timing:
    """Time ``run(n)`` (n calls) and return per-call statistics.

    One calibration call (also the warm-up) picks ``n`` so that one sample
    takes about ``target_s``; then up to ``samples`` samples, fewer (at least
    3) when they would exceed ``budget_s``.
    """
    t0 = time.perf_counter()
    run(1)
    one = max(time.perf_counter() - t0, 1e-9)
    n = max(1, int(target_s / one))
    run(n)  # warm-up at the sample size
    if samples * n * one > budget_s:
        samples = max(3, int(budget_s / (n * one)))
    per_call = []
    for _ in range(samples):
        t0 = time.perf_counter()
        run(n)
        per_call.append((time.perf_counter() - t0) / n)
    per_call.sort()
    return Timing(float(np.median(per_call)), per_call[0], per_call[-1], len(per_call), n)


# ================================================================ kernel timing


@dataclass
class KernelTiming:
    variant: str
    shape: Shape
    timing: Timing
    max_abs_error: float  # of one call against numpy on the dequantized operands


def _inputs(v, shape: Shape, element: str, block_size: int, rng):
    from mlir_mx.convert import dequantize, quantize

    args: list[np.ndarray] = []

    def operand(shape2, mx: bool, axis: int) -> np.ndarray:
        """Random f32 operand; when mx, its codes in their stored form (FP4/FP6
        packed: the ``i8`` bytes the lowering's ``subbyte-storage=packed``
        boundary takes) and scales, from the compiled quantize (the oracle's bits), and
        its exact values."""
        x = rng.standard_normal(shape2).astype(np.float32)
        if not mx:
            args.append(x)
            return x
        q = quantize(x, element, block_size, axis=axis)
        codes = q.packed_codes().view(np.int8) if q.is_packed else q.codes  # i8 bytes
        args.extend([np.ascontiguousarray(codes), np.ascontiguousarray(q.scales)])
        return dequantize(q)

    a = operand((shape.M, shape.K), v.lhs_mx, 1)
    b = operand((shape.K, shape.N), v.rhs_mx, 0)
    return args, a.astype(np.float64) @ b.astype(np.float64)


def time_kernel(
    variant: str,
    shape: Shape,
    element: str = "f8E4M3FN",
    block_size: int = 32,
    *,
    samples: int = 7,
    budget_s: float = 3.0,
    seed: int = 0,
) -> KernelTiming:
    """Compile ``variant`` at ``shape`` through the Runner and time ``@bench``."""
    from mlir_mx.pipelines import load_pipeline
    from mlir_mx.roofline.ir_model import lower_to_linalg

    v = VARIANTS[variant]
    text = variant_module_text(variant, shape, element, block_size)
    lowered = lower_to_linalg(text, v.matmul_lowering)

    pipeline = load_pipeline("lower-to-llvm")
    if v.exec_pipeline:
        pipeline = load_pipeline(v.exec_pipeline) + pipeline
    runner = Runner(lowered, pipeline)
    rng = np.random.default_rng(seed)
    args, ref = _inputs(v, shape, element, block_size, rng)
    acc = np.zeros((shape.M, shape.N), np.float32)
    out = runner.invoke("bench", *args, acc, 1)
    err = float(np.max(np.abs(out - ref))) if out.size else 0.0

    def run(n: int) -> None:
        runner.invoke("bench", *args, acc, n)

    timing = time_repeated(run, samples=samples, budget_s=budget_s)
    return KernelTiming(variant, shape, timing, err)


# ================================================================== ceilings

_TRIAD = f"""
func.func @triad(%a: memref<?xf32>, %b: memref<?xf32>, %c: memref<?xf32>, %s: f32, %reps: index,
                 %parts: index) {{
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %cl = arith.constant {_LANES} : index
  %n = memref.dim %a, %c0 : memref<?xf32>
  %chunk = arith.divui %n, %parts : index
  %sv = vector.broadcast %s : f32 to vector<{_LANES}xf32>
  scf.parallel (%p) = (%c0) to (%parts) step (%c1) {{
    %lo = arith.muli %p, %chunk : index
    %hi = arith.addi %lo, %chunk : index
    scf.for %r = %c0 to %reps step %c1 {{
      scf.for %i = %lo to %hi step %cl {{
        %vb = vector.load %b[%i] : memref<?xf32>, vector<{_LANES}xf32>
        %vc = vector.load %c[%i] : memref<?xf32>, vector<{_LANES}xf32>
        %va = vector.fma %vc, %sv, %vb : vector<{_LANES}xf32>
        vector.store %va, %a[%i] : memref<?xf32>, vector<{_LANES}xf32>
      }}
    }}
    scf.reduce
  }}
  return
}}
"""


def fma_lanes() -> int:
    """f32 lanes of one vector register of the code the kernels are compiled
    for (the masked features): 16 (AVX-512), 8 (AVX2), 4 (NEON).  The peak
    loop keeps its accumulators in registers only at this width: AVX2's 16
    ymm registers hold 12 accumulators of 8 lanes, not of 16 (24 halves and
    spills: 17.9 against 118 GFLOP/s on a Zen 4 core masked to AVX2)."""
    if host_arch() != "x86_64":
        return 4
    return 16 if has_features("avx512f") else 8


def _fma_text(acc: int = FMA_ACCUMULATORS, lanes: int | None = None) -> str:
    """``@fma_peak(x, n, out)``: ``out.dim`` parallel tasks, each ``n``
    iterations of ``acc`` independent ``vector.fma``; task ``t`` stores its sum
    in ``out[t]`` (so nothing is dead)."""
    vt = f"vector<{lanes or fma_lanes()}xf32>"
    inits = "\n".join(
        f"    %k{i} = arith.constant {float(i) + 1.0:e} : f32\n"
        f"    %s{i} = arith.addf %x, %k{i} : f32\n"
        f"    %v{i} = vector.broadcast %s{i} : f32 to {vt}"
        for i in range(acc)
    )
    iters = ", ".join(f"%x{i} = %v{i}" for i in range(acc))
    types = ", ".join([vt] * acc)
    body = "\n".join(f"      %y{i} = vector.fma %x{i}, %m, %d : {vt}" for i in range(acc))
    ys = ", ".join(f"%y{i}" for i in range(acc))
    sums = ["%r#0"]
    sum_lines = []
    for i in range(1, acc):
        sum_lines.append(f"    %t{i} = arith.addf {sums[-1]}, %r#{i} : {vt}")
        sums.append(f"%t{i}")
    sum_text = "\n".join(sum_lines)
    return f"""
func.func @fma_peak(%x: f32, %n: index, %out: memref<?xf32>) {{
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %tasks = memref.dim %out, %c0 : memref<?xf32>
  %m = arith.constant dense<0.999999> : {vt}
  %d = arith.constant dense<1.0e-06> : {vt}
  scf.parallel (%p) = (%c0) to (%tasks) step (%c1) {{
{inits}
    %r:{acc} = scf.for %i = %c0 to %n step %c1 iter_args({iters}) -> ({types}) {{
{body}
      scf.yield {ys} : {types}
    }}
{sum_text}
    %red = vector.reduction <add>, {sums[-1]} : {vt} into f32
    memref.store %red, %out[%p] : memref<?xf32>
    scf.reduce
  }}
  return
}}
"""


def _ceiling_runner(text: str, threads: int) -> Runner:
    """``text`` compiled with the kernels' own threading: its ``scf.parallel``
    becomes tasks of upstream's async runtime on ``threads`` workers, as the
    generated matmul kernels' do (Python threads measured the GIL and the
    scheduler, not the machine: a 2-thread peak equal to the 1-thread one)."""
    from mlir_mx.pipelines import kernel_library_pipeline

    return Runner(text, kernel_library_pipeline(threads))


def _best_of(reps: int, run: Callable[[], float]) -> tuple[float, float]:
    """(best, median) of ``reps`` rates ``run()`` returns."""
    rates = sorted(run() for _ in range(reps))
    return rates[-1], float(np.median(rates))


def measure_bandwidth(
    threads: int = 1, mib_per_array: int = 256, reps: int = 5
) -> tuple[float, float]:
    """STREAM-triad bandwidth (bytes/s): (best, median) over ``reps`` passes,
    ``threads`` parallel tasks of the kernels' own threading."""
    runner = _ceiling_runner(_TRIAD, threads)
    n = mib_per_array * (1 << 20) // 4
    n -= n % (_LANES * threads)
    a = np.zeros(n, np.float32)
    b = np.full(n, 1.0, np.float32)
    c = np.full(n, 2.0, np.float32)
    call = runner.bind("triad", a, b, c, 3.0, 1, threads)
    call()  # warm-up: page faults

    def rate() -> float:
        t0 = time.perf_counter()
        call()
        return 12.0 * n / (time.perf_counter() - t0)

    best = _best_of(reps, rate)
    if not np.allclose(a[:16], 7.0) or not np.allclose(a[-16:], 7.0):
        raise RuntimeError("triad kernel produced wrong values")
    return best


class FmaProbe:
    """The FMA peak loop (``@fma_peak``) at ``threads`` threads, sized to run
    about ``seconds``.

    :meth:`rate` is the FLOP/s the cores deliver to this process now. Over a
    run it is the check for contention the guest cannot see: a host that
    places the vCPUs beside another tenant's busy threads slows a loop of
    registers only, while ``/proc/stat`` shows no other process and no steal
    (``bench/results/zen4-s60-2026-12-06.md``: a 12-chain FMA loop 0.90-1.81x
    slower as a pair than alone). ``mx-bench`` runs a probe before and after
    each timing (:func:`host_share`).

    ``pinned`` (default: where ``threads > 1`` and the OS can pin): one
    thread per CPU of the first ``threads`` of the process's affinity mask,
    each running the 1-thread loop at once; the rate is ``threads`` loops
    over the slowest thread's time. Unpinned (the kernels' own threading,
    :func:`measure_peak`'s) a probe after an idle gap measured the scheduler,
    not the host: the woken worker was placed on the waking thread's vCPU
    (in 25 of 40 gaps of 50 ms on the developers' 2-vCPU Zen 4, a pthread
    pair in C alike) and the pair ran at 50 % until the load balancer moved
    it; back to back, or pinned, it ran at the peak."""

    def __init__(self, threads: int = 1, seconds: float = 0.005, pinned: bool | None = None):
        lanes = fma_lanes()
        cpus = probe_cpus(threads) if pinned is not False else None
        if pinned and threads > 1 and cpus is None:
            raise MXValueError(f"pinned: cannot pin {threads} thread(s) on this host")
        self.threads = threads
        self.cpus = cpus if threads > 1 else None
        team = 1 if self.cpus else threads
        self._runner = _ceiling_runner(_fma_text(lanes=lanes), team)
        self._flops_per_iteration = FMA_ACCUMULATORS * lanes * 2 * threads
        self._outs = [np.zeros(team, np.float32) for _ in range(len(self.cpus or [0]))]
        t0 = time.perf_counter()
        self._runner.invoke("fma_peak", 0.5, 100_000, self._outs[0])
        one = max(time.perf_counter() - t0, 1e-6) / 100_000
        self.iterations = max(1000, int(seconds / one))
        calls = [self._runner.bind("fma_peak", 0.5, self.iterations, out) for out in self._outs]
        self._team = PinnedTeam(calls, self.cpus) if self.cpus else None
        self._call = calls[0]
        #: the highest rate :meth:`rate` has returned
        self.best = 0.0

    def rate(self) -> float:
        """One run's FLOP/s (every thread's FMAs over the slowest one's time)."""
        if self._team is not None:
            seconds = self._team.run()
        else:
            t0 = time.perf_counter()
            self._call()
            seconds = time.perf_counter() - t0
        got = self._flops_per_iteration * self.iterations / seconds
        self.best = max(self.best, got)
        return got

    def close(self) -> None:
        """Stop the pinned threads (a no-op unpinned, or when closed already)."""
        if self._team is not None:
            self._team.close()
            self._team = None


def host_share(probe: FmaProbe, peak: float) -> float:
    """One probe run's rate over the best known (``peak``, or the probe's own
    best if higher), at most 1: the share of the FMA rate the cores give now."""
    got = probe.rate()
    return min(1.0, got / max(peak, probe.best))


def measure_peak(threads: int = 1, seconds: float = 0.3, reps: int = 5) -> tuple[float, float]:
    """Peak f32 FMA rate (FLOP/s): (best, median) over ``reps`` runs of
    ``threads`` parallel tasks of the kernels' own threading."""
    return _best_of(reps, FmaProbe(threads, seconds, pinned=False).rate)


def numpy_bandwidth(mib: int = 256, reps: int = 5) -> float:
    """``np.copyto`` bandwidth (bytes/s, 2 x nbytes per copy), best of ``reps``."""
    src = np.ones(mib * (1 << 20) // 4, np.float32)
    dst = np.empty_like(src)
    np.copyto(dst, src)
    best = 0.0
    for _ in range(reps):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        best = max(best, 2.0 * src.nbytes / (time.perf_counter() - t0))
    return best


def numpy_gflops(n: int = 2048, reps: int = 3) -> float:
    """A large f32 ``np.dot`` in FLOP/s (``2 n^3`` per product), best of ``reps``."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    np.dot(a, b)
    best = 0.0
    for _ in range(reps):
        t0 = time.perf_counter()
        np.dot(a, b)
        best = max(best, 2.0 * n**3 / (time.perf_counter() - t0))
    return best


def get_machine(name: str, *, threads: int = 1, progress=None) -> Machine:
    """A preset of :data:`~mlir_mx.roofline.machines.MACHINES` by name, or
    ``"measure"``: this machine's measured ceilings.  Any other name is an
    :class:`~mlir_mx.errors.MXValueError` listing the valid ones."""
    expect_type(name, str, "name", "a machine name (a str)")
    if name == "measure":
        return measure_machine(threads=threads, progress=progress)
    m = MACHINES.get(name)
    if m is None:
        raise MXValueError(f"unknown machine '{name}' (available: {', '.join(MACHINES)}, measure)")
    return m


def measure_machine(threads: int = 1, progress: Callable[[str], None] | None = None) -> Machine:
    """Measure this machine's ceilings (a few seconds) and return a :class:`Machine`."""
    say = progress or (lambda s: None)
    t0 = time.perf_counter()
    say(f"measuring memory bandwidth (MLIR STREAM triad, {threads} thread(s))...")
    bw, bw_med = measure_bandwidth(threads)
    say(f"  triad {bw / 1e9:.1f} GB/s (median {bw_med / 1e9:.1f}); numpy copyto...")
    np_bw = numpy_bandwidth()
    say(f"  np.copyto {np_bw / 1e9:.1f} GB/s")
    say(f"measuring peak f32 rate (MLIR vector.fma x{FMA_ACCUMULATORS}, {threads} thread(s))...")
    peak, peak_med = measure_peak(threads)
    say(f"  fma loop {peak / 1e9:.1f} GFLOP/s (median {peak_med / 1e9:.1f}); numpy dot...")
    np_fl = numpy_gflops()
    say(f"  np.dot {np_fl / 1e9:.1f} GFLOP/s  ({time.perf_counter() - t0:.1f} s)")
    return Machine(
        "measured",
        bandwidth=bw,
        peak=peak,
        ridge_band=0.0,
        source=f"measured on {machine_description()}, {threads} thread(s)",
        threads=threads,
        reference={"numpy copyto GB/s": np_bw, "numpy dot GFLOP/s": np_fl},
        details={
            "bandwidth kernel": "MLIR STREAM triad, 3 x 256 MiB f32, 12 B/element",
            "peak kernel": f"MLIR vector.fma vector<{_LANES}xf32> x {FMA_ACCUMULATORS} accumulators",
            "bandwidth median GB/s": f"{bw_med / 1e9:.2f}",
            "peak median GFLOP/s": f"{peak_med / 1e9:.2f}",
        },
    )

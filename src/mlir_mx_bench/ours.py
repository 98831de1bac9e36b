"""Our compiled kernels, as benchmark methods.

:func:`our_kernels` is the ONE list of our kernels that ``mx-bench`` times
(one row per schedule of the registry that supports the problem);
everything else here turns its entries into checked, timed methods.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from mlir_mx.convert import dequantize, quantize
from mlir_mx.execution import Runner
from mlir_mx.kernels import SCHEDULES, plan_kernel, shape_class
from mlir_mx.kernels import Problem as KProblem
from mlir_mx.numerics.formats import SCALE_TYPE, block_scaling
from mlir_mx.roofline.variants import Shape, variant_module_text

from .cases import BenchFailure, Oracle, Problem, stored_mx_bytes
from .method import Method, linear_call_method

__all__ = ["OurKernel", "linear_f32_method", "our_methods", "our_kernels", "runner_methods"]


@dataclass(frozen=True)
class OurKernel:
    """One of our kernels: how to build it and how to call it.

    ``build()`` returns a :class:`~mlir_mx.execution.Runner` (or anything with
    the same ``invoke``) whose ``entry`` function takes the operands, the f32
    (M, N) accumulator and a call count ``n`` (``C += A B``, ``n`` times; the
    ``@bench`` convention of :mod:`mlir_mx.roofline.variants`).
    ``operands`` is ``"mx-ab"`` (mx x mx: called with ``qa, qb``) or
    ``"mx-a"`` (mx x f32: ``qa`` and the dequantized ``db``); ``args`` maps
    them to the kernel's own list (an NVFP4 B: ``qa, qb, g``, its global scale).
    ``kernel_threads`` is the number of threads the kernel really uses.
    """

    label: str
    operands: str
    build: Callable[[], Runner]
    kernel_threads: int
    schedule: str
    entry: str = "bench"
    #: the kernel's arguments from (qa, qb or db); default: the two as they are
    args: Callable | None = None
    #: bytes of B as this kernel stores it (default: one code per byte)
    b_bytes: Callable[[int, int, int], int] | None = None
    #: A's MX format in this kernel when it is not the problem's A (an nvfp4
    #: problem: the E8M0 A of ``mx.block_matmul``'s lhs; its own oracle)
    a_element: str | None = None


def our_kernels(
    shape: Shape,
    threads: int,
    element: str = "f8E4M3FN",
    block_size: int = 32,
    a_element: str | None = None,
) -> list[OurKernel]:
    """Our kernels to time at ``shape`` in a group run at ``threads`` threads.

    One :class:`OurKernel` per kernel/schedule to compare, each with an
    honest ``kernel_threads``, derived from the schedule registry
    (:data:`mlir_mx.kernels.SCHEDULES`): a new schedule is a new row without
    an edit here.  The harness compiles each (timing the compile), checks it
    against the oracle and times it.

    The generated kernels of ``mx-matmul-kernels`` through the Runner's
    default pipeline: mx x mx and mx x f32 with the schedule ``auto`` picks
    for this M, and mx x mx with each other schedule ("per schedule"), all
    on ``threads`` threads.  Then ``mlir_mx.Linear`` on B as its weight
    where it runs the dot kernels (``kernels/dot/kernel.py``): with the MX A, and
    with the f32 A quantized to A's format inside the kernel
    (``activations=``).  ``a_element``: A's format when it differs from B's.

    An NVFP4 B (``element="nvfp4"``): the Runner's kernels take it with its
    global scale as the extra f32 argument (``@bench(A, B, g, C, n)``), and an
    E8M0 A: ``a_element`` where it is one, else MXFP4 in blocks of 16 (an
    NVFP4 A has no ``mx.block_matmul``); mx x mx rows only (an f32 B has no
    NVFP4 in it).
    """
    b_fmt, b_scale = block_scaling(element)
    nvfp4 = b_scale != SCALE_TYPE
    a_element = a_element or element
    if block_scaling(a_element)[1] != SCALE_TYPE:  # the lhs is E8M0-scaled
        a_element = b_fmt.name
    prob = KProblem(
        shape.M, shape.N, shape.K, block_size, a_element, b_fmt.name, b_scale_type=b_scale
    )
    chosen = plan_kernel(prob, "auto", threads).name

    def _auto(operands: str) -> str:  # what auto runs for mx x mx / mx x f32
        if operands == "mx-ab":
            return chosen
        f32_b = KProblem(shape.M, shape.N, shape.K, block_size, a_element, None)
        return plan_kernel(f32_b, "auto", threads).name

    kernels = []
    rows = [("mx-ab", "ours mx x mx", "auto")] + ([] if nvfp4 else [("mx-a", "ours mx x f32", "auto")])
    # Every other schedule that supports the problem (the decode schedule
    # only at M = 1: one row at a time is its whole design).
    rows += [
        ("mx-ab", f"ours mx x mx {s.name}", s.name)
        for s in SCHEDULES.values()
        if s.name != chosen
        and s.supports(prob)
        and (s.shape_class != shape_class(1) or shape.M == 1)
    ]
    for operands, label, schedule in rows:
        text = variant_module_text(operands, shape, element, block_size, a_element)
        kernels.append(
            OurKernel(
                label=label,
                operands=operands,
                build=lambda t=text, s=schedule: Runner(t, threads=threads, schedule=s),
                kernel_threads=threads,
                schedule=f"mx-matmul-kernels {_auto(operands) if schedule == 'auto' else schedule}",
                **(_nvfp4_fields(b_fmt.name, a_element) if nvfp4 else {}),
            )
        )
    return kernels


def _nvfp4_fields(b_element: str, a_element: str) -> dict:
    """An NVFP4 B's :class:`OurKernel` fields: the global scale as the f32
    argument after the operands, B's bytes (packed E2M1 codes, E4M3 scales,
    the 4-byte scale), A's E8M0 format."""
    return dict(
        args=lambda qa, qb: (qa, qb, np.float32(qb.global_scale)),
        b_bytes=lambda k, n, bs: stored_mx_bytes(k, n, bs, b_element) + 4,
        a_element=a_element,
    )


def _kernel_a(p: Problem, v: OurKernel) -> tuple:
    """``(qa, oracle)`` of kernel ``v``: the problem's, or (``v.a_element``)
    ``p.a`` quantized to that MX format along K and ``dequantize(qa) @ db``."""
    if v.a_element in (None, p.a_format):
        return p.qa, p.oracle
    key = f"runner-a-{v.a_element}"
    if key not in p.cache:
        qa = quantize(p.a, v.a_element, p.block_size, axis=1)
        p.cache[key] = (qa, Oracle.of(dequantize(qa), p.db))
    return p.cache[key]


def linear_rows(p: Problem) -> list[tuple[str, str | None]]:
    """``mlir_mx.Linear`` rows for a problem whose pair the dot kernels serve
    at its shape (``kernels/dot/kernel.py``): (label, activations) with the MX A
    (None) and with the f32 A quantized to A's format inside the kernel."""
    from mlir_mx.kernels import choose
    from mlir_mx.kernels.dot.units import dot_kind

    kind = dot_kind(p.a_format, p.element, p.block_size)
    if kind is None:
        return []
    # B as the dot records Linear makes: only the dot schedules support it.
    s = p.shape
    records = KProblem(s.M, s.N, s.K, p.block_size, p.a_format, p.element, b_dot=kind.name)
    if choose(records, required=False) is None:
        return []
    return [("ours Linear mx x mx", None), (f"ours Linear f32->{p.a_format}", p.a_format)]


def linear_f32_method(p: Problem, threads: int, say) -> Method:
    """``mlir_mx.Linear(B)(a)``: the f32 activations as they are, the exact
    default path of ``Linear`` and ``mlir_mx.torch`` (the f32 kernels)."""
    import mlir_mx

    t0 = time.perf_counter()
    lin = mlir_mx.Linear(p.qb, threads=threads)
    schedule = lin.schedule(p.a)
    say(f"    compiling ours Linear f32 x ({schedule})...")
    lin(p.a)  # compiles
    return linear_call_method(
        p, threads, lin, "ours Linear f32 x", t0, oracle=p.f32_a_oracle,
        note=f"schedule {schedule} (mlir_mx.Linear, f32 activations)",
    )  # fmt: skip


def _linear_methods(p: Problem, threads: int, say) -> list[Method]:
    import mlir_mx

    s = p.shape
    from .bf16_rows import bf16_methods  # activations="bf16", beside the exact path

    methods = [linear_f32_method(p, threads, say), *bf16_methods(p, threads, say)]
    for label, act in linear_rows(p):
        x = p.qa if act is None else p.a
        t0 = time.perf_counter()
        # activations=A's format: the Linear holds the dot kernels' records where
        # they serve the pair (mlir_mx.linear.weight_form.records_unit), else its codes;
        # an MX x runs on them as given.
        lin = mlir_mx.Linear(p.qb, threads=threads, activations=p.a_format)
        schedule = lin.schedule(x)
        say(f"    compiling {label} ({schedule})...")
        lin(x)  # compiles
        compile_s = time.perf_counter() - t0
        a_bytes = 4 * s.M * s.K if act else stored_mx_bytes(s.M, s.K, p.block_size, p.a_format)
        methods.append(
            Method(
                label,
                "ours",
                threads,
                a_bytes + lin.nbytes + 4 * s.M * s.N,  # A, B as held, C written
                run=lambda n, f=lin, a=x: [f(a) for _ in range(n)],
                result=lambda f=lin, a=x: f(a),
                oracle=p.oracle,
                compile_s=compile_s,
                operands="mx-ab",
                note=f"schedule {schedule} (mlir_mx.Linear"
                + (f", activations={act!r})" if act else ")"),
            )
        )
    return methods


def _engine_key(runner) -> int | None:
    engine = getattr(runner, "engine", None)
    return id(engine) if engine is not None else None


def our_methods(
    p: Problem, threads: int, compiled: dict[int, float], say: Callable[[str], None]
) -> list[Method]:
    """:func:`runner_methods`, then the ``mlir_mx.Linear`` rows."""
    return runner_methods(p, threads, compiled, say) + _linear_methods(p, threads, say)


def runner_methods(
    p: Problem, threads: int, compiled: dict[int, float], say: Callable[[str], None]
) -> list[Method]:
    """Build (compile, timed) every :func:`our_kernels` entry as a :class:`Method`.

    ``compiled`` maps an engine's id to its compile seconds across the run: a
    kernel the Runner's cache already holds (same module and pipeline at
    another thread count) reports the seconds of its first compile.
    """
    s, bs = p.shape, p.block_size
    methods = []
    for v in our_kernels(s, threads, p.element, bs, p.a_format):
        if v.operands not in ("mx-ab", "mx-a"):
            raise ValueError(f"{v.label}: unknown operands {v.operands!r}")
        say(f"    compiling {v.label} ({v.schedule})...")
        t0 = time.perf_counter()
        try:
            runner = v.build()
        except Exception as err:  # a kernel that does not compile fails the run
            first = (str(err).strip().splitlines() or [type(err).__name__])[0]
            raise BenchFailure(f"{v.label} at {p.where}: does not compile: {first}") from err
        if isinstance(runner, Runner):
            # LLJIT emits machine code at the first symbol lookup: count it.
            runner.entry(v.entry)
        seconds = time.perf_counter() - t0
        key = _engine_key(runner)
        cached = key in compiled
        if key is not None and not cached:
            compiled[key] = seconds
        compile_s = compiled[key] if cached else seconds
        qa, oracle = _kernel_a(p, v)
        args = (qa, p.qb) if v.operands == "mx-ab" else (qa, p.db)
        if v.args is not None:
            args = v.args(*args)
        # Operands as the Runner passes them: FP4/FP6 codes packed where the
        # shape packs (mx-to-linalg{subbyte-storage=packed}, the default).
        if v.b_bytes is not None:
            b_bytes = v.b_bytes(s.K, s.N, bs)
        else:
            b_bytes = stored_mx_bytes(s.K, s.N, bs, p.element) if v.operands == "mx-ab" else 4 * s.K * s.N
        acc = np.zeros((s.M, s.N), np.float32)

        def run(n, r=runner, e=v.entry, a=args, c=acc):
            r.invoke(e, *a, c, n)

        def result(r=runner, e=v.entry, a=args):
            c = np.zeros((s.M, s.N), np.float32)
            out = r.invoke(e, *a, c, 1)
            return c if out is None else out

        note = f"schedule {v.schedule}"
        if v.kernel_threads < threads:
            note += f"; single-threaded kernel: runs on {v.kernel_threads} of {threads} threads"
        if v.a_element not in (None, p.a_format):
            note += f"; A in {v.a_element}, blocks of {bs} (E8M0), its own oracle"
        if cached:
            note += "; compiled earlier in this run (Runner cache)"
        methods.append(
            Method(
                v.label,
                "ours",
                v.kernel_threads,
                # A and B as stored, the accumulator read and written.
                stored_mx_bytes(s.M, s.K, bs, qa.format_name) + b_bytes + 8 * s.M * s.N,
                run=run,
                result=result,
                oracle=oracle,
                compile_s=compile_s,
                operands=v.operands,
                note=note,
            )
        )
    return methods

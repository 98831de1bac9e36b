"""The differential tester: random mx programs, every pipeline, the oracle.

:func:`random_program` builds a small function from the four mx ops (random
shapes, element formats, block sizes and axes; constant and runtime
``fold_scale`` alphas; the patterns the canonicalizer looks for), and
:func:`random_inputs` feeds it NaN, +-Inf, +-0, f32 subnormals, saturating
magnitudes and MX operands with scale codes 0, 254 and 255.  :func:`check`
compiles a batch of programs with every :data:`VARIANTS` entry, with and
without ``--canonicalize`` first, runs them, and compares
(``docs/testing.md``, the claims are in ``docs/numerics.md``):

* every quantize / dequantize / fold_scale result with the oracle, bit for
  bit (NaN payloads aside);
* every variant with its own canonicalized build, bit for bit: a rewrite
  never changes a result;
* ``block_matmul`` results with the exact sum, within the documented bound
  (:func:`matmul_bound`), and bit for bit between variants that claim the
  same summation order (the same ``matmul_order``).

The pipelines compared are the ONE list :data:`VARIANTS`; a new lowering or
kernel schedule is one :func:`register_variant` call.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from mlir_mx import numerics as N
from mlir_mx.host import has_features
from mlir_mx.kernels.registry import SCHEDULES
from mlir_mx.numerics.matmul import matmul_bound, matmul_reference
from mlir_mx.passes.pipeline import Pipeline, PipelineElement, as_pipeline
from mlir_mx_testing.programs import Program, random_inputs, random_program

__all__ = [
    "Variant", "VARIANTS", "register_variant", "then_llvm", "Program", "random_program", "random_inputs",
    "matmul_bound", "evaluate", "check", "run", "Report",
]  # fmt: skip


@dataclass(frozen=True)
class Variant:
    """One way to compile a program.

    ``pipeline()`` returns the pipeline (None: the Runner's default);
    ``matmul_order`` names the f32 operation order its block_matmul claims:
    variants with the same order must agree bit for bit; ``supports(program)``
    says whether the pipeline handles the program (e.g. a schedule's tile
    constraints); ``features``, an ``MLIR_MX_CPU_FEATURES`` value the kernels
    are generated under (a CPU without AVX-512: the 256-bit dot kernels);
    ``kernels``, whether it is one of the generated kernel schedules (the
    quick set builds only the other variants after ``--canonicalize``).
    """

    name: str
    pipeline: Callable[[], Pipeline | str | None]
    matmul_order: str | None = None
    supports: Callable[[Program], bool] = lambda program: True
    features: str | None = None
    kernels: bool = False


def then_llvm(prefix: Pipeline | PipelineElement | str) -> Callable[[], Pipeline]:
    """A pipeline factory: ``prefix`` (a pipeline or an element; text is
    parsed, ``@name`` is a shipped pipeline) followed by ``lower-to-llvm``."""

    def pipeline() -> Pipeline:
        from mlir_mx.pipelines import load_pipeline

        head = prefix
        if isinstance(prefix, str) and prefix.startswith("@"):
            head = load_pipeline(prefix[1:])
        return as_pipeline(head) + load_pipeline("lower-to-llvm")

    return pipeline


def _to_linalg(**options) -> PipelineElement:
    return PipelineElement.of("mx-to-linalg", **options)


def _vectorizable_fused(p: Program) -> bool:
    # the [8, 32, 32] tile of mx-vectorize: K blocked by 32, N within one tile
    return all(mm.block_size == 32 and mm.n <= 32 and mm.m <= 8 for mm in p.matmuls)


FEATURES_VAR = "MLIR_MX_CPU_FEATURES"
#: The features a plain AVX2 CPU (Zen 2/3) lacks here: AVX-512 and AVX-VNNI.
AVX2_FEATURES = (
    "-avx512f -avx512bw -avx512vl -avx512vbmi -avx512_vnni -avx512_bf16 -avx512_fp16 -avx_vnni"
)

#: THE list of pipelines the tester compares (extend with register_variant).
VARIANTS: list[Variant] = [
    Variant("fused", then_llvm(_to_linalg(matmul_lowering="fused")), "fused"),
    Variant("blocked", then_llvm(_to_linalg(matmul_lowering="blocked")), "blocked"),
    # Every other variant stores FP4/FP6 codes packed at function boundaries
    # (the default); this one one code per byte: same results, other ABI.
    Variant(
        "blocked-unpacked",
        then_llvm(_to_linalg(matmul_lowering="blocked", subbyte_storage="unpacked")),
        "blocked",
    ),
    Variant("fused-vectorized", then_llvm("@mx-vectorize"), None, _vectorizable_fused),
    Variant("blocked-vectorized", then_llvm("@mx-vectorize-blocked"), None),
    Variant("runner-default", lambda: None, "blocked"),
    # The generated kernels: every schedule of the registry at 1 and 2
    # threads, all claiming the blocked order bit for bit.
    *(
        Variant(f"kernels-{s}-{t}t", (lambda s=s, t=t: _kernels(s, t)), "blocked", kernels=True)
        for s in SCHEDULES
        for t in (1, 2)
    ),
    # The integer dot schedules as on a plain AVX2 CPU (AVX-512 and AVX-VNNI
    # masked): the 256-bit kernels of kernels/dot/isa.py.
    *(
        Variant(
            f"kernels-{s}-avx2-2t",
            (lambda s=s: _kernels(s, 2)),
            "blocked",
            lambda program: has_features("avx2"),
            AVX2_FEATURES,
            kernels=True,
        )
        for s in SCHEDULES
        if SCHEDULES[s].unit == "int"
    ),
]


def quick_variants() -> list[Variant]:
    """The quick set's variants: every lowering, and each kernel schedule at
    one thread count, 1 and 2 in turn along the registry (the AVX2-masked ones
    at their 2): half the kernel compilations, every schedule and both thread
    counts still compiled.  The long set (``-m slow``) runs all of
    :data:`VARIANTS`."""
    threads = {name: 1 + i % 2 for i, name in enumerate(SCHEDULES)}
    return [
        v
        for v in VARIANTS
        if not v.kernels
        or "-avx2-" in v.name
        or any(v.name == f"kernels-{s}-{t}t" for s, t in threads.items())
    ]


def _kernels(schedule: str, threads: int):
    from mlir_mx.pipelines import kernel_pipeline

    return kernel_pipeline(schedule, threads)


def register_variant(variant: Variant) -> None:
    """Add (or replace, by name) a pipeline the differential tester compares."""
    VARIANTS[:] = [v for v in VARIANTS if v.name != variant.name] + [variant]


# ------------------------------------------------------------------ the oracle


def _value(v) -> np.ndarray:
    return N.dequantize(v) if isinstance(v, N.MXArray) else v


def evaluate(p: Program, args: list) -> list:
    """The oracle's results of ``p``: MXArrays and f32 arrays (exact ops), and
    ``("matmul", exact f64, bound, comparable mask)`` for block_matmul."""
    env = {}
    for spec, a in zip(p.args, args, strict=True):
        env[spec[1] if isinstance(spec, tuple) else spec.name] = a
    for kind, out, *ins in p.ops:
        if kind == "quantize":
            env[out.name] = N.quantize(env[ins[0].name], out.mx[0], out.mx[1], axis=out.mx[2])
        elif kind == "dequantize":
            env[out.name] = N.dequantize(env[ins[0].name])
        elif kind == "fold":
            alpha = ins[1][1] if ins[1][0] == "const" else env[ins[1][1]]
            env[out.name] = N.fold_scale(env[ins[0].name], alpha)
        else:
            a, b, acc = (env[v.name] for v in ins)
            env[out.name] = _matmul_reference(a, b, acc)
    return [env[r.name] for r in p.results]


def _matmul_reference(a: N.MXArray, b, acc: np.ndarray):
    """The claim of docs/numerics.md as a checkable condition on the operands
    (:func:`mlir_mx.numerics.matmul.matmul_reference`)."""
    exact, bound, inside = matmul_reference(a, b, acc)
    return ("matmul", exact, bound, inside)


def _same_f32(x: np.ndarray, y: np.ndarray) -> bool:
    """Bit for bit, NaN payloads and NaN signs aside."""
    x, y = np.asarray(x, np.float32), np.asarray(y, np.float32)
    if x.shape != y.shape:
        return False
    nx, ny = np.isnan(x), np.isnan(y)
    return bool(
        np.array_equal(nx, ny) and np.array_equal(x[~nx].view(np.uint32), y[~ny].view(np.uint32))
    )


def same_result(x, y) -> bool:
    """Bit for bit: two MXArrays alike (codes and scales), or two f32 results (NaN payloads aside)."""
    if isinstance(x, N.MXArray) or isinstance(y, N.MXArray):
        return isinstance(x, N.MXArray) and isinstance(y, N.MXArray) and x.bitwise_equal(y)
    return _same_f32(x, y)


def within_bound(got: np.ndarray, ref) -> tuple[bool, int]:
    """(within the bound where comparable, number of comparable outputs)."""
    _, exact, bound, ok = ref
    got = got.astype(np.float64)
    nan = np.isnan(exact)
    with np.errstate(invalid="ignore"):
        close = np.abs(got - exact) <= bound
        fine = np.where(nan, np.isnan(got), np.where(np.isinf(exact), got == exact, close))
    return bool(np.all(fine | ~ok)), int(ok.sum())


# ------------------------------------------------------------------ running


@dataclass
class Report:
    """What :func:`check` compared, and every disagreement found."""

    programs: int = 0
    compiles: int = 0
    calls: int = 0
    bitwise: int = 0  # outputs compared bit for bit
    bounded: int = 0  # matmul output elements compared within the bound
    out_of_claim: int = 0  # matmul output elements outside the claim (see _matmul_reference)
    mismatches: list[str] = field(default_factory=list)

    def merge(self, other: Report) -> None:
        for f in ("programs", "compiles", "calls", "bitwise", "bounded", "out_of_claim"):
            setattr(self, f, getattr(self, f) + getattr(other, f))
        self.mismatches += other.mismatches

    def summary(self) -> str:
        return (
            f"{self.programs} programs, {self.compiles} compilations, {self.calls} calls: "
            f"{self.bitwise} outputs bit for bit, {self.bounded} matmul elements within the bound "
            f"({self.out_of_claim} outside the claim), {len(self.mismatches)} mismatches"
        )


def _canonicalized(text: str) -> str | None:
    """``text`` after ``--canonicalize``, or None where it changed nothing
    (the printed module before and after are the same)."""
    from mlir import ir

    from mlir_mx.dialect import parse_module, print_module
    from mlir_mx.passes.pipeline import run_pipeline

    module = parse_module(text, ir.Context())
    before = print_module(module)
    run_pipeline(module, "canonicalize")
    after = print_module(module)
    return None if after == before else after


def _compile(text: str, variant: Variant):
    from mlir_mx.execution import Runner

    if variant.features is None:
        return Runner(text, variant.pipeline(), opt_level=1)
    saved = os.environ.get(FEATURES_VAR)
    os.environ[FEATURES_VAR] = variant.features
    try:
        return Runner(text, variant.pipeline(), opt_level=1)
    finally:
        if saved is None:
            del os.environ[FEATURES_VAR]
        else:
            os.environ[FEATURES_VAR] = saved


def _call(runner, p: Program, args: list) -> list:
    fresh = [a.copy() if isinstance(a, np.ndarray) else a for a in args]  # acc is updated in place
    out = runner.invoke(p.name, *fresh)
    return list(out) if isinstance(out, tuple) else [out]


def check(
    programs: list[Program], inputs: dict[str, list[list]], variants=None, canonicalize="all"
) -> Report:
    """Compile ``programs`` with every variant (plain and canonicalized), run
    them on ``inputs[name]`` and compare; see the module docstring.

    ``canonicalize="lowerings"`` builds the canonicalized programs with the
    variants that are not generated kernel schedules only (the quick set:
    the kernel schedules start from the same linalg as ``runner-default``).
    Where ``--canonicalize`` leaves a module as it was, its build would be the
    plain one again and is not repeated."""
    if canonicalize not in ("all", "lowerings"):
        raise ValueError(f"canonicalize: expected 'all' or 'lowerings', got {canonicalize!r}")
    report = Report(programs=len(programs))
    results: dict[tuple[str, bool, str, int], list] = {}
    canonical: dict[tuple[str, ...], str | None] = {}
    for variant in variants or VARIANTS:
        chosen = [p for p in programs if variant.supports(p)]
        if not chosen:
            continue
        plain = "\n".join(p.text() for p in chosen)
        for canon in (False, True):
            if canon and canonicalize == "lowerings" and variant.kernels:
                continue
            text = plain
            if canon:
                names = tuple(p.name for p in chosen)
                if names not in canonical:
                    canonical[names] = _canonicalized(plain)
                if canonical[names] is None:
                    continue
                text = canonical[names]
            runner = _compile(text, variant)
            report.compiles += 1
            for p in chosen:
                for j, args in enumerate(inputs[p.name]):
                    report.calls += 1
                    try:
                        results[(variant.name, canon, p.name, j)] = _call(runner, p, args)
                    except (ValueError, TypeError) as err:  # e.g. codes an MXArray refuses
                        where = f"{p.name} input {j} [{variant.name}{' +canonicalize' if canon else ''}]"
                        report.mismatches.append(f"{where}: the call failed: {err}")
    orders = {v.name: v.matmul_order for v in variants or VARIANTS}
    for p in programs:
        for j, args in enumerate(inputs[p.name]):
            want = evaluate(p, args)
            _compare_one(p, j, want, results, orders, report)
    return report


def _compare_one(p, j, want, results, orders, report) -> None:
    keys = [k for k in results if k[2] == p.name and k[3] == j]
    first_of_order: dict[str, tuple] = {}
    for key in keys:
        got = results[key]
        where = f"{p.name} input {j} [{key[0]}{' +canonicalize' if key[1] else ''}]"
        plain = results.get((key[0], False, p.name, j))
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            if key[1] and plain is not None and not same_result(g, plain[i]):
                report.mismatches.append(f"{where} result {i}: --canonicalize changed it")
            if isinstance(w, tuple):
                fine, n = within_bound(g, w)
                report.bounded += n
                report.out_of_claim += int(w[3].size - n)
                if not fine:
                    report.mismatches.append(f"{where} result {i}: matmul outside the bound")
                order = orders.get(key[0])
                if order:
                    ref = first_of_order.setdefault(f"{order}:{i}", (key, g))
                    if not same_result(g, ref[1]):
                        report.mismatches.append(
                            f"{where} result {i}: differs from {ref[0][0]} (same matmul order '{order}')"
                        )
            else:
                report.bitwise += 1
                if not same_result(g, w):
                    report.mismatches.append(f"{where} result {i}: differs from the oracle")


def run(
    seed: int,
    batches: int,
    programs_per_batch: int = 6,
    inputs_per_program: int = 3,
    canonicalize: str = "all",
    variants: list[Variant] | None = None,
) -> Report:
    """The seeded campaign: ``batches`` batches of random programs through
    :func:`check` (``canonicalize``, ``variants``: as there; None: all of
    :data:`VARIANTS`)."""
    total = Report()
    for b in range(batches):
        rng = random.Random(f"differential:{seed}:{b}")
        nrng = np.random.default_rng(rng.randrange(2**32))
        programs = [random_program(rng, f"p{b}_{i}") for i in range(programs_per_batch)]
        inputs = {
            p.name: [random_inputs(p, nrng) for _ in range(inputs_per_program)] for p in programs
        }
        rep = check(programs, inputs, variants, canonicalize=canonicalize)
        if rep.mismatches:
            rep.mismatches = [m + f" (batch {b}, seed {seed})" for m in rep.mismatches]
        total.merge(rep)
    return total


def main(argv=None) -> int:
    """``python -m mlir_mx_testing.differential``: a seeded differential campaign."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m mlir_mx_testing.differential")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--batches", type=int, default=2)
    p.add_argument("--programs", type=int, default=6, help="programs per batch (one module)")
    p.add_argument("--inputs", type=int, default=3, help="input sets per program")
    args = p.parse_args(argv)
    report = run(args.seed, args.batches, args.programs, args.inputs)
    print(f"variants: {', '.join(v.name for v in VARIANTS)} (each also after --canonicalize)")
    print(report.summary())
    for m in report.mismatches[:50]:
        print("MISMATCH", m)
    return 1 if report.mismatches else 0


if __name__ == "__main__":
    import sys

    sys.exit(main())

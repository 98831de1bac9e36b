"""Shared helpers of the dot-kernel tests: runners and an exact model of the
blocked order with the block step ``t = p * sb; c = fma(t, sa, c)``."""

from __future__ import annotations

import itertools
from dataclasses import replace
from fractions import Fraction

import numpy as np
import pytest
from format_cases import INTEGRAL, NON_INTEGRAL
from mlir import ir

from mlir_mx import oracle
from mlir_mx.dialect import load_dialect
from mlir_mx.execution import Runner
from mlir_mx.host import has_features
from mlir_mx.kernels import SCHEDULES, Problem, find, kernel_module, shape_class
from mlir_mx.kernels.common.plan import KernelPlan
from mlir_mx.kernels.dot.units import (
    RecordLayout,
    dot_kind,
    int_max,
    maddubs_mode,
    pack_records,
    value_table,
)
from mlir_mx.numerics import ELEMENT_FORMATS, MXArray, is_packed_storage, pack_codes
from mlir_mx.pipelines import kernel_library_pipeline

#: The formats of the integer dot units (an ``int_exp2`` in the format table)
#: and those of the bf16 unit (none: FP8).
INTS = INTEGRAL
FP8 = NON_INTEGRAL


_NO_AVX512 = "-avx512f -avx512bw -avx512vl -avx512vbmi -avx512_vnni -avx512_bf16 -avx512_fp16"
#: MLIR_MX_CPU_FEATURES masks that make this CPU an AVX2 + AVX-VNNI one (Alder
#: Lake) and a plain AVX2 one (Zen 2/3), and the feature each keeps and needs.
AVX2_MASKS = {"avx-vnni": (_NO_AVX512, "avx_vnni"), "avx2": (_NO_AVX512 + " -avx_vnni", "avx2")}


def nvfp4_i8_oracle(w: MXArray, x: np.ndarray) -> np.ndarray:
    """The oracle's ``x @ W.T`` for an NVFP4 weight ``w`` (out, in) and f32
    ``x`` quantized to MXINT8 in blocks of 16 (``activations="i8"``): the
    blocked order from a zero C."""
    a = oracle.quantize(x, "i8", 16, axis=1)
    b = MXArray(w.codes.T.copy(), w.scales.T.copy(), "nvfp4", 16, axis=0, global_scale=w.global_scale)
    return oracle.blocked_order(a, b, np.zeros((x.shape[0], w.shape[0]), np.float32))


def mask_avx2(monkeypatch, name: str) -> None:
    """Mask this CPU to :data:`AVX2_MASKS` ``name`` (skip where it lacks the feature)."""
    mask, needed = AVX2_MASKS[name]
    if not has_features(needed):
        pytest.skip(f"the CPU has no {needed.upper()}: cannot run the {name} dot kernels")
    monkeypatch.setenv("MLIR_MX_CPU_FEATURES", mask)


def _avx2_mapping(a: str, b: str) -> str:
    """How the plain AVX2 kernels feed A x B to their instructions (kernels/dot/isa.py)."""
    if max(int_max(a), int_max(b)) > 128:
        return "wide"
    return maddubs_mode(a, b) or "i16"


def _avx2_pairs() -> dict[str, tuple[str, str]]:
    """One (A, B) pair per mapping of the plain AVX2 kernels, FP4 and INT8 first."""
    found: dict[str, tuple[str, str]] = {}
    pairs = sorted(
        itertools.product(INTS, INTS),
        key=lambda p: (-sum(value_table(e) + ELEMENT_FORMATS[e].is_int for e in p), p[0] == p[1]),
    )
    for a, b in pairs:
        found.setdefault(_avx2_mapping(a, b), (a, b))
    return found


#: One (A, B) pair per operand mapping of the plain AVX2 kernels: ``offset``
#: (B + 128, A's compensation), ``sign`` (the sign trick), ``i16`` (INT8 x
#: INT8), ``wide`` (E3M2: i16).
AVX2_PAIRS = _avx2_pairs()


def compile_module(prob: Problem, plan) -> Runner:
    with ir.Context() as ctx, ir.Location.unknown():
        load_dialect(ctx)
        text = str(kernel_module(prob, plan))
    return Runner(text, kernel_library_pipeline(plan.threads))


def a_args(qa: MXArray) -> list[np.ndarray]:
    """A's codes as the kernels take them (FP4/FP6 packed) and its scales."""
    codes = qa.codes
    if is_packed_storage(codes.shape, qa.element):
        codes = pack_codes(np.ascontiguousarray(codes), qa.element)
    # Writeable copies: a threaded kernel's write analysis (effects.py)
    # cannot prove that read-only views are only read.
    return [np.array(codes), np.array(qa.scales)]


def run_dot(
    qa, qb: MXArray, acc, schedule: str, threads: int, source: str = "records", **overrides
) -> np.ndarray:
    """``acc + A B`` with dot schedule ``schedule``, B as VNNI records
    (``source="records"``, what ``Linear`` passes) or as its codes and scales
    (``"codes"``, what the Runner passes).  ``qa`` is MX, or f32 with
    ``overrides['a_quant']`` naming the format it is quantized to."""
    a_quant = overrides.pop("a_quant", None)
    m, k = qa.shape
    n = qb.shape[1]
    ea = None if a_quant else qa.element
    kind = dot_kind(ea or a_quant, qb.element, qb.block_size)
    packed = ea is not None and is_packed_storage((m, k), ea)
    b_packed = is_packed_storage((k, n), qb.element)
    prob = Problem(
        m, n, k, qb.block_size, ea, qb.element, a_packed=packed, a_quant=a_quant,
        b_packed=b_packed and source == "codes", b_dot=kind.name if source == "records" else None,
    )  # fmt: skip
    entry = SCHEDULES[schedule]
    assert entry.supports(prob), (schedule, prob)
    plan = KernelPlan(entry, replace(entry.configure(prob, threads), **overrides))
    runner = compile_module(prob, plan)
    if source == "records":
        layout = RecordLayout(kind, qb.element, qb.block_size)
        b_args = [pack_records(qb.codes, qb.scales, layout)]
    else:
        codes = pack_codes(np.ascontiguousarray(qb.codes), qb.element) if b_packed else qb.codes
        b_args = [np.array(codes), np.array(qb.scales)]  # writeable (as above)
    c = acc.copy()
    args = [qa] if a_quant else a_args(qa)
    runner.invoke("matmul", *args, *b_args, c)
    return c


def dot_schedule(unit: str, cls: str) -> str:
    """The name of ``unit``'s dot schedule for shape class ``cls``; where the
    unit has none in that class (bf16 at M = 1), its schedule for a dynamic
    M (``shape_class(None)``), which runs any M."""
    found = find(cls, unit) or find(shape_class(None), unit)
    assert found is not None, (unit, cls)
    return found.name


def f32_bits(qa: MXArray, qb: MXArray, acc) -> np.ndarray:
    """``acc + A B`` with the f32 kernels' bits: the blocked order of the
    numpy oracle (:func:`mlir_mx.oracle.blocked_order`), which every
    f32 schedule computes bit for bit at every thread count
    (``tests/passes/kernels/test_matmul_kernels.py``, ``tests/repro/test_f32_range_edges.py``).
    The oracle rather than a compiled f32 kernel: the same bits, without
    one compilation per case."""
    return oracle.blocked_order(qa, qb, acc)


def same_bits(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Elementwise: the same f32 bits, or both NaN."""
    return (x.view(np.uint32) == y.view(np.uint32)) | (np.isnan(x) & np.isnan(y))


def _to_f32(q: Fraction) -> float:
    """``q`` rounded to f32 (nearest, ties to even, subnormals, overflow to Inf)."""
    if q == 0:
        return 0.0
    sign, a = (-1.0 if q < 0 else 1.0), abs(q)
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if Fraction(2) ** e > a:
        e -= 1
    quantum = Fraction(2) ** (max(e, -126) - 23)
    n, rem = divmod(a / quantum, 1)
    if rem > Fraction(1, 2) or (rem == Fraction(1, 2) and n % 2):
        n += 1
    val = n * quantum
    return sign * (float("inf") if val >= 2**128 else float(val))


def fma_f32(x: float, y: float, z: float) -> np.float32:
    """f32 ``fma(x, y, z)`` of f32 values, exactly rounded once."""
    if not all(np.isfinite(v) for v in (x, y, z)):
        return np.float32(np.float64(x) * y + z)
    exact = Fraction(x) * Fraction(y) + Fraction(z)
    if exact == 0:  # IEEE: -0 only when both terms are -0
        if (x == 0 or y == 0) and z == 0:
            neg = bool(np.signbit(x) != np.signbit(y)) and bool(np.signbit(z))
            return np.float32(-0.0 if neg else 0.0)
        return np.float32(0.0)
    return np.float32(_to_f32(exact))


def model(qa: MXArray, qb: MXArray, acc: np.ndarray) -> np.ndarray:
    """The blocked order with the block step ``t = p * sb; c = fma(t, sa, c)``:
    ``p`` the in-order f32 FMA chain of exact products (exact for integer
    pairs), ``t`` one f32 multiply, the FMA exactly rounded once."""
    a, b = qa.element_values(), qb.element_values()
    sa, sb = qa.scale_values().astype(np.float32), qb.scale_values().astype(np.float32)
    bs, (m, k), n = qb.block_size, qa.shape, qb.shape[1]
    c = acc.astype(np.float32).copy()
    with np.errstate(all="ignore"):
        for kb in range(k // bs):
            p = np.zeros((m, n), np.float32)
            for kk in range(kb * bs, (kb + 1) * bs):
                p = p + np.outer(a[:, kk], b[kk, :]).astype(np.float32)  # exact products
            t = p * sb[kb][None, :]
            for i in range(m):
                for j in range(n):
                    c[i, j] = fma_f32(float(t[i, j]), float(sa[i, kb]), float(c[i, j]))
    return c

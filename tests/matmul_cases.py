"""Shared matmul test problems: module text, inputs, the exact result and its bound.

Tolerance (see also ``docs/numerics.md``, "The matmul").  Every lowering
multiplies exactly dequantized values (or exact element values, scaled once
per block by a power of two); what differs between them is where the f32
roundings happen.  The longest chain of roundings any term goes through is at
most K + 2, so with u = 2^-24::

    |got - exact| <= (K + 2) * u * (|acc| + sum_k |a_ik| |b_kj|)

(first order in u).  Data are drawn in the normal f32 range with block scales
spread over 2^-20..2^20 and one zero block, so no product under- or overflows.
"""

from __future__ import annotations

import numpy as np

from mlir_mx import numerics as N
from mlir_mx import oracle

#: Every element format of the one table: a new format is tested the day it is added.
ELEMENTS = tuple(N.ELEMENT_FORMATS)
U = 2.0**-24


def _mx(shape, elem, axis) -> str:
    dims = "x".join(str(d) for d in shape)
    ax = ", axis = 0" if axis == 0 else ""
    return f"!mx.tensor<{dims}x{elem}, block_size = 32, scale_type = f8E8M0FNU{ax}>"


def matmul_text(m: int, k: int, n: int, ea: str, eb: str | None) -> str:
    """``@mm(A, B, acc) = block_matmul``; B is f32 when ``eb`` is None."""
    ta = _mx((m, k), ea, 1)
    tb = _mx((k, n), eb, 0) if eb else f"tensor<{k}x{n}xf32>"
    c = f"tensor<{m}x{n}xf32>"
    return (
        f"func.func @mm(%a: {ta}, %b: {tb}, %acc: {c}) -> {c} {{\n"
        f"  %0 = mx.block_matmul %a, %b, %acc : {ta}, {tb}, {c} -> {c}\n"
        f"  return %0 : {c}\n}}"
    )


def _values(shape, axis, rng) -> np.ndarray:
    """Normal values whose blocks (along ``axis``) have scales 2^-20..2^20; one zero block."""
    x = rng.standard_normal(shape).astype(np.float32)
    nb = shape[axis] // 32
    other = shape[1 - axis]
    e = rng.integers(-20, 21, (nb, other) if axis == 0 else (other, nb))
    factor = np.repeat(np.exp2(e), 32, axis=axis if axis == 0 else 1).astype(np.float32)
    if axis == 1:
        x *= factor
    else:
        x *= factor
    if axis == 1:
        x[0, :32] = 0.0
    else:
        x[:32, 0] = 0.0
    return x


def case(m, k, n, ea, eb, seed=0):
    """(args, acc, exact, bound) for one problem."""
    rng = np.random.default_rng(seed)
    qa = oracle.quantize(_values((m, k), 1, rng), ea, 32)
    a = oracle.dequantize(qa).astype(np.float64)
    if eb:
        qb = oracle.quantize(_values((k, n), 0, rng), eb, 32, axis=0)
        b = oracle.dequantize(qb).astype(np.float64)
        args = (qa, qb)
    else:
        bf = _values((k, n), 0, rng)
        b = bf.astype(np.float64)
        args = (qa, bf)
    acc = rng.standard_normal((m, n)).astype(np.float32)
    exact = acc.astype(np.float64) + a @ b
    bound = (k + 2) * U * (np.abs(acc) + np.abs(a) @ np.abs(b))
    return args, acc, exact, bound


def kernel_runner(prob, schedule: str, threads: int):
    """A Runner for ``kernel_module(prob)`` with ``schedule`` on ``threads``
    threads, lowered the way ``mlir_mx.Linear`` lowers its kernels."""
    from mlir import ir

    from mlir_mx.dialect import load_dialect
    from mlir_mx.execution import Runner
    from mlir_mx.kernels import kernel_module, plan_kernel
    from mlir_mx.pipelines import kernel_library_pipeline

    with ir.Context() as ctx, ir.Location.unknown():
        load_dialect(ctx)
        text = str(kernel_module(prob, plan_kernel(prob, schedule, threads)))
    return Runner(text, kernel_library_pipeline(threads))


#: One problem size per M: M = 1, 5 and 37 fall in the three shape classes.
_SIZES = {1: (96, 100), 5: (64, 70), 37: (288, 130)}


def schedule_cases() -> list[tuple[str, int, int, int]]:
    """``(schedule, m, k, n)``: for every schedule of the registry, a problem
    in its shape class (tests iterate this, never a list of names)."""
    from mlir_mx.kernels import SCHEDULES, shape_class

    return [
        (s.name, m, k, n)
        for s in SCHEDULES.values()
        for m, (k, n) in _SIZES.items()
        if shape_class(m) == s.shape_class
    ]

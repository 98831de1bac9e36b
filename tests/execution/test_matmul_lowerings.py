"""``mx.block_matmul``: the fused and the block-factored lowerings, end to end.

Both lowerings (``mx-to-linalg{matmul-lowering=fused|blocked}``), both operand
kinds (mx x f32, mx x mx), every MX element type, JIT-compiled by the Runner
and compared with the oracle ``acc + dequantize(A) @ dequantize(B)`` in f64.

Tolerance.  Both lowerings multiply exactly dequantized values: the fused form
rebuilds ``a = m * s`` exactly (a power-of-two scale), the blocked form sums
the mantissa products of a block and multiplies the partial by the block's
power-of-two scale(s) (exact, away from f32 overflow/underflow).  What
differs is where the f32 roundings happen: one rounding per product, then
additions in some order; the longest chain of roundings any term goes
through is at most K + 2 (fused: product, K additions incl. acc; blocked:
product, B - 1 in-block additions, the exact scale multiply, K/B
accumulations).  With u = 2^-24 the standard bound is then::

    |got - exact| <= (K + 2) * u * (|acc| + sum_k |a_ik| |b_kj|)

(first order in u; K * u <= 2^-12 here).  The two lowerings agree with each
other within twice that bound.  Data are drawn in the normal f32 range with
block scales spread over 2^-20..2^20 (and a zero block).

The default run is a representative subset (about 10 s); the sweep over all
shapes x element types is ``-m slow``.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from matmul_cases import ELEMENTS, case, matmul_text
from mlir import ir

from mlir_mx.dialect import parse_module
from mlir_mx.execution import Runner
from mlir_mx.passes.pipeline import build_pass_manager
from mlir_mx.pipelines import load_pipeline

LOWERINGS = ("fused", "blocked")


def pipeline(lowering: str, vectorized: bool = False) -> str:
    if vectorized:
        assert lowering == "blocked"
        return load_pipeline("mx-vectorize-blocked") + load_pipeline("lower-to-llvm")
    return f"mx-to-linalg{{matmul-lowering={lowering}}}," + load_pipeline("lower-to-llvm")


def run(lowering, m, k, n, ea, eb, vectorized=False, seed=0):
    runner = Runner(matmul_text(m, k, n, ea, eb), pipeline(lowering, vectorized))
    args, acc, exact, bound = case(m, k, n, ea, eb, seed)
    c = acc.copy()
    got = runner.invoke("mm", *args, c)
    # In place: the accumulator passed in IS the result buffer.
    np.testing.assert_array_equal(c, got)
    err = np.abs(got - exact)
    assert np.all(np.isfinite(got))
    worst = np.unravel_index(np.argmax(err - bound), err.shape)
    assert np.all(err <= bound), (
        f"{lowering} {m}x{k}x{n} {ea} x {eb or 'f32'}: |err| {err[worst]:.3g} > "
        f"bound {bound[worst]:.3g} at {worst}"
    )
    return got, bound


def _check_both(m, k, n, ea, eb):
    fused, bound = run("fused", m, k, n, ea, eb)
    blocked, _ = run("blocked", m, k, n, ea, eb)
    assert np.all(np.abs(fused - blocked) <= 2 * bound)


# ------------------------------------------------------------ default subset

# Every element type on the lhs, mx x f32 and mx x mx (rhs rotated through the
# types), at a small odd-N shape; plus a few shapes covering M in {1, 3, 32,
# 100}, K up to 4096, N odd and even.
_PAIRS = [(e, ELEMENTS[(i + 1) % len(ELEMENTS)]) for i, e in enumerate(ELEMENTS)]


@pytest.mark.parametrize("ea", ELEMENTS)
def test_mx_times_f32_every_element(ea):
    _check_both(3, 64, 17, ea, None)


@pytest.mark.parametrize("ea,eb", _PAIRS)
def test_mx_times_mx_every_element(ea, eb):
    _check_both(3, 64, 16, ea, eb)


@pytest.mark.parametrize(
    "m,k,n,ea,eb",
    [
        (1, 4096, 33, "f8E4M3FN", None),
        (1, 4096, 32, "i8", "f8E5M2"),
        (32, 64, 64, "f8E4M3FN", "f8E4M3FN"),
        (100, 256, 17, "f4E2M1FN", None),
    ],
)
def test_shapes(m, k, n, ea, eb):
    _check_both(m, k, n, ea, eb)


# ------------------------------------------------------------ vectorized


@pytest.mark.parametrize("m,n,k", [(32, 64, 64), (128, 256, 512)])
@pytest.mark.parametrize("eb", [None, "f8E4M3FN"])
def test_vectorized_blocked(m, n, k, eb):
    """mx-vectorize-blocked (tile + vectorize, stock transforms) runs and is correct."""
    vec, bound = run("blocked", m, k, n, "f8E4M3FN", eb, vectorized=True)
    ref, _ = run("blocked", m, k, n, "f8E4M3FN", eb)
    assert np.all(np.abs(vec - ref) <= 2 * bound)


@pytest.mark.parametrize(
    "ea,eb", [("f4E2M1FN", None), ("f6E3M2FN", "i8"), ("i8", "f6E2M3FN"), ("i8", "f8E5M2")]
)
def test_vectorized_pipeline_sub_byte_stays_correct(ea, eb):
    """f4/f6 mantissas go through the same pipeline but are not vectorized
    (vector loads of sub-byte memrefs are wrong on the CPU); odd N is masked."""
    run("blocked", 3, 128, 17, ea, eb, vectorized=True)


def test_vectorized_pipeline_leaves_sub_byte_scalar():
    from mlir_mx.dialect import print_module

    def vector_reads(ea, eb):
        ctx = ir.Context()
        module = parse_module(matmul_text(3, 64, 32, ea, eb), ctx)
        build_pass_manager(load_pipeline("mx-vectorize-blocked"), ctx).run(module.operation)
        text = print_module(module)
        return [ln for ln in text.splitlines() if "vector.transfer_read" in ln]

    assert any("xf8E4M3FN>" in ln for ln in vector_reads("f8E4M3FN", None))
    for ea, eb in (("f4E2M1FN", None), ("i8", "f6E3M2FN")):
        reads = vector_reads(ea, eb)
        assert not any(t in ln for ln in reads for t in ("f4E2M1FN", "f6E3M2FN"))


# ------------------------------------------------------------ FLOP counts

_FLOAT_OPS = ("arith.addf", "arith.subf", "arith.mulf", "arith.divf", "math.fma")


def payload_flops(text: str) -> int:
    """Float arith ops in each linalg.generic payload x its iteration count.

    The loop ranges come from the operands: every loop dimension appears as a
    bare result of some operand's indexing map (no floordiv needed for that).
    """
    ctx = ir.Context()
    module = parse_module(text, ctx)
    total = 0

    def visit(op):
        nonlocal total
        op = getattr(op, "operation", op)
        if op.name != "linalg.generic":
            return ir.WalkResult.ADVANCE
        maps = [ir.AffineMapAttr(a).value for a in ir.ArrayAttr(op.attributes["indexing_maps"])]
        ranges: dict[int, int] = {}
        for v, m in zip(op.operands, maps, strict=True):
            shape = ir.RankedTensorType(v.type).shape
            for size, e in zip(shape, m.results, strict=True):
                if isinstance(e, ir.AffineDimExpr):
                    ranges[e.position] = size
        iterations = int(np.prod([ranges[d] for d in range(maps[0].n_dims)]))
        body = op.regions[0].blocks[0]
        n_ops = sum(1 for o in body.operations if o.operation.name in _FLOAT_OPS)
        total += n_ops * iterations
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return total


def lowered(text: str, lowering: str) -> str:
    from mlir_mx.dialect import print_module

    ctx = ir.Context()
    module = parse_module(text, ctx)
    build_pass_manager(f"mx-to-linalg{{matmul-lowering={lowering}}}", ctx).run(module.operation)
    return print_module(module)


@pytest.mark.parametrize("m,n,k", [(32, 64, 256), (1, 4096, 4096), (128, 256, 512)])
@pytest.mark.parametrize("eb", [None, "f8E4M3FN"])
def test_flop_counts(m, n, k, eb):
    text = matmul_text(m, k, n, "f8E4M3FN", eb)
    two_mnk = 2 * m * n * k
    fused = payload_flops(lowered(text, "fused"))
    blocked = payload_flops(lowered(text, "blocked"))
    assert fused == (3 if eb is None else 4) * m * n * k  # 1.5x / 2x
    per_block = 2 if eb is None else 3
    assert blocked == two_mnk + per_block * m * n * (k // 32)  # 1 + 1/B, 1 + 1.5/B
    assert blocked <= 1.05 * two_mnk
    # The IR model of mlir_mx.roofline agrees.
    from mlir_mx.roofline import analyze

    assert analyze(text, matmul_lowering="blocked").flops == blocked
    assert analyze(text, matmul_lowering="fused").flops == fused


# ------------------------------------------------------------ the sweep


_SHAPES = [(1, 32, 1), (1, 4096, 4096), (3, 96, 17), (32, 64, 64), (32, 2048, 63), (100, 512, 100)]


@pytest.mark.slow
@pytest.mark.parametrize("shape", _SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize(
    "ea,eb", [(e, None) for e in ELEMENTS] + list(itertools.product(ELEMENTS, ELEMENTS))
)
def test_sweep(shape, ea, eb):
    m, k, n = shape
    _check_both(m, k, n, ea, eb)

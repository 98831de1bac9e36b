"""In-kernel quantization of f32 activations (``mlir_mx.kernels.dot.prep``).

``quantize_block`` compiled into a tiny kernel gives, for every element
format, the oracle's element values and scales bit for bit
(``mlir_mx.oracle.quantize``) on blocks built to hit every rule: zeros,
NaN and Inf blocks, f32 subnormals, the top of the f32 range, rounding ties,
saturation and random values over the whole exponent range.  A dot kernel
whose A is quantized inside it equals the dot kernel on the oracle's MX A.
"""

from __future__ import annotations

import numpy as np
import pytest
from dot_cases import dot_schedule, run_dot, same_bits
from mlir import ir
from mlir.dialects import arith, func

from mlir_mx import oracle
from mlir_mx.host import has_features
from mlir_mx.kernels.common.builder import KernelBuilder
from mlir_mx.kernels.dot.prep import quantize_block
from mlir_mx.numerics import ELEMENT_FORMATS

ROWS = 64


def _blocks(element: str, rng) -> np.ndarray:
    """(ROWS, 32) f32 blocks covering the quantization rules."""
    fmt = ELEMENT_FORMATS[element]
    x = rng.standard_normal((ROWS, 32)).astype(np.float32)
    x *= np.exp2(rng.integers(-140, 120, (ROWS, 1))).astype(np.float32)
    x[0] = 0.0
    x[1, 5] = np.nan
    x[2, 7] = -np.inf
    x[3] = rng.standard_normal(32) * np.float32(2.0**-140)  # f32 subnormals
    x[4] = np.clip(rng.standard_normal(32) * 3e38, -3.4e38, 3.4e38)
    x[4, 0] = np.float32(3.4028235e38)
    # Ties: scaled values halfway between two element values, and saturation.
    steps = 2.0 ** (np.arange(32) % (fmt.emax + 2) - fmt.mbits - 1)
    x[5] = (np.arange(32) * 2 + 1) * steps * np.where(np.arange(32) % 2, -1, 1)
    x[6] = fmt.max_normal * 1.03 * np.linspace(-1, 1, 32)
    x[7] = -0.0
    x[8, ::2] = -0.0
    x[9] = rng.integers(-300, 300, 32) / 64.0
    return x.astype(np.float32)


def _q_module(shapes, body) -> str:
    """``@q(x, vals, scales)`` (f32 memrefs of ``shapes``), its body made by
    ``body(kb, x, vals, scales)`` with constants before an anchor that
    precedes the loop."""
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.create()
        f32 = ir.F32Type.get()
        types = [ir.MemRefType.get(s, f32) for s in shapes]
        with ir.InsertionPoint(module.body):
            fn = func.FuncOp("q", ir.FunctionType.get(types, []))
            entry = fn.add_entry_block()
            with ir.InsertionPoint(entry):
                anchor = arith.ConstantOp(ir.IndexType.get(), 0)
                body(KernelBuilder(ir.InsertionPoint(anchor)), *entry.arguments)
                func.ReturnOp([])
        return str(module)


def _module(element: str) -> str:
    """``@q(x: ROWS x 32 f32, vals: ROWS x 32 f32, scales: ROWS f32)``."""

    def body(kb, x, vals, scales):
        with kb.loop(0, ROWS, 1) as r:
            xs = [kb.vload(x, [r.iv, i], 16) for i in (0, 16)]
            qs, s = quantize_block(kb, xs, element)
            for i, q in enumerate(qs):
                kb.vstore(q, vals, [r.iv, 16 * i])
            kb.store(s, scales, [r.iv])

    return _q_module(([ROWS, 32], [ROWS, 32], [ROWS]), body)


@pytest.mark.parametrize("element", list(ELEMENT_FORMATS))
def test_quantize_block_matches_the_oracle(element):
    from mlir_mx.execution import Runner
    from mlir_mx.pipelines import load_pipeline

    x = _blocks(element, np.random.default_rng(5))
    vals = np.zeros((ROWS, 32), np.float32)
    scales = np.zeros(ROWS, np.float32)
    Runner(_module(element), load_pipeline("memref-to-llvm")).invoke("q", x, vals, scales)
    q = oracle.quantize(x, element, 32)
    want_vals = q.element_values().astype(np.float32)
    want_scales = q.scale_values().astype(np.float32)[:, 0]
    assert same_bits(scales, want_scales).all(), np.argwhere(~same_bits(scales, want_scales))
    bad = ~same_bits(vals, want_vals)
    assert not bad.any(), (np.argwhere(bad)[:5], x[bad][:5], vals[bad][:5], want_vals[bad][:5])


@pytest.mark.skipif(not has_features("avx512bw"), reason="the CPU has no AVX512BW")
@pytest.mark.parametrize(
    "element, weights, unit, cls",
    [
        ("i8", "f4E2M1FN", "int", "prefill"),
        ("i8", "f4E2M1FN", "int", "decode"),
        ("f6E2M3FN", "i8", "int", "small"),
        ("f6E3M2FN", "f4E2M1FN", "int", "small"),
    ]
    # collected on every CPU (the aarch64 subset names one; tests/test_aarch64_subset.py)
    + [
        pytest.param(*case, marks=pytest.mark.skipif(
            not has_features("avx512_bf16"), reason="the CPU has no AVX512-BF16 (vdpbf16ps)"))
        for case in (("f8E4M3FN", "f4E2M1FN", "bf16", "small"),
                     ("f8E5M2", "f8E4M3FN", "bf16", "prefill"))
    ],  # fmt: skip
)
def test_quantized_activations_equal_the_oracle_quantized_mx(element, weights, unit, cls):
    schedule = dot_schedule(unit, cls)
    rng = np.random.default_rng(9)
    m = 1 if cls == "decode" else 11  # the prefill schedule runs any M
    x = (rng.standard_normal((m, 128)) * np.exp2(rng.integers(-30, 30, (m, 1)))).astype(np.float32)
    x[0, 40] = np.nan
    qb = oracle.quantize(rng.standard_normal((128, 96)).astype(np.float32), weights, 32, axis=0)
    acc = rng.standard_normal((m, 96)).astype(np.float32)
    got = run_dot(x, qb, acc, schedule, 2, a_quant=element)
    want = run_dot(oracle.quantize(x, element, 32), qb, acc, schedule, 2)
    assert same_bits(got, want).all()
    assert np.isnan(got[0]).all() and not np.isnan(got[1:]).any()


def _groups_module(element: str, rows: int, block: int) -> str:
    """``@q(x, vals: rows x 16 blocks f32, scales: rows x 16 f32)`` through
    ``prep_groups.quantize_groups`` (16 blocks per row, one group)."""
    from mlir_mx.kernels.dot.prep import _round
    from mlir_mx.kernels.dot.prep_groups import GROUP, Targets, factors_buffer, quantize_groups

    def body(kb, x, vals, scales):
        store = lambda v, row, col: kb.vstore(v, vals, [row, col])  # noqa: E731
        out = Targets(store, scales, factors_buffer(kb), _round)
        with kb.loop(0, rows, 1) as r:
            quantize_groups(kb, x, element, block, out, r.iv, GROUP)
        kb.dealloc(out.factors)

    k = GROUP * block
    return _q_module(([rows, k], [rows, k], [rows, GROUP]), body)


@pytest.mark.parametrize("block", [16, 32])
@pytest.mark.parametrize("element", list(ELEMENT_FORMATS))
def test_sixteen_blocks_at_once_match_the_oracle(element, block):
    """The transposed maxima (``prep_groups``): each block's lane, its NaN /
    Inf, zero, subnormal, saturating and tie cases, in shuffled lanes."""
    from mlir_mx.execution import Runner
    from mlir_mx.pipelines import load_pipeline

    rng = np.random.default_rng(7)
    blocks = _blocks(element, rng).reshape(-1, block)
    blocks = np.concatenate([blocks, rng.permutation(blocks)])  # every case in two lanes
    x = np.ascontiguousarray(blocks.reshape(-1, 16 * block))
    vals, scales = np.zeros_like(x), np.zeros((x.shape[0], 16), np.float32)
    Runner(_groups_module(element, x.shape[0], block), load_pipeline("memref-to-llvm")).invoke(
        "q", x, vals, scales
    )
    q = oracle.quantize(x, element, block)
    assert same_bits(scales, q.scale_values().astype(np.float32)).all()
    assert same_bits(vals, q.element_values().astype(np.float32)).all()

"""Block sizes that are not powers of two, at every batch size (every schedule).

Reproducer ``f3_prefill_blocksize_not_pow2``: block sizes 3, 5, 6, 12,
24, 48 and 96 worked up to M = 48 (decode / small kernels) and failed above it
in the prefill kernel ("kc must be a multiple of 3"): its K chunk was a fixed
512.  The chunk is now rounded to whole blocks.  The mx-runner form of the same
reproducer is the lit test ``tests/lit/Repro/f3_mx_runner_blocksize3_traceback.mlir``.
The first test uses f32 activations at 1 thread; the second MX activations,
the dot kernels (block sizes 48 and 96, where the CPU has VNNI) and 2 threads.
"""

from __future__ import annotations

import numpy as np
import pytest
from format_cases import cycled
from matmul_cases import U

import mlir_mx
from mlir_mx import oracle
from mlir_mx.numerics import ELEMENT_FORMATS


@pytest.mark.parametrize("block,element", cycled([3, 5, 6, 12, 24, 48, 96, 640]))
def test_block_sizes_not_powers_of_two_at_every_batch_size(block, element):
    """Every M (decode 1, small 8 and 48, prefill 49 and 100) against the oracle,
    and the same rows bit for bit whatever the batch (hence the schedule)."""
    rng = np.random.default_rng(block)
    k = block * (4 if block < 100 else 1)  # 640 > the default K chunk of 512
    w = oracle.quantize(rng.standard_normal((64, k)).astype(np.float32), element, block)
    lin = mlir_mx.Linear(w, threads=1)
    w64 = oracle.dequantize(w).astype(np.float64)
    x = rng.standard_normal((100, k)).astype(np.float32)
    full = lin(x)
    for m in (1, 8, 48, 49, 100):
        y = lin(x[:m])
        ref = x[:m].astype(np.float64) @ w64.T
        bound = (k + 2) * U * (np.abs(x[:m]).astype(np.float64) @ np.abs(w64.T))
        assert np.all(np.abs(y - ref) <= bound), (block, m)
        np.testing.assert_array_equal(y.view(np.uint32), full[:m].view(np.uint32))


def _dot_activation(weight: str, block: int) -> str:
    """The first activation format the CPU's dot units take with ``weight``
    at ``block`` (else the weight's own format: the f32 kernels), from the
    format table."""
    from mlir_mx.kernels.dot.units import dot_kind

    return next((a for a in ELEMENT_FORMATS if dot_kind(a, weight, block)), weight)


# 96 (30 s, kernels of every class for 6 pairs) runs with -m slow; 48 covers
# the same paths (a block of 3 lane groups, not a power of two) by default.
# ``plain`` (a Linear without activations=) warns that MX activations run on
# the f32 kernels: on purpose here.
@pytest.mark.filterwarnings("ignore:Linear.*f32 kernels")
@pytest.mark.parametrize("weight", list(ELEMENT_FORMATS))
@pytest.mark.parametrize("block", [48, pytest.param(96, marks=pytest.mark.slow)])
def test_block_sizes_48_and_96_with_mx_activations_at_2_threads(block, weight):
    """Block sizes 48 and 96 with MX activations at 2 threads, every weight
    format: the dot kernels where the CPU has them (int-*/bf16-* schedules), else the
    f32 kernels; every M (decode 1, small 8 and 48, prefill 49 and 100) bit
    for bit the blocked order and its rows independent of the batch; the
    same f32 activation quantized per call (activations=) is the same as
    quantizing it first; and a Linear without activations= (the f32 kernels
    for MX x) gives the same bits."""
    from mlir_mx.kernels.dot.units import dot_kind
    from mlir_mx.kernels.registry import SCHEDULES
    from mlir_mx.numerics import MXArray

    act = _dot_activation(weight, block)
    rng = np.random.default_rng([block, list(ELEMENT_FORMATS).index(weight)])
    k = 2 * block
    w = oracle.quantize(rng.standard_normal((64, k)).astype(np.float32), weight, block)
    b = MXArray(w.codes.T.copy(), w.scales.T.copy(), weight, block, 0)
    # activations=act: the Linear holds the dot kernels' records for MX x of act's format
    lin = mlir_mx.Linear(w, threads=2, activations=act)
    xf = rng.standard_normal((100, k)).astype(np.float32)
    full = lin(oracle.quantize(xf, act, block))
    for m in (1, 8, 48, 49, 100):
        x = oracle.quantize(xf[:m], act, block)
        y = lin(x)
        # the dot unit of the pair where the registry has one for this shape
        # class (bf16 units have no decode kernel), else the f32 kernels
        chosen = SCHEDULES[lin.schedule(x)]
        kind = dot_kind(act, weight, block)
        # the registry's unit family: int-* schedules run the i8 and i16 units
        unit = None if kind is None else ("bf16" if kind.name == "bf16" else "int")
        served = unit is not None and any(
            s.unit == unit and s.shape_class == chosen.shape_class for s in SCHEDULES.values()
        )
        assert chosen.unit == (unit if served else None), (weight, act, m)
        want = oracle.blocked_order(x, b, np.zeros((m, 64), np.float32))
        np.testing.assert_array_equal(y.view(np.uint32), want.view(np.uint32))
        np.testing.assert_array_equal(y.view(np.uint32), full[:m].view(np.uint32))
    plain = mlir_mx.Linear(w, threads=2)
    for m in (1, 49):
        got = lin(xf[:m])
        np.testing.assert_array_equal(got.view(np.uint32), full[:m].view(np.uint32))
        got = plain(oracle.quantize(xf[:m], act, block))
        np.testing.assert_array_equal(got.view(np.uint32), full[:m].view(np.uint32))

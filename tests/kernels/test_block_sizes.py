"""Block sizes that are not powers of two, at every batch size (every schedule).

Reproducer ``f3_prefill_blocksize_not_pow2``: block sizes 3, 5, 6, 12,
24, 48 and 96 worked up to M = 48 (decode / small kernels) and failed above it
in the prefill kernel ("kc must be a multiple of 3"): its K chunk was a fixed
512.  The chunk is now rounded to whole blocks.  The mx-runner form of the same
reproducer is the lit test ``test/Repro/f3_mx_runner_blocksize3_traceback.mlir``.
"""

from __future__ import annotations

import numpy as np
import pytest
from format_cases import cycled
from matmul_cases import U

import mlir_mx
from mlir_mx.numerics import dequantize, quantize


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("MLIR_MX_CACHE_DIR", str(tmp_path / "cache"))


@pytest.mark.parametrize("block,element", cycled([3, 5, 6, 12, 24, 48, 96, 640]))
def test_f3_prefill_blocksize_not_pow2(block, element):
    """Every M (decode 1, small 8 and 48, prefill 49 and 100) against the oracle,
    and the same rows bit for bit whatever the batch (hence the schedule)."""
    rng = np.random.default_rng(block)
    k = block * (4 if block < 100 else 1)  # 640 > the default K chunk of 512
    w = quantize(rng.standard_normal((64, k)).astype(np.float32), element, block)
    lin = mlir_mx.Linear(w, threads=1)
    w64 = dequantize(w).astype(np.float64)
    x = rng.standard_normal((100, k)).astype(np.float32)
    full = lin(x)
    for m in (1, 8, 48, 49, 100):
        y = lin(x[:m])
        ref = x[:m].astype(np.float64) @ w64.T
        bound = (k + 2) * U * (np.abs(x[:m]).astype(np.float64) @ np.abs(w64.T))
        assert np.all(np.abs(y - ref) <= bound), (block, m)
        np.testing.assert_array_equal(y.view(np.uint32), full[:m].view(np.uint32))

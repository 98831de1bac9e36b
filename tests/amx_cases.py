"""Helpers shared by the AMX-BF16 tests (``tests/kernels/test_amx_matmul.py``,
``tests/test_nvfp4_amx.py``): bf16 rounding, the exact path's C from the
oracle, and a bit-for-bit comparison that says how many outputs differ."""

from __future__ import annotations

import ml_dtypes
import numpy as np

from mlir_mx import oracle


def bf16(x) -> np.ndarray:
    """``x`` rounded to bf16 (nearest even), as f32."""
    return np.asarray(x, np.float32).astype(ml_dtypes.bfloat16).astype(np.float32)


def exact(a, b) -> np.ndarray:
    """The exact path's C for A (M, K) and B (K, N): the oracle's blocked order from +0."""
    return oracle.blocked_order(a, b, np.zeros((a.shape[0], b.shape[1]), np.float32))


def assert_same_bits(got, want):
    assert got.shape == want.shape and got.dtype == np.float32
    differ = got.view(np.uint32) != want.view(np.uint32)
    assert not differ.any(), f"{int(differ.sum())} of {differ.size} outputs differ"

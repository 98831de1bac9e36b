"""The oracle: OCP MX v1.0 in numpy, the reference every compiled kernel is
tested against (bit for bit where the operation is exact, within a derived
bound where the summation order differs; ``docs/numerics.md``).

Slow and exact, importable without MLIR.  :func:`quantize` / :func:`dequantize`
here have the signature of the compiled ``mlir_mx.quantize`` /
``mlir_mx.dequantize`` and give the same bits; use the compiled ones for speed
and these to check them::

    from mlir_mx import oracle
    a = oracle.quantize(x, "f4E2M1FN", 32)
    assert a.bitwise_equal(mlir_mx.quantize(x, "f4E2M1FN", 32))

:func:`matmul_reference` states the matmul claim (the exact product and its
bound) and :func:`blocked_order` emulates the kernels' f32 operation order;
:func:`amx_tdpbf16ps` is what AMX-BF16's tile product computes (two FMA
chains; :func:`amx_pair_layout` is its B layout); :func:`amx_guard` is the
condition under which it gives the exact path's bits and
:func:`amx_guarded_matmul` the guarded AMX matmul built on it, in numpy.
The functions are defined in :mod:`mlir_mx.numerics` (beside the format table
and packing), and everything outside that package imports them from here, so a
bare ``quantize`` is never left to guess between the oracle and the compiled
function (``tests/test_imports.py`` checks it).
"""

from mlir_mx.numerics import MXArray, dequantize, fold_scale, quantize
from mlir_mx.numerics.amx_guard import (
    AMXWeight,
    amx_bounds,
    amx_guard,
    amx_guard_call,
    amx_guarded_matmul,
    amx_pass,
    amx_plan,
    amx_prepare,
    amx_tile_route,
)
from mlir_mx.numerics.matmul import (
    amx_nan_open,
    amx_pair_layout,
    amx_tdpbf16ps,
    blocked_order,
    matmul_reference,
)

__all__ = [
    "AMXWeight",
    "MXArray",
    "amx_bounds",
    "amx_guard",
    "amx_guard_call",
    "amx_guarded_matmul",
    "amx_nan_open",
    "amx_pair_layout",
    "amx_pass",
    "amx_plan",
    "amx_prepare",
    "amx_tdpbf16ps",
    "amx_tile_route",
    "blocked_order",
    "dequantize",
    "fold_scale",
    "matmul_reference",
    "quantize",
]

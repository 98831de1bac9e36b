"""One benchmark problem (shape, element format): its inputs and its oracle.

Inputs are standard-normal f32 ``A`` (M x K) and ``B`` (K x N), quantized with
the compiled :func:`mlir_mx.quantize` (bit for bit the oracle's,
``tests/test_convert.py``): ``A`` blocked along K (``axis=1``), ``B`` blocked
along K (``axis=0``).  ``da``/``db`` are their
dequantized f32 values; every method except ggml multiplies exactly these
values, so one oracle serves them all.

The oracle is ``da @ db`` in f64 (exact: products of MX values are exact in
f64 and K <= 2^20 sums of them stay well inside f64's precision for these
magnitudes).  Tolerance, from the summation order: a method that forms each
product with at most one f32 rounding and adds K of them in f32 in ANY order
is within ``gamma = (K + 2) * 2^-24 * sum_k |a_ik| |b_kj|`` of the exact sum
(the classic ``gamma_K`` bound, with 2 spare units for the product and the
block-scale multiply).  A method that rounds its output to a narrower type
with unit roundoff ``u`` (torch bf16: ``u = 2^-8``) gets
``gamma + u * (|exact| + gamma)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from mlir_mx import numerics as N
from mlir_mx.numerics.formats import E4M3_SCALED, NVFP4_BLOCK_SIZE
from mlir_mx.roofline.variants import Shape

__all__ = [
    "BenchFailure",
    "Oracle",
    "Problem",
    "is_nvfp4",
    "make_problem",
    "mx_bytes",
    "split_format",
    "stored_mx_bytes",
]

F32_UNIT = 2.0**-24


class BenchFailure(Exception):
    """A method produced a wrong result (or could not run); the run fails."""


@dataclass
class Oracle:
    """Exact f64 product and the f32 summation bound of one pair of operands."""

    exact: np.ndarray  # (M, N) float64
    gamma: np.ndarray  # (M, N) float64: (K + 2) * 2^-24 * |A| @ |B|

    @classmethod
    def of(cls, a: np.ndarray, b: np.ndarray) -> Oracle:
        """The oracle of ``a @ b`` (f32 or f64 arrays holding the exact operand values)."""
        a64 = a.astype(np.float64)
        b64 = b.astype(np.float64)
        exact = a64 @ b64
        np.abs(a64, out=a64)
        np.abs(b64, out=b64)
        gamma = (a.shape[1] + 2) * F32_UNIT * (a64 @ b64)
        return cls(exact, gamma)

    def check(self, method: str, where: str, got: np.ndarray, out_unit: float = 0.0) -> float:
        """``max |got - exact| / bound``; raises :class:`BenchFailure` when above 1.

        ``out_unit`` is the unit roundoff of the method's output type (0 for f32).
        """
        got = np.asarray(got)
        if got.shape != self.exact.shape:
            raise BenchFailure(
                f"{method} at {where}: result has shape {got.shape}, expected {self.exact.shape}"
            )
        bound = self.gamma + out_unit * (np.abs(self.exact) + self.gamma)
        err = np.abs(got.astype(np.float64) - self.exact)
        bad = ~(err <= bound)  # NaN counts as wrong
        ratio = np.divide(err, bound, out=np.zeros_like(err), where=bound > 0)
        if bad.any():
            i, j = (int(x) for x in np.argwhere(bad)[0])
            raise BenchFailure(
                f"WRONG RESULT: {method} at {where}: {int(bad.sum())} of {bad.size} outputs "
                f"outside the tolerance; first at [{i}, {j}]: got {got[i, j]!r}, "
                f"exact {self.exact[i, j]!r}, bound {bound[i, j]:.3g}"
            )
        return float(ratio.max()) if ratio.size else 0.0


@dataclass
class Problem:
    """The inputs of one (shape, element format) and their oracle."""

    shape: Shape
    element: str
    block_size: int
    a: np.ndarray  # (M, K) f32, before quantization
    b: np.ndarray  # (K, N) f32, before quantization
    qa: N.MXArray  # blocked along K (axis 1)
    qb: N.MXArray  # blocked along K (axis 0)
    da: np.ndarray  # dequantize(qa), f32
    db: np.ndarray  # dequantize(qb), f32
    #: per-problem cache (oracles of other operand sets, e.g. ggml's)
    cache: dict = field(default_factory=dict)
    #: A's element format when it differs from B's (``element``): a mixed pair
    a_element: str | None = None

    @property
    def a_format(self) -> str:
        """A's element format."""
        return self.a_element or self.element

    @property
    def label(self) -> str:
        """``element``, or ``A:B`` for a mixed pair (A the M x K activations,
        B the K x N weights)."""
        return self.element if self.a_format == self.element else f"{self.a_format}:{self.element}"

    @property
    def where(self) -> str:
        return f"{self.shape} {self.label}"

    @property
    def flops(self) -> int:
        """Useful FLOPs: ``2 M N K``."""
        s = self.shape
        return 2 * s.M * s.N * s.K

    @property
    def oracle(self) -> Oracle:
        """The oracle of ``da @ db`` (computed once)."""
        if "mx" not in self.cache:
            self.cache["mx"] = Oracle.of(self.da, self.db)
        return self.cache["mx"]

    @property
    def f32_a_oracle(self) -> Oracle:
        """The oracle of ``a @ db``: f32 activations, the MX weights (computed once)."""
        if "f32-a" not in self.cache:
            self.cache["f32-a"] = Oracle.of(self.a, self.db)
        return self.cache["f32-a"]


def make_problem(
    shape: Shape, element: str, block_size: int = 32, seed: int = 0, a_element: str | None = None
) -> Problem:
    """Random inputs of ``shape``, B quantized to ``element`` and A to
    ``a_element`` (default ``element``) with blocks of ``block_size``
    (``nvfp4``: blocks of 16, its one block size, each operand with its
    computed global scale)."""
    if is_nvfp4(element):
        block_size = NVFP4_BLOCK_SIZE
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((shape.M, shape.K), dtype=np.float32)
    b = rng.standard_normal((shape.K, shape.N), dtype=np.float32)
    from mlir_mx.convert import dequantize, quantize

    qa = quantize(a, a_element or element, block_size, axis=1)
    qb = quantize(b, element, block_size, axis=0)
    a_el = a_element if a_element not in (None, element) else None
    return Problem(
        shape, element, block_size, a, b, qa, qb, dequantize(qa), dequantize(qb),
        a_element=a_el,
    )  # fmt: skip


def is_nvfp4(element: str) -> bool:
    """``element`` names NVFP4 (E4M3 block scales, a global scale): its rows
    are :mod:`mlir_mx_bench.nvfp4_rows`' (``docs/bench.md``)."""
    return element.lower() in E4M3_SCALED


def split_format(spec: str) -> tuple[str | None, str]:
    """``"A:B"`` -> (A, B); ``"F"`` -> (None, F): A is the activations'
    (M x K) format, B the weights' (K x N)."""
    a, _, b = spec.rpartition(":")
    return (a or None), b


def mx_bytes(rows: int, cols: int, block_size: int) -> int:
    """Bytes of an MX operand as the emulation reads it: one byte per code
    (ml_dtypes), one per scale."""
    return rows * cols + rows * cols // block_size


def stored_mx_bytes(rows: int, cols: int, block_size: int, element: str) -> int:
    """Bytes of an MX operand as our kernels read it: FP4/FP6 codes packed
    where the shape packs (``numerics.is_packed_storage``), one per scale."""
    codes = rows * cols
    if N.is_packed_storage((rows, cols), element):
        per, nbytes = N.packing_group(element)
        codes = codes // per * nbytes
    return codes + rows * cols // block_size

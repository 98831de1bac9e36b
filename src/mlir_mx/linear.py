"""A library API for MX weights: ``mlir_mx.matmul(x, w)`` and ``mlir_mx.Linear(w)``.

No IR to write: a weight quantized with :func:`mlir_mx.numerics.quantize`
(or read from a GGUF file, :mod:`mlir_mx.interop.gguf`) multiplies f32 (or
MX) activations with the generated kernels of :mod:`mlir_mx.kernels`::

    w = quantize(weight, "f4E2M1FN", 32)          # (out, in), blocked along "in"
    lin = Linear(w, threads=2)
    y = lin(x)                                      # x: (M, in) f32 -> (M, out) f32

* The weight is stored once in the kernels' layout: ``B = W^T`` (in x out,
  blocked along ``in``), FP4/FP6 codes packed two per byte / four per three
  bytes (``Linear.nbytes``: 4.25 bits per FP4 element with block 32).
* One compiled kernel per (activation kind, shape class, threads) serves
  every batch size M: ``decode`` for M = 1, ``small`` up to 48 rows,
  ``prefill`` above; each is compiled on first use with a dynamic M.
* Results are those of ``mx.block_matmul`` (the blocked order,
  ``docs/numerics.md``): bit-identical across batch sizes and thread counts.
  An f32 activation enters the products exactly (no quantization).
* Compiled kernels are kept in memory and, lowered to the LLVM dialect, on
  disk (``MLIR_MX_CACHE_DIR``, default ``~/.cache/mlir-mx``; ``off``
  disables it), so a second process skips the mlir-mx and MLIR passes.
"""

from __future__ import annotations

import os
import threading
import weakref
from pathlib import Path

import numpy as np
from mlir import ir

from mlir_mx.dialect import load_dialect
from mlir_mx.execution import Runner
from mlir_mx.kernels import Problem, kernel_module, plan_kernel
from mlir_mx.kernels.plan import SMALL_MAX_M, default_threads
from mlir_mx.numerics import MXArray, pack_codes
from mlir_mx.pipelines import load_pipeline, threads_pipeline

__all__ = ["Linear", "matmul", "cache_dir"]


def cache_dir() -> Path | None:
    """The persistent compile cache directory (None when disabled)."""
    value = os.environ.get("MLIR_MX_CACHE_DIR", "")
    if value.lower() in ("off", "0", "none"):
        return None
    return Path(value) if value else Path.home() / ".cache" / "mlir-mx"


def _shape_class(m: int) -> str:
    return "decode" if m == 1 else "small" if m <= SMALL_MAX_M else "prefill"


class Linear:
    """``y = x @ W.T`` with an MX weight ``W`` of shape (out, in), blocked along ``in``.

    ``weight`` may also be given as ``B`` of shape (in, out) blocked along
    axis 0 (``y = x @ B``), the form ``mx.block_matmul`` takes.  ``threads``:
    default this machine's cores; settable later (``lin.threads = 1``).
    """

    def __init__(self, weight: MXArray, *, threads: int | None = None):
        if not isinstance(weight, MXArray):
            raise TypeError(f"weight: expected an MXArray, got {type(weight).__name__}")
        if weight.ndim != 2:
            raise ValueError(f"weight: expected a 2-D MXArray, got shape {weight.shape}")
        if weight.axis == 1:  # (out, in) blocked along in: B = W^T
            codes, scales = weight.codes.T, weight.scales.T
        else:  # (in, out) blocked along axis 0: already B
            codes, scales = weight.codes, weight.scales
        self.element = weight.element
        self.block_size = weight.block_size
        self.in_features, self.out_features = codes.shape
        self.packed = weight.format.bits < 8
        if self.packed:
            self._codes = pack_codes(np.ascontiguousarray(codes), self.element)
        else:
            self._codes = np.ascontiguousarray(codes)
        self._scales = np.ascontiguousarray(scales)
        self.threads = threads
        self._runners: dict[tuple, Runner] = {}
        self._lock = threading.Lock()

    # -- properties --------------------------------------------------------------

    @property
    def threads(self) -> int:
        return self._threads

    @threads.setter
    def threads(self, value: int | None) -> None:
        if value is None:
            value = default_threads()
        if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
            raise ValueError(f"threads: expected a positive integer, got {value!r}")
        self._threads = int(value)

    @property
    def nbytes(self) -> int:
        """Bytes of the stored weight (codes and scales)."""
        return self._codes.nbytes + self._scales.nbytes

    def __repr__(self) -> str:
        return (
            f"Linear(in_features={self.in_features}, out_features={self.out_features}, "
            f"element={self.element}, block_size={self.block_size}, threads={self.threads})"
        )

    # -- the call ------------------------------------------------------------------

    def __call__(self, x) -> np.ndarray:
        """``x``: f32 ``(M, in)`` or ``(in,)``, or an MXArray ``(M, in)`` blocked
        along its last axis. Returns f32 ``(M, out)`` (``(out,)`` for a vector)."""
        args, m, vector = self._activations(x)
        out = np.zeros((m, self.out_features), np.float32)
        if m:
            a_elem = x.element if isinstance(x, MXArray) else None
            runner = self._runner(a_elem, _shape_class(m))
            runner.invoke("matmul", *args, self._codes, self._scales, out)
        return out[0] if vector else out

    def _activations(self, x):
        k = self.in_features
        if isinstance(x, MXArray):
            if x.ndim != 2 or x.shape[1] != k or x.axis != 1 or x.block_size != self.block_size:
                raise ValueError(
                    f"x: expected an MXArray of shape (M, {k}) blocked along its last axis "
                    f"with block_size {self.block_size}; got shape {x.shape}, axis {x.axis}, "
                    f"block_size {x.block_size}"
                )
            codes = x.codes
            if x.format.bits < 8:
                codes = pack_codes(np.ascontiguousarray(codes), x.element)
            return [np.ascontiguousarray(codes), np.ascontiguousarray(x.scales)], x.shape[0], False
        if not isinstance(x, np.ndarray):
            raise TypeError(f"x: expected a numpy array or an MXArray, got {type(x).__name__}")
        if x.dtype != np.float32:
            raise TypeError(f"x: expected dtype float32, got {x.dtype}")
        vector = x.ndim == 1
        x2 = x.reshape(1, -1) if vector else x
        if x2.ndim != 2 or x2.shape[1] != k:
            raise ValueError(f"x: expected shape (M, {k}) or ({k},), got {x.shape}")
        return [np.ascontiguousarray(x2)], x2.shape[0], vector

    def _runner(self, a_elem: str | None, schedule: str) -> Runner:
        key = (a_elem, schedule, self.threads)
        with self._lock:
            runner = self._runners.get(key)
            if runner is None:
                prob = Problem(
                    None, self.out_features, self.in_features, self.block_size,
                    a_elem, self.element, packed=True,
                )  # fmt: skip
                with ir.Context() as ctx, ir.Location.unknown():
                    load_dialect(ctx)
                    text = str(kernel_module(prob, plan_kernel(prob, schedule, self.threads)))
                pipeline = threads_pipeline(self.threads) + "," + load_pipeline("memref-to-llvm")
                runner = Runner(text, pipeline, cache_dir=cache_dir())
                self._runners[key] = runner
        return runner


_LINEARS: dict[int, tuple[weakref.ref, Linear]] = {}


def matmul(x, w: MXArray, *, threads: int | None = None) -> np.ndarray:
    """``x @ W.T`` (W (out, in) blocked along in) or ``x @ B`` (B (in, out),
    blocked along axis 0) with the MX weight ``w``; see :class:`Linear`.

    The prepared weight is cached for as long as ``w`` lives.
    """
    key = id(w)
    hit = _LINEARS.get(key)
    lin = hit[1] if hit is not None and hit[0]() is w else None
    if lin is None:
        lin = Linear(w, threads=threads)
        _LINEARS[key] = (weakref.ref(w, lambda _r: _LINEARS.pop(key, None)), lin)
    elif threads is not None:
        lin.threads = threads
    return lin(x)

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

import threading
import weakref

import numpy as np
from mlir import ir

from mlir_mx.dialect import load_dialect
from mlir_mx.execution import FREE, BoundFunction, CompileOptions, Runner
from mlir_mx.execution.options import default_cache_dir
from mlir_mx.host import check_threads
from mlir_mx.kernels import Problem, choose, kernel_module, plan_kernel, shape_class
from mlir_mx.kernels.problem import TILE_COLUMNS, tile_b_codes
from mlir_mx.numerics import MXArray, is_packed_storage, pack_codes
from mlir_mx.pipelines import kernel_library_pipeline

__all__ = ["Linear", "matmul", "cache_dir"]

#: The persistent compile cache directory (None when disabled).
cache_dir = default_cache_dir


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
        # numerics.is_packed_storage: FP4/FP6 with whole groups along `out`.
        self.packed = is_packed_storage(codes.shape, self.element)
        if self.packed:
            self._codes = pack_codes(np.ascontiguousarray(codes), self.element)
        else:
            self._codes = np.ascontiguousarray(codes)
        # Whole 64-column tiles: stored tiled (Problem.b_tiled), so a decode
        # call streams the weight sequentially; same bytes, another order.
        self.tiled = self.out_features % TILE_COLUMNS == 0
        if self.tiled:
            raw = self._codes.view(np.uint8)
            self._codes = tile_b_codes(raw, self.block_size, self.element, self.packed)
        self._scales = np.ascontiguousarray(scales)
        self.threads = threads
        self._runners: dict[tuple, Runner] = {}
        self._calls: dict[tuple, BoundFunction] = {}
        self._lock = threading.Lock()

    # -- properties --------------------------------------------------------------

    @property
    def threads(self) -> int:
        return self._threads

    @threads.setter
    def threads(self, value: int | None) -> None:
        self._threads = check_threads(value)

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
        """``x``: f32 ``(M, in)`` or ``(in,)`` (numpy, or any DLPack array such as
        a torch CPU tensor), or an MXArray ``(M, in)`` blocked along its last
        axis. Returns f32 ``(M, out)`` (``(out,)`` for a vector) as numpy."""
        args, m, vector = self._activations(x)
        out = np.zeros((m, self.out_features), np.float32)
        if m:
            a_elem = x.element if isinstance(x, MXArray) else None
            self._bound(a_elem, m, len(args))(*args, out)
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
        if not isinstance(x, np.ndarray) and hasattr(x, "__dlpack__"):
            x = np.from_dlpack(x)  # a torch CPU tensor, ...: viewed, not copied
        if not isinstance(x, np.ndarray):
            raise TypeError(f"x: expected a numpy array or an MXArray, got {type(x).__name__}")
        if x.dtype != np.float32:
            raise TypeError(f"x: expected dtype float32, got {x.dtype}")
        vector = x.ndim == 1
        x2 = x.reshape(1, -1) if vector else x
        if x2.ndim != 2 or x2.shape[1] != k:
            raise ValueError(f"x: expected shape (M, {k}) or ({k},), got {x.shape}")
        return [np.ascontiguousarray(x2)], x2.shape[0], vector

    def _problem(self, a_elem: str | None) -> Problem:
        return Problem(
            None, self.out_features, self.in_features, self.block_size,
            a_elem, self.element, packed=self.packed, b_tiled=self.tiled,
        )  # fmt: skip

    def _bound(self, a_elem: str | None, m: int, n_args: int) -> BoundFunction:
        """``@matmul`` of the kernel for ``m`` rows with the weight bound: the
        weight's descriptors are made once (Runner.bind), so a call only
        checks and passes the activations and the output."""
        key = (a_elem, shape_class(m), self.threads)
        bound = self._calls.get(key)
        if bound is None:
            schedule = choose(self._problem(a_elem), m).name
            runner = self._runner(a_elem, schedule)
            bound = runner.bind("matmul", *[FREE] * n_args, self._codes, self._scales, FREE)
            self._calls[key] = bound
        return bound

    def _runner(self, a_elem: str | None, schedule: str) -> Runner:
        key = (a_elem, schedule, self.threads)
        with self._lock:
            runner = self._runners.get(key)
            if runner is None:
                prob = self._problem(a_elem)
                with ir.Context() as ctx, ir.Location.unknown():
                    load_dialect(ctx)
                    text = str(kernel_module(prob, plan_kernel(prob, schedule, self.threads)))
                options = CompileOptions(
                    kernel_library_pipeline(self.threads), cache_dir=default_cache_dir()
                )
                runner = Runner(text, options=options)
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

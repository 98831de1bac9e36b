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

import ctypes
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
from mlir_mx.kernels.problem import TILE_COLUMNS, tile_b_codes
from mlir_mx.numerics import (
    SCALE_DTYPE,
    MXArray,
    element_format,
    is_packed_storage,
    pack_codes,
    packed_shape,
)
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
        self.element = weight.element
        self.block_size = weight.block_size
        fmt = weight.format
        if weight.axis == 1:  # (out, in) blocked along in: B = W^T, one transposed copy
            codes = np.ascontiguousarray(weight.codes.T)  # (unpacked transiently)
            self._scales = np.ascontiguousarray(weight.scales.T)
            # numerics.is_packed_storage: FP4/FP6 with whole groups along `out`.
            self.packed = is_packed_storage(codes.shape, self.element)
            self._codes = pack_codes(codes, self.element) if self.packed else codes
        else:  # (in, out) blocked along axis 0: already B, packed as Linear packs it
            raw, self._scales = weight.held_buffers()  # the MXArray's own: no copy
            self.packed = weight.is_packed
            self._codes = raw if self.packed else raw.view(fmt.dtype)
        self.in_features, self.out_features = weight.shape[::-1] if weight.axis == 1 else weight.shape
        # Whole 64-column tiles: stored tiled (Problem.b_tiled), so a decode
        # call streams the weight sequentially; same bytes, another order.
        self.tiled = self.out_features % TILE_COLUMNS == 0
        if self.tiled:
            raw = self._codes.view(np.uint8)
            self._codes = tile_b_codes(raw, self.block_size, self.element, self.packed)
        self._start(threads)

    @classmethod
    def from_stored(
        cls, codes, scales, element: str, block_size: int, in_features: int, out_features: int,
        *, threads: int | None = None,
    ) -> Linear:  # fmt: skip
        """The Linear whose :attr:`stored` arrays are ``codes`` and ``scales``,
        held as they are (no copy): the form a Linear of this weight shape keeps
        (B = W^T packed where it packs, in 64-column tiles where ``out_features``
        is a multiple of 64; :attr:`stored`; one-code-per-byte codes may also come
        as raw ``uint8``).  Raises ``ValueError`` naming the argument when an
        array has another shape, dtype or layout."""
        lin = cls.__new__(cls)
        fmt = element_format(element)
        lin.element, lin.block_size = fmt.name, int(block_size)
        lin.in_features, lin.out_features = int(in_features), int(out_features)
        lin.packed = is_packed_storage((lin.in_features, lin.out_features), fmt)
        lin.tiled = lin.out_features % TILE_COLUMNS == 0
        want_scales = (lin.in_features // lin.block_size, lin.out_features)
        width = packed_shape((1, lin.out_features), fmt)[1] if lin.packed else lin.out_features
        want_codes = (lin.in_features, width)
        if lin.tiled:
            tiles = lin.out_features // TILE_COLUMNS
            want_codes = (want_scales[0] * tiles, lin.block_size * width // tiles)
        byte_codes = lin.packed or lin.tiled
        if not byte_codes and isinstance(codes, np.ndarray) and codes.dtype == np.uint8:
            codes = codes.view(fmt.dtype)  # raw code bytes, as a uint8 tensor holds them
        for name, a, shape, dtype in (
            ("codes", codes, want_codes, np.dtype(np.uint8) if byte_codes else fmt.dtype),
            ("scales", scales, want_scales, SCALE_DTYPE),
        ):
            if not isinstance(a, np.ndarray) or a.dtype != dtype or a.shape != shape:
                got = f"{a.dtype} {a.shape}" if isinstance(a, np.ndarray) else type(a).__name__
                raise ValueError(f"{name}: expected a {dtype} array of shape {shape}, got {got}")
            if not a.flags.c_contiguous:
                raise ValueError(f"{name}: expected a C-contiguous array")
        lin._codes, lin._scales = codes, scales
        lin._start(threads)
        return lin

    def _start(self, threads: int | None) -> None:
        self.threads = threads
        self._runners: dict[tuple, Runner] = {}
        self._calls: dict[tuple, _BoundMatmul] = {}
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
    def stored(self) -> tuple[np.ndarray, np.ndarray]:
        """``(codes, scales)`` as the kernels read them (the arrays held, not
        copies): B = W^T's codes, packed along ``out`` where they pack
        (``uint8``), in 64-column tiles when :attr:`tiled` (``uint8``,
        ``kernels.problem.tile_b_codes``), and its E8M0 scales
        ``(in / block_size, out)``.  :meth:`from_stored` takes them back."""
        return self._codes, self._scales

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
            self._bound(a_elem, _shape_class(m))(*args, out)
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
            # K is a multiple of the block: FP4/FP6 rows are stored packed, as the
            # kernel reads them; the arrays x holds, passed without a copy.
            return list(x.held_buffers()), x.shape[0], False
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

    def _bound(self, a_elem: str | None, schedule: str) -> _BoundMatmul:
        key = (a_elem, schedule, self.threads)
        bound = self._calls.get(key)
        if bound is None:
            runner = self._runner(a_elem, schedule)
            # The first call goes through the Runner's checks; later ones reuse
            # the weight descriptors (see _BoundMatmul).
            bound = _BoundMatmul(runner, [self._codes, self._scales])
            self._calls[key] = bound
        return bound

    def _runner(self, a_elem: str | None, schedule: str) -> Runner:
        key = (a_elem, schedule, self.threads)
        with self._lock:
            runner = self._runners.get(key)
            if runner is None:
                prob = Problem(
                    None, self.out_features, self.in_features, self.block_size,
                    a_elem, self.element, packed=self.packed, b_tiled=self.tiled,
                )  # fmt: skip
                with ir.Context() as ctx, ir.Location.unknown():
                    load_dialect(ctx)
                    text = str(kernel_module(prob, plan_kernel(prob, schedule, self.threads)))
                pipeline = threads_pipeline(self.threads) + "," + load_pipeline("memref-to-llvm")
                runner = Runner(text, pipeline, cache_dir=cache_dir())
                self._runners[key] = runner
        return runner


class _BoundMatmul:
    """``@matmul`` of one compiled kernel with the weight's buffers bound.

    The Runner checks every argument of every call (dtype, shape, contiguity,
    writability) and builds fresh memref descriptors: ~120 us, 4 % of an
    MXFP4 decode step of a 4096 x 14336 layer.  Here the weights are the
    Linear's own arrays, checked once by the first call (through the
    Runner), and the activations and output are checked by
    ``Linear._activations`` / created by ``Linear.__call__``; so later calls
    only refill the two per-call descriptors (under a lock: they are shared)
    and call the function: a few microseconds.
    """

    def __init__(self, runner: Runner, weights: list[np.ndarray]):
        self.runner, self.weights = runner, weights
        self.fn = None
        self.lock = threading.Lock()

    def __call__(self, *args) -> None:
        if self.fn is None:  # first call: the Runner's checks, then bind
            self.runner.invoke("matmul", *args[:-1], *self.weights, args[-1])
            self._bind(len(args) - 1)
            return
        with self.lock:
            for desc, a in zip(self.per_call, args, strict=True):
                _fill(desc, a)
            self.fn(self.array)

    def _bind(self, n_activation_args: int) -> None:
        from mlir_mx.execution.arguments import descriptor, descriptor_type

        self.per_call = [descriptor_type(2)() for _ in range(n_activation_args + 1)]
        fixed = [descriptor(w) for w in self.weights]
        order = self.per_call[:-1] + fixed + self.per_call[-1:]
        self.ptrs = [ctypes.pointer(d) for d in order]
        cells = [ctypes.pointer(p) for p in self.ptrs]
        self.keep = (fixed, cells)
        self.array = (ctypes.c_void_p * len(cells))(
            *[ctypes.cast(c, ctypes.c_void_p) for c in cells]
        )
        raw = self.runner.engine.raw_lookup("_mlir_ciface_matmul")
        self.fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(raw)


def _fill(d, a: np.ndarray) -> None:
    """Point a rank-2 descriptor at the C-contiguous array ``a``."""
    d.allocated = d.aligned = a.ctypes.data
    d.offset = 0
    d.shape[0], d.shape[1] = a.shape
    d.strides[0], d.strides[1] = a.shape[1], 1


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

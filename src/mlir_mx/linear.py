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
  An f32 activation enters the products exactly (no quantization), unless
  ``activations="i8"`` (or another MX element format) asks for it to be
  quantized per call: then ``lin(x)`` is ``Linear(w)(quantize(x, "i8", B))``
  bit for bit.
* Pairs the CPU's dot units compute exactly (FP4/FP6/INT8 activations and
  weights: VNNI; FP8 in either: AVX512_BF16) run the dot kernels
  (:mod:`mlir_mx.kernels.dot`) on a second copy of the weight in VNNI
  records, made on first use; same bits as the f32 kernels.
* Compiled kernels are kept in memory and, lowered to the LLVM dialect, on
  disk (``MLIR_MX_CACHE_DIR``, default ``~/.cache/mlir-mx``; ``off``
  disables it), so a second process skips the mlir-mx and MLIR passes.
"""

from __future__ import annotations

import threading
import weakref

import ml_dtypes
import numpy as np
from mlir import ir

from mlir_mx.convert import quantize as compiled_quantize
from mlir_mx.dialect import load_dialect
from mlir_mx.errors import MXArgTypeError, MXValueError, user_error
from mlir_mx.execution import FREE, BoundFunction, CompileOptions, Runner
from mlir_mx.execution.options import default_cache_dir
from mlir_mx.host import check_threads
from mlir_mx.kernels import Problem, choose, kernel_module, plan_kernel, shape_class
from mlir_mx.kernels.dot_layout import RecordLayout, dot_kind, pack_records
from mlir_mx.kernels.problem import TILE_COLUMNS, tile_b_codes
from mlir_mx.numerics import (
    SCALE_DTYPE,
    MXArray,
    element_format,
    is_packed_storage,
    pack_codes,
    packed_shape,
    unpack_codes,
)
from mlir_mx.pipelines import kernel_library_pipeline

__all__ = ["Linear", "matmul", "cache_dir"]

#: The persistent compile cache directory (None when disabled).
cache_dir = default_cache_dir


class Linear:
    """``y = x @ W.T`` with an MX weight ``W`` of shape (out, in), blocked along ``in``.

    ``weight`` may also be given as ``B`` of shape (in, out) blocked along
    axis 0 (``y = x @ B``), the form ``mx.block_matmul`` takes, or as float
    weights (out, in) (numpy or DLPack) with ``element=`` (and
    ``block_size=``, default 32): quantized here along ``in`` by the compiled
    :func:`mlir_mx.quantize`.  ``threads``: default this machine's cores;
    settable later (``lin.threads = 1``).  ``activations``: None (f32
    activations enter exactly) or an MX element format that f32 activations
    are quantized to per call (blocks of the weight's block size along
    ``in``; MX activations are used as given).
    """

    def __init__(
        self,
        weight: MXArray,
        *,
        threads: int | None = None,
        element: str | None = None,
        block_size: int = 32,
        activations: str | None = None,
    ):
        if element is not None and not isinstance(weight, MXArray):
            weight = compiled_quantize(weight, element, block_size, axis=-1, threads=threads)
        if not isinstance(weight, MXArray):
            raise MXArgTypeError(
                f"weight: expected an MXArray (or float weights with element=...), "
                f"got {type(weight).__name__}"
            )
        if weight.ndim != 2:
            raise MXValueError(f"weight: expected a 2-D MXArray, got shape {weight.shape}")
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
        self._start(threads, activations)

    @classmethod
    def from_stored(
        cls, codes, scales, element: str, block_size: int, in_features: int, out_features: int,
        *, threads: int | None = None, activations: str | None = None,
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
                raise MXValueError(f"{name}: expected a {dtype} array of shape {shape}, got {got}")
            if not a.flags.c_contiguous:
                raise MXValueError(f"{name}: expected a C-contiguous array")
        lin._codes, lin._scales = codes, scales
        lin._start(threads, activations)
        return lin

    def _start(self, threads: int | None, activations: str | None) -> None:
        if activations is not None:
            try:
                activations = element_format(activations).name
            except (TypeError, ValueError) as err:
                raise user_error(err, f"activations: {err}") from None
        self.activations = activations
        self._records: dict[str, np.ndarray] = {}  # dot kind -> VNNI records of B
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
    def stored(self) -> tuple[np.ndarray, np.ndarray]:
        """``(codes, scales)`` as the kernels read them (the arrays held, not
        copies): B = W^T's codes, packed along ``out`` where they pack
        (``uint8``), in 64-column tiles when :attr:`tiled` (``uint8``,
        ``kernels.problem.tile_b_codes``), and its E8M0 scales
        ``(in / block_size, out)``.  :meth:`from_stored` takes them back."""
        return self._codes, self._scales

    @property
    def nbytes(self) -> int:
        """Bytes of the stored weight (codes and scales, plus the dot
        kernels' records once a call has made them)."""
        extra = sum(r.nbytes for r in self._records.values())
        return self._codes.nbytes + self._scales.nbytes + extra

    def __repr__(self) -> str:
        act = f", activations={self.activations!r}" if self.activations else ""
        return (
            f"Linear(in_features={self.in_features}, out_features={self.out_features}, "
            f"element={self.element}, block_size={self.block_size}, threads={self.threads}"
            f"{act})"
        )

    # -- the call ------------------------------------------------------------------

    def __call__(self, x) -> np.ndarray:
        """``x``: f32 ``(M, in)`` or ``(in,)`` (numpy, or any DLPack array such as
        a torch CPU tensor), or an MXArray ``(M, in)`` blocked along its last
        axis. Returns f32 ``(M, out)`` (``(out,)`` for a vector) as numpy."""
        args, kind, m, vector = self._activations(x)
        out = np.zeros((m, self.out_features), np.float32)
        # An empty weight (out or in = 0) gives the empty (or zero) product at
        # every M without a kernel: no kernel schedule divides by 0 columns.
        if m and self.out_features and self.in_features:
            call = self._bound(kind, m)
            if call is None:  # no dot kernel: quantize (compiled), then the MX path
                q = compiled_quantize(args[0], kind[2], self.block_size, threads=self.threads)
                args, kind = self._mx_args(q), (q.element, q.is_packed, None)
                call = self._bound(kind, m)
            call(*args, out)  # its messages name x, the weight, the output (_X_NAMES)
        return out[0] if vector else out

    def schedule(self, x) -> str:
        """The kernel schedule a call with ``x`` runs (``int-prefill``,
        ``decode``, ...; the registry's names)."""
        _args, kind, m, _vector = self._activations(x)
        cls = shape_class(max(m, 1))
        found = self._kernel(kind, cls)
        if found is None:  # quantized by the oracle, then the MX kernels
            packed = is_packed_storage((1, self.in_features), kind[2])
            found = self._kernel((kind[2], packed, None), cls)
        return found[1]

    def _activations(self, x):
        """``(arguments, kind, M, vector)``: the activations as the kernel takes
        them, and their kind ``(element or None, packed, quantized to)``: an
        f32 ``x`` is quantized per call to ``activations`` when it is set."""
        k = self.in_features
        if isinstance(x, MXArray):
            if x.ndim != 2 or x.shape[1] != k or x.axis != 1 or x.block_size != self.block_size:
                raise MXValueError(
                    f"x: expected an MXArray of shape (M, {k}) blocked along its last axis "
                    f"with block_size {self.block_size}; got shape {x.shape}, axis {x.axis}, "
                    f"block_size {x.block_size}"
                )
            return self._mx_args(x), (x.element, x.is_packed, None), x.shape[0], False
        if not isinstance(x, np.ndarray) and hasattr(x, "__dlpack__"):
            x = _host_view(x)  # a torch CPU tensor, ...: viewed, not copied
        if not isinstance(x, np.ndarray):
            raise MXArgTypeError(f"x: expected a numpy array or an MXArray, got {type(x).__name__}")
        if x.dtype in _HALF_DTYPES:
            x = x.astype(np.float32)  # exact: every f16 / bf16 value is an f32 value
        if x.dtype != np.float32:
            raise MXArgTypeError(f"x: expected dtype float32 (or float16, bfloat16), got {x.dtype}")
        vector = x.ndim == 1
        x2 = x.reshape(1, -1) if vector else x
        if x2.ndim != 2 or x2.shape[1] != k:
            raise MXValueError(f"x: expected shape (M, {k}) or ({k},), got {x.shape}")
        # Read-only x is fine (the kernels never write it); misaligned or
        # strided x is copied.
        x2 = np.require(x2, np.float32, ["C_CONTIGUOUS", "ALIGNED"])
        return [x2], (None, False, self.activations), x2.shape[0], vector

    @staticmethod
    def _mx_args(x: MXArray) -> list[np.ndarray]:
        """The arrays an MX activation holds, passed without a copy: its codes
        in their stored form (packed bytes where the shape packs,
        numerics.is_packed_storage; one code per byte otherwise) and scales."""
        raw, scales = x.held_buffers()
        return [raw if x.is_packed else raw.view(x.format.dtype), scales]

    def _kernel(self, kind, cls: str):
        """(problem, schedule, weight arguments) for activations of ``kind`` at
        shape class ``cls``: a dot kernel when the CPU has one for the pair,
        else the f32 kernels (None for an f32 activation to quantize: the
        caller quantizes it with the oracle)."""
        a_elem, a_packed, a_quant = kind
        dot = dot_kind(a_elem or a_quant, self.element, self.block_size)
        common = (None, self.out_features, self.in_features, self.block_size, a_elem, self.element)
        if dot is not None:
            prob = Problem(*common, a_packed=a_packed, a_quant=a_quant, b_dot=dot.name)
            chosen = choose(prob, cls=cls, required=False)
            if chosen is not None:
                return prob, chosen.name, [self._dot_records(dot)]
        if a_quant is not None:
            return None
        prob = Problem(*common, a_packed=a_packed, b_packed=self.packed, b_tiled=self.tiled)
        return prob, choose(prob, cls=cls).name, [self._codes, self._scales]

    def _dot_records(self, dot) -> np.ndarray:
        """B as the dot kernels' VNNI records of unit ``dot`` (made once)."""
        with self._lock:
            rec = self._records.get(dot.name)
            if rec is None:
                layout = RecordLayout(dot, self.element, self.block_size)
                rec = pack_records(self._code_matrix(), self._scales, layout)
                self._records[dot.name] = rec
        return rec

    def _code_matrix(self) -> np.ndarray:
        """B's codes (in, out), one per byte, from the stored (tiled, packed) form."""
        raw = self._codes.view(np.uint8)
        if self.tiled:
            k, bs = self.in_features, self.block_size
            tiles = self.out_features // TILE_COLUMNS
            t = raw.reshape(k // bs, tiles, bs, -1).transpose(0, 2, 1, 3)
            raw = np.ascontiguousarray(t).reshape(k, -1)
        if self.packed:
            return unpack_codes(raw, self.element)
        return raw.view(element_format(self.element).dtype)

    def _bound(self, kind, m: int) -> BoundFunction | None:
        """``@matmul`` of the kernel for ``m`` rows of activations of ``kind``,
        with the weight bound: the weight's descriptors are made once
        (Runner.bind), so a call only checks and passes the activations and
        the output.  None: no kernel quantizes these activations here."""
        key = (kind, shape_class(m), self.threads)
        bound = self._calls.get(key)
        if bound is None:
            found = self._kernel(kind, shape_class(m))
            if found is None:
                return None
            prob, schedule, weights = found
            runner = self._runner(prob, schedule)
            n_act = 1 if kind[0] is None else 2
            names = [*_X_NAMES[n_act], *_W_NAMES[len(weights)], "the output"]
            bound = runner.bind("matmul", *[FREE] * n_act, *weights, FREE, names=names)
            self._calls[key] = bound
        return bound

    def _runner(self, prob: Problem, schedule: str) -> Runner:
        key = (prob, schedule, self.threads)
        with self._lock:
            runner = self._runners.get(key)
            if runner is None:
                with ir.Context() as ctx, ir.Location.unknown():
                    load_dialect(ctx)
                    text = str(kernel_module(prob, plan_kernel(prob, schedule, self.threads)))
                options = CompileOptions(
                    kernel_library_pipeline(self.threads), cache_dir=default_cache_dir()
                )
                runner = Runner(text, options=options)
                self._runners[key] = runner
        return runner


_HALF_DTYPES = (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))


def _host_view(x) -> np.ndarray:
    """A numpy view of the DLPack array ``x``; a torch bfloat16/float16 tensor
    as float32 (numpy has no bfloat16 to view it as)."""
    if type(x).__module__.startswith("torch"):
        if getattr(x, "requires_grad", False):
            raise MXArgTypeError(
                "x: the tensor requires grad, and Linear computes no gradients: "
                "pass x.detach()"
            )
        if str(getattr(x, "dtype", "")) in ("torch.bfloat16", "torch.float16"):
            x = x.float()  # exact
    try:
        return np.from_dlpack(x)
    except (BufferError, RuntimeError, TypeError, ValueError) as err:
        raise MXArgTypeError(f"x: cannot view this {type(x).__name__} as host memory: {err}") from None


#: The kernels' arguments in Linear's terms (Runner.bind's names), by how
#: many there are: the activations (f32, or MX codes and scales) and the
#: weight (codes and scales, or the dot kernels' records).
_X_NAMES = {1: ("x",), 2: ("x (codes)", "x (scales)")}
_W_NAMES = {2: ("the weight (codes)", "the weight (scales)"), 1: ("the weight (dot records)",)}


_LINEARS: dict[int, tuple[weakref.ref, Linear]] = {}


def matmul(
    x, w: MXArray, *, threads: int | None = None, element: str | None = None, block_size: int = 32
) -> np.ndarray:
    """``x @ W.T`` (W (out, in) blocked along in) or ``x @ B`` (B (in, out),
    blocked along axis 0) with the MX weight ``w``; see :class:`Linear`.

    The prepared weight is cached for as long as ``w`` lives.  Float weights
    ``w`` (out, in) with ``element=`` are quantized on every call (compiled,
    :func:`mlir_mx.quantize`); keep a :class:`Linear` to quantize them once.
    """
    if element is not None and not isinstance(w, MXArray):
        return Linear(w, threads=threads, element=element, block_size=block_size)(x)
    key = id(w)
    hit = _LINEARS.get(key)
    lin = hit[1] if hit is not None and hit[0]() is w else None
    if lin is None:
        lin = Linear(w, threads=threads)
        _LINEARS[key] = (weakref.ref(w, lambda _r: _LINEARS.pop(key, None)), lin)
    elif threads is not None:
        lin.threads = threads
    return lin(x)

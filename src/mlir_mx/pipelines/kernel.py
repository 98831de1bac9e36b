"""The pipelines of the generated kernels, built from typed elements
(``PipelineElement.of``), never from text: :func:`kernel_pipeline` (an mx
module), :func:`kernel_library_pipeline` (a stand-alone kernel module) and
their parallel loops' lowering, :func:`threads_pipeline`."""

from __future__ import annotations

import operator

from mlir_mx.errors import MXArgTypeError
from mlir_mx.host import check_threads
from mlir_mx.passes.pipeline import Pipeline, PipelineElement, PipelineError
from mlir_mx.pipelines.shipped import load_pipeline

__all__ = [
    "PARALLEL_MODES",
    "check_parallel",
    "kernel_library_pipeline",
    "kernel_pipeline",
    "threads_pipeline",
]


#: How parallel loops run: on upstream's async runtime (its own worker
#: threads), or as tasks the caller runs on its threads (``mx-parallel-tasks``:
#: torch's OpenMP team, :mod:`mlir_mx.execution.threads`).
PARALLEL_MODES = ("async", "tasks")


def check_parallel(parallel: str) -> str:
    """``parallel`` when it is one of :data:`PARALLEL_MODES`, else PipelineError."""
    if not isinstance(parallel, str) or parallel not in PARALLEL_MODES:
        raise PipelineError(
            f"parallel: expected one of {', '.join(PARALLEL_MODES)}, got {parallel!r}"
        )
    return parallel


def _count(threads) -> int | None:
    """``threads`` as an int (None kept: this machine's cores), else ``MXArgTypeError``."""
    if threads is None:
        return None
    try:
        if not isinstance(threads, bool):
            return operator.index(threads)
    except TypeError:
        pass
    raise MXArgTypeError(f"threads: expected 0 or a positive integer, got {type(threads).__name__}")


def threads_pipeline(threads: int, parallel: str = "async") -> Pipeline:
    """Lower ``scf.parallel`` to tasks of upstream's async runtime.

    ``async-parallel-for`` shards each parallel loop into at most
    ``8 * threads`` tasks (our kernels' loops have ``threads`` iterations, so
    at most ``threads`` run at once); the rest lowers ``async`` to runtime
    calls (``libmlir_async_runtime.so``, loaded by the Runner).  Harmless on
    a module without ``scf.parallel``.  ``threads=0``: kernels whose loops
    have a run-time count of iterations (``kernels.convert.RUNTIME_THREADS``),
    sharded by the runtime's number of worker threads (``num-workers=-1``).
    ``parallel="tasks"``: ``mx-parallel-tasks`` instead, the loop run by the
    caller's threads (``docs/library.md``, "Threads").
    """
    threads = _count(threads)
    if check_parallel(parallel) == "tasks":
        return Pipeline.of(
            PipelineElement.of("mx-parallel-tasks", threads=max(1, check_threads(threads or None)))
        )
    workers = -1 if threads == 0 else check_threads(threads)
    return Pipeline.of(
        PipelineElement.of("async-parallel-for", num_workers=workers, min_task_size=1),
        PipelineElement("async-to-async-runtime"),
        PipelineElement("async-runtime-ref-counting"),
        PipelineElement("async-runtime-ref-counting-opt"),
        PipelineElement("convert-async-to-llvm"),
    )


def kernel_pipeline(
    schedule: str = "auto", threads: int | None = None, parallel: str = "async"
) -> Pipeline:
    """The default lowering of an mx module: generated matmul kernels, then LLVM.

    ``mx-to-linalg`` (blocked matmuls) -> ``bufferize`` -> ``mx-matmul-kernels``
    (``schedule``, ``threads``; None = this machine's cores) ->
    ``mx-quantize-kernels`` (``threads``) -> threads (``parallel``:
    :func:`threads_pipeline`) -> the rest of ``lower-to-llvm``.
    """
    threads = check_threads(threads)
    return Pipeline.of(
        PipelineElement.of("mx-to-linalg", matmul_lowering="blocked"),
        # tensor-level elementwise arith (e.g. what --canonicalize leaves)
        PipelineElement("convert-elementwise-to-linalg"),
        load_pipeline("bufferize"),
        PipelineElement.of("mx-matmul-kernels", schedule=schedule, threads=threads),
        PipelineElement.of("mx-quantize-kernels", threads=threads),
        threads_pipeline(threads, parallel),
        load_pipeline("memref-to-llvm"),
    )


def kernel_library_pipeline(threads: int, parallel: str = "async") -> Pipeline:
    """The lowering of a stand-alone kernel module (memrefs already, e.g.
    :func:`mlir_mx.kernels.kernel_module`): threads (``parallel``:
    :func:`threads_pipeline`), then LLVM."""
    return threads_pipeline(threads, parallel) + load_pipeline("memref-to-llvm")

"""Named pass pipelines shipped as package data.

A pipeline is a text file ``<name>.txt`` next to this module: one pipeline
element per line (an upstream pass with options, an ``anchor(...)`` nest or a
pass of our registry), ``#`` comments and blank lines ignored;
``{pipelines_dir}`` expands to this directory (where the transform schedules,
``*.mlir``, live) and a line ``include NAME`` inserts the pipeline ``NAME``.
:func:`load_pipeline` returns the elements joined with commas, ready for
:func:`mlir_mx.passes.pipeline.build_pass_manager` (and composable with other
pipelines by joining with ``,``).
"""

from __future__ import annotations

from importlib import resources

__all__ = [
    "load_pipeline",
    "available_pipelines",
    "data_dir",
    "schedule_path",
    "kernel_pipeline",
    "threads_pipeline",
]


def _files():
    return resources.files(__name__)


def available_pipelines() -> list[str]:
    """Names of the shipped pipelines (without ``.txt``), sorted."""
    return sorted(p.name[: -len(".txt")] for p in _files().iterdir() if p.name.endswith(".txt"))


def load_pipeline(name: str) -> str:
    """The pipeline ``name`` as one comma-separated pipeline string."""
    return ",".join(_elements(name, ()))


def _elements(name: str, including: tuple[str, ...]) -> list[str]:
    if name in including:
        raise KeyError(f"pipeline '{name}' includes itself ({' -> '.join(including + (name,))})")
    path = _files() / f"{name}.txt"
    if not path.is_file():
        known = ", ".join(available_pipelines()) or "none"
        raise KeyError(f"no pipeline named '{name}' (available: {known})")
    elements: list[str] = []
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line.startswith("include "):
            elements += _elements(line.split(None, 1)[1].strip(), including + (name,))
        elif line:
            elements.append(line.rstrip(",").replace("{pipelines_dir}", data_dir()))
    return elements


def data_dir() -> str:
    """Directory of the shipped pipelines and transform schedules."""
    return str(_files())


def schedule_path(name: str = "schedules") -> str:
    """Path of a shipped transform library (``<name>.mlir``)."""
    path = _files() / f"{name}.mlir"
    if not path.is_file():
        raise KeyError(f"no transform library named '{name}'")
    return str(path)


def threads_pipeline(threads: int) -> str:
    """Lower ``scf.parallel`` to tasks of upstream's async runtime.

    ``async-parallel-for`` shards each parallel loop into at most
    ``8 * threads`` tasks (our kernels' loops have ``threads`` iterations, so
    at most ``threads`` run at once); the rest lowers ``async`` to runtime
    calls (``libmlir_async_runtime.so``, loaded by the Runner).  Harmless on
    a module without ``scf.parallel``.
    """
    return ",".join(
        [
            f"async-parallel-for{{num-workers={max(1, threads)} min-task-size=1}}",
            "async-to-async-runtime",
            "async-runtime-ref-counting",
            "async-runtime-ref-counting-opt",
            "convert-async-to-llvm",
        ]
    )


def kernel_pipeline(schedule: str = "auto", threads: int = 0) -> str:
    """The default lowering of an mx module: generated matmul kernels, then LLVM.

    ``mx-to-linalg`` (blocked matmuls) -> ``bufferize`` -> ``mx-matmul-kernels``
    (``schedule``, ``threads``; 0 = this machine's cores) ->
    ``mx-quantize-kernels`` (``threads``) -> threads -> the rest of
    ``lower-to-llvm``.
    """
    from mlir_mx.kernels.plan import default_threads

    threads = threads or default_threads()
    return ",".join(
        [
            "mx-to-linalg{matmul-lowering=blocked}",
            # tensor-level elementwise arith (e.g. what --canonicalize leaves)
            "convert-elementwise-to-linalg",
            load_pipeline("bufferize"),
            f"mx-matmul-kernels{{schedule={schedule} threads={threads}}}",
            f"mx-quantize-kernels{{threads={threads}}}",
            threads_pipeline(threads),
            load_pipeline("memref-to-llvm"),
        ]
    )

"""The pipelines shipped as package data: text files ``<name>.txt`` in this
package's directory, one pipeline element per line (an upstream pass with
options, an ``anchor(...)`` nest or a pass of our registry), ``#`` comments
and blank lines ignored; ``{pipelines_dir}`` expands to the directory (where
the transform schedules, ``*.mlir``, live) and a line ``include NAME`` inserts
the pipeline ``NAME``.  :func:`load_pipeline` returns a
:class:`~mlir_mx.passes.pipeline.Pipeline`.
"""

from __future__ import annotations

from importlib import resources

from mlir_mx.passes.pipeline import Pipeline, PipelineError

__all__ = ["available_pipelines", "data_dir", "load_pipeline", "schedule_path"]


def _files():
    return resources.files(__package__)  # mlir_mx.pipelines: the .txt and .mlir files


def available_pipelines() -> list[str]:
    """Names of the shipped pipelines (without ``.txt``), sorted."""
    return sorted(p.name[: -len(".txt")] for p in _files().iterdir() if p.name.endswith(".txt"))


def load_pipeline(name: str) -> Pipeline:
    """The shipped pipeline ``name`` as a :class:`~mlir_mx.passes.pipeline.Pipeline`.

    The file is text (the edge where pipelines are read); an unknown name
    raises :class:`~mlir_mx.passes.pipeline.PipelineError` listing the
    available ones.
    """
    return _load(name, ())


def _load(name: str, including: tuple[str, ...]) -> Pipeline:
    """The pipeline of file ``name``: each line parsed on its own (an
    ``include`` loaded as a pipeline), the pieces concatenated."""
    if name in including:
        raise PipelineError(
            f"pipeline '{name}' includes itself ({' -> '.join(including + (name,))})"
        )
    path = _files() / f"{name}.txt"
    if not path.is_file():
        known = ", ".join(available_pipelines()) or "none"
        raise PipelineError(f"no pipeline named '{name}' (available: {known})")
    parts: list[Pipeline] = []
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line.startswith("include "):
            parts.append(_load(line.split(None, 1)[1].strip(), including + (name,)))
        elif line:
            parts.append(Pipeline.parse(line.rstrip(",").replace("{pipelines_dir}", data_dir())))
    return Pipeline.of(*parts)


def data_dir() -> str:
    """Directory of the shipped pipelines and transform schedules."""
    return str(_files())


def schedule_path(name: str = "schedules") -> str:
    """Path of a shipped transform library (``<name>.mlir``)."""
    path = _files() / f"{name}.mlir"
    if not path.is_file():
        raise PipelineError(f"no transform library named '{name}'")
    return str(path)

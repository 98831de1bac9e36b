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

__all__ = ["load_pipeline", "available_pipelines", "data_dir", "schedule_path"]


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

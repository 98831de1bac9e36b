"""Named pass pipelines shipped as package data.

A pipeline is a text file ``<name>.txt`` in this package (:mod:`.shipped`): one pipeline
element per line (an upstream pass with options, an ``anchor(...)`` nest or a
pass of our registry), ``#`` comments and blank lines ignored;
``{pipelines_dir}`` expands to this directory (where the transform schedules,
``*.mlir``, live) and a line ``include NAME`` inserts the pipeline ``NAME``.
:func:`load_pipeline` returns a :class:`~mlir_mx.passes.pipeline.Pipeline`
(composable with ``+``); :func:`kernel_pipeline` and :func:`threads_pipeline`
(:mod:`.kernel`) build theirs from typed elements (``PipelineElement.of``),
never from text.
"""

from __future__ import annotations

from mlir_mx.pipelines.kernel import (
    PARALLEL_MODES,
    check_parallel,
    kernel_library_pipeline,
    kernel_pipeline,
    threads_pipeline,
)
from mlir_mx.pipelines.shipped import available_pipelines, data_dir, load_pipeline, schedule_path

__all__ = [
    "load_pipeline",
    "available_pipelines",
    "data_dir",
    "schedule_path",
    "kernel_library_pipeline",
    "kernel_pipeline",
    "threads_pipeline",
    "PARALLEL_MODES",
    "check_parallel",
]

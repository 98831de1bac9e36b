"""The lowering of a kernel module on AMX tiles (:mod:`mlir_mx.kernels.amx`):
``memref-to-llvm`` with its ``convert-vector-to-llvm`` also lowering
upstream's ``amx`` dialect (``enable-amx=true``) to the
``llvm.x86.t*.internal`` intrinsics."""

from __future__ import annotations

from mlir_mx.passes.pipeline import Pipeline, PipelineElement
from mlir_mx.pipelines.shipped import load_pipeline

__all__ = ["amx_library_pipeline"]


def amx_library_pipeline() -> Pipeline:
    """``memref-to-llvm`` (which ends in ``mx-host-target``: the host's
    features, masks applied) with ``convert-vector-to-llvm{enable-amx=true}``."""
    base = load_pipeline("memref-to-llvm")
    amx = PipelineElement.of("convert-vector-to-llvm", enable_amx=True)
    return Pipeline(tuple(amx if e.name == "convert-vector-to-llvm" else e for e in base))

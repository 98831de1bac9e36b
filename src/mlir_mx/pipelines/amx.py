"""The lowering of a kernel module on AMX tiles (:mod:`mlir_mx.kernels.amx`):
``memref-to-llvm`` with its ``convert-vector-to-llvm`` also lowering
upstream's ``amx`` dialect (``enable-amx=true``) to the
``llvm.x86.t*.internal`` intrinsics, and its ``convert-cf-to-llvm`` replaced
by upstream's ``convert-to-llvm``, whose one type converter knows
``!amx.tile`` (as ``x86_amx``): the branches of a loop that carries tiles
(:mod:`mlir_mx.kernels.amx.matmul`) need it, ``convert-cf-to-llvm`` alone
refuses them."""

from __future__ import annotations

from mlir_mx.passes.pipeline import Pipeline, PipelineElement
from mlir_mx.pipelines.shipped import load_pipeline

__all__ = ["amx_library_pipeline"]


def amx_library_pipeline() -> Pipeline:
    """``memref-to-llvm`` (which ends in ``mx-host-target``: the host's
    features, masks applied) with ``convert-vector-to-llvm{enable-amx=true}``
    and ``convert-to-llvm`` for ``convert-cf-to-llvm``."""
    base = load_pipeline("memref-to-llvm")
    swap = {
        "convert-vector-to-llvm": PipelineElement.of("convert-vector-to-llvm", enable_amx=True),
        "convert-cf-to-llvm": PipelineElement.of("convert-to-llvm"),
    }
    return Pipeline(tuple(swap.get(e.name, e) for e in base))

"""Generated MX matmul kernels: one family for every batch size.

The kernels implement ``C += A x B`` (A MX, B MX or f32) in the blocked order
of :mod:`mlir_mx.kernels.common.problem` as loop nests of upstream ``scf`` /
``memref`` / ``vector`` / ``arith`` ops, built with the Python bindings.

Each schedule is one entry of :data:`~mlir_mx.kernels.registry.SCHEDULES`
(its config, emitter, shape class and the problems it supports; ``mx-runner
--help`` lists them), its emitter in a module of its own: e.g.
:mod:`~mlir_mx.kernels.matmul.stream` (decode and small batches, B widened in
registers as it streams by), :mod:`~mlir_mx.kernels.matmul.prefill` (B widened once
into packed f32 panels for a register-tiled microkernel),
:mod:`~mlir_mx.kernels.dot.kernel` (the block partials on the CPU's dot units).
The registry also holds the automatic choice by shape (``schedule=auto``);
:mod:`~mlir_mx.kernels.common.plan` configures one for a problem; the
``mx-matmul-kernels`` pass puts a kernel (:func:`emit_matmul`, in
:mod:`.emit`) in place of the ``mx-to-linalg`` blocked matmul, and
:func:`kernel_module` (there too) builds a stand-alone module around one kernel
(for the library API and tests).
"""

from __future__ import annotations

from mlir_mx.kernels.common.builder import KernelBuilder
from mlir_mx.kernels.common.plan import KernelPlan, plan_kernel
from mlir_mx.kernels.common.problem import Operands, Problem
from mlir_mx.kernels.emit import emit_matmul, kernel_module
from mlir_mx.kernels.registry import SCHEDULES, Schedule, choose, find, shape_class

__all__ = [
    "KernelBuilder",
    "KernelPlan",
    "Operands",
    "Problem",
    "SCHEDULES",
    "Schedule",
    "choose",
    "find",
    "shape_class",
    "emit_matmul",
    "kernel_module",
    "plan_kernel",
]

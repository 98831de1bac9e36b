"""Deprecated path of :mod:`mlir_mx.roofline` (the byte/FLOP roofline model,
renamed in 0.2; docs/roofline.md).

``from mlir_mx.model import analyze`` and ``from mlir_mx.model.measure import
get_machine`` still work: this module re-exports the roofline's public names and
registers each ``mlir_mx.roofline.<sub>`` module as ``mlir_mx.model.<sub>``.
"""

import importlib
import sys
import warnings

from mlir_mx.roofline import *  # noqa: F403
from mlir_mx.roofline import __all__  # noqa: F401

warnings.warn(
    "mlir_mx.model is deprecated: import mlir_mx.roofline instead", DeprecationWarning, stacklevel=2
)

__path__: list[str] = []  # a package to the import system: its submodules are aliases

for name in (
    "buffers", "flops", "ir_model", "kernel_model", "machines", "measure", "plots", "report", "variants",
):  # fmt: skip
    sub = importlib.import_module(f"mlir_mx.roofline.{name}")
    sys.modules[f"{__name__}.{name}"] = sub
    globals()[name] = sub

"""The byte/FLOP model read from IR, machine ceilings, measurement and plots.

Typical use::

    from mlir_mx.roofline import M4, analyze, shift
    km = analyze(text)                 # bytes and FLOPs of the lowered IR
    km.intensity, km.time_floor(M4), km.breakdown()

``mlir_mx.roofline.measure`` measures this machine and times kernels;
``mlir_mx.roofline.plots`` draws the roofline and time charts; ``docs/roofline.md``
states the rules.
"""

from mlir_mx.roofline.ir_model import (
    BUFFERIZE,
    Buffer,
    KernelModel,
    LinalgCount,
    ModelError,
    Shift,
    analyze,
    analyze_all,
    element_bits,
    lower_to_linalg,
    shift,
)
from mlir_mx.roofline.machines import M4, MACHINES, Machine
from mlir_mx.roofline.measure import get_machine
from mlir_mx.roofline.report import Row, model_rows, roofline_table

__all__ = [
    "BUFFERIZE",
    "M4",
    "MACHINES",
    "Buffer",
    "KernelModel",
    "LinalgCount",
    "Machine",
    "ModelError",
    "Row",
    "Shift",
    "analyze",
    "analyze_all",
    "element_bits",
    "get_machine",
    "lower_to_linalg",
    "model_rows",
    "roofline_table",
    "shift",
]

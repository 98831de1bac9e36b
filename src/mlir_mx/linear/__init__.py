"""The library API for MX weights: :class:`Linear` (:mod:`.layer`) and
:func:`matmul` (:mod:`.functional`), how a weight is held for the kernels
(:mod:`.weight_form`) and what a call's activations are (:mod:`.activations`)."""

from mlir_mx.linear.activations import Activations, activations_format
from mlir_mx.linear.functional import matmul
from mlir_mx.linear.layer import Linear, cache_dir

__all__ = ["Activations", "Linear", "activations_format", "cache_dir", "matmul"]

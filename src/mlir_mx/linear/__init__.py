"""The library API for MX weights: :class:`Linear` and :func:`matmul`
(:mod:`.layer`), and how a weight is held for the kernels (:mod:`.layout`)."""

from mlir_mx.linear.layer import Linear, cache_dir, check_activations, matmul

__all__ = ["Linear", "cache_dir", "check_activations", "matmul"]

"""Interop with other MX storage formats: GGUF (ggml MXFP4) and torchao's MXTensor.

* :mod:`mlir_mx.interop.gguf` reads and writes GGUF files with MXFP4 tensors through
  the ``gguf`` package (``pip install 'mlir-mx[gguf]'``).
* :mod:`mlir_mx.interop.torchao` converts :class:`~mlir_mx.numerics.MXArray` to and
  from torchao's ``MXTensor`` (``pip install 'mlir-mx[torch]'``).
* :mod:`mlir_mx.interop.orientation` turns a ``(n_out, n_in)`` weight blocked along
  ``n_in`` into the ``(K, N)`` right-hand side blocked along ``K`` that the matmul
  takes.

The optional packages are imported only when a function needs them.  Layouts and
the conversions between them are documented in ``docs/interop.md``.
"""

from .orientation import transpose, weight_to_rhs

__all__ = ["transpose", "weight_to_rhs"]

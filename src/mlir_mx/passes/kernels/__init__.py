"""The passes around the generated kernels (:mod:`mlir_mx.kernels`).

* :mod:`.matmul` ``mx-matmul-kernels``: a generated kernel in place of the
  blocked matmul;
* :mod:`.quantize` ``mx-quantize-kernels``: generated kernels in place of the
  lowered quantize/dequantize;
* :mod:`.packed_sources`: the packed codes behind an unpacked view, which both
  read directly;
* :mod:`.parallel_tasks` ``mx-parallel-tasks``: a kernel's parallel loop run
  by the caller's threads.
"""

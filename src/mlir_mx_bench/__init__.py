"""``mx-bench``: MX matmul kernels side by side with what a user would otherwise run.

One process, one run, the same thread count for every method of a group:

* :mod:`.baselines`  numpy f32 (BLAS), the ml_dtypes + numpy emulation, torch
  f32/bf16 (when torch is installed);
* :mod:`.ggml_baseline`  ggml Q8_0 and MXFP4 through ggml-python (when installed);
* :mod:`.ours`  our compiled kernels; :func:`.ours.our_kernels` is the one list
  of them;
* :mod:`.cases`  inputs and the oracle every result is checked against;
* :mod:`.machine`  CPU model/features, thread control, the measured roofs;
* :mod:`.loop`  the loop (build, check, time, progress lines);
* :mod:`.results`  the JSON and markdown files (under ``--out``);
* :mod:`.console`  the default ``--out`` (a user folder), the aligned table and
  ``--quick``'s summary line at the end of a run;
* :mod:`.models`  ``--model``: a whole Llama or gpt-oss, one process per row.

The command itself is :mod:`mlir_mx_bench.cli`; the method, byte counts
and tolerances are described in ``docs/bench.md``.
"""

from .cases import BenchFailure

__all__ = ["BenchFailure"]

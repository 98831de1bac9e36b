"""``mx-bench --model``: a whole Llama.  :mod:`.run` the rows, the checks and
the targets; :mod:`.worker` one row in a process of its own (``python -m
mlir_mx_bench.models.llama.worker SPEC.json``); :mod:`.profiling`
``--profile``; :mod:`.report` the results files."""

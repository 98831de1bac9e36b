"""``mx-bench --model gpt-oss``.  :mod:`.run` the rows, the check and the
markdown; :mod:`.worker` the checkpoint writer and one row in a process of
its own (``python -m mlir_mx_bench.models.gpt_oss.worker SPEC.json``)."""

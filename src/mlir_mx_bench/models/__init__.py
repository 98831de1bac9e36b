"""``mx-bench --model``: whole models through ``mlir_mx.torch``, one process per row.

* :mod:`.llama` ``--model llama`` (the default): a Llama of TinyLlama-1.1B's
  shape;
* :mod:`.gpt_oss` ``--model gpt-oss``: a gpt-oss of gpt-oss-20b's shape from a
  checkpoint file;
* :mod:`.workers` what both share: a row's process (``python -m <worker
  module> SPEC.json``), its environment, the greedy decode.

Each model has a ``run`` module (the rows, the checks; imported by the command)
and a ``worker`` module (one row, in the row's process).
"""

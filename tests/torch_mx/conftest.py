"""The ``mlir_mx.torch`` tests (helpers: ``gpt_oss_cases.py``; ``tests/llama_cases.py``,
which ``tests/bench/models`` shares).

Every module needs torch (and the Llama tests ``transformers``), which the
``test`` extra installs (a CPU build of torch); where they cannot be imported,
its tests skip with that reason (``pytest.importorskip`` first in each module).

The folder is ``torch_mx``, not ``torch``: ``tests/`` is on ``sys.path`` (the
root conftest), so a folder ``tests/torch`` was imported as a namespace
package ``torch`` wherever torch is not installed, and every
``importorskip("torch")`` of the suite then "succeeded" and failed instead of
skipping.
"""

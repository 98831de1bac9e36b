"""The ``mlir_mx.torch`` tests (helpers: ``llama_cases.py``).

Every module needs torch (and the Llama tests ``transformers``), which the
``test`` extra installs (a CPU build of torch); where they cannot be imported,
its tests skip with that reason (``pytest.importorskip`` first in each module).

The folder is ``torch_mx``, not ``torch``: ``tests/`` is on ``sys.path`` (the
root conftest), so a folder ``tests/torch`` was imported as a namespace
package ``torch`` wherever torch is not installed, and every
``importorskip("torch")`` of the suite then "succeeded" and failed instead of
skipping.
"""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    # One compile cache for the whole directory (its kernels are few and shared).
    monkeypatch.setenv("MLIR_MX_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "mx-cache"))

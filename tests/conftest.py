"""Test-suite configuration: ``tests/`` is on ``sys.path`` (pytest inserts the
directory of a rootdir conftest), so test modules share helpers such as
:mod:`matmul_cases` by a plain import."""

import pytest


@pytest.fixture
def tasks_for_small_work(monkeypatch):
    """Kernels of small test problems split into tasks as big ones do: without
    it a call starts one task per ``MIN_TASK_MACS`` of work (``task_count``),
    so the threaded code paths of a small problem would go untested.  Use it
    with ``pytestmark = pytest.mark.usefixtures("tasks_for_small_work")``."""
    from mlir_mx.kernels.common import problem

    monkeypatch.setattr(problem, "MIN_TASK_MACS", 1)

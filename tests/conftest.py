"""Test-suite configuration: ``tests/`` is on ``sys.path`` (pytest inserts the
directory of a rootdir conftest), so test modules share helpers such as
:mod:`matmul_cases` by a plain import.

**One compile cache per run.**  :func:`pytest_configure` points
``MLIR_MX_CACHE_DIR`` at a new directory for the run (removed at its end), so
that no test reads or fills the developer's ``~/.cache/mlir-mx`` (a warm one
would hide compile time and cache bugs that CI, starting cold, would meet),
and so that the kernels one test compiles are found by the others: by the
xdist workers and the campaigns' worker processes too, which inherit the
variable.  It is one directory for the whole run because the cache directory
is part of every in-memory cache key.  Tests of the cache itself give their
own directories.

**The load check off.**  ``MLIR_MX_LOAD_CHECK`` is 0 for the run (unless set)
and its processes: with it on, a 2-thread call on a machine the suite itself
keeps busy (``-n 2`` on 2 cores) would run the 1-thread kernels, so what a
test exercises would depend on the load.  The tests of the load check and of
the busy path force its verdict (``pool_load.configure(1, -1000)``,
``Pool.hooks(load_check=...)``).
"""

import os
import shutil
import tempfile

import pytest

os.environ.setdefault("MLIR_MX_LOAD_CHECK", "0")  # before mlir_mx reads it (see above)

_RUN_CACHE = "MLIR_MX_TEST_RUN_CACHE"  # the run's directory, set by the first process


def pytest_configure(config):
    if os.environ.get(_RUN_CACHE):  # an xdist worker (or a nested pytest): the run's
        return
    path = tempfile.mkdtemp(prefix="mlir-mx-test-cache-")
    config._mx_run_cache = path, os.environ.get("MLIR_MX_CACHE_DIR")
    os.environ[_RUN_CACHE] = os.environ["MLIR_MX_CACHE_DIR"] = path


def pytest_unconfigure(config):
    """Remove the run's directory; the variables as they were before the run."""
    saved = getattr(config, "_mx_run_cache", None)
    if saved is None:
        return
    path, before = saved
    shutil.rmtree(path, ignore_errors=True)
    del os.environ[_RUN_CACHE]
    if before is None:
        os.environ.pop("MLIR_MX_CACHE_DIR", None)
    else:
        os.environ["MLIR_MX_CACHE_DIR"] = before


@pytest.fixture
def tasks_for_small_work(monkeypatch):
    """Kernels of small test problems split into tasks as big ones do: without
    it a call starts one task per ``MIN_TASK_MACS`` of work (``task_count``),
    so the threaded code paths of a small problem would go untested.  Use it
    with ``pytestmark = pytest.mark.usefixtures("tasks_for_small_work")``.
    The load check is off for the while (``execution.pool_load``): on a busy
    machine the calls would run on the caller alone, untested on a team."""
    from mlir_mx.execution import pool_load
    from mlir_mx.kernels.common import problem

    monkeypatch.setattr(problem, "MIN_TASK_MACS", 1)
    pool_load.configure(0)
    yield
    pool_load.configure()


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """The ``aarch64`` marker on the subset ``tests/aarch64_subset.py`` names
    (before ``-m`` selects)."""
    import aarch64_subset

    aarch64_subset.mark(items)

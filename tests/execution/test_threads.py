"""Parallel kernels: the async runtime, thread counts, engines that come and go."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest
from matmul_cases import case, matmul_text

from mlir_mx.errors import MXError
from mlir_mx.execution import Runner, clear_cache


def test_results_identical_for_every_thread_count():
    text = matmul_text(40, 256, 300, "f8E4M3FN", "f8E4M3FN")
    args, acc, exact, bound = case(40, 256, 300, "f8E4M3FN", "f8E4M3FN")
    outs = []
    for threads in (1, 2, 3, 4):
        c = acc.copy()
        outs.append(Runner(text, threads=threads).invoke("mm", *args, c))
    assert np.all(np.abs(outs[0] - exact) <= bound)
    for o in outs[1:]:
        np.testing.assert_array_equal(o.view(np.uint32), outs[0].view(np.uint32))


def test_engines_come_and_go():
    """Destroying an engine must not break later parallel kernels.

    Regression: upstream's ``libmlir_async_runtime.so`` resets the process-wide
    runtime in ``__mlir_execution_engine_destroy``; when it was handed to each
    ExecutionEngine as a shared library, the first engine destroyed left a null
    runtime and the next parallel kernel crashed (SIGSEGV).  The Runner now
    loads the library into the process once instead.  Run in a subprocess so a
    crash fails this test instead of killing the test run.
    """
    script = textwrap.dedent(
        """
        import gc, sys
        sys.path.insert(0, %r)
        import numpy as np
        from matmul_cases import case, matmul_text
        from mlir_mx.execution import Runner, clear_cache, runtime_libraries
        import mlir_mx.execution.libraries as R
        for i in range(4):
            m = 3 + i
            text = matmul_text(m, 64, 96, "f8E4M3FN", "f8E4M3FN")
            args, acc, exact, bound = case(m, 64, 96, "f8E4M3FN", "f8E4M3FN")
            # also pass the library the old way: the Runner must drop it
            libs = runtime_libraries() + [str(R._wheel_library(R.ASYNC_RUNTIME))]
            r = Runner(text, threads=2, shared_libs=libs)
            c = r.invoke("mm", *args, acc.copy())
            assert np.all(np.abs(c - exact) <= bound)
            del r
            clear_cache()
            gc.collect()
        print("ok")
        """
    ) % (str(__import__("pathlib").Path(__file__).parents[1]),)
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().endswith("ok")


@pytest.mark.parametrize(
    "bad, error, message",
    [
        (-1, ValueError, r"threads: expected an integer in \[1, 1024\], got -1"),
        (0, ValueError, r"threads: expected an integer in \[1, 1024\], got 0"),
        (2**31, ValueError, r"threads: expected an integer in \[1, 1024\], got 2147483648"),
        (1.5, TypeError, "threads: expected a positive integer, got 1.5"),
        ("2", TypeError, "threads: expected a positive integer, got '2'"),
    ],
)
def test_bad_thread_counts(bad, error, message):
    with pytest.raises(error, match=message) as err:
        Runner(matmul_text(1, 32, 16, "f8E4M3FN", None), threads=bad)
    assert isinstance(err.value, MXError)


def test_threads_apply_to_the_default_pipeline_only():
    with pytest.raises(ValueError, match="configure the default pipeline"):
        Runner(matmul_text(1, 32, 16, "f8E4M3FN", None), "mx-to-linalg", threads=2)


def test_clear_cache_then_rerun():
    text = matmul_text(2, 64, 64, "f8E4M3FN", None)
    args, acc, exact, bound = case(2, 64, 64, "f8E4M3FN", None)
    first = Runner(text, threads=2).invoke("mm", *args, acc.copy())
    clear_cache()
    again = Runner(text, threads=2).invoke("mm", *args, acc.copy())
    np.testing.assert_array_equal(first, again)

"""``parallel="tasks"``: a kernel's parallel loop run by the caller's threads
(``mlir_mx.execution.threads``; the pass: ``tests/passes/kernels/test_parallel_tasks.py``).

* every schedule class (decode, small, prefill; f32 and dot kernels) gives the
  bits of the async runtime at 1 and 2 threads, on our pool, on torch's
  OpenMP team and on the serial fallback (no pool and no OpenMP runtime);
* bad inputs still raise before native code runs.
"""

from __future__ import annotations

import numpy as np
import pytest
from mlir import ir

import mlir_mx
from mlir_mx.dialect import load_dialect
from mlir_mx.errors import MXArgTypeError, MXValueError
from mlir_mx.execution import CompileOptions, Runner
from mlir_mx.execution import threads as threads_
from mlir_mx.kernels import Problem, kernel_module, plan_kernel
from mlir_mx.pipelines import kernel_library_pipeline

torch = pytest.importorskip("torch", reason="torch not installed: its libgomp is the OpenMP team")
# Small problems, split into tasks all the same (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("tasks_for_small_work")



@pytest.fixture
def mode():
    """Set Linear's parallel mode for one test, restored after it."""
    previous = threads_.set_parallel("auto")
    yield threads_.set_parallel
    threads_.set_parallel(previous)


def _kernel_text(m, n, k, threads, schedule):
    prob = Problem(m, n, k, 32, None, "f4E2M1FN", b_packed=True)
    with ir.Context() as ctx, ir.Location.unknown():
        load_dialect(ctx)
        return prob, str(kernel_module(prob, plan_kernel(prob, schedule, threads)))


def _bits(a):
    return np.ascontiguousarray(a).view(np.uint32)


@pytest.fixture
def team():
    """Set the team that runs tasks kernels for one test, restored after it."""
    previous = threads_.set_team("pool")
    yield threads_.set_team
    threads_.set_team(previous)


@pytest.mark.parametrize("where", ["pool", "openmp", "serial"])
@pytest.mark.parametrize("m,activations", [(1, None), (5, None), (40, None), (1, "i8"), (40, "i8")])
def test_tasks_give_the_async_bits(mode, team, monkeypatch, m, activations, where):
    rng = np.random.default_rng(m)
    n, k = 200, 256  # 200: a tail panel / partial tile in every schedule
    w = rng.standard_normal((n, k)).astype(np.float32)
    x = rng.standard_normal((m, k)).astype(np.float32)
    wq = mlir_mx.quantize(w, "f4E2M1FN", 32)
    mode("async")
    ref = mlir_mx.Linear(wq, threads=1, activations=activations)(x)
    team("openmp" if where == "openmp" else "pool")
    if where == "serial":
        monkeypatch.setattr(threads_.pool_, "pool", lambda: None)
    elif where == "openmp":
        assert threads_.openmp_runtime() is not None  # torch's libgomp
    mode("tasks")
    for t in (1, 2):
        lin = mlir_mx.Linear(wq, threads=t, activations=activations)
        np.testing.assert_array_equal(_bits(lin(x)), _bits(ref))
        if t == 2:
            [runner] = lin.runners
            assert runner.compiled.tasks == {"matmul": 2}  # really run as tasks
            # each bound call runs through a TaskCall, one region per call
            calls = [b._fn for b in lin._calls.values() if isinstance(getattr(b, "_fn", None), threads_.TaskCall)]
            before = threads_.regions()
            np.testing.assert_array_equal(_bits(lin(x)), _bits(ref))
            assert calls and threads_.regions() == before + 1
            # the write analysis sees through claims: only the output is written
            assert runner.compiled.writes("matmul") == {len(runner.signature("matmul").args) - 1}


def test_the_openmp_team_without_a_runtime_runs_on_our_pool(mode, team, monkeypatch):
    """A process with no OpenMP runtime (numpy, no torch) and the default
    team: a tasks kernel on 2 threads runs on our pool, not on the caller
    alone (the AMX matmul is tasks-only: it ran on one thread there)."""
    p = threads_.pool_.pool()
    if p is None:
        pytest.skip("no pool on this platform (the serial fallback is tested above)")
    rng = np.random.default_rng(3)
    w = rng.standard_normal((200, 256)).astype(np.float32)
    x = rng.standard_normal((40, 256)).astype(np.float32)
    wq = mlir_mx.quantize(w, "f4E2M1FN", 32)
    mode("async")
    ref = mlir_mx.Linear(wq, threads=1)(x)
    team("openmp")
    monkeypatch.setattr(threads_, "openmp_runtime", lambda: None)
    runs, run = [], p.run
    monkeypatch.setattr(p, "run", lambda *a: runs.append(a[2]) or run(*a))
    mode("tasks")
    np.testing.assert_array_equal(_bits(mlir_mx.Linear(wq, threads=2)(x)), _bits(ref))
    assert runs and set(runs) == {2}


def test_runner_tasks_mode_gives_the_async_bits():
    prob, text = _kernel_text(None, 300, 128, 2, "small")
    rng = np.random.default_rng(1)
    w = mlir_mx.quantize(rng.standard_normal((300, 128)).astype(np.float32), "f4E2M1FN", 32)
    lin = mlir_mx.Linear(w)
    codes, scales = lin.stored
    x = rng.standard_normal((7, 128)).astype(np.float32)
    outs = []
    for parallel in ("async", "tasks"):
        runner = Runner(text, options=CompileOptions(kernel_library_pipeline(2, parallel)))
        out = np.zeros((7, 300), np.float32)
        runner.invoke("matmul", x, codes, scales, out)
        outs.append(out)
    np.testing.assert_array_equal(_bits(outs[0]), _bits(outs[1]))


def test_bad_inputs_raise_before_native_code(mode):
    mode("tasks")
    rng = np.random.default_rng(2)
    lin = mlir_mx.Linear(rng.standard_normal((128, 64)).astype(np.float32), element="f4E2M1FN")
    lin(np.ones((1, 64), np.float32), threads=2)  # compiled, on the team
    with pytest.raises(MXValueError, match=r"x: expected shape \(M, 64\)"):
        lin(np.ones((1, 65), np.float32), threads=2)
    with pytest.raises(MXArgTypeError, match="x: expected dtype float32"):
        lin(np.ones((1, 64), np.int32), threads=2)
    _prob, text = _kernel_text(1, 128, 64, 2, "decode")
    runner = Runner(text, options=CompileOptions(kernel_library_pipeline(2, "tasks")))
    with pytest.raises(MXArgTypeError, match="expected 4 argument"):
        runner.invoke("matmul", np.ones((1, 64), np.float32))

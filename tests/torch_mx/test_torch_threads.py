"""Thread cooperation with torch: converted layers and torch ops called
alternately, on 2 threads, give the results each gives alone.

With torch loaded, a converted layer's parallel kernels run on torch's own
OpenMP team (``parallel="tasks"``, ``docs/torch.md``, "Threads"); speed is
the benchmark's (``mx-bench --model``), never a test's.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch not installed (pip install 'mlir-mx[torch]')")
# Small problems, split into tasks all the same (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("tasks_for_small_work")

from mlir_mx.execution import threads as threads_  # noqa: E402
from mlir_mx.torch import MXLinear, quantize_  # noqa: E402


@pytest.fixture
def two_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def _mlp(seed: int) -> torch.nn.Module:
    """A Llama MLP's projections, small and square (one kernel per shape class
    and thread count serves all three: a few compilations)."""
    torch.manual_seed(seed)
    return torch.nn.ModuleDict(
        {
            "gate": torch.nn.Linear(256, 256, bias=False),
            "up": torch.nn.Linear(256, 256, bias=False),
            "down": torch.nn.Linear(256, 256, bias=False),
        }
    )


def _forward(mlp, x):
    return mlp["down"](torch.nn.functional.silu(mlp["gate"](x)) * mlp["up"](x))


def test_layers_and_torch_ops_alternately_keep_their_results(two_threads):
    assert threads_.openmp_runtime() is not None  # torch's libgomp: the team
    mlp = _mlp(0)
    quantize_(mlp, element="f4E2M1FN")
    assert all(isinstance(m, MXLinear) for m in mlp.values())
    a = torch.randn(512, 512)
    rng = np.random.default_rng(0)
    xs = [torch.from_numpy(rng.standard_normal((1, 256)).astype(np.float32)) for _ in range(3)]
    with torch.inference_mode():
        # each side alone first (the tasks' bits equal one thread's and the
        # async runtime's: tests/execution/test_parallel_tasks.py)
        alone = [_forward(mlp, x) for x in xs]
        torch_alone = a @ a
        for _round in range(3):
            for x, want in zip(xs, alone, strict=True):
                got = _forward(mlp, x)
                product = a @ a  # a torch op between our layers ...
                assert torch.equal(got.view(torch.int32), want.view(torch.int32))
                assert torch.equal(product, torch_alone)  # ... and its result unchanged
        runners = [r for m in mlp.values() for r in m._linear._runners.values()]
        assert any(r._tasks for r in runners)  # the 2-thread kernels ran as tasks

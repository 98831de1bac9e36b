"""How many parallel regions (team calls, ``mlir_mx.execution.threads.regions``)
a decode step runs (issue 51): a MoE's ``k`` experts share one region per
projection (gate/up, then down: 2 where each expert's own calls made ``2 k``),
a fused q/k/v or gate/up layer is one kernel call, so one region; the bits
stay those of one thread."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch", reason="torch not installed (pip install 'mlir-mx[torch]')")

from gpt_oss_cases import tiny_gpt_oss  # noqa: E402
from llama_cases import prompt, tiny_llama  # noqa: E402

from mlir_mx.execution import threads as threads_  # noqa: E402
from mlir_mx.torch import MXExperts, MXLinear, quantize_  # noqa: E402

#: a tiny Llama whose every kernel has 2 tasks at 2 threads
WIDE = dict(hidden_size=512, intermediate_size=1024, num_attention_heads=8, num_key_value_heads=4)

# Small problems split into tasks as big ones do (tests/conftest.py): 2 tasks at 2 threads.
pytestmark = pytest.mark.usefixtures("tasks_for_small_work")


@pytest.fixture
def two_threads():
    previous, mode = torch.get_num_threads(), threads_.set_parallel("tasks")
    yield
    torch.set_num_threads(previous)
    threads_.set_parallel(mode)


def _run(fn, threads):
    torch.set_num_threads(threads)
    fn()  # compile and bind
    before = threads_.regions()
    out = fn()
    return out, threads_.regions() - before


def test_a_moe_decode_call_runs_two_regions(two_threads):
    model = tiny_gpt_oss(hidden_size=256, intermediate_size=256)  # 2 tasks in each kernel
    quantize_(model, filter_fn=lambda m, name: "experts" in name)
    ex = model.model.layers[0].mlp.experts
    assert isinstance(ex, MXExperts)
    k = 2
    x = torch.randn(1, ex.hidden_size, generator=torch.Generator().manual_seed(3))
    idx = torch.tensor([[3, 1]])
    w = torch.tensor([[0.6, 0.4]])
    with torch.inference_mode():
        one, _ = _run(lambda: ex(x, idx, w), 1)
        two, regions = _run(lambda: ex(x, idx, w), 2)
        # each expert's own calls, as the decode made them before: 2 regions an expert
        _, per_expert = _run(lambda: [ex.expert(e, x) for e in idx[0].tolist()], 2)
    # gate/up of the k experts in one region, down in another
    assert regions == 2 and per_expert == 2 * k
    assert torch.equal(one.view(torch.int32), two.view(torch.int32))


@pytest.mark.parametrize("fuse", [False, True])
def test_regions_of_a_llama_decode_step(two_threads, fuse):
    model = tiny_llama(**WIDE)
    quantize_(model, "f4E2M1FN", fuse=fuse)
    layers = [m for m in model.modules() if isinstance(m, MXLinear)]
    # one region per kernel call: a fused group's layers share one call
    kernels = len({id(m.fused) if m.fused is not None else id(m) for m in layers})
    ids = prompt(6, vocab=256)
    with torch.inference_mode():
        cache = model(ids, use_cache=True).past_key_values
        nxt = ids[:, -1:]
        step = lambda: model(nxt, past_key_values=copy.deepcopy(cache), use_cache=True).logits  # noqa: E731
        two, regions = _run(step, 2)
        one, _ = _run(step, 1)
    assert regions == kernels
    assert kernels == (len(layers) - 3 * 2 if fuse else len(layers))  # 2 layers: q/k/v, gate/up
    assert torch.equal(one.view(torch.int32), two.view(torch.int32))


def test_a_moe_prefill_call_runs_two_regions(two_threads):
    """Several tokens: every expert's gate/up kernels in one region, its down
    kernels in another (each expert's own calls made 2 a routed expert)."""
    model = tiny_gpt_oss(hidden_size=256, intermediate_size=256)  # 2 tasks in each kernel
    quantize_(model, filter_fn=lambda m, name: "experts" in name)
    ex = model.model.layers[0].mlp.experts
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(9, ex.hidden_size, generator=gen)
    idx = torch.stack([torch.randperm(ex.num_experts, generator=gen)[:2] for _ in range(9)])
    w = torch.rand(9, 2, generator=gen)
    routed = len(set(idx.reshape(-1).tolist()))
    with torch.inference_mode():
        one, _ = _run(lambda: ex(x, idx, w), 1)
        two, regions = _run(lambda: ex(x, idx, w), 2)
    assert routed > 2 and regions == 2
    assert torch.equal(one.view(torch.int32), two.view(torch.int32))

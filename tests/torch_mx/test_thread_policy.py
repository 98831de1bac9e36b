"""The decode thread policy (``mlir_mx.torch.thread_policy``, issue 51): a
converted model's decode step runs torch's own ops on 1 thread and the MX
layers on torch's thread count; torch's count is restored after every call
(an exception too), a prefill is untouched, and the bits do not change."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch", reason="torch not installed (pip install 'mlir-mx[torch]')")

from llama_cases import prompt, tiny_llama  # noqa: E402

from mlir_mx.errors import MXValueError  # noqa: E402
from mlir_mx.execution import compiled, pool_load  # noqa: E402
from mlir_mx.execution import pool as pool_  # noqa: E402
from mlir_mx.execution import threads as threads_  # noqa: E402
from mlir_mx.torch import MXLinear, quantize_  # noqa: E402
from mlir_mx.torch import thread_policy as policy  # noqa: E402

pytestmark = pytest.mark.usefixtures("tasks_for_small_work")

WIDE = dict(hidden_size=512, intermediate_size=1024, num_attention_heads=8, num_key_value_heads=4)


@pytest.fixture
def two_threads():
    """2 threads, kernels as tasks, and the load not looked at (this machine
    may be busy: the layers would then run on 1 thread, tested below)."""
    previous, mode = torch.get_num_threads(), threads_.set_parallel("tasks")
    torch.set_num_threads(2)
    pool_load.configure(0)
    yield
    pool_load.configure()
    torch.set_num_threads(previous)
    threads_.set_parallel(mode)
    policy.set_decode_policy("layers")


def test_the_block_sets_torch_to_one_thread_and_restores_it(two_threads):
    assert policy.layer_threads() == 2
    with policy.decode_threads() as n:
        assert (n, torch.get_num_threads(), policy.layer_threads()) == (2, 1, 2)
        with policy.decode_threads(3) as inner:  # nested: its own count, then the outer's
            assert (inner, torch.get_num_threads(), policy.layer_threads()) == (3, 1, 3)
        assert (torch.get_num_threads(), policy.layer_threads()) == (1, 2)
    assert (torch.get_num_threads(), policy.layer_threads()) == (2, 2)
    with pytest.raises(ZeroDivisionError), policy.decode_threads():
        1 / 0  # noqa: B018
    assert torch.get_num_threads() == 2


@pytest.mark.parametrize("kernels", ["one", "team"])
def test_on_a_busy_machine_a_decode_step_runs_alone(two_threads, monkeypatch, kernels):
    """Busy, a step runs on the caller alone: by default the 1-thread kernels
    (what a 1-thread process runs, ``threads.call_threads``), with ``"team"``
    the 2-thread kernels; both compiled by ``precompile``, the same bits."""
    model = tiny_llama(**WIDE)
    quantize_(model, "f4E2M1FN", precompile=True)  # the 2- and the 1-thread kernels
    ids = prompt(6, vocab=256)
    with torch.inference_mode():
        cache = model(ids, use_cache=True).past_key_values

        def step():
            return model(ids[:, -1:], past_key_values=copy.deepcopy(cache), use_cache=True).logits

        quiet = step()
        previous = threads_.set_busy_kernels(kernels)
        launched = []
        launch = threads_._launch
        monkeypatch.setattr(threads_, "_launch", lambda *a, **k: launched.append(1) or launch(*a, **k))
        pool_load.configure(1, -1000)  # every look finds more runnable threads than CPUs
        monkeypatch.setattr(compiled, "Compiled", refuse)  # nothing new compiled
        seen = _seen(model)
        try:
            busy = step()
        finally:
            threads_.set_busy_kernels(previous)
    assert seen == [(1, 2)] and torch.get_num_threads() == 2  # the layers keep their count
    assert threads_.oversubscribed(2) and not threads_.oversubscribed(1)
    # "one": no tasks kernel launched (the 1-thread kernels); "team": every call one
    assert (len(launched) > 0) == (kernels == "team")
    assert torch.equal(quiet.view(torch.int32), busy.view(torch.int32))


def test_on_a_busy_machine_a_prefill_runs_torch_on_one_thread(two_threads):
    """A prefill (more than ``DECODE_TOKENS`` tokens) runs torch's ops on its
    own count when quiet, on 1 thread when the load check finds the machine
    oversubscribed (torch's 2-thread ops collapse beside a busy process);
    the same bits, torch's count restored after."""
    model = tiny_llama(**WIDE)
    quantize_(model, "f4E2M1FN")
    seen = _seen(model)
    ids = prompt(12, vocab=256)
    with torch.inference_mode():
        quiet = model(ids).logits
        assert seen.pop() == (2, 2)
        pool_load.configure(1, -1000)  # every look finds more runnable threads than CPUs
        busy = model(ids).logits
        assert seen.pop() == (1, 2) and torch.get_num_threads() == 2
        policy.set_decode_policy("torch")  # off: torch's count, busy or not
        model(ids)
        assert seen.pop() == (2, 2)
    assert torch.equal(quiet.view(torch.int32), busy.view(torch.int32))


def test_bad_arguments_name_themselves():
    with pytest.raises(MXValueError, match="policy"):
        policy.set_decode_policy("spin")
    with pytest.raises(MXValueError, match="threads"), policy.decode_threads(0):
        pass
    assert torch.get_num_threads() >= 1


def refuse(*args, **kwargs):
    raise AssertionError("a kernel was compiled")


def _seen(model):
    """Record (torch's threads, the layers' threads) inside every q_proj call."""
    seen = []
    q = model.model.layers[0].self_attn.q_proj
    q.register_forward_pre_hook(
        lambda m, a: seen.append((torch.get_num_threads(), policy.layer_threads()))
    )
    return seen


def test_a_decode_step_runs_torch_on_one_thread_and_the_layers_on_two(two_threads):
    model = tiny_llama(**WIDE)
    quantize_(model, "f4E2M1FN")
    seen = _seen(model)
    ids = prompt(12, vocab=256)
    with torch.inference_mode():
        out = model(ids, use_cache=True)  # a prefill: more than DECODE_TOKENS tokens
        assert seen.pop() == (2, 2)
        model(ids[:, -1:], past_key_values=out.past_key_values, use_cache=True)
        assert seen.pop() == (1, 2)
        assert torch.get_num_threads() == 2
        policy.set_decode_policy("torch")
        model(ids[:, -1:], past_key_values=out.past_key_values, use_cache=True)
        assert seen.pop() == (2, 2)


def test_an_exception_in_a_decode_step_restores_torch(two_threads):
    model = tiny_llama(**WIDE)
    quantize_(model, "f4E2M1FN")
    boom = model.model.layers[1].mlp.down_proj
    assert isinstance(boom, MXLinear)

    def fail(module, args):
        raise RuntimeError("boom")

    handle = boom.register_forward_pre_hook(fail)
    with torch.inference_mode(), pytest.raises(RuntimeError, match="boom"):
        model(prompt(1, vocab=256))
    handle.remove()
    assert torch.get_num_threads() == 2 and policy.layer_threads() == 2


@pytest.mark.parametrize("fuse", [False, True])
def test_the_policy_keeps_the_bits_and_the_regions(two_threads, fuse):
    model = tiny_llama(**WIDE)
    quantize_(model, "f4E2M1FN", fuse=fuse)
    layers = [m for m in model.modules() if isinstance(m, MXLinear)]
    kernels = len({id(m.fused) if m.fused is not None else id(m) for m in layers})
    ids = prompt(6, vocab=256)
    results = {}
    with torch.inference_mode():
        cache = model(ids, use_cache=True).past_key_values
        for name in ("torch", "layers", "torch"):
            policy.set_decode_policy(name)
            step = lambda: model(  # noqa: E731
                ids[:, -1:], past_key_values=copy.deepcopy(cache), use_cache=True
            ).logits
            step()  # compile and bind
            before = threads_.regions()
            results[name] = step()
            # every kernel call a region on 2 threads under either policy
            assert threads_.regions() - before == kernels
    assert torch.equal(results["torch"].view(torch.int32), results["layers"].view(torch.int32))


def test_a_loaded_checkpoint_gets_the_policy(two_threads, tmp_path):
    from mlir_mx.torch import from_pretrained, save_pretrained

    model = tiny_llama(**WIDE)
    quantize_(model, "f4E2M1FN")
    save_pretrained(model, tmp_path / "tiny")
    loaded = from_pretrained(tmp_path / "tiny")
    seen = _seen(loaded)
    with torch.inference_mode():
        loaded(prompt(1, vocab=256))
    assert seen == [(1, 2)] and torch.get_num_threads() == 2


@pytest.mark.skipif(pool_.pool() is None, reason="the pool needs Linux on x86-64 or AArch64")
def test_a_decode_step_on_the_pool_with_a_late_worker_keeps_the_bits(two_threads):
    model = tiny_llama(**WIDE)
    quantize_(model, "f4E2M1FN", fuse=True)
    ids = prompt(6, vocab=256)
    with torch.inference_mode():
        cache = model(ids, use_cache=True).past_key_values

        def step():
            return model(ids[:, -1:], past_key_values=copy.deepcopy(cache), use_cache=True).logits

        torch.set_num_threads(1)
        one = step()
        torch.set_num_threads(2)
        team = threads_.set_team("pool")
        try:
            # worker 1 late to join, then late inside a call it joined: the
            # caller claims what is left; every call on the team (no backing off)
            for hook in ({"late": 3000}, {"inside": 3000}):
                pool_.pool().hooks(**hook, backoff=False)
                assert torch.equal(step().view(torch.int32), one.view(torch.int32)), hook
        finally:
            pool_.pool().hooks(backoff=False)
            pool_.pool().hooks()
            pool_load.configure(0)  # as the fixture left it
            threads_.set_team(team)


def _wide_model(monkeypatch, wide_bytes: int):
    """The tiny Llama converted but for its ``lm_head`` (a torch ``nn.Linear``
    of 256 x 512 f32: 512 KiB), installed with ``WIDE_LINEAR_BYTES`` patched;
    returns it and the (torch threads, layer threads) its ``lm_head`` saw."""
    monkeypatch.setattr(policy, "WIDE_LINEAR_BYTES", wide_bytes)
    model = tiny_llama(**WIDE)
    quantize_(model, "f4E2M1FN", filter_fn=lambda m, name: name != "lm_head")
    assert type(model.lm_head) is torch.nn.Linear
    seen = []
    model.lm_head.register_forward_pre_hook(
        lambda m, a: seen.append((torch.get_num_threads(), policy.layer_threads()))
    )
    return model, seen


def test_a_wide_torch_layer_runs_on_the_blocks_threads(two_threads, monkeypatch):
    """In a decode step a torch layer of at least ``WIDE_LINEAR_BYTES`` runs on
    the block's 2 threads (torch's other ops on 1), then torch is back on 1;
    a narrower one stays on 1; a prefill leaves torch's count alone; beside
    a busy machine (the load check) the wide one stays on 1; the bits and
    tokens are the same either way."""
    ids = prompt(12, vocab=256)
    logits = {}
    for wide_bytes, want in ((512 << 10, 2), ((512 << 10) + 1, 1)):
        model, seen = _wide_model(monkeypatch, wide_bytes)
        assert len(policy.wide_linears(model)) == (want == 2)
        with torch.inference_mode():
            out = model(ids, use_cache=True)
            assert seen.pop() == (2, 2)  # a prefill: as it was
            step = model(ids[:, -1:], past_key_values=copy.deepcopy(out.past_key_values), use_cache=True)
            assert seen.pop() == (want, 2) and torch.get_num_threads() == 2
            logits[want] = step.logits
            if want == 2:  # busy: every look finds more runnable threads than CPUs
                pool_load.configure(1, -1000)
                try:
                    model(ids[:, -1:], past_key_values=copy.deepcopy(out.past_key_values), use_cache=True)
                finally:
                    pool_load.configure(0)
                assert seen.pop() == (1, 2) and torch.get_num_threads() == 2
    assert torch.equal(logits[1], logits[2])


def test_no_wide_layers_when_the_bound_is_zero(monkeypatch):
    """``WIDE_LINEAR_BYTES = 0`` (``MLIR_MX_WIDE_LINEAR_BYTES=0``): none, the
    policy as before."""
    monkeypatch.setattr(policy, "WIDE_LINEAR_BYTES", 0)
    assert policy.wide_linears(tiny_llama(**WIDE)) == []
    monkeypatch.setattr(policy, "WIDE_LINEAR_BYTES", 1)
    assert len(policy.wide_linears(tiny_llama(**WIDE))) > 0

"""Expert parallel (issue 56): ``MXExperts`` sharded over ``torch.distributed``.

The 2-rank tests run real processes (``mlir_mx_testing.distributed.run_ranks``:
``mlir_mx_testing.distributed.run_ranks``, gloo over loopback, killed after a timeout)
on a tiny gpt-oss (4 experts, top-2) saved as an MXFP4 checkpoint; attention,
router and the rest replicated on every rank.
"""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch", reason="torch not installed (pip install 'mlir-mx[torch]')")
dist = pytest.importorskip("torch.distributed", reason="torch without torch.distributed")
if not dist.is_available():
    pytest.skip("torch built without torch.distributed", allow_module_level=True)

from gpt_oss_cases import prompt, tiny_gpt_oss  # noqa: E402

from mlir_mx.errors import MXArgTypeError, MXValueError  # noqa: E402
from mlir_mx.torch import (  # noqa: E402
    MXExperts,
    dequantize_,
    logit_bound,
    quantize_,
    save_pretrained,
)
from mlir_mx.torch.distributed import (  # noqa: E402
    ExpertParallel,
    ExpertShard,
    expert_range,
    shard_experts,
)
from mlir_mx_testing.distributed import run_ranks  # noqa: E402
from mlir_mx_testing.distributed_ep import (  # noqa: E402
    counted_collectives,
    ep_ranks,
    refuse_rank,
    trace,
)

TIMEOUT = 180  # s: the 2 ranks' whole run; a hung collective is killed at it


def _experts_only(module, name):
    return "experts" in name


def _checkpoint(folder, **overrides):
    """The tiny gpt-oss, experts MXFP4, saved; its kernels compiled here, into
    the run's compile cache, so the ranks load them (two ranks compiling at
    once on 2 cores is most of a cold run)."""
    model = tiny_gpt_oss(**overrides)
    ref = copy.deepcopy(model)
    quantize_(model, filter_fn=_experts_only, precompile=True)
    dequantize_(ref, filter_fn=_experts_only)
    save_pretrained(model, folder)
    return model, ref


def _two_ranks(root, combines, bad=None, load=False):
    _, ref = _checkpoint(root / "ckpt")
    ids = prompt()
    args = (str(root / "ckpt"), str(root), ids, 3, combines, bad, load)
    run_ranks(ep_ranks, 2, args, timeout=TIMEOUT)
    return [torch.load(root / f"rank{r}.pt") for r in range(2)], logit_bound(ref, ids, probes=3)


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    """Both ranks' results (``ep_ranks``: rank 0's bad plan first, then unsharded,
    then sharded with combine="exact", then the checkpoint loaded as each
    rank's shard, EP + TP): the one spawn of the default suite."""
    root = tmp_path_factory.mktemp("ep")
    _checkpoint(root / "bad", num_local_experts=3)
    return _two_ranks(root, ("exact",), str(root / "bad"), load=True)


def test_expert_range_plans_and_refuses():
    assert [expert_range(128, r, 4) for r in range(4)] == [(0, 32), (32, 32), (64, 32), (96, 32)]
    assert expert_range(4, 0, 1) == (0, 4)
    with pytest.raises(MXValueError, match="ranks: 3 ranks do not divide the 4 experts"):
        expert_range(4, 0, 3)
    with pytest.raises(MXValueError, match="rank, ranks"):
        expert_range(4, 2, 2)
    with pytest.raises(MXArgTypeError, match="ranks: expected an int"):
        expert_range(4, 0, 2.0)


def test_refused_without_a_process_group_or_experts():
    assert not dist.is_initialized()
    model = tiny_gpt_oss()
    with pytest.raises(MXValueError, match="init_process_group"):
        shard_experts(model)
    with pytest.raises(MXValueError, match="combine: expected one of exact, sum"):
        ExpertParallel(combine="tree")


def test_select_shares_the_layers(tmp_path):
    model, _ = _checkpoint(tmp_path / "ckpt")
    block = model.model.layers[0].mlp.experts
    part = block.select(2, 2)
    assert isinstance(part, MXExperts) and part.num_experts == 2
    assert part.gate_up[0] is block.gate_up[2] and part.down[1] is block.down[3]
    assert 2 * part.nbytes == block.nbytes
    with pytest.raises(MXValueError, match=r"experts 3\.\.4 are not in \[0, 4\)"):
        block.select(3, 2)


def test_one_rank_group_is_the_single_process_bit_for_bit(tmp_path):
    """In this process, a gloo group of one rank (a HashStore): the sharded block
    (all experts local; the slots, the sum over the ranks, the fold) gives the
    unsharded model's logits bit for bit, prefill and one-token steps; the
    ParallelStyle path (parallelize_module) does the same; a block call whose
    slots pass ``EXCHANGE_BYTES`` sums them by torch's ``all_reduce``, one
    token's by the decode exchange, both the unsharded block's bits."""
    from torch.distributed.tensor.parallel import parallelize_module

    model, _ = _checkpoint(tmp_path / "ckpt")
    ids = prompt()
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        whole = trace(model, ids, 3)
        sharded = copy.deepcopy(model)
        assert shard_experts(sharded) == [f"model.layers.{i}.mlp.experts" for i in range(2)]
        styled = copy.deepcopy(model)
        from torch.distributed.device_mesh import init_device_mesh

        mesh = init_device_mesh("cpu", (1,))
        parallelize_module(styled, mesh, {"model.layers.*.mlp.experts": ExpertParallel()})
        for m in (sharded, styled):
            assert all(isinstance(layer.mlp.experts, ExpertShard) for layer in m.model.layers)
            got = trace(m, ids, 3)
            assert torch.equal(got["prompt"], whole["prompt"])
            assert torch.equal(got["steps"], whole["steps"]) and got["tokens"] == whole["tokens"]
        # a prompt whose slots pass EXCHANGE_BYTES (200 x 2 x 64 f32): torch's
        # all_reduce; one token's: the decode exchange; both bit for bit
        gen = torch.Generator().manual_seed(3)
        for t, kind in ((200, "all_reduce"), (1, "all_to_all_single")):
            x = torch.randn(t, 64, generator=gen)
            idx = torch.stack([torch.randperm(4, generator=gen)[:2] for _ in range(t)])
            w = torch.rand(t, 2, generator=gen)
            with torch.inference_mode(), counted_collectives() as calls:
                got = sharded.model.layers[0].mlp.experts(x, idx, w)
            assert calls == {"all_to_all_single": 0, "all_reduce": 0, kind: 1}
            with torch.inference_mode():
                assert torch.equal(got, model.model.layers[0].mlp.experts(x, idx, w))
        with pytest.raises(MXValueError, match="already sharded"):
            shard_experts(sharded)
        with pytest.raises(MXValueError, match="model: holds no MXExperts"):
            shard_experts(torch.nn.Linear(2, 2))
        with pytest.raises(MXArgTypeError, match="device_mesh: expected a DeviceMesh"):
            shard_experts(model, device_mesh="cpu")
        with pytest.raises(MXValueError, match=r"router_indices: expected experts in \[0, 4\)"):
            block = sharded.model.layers[0].mlp.experts
            block(torch.zeros(1, 64), torch.tensor([[0, 4]]), torch.ones(1, 2))
    finally:
        dist.destroy_process_group()


def test_two_ranks_exact_is_the_single_process_bit_for_bit(two_ranks):
    """2 ranks x 1 thread, combine="exact": the prompt's logits and every decode
    step's bit for bit the unsharded model's (so within its bound, same
    tokens), the same on both ranks and in both runs; each rank holds half
    the expert bytes, the layers of the experts it gave away are freed, and
    save_pretrained refuses the sharded model."""
    ranks, bound = two_ranks
    for r in ranks:
        whole, ep = r["whole"], r["exact"]
        assert ep["names"] == [f"model.layers.{i}.mlp.experts" for i in range(2)]
        for run in ep["runs"]:
            assert torch.equal(run["prompt"], whole["prompt"])
            assert torch.equal(run["steps"], whole["steps"])
            assert run["tokens"] == whole["tokens"] and len(run["tokens"]) == 3
        assert 2 * ep["held"] == r["held_whole"] > 0
        assert ep["given_away"] == 2 * 2 and ep["given_away_alive"] == 0
        # save_pretrained would write 2 experts under a config of 4: refused
        assert ep["save"] == (
            "model.layers.0.mlp.experts: holds 2 of its 4 experts (expert parallel): save the "
            "unsharded model"
        )
    assert torch.equal(ranks[0]["exact"]["runs"][0]["steps"], ranks[1]["exact"]["runs"][1]["steps"])
    assert 0 < bound.check(ranks[0]["exact"]["runs"][0]["prompt"]) <= 1


def test_two_ranks_combine_by_the_decode_exchange_or_torch_the_same_bits(two_ranks):
    """The exact combine of a decode step (and of this short prompt: its slots
    are under ``EXCHANGE_BYTES``) is tensor parallel's decode collective, one
    ``all_to_all_single`` per block and forward (2 blocks x (prompt + 3
    steps) x 2 runs), no ``all_reduce``; with ``set_decode_collective("torch")``
    it is torch's ``all_reduce`` instead, and the bits are the same (each
    slot is nonzero on one rank only)."""
    ranks, _ = two_ranks
    for r in ranks:
        whole, ep = r["whole"], r["exact"]
        assert ep["calls"] == {"all_to_all_single": 2 * 4 * 2, "all_reduce": 0}
        assert ep["torch"]["calls"] == {"all_to_all_single": 0, "all_reduce": 2 * 4}
        run = ep["torch"]["run"]
        assert torch.equal(run["prompt"], whole["prompt"]) and torch.equal(run["steps"], whole["steps"])


def test_a_rank_count_that_does_not_divide_the_experts_is_refused_before_any_collective(
    two_ranks,
):
    """3 experts over 2 ranks, asked by rank 0 alone before the run above:
    refused with MXValueError naming the block, nothing sharded, and no
    collective entered (it would have met rank 1's first all_reduce, and the
    run above would not be bit for bit)."""
    ranks, _ = two_ranks
    message = ("model.layers.0.mlp.experts: ranks: 2 ranks do not divide the 3 experts "
               "(expert parallel gives each rank the same number of experts)")  # fmt: skip
    # shard_experts on the model loaded whole, and from_pretrained(device_mesh=)
    # on the meta model, before a byte of the experts is read
    assert ranks[0]["refused"] == {"message": message, "sharded": 0, "load": message}
    assert ranks[1]["refused"] is None


def test_two_ranks_loaded_as_shards_ep_tp_give_the_single_process_tokens(two_ranks):
    """from_pretrained(device_mesh=, tp_plan="auto") on 2 ranks x 1 thread: each
    rank reads its 2 of the 4 experts and its heads of the attention (q/k/v
    rows, o_proj columns, sinks); the greedy tokens are the single process's,
    the logits within the dequantized reference's bound (the rowwise o_proj's
    partial sums are added in another order), and both runs and both ranks
    give the same bits."""
    ranks, bound = two_ranks
    for rank, r in enumerate(ranks):
        got = r["load"]
        assert got["experts"] == [("ExpertShard", 2 * rank, 2, 4)] * 2
        assert 2 * got["held"] == r["held_whole"] > 0
        assert got["attention"] == {"q_proj": (32, 64), "k_proj": (16, 64), "v_proj": (16, 64),
                                    "o_proj": (64, 32)}  # fmt: skip
        assert got["sinks"] == (2,)
        first, second = got["runs"]
        assert torch.equal(first["prompt"], second["prompt"])
        assert torch.equal(first["steps"], second["steps"])
        assert first["tokens"] == second["tokens"] == r["whole"]["tokens"]
        assert 0 < bound.check(first["prompt"]) <= 1
    a, b = (r["load"]["runs"][0] for r in ranks)
    assert torch.equal(a["prompt"], b["prompt"]) and torch.equal(a["steps"], b["steps"])


def _as_rank(rank: int, world: int):
    """This process as rank ``rank`` of ``world`` in torch's fake process group
    (a rank and a world size, no peers: the loads below run no collective)."""
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world)
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh("cpu", (world,))


def _stored(layer):
    w = layer.weight()
    return w.packed_codes(), w.scales.view("uint8"), layer.bias


@pytest.mark.parametrize("rank", [0, 1])
def test_a_rank_reads_its_experts_and_heads_as_slices_of_the_whole(tmp_path, rank):
    """In this process, as rank 0 or 1 of 2: the shard load's experts (codes,
    scales, biases), attention rows / columns, sinks, embedding rows and
    head rows are those slices of the model loaded whole; half the expert
    bytes; bad EP plans refused before a byte is read."""
    import numpy as np

    from mlir_mx.torch import from_pretrained

    _checkpoint(tmp_path / "ckpt")
    _checkpoint(tmp_path / "bad", num_local_experts=3)
    whole = from_pretrained(tmp_path / "ckpt")
    mesh = _as_rank(rank, 2)
    try:
        part = from_pretrained(tmp_path / "ckpt", device_mesh=mesh, tp_plan="auto")
        with pytest.raises(MXValueError, match="model.layers.0.mlp.experts: ranks: 2 ranks do "
                                               "not divide the 3 experts"):  # fmt: skip
            from_pretrained(tmp_path / "bad", device_mesh=mesh,
                            tp_plan={"model.layers.*.mlp.experts": "ep_dispatch_experts"})  # fmt: skip
        with pytest.raises(MXValueError, match=r"model.layers.0.self_attn: planned expert "
                                               r"parallel, but holds no stacked experts"):  # fmt: skip
            from_pretrained(tmp_path / "ckpt", device_mesh=mesh,
                            tp_plan={"model.layers.*.self_attn": ExpertParallel()})  # fmt: skip
    finally:
        dist.destroy_process_group()
    rows = lambda n: slice(rank * n // 2, (rank + 1) * n // 2)  # noqa: E731
    for w, p in zip(whole.model.layers, part.model.layers, strict=True):
        block = p.mlp.experts
        assert (block.first, block.num_experts, block.total_experts) == (2 * rank, 2, 4)
        for proj in ("gate_up", "down"):
            for j, layer in enumerate(getattr(block, proj)):
                mine = _stored(layer)
                full = _stored(getattr(w.mlp.experts, proj)[2 * rank + j])
                assert np.array_equal(mine[0], full[0]) and np.array_equal(mine[1], full[1])
                assert torch.equal(mine[2], full[2])
        assert 2 * block.nbytes == w.mlp.experts.nbytes
        wa, pa = w.self_attn, p.self_attn
        for proj in ("q_proj", "k_proj", "v_proj"):
            n = getattr(wa, proj).out_features
            assert torch.equal(getattr(pa, proj).weight.to_local(), getattr(wa, proj).weight[rows(n)])
            assert torch.equal(getattr(pa, proj).bias.to_local(), getattr(wa, proj).bias[rows(n)])
        cols = rows(wa.o_proj.in_features)
        assert torch.equal(pa.o_proj.weight.to_local(), wa.o_proj.weight[:, cols])
        assert torch.equal(pa.o_proj.bias.to_local(), wa.o_proj.bias)
        assert torch.equal(pa.sinks, wa.sinks[rows(4)])
    vocab = whole.config.vocab_size
    assert torch.equal(part.lm_head.weight.to_local(), whole.lm_head.weight[rows(vocab)])
    # the embedding is the rank's rows as a plain tensor (looked up without DTensor)
    assert torch.equal(part.model.embed_tokens.weight, whole.model.embed_tokens.weight[rows(vocab)])


def test_a_rank_reads_its_experts_from_a_gguf_file(tmp_path):
    """The same from a GGUF file (ggml MXFP4 experts): as rank 1 of 2, each
    block holds experts 2..3, their codes, scales and biases those of the
    whole load's, half its bytes."""
    import numpy as np

    gguf = pytest.importorskip("gguf", reason="gguf not installed (pip install 'mlir-mx[test]')")
    from gguf_cases import write_model_gguf

    from mlir_mx.torch import from_pretrained

    def types(name, a):
        q = gguf.GGMLQuantizationType
        return q.MXFP4 if "_exps.weight" in name else q.F32

    path = tmp_path / "gpt-oss.gguf"
    write_model_gguf(tiny_gpt_oss(vocab_size=264), path, types)
    whole = from_pretrained(path, dtype=torch.float32)
    mesh = _as_rank(1, 2)
    try:
        part = from_pretrained(path, dtype=torch.float32, device_mesh=mesh, tp_plan="auto")
    finally:
        dist.destroy_process_group()
    for w, p in zip(whole.model.layers, part.model.layers, strict=True):
        block, full = p.mlp.experts, w.mlp.experts
        assert (block.first, block.num_experts, block.total_experts) == (2, 2, 4)
        assert 2 * block.nbytes == full.nbytes
        for proj in ("gate_up", "down"):
            for j, layer in enumerate(getattr(block, proj)):
                mine, theirs = _stored(layer), _stored(getattr(full, proj)[2 + j])
                assert np.array_equal(mine[0], theirs[0]) and np.array_equal(mine[1], theirs[1])
                assert torch.equal(mine[2], theirs[2])


@pytest.mark.slow
def test_two_ranks_sum_within_the_bound_and_run_to_run(tmp_path):
    """combine="sum" (partial sums all-reduced): not the single process's order
    of additions, but within the reference's bound, the same greedy tokens,
    and bit for bit the same in both runs and on both ranks."""
    ranks, bound = _two_ranks(tmp_path, ("sum",))
    for r in ranks:
        whole, runs = r["whole"], r["sum"]["runs"]
        assert torch.equal(runs[0]["prompt"], runs[1]["prompt"])
        assert torch.equal(runs[0]["steps"], runs[1]["steps"])
        assert runs[0]["tokens"] == whole["tokens"]
        assert 0 < bound.check(runs[0]["prompt"]) <= 1
        assert r["sum"]["held"] * 2 == r["held_whole"]
    assert torch.equal(ranks[0]["sum"]["runs"][0]["steps"], ranks[1]["sum"]["runs"][0]["steps"])


@pytest.mark.slow
def test_a_lone_rank_is_refused_without_waiting(tmp_path):
    """The same refusal with rank 1 gone at once: rank 0 does not wait for it."""
    _checkpoint(tmp_path / "ckpt", num_local_experts=3)
    run_ranks(refuse_rank, 2, (str(tmp_path / "ckpt"), str(tmp_path)), timeout=TIMEOUT)
    got = torch.load(tmp_path / "rank0.pt")
    assert got["message"].startswith("model.layers.0.mlp.experts: ranks: 2 ranks do not divide")
    assert got["sharded"] == 0


@pytest.mark.slow
def test_ep_tp_load_is_bit_identical_across_spawns(tmp_path):
    """Two separate spawns of 2 ranks, each loading the checkpoint as its shard
    (EP + attention TP): the same bits in both, prompt and every step, on
    both ranks, and the single process's tokens."""
    spawns = [_two_ranks(tmp_path / str(i), (), load=True)[0] for i in range(2)]
    for a, b in zip(*spawns, strict=True):
        for x, y in zip(a["load"]["runs"], b["load"]["runs"], strict=True):
            assert torch.equal(x["prompt"], y["prompt"]) and torch.equal(x["steps"], y["steps"])
            assert x["tokens"] == y["tokens"] == a["whole"]["tokens"]

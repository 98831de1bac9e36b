"""``from_pretrained`` / ``save_pretrained``: gpt-oss and compressed-tensors
MXFP4 checkpoints loaded as they are, against transformers' own dequantization
of the same bytes; round trips byte-identical; malformed files refused."""

from __future__ import annotations

import json
import shutil
import sys

import pytest

torch = pytest.importorskip("torch", reason="torch not installed (pip install 'mlir-mx[torch]')")
pytest.importorskip("safetensors", reason="safetensors not installed (pip install 'mlir-mx[test]')")

from gpt_oss_cases import (  # noqa: E402
    prompt,
    tiny_gpt_oss,
    transformers_or_skip,
    write_gpt_oss_checkpoint,
)
from safetensors.torch import save_file  # noqa: E402

from mlir_mx import oracle  # noqa: E402
from mlir_mx.errors import MXValueError  # noqa: E402
from mlir_mx.files import release_file_pages  # noqa: E402
from mlir_mx.torch import (  # noqa: E402
    MXExperts,
    MXLinear,
    from_pretrained,
    greedy,
    logit_bound,
    quantize_weight,
    save_pretrained,
)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gpt-oss") / "tiny"
    tensors = write_gpt_oss_checkpoint(tiny_gpt_oss(), folder)
    return folder, tensors


@pytest.fixture(scope="module")
def loaded(checkpoint):
    return from_pretrained(checkpoint[0], dtype=torch.float32)


def _transformers_reference(folder, tensors):
    """transformers' GptOssForCausalLM from the config, f32, every tensor from the
    file: the experts through transformers' own MXFP4 dequantization."""
    transformers = transformers_or_skip()
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors

    config = json.loads((folder / "config.json").read_text())
    config.pop("quantization_config")
    model = transformers.GptOssForCausalLM(transformers.GptOssConfig(**config)).eval()
    state = {}
    for key, t in tensors.items():
        if key.endswith("_blocks"):
            base = key[: -len("_blocks")]
            state[base] = convert_moe_packed_tensors(t, tensors[base + "_scales"], dtype=torch.float32)
        elif not key.endswith("_scales"):
            state[key] = t.to(torch.float32)
    model.load_state_dict(state, strict=True)
    return model


def test_weights_are_transformers_dequantization_bit_for_bit(checkpoint, loaded):
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors

    _folder, tensors = checkpoint
    for i, layer in enumerate(loaded.model.layers):
        ex = layer.mlp.experts
        assert isinstance(ex, MXExperts) and 8 * ex.nbytes / (4 * 3 * 64 * 64) == 4.25
        for proj, mods in (("gate_up_proj", ex.gate_up), ("down_proj", ex.down)):
            key = f"model.layers.{i}.mlp.experts.{proj}"
            theirs = convert_moe_packed_tensors(
                tensors[key + "_blocks"], tensors[key + "_scales"], dtype=torch.float32
            )  # (E, in, out): transposed
            for e, m in enumerate(mods):
                ours = torch.from_numpy(oracle.dequantize(m.weight()))
                assert torch.equal(ours.view(torch.int32), theirs[e].t().contiguous().view(torch.int32))
    # The other tensors as stored (bf16), here in the dtype asked for.
    assert torch.equal(loaded.lm_head.weight, tensors["lm_head.weight"].float())
    assert from_pretrained(checkpoint[0]).lm_head.weight.dtype == torch.bfloat16


def test_logits_routing_and_tokens_against_transformers(checkpoint, loaded):
    ref = _transformers_reference(*checkpoint)
    ids = prompt()
    bound = logit_bound(ref, ids, probes=3)
    routes = {"ours": [], "ref": []}
    hooks = [
        layer.mlp.router.register_forward_hook(lambda m, i, o, tag=tag: routes[tag].append(o[2]))
        for tag, model in (("ours", loaded), ("ref", ref)) for layer in model.model.layers
    ]  # fmt: skip
    try:
        with torch.inference_mode():
            logits = loaded(ids).logits
            ref(ids)
    finally:
        for h in hooks:
            h.remove()
    assert 0 < bound.check(logits) <= 1
    assert len(routes["ours"]) == 2
    for a, b in zip(routes["ours"], routes["ref"], strict=True):
        assert torch.equal(a, b)
    top2 = bound.logits[0, -1].topk(2).values
    assert float(top2[0] - top2[1]) > 100 * float(bound.bound.max())
    assert list(greedy(loaded, ids, 2)) == list(greedy(ref, ids, 2))


def _pages(runs, page):
    """The whole pages inside ``runs`` (``(address, bytes)``, joined where they
    touch), as page numbers."""
    out, joined = set(), []
    for address, n in sorted(runs):
        if joined and address <= joined[-1][1]:
            joined[-1][1] = max(joined[-1][1], address + n)
        else:
            joined.append([address, address + n])
    for lo, hi in joined:
        out |= set(range(-(-lo // page), hi // page))
    return out


def _spy_copies_and_releases(monkeypatch) -> list:
    """Record, in order, every copy a checkpoint load makes out of its memory
    map (``("copy", key, span)``) and every page release
    (``("release", spans, paths, bytes released)``)."""
    from mlir_mx.torch import checkpoint_files as ckpt_files

    events, copied = [], ckpt_files.CheckpointFiles.copied

    def copy_spy(self, key, index=None):
        t = copied(self, key, index)
        events.append(("copy", key, self.spans[-1]))
        return t

    def release_spy(spans, paths):
        released = release_file_pages(spans, paths)
        events.append(("release", list(spans), list(paths), released))
        return released

    monkeypatch.setattr(ckpt_files.CheckpointFiles, "copied", copy_spy)
    monkeypatch.setattr(ckpt_files, "release_file_pages", release_spy)
    return events

def _check_page_releases(events, page) -> tuple[list, set]:
    """Walk :func:`_spy_copies_and_releases`' events: each release frees whole
    pages only, each page once, and by then every whole page copied so far.
    The spans copied and the pages released."""
    seen, done = [], set()
    for event in events:
        if event[0] == "copy":
            seen.append(event[2])
            continue
        _, spans, _paths, released = event
        assert all(a % page == 0 and n % page == 0 for a, n in spans)
        now = _pages(spans, page)
        assert sum(n for _, n in spans) == len(now) * page == released
        assert not now & done  # each page released once
        done |= now
        assert done == _pages(seen, page)  # every whole page copied so far
    return seen, done


@pytest.mark.skipif(sys.platform != "linux", reason="pages are released on Linux only")
def test_the_mx_bytes_pages_leave_the_rss_after_loading(checkpoint, monkeypatch):
    """The experts' bytes, copied into the layers' own arrays, are released
    from the checkpoint's memory map (``mlir_mx.files.release_file_pages``)
    a group of experts at a time, as they are laid out: after each group,
    every whole page of the bytes copied so far has been released, each page
    once (a page two experts' rows share, when the second's are read); in
    all every whole page of each blocks/scales tensor; the stored weights are
    the file's bytes (``test_weights_are_transformers_dequantization_bit_for_bit``
    loads the same way)."""
    import os

    import numpy as np

    folder, tensors = checkpoint
    page, events = os.sysconf("SC_PAGE_SIZE"), _spy_copies_and_releases(monkeypatch)
    model = from_pretrained(folder)
    mx = {k: t for k, t in tensors.items() if k.endswith(("_blocks", "_scales"))}
    copies = [e for e in events if e[0] == "copy"]
    releases = [e for e in events if e[0] == "release"]
    # every byte of every blocks/scales tensor copied once, an expert's rows at a time
    assert sorted({e[1] for e in copies}) == sorted(mx)
    for key, t in mx.items():
        spans = sorted(e[2] for e in copies if e[1] == key)
        assert len(spans) == t.shape[0] and sum(n for _, n in spans) == t.numel()
        assert all(a + n == b for (a, n), (b, _) in zip(spans[:-1], spans[1:], strict=True))
    # one release per group of experts a block (group: torch's threads), then
    # from_pretrained's own with only the partial pages at the tensors' ends
    groups = -(-4 // torch.get_num_threads())
    assert len(releases) == 2 * groups + 1
    assert events[-1] is releases[-1]
    assert all(e[2] == [folder / "model.safetensors"] for e in releases)
    _, spans, _, released = releases[-1]  # from_pretrained's: the last edges, no whole page
    assert released == 0 and _pages(spans, page) == set()
    seen, done = _check_page_releases(events[:-1], page)
    total = sum(t.numel() for t in mx.values())
    assert total - 2 * page * len(mx) <= len(done) * page <= total and len(done) > 0
    # the layers hold the file's bytes
    for i, layer in enumerate(model.model.layers):
        for proj, mods in (("gate_up_proj", layer.mlp.experts.gate_up),
                           ("down_proj", layer.mlp.experts.down)):  # fmt: skip
            key = f"model.layers.{i}.mlp.experts.{proj}"
            for e, m in enumerate(mods):
                w = m.weight()
                codes = tensors[key + "_blocks"][e].reshape(w.packed_codes().shape)
                assert np.array_equal(w.packed_codes(), codes.numpy())
                assert np.array_equal(w.scales.view("uint8"), tensors[key + "_scales"][e].numpy())
    monkeypatch.undo()
    ids = prompt(5)
    with torch.inference_mode():
        assert torch.equal(model(ids).logits, from_pretrained(folder)(ids).logits)


def test_round_trip_is_byte_identical(checkpoint, tmp_path):
    folder, _ = checkpoint
    save_pretrained(from_pretrained(folder), tmp_path / "one")
    assert (tmp_path / "one/model.safetensors").read_bytes() == (folder / "model.safetensors").read_bytes()
    cfg = json.loads((tmp_path / "one/config.json").read_text())
    assert cfg["quantization_config"]["quant_method"] == "mxfp4"
    # Sharded: the same files, the same tensors in each.
    sharded = tmp_path / "sharded"
    write_gpt_oss_checkpoint(tiny_gpt_oss(), sharded, shards=2)
    model = from_pretrained(sharded)
    save_pretrained(model, tmp_path / "two")
    files = sorted(p.name for p in sharded.glob("*.safetensors"))
    assert len(files) == 2
    for name in files:
        assert (tmp_path / "two" / name).read_bytes() == (sharded / name).read_bytes()
    with torch.inference_mode():
        ids = prompt(5)
        again = from_pretrained(tmp_path / "two")
        assert torch.equal(again(ids).logits, model(ids).logits)


def _mutant(checkpoint, tmp_path, change):
    folder, tensors = checkpoint
    out = tmp_path / "bad"
    shutil.copytree(folder, out)
    t = dict(tensors)
    change(t)
    t = {k: v.contiguous() for k, v in t.items()}
    save_file(t, str(out / "model.safetensors"), metadata={"format": "pt"})
    return out


KEY = "model.layers.1.mlp.experts.down_proj"


@pytest.mark.parametrize(
    "change, match",
    [
        (lambda t: t.pop(KEY + "_scales"), f"{KEY}_scales: missing"),
        (lambda t: t.update({KEY + "_blocks": t[KEY + "_blocks"][:, :, :1]}),
         f"{KEY}_blocks: expected shape"),
        (lambda t: t.update({KEY + "_scales": t[KEY + "_scales"].to(torch.int16)}),
         f"{KEY}_scales: expected dtype U8"),
        (lambda t: t.update({"lm_head.weight": t["lm_head.weight"][:-1]}),
         "lm_head.weight: expected shape"),
        (lambda t: t.update({"model.norm.weight": t["model.norm.weight"].to(torch.int32)}),
         "model.norm.weight: expected dtype"),
        (lambda t: t.update({"model.extra": torch.zeros(2)}), "model.extra: not a tensor"),
    ],
)  # fmt: skip
def test_malformed_tensors_are_named(checkpoint, tmp_path, change, match):
    with pytest.raises(MXValueError, match=match):
        from_pretrained(_mutant(checkpoint, tmp_path, change))


def test_malformed_files_and_configs(checkpoint, tmp_path):
    folder, _ = checkpoint
    bad = tmp_path / "cut"
    shutil.copytree(folder, bad)
    data = (bad / "model.safetensors").read_bytes()
    for cut in (len(data) - 7, 100, 5):
        (bad / "model.safetensors").write_bytes(data[:cut])
        with pytest.raises(MXValueError, match="model.safetensors: not a readable safetensors"):
            from_pretrained(bad)
    (bad / "model.safetensors").write_bytes(data)
    cfg = json.loads((folder / "config.json").read_text())
    cfg["quantization_config"]["quant_method"] = "gptq"
    (bad / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(MXValueError, match="quant_method is 'gptq'"):
        from_pretrained(bad)
    (bad / "config.json").write_text("{")
    with pytest.raises(MXValueError, match="config.json"):
        from_pretrained(bad)
    shutil.copy(folder / "config.json", bad / "config.json")
    (bad / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"a": "x.safetensors"}}))
    with pytest.raises(MXValueError, match="x.safetensors"):
        from_pretrained(bad)
    with pytest.raises(MXValueError, match="path"):
        from_pretrained(tmp_path / "nowhere")


def test_a_whole_dense_load_drops_each_linears_pages_after_it(tmp_path, monkeypatch):
    """A model of MX linears loaded whole (compressed-tensors, no mesh) drops
    from the file's map the pages of each linear's codes and scales once that
    linear is built (issue 56: its peak was every linear's pages above what it
    keeps), not at the end: after each linear, every whole page copied so far
    has been released, each page once; the logits are unchanged."""
    import os

    from llama_cases import prompt as llama_prompt
    from llama_cases import tiny_llama

    from mlir_mx.torch import quantize_

    model = tiny_llama(hidden_size=256, intermediate_size=512)
    quantize_(model, element="mxfp4")
    save_pretrained(model, tmp_path / "ct")
    page, events = os.sysconf("SC_PAGE_SIZE"), _spy_copies_and_releases(monkeypatch)
    loaded = from_pretrained(tmp_path / "ct")
    linears = [n for n, m in loaded.named_modules() if isinstance(m, MXLinear)]
    assert len(linears) == 7 * model.config.num_hidden_layers + 1  # lm_head too
    # per linear: its codes and scales copied, then one release; from_pretrained's last
    kinds = [e[0] for e in events]
    assert kinds == ["copy", "copy", "release"] * len(linears) + ["release"]
    seen, done = _check_page_releases(events[:-1], page)
    assert len(done) * page > sum(n for _, n in seen) // 2  # most of the bytes: whole pages
    ids = llama_prompt(8)
    with torch.inference_mode():
        assert torch.equal(loaded(ids).logits, model(ids).logits)


def test_compressed_tensors_linears(tmp_path):
    """A compressed-tensors mxfp4-pack-quantized Llama: each linear's
    weight_packed / weight_scale become an MXLinear over those bytes; the
    model is bit for bit quantize_'s; a round trip is byte-identical."""
    from llama_cases import prompt as llama_prompt
    from llama_cases import tiny_llama

    from mlir_mx.torch import quantize_

    model = tiny_llama()
    tensors = {}
    for key, t in model.state_dict().items():
        if key.endswith("proj.weight"):
            w = quantize_weight(t, "f4E2M1FN", 32)
            tensors[key[: -len("weight")] + "weight_packed"] = torch.from_numpy(w.packed_codes().copy())
            tensors[key[: -len("weight")] + "weight_scale"] = torch.from_numpy(w.scales.view("uint8").copy())
        else:
            tensors[key] = t.detach().contiguous()
    folder = tmp_path / "ct"
    folder.mkdir()
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    config = model.config.to_dict()
    config["quantization_config"] = {
        "quant_method": "compressed-tensors", "format": "mxfp4-pack-quantized",
        "config_groups": {"group_0": {"targets": ["Linear"], "format": "mxfp4-pack-quantized"}},
        "ignore": ["lm_head"],
    }  # fmt: skip
    (folder / "config.json").write_text(json.dumps(config))
    loaded = from_pretrained(folder)
    q = loaded.model.layers[0].mlp.down_proj
    assert isinstance(q, MXLinear) and not isinstance(loaded.lm_head, MXLinear)
    quantize_(model, filter_fn=lambda m, name: name.endswith("proj"))
    ids = llama_prompt(8)
    with torch.inference_mode():
        assert torch.equal(loaded(ids).logits, model(ids).logits)
    save_pretrained(loaded, tmp_path / "again")
    assert (tmp_path / "again/model.safetensors").read_bytes() == (folder / "model.safetensors").read_bytes()
    key = "model.layers.0.mlp.up_proj.weight_scale"
    tensors[key] = tensors[key][:, :1].contiguous()
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(MXValueError, match="up_proj.weight_scale: expected shape"):
        from_pretrained(folder)


def test_transformers_own_loader_agrees(checkpoint, loaded):
    """transformers' own from_pretrained of the same folder (its dequantizing
    path, asked for by Mxfp4Config(dequantize=True): with mlir_mx.torch imported
    a plain from_pretrained comes to our loader, test_transformers_api.py) holds
    our weights, dequantized, bit for bit."""
    transformers = transformers_or_skip()
    theirs = transformers.GptOssForCausalLM.from_pretrained(
        checkpoint[0], dtype=torch.float32, quantization_config=transformers.Mxfp4Config(dequantize=True)
    )
    assert not isinstance(theirs.model.layers[0].mlp.experts, MXExperts)
    for ours_layer, their_layer in zip(loaded.model.layers, theirs.model.layers, strict=True):
        ex, te = ours_layer.mlp.experts, their_layer.mlp.experts
        for e in range(ex.num_experts):
            assert torch.equal(ex.gate_up[e].dequantized_weight(), te.gate_up_proj[e].t())
            assert torch.equal(ex.down[e].dequantized_weight(), te.down_proj[e].t())
            assert torch.equal(ex.gate_up[e].bias, te.gate_up_proj_bias[e])
    assert torch.equal(loaded.model.embed_tokens.weight, theirs.model.embed_tokens.weight)


def test_a_quantized_model_saves_and_loads(tmp_path):
    """quantize_ (experts only) then save_pretrained: a gpt-oss checkpoint that
    from_pretrained loads back bit for bit."""
    from mlir_mx.torch import quantize_

    model = tiny_gpt_oss(num_hidden_layers=1)
    quantize_(model, filter_fn=lambda m, name: "experts" in name)
    save_pretrained(model, tmp_path / "q")
    cfg = json.loads((tmp_path / "q/config.json").read_text())["quantization_config"]
    assert cfg["quant_method"] == "mxfp4" and "lm_head" in cfg["modules_to_not_convert"]
    back = from_pretrained(tmp_path / "q")
    ids = prompt(6)
    with torch.inference_mode():
        assert torch.equal(back(ids).logits, model(ids).logits)


def test_quick_checkpoint_campaign():
    """mlir_mx_testing.checkpoint_fuzz: mutated checkpoints in a worker process
    (a signal or a hang would be a finding): every case loads or is refused
    with an MXValueError naming the file or tensor."""
    from mlir_mx_testing.campaign import run_campaign
    from mlir_mx_testing.checkpoint_fuzz import KINDS

    report = run_campaign("checkpoint", seed=1, count=12, timeout=300, options={"kinds": KINDS})
    assert report.clean, report.summary()
    assert report.kinds["rejected"] > 5 and report.kinds["ok"] > 0
    assert len(set(report.configs) & set(KINDS)) >= 4

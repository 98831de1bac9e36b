"""Checkpoint folders whose files disagree, malformed fields, and saves that
never leave a wrong model (issue 52, round 4's reproducers 01-04, 11, 12, 14):
each case loads the model its files hold, or is refused with an MXValueError
naming the file, key or tensor; never a traceback, never a silent wrong
model.  The reproducers (``../shared/repro/round4/``):
``01-ckpt-duplicate-keys-unindexed``, ``02-ckpt-index-tracebacks``,
``03-ckpt-config-tracebacks``, ``04-ckpt-tied-quantized-lm-head``,
``11-save-pretrained-stale-index``, ``12-save-pretrained-partial-sharded``,
``14-ckpt-misleading-or-silent``."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch", reason="torch not installed (pip install 'mlir-mx[torch]')")
pytest.importorskip("safetensors", reason="safetensors not installed (pip install 'mlir-mx[test]')")

from gpt_oss_cases import prompt, tiny_gpt_oss, write_gpt_oss_checkpoint  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

from mlir_mx.errors import MXArgTypeError, MXValueError  # noqa: E402
from mlir_mx.torch import MXLinear, from_pretrained, quantize_weight, save_pretrained  # noqa: E402
from mlir_mx.torch import checkpoint_files as cf  # noqa: E402

INDEX = "model.safetensors.index.json"
S1, S2 = "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """``{"one": model A in one file, "two": A in 2 shards, "b": model B in one file}``."""
    root = tmp_path_factory.mktemp("reliability")
    a = tiny_gpt_oss(0)
    write_gpt_oss_checkpoint(a, root / "one")
    write_gpt_oss_checkpoint(a, root / "two", shards=2)
    write_gpt_oss_checkpoint(tiny_gpt_oss(5), root / "b")
    return {name: root / name for name in ("one", "two", "b")}


def _copy(folders, name, tmp_path):
    out = tmp_path / name
    shutil.copytree(folders[name], out)
    return out


def _logits(model, n=7):
    with torch.inference_mode():
        return model(prompt(n)).logits


def _snapshot(folder):
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}


# -- 01, 14: folders whose files disagree -----------------------------------------------------


def test_two_unindexed_files_holding_one_tensor_are_refused(folders, tmp_path):
    """Round 4 #01: a stale copy beside model.safetensors (no index) was read,
    the alphabetically first file winning; now the folder is refused, naming
    the tensor and both files."""
    d = _copy(folders, "one", tmp_path)
    stale = load_file(str(d / "model.safetensors"))
    stale["lm_head.weight"].zero_()
    save_file(stale, str(d / "model-old.safetensors"), metadata={"format": "pt"})
    with pytest.raises(
        MXValueError, match=r"in both .*model-old\.safetensors and .*/model\.safetensors"
    ):
        from_pretrained(d)
    # One tensor only, in a file sorting after: the same.
    (d / "model-old.safetensors").unlink()
    save_file({"model.norm.weight": stale["model.norm.weight"]}, str(d / "zz.safetensors"))
    with pytest.raises(MXValueError, match=r"model\.norm\.weight: in both .*zz\.safetensors"):
        from_pretrained(d)


def test_an_index_decides_and_ignores_other_names(folders, tmp_path):
    """With an index, a file of another name (a user's backup) is not read:
    the folder loads as its index says."""
    d = _copy(folders, "two", tmp_path)
    shutil.copy(folders["b"] / "model.safetensors", d / "backup.safetensors")
    assert torch.equal(_logits(from_pretrained(d)), _logits(from_pretrained(folders["two"])))


def _index(d):
    return json.loads((d / INDEX).read_text())


def _set_index(d, index):
    (d / INDEX).write_text(json.dumps(index))


def _map(change):
    def apply(d):
        index = _index(d)
        change(index["weight_map"])
        _set_index(d, index)

    return apply


def _stray(name):
    return lambda d: shutil.copy(d / S1, d / name)


def _two_shards(d):
    """lm_head.weight in both shards."""
    one, two = load_file(str(d / S1)), load_file(str(d / S2))
    src, dst = (one, two) if "lm_head.weight" in one else (two, one)
    dst["lm_head.weight"] = src["lm_head.weight"]
    save_file(dst, str(d / (S2 if dst is two else S1)), metadata={"format": "pt"})


def _unnamed(d):
    index = _index(d)
    index["weight_map"].pop("lm_head.weight")
    _set_index(d, index)


def _dangling(d):
    (d / INDEX).unlink()
    (d / INDEX).symlink_to(d / "nowhere.json")


def _directory(d):
    (d / INDEX).unlink()
    (d / INDEX).mkdir()


INDEX_CASES = {
    "empty weight_map": (_map(lambda m: m.clear()), r"index\.json: weight_map is empty"),
    "an int file name": (
        _map(lambda m: m.update({"lm_head.weight": 3})),
        r"index\.json: weight_map\['lm_head\.weight'\] is 3",
    ),
    "a list file name": (
        _map(lambda m: m.update({"lm_head.weight": [S1]})),
        r"weight_map\['lm_head\.weight'\] is \[",
    ),
    "a path, not a name": (
        _map(lambda m: m.update({"lm_head.weight": "../" + S1})),
        r"weight_map\['lm_head\.weight'\] is '\.\./",
    ),
    "no weight_map": (
        lambda d: _set_index(d, {"metadata": {}}),
        r"index\.json: not a safetensors index",
    ),
    "weight_map a list": (
        lambda d: _set_index(d, {"weight_map": [S1]}),
        r"index\.json: not a safetensors",
    ),
    "the index a list": (lambda d: _set_index(d, [1]), r"index\.json: not a safetensors index"),
    "not JSON": (lambda d: (d / INDEX).write_text("{"), r"index\.json: not a safetensors index"),
    "the index a directory": (
        _directory,
        r"index\.json: not a safetensors index: it is a directory",
    ),
    "the index a dangling link": (_dangling, r"index\.json: not a .*symbolic link to nothing"),
    "an absent file": (
        _map(lambda m: m.update({"lm_head.weight": "model-00009-of-00009.safetensors"})),
        r"model-00009-of-00009\.safetensors: named in",
    ),
    "an absent tensor": (
        _map(lambda m: m.update({"model.extra": S1})),
        r"model\.extra: model\.safetensors\.index\.json puts it in",
    ),
    "a tensor the index does not name": (_unnamed, r"lm_head\.weight: in .* does not name it"),
    "a tensor in two shards": (_two_shards, r"lm_head\.weight: in both .*00001.* and .*00002"),
    "a shard the index does not name": (
        _stray("model-00003-of-00003.safetensors"),
        r"model-00003-of-00003\.safetensors: a checkpoint file that",
    ),
    "model.safetensors beside the index": (
        _stray("model.safetensors"),
        r"/model\.safetensors: a checkpoint file that .* does not name",
    ),
    "shards without their index": (
        lambda d: (d / INDEX).unlink(),
        r"00001-of-00002\.safetensors: a shard without its model\.safetensors",
    ),
}


@pytest.mark.parametrize("case", INDEX_CASES)
def test_malformed_indexes_and_stray_shards_are_named(folders, tmp_path, case):
    """Round 4 #02 (an empty weight_map, a file name that is not a str, the
    index a directory: builtin exceptions before) and #2 of issue 52: shards
    the index does not name, an index naming absent tensors or files."""
    change, match = INDEX_CASES[case]
    d = _copy(folders, "two", tmp_path)
    change(d)
    with pytest.raises(MXValueError, match=match):
        from_pretrained(d)


@pytest.mark.parametrize("kind", ["directory", "fifo", "dangling link"])
def test_a_model_safetensors_that_is_not_a_file(folders, tmp_path, kind):
    """Round 4 #14a: the message no longer speaks of an index that is not there."""
    d = _copy(folders, "one", tmp_path)
    target = d / "model.safetensors"
    target.unlink()
    {
        "directory": target.mkdir,
        "fifo": lambda: os.mkfifo(target),
        "dangling link": lambda: target.symlink_to(d / "gone.safetensors"),
    }[kind]()
    what = {
        "directory": "a directory",
        "fifo": "a named pipe",
        "dangling link": "symbolic link to nothing",
    }
    with pytest.raises(MXValueError, match="model.safetensors: not a safetensors file") as e:
        from_pretrained(d)
    assert what[kind] in str(e.value) and "index" not in str(e.value)


@pytest.mark.parametrize("proj", ["gate_up_proj", "down_proj"])
def test_a_dense_weight_beside_its_mx_form_is_refused(folders, tmp_path, proj):
    """Round 4 #14b: experts.gate_up_proj beside gate_up_proj_blocks/_scales
    loaded silently (the dense one ignored)."""
    d = _copy(folders, "one", tmp_path)
    t = load_file(str(d / "model.safetensors"))
    key = f"model.layers.1.mlp.experts.{proj}"
    t[key] = torch.zeros(4, 64, 128, dtype=torch.bfloat16)
    save_file(t, str(d / "model.safetensors"))
    with pytest.raises(
        MXValueError, match=rf"{key}: stored dense in model\.safetensors beside .*{proj}_blocks"
    ):
        from_pretrained(d)


# -- compressed-tensors: the dense weight beside weight_packed, a tied quantized lm_head ---------


def _compressed(tmp_path, *, tie: bool, quantize_lm_head: bool, extra=None):
    """A compressed-tensors mxfp4-pack-quantized tiny Llama (the layout of
    round 4 #04); returns (folder, the model it was made from, its tensors)."""
    from llama_cases import tiny_llama

    model = tiny_llama(tie_word_embeddings=tie)
    tensors = {}
    for key, v in model.state_dict().items():
        if key.endswith("proj.weight") or (quantize_lm_head and key == "lm_head.weight"):
            w = quantize_weight(v, "f4E2M1FN", 32)
            tensors[key[:-6] + "weight_packed"] = torch.from_numpy(w.packed_codes().copy())
            tensors[key[:-6] + "weight_scale"] = torch.from_numpy(w.scales.view("uint8").copy())
        elif not (tie and key == "lm_head.weight"):
            tensors[key] = v.detach().clone().contiguous()
    tensors.update(extra or {})
    d = tmp_path / "ct"
    d.mkdir()
    save_file(tensors, str(d / "model.safetensors"), metadata={"format": "pt"})
    cfg = model.config.to_dict()
    group = {"targets": ["Linear"], "format": "mxfp4-pack-quantized"}
    cfg["quantization_config"] = {
        "quant_method": "compressed-tensors",
        "format": "mxfp4-pack-quantized",
        "config_groups": {"group_0": group},
        "ignore": [],
    }
    (d / "config.json").write_text(json.dumps(cfg))
    return d, model, tensors


def test_a_dense_weight_beside_weight_packed_is_refused(tmp_path):
    key = "model.layers.0.mlp.up_proj.weight"
    d, _, _ = _compressed(
        tmp_path, tie=False, quantize_lm_head=False, extra={key: torch.zeros(128, 64)}
    )
    with pytest.raises(
        MXValueError, match=rf"{key}: stored dense .* beside .*up_proj\.weight_packed"
    ):
        from_pretrained(d)


def test_tied_embeddings_with_a_quantized_lm_head_load_untied(tmp_path):
    """Round 4 #04: tie_word_embeddings=True and a quantized lm_head
    (weight_packed / weight_scale) was a KeyError in tie_weights.  The file
    wins: lm_head an MXLinear over its bytes, the embeddings as stored, the
    config now untied; the logits are those of the same model quantized by
    quantize_, and a save is byte-identical."""
    from llama_cases import prompt as llama_prompt

    from mlir_mx.torch import quantize_

    d, model, tensors = _compressed(tmp_path, tie=True, quantize_lm_head=True)
    loaded = from_pretrained(d)
    assert isinstance(loaded.lm_head, MXLinear)
    assert loaded.config.tie_word_embeddings is False
    assert torch.equal(loaded.model.embed_tokens.weight, tensors["model.embed_tokens.weight"])
    loaded.tie_weights()  # a later tie leaves them apart
    assert isinstance(loaded.lm_head, MXLinear)
    # The reference: the same weights, untied, quantized by quantize_.
    model.config.tie_word_embeddings = False
    model.lm_head.weight = torch.nn.Parameter(model.model.embed_tokens.weight.detach().clone())
    quantize_(model, filter_fn=lambda m, name: name.endswith("proj") or name == "lm_head")
    ids = llama_prompt(8)
    with torch.inference_mode():
        assert torch.equal(loaded(ids).logits, model(ids).logits)
    save_pretrained(loaded, tmp_path / "again")
    assert (tmp_path / "again/model.safetensors").read_bytes() == (
        d / "model.safetensors"
    ).read_bytes()
    with torch.inference_mode():
        assert torch.equal(from_pretrained(tmp_path / "again")(ids).logits, model(ids).logits)


# -- 03: config fields ----------------------------------------------------------------------

_CT = {"quant_method": "compressed-tensors", "format": "mxfp4-pack-quantized"}
CONFIG_CASES = {
    "ct config_groups a list": (
        lambda c: c.update(quantization_config={**_CT, "config_groups": ["g"]}),
        "quantization_config.config_groups is a list",
    ),
    "ct format a list": (
        lambda c: c.update(quantization_config={**_CT, "format": ["mxfp4-pack-quantized"]}),
        "quantization_config.format is",
    ),
    "ct group a string": (
        lambda c: c.update(quantization_config={**_CT, "config_groups": {"g": "x"}}),
        "quantization_config.config_groups.g is not an object",
    ),
    "ct group format a dict": (
        lambda c: c.update(quantization_config={**_CT, "config_groups": {"g": {"format": {}}}}),
        "quantization_config.config_groups.g.format is",
    ),
    "quantization_config a list": (
        lambda c: c.update(quantization_config=["mxfp4"]),
        "quantization_config is a list",
    ),
    "no model_type": (lambda c: c.pop("model_type"), "model_type is None"),
    "model_type bogus": (lambda c: c.update(model_type="bogus"), "model_type 'bogus' is not"),
    "model_type an int": (lambda c: c.update(model_type=3), "model_type is 3"),
    "model_type not a causal LM": (
        lambda c: c.update(model_type="clip"),
        "transformers builds no causal LM",
    ),
    "dtype bogus": (
        lambda c: c.update(torch_dtype="bogus", dtype="bogus"),
        "torch_dtype is 'bogus'",
    ),
    "dtype an int": (lambda c: c.update(dtype=7), "dtype is 7"),
    "dtype int8": (lambda c: c.update(dtype="int8"), "dtype is 'int8'"),
    "hidden_size a string": (
        lambda c: c.update(hidden_size="abc"),
        "transformers builds no causal LM",
    ),
    "the config a list": (None, "expected a JSON object, got list"),
}


@pytest.mark.parametrize("case", CONFIG_CASES)
def test_malformed_config_fields_are_named(folders, tmp_path, case):
    """Round 4 #03: builtin exceptions from read_config / transformers before;
    now an MXValueError naming config.json and the key."""
    change, match = CONFIG_CASES[case]
    d = _copy(folders, "one", tmp_path)
    cfg = json.loads((d / "config.json").read_text())
    if change is None:
        cfg = [cfg]
    else:
        change(cfg)
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(MXValueError, match="config.json: ") as e:
        from_pretrained(d)
    assert match in str(e.value)


def test_the_dtype_argument(folders):
    """Round 4 #03: dtype=torch.int32 was a RuntimeError from torch."""
    for dtype in (torch.int32, torch.uint8, torch.complex64, torch.float8_e4m3fn, torch.float64):
        with pytest.raises(MXValueError, match=f"dtype: expected one of .* got {dtype}"):
            from_pretrained(folders["one"], dtype=dtype)
    with pytest.raises(MXArgTypeError, match="dtype: expected a torch.dtype"):
        from_pretrained(folders["one"], dtype="bfloat16")
    # float64: the MX layers take f32 / bf16 / f16 inputs only, so a model in
    # float64 could not run; a dtype they take loads and runs
    m = from_pretrained(folders["one"], dtype=torch.float16)
    assert m.lm_head.weight.dtype == torch.float16 and _logits(m).dtype == torch.float16


# -- 11, 12: saves ----------------------------------------------------------------------------


def test_a_save_replaces_a_sharded_checkpoint(folders, tmp_path):
    """Round 4 #11: saving B (one file) into a folder holding sharded A left
    A's index and shards, and A loaded silently with B's config."""
    d = _copy(folders, "two", tmp_path)
    (d / "tokenizer.json").write_text("{}")  # not the checkpoint's: stays
    b = from_pretrained(folders["b"])
    save_pretrained(b, d)
    assert sorted(os.listdir(d)) == ["config.json", "model.safetensors", "tokenizer.json"]
    assert torch.equal(_logits(from_pretrained(d)), _logits(b))
    # The other way: sharded A over B's one file; then A again, over itself.
    a = from_pretrained(folders["two"])
    save_pretrained(a, d)
    assert sorted(os.listdir(d)) == sorted([S1, S2, INDEX, "config.json", "tokenizer.json"])
    again = from_pretrained(d)
    assert torch.equal(_logits(again), _logits(a))
    save_pretrained(again, d)  # into the folder it was loaded from (its tensors map those files)
    for name in (S1, S2):
        assert (d / name).read_bytes() == (folders["two"] / name).read_bytes()
    assert torch.equal(_logits(again), _logits(a)) and torch.equal(
        _logits(from_pretrained(d)), _logits(a)
    )


def test_a_save_removes_the_files_the_old_index_names(folders, tmp_path):
    """A previous save of other names (its index names them) goes too; a
    safetensors file of a name no index gives is left alone."""
    d = _copy(folders, "two", tmp_path)
    for name in (S1, S2):
        (d / name).rename(d / name.replace("model-", "weights-"))
    index = _index(d)
    index["weight_map"] = {
        k: v.replace("model-", "weights-") for k, v in index["weight_map"].items()
    }
    _set_index(d, index)
    assert torch.equal(_logits(from_pretrained(d)), _logits(from_pretrained(folders["two"])))
    save_pretrained(from_pretrained(folders["b"]), d)
    assert sorted(os.listdir(d)) == ["config.json", "model.safetensors"]


def _failing(real, at: int, error):
    calls = []

    def save_file(tensors, filename, metadata=None):
        calls.append(filename)
        if len(calls) == at:
            real(tensors, filename, metadata=metadata)  # the bytes written, then the failure
            raise error
        return real(tensors, filename, metadata=metadata)

    return save_file


@pytest.mark.parametrize(
    "where", ["first shard", "second shard", "index", "config.json", "interrupt"]
)
def test_a_failed_save_leaves_the_previous_checkpoint(folders, tmp_path, monkeypatch, where):
    """Round 4 #12: a save failing part-way (a full disk here) left a mix of
    old and new shards that loaded.  Now the folder is as it was, the hidden
    work folder is gone, and the error is the OSError (or the interrupt)."""
    import safetensors.torch

    d = _copy(folders, "two", tmp_path)
    before = _snapshot(d)
    b = from_pretrained(folders["b"])
    b.mx_source = from_pretrained(folders["two"]).mx_source  # B saved as 2 shards of A's names
    full = OSError(errno.ENOSPC, "No space left on device")
    if where in ("first shard", "second shard"):
        fail = _failing(safetensors.torch.save_file, 1 if where == "first shard" else 2, full)
        monkeypatch.setattr(safetensors.torch, "save_file", fail)
    else:
        real = cf.write_text

        def write_text(path, text):
            if path.name == {"index": INDEX}.get(where, "config.json"):
                real(path, text)
                raise KeyboardInterrupt if where == "interrupt" else full
            return real(path, text)

        monkeypatch.setattr(cf, "write_text", write_text)
    with pytest.raises(KeyboardInterrupt if where == "interrupt" else OSError) as e:
        save_pretrained(b, d)
    if where != "interrupt":
        assert e.value.errno == errno.ENOSPC
    assert _snapshot(d) == before and sorted(os.listdir(d)) == sorted(before)
    assert torch.equal(_logits(from_pretrained(d)), _logits(from_pretrained(folders["two"])))


def test_a_file_size_limit_leaves_the_previous_checkpoint(folders, tmp_path):
    """Round 4 #12 as reported: RLIMIT_FSIZE (64 KiB; B's 2nd shard is larger)
    in a child process.  The save raises OSError(EFBIG) and the folder loads
    as the old model."""
    d = _copy(folders, "two", tmp_path)
    (tmp_path / "b").mkdir()
    write_gpt_oss_checkpoint(tiny_gpt_oss(5), tmp_path / "b", shards=2)
    sizes = [(tmp_path / "b" / n).stat().st_size for n in (S1, S2)]
    limit = (min(sizes) + max(sizes)) // 2
    assert min(sizes) < limit < max(sizes)
    child = textwrap.dedent(f"""
        import resource, sys, warnings
        warnings.simplefilter("ignore")
        from mlir_mx.torch import from_pretrained, save_pretrained
        m = from_pretrained({str(tmp_path / "b")!r})
        resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
        try:
            save_pretrained(m, {str(d)!r})
        except OSError as e:
            print("OSError", e.errno, e.filename)
    """)
    before = _snapshot(d)
    out = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[:2] == ["OSError", str(errno.EFBIG)], out.stdout
    assert _snapshot(d) == before and sorted(os.listdir(d)) == sorted(before)
    assert torch.equal(_logits(from_pretrained(d)), _logits(from_pretrained(folders["two"])))


def test_a_killed_saves_folder_goes_with_the_next_save(folders, tmp_path):
    """A save killed outright (kill -9) leaves its hidden folder: the loader
    does not read it, the next save removes it; one whose writer still holds
    its lock (a save in progress) stays."""
    import fcntl

    d = _copy(folders, "one", tmp_path)
    stale, live = d / ".mlir-mx-save-abcd1234", d / ".mlir-mx-save-live5678"
    for w in (stale, live):
        w.mkdir()
        shutil.copy(folders["b"] / "model.safetensors", w / "model.safetensors")
    assert torch.equal(_logits(from_pretrained(d)), _logits(from_pretrained(folders["one"])))
    fd = os.open(live, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        save_pretrained(from_pretrained(folders["b"]), d)
    finally:
        os.close(fd)
    assert sorted(os.listdir(d)) == [live.name, "config.json", "model.safetensors"]


def test_another_saves_cleanup_never_takes_a_save_in_progress(folders, tmp_path, monkeypatch):
    """Two saves into one folder: the second's stale-folder cleanup running
    in the first's window between making its hidden folder and locking it
    (forced here) leaves it alone, and the first save completes (found in
    review: the folder was removed and the save failed)."""
    from mlir_mx.torch import checkpoint_files

    d = _copy(folders, "one", tmp_path)
    real = checkpoint_files.tempfile.mkdtemp

    def mkdtemp_then_cleanup(*args, **kwargs):
        made = real(*args, **kwargs)
        checkpoint_files._remove_stale_work(d)  # the other save, at the worst time
        return made

    monkeypatch.setattr(checkpoint_files.tempfile, "mkdtemp", mkdtemp_then_cleanup)
    model = from_pretrained(folders["b"])
    save_pretrained(model, d)
    assert sorted(os.listdir(d)) == ["config.json", "model.safetensors"]
    assert torch.equal(_logits(from_pretrained(d)), _logits(model))


def test_a_directory_where_a_file_goes_is_refused_before_writing(folders, tmp_path):
    d = _copy(folders, "two", tmp_path)
    (d / "config.json").unlink()
    (d / "config.json").mkdir()
    before = sorted(os.listdir(d))
    with pytest.raises(
        MXValueError, match="config.json: a directory where the checkpoint's file goes"
    ):
        save_pretrained(from_pretrained(folders["b"]), d)
    assert sorted(os.listdir(d)) == before


# -- the campaign ---------------------------------------------------------------------------


def test_quick_checkpoint_folder_campaign():
    """mlir_mx_testing.checkpoint_fuzz's folder cases (stale saves, duplicate
    names, malformed index and config fields, dense beside packed, a save
    under a file-size limit in a child process): each loads the model its
    files hold or is refused by name."""
    from mlir_mx_testing.campaign import run_campaign
    from mlir_mx_testing.checkpoint_fuzz import FOLDER_KINDS

    report = run_campaign(
        "checkpoint", seed=1, count=14, timeout=300, options={"kinds": FOLDER_KINDS}
    )
    assert report.clean, report.summary()
    assert set(report.configs) == set(FOLDER_KINDS), report.summary()
    assert report.kinds["rejected"] >= 5 and report.kinds["ok"] >= 3, report.summary()


@pytest.mark.slow
def test_long_checkpoint_campaign():
    """Every kind, byte mutations and folder cases (docs/testing.md)."""
    from mlir_mx_testing.campaign import run_campaign

    report = run_campaign("checkpoint", seed=2026, count=300, timeout=300)
    assert report.clean, report.summary()
    assert report.cases == 300

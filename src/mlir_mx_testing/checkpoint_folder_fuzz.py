"""The checkpoint suite's folder cases (:mod:`mlir_mx_testing.checkpoint_fuzz`):
folders whose files disagree, malformed fields, and saves over an older
checkpoint, some under a file-size limit (issue 52, round 4).

Each case builds a folder from the suite's tiny gpt-oss checkpoint (model A;
model B: every tensor changed, the bf16 ones negated, the FP4 codes XORed)
with ``rng``, then loads it with ``from_pretrained``.  :data:`FOLDER_KINDS`:

* ``stale-save``: A in 1-3 files, then B (loaded from 1-3 files) saved over
  it with ``save_pretrained``: the folder must load as B exactly, the
  unrelated ``tokenizer.json`` kept, no hidden work folder left;
* ``duplicate``: a copy of some tensors in another unindexed file, a tensor
  in two shards, a shard the index does not name, shards without their
  index (refused, naming the files or tensor), or a file of another name
  beside an index (not read: loads as A);
* ``index-field``: a malformed ``model.safetensors.index.json`` (empty or
  missing ``weight_map``, a value that is no file name, an absent file or
  tensor, a tensor it does not name, a directory, a dangling link, a cut);
* ``config-field``: a malformed ``config.json`` field (``model_type``,
  ``dtype``, ``quantization_config`` and its groups, a size of another
  type, the file a list, a directory or missing);
* ``dense-beside-packed``: a dense ``experts.{gate_up,down}_proj`` beside
  its blocks and scales;
* ``partial-save``: B saved over A in a child process under a random
  ``RLIMIT_FSIZE``: the save succeeds and the folder loads as B, or it
  raises ``OSError(EFBIG)`` and the folder is A's, byte for byte.

The rule: a folder that must load gives exactly the model its files hold
(every tensor, as ``checkpoint_tensors`` gives it, equal); one that must be
refused raises an ``MXValueError`` naming what the case names (a file, the
index, ``config.json``, a tensor); anything else is a finding.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import traceback
from functools import cache
from pathlib import Path

from mlir_mx_testing.campaign import Outcome

__all__ = ["FOLDER_KINDS", "folder_case"]

FOLDER_KINDS = (
    "stale-save",
    "duplicate",
    "index-field",
    "config-field",
    "dense-beside-packed",
    "partial-save",
)
INDEX = "model.safetensors.index.json"
_CHILD = """
import resource, sys, warnings
warnings.simplefilter("ignore")
from mlir_mx.torch import from_pretrained, save_pretrained
model = from_pretrained(sys.argv[1])
resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[3]), resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
try:
    save_pretrained(model, sys.argv[2])
    print("saved")
except OSError as e:
    print("OSError", e.errno, e.filename)
except Exception as e:
    print("other", type(e).__name__, e)
"""


@cache
def _a(good: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(good / "model.safetensors"))


def _b(a: dict) -> dict:
    """Model B: every tensor of A changed (scales kept: a scale code changed
    could be E8M0's NaN)."""
    import torch

    out = {}
    for k, v in a.items():
        if k.endswith("_blocks"):
            out[k] = torch.bitwise_xor(v, 0x11)
        else:
            out[k] = v.clone() if k.endswith("_scales") else -v
    return out


def _write(rng, good: Path, folder: Path, tensors: dict, shards: int) -> dict:
    """``tensors`` in ``shards`` files (1: ``model.safetensors``, no index),
    spread at random, each shard holding at least two; A's config."""
    from safetensors.torch import save_file

    names = sorted(tensors)
    rng.shuffle(names)
    if shards == 1:
        where = dict.fromkeys(names, "model.safetensors")
    else:
        where = {
            k: f"model-{i % shards + 1:05d}-of-{shards:05d}.safetensors"
            for i, k in enumerate(names)
        }
    folder.mkdir(parents=True, exist_ok=True)
    for f in sorted(set(where.values())):
        part = {k: tensors[k].contiguous() for k in names if where[k] == f}
        save_file(part, str(folder / f), metadata={"format": "pt"})
    if shards > 1:
        (folder / INDEX).write_text(
            json.dumps({"metadata": {}, "weight_map": dict(sorted(where.items()))})
        )
    shutil.copy(good / "config.json", folder / "config.json")
    return where


def _leftovers(folder: Path) -> str:
    """What a save must not leave: a hidden work folder, a lost unrelated file."""
    names = os.listdir(folder)
    hidden = [n for n in names if n.startswith(".mlir-mx-save-")]
    if hidden:
        return f"the save left {hidden}"
    return "" if "tokenizer.json" in names else "the save removed tokenizer.json"


def _stale_save(rng, good: Path, folder: Path):
    from mlir_mx.torch import from_pretrained, save_pretrained

    a, n_old, n_new = _a(good), rng.choice((1, 2, 3)), rng.choice((1, 2, 3))
    b = _b(a)
    _write(rng, good, folder, a, n_old)
    (folder / "tokenizer.json").write_text("{}")
    _write(rng, good, folder.parent / "b", b, n_new)
    save_pretrained(from_pretrained(folder.parent / "b"), folder)
    what = f"A in {n_old} file(s), B saved over it from {n_new}"
    left = _leftovers(folder)
    return what, ("wrong", left) if left else ("load", b)


def _duplicate(rng, good: Path, folder: Path):
    from safetensors.torch import load_file, save_file

    a = _a(good)
    how = rng.choice(("unindexed-copy", "shard-copy", "stray-shard", "no-index", "other-name"))
    n = 1 if how == "unindexed-copy" else rng.choice((2, 3))
    where = _write(rng, good, folder, a, n)
    some = rng.sample(sorted(a), rng.randint(1, len(a)))
    copy = {k: v.contiguous() for k, v in rng.choice((a, _b(a))).items() if k in some}
    if how == "unindexed-copy":
        name = (
            rng.choice(("model-old", "a-backup", "zz", "model.bak", "model-00001")) + ".safetensors"
        )
        save_file(copy, str(folder / name))
        return f"{how} {name} ({len(some)} tensors)", ("refuse", [str(folder / name), "in both"])
    if how == "shard-copy":
        key = some[0]
        other = rng.choice(sorted(set(where.values()) - {where[key]}))
        part = load_file(str(folder / other))
        part[key] = a[key]
        save_file(part, str(folder / other))
        return f"{how} {key} also in {other}", ("refuse", [key, "in both"])
    if how == "stray-shard":
        name = rng.choice((f"model-{n + 1:05d}-of-{n:05d}", f"model-00001-of-{n + 1:05d}", "model"))
        save_file(copy, str(folder / f"{name}.safetensors"))
        return f"{how} {name}", ("refuse", [f"{name}.safetensors", "does not name"])
    if how == "no-index":
        (folder / INDEX).unlink()
        return how, ("refuse", ["without its"])
    save_file(copy, str(folder / "backup.safetensors"))
    return f"{how} backup.safetensors beside the index", ("load", a)


def _index_field(rng, good: Path, folder: Path):
    n = rng.choice((2, 3))
    _write(rng, good, folder, _a(good), n)
    path = folder / INDEX
    index = json.loads(path.read_text())
    wmap = index["weight_map"]
    key = rng.choice(sorted(wmap))
    bad = rng.choice(
        (
            "empty",
            "missing",
            "list",
            "not-object",
            "value",
            "path",
            "absent-file",
            "absent-tensor",
            "unnamed",
            "dir",
            "link",
            "cut",
        )
    )
    needles = [INDEX]
    if bad == "empty":
        wmap.clear()
    elif bad == "missing":
        del index["weight_map"]
    elif bad == "list":
        index["weight_map"] = sorted(wmap)
    elif bad == "not-object":
        index = rng.choice(([1], "x", 3, None, True))
    elif bad == "value":
        wmap[key] = rng.choice((3, None, [wmap[key]], {"f": 1}, True, "", 1.5))
    elif bad == "path":
        wmap[key] = rng.choice(("../", "sub/", "./", "/tmp/", "..\\")) + wmap[key]
    elif bad == "absent-file":
        wmap[key] = needles[0] = f"model-{n + 2:05d}-of-{n + 2:05d}.safetensors"
    elif bad == "absent-tensor":
        needles = ["model.absent.weight"]
        wmap[needles[0]] = wmap[key]
    elif bad == "unnamed":
        del wmap[key]
        needles = [key, "does not name it"]
    text = json.dumps(index)
    path.unlink()
    if bad == "dir":
        path.mkdir()
    elif bad == "link":
        path.symlink_to(folder / "nowhere.json")
    else:
        path.write_text(text[: rng.randrange(1, len(text))] if bad == "cut" else text)
    return f"index {bad} ({key})", ("refuse", needles)


def _config_value(rng, cfg: dict) -> str:
    """Change one field of ``cfg`` to a malformed value; what was changed."""
    ct = {"quant_method": "compressed-tensors", "format": "mxfp4-pack-quantized"}
    field = rng.choice(
        (
            "model_type",
            "torch_dtype",
            "dtype",
            "quantization_config",
            "quant_method",
            "config_groups",
            "format",
            "group",
            "size",
        )
    )
    bad = rng.choice((None, 3, [1], {"a": 1}, "bogus", "", True))
    if field == "model_type":
        bad = rng.choice((None, 3, [1], "bogus", "", "clip", "missing"))
        if bad == "missing":
            del cfg["model_type"]
        else:
            cfg["model_type"] = bad
    elif field in ("torch_dtype", "dtype"):
        cfg[field] = bad = rng.choice((3, [1], {"a": 1}, "bogus", "", "int8", "float8_e4m3fn"))
    elif field == "quantization_config":
        cfg[field] = bad = rng.choice((3, [1], "mxfp4", True))
    elif field == "quant_method":
        cfg["quantization_config"]["quant_method"] = bad = rng.choice(
            (None, 3, [1], {"a": 1}, "gptq")
        )
    elif field == "config_groups":
        bad = rng.choice((3, [1], "g", True))
        cfg["quantization_config"] = {**ct, "config_groups": bad}
    elif field == "format":
        bad = rng.choice((3, [1], {"a": 1}, True))
        cfg["quantization_config"] = {**ct, "format": bad}
    elif field == "group":
        bad = rng.choice((3, [1], "g", {"format": [1]}, {"format": 3}))
        cfg["quantization_config"] = {**ct, "config_groups": {"group_0": bad}}
    else:
        field = rng.choice(
            ("hidden_size", "num_hidden_layers", "vocab_size", "num_attention_heads")
        )
        cfg[field] = bad = rng.choice(("abc", [1], {"a": 1}))
    return f"{field} = {bad!r}"


def _config_field(rng, good: Path, folder: Path):
    _write(rng, good, folder, _a(good), rng.choice((1, 2)))
    path = folder / "config.json"
    cfg = json.loads(path.read_text())
    whole = rng.random() < 0.15
    if whole:
        what = rng.choice(("a list", "a number", "null", "a directory", "missing", "a cut"))
        text = json.dumps(cfg)
        path.unlink()
        body = {"a list": "[1]", "a number": "3", "null": "null", "a cut": text[: len(text) // 2]}
        if what == "a directory":
            path.mkdir()
        elif what != "missing":
            path.write_text(body[what])
    else:
        what = _config_value(rng, cfg)
        path.write_text(json.dumps(cfg))
    return f"config.json {what}", ("refuse", ["config.json"])


def _dense_beside_packed(rng, good: Path, folder: Path):
    import torch
    from safetensors.torch import load_file, save_file

    where = _write(rng, good, folder, _a(good), rng.choice((1, 2, 3)))
    key = f"model.layers.{rng.randrange(2)}.mlp.experts.{rng.choice(('gate_up_proj', 'down_proj'))}"
    shape = rng.choice(((4, 64, 128), (4, 64, 64), (3,), (4, 128, 64)))
    dtype = rng.choice((torch.bfloat16, torch.float32, torch.uint8))
    file = rng.choice(sorted(set(where.values())))
    part = load_file(str(folder / file))
    part[key] = torch.zeros(shape, dtype=dtype)
    save_file(part, str(folder / file), metadata={"format": "pt"})
    if (folder / INDEX).exists():
        index = json.loads((folder / INDEX).read_text())
        index["weight_map"][key] = file
        (folder / INDEX).write_text(json.dumps(index))
    return f"{key} {tuple(shape)} {dtype} in {file}", ("refuse", [key, "dense"])


def _partial_save(rng, good: Path, folder: Path):
    a, n_old, n_new = _a(good), rng.choice((1, 2, 3)), rng.choice((1, 2, 3))
    b = _b(a)
    _write(rng, good, folder, a, n_old)
    (folder / "tokenizer.json").write_text("{}")
    side = folder.parent / "b"
    _write(rng, good, side, b, n_new)
    sizes = sorted(p.stat().st_size for p in side.glob("*.safetensors"))
    # Fails on the first file written, part-way (between shards' sizes), or never.
    low, high = rng.choice(
        ((256, sizes[0]), (sizes[0], sizes[-1] + 1), (sizes[-1], sizes[-1] + 4096))
    )
    limit = rng.randrange(low, max(high, low + 1))
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    cmd = [sys.executable, "-c", _CHILD, str(side), str(folder), str(limit)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    what = f"A in {n_old} file(s), B from {n_new} saved over it under RLIMIT_FSIZE {limit}"
    said = (out.stdout.strip().splitlines() or [""])[-1]
    if out.returncode != 0 or not said.startswith(("saved", "OSError")):
        return what, ("wrong", f"the save: exit {out.returncode}, {said!r} {out.stderr[-600:]}")
    left = _leftovers(folder)
    if left:
        return what, ("wrong", left)
    if said == "saved":
        return what + ": saved", ("load", b)
    if said.split()[1] != "27":
        return what, ("wrong", f"the save raised {said}, not EFBIG")
    if {p.name: p.read_bytes() for p in folder.iterdir()} != before:
        return what, ("wrong", f"a failed save ({said}) changed the folder")
    return what + ": failed", ("load", a)


_BUILD = {
    "stale-save": _stale_save,
    "duplicate": _duplicate,
    "index-field": _index_field,
    "config-field": _config_field,
    "dense-beside-packed": _dense_beside_packed,
    "partial-save": _partial_save,
}


def folder_case(rng, index: int, kind: str, good: Path) -> Outcome:
    """Case ``index`` of kind ``kind`` (one of :data:`FOLDER_KINDS`) over the
    suite's checkpoint ``good`` (the module docstring)."""
    root = good.parent / f"case-{index}"
    shutil.rmtree(root, ignore_errors=True)
    try:
        try:
            what, expect = _BUILD[kind](rng, good, root / "ckpt")
        except Exception:  # noqa: BLE001 - building the case (a save) failed: a finding
            return Outcome(index, "traceback", kind, traceback.format_exc(), "building the case")
        if expect[0] == "wrong":
            return Outcome(index, "wrong", kind, expect[1], what)
        return _judge(index, kind, what, expect, root / "ckpt")
    finally:
        shutil.rmtree(root, ignore_errors=True)


def load_outcome(load, index: int, kind: str, what: str, refused):
    """``(model, None)`` from ``load()``, or ``(None, finding)``: an
    ``MXValueError`` judged by ``refused(error)`` (an :class:`Outcome`), any
    other exception classified as the campaign classifies it (an ``MXError``
    of another class is wrong, a builtin ``ValueError`` / ``TypeError`` is
    not-mx-error, anything else a traceback)."""
    from mlir_mx.errors import MXError, MXValueError

    try:
        return load(), None
    except MXValueError as e:
        return None, refused(e)
    except MXError as e:
        why = f"{type(e).__name__} (not MXValueError): {e}"
        return None, Outcome(index, "wrong", kind, why, what)
    except (ValueError, TypeError) as e:
        return None, Outcome(index, "not-mx-error", kind, f"{type(e).__name__}: {e}", what)
    except Exception:  # noqa: BLE001 - any other exception is a finding
        return None, Outcome(index, "traceback", kind, traceback.format_exc(), what)


def _judge(index: int, kind: str, what: str, expect: tuple, folder: Path) -> Outcome:
    import torch

    from mlir_mx.torch import from_pretrained
    from mlir_mx.torch.checkpoint import checkpoint_tensors

    def refused(e) -> Outcome:
        if expect[0] == "load":
            why = f"refused a folder that holds one model: {e}"
            return Outcome(index, "wrong", kind, why, what)
        missing = [n for n in expect[1] if n not in str(e)]
        if missing:
            return Outcome(index, "wrong", kind, f"the error does not name {missing}: {e}", what)
        return Outcome(index, "rejected", kind)

    model, finding = load_outcome(lambda: from_pretrained(folder), index, kind, what, refused)
    if finding is not None:
        return finding
    if expect[0] == "refuse":
        return Outcome(index, "silent", kind, f"loaded; expected an error naming {expect[1]}", what)
    got, want = checkpoint_tensors(model)[0], expect[1]
    diff = sorted(set(got) ^ set(want)) or [
        k for k in sorted(want) if not torch.equal(got[k], want[k])
    ]
    if diff:
        return Outcome(index, "wrong", kind, f"loaded another model: {diff[:3]} differ", what)
    return Outcome(index, "ok", kind, "", what)

"""The files of a checkpoint folder, for :mod:`mlir_mx.torch.checkpoint`: which
safetensors files hold the model and whether they agree, the config's fields,
and the save that never leaves a wrong model.

Reading.  With ``model.safetensors.index.json`` the index says which file
holds each tensor: it must be a regular file holding a non-empty
``weight_map`` of tensor names to file names in the folder; every file it
names must exist, every tensor it names must be in the file it names, and a
tensor of one of its files that it does not name, a tensor in two files, or a
file of the checkpoint's names (``model.safetensors``,
``model-NNNNN-of-NNNNN.safetensors``) that it does not name is a folder
whose files disagree.  Without an index every ``*.safetensors`` file of the
folder is read; shards (``model-*-of-*``) without their index, or a tensor
in two files, are refused.  Each refusal is an
:class:`~mlir_mx.errors.MXValueError` naming the files (and the tensor).

Writing (:func:`write_checkpoint`).  Every file (shards, index,
``config.json``) is written into a fresh hidden folder inside the target
folder (``.mlir-mx-save-XXXXXXXX``: the same file system), each flushed to
disk.  Only when all were written is the save committed: the previous
save's index removed first, then the previous checkpoint's safetensors files
that this save does not rewrite (those its index named, ``model.safetensors``
and ``model-NNNNN-of-NNNNN.safetensors``; no other file of the folder), the
new files renamed in (shards, ``config.json``, the index last) and the
hidden folder removed.  A failure while writing (a full disk, a file-size
limit, an exception, an interrupt) leaves the previous checkpoint as it was
and removes the hidden folder; a process killed outright leaves it, and the
next save into the folder removes it (its writer's lock is gone).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import tempfile
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no stale-folder cleanup
    fcntl = None

from mlir_mx.errors import MXValueError
from mlir_mx.files import atomic_path, release_file_pages, release_mapped_files, write_text

if TYPE_CHECKING:
    import torch

__all__ = [
    "INDEX", "CheckpointFiles", "check_config", "checkpoint_files", "not_a_folder",
    "safetensors_module", "tensor_owners", "write_checkpoint",
]  # fmt: skip

INDEX = "model.safetensors.index.json"
#: The names of a checkpoint's safetensors files (transformers' names).
_OURS = re.compile(r"model(-\d+-of-\d+)?\.safetensors")
_SHARD = re.compile(r"model-\d+-of-\d+\.safetensors")
_WORK = ".mlir-mx-save-"
#: The dtypes a config may name (``torch_dtype`` / ``dtype``).
_DTYPES = ("bfloat16", "float16", "float32", "float64")


def _what(path: Path) -> str:
    """What a path that is not a regular file is."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return "there is no such file"
    if stat.S_ISLNK(mode):
        return (
            "it is a symbolic link to nothing" if not path.exists() else "it is not a regular file"
        )
    kinds = (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a named pipe"),
        (stat.S_ISSOCK, "a socket"),
    )
    kind = next((k for test, k in kinds if test(mode)), "a device")
    return f"it is {kind}, not a file"


def not_a_folder(path) -> MXValueError:
    """The error for a ``path`` that is not a checkpoint folder; for a Hugging Face
    Hub id (``org/name``, no such file here) it says how to get the folder (we
    download nothing)."""
    text = str(path)
    msg = f"path: expected a checkpoint folder, got {text!r}"
    if re.fullmatch(r"[\w.-]+/[\w.-]+", text) and not os.path.exists(text):
        msg += (
            f"; it reads as a Hugging Face Hub id: mlir_mx.torch reads local folders only. "
            f"Get one with `hf download {text} --local-dir {text.split('/')[1]}` "
            f"(or huggingface_hub.snapshot_download({text!r})) and pass that folder"
        )
    return MXValueError(msg)


def _read_index(path: Path) -> dict[str, str]:
    """The index's ``weight_map``, every field checked."""
    if not path.is_file():
        raise MXValueError(f"{path}: not a safetensors index: {_what(path)}")
    try:
        index = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise MXValueError(f"{path}: not a safetensors index ({e})") from None
    wmap = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(wmap, dict):
        got = type(index).__name__ if not isinstance(index, dict) else repr(wmap)[:60]
        raise MXValueError(
            f"{path}: not a safetensors index (weight_map: expected an object, got {got})"
        )
    if not wmap:
        raise MXValueError(f"{path}: weight_map is empty (no tensor in any file)")
    for key, name in wmap.items():
        if not isinstance(name, str) or name in ("", ".", "..") or "/" in name or "\\" in name:
            raise MXValueError(
                f"{path}: weight_map[{key!r}] is {name!r}; expected the name of a file in the folder"
            )
    return wmap


def checkpoint_files(folder: Path) -> tuple[list[str], dict[str, str] | None]:
    """``(the safetensors files to read, the index's weight_map or None)``,
    each file checked to be a regular file (the module docstring)."""
    index = folder / INDEX
    if os.path.lexists(index):
        wmap = _read_index(index)
        names = sorted(set(wmap.values()))
        for name in names:
            if not (folder / name).is_file():
                raise MXValueError(f"{folder / name}: named in {INDEX}, but {_what(folder / name)}")
        stray = sorted(n for n in os.listdir(folder) if _OURS.fullmatch(n) and n not in names)
        if stray:
            raise MXValueError(
                f"{folder / stray[0]}: a checkpoint file that {index} does not name (from a "
                f"previous save?); the folder's files disagree: remove it or the index"
            )
        return names, wmap
    names = sorted(p.name for p in folder.glob("*.safetensors"))
    if not names:
        raise MXValueError(f"path: no *.safetensors file and no {INDEX} in {folder}")
    shards = [n for n in names if _SHARD.fullmatch(n)]
    if shards:
        raise MXValueError(f"{folder / shards[0]}: a shard without its {INDEX} in {folder}")
    for name in names:
        if not (folder / name).is_file():
            raise MXValueError(f"{folder / name}: not a safetensors file: {_what(folder / name)}")
    return names, None


def tensor_owners(folder: Path, keys: dict[str, list[str]], wmap: dict | None) -> dict[str, str]:
    """Tensor name -> the file holding it, from each file's ``keys``; a
    tensor in two files, or one the index does not put where it is, is an
    ``MXValueError`` naming it and the files."""
    where: dict[str, str] = {}
    for name, names in keys.items():
        for key in names:
            if key in where:
                which = f" ({INDEX} names {wmap[key]})" if wmap and key in wmap else ""
                raise MXValueError(
                    f"{key}: in both {folder / where[key]} and {folder / name}{which}; the folder's "
                    "files disagree (two checkpoints in one folder?)"
                )
            where[key] = name
            if wmap is not None and key not in wmap:
                raise MXValueError(
                    f"{key}: in {folder / name}, but {folder / INDEX} does not name it"
                )
    for key, name in (wmap or {}).items():
        if where.get(key) != name:
            raise MXValueError(f"{key}: {INDEX} puts it in {name}, which does not hold it")
    return where


def check_config(path: Path, config) -> None:
    """The fields of ``config.json`` that ``from_pretrained`` reads, by type:
    an ``MXValueError`` naming the file and the key."""
    if not isinstance(config, dict):
        raise MXValueError(f"{path}: expected a JSON object, got {type(config).__name__}")
    model_type = config.get("model_type")
    if not isinstance(model_type, str) or not model_type:
        raise MXValueError(
            f"{path}: model_type is {model_type!r}; expected a transformers model type"
        )
    for key in ("torch_dtype", "dtype"):
        v = config.get(key)
        if v is not None and (not isinstance(v, str) or v.removeprefix("torch.") not in _DTYPES):
            raise MXValueError(f"{path}: {key} is {v!r}; expected one of {', '.join(_DTYPES)}")
    q = config.get("quantization_config")
    if q is not None and not isinstance(q, dict):
        raise MXValueError(
            f"{path}: quantization_config is a {type(q).__name__}; expected an object"
        )
    groups = (q or {}).get("config_groups")
    if groups is not None and not isinstance(groups, dict):
        raise MXValueError(
            f"{path}: quantization_config.config_groups is a {type(groups).__name__}; expected an "
            "object of groups"
        )
    fields = [("quantization_config.format", (q or {}).get("format"))]
    for name, g in (groups or {}).items():
        if not isinstance(g, dict):
            raise MXValueError(f"{path}: quantization_config.config_groups.{name} is not an object")
        fields.append((f"quantization_config.config_groups.{name}.format", g.get("format")))
    for key, v in fields:
        if v is not None and not isinstance(v, str):
            raise MXValueError(f"{path}: {key} is {v!r}; expected a format name")


# -- writing --------------------------------------------------------------------------------


def write_checkpoint(
    folder: Path, parts: dict, metadata: dict, index: str | None, config: str
) -> None:
    """Save ``parts`` (file name -> tensor name -> tensor, with each file's
    ``metadata``), the index's text (None: not sharded) and ``config.json``'s
    into ``folder`` (the module docstring).  A write that fails raises its
    ``OSError`` (a full disk: ``ENOSPC``, a file-size limit: ``EFBIG``)
    and leaves the folder as it was."""
    from safetensors import SafetensorError
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    goes = [*parts, "config.json", INDEX]
    for name in goes:
        if os.path.isdir(folder / name) and not os.path.islink(folder / name):
            raise MXValueError(f"{folder / name}: a directory where the checkpoint's file goes")
    _remove_stale_work(folder)
    # Made under a name the stale-folder cleanup skips, locked, then renamed
    # to its working name: another save's cleanup never sees it unlocked.
    new = Path(tempfile.mkdtemp(dir=folder, prefix=_WORK, suffix="-new"))
    lock = os.open(new, os.O_RDONLY)
    work = new.with_name(new.name[: -len("-new")])
    try:
        if fcntl is not None:
            fcntl.flock(lock, fcntl.LOCK_EX)  # held while this save runs
        os.rename(new, work)
        for name, part in parts.items():
            try:
                with atomic_path(work / name) as tmp:  # flushed to disk
                    save_file(part, str(tmp), metadata=metadata.get(name))
            except SafetensorError as e:
                raise _os_error(e, folder / name) from e
        if index is not None:
            write_text(work / INDEX, index)
        write_text(work / "config.json", config)
        _commit(folder, work, list(parts), index is not None)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(new, ignore_errors=True)  # where the rename did not happen
        os.close(lock)


def _os_error(e: Exception, path: Path) -> Exception:
    """safetensors' error for a failed write, as the ``OSError`` it reports."""
    m = re.search(r"os error (\d+)", str(e))
    if m is None:
        return MXValueError(f"{path}: safetensors could not write it ({e})")
    n = int(m.group(1))
    return OSError(n, os.strerror(n), str(path))


def _previous(folder: Path) -> set[str]:
    """The safetensors files of the checkpoint in ``folder`` now."""
    names = {n for n in os.listdir(folder) if _OURS.fullmatch(n)}
    try:
        wmap = json.loads((folder / INDEX).read_text())["weight_map"]
        names |= {n for n in wmap.values() if isinstance(n, str) and n.endswith(".safetensors")}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        pass
    return {n for n in names if "/" not in n and "\\" not in n and n not in (".", "..")}


def _commit(folder: Path, work: Path, names: list[str], sharded: bool) -> None:
    old = _previous(folder)
    _unlink(folder / INDEX)
    for name in sorted(old - set(names)):
        if not os.path.isdir(folder / name) or os.path.islink(folder / name):
            _unlink(folder / name)
    for name in [*names, "config.json", *([INDEX] if sharded else [])]:
        try:  # a file replaced keeps its mode
            os.chmod(work / name, stat.S_IMODE(os.stat(folder / name).st_mode))
        except OSError:
            pass
        os.replace(work / name, folder / name)
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)  # the renames on disk
    except OSError:
        pass
    finally:
        os.close(fd)


def _unlink(path: Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _remove_stale_work(folder: Path) -> None:
    """Remove the hidden folders of saves whose process is gone (no lock held)."""
    if fcntl is None:
        return
    for name in os.listdir(folder):
        path = folder / name
        if not name.startswith(_WORK) or len(name) != len(_WORK) + 8 or os.path.islink(path):
            continue
        try:
            fd = os.open(
                path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0)
            )
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # OSError: a save runs
            shutil.rmtree(path, ignore_errors=True)
        except OSError:
            continue
        finally:
            os.close(fd)


def safetensors_module():
    try:
        import safetensors
        from safetensors import safe_open
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError(f"mlir_mx.torch checkpoints need safetensors: pip install safetensors ({e})") from e
    return safetensors, safe_open


class CheckpointFiles:
    """A checkpoint folder's tensors by name, over ``safe_open`` handles (memory-mapped)."""

    def __init__(self, folder: Path, stack: ExitStack):
        st, safe_open = safetensors_module()
        names, weight_map = checkpoint_files(folder)  # the files agree (checkpoint_files)
        self.handles, self.metadata, keys = {}, {}, {}
        self.folder, self.spans = folder, []
        for name in names:
            path = folder / name
            try:
                self.handles[name] = stack.enter_context(safe_open(str(path), framework="pt"))
            except (st.SafetensorError, OSError) as e:
                raise MXValueError(f"{path}: not a readable safetensors file ({e})") from None
            self.metadata[name] = self.handles[name].metadata()
            keys[name] = list(self.handles[name].keys())
        self.where = tensor_owners(folder, keys, weight_map)
        self.sharded = weight_map is not None

    def check(self, key: str, dtypes, shape: tuple) -> str:
        """Its dtype (one of ``dtypes``) and shape, from the header; the dtype."""
        if key not in self.where:
            raise MXValueError(f"{key}: missing from the checkpoint")
        s = self.handles[self.where[key]].get_slice(key)
        dtype, got = s.get_dtype(), tuple(s.get_shape())
        if dtype not in dtypes:
            raise MXValueError(f"{key}: expected dtype {' or '.join(dtypes)}, got {dtype}")
        if got != tuple(shape):
            raise MXValueError(f"{key}: expected shape {tuple(shape)}, got {got}")
        return dtype

    def tensor(self, key: str, index=None) -> torch.Tensor:
        h = self.handles[self.where[key]]
        return h.get_tensor(key) if index is None else h.get_slice(key)[index]

    def copied(self, key: str, index=None) -> torch.Tensor:
        """:meth:`tensor`, noted as bytes a layer copies (:meth:`release`)."""
        t = self.tensor(key, index)
        self.spans.append((t.data_ptr(), t.numel() * t.element_size()))
        return t

    def release(self, whole: bool = False) -> int:
        """Drop the pages of the bytes the layers copied from the files' maps
        (:func:`mlir_mx.files.release_file_pages`; ``whole``: every page of the
        maps, those of slices ``get_slice`` copied out too); the bytes released."""
        spans, self.spans = self.spans, []
        paths = [self.folder / name for name in self.handles]
        return release_mapped_files(paths) if whole else release_file_pages(spans, paths)

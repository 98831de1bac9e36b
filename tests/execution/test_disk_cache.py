"""The persistent compile cache never hands unverified bytes to upstream.

Reproducer ``f14_corrupt_compile_cache_abort``: one NUL byte in a
cached ``.mlirbc`` entry made every later process that needed the kernel abort
(an LLVM assertion in upstream's bytecode reader).  Entries now carry a header
with a SHA-256 checksum (``compiled.DiskCache``) that is checked before the
bytes are parsed; an entry that fails the check or does not load is logged,
deleted and rebuilt.  Here: a byte flipped in every region of an entry (each
header field, the bytecode at its start, middle and end, the repro's NUL in a
symbol name), truncations, appended bytes, entries of another key or of the
old headerless format, and checksummed entries whose body does not load.
``mlir_mx_testing.cache_fuzz`` runs random corruptions of the same kind.

Every test runs on both kinds of entry (``disk_cache``): machine code
(``.mxo``, where ``objects.machine_code_supported``) and the lowered module
(``.mlirbc``, the other hosts; forced here by patching the check).
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from mlir_mx.execution import Runner, clear_cache, compiled
from mlir_mx.execution.disk_cache import DiskCache, ObjectCache
from mlir_mx.execution.objects import machine_code_supported

ADD = """func.func @add(%a: tensor<4x4xf32>, %b: tensor<4x4xf32>) -> tensor<4x4xf32> {
  %r = arith.addf %a, %b : tensor<4x4xf32>
  return %r : tensor<4x4xf32>
}"""
LOGGER = "mlir_mx.execution.compiled"


def _run(cache_dir):
    """Compile ADD afresh (not from memory) with ``cache_dir``; check its result."""
    clear_cache()
    r = Runner(ADD, cache_dir=cache_dir)
    a = np.arange(16, dtype=np.float32).reshape(4, 4)
    np.testing.assert_array_equal(r.add(a.copy(), a.copy()), 2 * a)
    return r.compiled.from_disk


@pytest.fixture(params=["mxo", "mlirbc"])
def kind(request, monkeypatch):
    """The kind of entry: machine code, or (patched off) the lowered module."""
    if request.param == "mxo" and not machine_code_supported():
        pytest.skip("machine-code entries load on x86-64 Linux only")
    if request.param == "mlirbc":
        monkeypatch.setattr(compiled, "machine_code_supported", lambda: False)
    return request.param


@pytest.fixture
def entry(tmp_path, kind):
    """The path and pristine bytes of ADD's cache entry."""
    assert not _run(tmp_path)
    (path,) = tmp_path.iterdir()
    assert path.suffix == "." + kind
    assert _run(tmp_path)  # a hit
    return path, path.read_bytes()


def _checker(good: bytes) -> DiskCache:
    """A DiskCache (an ObjectCache) that checks entries of the key of ``good``."""
    cache = (
        ObjectCache.__new__(ObjectCache)
        if good[:8] == ObjectCache.MAGIC
        else DiskCache.__new__(DiskCache)
    )
    cache.key = good[8:40]
    return cache


def _rebuilt(path, good: bytes) -> bool:
    """The entry at ``path`` is a fresh, valid one (bytecode is not byte-stable)."""
    return _checker(good).verify(path.read_bytes())[0] is not None


def _flip(data: bytes, i: int, value: int | None = None) -> bytes:
    b = bytearray(data)
    b[i] = b[i] ^ 0xFF if value is None else value
    return bytes(b)


def _symbol_nul(data: bytes) -> bytes:
    """The reproducer's corruption: a NUL inside a symbol name of the bytecode."""
    i = data.index(b"_mlir_ciface_add")
    return _flip(data, i + 4, 0)


CORRUPTIONS = {
    "magic": lambda d: _flip(d, 3),
    "key": lambda d: _flip(d, 20),
    "length": lambda d: _flip(d, 41),
    "length-high-byte": lambda d: _flip(d, 47),
    "checksum": lambda d: _flip(d, 60),
    "body-first-byte": lambda d: _flip(d, 80),
    "body-middle": lambda d: _flip(d, 80 + (len(d) - 80) // 2),
    "body-last-byte": lambda d: _flip(d, len(d) - 1),
    "body-symbol-nul": _symbol_nul,
    "empty": lambda d: b"",
    "truncated-in-header": lambda d: d[:50],
    "header-only": lambda d: d[:80],
    "truncated-in-body": lambda d: d[: 80 + (len(d) - 80) // 3],
    "last-byte-missing": lambda d: d[:-1],
    "byte-appended": lambda d: d + b"\0",
    "old-headerless-format": lambda d: d[80:],
    "zeros": lambda d: bytes(len(d)),
}


@pytest.mark.parametrize("how", list(CORRUPTIONS))
def test_every_corruption_of_an_entry_is_dropped_and_rebuilt(entry, how, caplog):
    """Every corruption is caught before parsing: logged, deleted, rebuilt."""
    path, good = entry
    bad = CORRUPTIONS[how](good)
    assert bad != good
    path.write_bytes(bad)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert not _run(path.parent)  # recompiled, right result
    (rec,) = [r for r in caplog.records if r.name == LOGGER]
    assert "compile cache: dropped" in rec.getMessage() and str(path) in rec.getMessage()
    assert _rebuilt(path, good)
    assert _run(path.parent)


def _bodies(good: bytes) -> list[bytes]:
    """Bodies that pass the checksum and must not load: not bytecode, a module
    not lowered; for machine code: metadata that is not JSON or lacks a
    field, an object that is not ELF, of another machine, or truncated."""
    if good[:8] != ObjectCache.MAGIC:
        return [b"\x00garbage", ADD.encode()]
    body = good[80:]
    n = int.from_bytes(body[:4], "little")
    meta, obj = json.loads(body[4 : 4 + n]), body[4 + n :]

    def pack(m: dict, o: bytes) -> bytes:
        text = json.dumps(m).encode()
        return len(text).to_bytes(4, "little") + text + o

    other_machine = obj[:18] + (183).to_bytes(2, "little") + obj[20:]  # aarch64
    return [b"\x00garbage", body[:4] + b"?" + body[5:],
            pack({k: v for k, v in meta.items() if k != "writes"}, obj), pack(meta, b"\x7fELF"),
            pack(meta, other_machine), pack(meta, obj[: len(obj) // 2]), pack(meta, b"")]  # fmt: skip


def test_checksummed_entry_that_does_not_load_is_dropped(entry, caplog):
    """Verification after parsing: a body with a valid checksum that does not
    load (``_bodies``) is dropped too."""
    path, good = entry
    cache = _checker(good)
    for body, why in ((b, "does not load") for b in _bodies(good)):
        path.write_bytes(cache.encode(body))
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger=LOGGER):
            assert not _run(path.parent)
        assert why in caplog.text
        assert _rebuilt(path, good)


def test_entry_of_another_key_is_not_used(entry, tmp_path):
    path, good = entry
    other = type(_checker(good))(tmp_path, ADD + "\n", "builtin.module()")
    assert other.path != path
    other.path.write_bytes(good)  # a valid entry, under another name
    assert other.verify(good)[0] is None
    assert "key" in other.verify(good)[1]


def test_store_is_atomic_and_leaves_no_temporary_files(entry):
    path, good = entry
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]
    assert oct(path.stat().st_mode & 0o777) != oct(0o600)  # not mkstemp's private mode


def test_unusable_cache_directory_is_not_fatal_and_is_logged(tmp_path, caplog, kind):
    """A cache path that is a file: nothing stored, right result, and the
    failed store is logged (not dropped silently)."""
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        assert not _run(blocker)
        assert not _run(blocker)
    stores = [r for r in caplog.records if r.name == LOGGER and "store" in r.getMessage()]
    assert len(stores) == 2
    assert all(
        r.getMessage().startswith("compile cache: cannot store") and str(blocker) in r.getMessage()
        for r in stores
    )
    # a warning the first time for this folder and error, then at DEBUG (issue 52)
    assert [r.levelno for r in stores] == [logging.WARNING, logging.DEBUG]
    assert blocker.read_text() == "x"


def test_unreadable_entry_is_logged_and_compiled_again(entry, caplog):
    """An entry that exists but cannot be read (here a directory in its place)
    is logged as unreadable, then as not stored; the result is still right."""
    path, _ = entry
    path.unlink()
    path.mkdir()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert not _run(path.parent)
    messages = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert len(messages) == 2, messages
    assert messages[0].startswith(f"compile cache: cannot read {path} (")
    assert messages[1].startswith(f"compile cache: cannot store {path} (")
    assert path.is_dir()


def test_a_nul_in_a_cached_symbol_name_is_rebuilt_in_every_later_process(tmp_path):
    """The reproducer itself, across processes: a NUL in a symbol name of a
    Linear kernel's entry; every later process recompiles (it aborted)."""
    child = textwrap.dedent(
        """
        import numpy as np, mlir_mx
        from mlir_mx import oracle
        rng = np.random.default_rng(0)
        w = oracle.quantize(rng.standard_normal((64, 64)).astype(np.float32), "f4E2M1FN", 32)
        print(mlir_mx.Linear(w, threads=1)(np.ones((1, 64), np.float32))[0, :3].tolist())
        """
    )
    env = dict(os.environ, MLIR_MX_CACHE_DIR=str(tmp_path))

    def run():
        return subprocess.run(
            [sys.executable, "-c", child], env=env, capture_output=True, text=True, timeout=600
        )

    first = run()
    assert first.returncode == 0, first.stderr
    (f,) = tmp_path.iterdir()
    data = f.read_bytes()
    i = data.find(b"mlirAsyncRuntimeAwaitValue")
    i = i if i >= 0 else data.index(b"_mlir_ciface_matmul")
    f.write_bytes(_flip(data, i + 4, 0))
    for attempt in range(2):
        p = run()
        assert p.returncode == 0, p.stderr[-2000:]
        assert p.stdout == first.stdout
        # the first run drops and rebuilds the entry, the second one uses it
        assert ("compile cache: dropped" in p.stderr) == (attempt == 0), p.stderr
        assert _rebuilt(f, data)

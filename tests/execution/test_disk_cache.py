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
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from mlir_mx.execution import Runner, clear_cache
from mlir_mx.execution.compiled import DiskCache

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
    return r._compiled.from_disk


@pytest.fixture
def entry(tmp_path):
    """The path and pristine bytes of ADD's cache entry."""
    assert not _run(tmp_path)
    (path,) = tmp_path.glob("*.mlirbc")
    assert _run(tmp_path)  # a hit
    return path, path.read_bytes()


def _checker(good: bytes) -> DiskCache:
    """A DiskCache that checks entries of the key of ``good``."""
    cache = DiskCache.__new__(DiskCache)
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
def test_f14_corrupt_compile_cache_abort_every_region(entry, how, caplog):
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


def test_checksummed_entry_that_does_not_load_is_dropped(entry, caplog):
    """Verification after parsing: a body with a valid checksum that is not
    bytecode, or a module that is not lowered, is dropped too."""
    path, good = entry
    cache = _checker(good)
    unlowered = ADD.encode()  # parses, but is not in the LLVM dialect
    for body, why in ((b"\x00garbage", "does not load"), (unlowered, "does not load")):
        path.write_bytes(cache.encode(body))
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger=LOGGER):
            assert not _run(path.parent)
        assert why in caplog.text
        assert _rebuilt(path, good)


def test_entry_of_another_key_is_not_used(entry, tmp_path):
    path, good = entry
    other = DiskCache(tmp_path, ADD + "\n", "builtin.module()")
    assert other.path != path
    other.path.write_bytes(good)  # a valid entry, under another name
    assert other.verify(good)[0] is None
    assert "key" in other.verify(good)[1]


def test_store_is_atomic_and_leaves_no_temporary_files(entry):
    path, good = entry
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]
    assert oct(path.stat().st_mode & 0o777) != oct(0o600)  # not mkstemp's private mode


def test_unusable_cache_directory_is_not_fatal_and_is_logged(tmp_path, caplog):
    """A cache path that is a file: nothing stored, right result, and the
    failed store is logged (not dropped silently)."""
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert not _run(blocker)
        assert not _run(blocker)
    stores = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert len(stores) == 2
    assert all(m.startswith("compile cache: cannot store") and str(blocker) in m for m in stores)
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


def test_f14_corrupt_compile_cache_abort(tmp_path):
    """The reproducer itself, across processes: a NUL in a symbol name of a
    Linear kernel's entry; every later process recompiles (it aborted)."""
    child = textwrap.dedent(
        """
        import numpy as np, mlir_mx
        from mlir_mx.numerics import quantize
        rng = np.random.default_rng(0)
        w = quantize(rng.standard_normal((64, 64)).astype(np.float32), "f4E2M1FN", 32)
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
    (f,) = tmp_path.glob("*.mlirbc")
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

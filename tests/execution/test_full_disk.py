"""A compile-cache store that cannot be written never ends the process
(reliability round 4, ``08``:
``../shared/repro/round4/08-cache-store-llvm-abort-on-full-tmp.py``): the object code leaves LLVM through a pipe
(``execution/object_dump.py``), the entry is written by Python with its errors
caught, and the kernel runs.  Each case runs in a fresh process, as the
failure it guards against killed the process."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from mlir_mx.execution.object_dump import ObjectDumpError, object_code

#: A Linear kernel compiled in a fresh cache folder, under an optional file-size limit.
CODE = textwrap.dedent(
    """
    import logging, resource, sys, numpy as np, mlir_mx
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
    if sys.argv[1] != "none":
        resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[1]), int(sys.argv[1])))
    w = mlir_mx.quantize(np.ones((64, 64), np.float32), "f4E2M1FN", 32)
    y = mlir_mx.Linear(w, threads=1)(np.ones((1, 64), np.float32))
    assert (y == 64).all(), y
    print("ran")
    """
)


def _run(limit: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", CODE, limit], env=env, capture_output=True, text=True, timeout=600
    )


def test_a_file_size_limit_costs_the_store_not_the_process(tmp_path):
    """RLIMIT_FSIZE of 8 KiB: every entry's write fails with EFBIG; LLVM's
    object-file write used to call report_fatal_error (exit 1).  The kernel
    runs, one warning names the failed store, nothing is left in TMPDIR."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = dict(os.environ, MLIR_MX_CACHE_DIR=str(tmp_path / "cache"), TMPDIR=str(tmp))
    run = _run("8192", env)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "ran" in run.stdout
    assert "LLVM ERROR" not in run.stderr
    warnings = [ln for ln in run.stderr.splitlines() if ln.startswith("WARNING compile cache")]
    assert warnings and all("cannot store" in w and "File too large" in w for w in warnings)
    # one warning per folder and error, not one per kernel (the kernels of
    # quantize and Linear share the folder)
    assert len(warnings) == len({w.split(" (")[0].rsplit("/", 1)[0] for w in warnings})
    assert list(tmp.iterdir()) == []


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or os.geteuid() != 0,
    reason="mounting a small tmpfs needs root on Linux",
)
def test_a_full_tmpdir_and_cache_folder_cost_the_store_not_the_process(tmp_path):
    """TMPDIR and the cache on a tmpfs with 8 KiB left (ENOSPC): the kernel
    runs and the temporary directories are removed."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)]).returncode:
        pytest.skip("this machine refuses to mount a tmpfs (a container without the capability)")
    try:
        (mnt / "fill").write_bytes(b"\0" * 56 * 1024)
        env = dict(os.environ, TMPDIR=str(mnt), MLIR_MX_CACHE_DIR=str(mnt / "cache"))
        run = _run("none", env)
        assert run.returncode == 0, run.stderr[-2000:]
        assert "ran" in run.stdout and "LLVM ERROR" not in run.stderr
        assert "No space left on device" in run.stderr
        left = sorted(p.name for p in mnt.iterdir())
        assert left in (["fill"], ["cache", "fill"]), left
    finally:
        subprocess.run(["umount", str(mnt)])


def test_object_code_reads_what_the_dump_writes():
    """The reader hands back exactly the bytes written to the FIFO, larger
    than a pipe's buffer (the writer blocks until the child drains it)."""
    payload = os.urandom(3 << 20)

    def dump(path):
        with open(path, "wb") as f:
            f.write(payload)

    assert object_code(None, dump=dump) == payload


def test_a_dump_that_writes_nothing_or_fails_is_an_oserror_and_leaves_no_folder(monkeypatch):
    """LLVM that never opens the path (its open failed) must not leave the
    reader waiting: an ObjectDumpError, and the temporary folder is gone.  A
    dump that raises propagates its own error, folder removed too."""
    tmp = Path(tempfile.mkdtemp())
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setattr(tempfile, "tempdir", None)
    try:
        with pytest.raises(ObjectDumpError, match="no object code"):
            object_code(None, dump=lambda path: None)

        def fails(path):
            raise RuntimeError("dump failed")

        with pytest.raises(RuntimeError, match="dump failed"):
            object_code(None, dump=fails)
        assert list(tmp.iterdir()) == []
        assert issubclass(ObjectDumpError, OSError)
    finally:
        tmp.rmdir()


def test_a_reader_that_never_starts_is_an_oserror_not_a_hang(monkeypatch):
    """The reader child dies before it opens the FIFO (here: it is not a
    Python at all): LLVM's open would wait for a reader for good, holding the
    GIL.  The dump never starts; an ObjectDumpError says why (found in
    review)."""
    monkeypatch.setattr(sys, "executable", "/bin/true")
    called = []
    with pytest.raises(ObjectDumpError, match="did not start"):
        object_code(None, dump=called.append)
    assert called == []
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    with pytest.raises(ObjectDumpError, match="no Python executable"):
        object_code(None, dump=called.append)

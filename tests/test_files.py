"""``mlir_mx.files``: the one atomic-write helper every writer of the library uses."""

from __future__ import annotations

import os
import stat

import pytest

from mlir_mx.files import (
    atomic_path,
    atomic_write,
    remove_stale_temporaries,
    write_bytes,
    write_text,
)


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "f.txt"
    write_text(target, "old")
    with pytest.raises(RuntimeError, match="boom"):
        with atomic_write(target) as f:
            f.write("half of the new")
            raise RuntimeError("boom")
    assert target.read_text() == "old"
    assert os.listdir(tmp_path) == ["f.txt"]


def test_a_new_file_gets_the_umask_mode_and_a_replaced_one_keeps_its_mode(tmp_path):
    target = tmp_path / "new.bin"
    write_bytes(target, b"1")
    umask = os.umask(0o022)
    os.umask(umask)
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~umask
    target.chmod(0o640)
    write_bytes(target, b"2")
    assert target.read_bytes() == b"2" and stat.S_IMODE(target.stat().st_mode) == 0o640


def test_a_symlink_is_followed_and_a_device_is_written_in_place(tmp_path):
    real = tmp_path / "real"
    write_text(real, "a")
    (tmp_path / "link").symlink_to(real)
    write_text(tmp_path / "link", "b")
    assert (tmp_path / "link").is_symlink() and real.read_text() == "b"
    with atomic_path(os.devnull) as p:
        assert str(p) == os.devnull
    write_text(os.devnull, "discarded")


def test_a_missing_folder_fails_before_anything_is_written(tmp_path):
    with pytest.raises(FileNotFoundError):
        write_text(tmp_path / "no" / "such" / "f", "x")
    with pytest.raises(ValueError, match="mode"):
        with atomic_write(tmp_path / "f", "a"):
            pass


def _stale(folder, target_name: str, middle: str = "k1ll3d_x") -> str:
    """A temporary file named as atomic_path names them, no writer holding it."""
    name = f".{target_name}.{middle}.tmp"
    (folder / name).write_bytes(b"half a file")
    return name


def test_a_stale_temporary_of_a_killed_writer_is_removed_by_the_next_write(tmp_path):
    """Issue 29: a writer killed mid-write left its hidden temporary file for ever."""
    stale = _stale(tmp_path, "f.bin")
    other = _stale(tmp_path, "g.bin")  # another target's: not this write's to remove
    user = tmp_path / ".f.bin.notes.tmp"  # not a name mkstemp makes: left alone
    user.write_text("mine")
    write_bytes(tmp_path / "f.bin", b"new")
    assert sorted(os.listdir(tmp_path)) == sorted(["f.bin", other, user.name])
    assert stale not in os.listdir(tmp_path)


def test_a_live_writers_temporary_is_left_alone(tmp_path):
    """Two writers of one path: the second removes nothing of the first's."""
    target = tmp_path / "t.txt"
    with atomic_path(target) as first:
        first.write_text("first")
        assert remove_stale_temporaries(target) == []
        write_text(target, "second")  # a second writer, while the first writes
        assert first.exists()
    assert target.read_text() == "first" and os.listdir(tmp_path) == ["t.txt"]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork and SIGKILL")
def test_a_writer_killed_with_sigkill_leaves_nothing_after_the_next_write(tmp_path):
    import signal
    import subprocess
    import sys
    import textwrap

    target = tmp_path / "w.gguf"
    code = textwrap.dedent(f"""
        import sys, time
        from mlir_mx.files import atomic_path
        with atomic_path({str(target)!r}) as tmp:
            tmp.write_bytes(b"partial")
            print("writing", flush=True)
            time.sleep(60)
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "writing"
        [left] = os.listdir(tmp_path)  # its temporary file, locked while it lives
        assert remove_stale_temporaries(target) == []
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert os.listdir(tmp_path) == [left]  # kill -9: nothing ran to remove it
    write_text(target, "complete")
    assert os.listdir(tmp_path) == ["w.gguf"] and target.read_text() == "complete"

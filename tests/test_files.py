"""``mlir_mx.files``: the one atomic-write helper every writer of the library uses,
and the release of a memory-mapped file's pages after a copy."""

from __future__ import annotations

import mmap
import os
import stat
import sys

import numpy as np
import pytest

from mlir_mx.files import (
    atomic_path,
    atomic_write,
    release_file_pages,
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


def _mapping_rss_kib(path) -> int:
    """Resident KiB of this process's mappings of ``path`` (``/proc/self/smaps``)."""
    total, inside = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()
            if "-" in head[0] and len(head) >= 5 and ":" not in head[0]:
                inside = len(head) == 6 and head[5] == str(path)
            elif inside and head[0] == "Rss:":
                total += int(head[1])
    return total


@pytest.mark.skipif(sys.platform != "linux", reason="madvise and /proc/self/maps: Linux")
def test_released_pages_of_a_file_map_read_again_the_same(tmp_path):
    page = os.sysconf("SC_PAGE_SIZE")
    path = tmp_path / "weights.bin"
    data = np.random.default_rng(0).integers(0, 256, 64 * page, dtype=np.uint8)
    path.write_bytes(data.tobytes())
    with open(path, "r+b") as f:
        m = mmap.mmap(f.fileno(), 0, flags=mmap.MAP_PRIVATE)
    view = np.frombuffer(m, np.uint8)
    base = view.ctypes.data
    assert int(view.sum()) == int(data.sum())  # every page read once: resident
    before = _mapping_rss_kib(path.resolve())
    assert before >= 64 * page // 1024
    # A span from the middle of page 1 to the middle of page 41: pages 2..40 only.
    span = (base + page + page // 2, 40 * page)
    assert release_file_pages([span], [path]) == 39 * page
    # Spans that touch are joined: three pages' worth from the middle of page
    # 50, none holding a whole page alone, release pages 51 and 52.
    rows = [(base + (52 + i) * page - page // 2, page) for i in (1, -1, 0)]
    assert release_file_pages(rows, [path]) == 2 * page
    assert _mapping_rss_kib(path.resolve()) <= before - 41 * page // 1024
    # Anonymous memory and other files' maps are left alone, whatever the span.
    anon = np.full(16 * page, 7, np.uint8)
    assert release_file_pages([(anon.ctypes.data, anon.nbytes)], [path]) == 0
    assert release_file_pages([span], [tmp_path / "other.bin"]) == 0
    assert (anon == 7).all()
    assert np.array_equal(view, data)  # read again from the file, unchanged
    del view
    m.close()

"""``mlir_mx.files``: the one atomic-write helper every writer of the library uses."""

from __future__ import annotations

import os
import stat

import pytest

from mlir_mx.files import atomic_path, atomic_write, write_bytes, write_text


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

"""Writing files so that a failure never leaves a partial one.

Every file mlir-mx writes (GGUF files, compile-cache entries, mx-bench
results, mx-roofline plots, ``mx-opt -o``) goes through :func:`atomic_path`
or :func:`atomic_write`: the data go to a temporary file in the target's
folder, which is flushed to disk and renamed over the target only once it is
complete.  An exception on the way (a refused value, a full disk, an
interrupt) removes the temporary file and leaves the target as it was: the
previous content, or no file.  A reader never sees a half-written file, and
two writers of the same path leave one of the two complete files.  A writer
killed outright (``kill -9``) cannot remove its temporary file; the next
write to the same path does (:func:`remove_stale_temporaries`: each writer
holds a lock on its temporary file, which dies with it).

Arguments: :func:`path_argument` turns a public function's path argument (a
``str`` or an ``os.PathLike``) into a ``Path``, or raises ``MXArgTypeError``
naming the argument, before any file is touched.

Reading: :func:`release_file_pages` drops from this process the pages of a
memory-mapped file that were read once and copied (a checkpoint's MX bytes,
which the layers re-lay out into arrays of their own).
"""

from __future__ import annotations

import os
import stat
import tempfile

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no stale-file cleanup
    fcntl = None
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from mlir_mx.errors import MXArgTypeError

__all__ = [
    "path_argument",
    "atomic_path",
    "atomic_write",
    "release_file_pages",
    "release_mapped_files",
    "remove_stale_temporaries",
    "write_bytes",
    "write_text",
]


def path_argument(path, name: str = "path") -> Path:
    """``path`` (a ``str`` or an ``os.PathLike`` giving one) as a ``Path``; else
    ``MXArgTypeError`` naming the argument ``name`` (bytes paths included:
    ``Path`` takes none)."""
    where = os.fspath(path) if isinstance(path, os.PathLike) else path
    if not isinstance(where, str):
        raise MXArgTypeError(
            f"{name}: expected a str or os.PathLike path, got {type(path).__name__}"
        )
    return Path(where)


def _umask() -> int:
    try:  # Linux: read it without changing it (os.umask is process-wide)
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    old = os.umask(0o022)
    os.umask(old)
    return old


def _special(path: Path) -> bool:
    """An existing path that is not a regular file (``/dev/null``, a pipe, a tty)."""
    try:
        return not stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """A temporary path beside ``path`` to write; renamed over ``path`` on success.

    For writers that open the file themselves (``gguf.GGUFWriter``,
    ``savefig``).  The temporary file is created empty (mode 0600); when the
    ``with`` block exits normally it is synced and renamed over ``path``,
    with the mode of the file it replaces (a new file: 0666 less the umask).
    When the block raises, the temporary file is removed and ``path`` is
    untouched.  A symbolic link is followed (the file it names is replaced);
    a path that exists and is not a regular file (a device or a pipe, e.g.
    ``/dev/null``) is handed over as is and written in place.  Errors of the
    target's folder (missing, not a directory, not writable) are the
    ``OSError`` of creating the temporary file, before anything is written.
    """
    target = Path(os.path.realpath(os.fspath(path)))
    if _special(target):
        yield target
        return
    try:
        mode = stat.S_IMODE(os.stat(target).st_mode)
    except OSError:
        mode = 0o666 & ~_umask()
    remove_stale_temporaries(target)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    if fcntl is not None:
        fcntl.flock(fd, fcntl.LOCK_EX)  # held until the end: this writer is alive
    else:
        os.close(fd)
    try:
        yield Path(tmp)
        sync = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(sync)  # the data are on disk before the name points to them
        finally:
            os.close(sync)
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    finally:
        if fcntl is not None:
            os.close(fd)  # releases the lock


#: The characters of ``tempfile.mkstemp``'s 8 random ones.
_RANDOM = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_")


def remove_stale_temporaries(path: str | os.PathLike) -> list[Path]:
    """Remove the temporary files :func:`atomic_path` left beside ``path`` when
    its writer was killed (``kill -9``, a power cut: no ``except`` ran).

    A writer holds an exclusive ``flock`` on its temporary file
    (``.<name>.<8 random characters>.tmp``) for as long as it writes; the
    kernel releases it when the process dies, however it dies.  So a
    temporary file of ``path`` whose lock can be taken has no writer left
    and is removed; one whose lock is held (another writer of the same path,
    in this process or another) is left alone.  Called by every write
    (:func:`atomic_path`); returns the paths removed.  Without ``fcntl``
    (Windows) nothing is removed."""
    target = Path(path)
    prefix = f".{target.name}."
    if fcntl is None:
        return []
    try:
        names = os.listdir(target.parent)
    except OSError:
        return []
    removed = []
    for name in names:
        middle = name[len(prefix) : -len(".tmp")]
        if not (name.startswith(prefix) and name.endswith(".tmp")):
            continue
        if len(middle) != 8 or not set(middle) <= _RANDOM:
            continue  # not one of ours (another target's, or a user's file)
        stale = target.parent / name
        try:
            fd = os.open(stale, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
        except OSError:
            continue
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                continue
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # OSError: a writer holds it
            os.unlink(stale)
            removed.append(stale)
        except OSError:
            continue
        finally:
            os.close(fd)
    return removed


@contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "w", **open_args) -> Iterator[IO]:
    """``open(path, mode)`` for writing, atomically (see :func:`atomic_path`).

    ``mode`` is ``"w"`` or ``"wb"`` (with ``encoding=`` etc. as for ``open``)."""
    if mode not in ("w", "wb"):
        raise ValueError(f"mode: expected 'w' or 'wb', got {mode!r}")
    with atomic_path(path) as tmp, open(tmp, mode, **open_args) as f:
        yield f


def write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically."""
    with atomic_write(path, "wb") as f:
        f.write(data)


def write_text(path: str | os.PathLike, text: str, encoding: str = "utf-8") -> None:
    """Write ``text`` to ``path`` atomically."""
    with atomic_write(path, "w", encoding=encoding) as f:
        f.write(text)


# -- reading ------------------------------------------------------------------------

_MADV_DONTNEED = 4  # Linux's value (asm-generic/mman-common.h)


def _file_mappings(paths) -> list[tuple[int, int]]:
    """``(start, end)`` of this process's mappings of ``paths`` (``/proc/self/maps``)."""
    names = {str(Path(p).resolve()) for p in paths}
    out = []
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split(None, 5)
            if len(parts) == 6 and parts[5].strip() in names:
                lo, hi = (int(x, 16) for x in parts[0].split("-"))
                out.append((lo, hi))
    return out


def release_mapped_files(paths) -> int:
    """Drop every resident page of this process's mappings of ``paths``
    (:func:`release_file_pages` over each whole mapping: only file mappings,
    whose pages a later read maps again); the bytes released.  For a loader
    that copies its slices out of a memory-mapped file (``safetensors``'
    ``get_slice``): the pages it read stay in the RSS until the map is closed,
    though no array points into them."""
    if not os.path.exists("/proc/self/maps"):
        return 0
    return release_file_pages([(a, b - a) for a, b in _file_mappings(paths)], paths)


def _merged(spans) -> list[tuple[int, int]]:
    """``spans`` sorted, those that touch or overlap joined (an expert's rows
    of one tensor, one after another, release the pages they share)."""
    out: list[list[int]] = []
    for address, nbytes in sorted(spans):
        if out and address <= out[-1][0] + out[-1][1]:
            out[-1][1] = max(out[-1][1], address + nbytes - out[-1][0])
        else:
            out.append([address, nbytes])
    return [(a, n) for a, n in out]


def release_file_pages(spans, paths) -> int:
    """Drop the resident pages of ``spans`` (``(address, bytes)``) from this
    process, where a span lies in a mapping of one of ``paths``; returns the
    bytes released.  Spans that touch are joined first; only whole pages
    inside a (joined) span are released, never a neighbour's, and only in
    file mappings: ``madvise(MADV_DONTNEED)`` there
    discards no data (the pages were only read; a later read maps them again
    from the page cache or the file), while on anonymous memory it would zero
    it, so anything else is left alone.  Linux only (elsewhere: 0).

    What it is for: a file read through a memory map (``safetensors``'
    ``safe_open``) stays mapped while any tensor of it is in use, and every
    page read once counts in the process's RSS until the map is closed, even
    after its bytes were copied into arrays of their own."""
    if not os.path.exists("/proc/self/maps"):
        return 0
    import ctypes

    maps = _file_mappings(paths)
    if not maps:
        return 0
    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    page = os.sysconf("SC_PAGE_SIZE")
    released = 0
    for address, nbytes in _merged(spans):
        lo = -(-address // page) * page
        hi = (address + nbytes) // page * page
        if hi > lo and any(a <= lo and hi <= b for a, b in maps):
            if libc.madvise(lo, hi - lo, _MADV_DONTNEED) == 0:
                released += hi - lo
    return released


def release_free_heap() -> bool:
    """Return the heap memory freed so far to the OS (glibc's ``malloc_trim(0)``),
    so that the RSS shows what is held, not what a conversion once used: glibc
    serves arrays below its (growing) mmap threshold from the heap and keeps
    their pages after they are freed.  False where there is no glibc."""
    import ctypes

    try:
        return bool(ctypes.CDLL("libc.so.6").malloc_trim(0))
    except (OSError, AttributeError):
        return False

"""An ``ExecutionEngine``'s object code as bytes, with no file of LLVM's on disk.

Upstream's only way out of the engine is ``dump_to_object_file(path)``: LLVM
opens ``path`` with its own stream and, when a write fails (a full disk,
``ENOSPC``; a file-size limit, ``EFBIG``), calls ``report_fatal_error``,
which **exits the process** (reliability round 4, ``08``).  So the path given
to LLVM here is a FIFO in a fresh temporary directory, drained by a child
process that holds what it reads in memory and hands it back on its standard
output once LLVM has closed the FIFO: LLVM writes to a pipe, never to a disk
or into a file-size limit, and the bytes reach Python, which writes the cache
entry itself with its errors caught (``DiskCache.write``).

The reader is a child process, not a thread, because the binding holds the
GIL while LLVM writes: a Python thread could not drain the pipe, and an
object larger than the pipe's buffer would block LLVM forever.

FIXME(upstream): an ``ExecutionEngine`` method that returns the object as
bytes (the object cache already holds it in memory) would make this module
one call; none exists in MLIR 22.1.8.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mlir_mx.errors import ObjectDumpError

__all__ = ["ObjectDumpError", "object_code"]

#: The child: read the FIFO to its end (LLVM closing it), then write it all.
_READER = (
    "import sys\n"
    "with open(sys.argv[1], 'rb') as f:\n"
    "    data = f.read()\n"
    "sys.stdout.buffer.write(data)\n"
)

#: Seconds the child may take after LLVM has returned (it only copies bytes).
_TIMEOUT_S = 60


def object_code(engine, *, dump=None) -> bytes:
    """The object file of ``engine`` (its ``dump_to_object_file``), as bytes.

    ``dump`` (default ``engine.dump_to_object_file``) is the call that writes
    a path; tests pass another to check the reader.  Raises
    :class:`ObjectDumpError` (an ``OSError``) when no object came back; the
    temporary directory is removed whatever happens."""
    dump = dump if dump is not None else engine.dump_to_object_file
    if not sys.executable or getattr(sys, "frozen", False):
        # an embedded interpreter or a frozen application: no Python to run the reader
        raise ObjectDumpError("no Python executable to read the object code")
    with tempfile.TemporaryDirectory(prefix="mlir-mx-object-") as tmp:
        fifo = Path(tmp) / "module.o"
        os.mkfifo(fifo, 0o600)
        child = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", _READER, str(fifo)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            held = _reader_ready(child, fifo)
        except ObjectDumpError:
            child.kill()
            child.communicate()
            raise
        try:
            dump(str(fifo))
        finally:
            os.close(held)  # the reader's end of file (LLVM's own end is closed)
            out, err = _collect(child)
    if child.returncode != 0 or not out:
        why = err.decode(errors="replace").strip().splitlines()[-1:] or ["no bytes written"]
        raise ObjectDumpError(f"no object code ({why[0][:200]})")
    return out


def _reader_ready(child: subprocess.Popen, fifo: Path) -> int:
    """A write end of the FIFO, once the reader has opened it: LLVM's own
    open then finds a reader and never blocks (it would block for good,
    holding the GIL, if the child had died first).  Held until LLVM is done,
    so the reader sees the end of the file only after LLVM's bytes."""
    deadline = time.monotonic() + _TIMEOUT_S
    while True:
        try:
            return os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:  # ENXIO: the reader has not opened it yet
            pass
        if child.poll() is not None or time.monotonic() > deadline:
            raise ObjectDumpError("the object reader did not start")
        time.sleep(0.002)


def _collect(child: subprocess.Popen) -> tuple[bytes, bytes]:
    """The reader's output, once it has read to the end of the FIFO."""
    try:
        return child.communicate(timeout=_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        child.kill()
        child.communicate()
        raise ObjectDumpError("the object reader did not finish") from None

"""The compile-cache fuzzer: corrupted entries of the persistent compile cache.

Each worker compiles two modules once into a scratch cache and keeps their
pristine entries: the kernel of a ``Linear`` with an MXFP4 weight (what
``MLIR_MX_CACHE_DIR`` holds in practice: parallel code, async-runtime
calls) and a small f32 function through a ``Runner``, each as both kinds of
entry (``execution.disk_cache``): machine code (``.mxo``: metadata and an
object file, where ``objects.machine_code_supported``) and the lowered
module (``.mlirbc``: bytecode; forced by patching that check off).  Case ``i`` of seed
``s`` corrupts one entry with mutations drawn from
``random.Random(f"cache:{s}:{i}")`` -- bytes flipped or set (NUL included)
anywhere or in one region (the header's magic, key, length or checksum; the
bytecode), truncation, appended or inserted bytes, the old headerless
format, an empty file, random content -- and compiles the module again
from that cache, as a fresh process would (the in-memory cache cleared).

The rule (``docs/library.md``): the corrupted entry is not used -- it is
logged, deleted and rebuilt -- and the call returns the right result; never
an exception, a signal (upstream's bytecode reader aborts on some malformed
input, so no unverified byte may reach it) or a hang.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import subprocess
import sys
import tempfile
import textwrap
import traceback
from functools import cache
from pathlib import Path

import numpy as np

from mlir_mx_testing.campaign import Outcome

__all__ = ["case", "store_case", "REGIONS", "STORE_FAILURES"]

ADD = """func.func @add(%a: tensor<8x8xf32>, %b: tensor<8x8xf32>) -> tensor<8x8xf32> {
  %r = arith.addf %a, %b : tensor<8x8xf32>
  return %r : tensor<8x8xf32>
}"""
#: Where a targeted corruption lands (byte ranges of an entry; see execution.disk_cache).
REGIONS = {
    "magic": (0, 8),
    "key": (8, 40),
    "length": (40, 48),
    "checksum": (48, 80),
    "body": (80, None),
}


class _Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record):
        self.messages.append(record.getMessage())


@cache
def _handler() -> _Records:
    h = _Records()
    logging.getLogger("mlir_mx.execution.compiled").addHandler(h)
    return h


def _weight():
    from mlir_mx import oracle

    x = np.random.default_rng(0).standard_normal((64, 96)).astype(np.float32)
    return oracle.quantize(x, "f4E2M1FN", 32)


def _run(module: str, folder: Path):
    """Compile ``module`` afresh with the cache in ``folder``; (result, from_disk)."""
    from mlir_mx.execution import Runner, clear_cache

    clear_cache()
    if module == "linear":
        import mlir_mx

        os.environ["MLIR_MX_CACHE_DIR"] = str(folder)
        lin = mlir_mx.Linear(_weight(), threads=1)
        y = lin(np.ones((1, 96), np.float32))
        return y, lin.runners[0].compiled.from_disk
    r = Runner(ADD, cache_dir=folder)
    a = np.arange(64, dtype=np.float32).reshape(8, 8)
    return r.add(a.copy(), a.copy()), r.compiled.from_disk


@contextlib.contextmanager
def _kind(kind: str):
    """Compile with entries of ``kind``: ``mxo`` (machine code, where this host
    loads it) or ``mlirbc`` (the machine-code check patched off meanwhile)."""
    from mlir_mx.execution import compiled

    real = compiled.machine_code_supported
    if kind == "mlirbc":
        compiled.machine_code_supported = lambda: False
    try:
        yield
    finally:
        compiled.machine_code_supported = real


def _kinds() -> tuple[str, ...]:
    from mlir_mx.execution.objects import machine_code_supported

    return ("mxo", "mlirbc") if machine_code_supported() else ("mlirbc",)


@cache
def _pristine(module: str, kind: str) -> tuple[Path, bytes, np.ndarray]:
    """Once per worker: (entry path, its bytes, the right result) of ``module``."""
    folder = Path(tempfile.mkdtemp(prefix=f"mlir-mx-cache-fuzz-{module}-{kind}-"))
    with _kind(kind):
        want, _ = _run(module, folder)
    (path,) = folder.glob(f"*.{kind}")
    return path, path.read_bytes(), want


def _corrupt(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    b = bytearray(data)
    k = rng.randrange(9)
    if k <= 2:  # bytes in one region, or anywhere
        name = rng.choice(list(REGIONS)) if k < 2 else "anywhere"
        lo, hi = REGIONS.get(name, (0, None))
        hi = len(b) if hi is None else hi
        for _ in range(rng.choice((1, 1, 2, 8))):
            i = rng.randrange(lo, hi)
            b[i] = rng.choice((0, b[i] ^ (1 << rng.randrange(8)), rng.randrange(256)))
        how = f"bytes changed in {name}"
    elif k == 3:
        n = rng.randrange(len(b))
        del b[n:]
        how = f"truncated to {n}"
    elif k == 4:
        b += bytes(rng.randrange(256) for _ in range(rng.randint(1, 64)))
        how = "bytes appended"
    elif k == 5:
        at = rng.randrange(len(b))
        b[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
        how = f"bytes inserted at {at}"
    elif k == 6:
        b = b[80:]
        how = "the old headerless format (bare bytecode)"
    elif k == 7:
        b = bytearray(rng.choice((b"", b"MLIRMXC1", bytes(rng.randrange(256) for _ in range(200)))))
        how = f"replaced by {len(b)} bytes"
    else:  # a NUL into a symbol name, as in reproducer f14
        from mlir_mx.execution.c_interface import C_INTERFACE

        symbol = C_INTERFACE.encode()
        i = b.find(symbol, 80)
        i = rng.randrange(80, len(b)) if i < 0 else i + rng.randrange(len(symbol))
        b[i] = 0
        how = f"NUL at {i}"
    if bytes(b) == data:  # a no-op change (same byte drawn): force one
        b = b[:-1]
        how += ", last byte dropped"
    return bytes(b), how


def case(seed: int, index: int) -> Outcome:
    """Corrupt one entry, compile from the cache, classify."""
    from mlir_mx.execution.disk_cache import DiskCache, ObjectCache

    rng = random.Random(f"cache:{seed}:{index}")
    kinds = _kinds()
    module = ("linear", "add")[index % 2]
    kind = kinds[index // 2 % len(kinds)]
    what = config = f"{module} ({kind})"
    try:
        path, good, want = _pristine(module, kind)
        bad, how = _corrupt(good, rng)
        what = f"{module} ({kind}): {how}"
        path.write_bytes(bad)
        log = _handler()
        log.messages.clear()
        with _kind(kind):
            got, from_disk = _run(module, path.parent)
        if from_disk:
            return Outcome(index, "wrong", config, "a corrupted entry was used", what)
        if not np.array_equal(got, want):
            return Outcome(index, "wrong", config, "wrong result after the rebuild", what)
        if not any("compile cache: dropped" in m for m in log.messages):
            return Outcome(index, "silent", config, "the dropped entry was not logged", what)
        cls = ObjectCache if kind == "mxo" else DiskCache
        checker = cls.__new__(cls)
        checker.key = good[8:40]
        if not path.exists() or checker.verify(path.read_bytes())[0] is None:
            return Outcome(index, "wrong", config, "the entry was not rebuilt", what)
        path.write_bytes(good)  # the next case starts from the pristine entry
        return Outcome(index, "ok", config)
    except BaseException as e:  # noqa: BLE001 - anything else is the finding
        tb = "".join(traceback.format_exception(e))[-1500:]
        return Outcome(index, "traceback", config, tb, what)


# -- stores that fail (reliability round 4, 08) ------------------------------------------------

#: How ``store_case`` makes every store of a fresh process fail.
STORE_FAILURES = (
    "file-size limit",
    "cache folder is a file",
    "read-only cache folder",
    "TMPDIR missing",
)

#: A fresh process: quantize, a Linear and ADD through a Runner, all compiled
#: into the cache folder; prints the results' bytes as hex.
_STORE_CODE = textwrap.dedent(
    """
    import resource, sys, numpy as np, mlir_mx
    from mlir_mx.execution import Runner
    from mlir_mx_testing.cache_fuzz import ADD, _weight
    if int(sys.argv[1]):
        resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[1]), int(sys.argv[1])))
    y = mlir_mx.Linear(_weight(), threads=1)(np.ones((1, 96), np.float32))
    q = mlir_mx.quantize(np.linspace(-8, 8, 64, dtype=np.float32), "f8E4M3FN", 32)
    a = np.arange(64, dtype=np.float32).reshape(8, 8)
    z = Runner(ADD).add(a.copy(), a.copy())
    print(y.tobytes().hex(), q.codes.tobytes().hex(), z.tobytes().hex())
    """
)


@cache
def _linear_result() -> np.ndarray:
    import mlir_mx

    return mlir_mx.Linear(_weight(), threads=1)(np.ones((1, 96), np.float32))


def store_case(seed: int, index: int) -> Outcome:
    """One fresh process whose every cache store fails one way (a file-size
    limit drawn from 0..64 KiB, the cache path a file, a read-only cache
    folder, TMPDIR missing): it must exit 0 with the oracle's results, print
    no LLVM error and leave nothing in TMPDIR."""
    from mlir_mx import oracle

    rng = random.Random(f"cache-store:{seed}:{index}")
    how = STORE_FAILURES[index % len(STORE_FAILURES)]
    limit = rng.randrange(0, 64 << 10) if how == "file-size limit" else 0
    what = f"{how} {limit}" if limit else how
    root = Path(tempfile.mkdtemp(prefix="mlir-mx-store-fuzz-"))
    tmp, cache = root / "tmp", root / "cache"
    tmp.mkdir()
    cache.mkdir()
    env = dict(os.environ, MLIR_MX_CACHE_DIR=str(cache), TMPDIR=str(tmp))
    if how == "cache folder is a file":
        cache.rmdir()
        cache.write_text("x")
    elif how == "read-only cache folder":
        cache.chmod(0o500)
    elif how == "TMPDIR missing":
        tmp.rmdir()
    try:
        cmd = [sys.executable, "-c", _STORE_CODE, str(limit)]
        run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
        if run.returncode != 0 or "LLVM ERROR" in run.stderr:
            kind = "signal" if run.returncode < 0 else "traceback"
            return Outcome(index, kind, how, f"rc {run.returncode}: {run.stderr[-800:]}", what)
        y, q, z = (bytes.fromhex(h) for h in run.stdout.split())
        want_q = oracle.quantize(np.linspace(-8, 8, 64, dtype=np.float32), "f8E4M3FN", 32)
        a = np.arange(64, dtype=np.float32).reshape(8, 8)
        if z != (2 * a).tobytes() or q != want_q.codes.tobytes():
            return Outcome(index, "wrong", how, "a result differs from the oracle's", what)
        if y != _linear_result().tobytes():  # the same kernel's bits, stored or not
            return Outcome(index, "wrong", how, "the Linear's result differs", what)
        left = sorted(p.name for p in tmp.iterdir()) if tmp.is_dir() else []
        if left:
            return Outcome(index, "wrong", how, f"left in TMPDIR: {left[:5]}", what)
        return Outcome(index, "ok", how)
    except BaseException as e:  # noqa: BLE001 - anything else is the finding
        tb = "".join(traceback.format_exception(e))[-1500:]
        return Outcome(index, "traceback", how, tb, what)
    finally:
        if cache.is_dir():
            cache.chmod(0o700)
        import shutil

        shutil.rmtree(root, ignore_errors=True)

"""The GGUF file fuzzer: files we write, read back, then mutated and read again.

Case ``i`` of seed ``s`` writes a GGUF file with :func:`write_gguf` (one to
three MXFP4 tensors of random shapes, empty ones included, and random
metadata of every type it takes), which must read back bit for bit.  Then it
applies one to three mutations drawn from ``random.Random(f"gguf:{s}:{i}")``
to the bytes, aimed at the fields a reader trusts -- the tensor and metadata
counts, string lengths, value and tensor types, array lengths, ranks,
dimensions and data offsets (small, huge and off-by-one values), and
truncation, random byte flips, inserted and deleted bytes, or a file of
random bytes -- and reads the result.

The rule (``docs/interop.md``): :func:`read_gguf` returns, or raises
``ValueError`` whose message starts with the file's name; never another
exception, a signal, a hang (the worker's address space is capped at 4 GiB,
so a runaway allocation fails fast) or a tensor that ``gguf.GGUFReader``
reads differently.
"""

from __future__ import annotations

import os
import random
import resource
import struct
import tempfile
import traceback
from functools import cache
from pathlib import Path

import numpy as np

from mlir_mx.testing.campaign import Outcome

__all__ = ["case", "fields", "MUTATIONS"]

_AS_LIMIT = 4 << 30
_NAMES = ("blk.0.ffn_down.weight", "w", "token_embd.weight", "é.ü", "a" * 63, "x.y.z")
_INTERESTING = (0, 1, 2, 3, 7, 8, 9, 12, 13, 31, 32, 33, 63, 64, 255, 256, 2**16, 2**31 - 1,
                2**31, 2**32 - 1, 2**32, 2**62, 2**63 - 1, 2**63, 2**64 - 1)  # fmt: skip


@cache
def _setup() -> Path:
    """Once per worker: cap the address space; a scratch folder."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY or soft > _AS_LIMIT:
        resource.setrlimit(resource.RLIMIT_AS, (_AS_LIMIT, hard))
    return Path(tempfile.mkdtemp(prefix="mlir-mx-gguf-fuzz-"))


def _tensors(rng: random.Random) -> dict:
    from mlir_mx.numerics import quantize

    nrng = np.random.default_rng(rng.randrange(2**32))
    out = {}
    for name in rng.sample(_NAMES, rng.randint(1, 3)):
        rank = rng.choice((1, 2, 2, 2, 3, 4))
        shape = [rng.choice((0, 1, 2, 3, 5, 8)) if rng.random() < 0.9 else 0 for _ in range(rank - 1)]
        shape.append(32 * rng.choice((0, 1, 1, 2, 3)) if rng.random() < 0.95 else 0)
        if rng.random() < 0.7:  # mostly non-empty
            shape = [max(d, 1) if j < rank - 1 else max(d, 32) for j, d in enumerate(shape)]
        x = nrng.standard_normal(shape).astype(np.float32) * np.float32(2.0 ** rng.randint(-30, 30))
        out[name] = quantize(x, "f4E2M1FN", 32)
    return out


def _metadata(rng: random.Random) -> dict:
    values = (True, False, 0, -1, 2**63 - 1, -(2**63), 1.5, float("nan"), float("inf"),
              "", "text", "ünïcödé", "x" * 300)  # fmt: skip
    return {f"k.{i}": rng.choice(values) for i in range(rng.randint(0, 4))}


# ------------------------------------------------------------------ the fields of a file


def fields(data: bytes) -> list[tuple[str, int, int]]:
    """``(kind, offset, size)`` of the fields of a well-formed GGUF file (ours)."""
    out = [("version", 4, 4), ("count", 8, 8), ("count", 16, 8)]
    pos = 24
    n_tensors, n_kv = struct.unpack_from("<QQ", data, 8)

    def string(kind):
        nonlocal pos
        out.append((kind, pos, 8))
        (n,) = struct.unpack_from("<Q", data, pos)
        pos += 8 + n

    for _ in range(n_kv):
        string("length")
        out.append(("type", pos, 4))
        (vtype,) = struct.unpack_from("<I", data, pos)
        pos += 4
        if vtype == 8:
            string("length")
        elif vtype == 9:  # arrays: not written by write_gguf; stop mapping here
            return out
        else:
            pos += {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}[vtype]
    for _ in range(n_tensors):
        string("length")
        out.append(("rank", pos, 4))
        (n_dims,) = struct.unpack_from("<I", data, pos)
        pos += 4
        out += [("dim", pos + 8 * d, 8) for d in range(n_dims)]
        pos += 8 * n_dims
        out += [("type", pos, 4), ("offset", pos + 4, 8)]
        pos += 12
    return out


def _set_field(b: bytearray, rng: random.Random, flds) -> str:
    kind, off, size = rng.choice(flds)
    if off + size > len(b):
        return "field past the end (skipped)"
    (old,) = struct.unpack_from("<I" if size == 4 else "<Q", b, off)
    choice = rng.randrange(4)
    if choice == 0:
        new = rng.choice(_INTERESTING)
    elif choice == 1:
        new = old + rng.choice((-2, -1, 1, 2, 8, 32))
    elif choice == 2 and kind == "type":
        new = rng.randrange(45)
    else:
        new = rng.getrandbits(8 * size)
    new %= 2 ** (8 * size)
    struct.pack_into("<I" if size == 4 else "<Q", b, off, new)
    return f"{kind} at {off}: {old} -> {new}"


def _mutate(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    b = bytearray(data)
    flds = fields(data)
    done = []
    for _ in range(rng.choice((1, 1, 1, 2, 3))):
        k = rng.randrange(10)
        if k < 5:
            done.append(_set_field(b, rng, flds))
        elif k == 5:
            n = rng.randrange(len(b) + 1)
            del b[n:]
            done.append(f"truncated to {n}")
        elif k == 6 and b:
            for _ in range(rng.randint(1, 16)):
                b[rng.randrange(len(b))] = rng.randrange(256)
            done.append("random bytes flipped")
        elif k == 7:
            at = rng.randrange(len(b) + 1)
            b[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 9)))
            done.append(f"bytes inserted at {at}")
        elif k == 8 and b:
            at = rng.randrange(len(b))
            del b[at : at + rng.randint(1, 9)]
            done.append(f"bytes deleted at {at}")
        else:
            head = bytes(b[:24]) if rng.random() < 0.5 else b""
            b = bytearray(head + bytes(rng.randrange(256) for _ in range(rng.randrange(600))))
            done.append("random content")
    return bytes(b), "; ".join(done)


MUTATIONS = ("field", "truncate", "flip", "insert", "delete", "random")


# ------------------------------------------------------------------ one case


def _agrees_with_gguf(path: Path, got: dict) -> str | None:
    """What we read must be what gguf's own reader reads (None: it is)."""
    import gguf

    from mlir_mx.interop.gguf import mxfp4_to_ggml

    reader = gguf.GGUFReader(path)
    theirs = {t.name: t for t in reader.tensors if t.tensor_type == gguf.GGMLQuantizationType.MXFP4}
    if set(theirs) != set(got):
        return f"tensors {sorted(got)} but gguf reads {sorted(theirs)}"
    for name, a in got.items():
        t = theirs[name]
        if tuple(int(d) for d in reversed(t.shape.tolist())) != a.shape:
            return f"{name}: shape {a.shape}, gguf {t.shape.tolist()[::-1]}"
        if not np.array_equal(np.asarray(t.data).reshape(-1), mxfp4_to_ggml(a).reshape(-1)):
            return f"{name}: bytes differ from gguf's"
    return None


def case(seed: int, index: int) -> Outcome:
    """Write a file, read it back, mutate it, read it again; classify."""
    from mlir_mx.interop.gguf import read_gguf, write_gguf

    rng = random.Random(f"gguf:{seed}:{index}")
    folder = _setup()
    path = folder / f"case-{index}.gguf"
    tensors, md = _tensors(rng), _metadata(rng)
    what = f"write {{{', '.join(f'{n}: {a.shape}' for n, a in tensors.items())}}}, metadata {md}"
    try:
        write_gguf(path, tensors, metadata=md)
        back = read_gguf(path)
        if set(back) != set(tensors) or not all(back[n].bitwise_equal(a) for n, a in tensors.items()):
            return Outcome(index, "wrong", "write", "a file write_gguf wrote reads back differently", what)
        data, how = _mutate(path.read_bytes(), rng)
        path.write_bytes(data)
        what += f"; mutated: {how}"
        try:
            got = read_gguf(path)
        except ValueError as e:
            if str(e).startswith(f"{path}: "):
                return Outcome(index, "rejected", _config(how))
            return Outcome(index, "traceback", _config(how), f"ValueError without the file: {e}", what)
        bad = _agrees_with_gguf(path, got)
        if bad:
            return Outcome(index, "wrong", _config(how), bad, what)
        return Outcome(index, "ok", _config(how))
    except BaseException as e:  # noqa: BLE001 - anything else is the finding
        tb = "".join(traceback.format_exception(e))[-1500:]
        return Outcome(index, "traceback", "gguf", tb, what)
    finally:
        try:
            os.unlink(path)
        except OSError:
            pass


def _config(how: str) -> str:
    """The configuration a case counts under: its first mutation's kind."""
    first = how.split(";")[0]
    for word, kind in (("truncated", "truncate"), ("flipped", "flip"), ("inserted", "insert"),
                       ("deleted", "delete"), ("random content", "random")):  # fmt: skip
        if word in first:
            return kind
    return "field"

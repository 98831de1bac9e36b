"""The GGUF file fuzzers: files we write, read back, then mutated and read
again (:func:`case`); and writes of random, often invalid, arguments over a
good file (:func:`write_case`).

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

The writer mode, case ``i`` of seed ``s`` (``random.Random(f"gguf-write:{s}:{i}")``,
suite ``gguf-write``): a good file is written in a folder of its own, then
:func:`write_gguf` is called over it with random arguments, each part valid or
not -- the tensors (MXFP4 MXArrays of every rank, empty and huge-but-empty
shapes on both sides of the reader's 2^60-element limit, other formats, block
sizes and axes, NaN scales, float arrays to quantize, things that are not
arrays), their names (empty, not str, 63 and 64 UTF-8 bytes, lone
surrogates), the metadata (every type it takes and many it does not, ints
on both sides of int64, the writer's own keys) and ``arch``.  The rule: the
write returns and the file reads back bit for bit (tensors through
:func:`read_gguf` and ``gguf.GGUFReader``, metadata through
``gguf.GGUFReader``), or it raises an ``MXError`` naming the argument and
leaves the old file byte-identical; either way no temporary file is left.
Where the generator knows that an argument is valid or invalid (the rules
of ``docs/interop.md``), the outcome must agree.
"""

from __future__ import annotations

import os
import random
import resource
import shutil
import struct
import tempfile
import traceback
from functools import cache
from pathlib import Path

import numpy as np

from mlir_mx_testing.campaign import Outcome

__all__ = ["case", "fields", "write_case", "MUTATIONS", "WRITE_PARTS"]

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
    from mlir_mx import oracle

    nrng = np.random.default_rng(rng.randrange(2**32))
    out = {}
    for name in rng.sample(_NAMES, rng.randint(1, 3)):
        rank = rng.choice((1, 2, 2, 2, 3, 4))
        shape = [
            rng.choice((0, 1, 2, 3, 5, 8)) if rng.random() < 0.9 else 0 for _ in range(rank - 1)
        ]
        shape.append(32 * rng.choice((0, 1, 1, 2, 3)) if rng.random() < 0.95 else 0)
        if rng.random() < 0.7:  # mostly non-empty
            shape = [max(d, 1) if j < rank - 1 else max(d, 32) for j, d in enumerate(shape)]
        x = nrng.standard_normal(shape).astype(np.float32) * np.float32(2.0 ** rng.randint(-30, 30))
        out[name] = oracle.quantize(x, "f4E2M1FN", 32)
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
        if set(back) != set(tensors) or not all(
            back[n].bitwise_equal(a) for n, a in tensors.items()
        ):
            return Outcome(
                index, "wrong", "write", "a file write_gguf wrote reads back differently", what
            )
        data, how = _mutate(path.read_bytes(), rng)
        path.write_bytes(data)
        what += f"; mutated: {how}"
        try:
            got = read_gguf(path)
        except ValueError as e:
            if str(e).startswith(f"{path}: "):
                return Outcome(index, "rejected", _config(how))
            return Outcome(
                index, "traceback", _config(how), f"ValueError without the file: {e}", what
            )
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
    for word, kind in (
        ("truncated", "truncate"),
        ("flipped", "flip"),
        ("inserted", "insert"),
        ("deleted", "delete"),
        ("random content", "random"),
    ):
        if word in first:
            return kind
    return "field"


# ------------------------------------------------------------------ the writer mode

#: What a writer case may get wrong (its configuration: the first invalid part).
WRITE_PARTS = ("valid", "container", "name", "shape", "format", "scale", "float", "other",
               "metadata", "arch")  # fmt: skip
_NAME_CASES = (
    ("", False),
    (5, False),
    (b"w", False),
    (None, False),
    ("\ud800", False),
    ("a" * 64, False),
    ("\u00e9" * 32, False),
    ("\u00e9" * 31 + "a", True),
)
#: Empty shapes on both sides of the reader's limit (2^60 elements, zeros aside).
_HUGE = (
    ((0, 2**60), False),
    ((0, 2**60 - 32), True),
    ((2**29, 0, 2**30), True),
    ((2**30, 0, 2**30), False),
    ((0, 2**30, 0, 2**30), False),
    ((3, 0, 2**58), True),
    ((0, 0, 0, 2**60 + 32), False),
)


def _mx(shape, nrng, element="f4E2M1FN", block=32, axis=-1):
    """An MXArray of random finite codes and moderate scales (any shape, empty too)."""
    from mlir_mx.numerics import ELEMENT_FORMATS, MXArray, finite_codes

    fmt = ELEMENT_FORMATS[element]
    fin = finite_codes(fmt)
    codes = nrng.choice(fin, shape) if all(shape) else np.zeros(shape, fin.dtype)
    sshape = list(shape)
    sshape[axis] //= block
    return MXArray(codes, nrng.integers(100, 160, sshape).astype(np.uint8), element, block, axis)


def _one_tensor(rng: random.Random, nrng):
    """``(value, expected MXArray or None, part)``: part "valid" or what is wrong."""
    from mlir_mx import oracle
    from mlir_mx.numerics import ELEMENT_FORMATS

    k = rng.randrange(50)  # 70 in 100 a good MXArray, the rest the cases below
    good = next(iter(_tensors(rng).values()))
    if k < 35:
        return good, good, "valid"
    if k < 38:
        shape, ok = rng.choice(_HUGE)
        value = _mx(shape, nrng)
        return value, (value if ok else None), "valid" if ok else "shape"
    if k < 41:  # rank 5, or another format, block size or axis
        how = rng.randrange(4)
        if how == 0:
            return _mx((1, 2, 1, 1, 32), nrng), None, "shape"
        if how == 1:
            other = rng.choice(sorted(set(ELEMENT_FORMATS) - {"f4E2M1FN"}))
            return _mx((2, 32), nrng, other), None, "format"
        if how == 2:
            return _mx((2, 64), nrng, block=rng.choice((16, 64))), None, "format"
        return _mx((64, 32), nrng, axis=0), None, "format"
    if k < 43 and good.size:  # a NaN scale (byte 255)
        scales = good.scales.view(np.uint8).copy()
        scales.reshape(-1)[rng.randrange(scales.size)] = 255
        return type(good)(good.codes, scales, good.element, 32, -1), None, "scale"
    if k < 48:  # float arrays, quantized by the writer (compiled) and here (oracle)
        shape = rng.choice(
            ((4, 64), (1, 32), (2, 3, 32), (5,), (2, 33), (0, 32), (1, 1, 1, 1, 1, 32))
        )
        dtype = rng.choice((np.float32, np.float32, np.float64, np.float16))
        x = nrng.standard_normal(shape).astype(dtype)
        if x.size and rng.random() < 0.3:
            x.reshape(-1)[rng.randrange(x.size)] = rng.choice((np.nan, np.inf, -np.inf, 6e4))
        try:
            want = oracle.quantize(x, "f4E2M1FN", 32)
        except ValueError:
            return x, None, "float"
        ok = 1 <= x.ndim <= 4 and not (want.scales.view(np.uint8) == 255).any()
        return x, (want if ok else None), "valid" if ok else "float"
    other = (None, "w", 3.5, np.zeros((2, 32), np.int32), np.zeros((), np.float32))
    return rng.choice(other), None, "other"


def _write_tensors(rng: random.Random, nrng):
    """``(tensors argument, expected {name: MXArray} or None, parts)``."""
    if rng.random() < 0.03:
        return rng.choice(({}, None, [("w", None)], "w")), None, ["container"]
    tensors, want, parts = {}, {}, []
    for name in rng.sample(_NAMES, rng.randint(1, 3)):
        ok = True
        if rng.random() < 0.05:
            name, ok = rng.choice(_NAME_CASES)
        if name in tensors:
            continue
        value, expected, part = _one_tensor(rng, nrng)
        parts += [part] + ([] if ok else ["name"])
        tensors[name] = value
        if expected is not None:
            want[name] = expected
    return tensors, want, parts


def _write_metadata(rng: random.Random):
    """``(metadata argument, parts)``."""
    if rng.random() < 0.02:
        return rng.choice(([("k", 1)], "k=1", 5)), ["metadata"]
    md, parts = (None, []) if rng.random() < 0.2 else (_metadata(rng), [])
    if md is not None and rng.random() < 0.1:
        key, value = rng.choice((("k.bad", 2**63), ("k.bad", -(2**63) - 1), ("k.bad", None),
                                 ("k.bad", [1]), ("k.bad", b"x"), ("k.bad", {}), ("k.bad", np.int64(3)),
                                 ("k.bad", "\ud800"), ("general.alignment", 1),
                                 ("general.architecture", "x"), ("", 1), ("\udc80", 1), (7, 1)))  # fmt: skip
        md[key] = value
        parts.append("metadata")
    return md, parts


def _arch(rng: random.Random):
    bad = rng.random() < 0.04
    return (
        rng.choice(("", None, 3, "\ud800")) if bad else rng.choice(("mlir-mx", "llama", "\u00fc"))
    ), bad


def _write_args(rng: random.Random):
    """``(keyword arguments of write_gguf, expected tensors or None, parts)``."""
    nrng = np.random.default_rng(rng.randrange(2**32))
    tensors, want, parts = _write_tensors(rng, nrng)
    metadata, md_parts = _write_metadata(rng)
    arch, bad_arch = _arch(rng)
    parts += md_parts + (["arch"] if bad_arch else [])
    bad = [p for p in parts if p != "valid"]
    return {"tensors": tensors, "arch": arch, "metadata": metadata}, (None if bad else want), bad


def _folder_left(folder: Path, path: Path) -> str | None:
    left = sorted(p.name for p in folder.iterdir() if p != path)
    return f"left in the folder: {left}" if left else None


def _reads_back(path: Path, args: dict, want: dict | None) -> str | None:
    """What differs between the file and what was written (None: nothing)."""
    import gguf

    from mlir_mx.interop.gguf import read_gguf

    back = read_gguf(path)
    if want is not None:
        if set(back) != set(want):
            return f"tensors {sorted(back)} read back, {sorted(want)} written"
        for name, a in want.items():
            if not back[name].bitwise_equal(a):
                return f"tensor {name!r} reads back differently"
    bad = _agrees_with_gguf(path, back)
    if bad:
        return bad
    fields = gguf.GGUFReader(path).fields
    expected = {"general.architecture": args["arch"], **(args["metadata"] or {})}
    for key, value in expected.items():
        f = fields.get(key)
        if f is None:
            return f"metadata {key!r} is missing"
        got = f.contents()
        if isinstance(value, float):
            same = struct.pack("<d", value) == np.asarray(f.parts[f.data[0]]).tobytes()
        else:
            same = type(got) is type(value) and got == value
        if not same:
            return f"metadata {key!r} = {got!r}, {value!r} written"
    return None


def write_case(seed: int, index: int) -> Outcome:
    """Write random arguments over a good file; classify (the writer mode)."""
    from mlir_mx.errors import MXError
    from mlir_mx.interop.gguf import write_gguf

    rng = random.Random(f"gguf-write:{seed}:{index}")
    folder = Path(tempfile.mkdtemp(prefix=f"w{index}-", dir=_setup()))
    path = folder / "model.gguf"
    config, what = "valid", ""
    try:
        write_gguf(path, _tensors(rng), metadata=_metadata(rng))
        old = path.read_bytes()
        args, want, bad = _write_args(rng)
        config = bad[0] if bad else "valid"
        what = _describe(args)
        try:
            write_gguf(path, **args)
        except MXError as e:
            kept = path.read_bytes() == old
            problem = (None if kept else "the old file changed") or _folder_left(folder, path)
            if not problem and not str(e).startswith(("tensors", "metadata", "arch")):
                problem = f"the message does not name the argument: {e}"
            if not problem and not bad:
                problem = f"a valid write was refused: {e}"
            return Outcome(index, "wrong" if problem else "rejected", config, problem or "", what)
        except (TypeError, ValueError) as e:
            return Outcome(index, "not-mx-error", config, f"{type(e).__name__}: {e}", what)
        try:
            problem = _folder_left(folder, path) or _reads_back(path, args, want)
        except ValueError as e:
            problem = f"written, then refused by the reader: {e}"
        if not problem and bad:
            problem = f"accepted, though invalid ({', '.join(bad)})"
        return Outcome(index, "wrong" if problem else "ok", config, problem or "", what)
    except BaseException as e:  # noqa: BLE001 - anything else is the finding
        tb = "".join(traceback.format_exception(e))[-1500:]
        return Outcome(index, "traceback", config, tb, what)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _describe(args: dict) -> str:
    def one(v):
        if isinstance(v, np.ndarray):
            return f"{v.dtype}{list(v.shape)}"
        if hasattr(v, "element"):
            return f"MXArray({v.element}, {list(v.shape)}, block {v.block_size}, axis {v.axis})"
        return repr(v)[:80]

    t = args["tensors"]
    tensors = {k: one(v) for k, v in t.items()} if isinstance(t, dict) else one(t)
    return f"write_gguf with tensors={tensors}, arch={args['arch']!r}, metadata={args['metadata']!r}"

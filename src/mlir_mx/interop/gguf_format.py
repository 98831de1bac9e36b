"""A bounded reader of the GGUF container: header, metadata and tensor infos.

GGUF (ggml's file format, versions 2 and 3) is a header (magic ``GGUF``,
version, tensor count, metadata count), the metadata key/values, one info
per tensor (name, dimensions ``ne``, ggml type, data offset), padding to
``general.alignment`` (default 32), then the tensor data.  Every size in it
is declared by the file, so a few flipped bytes can declare a 2**62-byte
string or 10**15 array elements.  Here every count, length and offset is
checked against the bytes that are left BEFORE anything is read, allocated
or looped over: a malformed file costs at most one pass over its own bytes,
and every failure is a ``ValueError`` saying what is wrong and where
(:func:`~mlir_mx.interop.gguf.read_gguf` adds the file's name).  Arrays of
fixed-size values are skipped in one step, not built element by element.

Stricter than ``gguf.GGUFReader`` where ggml itself is (ggml's
``gguf_init_from_file``): at most 4 dimensions, the first one a multiple of
the type's block, tensor data aligned and inside the file, unique names.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass

from mlir_mx.errors import MXArgTypeError, MXValueError

__all__ = ["GGUF_MAGIC", "TensorInfo", "check_tensor", "matrix_blocks", "parse_gguf"]

GGUF_MAGIC = b"GGUF"
_VERSIONS = (2, 3)
#: Byte size of each fixed-size GGUF value type (GGUFValueType).
_FIXED = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_UINT32, _STRING, _ARRAY = 4, 8, 9
#: struct codes of the fixed-size value types (read where metadata values are asked for).
_CODES = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_MAX_DIMS = 4  # GGML_MAX_DIMS
_MAX_NESTING = 8  # arrays of arrays: GGUFReader reads them, ggml does not
_MIN_KV = 8 + 4 + 1  # empty key, type, one byte
_MIN_TENSOR = 8 + 4 + 4 + 8  # empty name, no dims, type, offset
_DEFAULT_ALIGNMENT = 32
#: ggml's sizes are int64, numpy's extents too (in bytes, up to 8 per element,
#: empty dimensions aside): 2^60 elements or more cannot be real.
_MAX_ELEMENTS = 2**60


@dataclass(frozen=True)
class TensorInfo:
    """One tensor of a GGUF file, its data range checked against the file."""

    name: str
    ne: tuple[int, ...]  # ggml order: ne[0] is the contiguous axis
    type: int  # ggml type (GGMLQuantizationType)
    start: int  # absolute byte offset of the data in the file
    nbytes: int

    @property
    def shape(self) -> tuple[int, ...]:
        """The numpy shape: ``ne`` reversed."""
        return tuple(reversed(self.ne))


class _Cursor:
    """Reads little- or big-endian fields, refusing any read past the end."""

    def __init__(self, buf, order: str):
        self.buf, self.pos, self.order, self.size = buf, 0, order, len(buf)

    def need(self, n: int, what: str) -> None:
        if n > self.size - self.pos:
            raise MXValueError(
                f"{what} at byte {self.pos} needs {n} bytes, the file has {self.size - self.pos} left"
            )

    def unpack(self, code: str, what: str) -> int:
        n = struct.calcsize(code)
        self.need(n, what)
        (value,) = struct.unpack_from(self.order + code, self.buf, self.pos)
        self.pos += n
        return value

    def skip(self, n: int, what: str) -> None:
        self.need(n, what)
        self.pos += n

    def unique(self, seen: set[str], what: str, kind: str) -> str:
        """A string (see :meth:`string`) that is not in ``seen``; added to it."""
        text = self.string(what)
        if text in seen:
            raise MXValueError(f"{kind} {text!r} appears twice")
        seen.add(text)
        return text

    def string(self, what: str) -> str:
        n = self.unpack("Q", f"the length of {what}")
        self.need(n, f"{what} ({n} bytes)")
        raw = self.buf[self.pos : self.pos + n]
        self.pos += n
        try:
            return bytes(raw).decode("utf-8")
        except UnicodeDecodeError as e:
            raise MXValueError(f"{what} is not UTF-8 ({e.reason} at byte {e.start})") from None


def _value(cur: _Cursor, vtype: int, what: str, depth: int = 0) -> None:
    """Skip one metadata value of type ``vtype``, checking every size."""
    if vtype in _FIXED:
        cur.skip(_FIXED[vtype], what)
    elif vtype == _STRING:
        n = cur.unpack("Q", f"the length of {what}")
        cur.skip(n, f"{what} ({n} bytes)")
    elif vtype == _ARRAY:
        if depth >= _MAX_NESTING:
            raise MXValueError(f"{what}: arrays nested more than {_MAX_NESTING} deep")
        etype = cur.unpack("I", f"the element type of {what}")
        count = cur.unpack("Q", f"the length of {what}")
        if etype in _FIXED:  # one step, whatever the count
            cur.skip(count * _FIXED[etype], f"{what} ({count} elements of type {etype})")
            return
        if etype not in (_STRING, _ARRAY):
            raise MXValueError(f"{what}: unknown element type {etype}")
        cur.need(count * 8, f"{what} ({count} elements, each at least 8 bytes)")
        for i in range(count):
            _value(cur, etype, f"{what}[{i}]", depth + 1)
    else:
        raise MXValueError(f"{what}: unknown value type {vtype}")


def _metadata(cur: _Cursor, count: int, values: dict | None = None) -> int:
    """Walk the metadata; returns ``general.alignment`` (default 32).  With
    ``values``, each scalar (number, bool, string) is stored in it by key."""
    cur.need(count * _MIN_KV, f"{count} metadata entries")
    keys: set[str] = set()
    alignment = _DEFAULT_ALIGNMENT
    for i in range(count):
        key = cur.unique(keys, f"the key of metadata entry {i}", "metadata key")
        vtype = cur.unpack("I", f"the type of {key!r}")
        if key == "general.alignment":
            if vtype != _UINT32:
                raise MXValueError(f"general.alignment has type {vtype}, not UINT32")
            alignment = cur.unpack("I", "general.alignment")
            if alignment == 0 or alignment & (alignment - 1):
                raise MXValueError(f"general.alignment {alignment} is not a power of two")
        elif values is not None and vtype in _CODES:
            values[key] = cur.unpack(_CODES[vtype], f"metadata {key!r}")
        elif values is not None and vtype == _STRING:
            values[key] = cur.string(f"metadata {key!r}")
        else:
            _value(cur, vtype, f"metadata {key!r}")
    return alignment


def _tensor_infos(cur: _Cursor, count: int, sizes: Mapping) -> list[tuple]:
    cur.need(count * _MIN_TENSOR, f"{count} tensor infos")
    infos, names = [], set()
    for i in range(count):
        name = cur.unique(names, f"the name of tensor {i}", "tensor name")
        n_dims = cur.unpack("I", f"the rank of tensor {name!r}")
        _check_rank(name, n_dims)  # before the dimensions are read
        ne = tuple(cur.unpack("Q", f"dimension {d} of tensor {name!r}") for d in range(n_dims))
        ttype = cur.unpack("I", f"the type of tensor {name!r}")
        offset = cur.unpack("Q", f"the data offset of tensor {name!r}")
        infos.append((name, ne, ttype, offset, check_tensor(name, ne, ttype, sizes)))
    return infos


def _check_rank(name: str, n_dims: int) -> None:
    if n_dims > _MAX_DIMS:
        raise MXValueError(f"tensor {name!r} has {n_dims} dimensions (ggml: at most {_MAX_DIMS})")


def check_tensor(name: str, ne, ttype: int, sizes: Mapping[int, tuple[int, int]]) -> int:
    """Every rule of one tensor's info, as the reader applies it; its data's size in bytes.

    ``ne``: the dimensions in ggml order (numpy's shape reversed); ``ttype``:
    the ggml type; ``sizes`` as for :func:`parse_gguf`.  The writer
    (:func:`~mlir_mx.interop.gguf.write_gguf`) checks each tensor with this
    same function before it writes anything, so every file it writes passes
    here.  Raises ``ValueError`` (``MXValueError``) naming the tensor: more
    than 4 dimensions, an unknown type, a first dimension that is not a whole
    number of the type's blocks, 2^60 elements or more (empty dimensions
    aside).
    """
    _check_rank(name, len(ne))
    if ttype not in sizes:
        raise MXValueError(f"tensor {name!r} has an unknown ggml type {ttype}")
    block, type_size = sizes[ttype]
    ne0 = ne[0] if ne else 1  # as ggml: missing dimensions are 1
    if ne0 % block:
        raise MXValueError(
            f"tensor {name!r}: first dimension {ne0} is not a multiple of its block ({block})"
        )
    elements, nonzero = 1, 1
    for d in ne:
        elements *= d
        nonzero *= d or 1
    if nonzero >= _MAX_ELEMENTS:
        raise MXValueError(f"tensor {name!r}: dimensions {list(ne)} are too large")
    return elements // block * type_size


def parse_gguf(
    buf, sizes: Mapping[int, tuple[int, int]], metadata: dict | None = None
) -> list[TensorInfo]:
    """The tensors of the GGUF file whose bytes are ``buf`` (bytes, mmap, ...).

    ``sizes``: ggml type -> (elements per block, bytes per block), i.e.
    ``gguf.GGML_QUANT_SIZES``.  Raises ``ValueError`` (why and at which byte)
    for anything malformed.  The metadata is read only to check and skip it,
    unless ``metadata`` (a dict) is given: then its scalar values (numbers,
    bools, strings; not arrays) are stored in it by key (``general.alignment``
    included).
    """
    if len(buf) < 8:
        raise MXValueError(f"{len(buf)} bytes, too short for a GGUF header")
    if bytes(buf[:4]) != GGUF_MAGIC:
        raise MXValueError(f"bad magic {bytes(buf[:4])!r} (expected {GGUF_MAGIC!r})")
    # As gguf.GGUFReader: a version whose low 16 bits are 0 is the other byte order.
    order = ">" if struct.unpack_from("<I", buf, 4)[0] & 0xFFFF == 0 else "<"
    cur = _Cursor(buf, order)
    cur.pos = 4
    version = cur.unpack("I", "the version")
    if version not in _VERSIONS:
        raise MXValueError(f"version {version} (readable: {', '.join(map(str, _VERSIONS))})")
    n_tensors = cur.unpack("Q", "the tensor count")
    n_kv = cur.unpack("Q", "the metadata count")
    alignment = _metadata(cur, n_kv, metadata)
    if metadata is not None:
        metadata["general.alignment"] = alignment
    infos = _tensor_infos(cur, n_tensors, sizes)
    data = -(-cur.pos // alignment) * alignment
    out = []
    for name, ne, ttype, offset, nbytes in infos:
        if offset % alignment:
            raise MXValueError(f"tensor {name!r}: data offset {offset} is not {alignment}-aligned")
        start = data + offset
        if nbytes and start + nbytes > len(buf):  # an empty tensor reads nothing
            raise MXValueError(
                f"tensor {name!r}: {nbytes} bytes of data at byte {start} end past the end "
                f"of the file ({len(buf)} bytes)"
            )
        out.append(TensorInfo(name, ne, ttype, start, nbytes))
    return out


def matrix_blocks(data, rows, n, kind: str, block: int, block_bytes: int):
    """The raw bytes ``data`` of a ggml ``kind`` matrix ``(rows, n)`` (blocks of
    ``block`` elements in ``block_bytes`` bytes) as a ``(rows, n / block,
    block_bytes)`` ``uint8`` view, checked: ``rows`` / ``n`` non-negative ints,
    ``n`` a multiple of ``block``, ``data`` ``uint8`` of exactly that size;
    else ``MXArgTypeError`` / ``MXValueError`` naming the argument.  Returns
    ``(blocks, rows, n)``."""
    import numpy as np

    from mlir_mx.numerics.blocks import check_shape

    rows, n = check_shape((rows, n), "rows, n")
    if n % block:
        raise MXValueError(f"n: {n} is not a multiple of ggml's {kind} block of {block}")
    data = np.asarray(data)
    if data.dtype != np.uint8:
        raise MXArgTypeError(f"data: expected the raw uint8 bytes of the matrix, got dtype {data.dtype}")
    want = rows * (n // block) * block_bytes
    if data.size != want:
        raise MXValueError(
            f"data: {data.size} bytes do not hold a ({rows}, {n}) {kind} matrix ({want} bytes)"
        )
    return data.reshape(rows, n // block, block_bytes), rows, n

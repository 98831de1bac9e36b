"""Read and write GGUF files with MXFP4 tensors (ggml ``block_mxfp4``) as MXArrays.

ggml stores an MXFP4 tensor as rows of 17-byte blocks along its contiguous axis
``ne0``: one E8M0 byte ``e`` then 16 bytes ``qs`` in which byte ``j`` holds element
``j`` in its low nibble and element ``j + 16`` in its high nibble.  A linear
layer's weight is ``ne = [n_in, n_out]``, i.e. the numpy shape ``(n_out, n_in)``
blocked along ``n_in``.  It maps to ``MXArray(element="f4E2M1FN", block_size=32,
axis=-1)`` of the same numpy shape:

* the scale byte is the E8M0 code unchanged and each nibble is the E2M1 code
  unchanged (``docs/interop.md`` proves the values equal OCP's);
* the one conversion is the layout: the scales are gathered out of the interleaved
  blocks and the codes are re-ordered from ggml's split-half nibble order.

Scale byte 255 is NaN in OCP E8M0 but ``2**127`` in ggml's decoder, so it is
rejected in both directions.  The ``gguf`` package (``pip install
'mlir-mx[gguf]'``, MXFP4 since gguf 0.18.0) is imported on first use.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from mlir_mx.errors import MXArgTypeError, MXValueError, user_error
from mlir_mx.files import atomic_path, path_argument, release_file_pages
from mlir_mx.interop.gguf_format import TensorInfo, check_tensor, matrix_blocks, parse_gguf
from mlir_mx.numerics import SCALE_DTYPE, SCALE_NAN_CODE, MXArray, element_format
from mlir_mx.numerics.blocks import check_shape

__all__ = [
    "GGML_KVALUES",
    "MXFP4_BLOCK",
    "MXFP4_BLOCK_BYTES",
    "GGUFFile",
    "ggml_e8m0_half",
    "gguf_package",
    "mxfp4_from_ggml",
    "mxfp4_packed_from_ggml",
    "open_gguf",
    "mxfp4_to_ggml",
    "read_gguf",
    "write_gguf",
]

MXFP4_BLOCK = 32
MXFP4_BLOCK_BYTES = 17
#: ggml's ``kvalues_mxfp4``: twice the E2M1 value of each 4-bit code.
GGML_KVALUES = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], np.int8)
_F4 = element_format("f4E2M1FN")


def ggml_e8m0_half(e) -> np.ndarray:
    """ggml's ``ggml_e8m0_to_fp32_half``: E8M0 byte ``e`` to ``2**(e - 128)`` as float32.

    Built from the f32 bits like ggml does: ``0x00200000 << e`` for ``e < 2`` (the
    subnormals ``2**-128`` and ``2**-127``), ``(e - 1) << 23`` otherwise.  Byte 255
    gives ``2**127``, not NaN.
    """
    e = np.asarray(e)
    if e.dtype.kind not in "iu" or (e.size and (e.min() < 0 or e.max() > 255)):
        raise MXValueError(f"e: expected E8M0 bytes (integers 0..255), got {_describe(e)}")
    e = e.astype(np.uint32)
    bits = np.where(e < 2, np.uint32(0x00200000) << e, (e - np.uint32(1)) << np.uint32(23))
    return bits.astype(np.uint32).view(np.float32)


def _describe(a: np.ndarray) -> str:
    """A short account of an array argument for an error message."""
    if a.dtype.kind in "iu" and a.size:
        return f"values {int(a.min())}..{int(a.max())}"
    return f"dtype {a.dtype}"


def _gguf():
    try:
        import gguf
    except ImportError as e:  # pragma: no cover - exercised only without the extra
        raise ImportError(
            "GGUF support needs the 'gguf' package (>= 0.18.0 for MXFP4): "
            "pip install 'mlir-mx[gguf]'"
        ) from e
    if not hasattr(gguf.GGMLQuantizationType, "MXFP4"):
        raise ImportError(
            f"the installed gguf {getattr(gguf, '__version__', '?')} has no MXFP4 type; "
            "gguf >= 0.18.0 is needed: pip install 'mlir-mx[gguf]'"
        )
    return gguf


def gguf_package():
    """The ``gguf`` package (gguf-py), checked for MXFP4 support; an ``ImportError``
    saying how to install it otherwise."""
    return _gguf()


def _reject_nan_scales(scales: np.ndarray, arg: str, direction: str) -> None:
    nan = scales == SCALE_NAN_CODE
    if nan.any():
        first = np.unravel_index(int(np.argmax(nan)), scales.shape)
        raise MXValueError(
            f"{arg}: {int(nan.sum())} block(s) have scale byte 255 (first at block index "
            f"{tuple(int(i) for i in first)}): OCP E8M0 reads it as NaN, ggml as 2**127, so it "
            f"cannot be {direction} without changing the values"
        )


def mxfp4_from_ggml(data, shape) -> MXArray:
    """Convert the raw bytes of a ggml MXFP4 tensor to an MXArray of numpy ``shape``.

    ``data`` is a ``uint8`` array (any shape, e.g. the ``(n_out, n_in / 32 * 17)``
    array ``gguf.GGUFReader`` gives) holding ``prod(shape) / 32`` blocks of 17 bytes
    in row-major order; ``shape`` is the numpy shape, ggml's ``ne`` reversed, whose
    last axis is a multiple of 32.  Returns ``MXArray(codes (shape), scales
    (shape[:-1] + (shape[-1] // 32,)), "f4E2M1FN", 32, axis=-1)`` in new
    C-contiguous arrays.
    """
    shape = check_shape(shape, "shape")
    if len(shape) == 0 or shape[-1] % MXFP4_BLOCK:
        raise MXValueError(
            f"shape: ggml MXFP4 needs rank >= 1 and a last axis that is a multiple of 32, "
            f"got {shape}"
        )
    data = np.asarray(data)
    if data.dtype != np.uint8:
        raise MXArgTypeError(
            f"data: expected the raw uint8 bytes of the tensor, got dtype {data.dtype}"
        )
    nblocks = int(np.prod(shape)) // MXFP4_BLOCK
    if data.size != nblocks * MXFP4_BLOCK_BYTES:
        raise MXValueError(
            f"data: {data.size} bytes do not hold the {nblocks} MXFP4 blocks of shape {shape} "
            f"({nblocks * MXFP4_BLOCK_BYTES} bytes)"
        )
    blocks = data.reshape(nblocks, MXFP4_BLOCK_BYTES)
    # the explicit count: -1 cannot be inferred for a tensor with no elements
    scales = blocks[:, 0].copy().reshape(shape[:-1] + (shape[-1] // MXFP4_BLOCK,))
    _reject_nan_scales(scales, "data", "read as MXFP4")
    qs = blocks[:, 1:]
    codes = np.empty((nblocks, MXFP4_BLOCK), np.uint8)
    codes[:, :16] = qs & np.uint8(0x0F)
    codes[:, 16:] = qs >> np.uint8(4)
    return MXArray(
        codes=codes.reshape(shape).view(_F4.dtype),
        scales=scales.view(SCALE_DTYPE),
        element=_F4.name,
        block_size=MXFP4_BLOCK,
        axis=-1,
        copy=False,  # new arrays of ours (the codes are packed, the scales kept)
    )


def mxfp4_packed_from_ggml(data, rows: int, n: int, out=None) -> tuple[np.ndarray, np.ndarray]:
    """The raw bytes of a ggml MXFP4 matrix ``(rows, n)`` (``rows * n / 32`` blocks
    of 17 bytes, ``uint8``) as the stored form of an MXArray blocked along ``n``
    (:meth:`MXArray.from_packed`): ``(packed (rows, n / 2), scales (rows, n / 32))``,
    two codes a byte, element ``2j`` in the low nibble.  This is the one
    conversion: the scale bytes are gathered and the nibbles re-paired from
    ggml's split halves (byte ``j`` of a block: elements ``j`` and ``j + 16``);
    no value is decoded.  ``out``: a ``(packed, scales)`` pair of ``uint8`` arrays
    of those shapes to write into (views, e.g. every other row); else new
    arrays.  Scale byte 255 is refused as in :func:`mxfp4_from_ggml`."""
    blocks, rows, n = matrix_blocks(data, rows, n, "MXFP4", MXFP4_BLOCK, MXFP4_BLOCK_BYTES)
    shapes = ((rows, n // 2), (rows, n // MXFP4_BLOCK))
    if out is None:
        out = tuple(np.empty(sh, np.uint8) for sh in shapes)
    elif not (
        isinstance(out, (tuple, list)) and len(out) == 2
        and all(isinstance(o, np.ndarray) and o.dtype == np.uint8 and o.shape == sh
                for o, sh in zip(out, shapes, strict=True))
    ):  # fmt: skip
        raise MXValueError(
            f"out: expected a (packed, scales) pair of uint8 arrays of shapes {shapes[0]} and "
            f"{shapes[1]}"
        )
    packed, scales = out
    scales[...] = blocks[:, :, 0]
    _reject_nan_scales(scales, "data", "read as MXFP4")
    qs = blocks[:, :, 1:]
    lo, hi = qs & np.uint8(0x0F), qs >> np.uint8(4)  # elements 0..15, 16..31
    view = packed.reshape(rows, n // MXFP4_BLOCK, MXFP4_BLOCK // 2)
    # a view for any 2-D ``packed`` (splitting one strided axis needs no copy), so the
    # writes below land in ``out``
    view[:, :, :8] = lo[:, :, 0::2] | (lo[:, :, 1::2] << np.uint8(4))
    view[:, :, 8:] = hi[:, :, 0::2] | (hi[:, :, 1::2] << np.uint8(4))
    return packed, scales


def mxfp4_to_ggml(a: MXArray) -> np.ndarray:
    """The raw ggml MXFP4 bytes of ``a``: ``uint8`` of shape ``a.shape[:-1] + (n / 32 * 17,)``.

    ``a`` must be ``f4E2M1FN`` with block size 32 along its last axis (ggml's
    ``ne0``; use :func:`mlir_mx.interop.transpose` for a weight blocked along axis
    0) and no NaN scale (byte 255).
    """
    if not isinstance(a, MXArray):
        raise MXArgTypeError(f"a: expected an MXArray, got {type(a).__name__}")
    if a.element != _F4.name or a.block_size != MXFP4_BLOCK or a.axis != a.ndim - 1:
        raise MXValueError(
            f"a: ggml MXFP4 is f4E2M1FN in blocks of 32 along the last axis; got {a.element} "
            f"in blocks of {a.block_size} along axis {a.axis} of shape {a.shape}"
        )
    scales = a.scales.view(np.uint8)
    _reject_nan_scales(scales, "a", "written as ggml MXFP4")
    codes = np.ascontiguousarray(a.codes).view(np.uint8).reshape(-1, MXFP4_BLOCK)
    out = np.empty((codes.shape[0], MXFP4_BLOCK_BYTES), np.uint8)
    out[:, 0] = scales.reshape(-1)
    out[:, 1:] = codes[:, :16] | (codes[:, 16:] << np.uint8(4))
    return out.reshape(a.shape[:-1] + (a.shape[-1] // MXFP4_BLOCK * MXFP4_BLOCK_BYTES,))


def read_gguf(path: str | os.PathLike, names=None) -> dict[str, MXArray]:
    """Read the MXFP4 tensors of the GGUF file ``path`` as MXArrays, by tensor name.

    With ``names`` (an iterable of tensor names) exactly those are read, in that
    order; a name missing from the file or naming a tensor of another type raises
    ``ValueError``.  Without it every MXFP4 tensor is read and the others are
    skipped.  Each tensor's numpy shape is its GGUF ``ne`` reversed.

    A file that is not a well-formed GGUF file raises ``ValueError: <path>: not a
    readable GGUF file (<why>)`` before anything is allocated: every count, length
    and offset it declares is checked against its size first
    (:mod:`~mlir_mx.interop.gguf_format`).  A missing file raises
    ``FileNotFoundError``.
    """
    where = str(path_argument(path))
    gguf = _gguf()
    if names is not None:
        wanted = [names] if isinstance(names, str) else list(names)
    with _mapped(where) as buf:
        try:
            infos = parse_gguf(buf, gguf.GGML_QUANT_SIZES)
        except ValueError as e:
            raise MXValueError(f"{where}: not a readable GGUF file ({e})") from None
        mxfp4 = int(gguf.GGMLQuantizationType.MXFP4)
        by_name = {t.name: t for t in infos}
        if names is None:
            wanted = [n for n, t in by_name.items() if t.type == mxfp4]
        out = {}
        for name in wanted:
            t = by_name.get(name)
            if t is None:
                have = ", ".join(n for n, t in by_name.items() if t.type == mxfp4) or "none"
                raise MXValueError(f"{where}: no tensor {name!r} (MXFP4 tensors: {have})")
            if t.type != mxfp4:
                raise MXValueError(
                    f"{where}: tensor {name!r} is {gguf.GGMLQuantizationType(t.type).name}, "
                    "not MXFP4"
                )
            data = np.frombuffer(buf[t.start : t.start + t.nbytes], np.uint8)  # a copy
            try:
                out[name] = mxfp4_from_ggml(data, t.shape)
            except ValueError as e:
                raise MXValueError(f"{where}: tensor {name!r}: {e}") from None
    return out


@dataclass
class GGUFFile:
    """A GGUF file opened by :func:`open_gguf`: its tensors (checked, by name),
    its scalar metadata (by key), and views of its memory-mapped bytes."""

    path: str
    tensors: dict[str, TensorInfo]
    metadata: dict
    buf: object
    spans: list

    def data(self, name: str, index: int | None = None) -> np.ndarray:
        """The raw bytes of tensor ``name`` (of its ``index``-th slice along its
        first numpy axis), ``uint8``, a view of the map (no copy); noted for
        :meth:`release`."""
        t = self.tensors[name]
        start, nbytes = t.start, t.nbytes
        if index is not None:
            nbytes //= t.shape[0]
            start += index * nbytes
        a = np.frombuffer(self.buf, np.uint8, nbytes, start) if nbytes else np.empty(0, np.uint8)
        self.spans.append((a.ctypes.data, nbytes))
        return a

    def release(self) -> int:
        """Drop the pages of the bytes read so far from the process's RSS
        (:func:`mlir_mx.files.release_file_pages`); the bytes released."""
        spans, self.spans = self.spans, []
        return release_file_pages(spans, [self.path])


@contextmanager
def open_gguf(path: str | os.PathLike) -> Iterator[GGUFFile]:
    """The GGUF file ``path``, memory-mapped and checked (every count, length
    and offset, as :func:`read_gguf` does), as a :class:`GGUFFile`.  A file that
    does not read raises ``MXValueError`` naming ``path``; a missing one
    ``FileNotFoundError``.  Views from :meth:`GGUFFile.data` must not outlive
    the ``with`` block (the map is closed there once no view holds it)."""
    where = str(path_argument(path))
    gguf = _gguf()
    with _mapped(where) as buf:
        metadata: dict = {}
        try:
            infos = parse_gguf(buf, gguf.GGML_QUANT_SIZES, metadata)
        except ValueError as e:
            raise MXValueError(f"{where}: not a readable GGUF file ({e})") from None
        yield GGUFFile(where, {t.name: t for t in infos}, metadata, buf, [])


@contextmanager
def _mapped(path: str):
    """The file's bytes, memory-mapped (read-only); ``b""`` for an empty file."""
    try:
        f = open(path, "rb")  # noqa: SIM115 - closed below
    except FileNotFoundError:
        raise
    except OSError as e:  # a folder, no permission, ...
        raise MXValueError(f"{path}: not a readable GGUF file ({e.strerror or e})") from None
    with f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            yield b""
            return
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        try:
            yield mm
        finally:
            try:
                mm.close()
            except BufferError:  # a view still holds it: closed when the last one goes
                pass


#: Metadata keys the writer sets itself (``arch=``, the default alignment).
_WRITER_KEYS = ("general.architecture", "general.alignment")
#: ggml's GGML_MAX_NAME: llama.cpp refuses tensor names of 64 bytes or more.
_MAX_NAME_BYTES = 63
_INT64 = (-(2**63), 2**63 - 1)


def _utf8(text: str, what: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise MXValueError(
            f"{what}: not encodable as UTF-8 ({e.reason} at index {e.start})"
        ) from None


def _check_metadata(metadata: Mapping) -> list[tuple[str, str, object]]:
    """``(key, GGUF value type name, value)`` of every entry, all checked first."""
    if not isinstance(metadata, Mapping):
        raise MXArgTypeError(f"metadata: expected a mapping, got {type(metadata).__name__}")
    out = []
    for key, value in metadata.items():
        if not isinstance(key, str) or not key:
            raise MXArgTypeError(f"metadata: keys must be non-empty str, got {key!r}")
        _utf8(key, f"metadata key {key!r}")
        if key in _WRITER_KEYS:
            raise MXValueError(
                f"metadata: {key!r} is set by write_gguf (use arch= for the architecture)"
            )
        if isinstance(value, bool):
            out.append((key, "BOOL", value))
        elif isinstance(value, int):
            if not _INT64[0] <= value <= _INT64[1]:
                raise MXValueError(f"metadata: {key!r} = {value} does not fit in int64")
            out.append((key, "INT64", value))
        elif isinstance(value, float):
            out.append((key, "FLOAT64", value))
        elif isinstance(value, str):
            _utf8(value, f"metadata: {key!r}")
            out.append((key, "STRING", value))
        else:
            raise MXArgTypeError(
                f"metadata: {key!r} has a {type(value).__name__}; bool, int, float or str expected"
            )
    return out


def _check_name(name) -> None:
    if not isinstance(name, str) or not name:
        raise MXArgTypeError(f"tensors: names must be non-empty str, got {name!r}")
    _utf8(name, f"tensors: name {name!r}")
    if len(name.encode("utf-8")) > _MAX_NAME_BYTES:
        raise MXValueError(
            f"tensors: name {name!r} is longer than {_MAX_NAME_BYTES} bytes (ggml's limit)"
        )


def _check_tensor(gguf, name, a) -> np.ndarray:
    """The ggml bytes of ``tensors[name]``, after every check the reader makes
    of a tensor (:func:`~mlir_mx.interop.gguf_format.check_tensor`)."""
    _check_name(name)
    try:
        if not isinstance(a, MXArray):  # float weights: converted here, at memory speed
            from mlir_mx.convert import quantize

            a = quantize(a, "f4E2M1FN", 32, axis=-1)
        if not 1 <= a.ndim <= 4:
            raise MXValueError(f"GGUF holds 1 to 4 dimensions, got shape {a.shape}")
        data = mxfp4_to_ggml(a)
        mxfp4 = int(gguf.GGMLQuantizationType.MXFP4)
        check_tensor(name, tuple(reversed(a.shape)), mxfp4, gguf.GGML_QUANT_SIZES)
    except (TypeError, ValueError) as e:
        raise user_error(e, f"tensors[{name!r}]: {e}") from None
    return data


def write_gguf(
    path: str | os.PathLike,
    tensors: Mapping,
    *,
    arch: str = "mlir-mx",
    metadata: Mapping | None = None,
) -> None:
    """Write ``tensors`` (name -> MXFP4 MXArray) to a GGUF file at ``path``.

    ``arch`` becomes ``general.architecture``; ``metadata`` adds key/values (bool,
    int as int64, float as float64, str).  A float array (numpy or DLPack, e.g.
    f32 weights ``(n_out, n_in)``) is quantized to MXFP4 here, blocks of 32
    along its last axis, with the compiled :func:`mlir_mx.quantize` (bit for bit
    the oracle's).  Everything is checked before the file is touched: every
    array must be valid for :func:`mxfp4_to_ggml` (rank 1 to 4) and pass the
    reader's own check of a tensor
    (:func:`~mlir_mx.interop.gguf_format.check_tensor`: fewer than 2^60
    elements, empty dimensions aside), names are
    non-empty UTF-8 of at most 63 bytes (ggml's limit), ints fit int64, and
    ``general.architecture`` / ``general.alignment`` are the writer's own.  The
    file is written to a temporary file in the same folder and renamed over
    ``path`` once complete (:func:`mlir_mx.files.atomic_path`): a failure leaves
    an existing file untouched, and a file this function writes reads back with
    :func:`read_gguf`.
    """
    gguf = _gguf()
    if not isinstance(tensors, Mapping) or not tensors:
        raise MXValueError("tensors: expected a non-empty mapping of name -> MXArray")
    if not isinstance(arch, str) or not arch:
        raise MXArgTypeError(f"arch: expected a non-empty str, got {arch!r}")
    _utf8(arch, "arch")
    entries = _check_metadata(metadata if metadata is not None else {})
    raw = {name: _check_tensor(gguf, name, a) for name, a in tensors.items()}
    with atomic_path(path) as tmp:
        writer = gguf.GGUFWriter(tmp, arch)
        try:
            for key, vtype, value in entries:  # not add_string: it drops an empty str
                writer.add_key_value(key, value, gguf.GGUFValueType[vtype])
            for name, data in raw.items():
                writer.add_tensor(name, data, raw_dtype=gguf.GGMLQuantizationType.MXFP4)
            writer.write_header_to_file()
            writer.write_kv_data_to_file()
            writer.write_tensors_to_file()
        finally:
            writer.close()

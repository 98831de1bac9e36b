"""``MXArray``: an MX-encoded tensor held in its stored form, and the checks it shares
with :mod:`mlir_mx.numerics.mx` (block size, axis, blocked shape, scale shape).

An ``MXArray`` keeps what a kernel reads and nothing else: FP4/FP6 codes packed
(``numerics.packing``, wherever :func:`is_packed_storage` says so), other codes one
per byte, and one E8M0 byte per block.  The logical one-code-per-byte ``codes`` are
computed on demand.  It is a value: its arrays are read-only and no writeable
array outside it reaches them, so a prepared copy of it (``mlir_mx.matmul``'s
per-weight cache, a ``Linear``) can never go stale (``docs/numerics.md``,
"MXArray: the stored form").
"""

from __future__ import annotations

import numpy as np

from mlir_mx.errors import MXArgTypeError, MXValueError

from . import formats
from .blocks import check_block_size, check_blocked_shape, check_shape, normalize_axis
from .formats import (
    E4M3_SCALE_TYPE,
    SCALE_TYPE,
    ElementFormat,
    block_scaling,
    decode_e4m3_scales,
    decode_elements,
    decode_scales,
    scale_rule,
)
from .packing import is_packed_storage, pack_codes, packed_shape, unpack_codes

__all__ = ["MXArray", "check_global_scale", "scale_shape"]


def scale_shape(shape, block_size: int, axis: int) -> tuple[int, ...]:
    """Shape of the E8M0 scale tensor: ``shape`` with ``shape[axis] // block_size``.

    Raises ``ValueError`` when ``shape[axis]`` is not a multiple of ``block_size``.
    """
    shape = check_shape(shape)
    if len(shape) == 0:
        raise MXValueError("shape: MX arrays need rank >= 1, got a rank-0 shape")
    block_size = check_block_size(block_size)
    axis = normalize_axis(axis, len(shape))
    check_blocked_shape(shape, block_size, axis, "shape")
    out = list(shape)
    out[axis] //= block_size
    return tuple(out)


# --------------------------------------------------------------------------- ownership


def _read_only_throughout(a: np.ndarray) -> bool:
    """True when no writeable array or buffer reaches ``a``'s memory: ``a`` and
    every array it views are read-only, and the object at the bottom (``bytes``,
    a read-only ``mmap``, ...) exposes a read-only buffer."""
    while isinstance(a, np.ndarray):
        if a.flags.writeable:
            return False
        a = a.base
    if a is None:
        return True
    try:
        return memoryview(a).readonly
    except TypeError:
        return False


def _held(a: np.ndarray, copy: bool | None) -> np.ndarray:
    """The C-contiguous array an MXArray keeps for ``a`` (its private owner).

    ``copy=None``: ``a`` itself when it is C-contiguous and read-only all the
    way down (nobody can change it), else a private copy.  ``copy=True``:
    always a copy.  ``copy=False``: ``a`` itself when C-contiguous: the caller
    hands it over and must not write it through another reference afterwards.
    """
    if copy is False and a.flags.c_contiguous:
        return a
    if copy is None and a.flags.c_contiguous and _read_only_throughout(a):
        return a
    return np.array(a, copy=True, order="C")


def _read_only_view(a: np.ndarray, dtype=None) -> np.ndarray:
    view = a.view() if dtype is None else a.view(dtype)
    view.flags.writeable = False
    return view


def _check_global_scale(global_scale, scale_type: str) -> np.float32 | None:
    """The per-tensor global scale of an E4M3-scaled array as a finite, positive
    float32 (None for E8M0 scales, which take none)."""
    if scale_type == SCALE_TYPE:
        if global_scale is not None:
            raise MXValueError(
                f"global_scale: only {E4M3_SCALE_TYPE}-scaled (NVFP4) arrays have one, "
                f"these scales are {SCALE_TYPE}"
            )
        return None
    if global_scale is None:
        raise MXValueError(f"global_scale: {E4M3_SCALE_TYPE}-scaled (NVFP4) arrays need one")
    return check_global_scale(global_scale)


def check_global_scale(global_scale) -> np.float32:
    """A given NVFP4 global scale as a finite, positive float32, else
    ``MXArgTypeError`` / ``MXValueError`` naming ``global_scale``."""
    if isinstance(global_scale, np.ndarray) and global_scale.size == 1:
        global_scale = global_scale.reshape(())[()]  # a numpy scalar of its dtype
    if isinstance(global_scale, (bool, np.bool_)) or not isinstance(
        global_scale, (int, float, np.integer, np.floating)
    ):
        raise MXArgTypeError(f"global_scale: expected a real number, got {type(global_scale).__name__}")
    with np.errstate(over="ignore"):
        g = np.float32(global_scale)
    if not (np.isfinite(g) and g > 0):
        raise MXValueError(f"global_scale: must be finite and positive in float32, got {global_scale}")
    return g


def _check_copy(copy) -> bool | None:
    if copy is not None and not isinstance(copy, bool):
        raise MXArgTypeError(f"copy: expected None, True or False, got {type(copy).__name__}")
    return copy


# --------------------------------------------------------------------------- MXArray


class MXArray:
    """An MX-encoded tensor: element codes plus one E8M0 scale per block.

    Made by :func:`mlir_mx.quantize` (or the oracle's), or from its arrays.

    Args:
        codes: the full logical shape, dtype ``element_format(element).dtype``
            (one code per byte; raw ``uint8`` code bytes are accepted for the
            float formats).
        scales: dtype ``ml_dtypes.float8_e8m0fnu`` (or raw ``uint8``), shape
            ``codes.shape`` with ``shape[axis] // block_size``.
        element: the MX element format: its name, or an :class:`ElementFormat`.
        block_size: ``block_size`` consecutive elements along ``axis`` share a scale.
        axis: the blocked axis (normalized to be non-negative).
        copy: ``None`` copies arrays unless nothing can write them
            (:meth:`from_packed` says more), ``True`` always, ``False`` never.

    Raises:
        MXArgTypeError: an array of another dtype, a non-int size.
        MXValueError: an unknown format, shapes that do not match, a bad block
            size or axis.

    **Stored form.**  Codes that pack (:attr:`is_packed`: FP4/FP6 with a last
    axis of whole packing groups) are kept packed and only packed;
    :attr:`codes` unpacks them on each access (a new read-only array).
    :attr:`nbytes` is what the array holds: 4.25 bits per MXFP4 element with
    block 32.  :meth:`packed_codes` / :meth:`from_packed` give and take the
    stored bytes without conversion.

    **A value.**  The arrays it holds are read-only, and arrays given to it are
    copied unless nothing can write them (``copy=None``, the default; see
    :meth:`from_packed` for ``copy=``): to change an MX tensor, make a new one.
    """

    # _stored / _scales: the arrays held (private; writeable when they are our own
    # copies, so that the Runner may pass them to kernels its conservative write
    # analysis cannot clear, execution/arguments.py); the public accessors
    # return the read-only views _stored_bytes / _codes / _scales_view.
    __slots__ = (
        "_stored", "_stored_bytes", "_codes", "_scales", "_scales_view",
        "_shape", "_format", "_block_size", "_axis", "_scale_type", "_global_scale",
        "__weakref__",
    )  # fmt: skip

    def __init__(
        self, codes, scales, element: str | ElementFormat, block_size: int, axis: int = -1, *,
        copy=None, global_scale=None,
    ):
        fmt, scale_type = block_scaling(element)
        copy = _check_copy(copy)
        codes = np.asarray(codes)
        if codes.dtype == np.uint8 and not fmt.is_int:
            codes = codes.view(fmt.dtype)
        if codes.dtype != fmt.dtype:
            raise MXArgTypeError(f"codes: expected dtype {fmt.dtype} for {fmt.name}, got {codes.dtype}")
        if codes.ndim == 0:
            raise MXValueError("codes: MX arrays need rank >= 1, got a rank-0 array")
        if fmt.is_sub_byte and codes.size:
            if (codes.view(np.uint8) >> np.uint8(fmt.bits)).any():
                raise MXValueError(
                    f"codes: {fmt.name} codes must fit in the low {fmt.bits} bits of each byte"
                )
        self._init(codes.shape, scales, fmt, block_size, axis, copy, (scale_type, global_scale))
        if is_packed_storage(codes.shape, fmt):
            self._hold_codes(pack_codes(codes, fmt))  # a new array: ours
        else:
            self._hold_codes(_held(codes, copy))

    def _hold_codes(self, stored: np.ndarray) -> None:
        self._stored = stored
        self._stored_bytes = _read_only_view(stored, np.uint8)
        self._codes = None if self.is_packed else _read_only_view(stored)

    def _init(self, shape, scales, fmt: ElementFormat, block_size, axis, copy, scaling) -> None:
        """Check and set everything but the codes (shared by both constructors);
        ``scaling``: (scale type, global scale as given)."""
        scale_type, global_scale = scaling
        scale_dtype = (
            formats.SCALE_DTYPE if scale_type == SCALE_TYPE else _e4m3_dtype()
        )
        scales = np.asarray(scales)
        if scales.dtype == np.uint8:
            scales = scales.view(scale_dtype)
        if scales.dtype != scale_dtype:
            raise MXArgTypeError(
                f"scales: expected dtype {scale_dtype} ({scale_type}), got {scales.dtype}"
            )
        self._block_size = check_block_size(block_size)
        rule = scale_rule(fmt.name, scale_type, self._block_size)
        if rule is not None:
            raise MXValueError(f"block_size: {rule}")
        self._scale_type = scale_type
        self._global_scale = _check_global_scale(global_scale, scale_type)
        self._axis = normalize_axis(axis, len(shape))
        check_blocked_shape(shape, self._block_size, self._axis, "codes")
        expected = scale_shape(shape, self._block_size, self._axis)
        if scales.shape != expected:
            raise MXValueError(
                f"scales: expected shape {expected} for codes of shape {tuple(shape)} "
                f"(block_size {self._block_size} along axis {self._axis}), got {scales.shape}"
            )
        self._format = fmt
        self._shape = tuple(int(s) for s in shape)
        self._scales = _held(scales, copy)
        self._scales_view = _read_only_view(self._scales)

    @classmethod
    def from_packed(
        cls, packed, scales, element: str | ElementFormat, block_size: int, axis: int = -1, *,
        copy=None, global_scale=None,
    ) -> MXArray:
        """The MXArray whose :meth:`packed_codes` is ``packed`` (a ``uint8`` array
        of the packed shape; for formats and shapes that are not packed, the one
        code per byte array itself).  Nothing is unpacked.

        ``copy`` (for ``packed`` and ``scales``): ``None`` (default) keeps an
        array that is C-contiguous and read-only all the way down (a memmap
        opened ``mode="r"``, an array over ``bytes``) and copies any other;
        ``True`` always copies; ``False`` takes the arrays over without a copy
        and makes them read-only in place (the caller must not write them
        through another reference afterwards).

        Returns:
            The MXArray (its other arguments as :class:`MXArray` takes them).

        Raises:
            MXArgTypeError: ``packed`` not ``uint8``; scales of another dtype.
            MXValueError: shapes that do not match the format and block size.
        """
        fmt, scale_type = block_scaling(element)
        copy = _check_copy(copy)
        block_size = check_block_size(block_size)
        packed = np.asarray(packed)
        if packed.dtype != np.uint8:
            raise MXArgTypeError(f"packed: expected a uint8 array, got dtype {packed.dtype}")
        # The logical last axis follows from the scales (the packed bytes alone
        # are ambiguous: 3 FP6 bytes are 4 packed codes or 3 unpacked ones).
        scale_shape_ = np.shape(scales)
        if packed.ndim == 0 or len(scale_shape_) != packed.ndim:
            raise MXValueError(
                f"packed: expected rank {len(scale_shape_)} like the scales, got shape {packed.shape}"
            )
        blocked_last = normalize_axis(axis, packed.ndim) == packed.ndim - 1
        logical = packed.shape[:-1] + (scale_shape_[-1] * (block_size if blocked_last else 1),)
        if not is_packed_storage(logical, fmt):
            codes = packed.view(np.int8) if fmt.is_int else packed
            return cls(codes, scales, element, block_size, axis, copy=copy, global_scale=global_scale)
        if packed.shape != packed_shape(logical, fmt):
            raise MXValueError(
                f"packed: expected shape {packed_shape(logical, fmt)} for {fmt.name} codes of "
                f"shape {logical} (from the scales), got {packed.shape}"
            )
        out = cls.__new__(cls)
        out._init(logical, scales, fmt, block_size, axis, copy, (scale_type, global_scale))
        # Every packed byte pattern is valid: each 4- or 6-bit field is a code.
        out._hold_codes(_held(packed, copy))
        return out

    # -- what it holds ---------------------------------------------------------------

    @property
    def element(self) -> str:
        """The element format's name (``f4E2M1FN``, ...; :attr:`format` is the format)."""
        return self._format.name

    @property
    def block_size(self) -> int:
        return self._block_size

    @property
    def scale_type(self) -> str:
        """The block scales' type: ``f8E8M0FNU`` (OCP MX) or ``f8E4M3FN`` (NVFP4)."""
        return self._scale_type

    @property
    def global_scale(self) -> np.float32 | None:
        """NVFP4's per-tensor scale (compressed-tensors' ``global_scale``: a
        value is ``code * f32(block_scale / global_scale)``); None for E8M0."""
        return self._global_scale

    @property
    def format_name(self) -> str:
        """The name that makes this array's format: the element's (``f4E2M1FN``)
        for E8M0 scales, ``nvfp4`` for E4M3 scales (:func:`block_scaling`)."""
        if self._scale_type == SCALE_TYPE:
            return self._format.name
        return self._format.e4m3_scaled[0]

    @property
    def axis(self) -> int:
        return self._axis

    @property
    def format(self) -> ElementFormat:
        return self._format

    @property
    def shape(self) -> tuple[int, ...]:
        return self._shape

    @property
    def ndim(self) -> int:
        return len(self._shape)

    @property
    def size(self) -> int:
        """Number of elements (codes)."""
        return int(np.prod(self._shape, dtype=np.int64))

    @property
    def scale_shape(self) -> tuple[int, ...]:
        return tuple(self._scales.shape)

    @property
    def scales(self) -> np.ndarray:
        """The E8M0 scale codes (a read-only view of the array held)."""
        return self._scales_view

    @property
    def codes(self) -> np.ndarray:
        """The element codes, one per byte, in the logical shape (read-only).

        For a packed array (:attr:`is_packed`) this unpacks the stored bytes
        into a new array on every access: bind it to a name when it is used
        more than once, and prefer :meth:`packed_codes` where the stored form
        will do."""
        if self._codes is not None:
            return self._codes
        codes = unpack_codes(self._stored, self.format)
        codes.flags.writeable = False
        return codes

    @property
    def is_packed(self) -> bool:
        """True when this array's codes are stored packed (FP4 two per byte, FP6
        four per three bytes, along the last axis): :func:`is_packed_storage`."""
        return is_packed_storage(self._shape, self._format)

    def packed_codes(self) -> np.ndarray:
        """The codes in their storage layout: packed ``uint8`` bytes when
        :attr:`is_packed`, else the code bytes as they are (``uint8``, one per
        code).  A read-only view of the array held, not a copy: the bytes the
        Runner passes for an ``!mx.tensor`` argument under
        ``mx-to-linalg{subbyte-storage=packed}`` (the default)."""
        return self._stored_bytes

    def held_buffers(self) -> tuple[np.ndarray, np.ndarray]:
        """``(stored code bytes as uint8, scales)``: the arrays held themselves,
        for code that passes them to a kernel that only reads them (the Runner,
        ``mlir_mx.Linear``).  They are writeable when this array owns them,
        because the Runner refuses a read-only buffer wherever its conservative
        write analysis cannot rule a write out; never write them: every holder
        of this array relies on it being a value."""
        stored = self._stored
        return (stored if stored.dtype == np.uint8 else stored.view(np.uint8)), self._scales

    @property
    def nbytes(self) -> int:
        """Bytes of the arrays this MXArray holds: the stored codes plus one byte per scale."""
        return self._stored.nbytes + self._scales.nbytes

    # -- values ------------------------------------------------------------------------

    def element_values(self) -> np.ndarray:
        """Real values of the element codes (float64, exact, unscaled)."""
        return decode_elements(self.codes, self.format)

    def scale_values(self) -> np.ndarray:
        """Values of the block scales (float64, exact; NaN for E8M0 code 255 and
        the E4M3 NaN codes).  For E4M3 scales these are the block scales
        themselves; a block's factor is ``f32(scale / global_scale)``."""
        if self._scale_type == SCALE_TYPE:
            return decode_scales(self._scales)
        return decode_e4m3_scales(self._scales)

    def block_factors(self) -> np.ndarray:
        """What each block's codes are multiplied by, as float64 holding an f32
        value: the E8M0 scale, or for NVFP4 ``f32(block_scale / global_scale)``
        (one f32 division, compressed-tensors' order)."""
        s = self.scale_values()
        if self._scale_type == SCALE_TYPE:
            return s
        with np.errstate(over="ignore", under="ignore", invalid="ignore"):
            return (s.astype(np.float32) / self._global_scale).astype(np.float64)

    def dequantize(self) -> np.ndarray:
        """:func:`mlir_mx.numerics.dequantize` of this array (float32)."""
        vals = self.element_values()
        scales = np.repeat(self.block_factors(), self.block_size, axis=self.axis)
        with np.errstate(over="ignore", invalid="ignore"):
            return (vals * scales).astype(np.float32)

    def bitwise_equal(self, other: MXArray) -> bool:
        """True when both arrays have the same layout and identical code and scale bytes."""
        return (
            isinstance(other, MXArray)
            and self._format == other._format
            and self._block_size == other._block_size
            and self._axis == other._axis
            and self._shape == other._shape
            and self._scale_type == other._scale_type
            and _same_bits(self._global_scale, other._global_scale)
            and np.array_equal(self.packed_codes(), other.packed_codes())
            and np.array_equal(self._scales.view(np.uint8), other._scales.view(np.uint8))
        )

    def __repr__(self) -> str:
        scaling = (
            "" if self._global_scale is None
            else f", scale_type={self._scale_type}, global_scale={self._global_scale!r}"
        )
        return (
            f"MXArray(shape={self._shape}, element={self.element}, block_size="
            f"{self._block_size}, axis={self._axis}{scaling}, packed={self.is_packed}, "
            f"nbytes={self.nbytes})"
        )

    # -- pickling: keep the stored form, and read-only after a round trip --------------

    def __reduce__(self):
        return (
            _restore,
            (
                self.packed_codes(), self._scales.view(np.uint8), self.format_name,
                self._block_size, self._axis, self._global_scale,
            ),
        )  # fmt: skip


def _restore(packed, scales, element, block_size, axis, global_scale=None) -> MXArray:
    return MXArray.from_packed(
        packed, scales, element, block_size, axis, copy=False, global_scale=global_scale
    )


def _same_bits(a, b) -> bool:
    if a is None or b is None:
        return a is b
    return np.float32(a).view(np.uint32) == np.float32(b).view(np.uint32)


def _e4m3_dtype() -> np.dtype:
    """The numpy dtype of E4M3 scales (the element format of the same name)."""
    return formats.ELEMENT_FORMATS[E4M3_SCALE_TYPE].dtype

"""OCP MX v1.0 element and scale formats.

Each element format is described by an :class:`ElementFormat`, keyed by its MLIR
type spelling (``f8E4M3FN``, ``f8E5M2``, ``f6E2M3FN``, ``f6E3M2FN``, ``f4E2M1FN``,
``i8``).  Floating-point element codes are stored in the matching ``ml_dtypes``
dtype, one element per byte (FP6/FP4 are NOT packed; the code sits in the low
``bits`` bits of the byte, the ``ml_dtypes`` layout).  MXINT8 codes are ``np.int8``;
code ``c`` represents ``c * 2**-6``.

The shared scale is E8M0 (``f8E8M0FNU``): code ``k`` in 0..254 is ``2**(k - 127)``
(code 0 is ``2**-127``, an f32 subnormal, never zero) and code 255 is NaN.

This module is the one table of formats: every other list of them in mlir-mx
(the dialect's element types, the narrow-float expansion, the sub-byte
legalization, the Runner's dtypes, ...) is derived from :data:`ELEMENT_FORMATS`
and the ``SCALE_*`` constants, or checked against them by
``tests/dialect/test_tables.py``.

See ``docs/numerics.md`` for the full semantics.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import numpy as np

from mlir_mx.errors import MXArgTypeError, MXValueError

__all__ = [
    "ELEMENT_FORMATS",
    "FORMAT_ALIASES",
    "SCALE_BIAS",
    "SCALE_BITS",
    "SCALE_DTYPE",  # noqa: F822 - made on first use by __getattr__
    "SCALE_NAN_CODE",
    "SCALE_TYPE",
    "ElementFormat",
    "E4M3_SCALED",
    "E4M3_SCALE_TYPE",
    "NVFP4",
    "NVFP4_BLOCK_SIZE",
    "SCALE_TYPES",
    "block_scaling",
    "decode_e4m3_scales",
    "decode_elements",
    "decode_scales",
    "element_format",
    "element_bits",
    "finite_codes",
    "format_names",
    "scale_rule",
]

SCALE_TYPE = "f8E8M0FNU"
# SCALE_DTYPE (np.dtype(ml_dtypes.float8_e8m0fnu)) is made on first use by the
# module's __getattr__ below: importing ml_dtypes 0.7 costs 0.8-1 s (numpy's
# ufunc loop registration), which every mx-opt process paid for nothing.
SCALE_BITS = 8  # all exponent: no sign, no mantissa
SCALE_BIAS = 127
SCALE_NAN_CODE = 255

#: The second block-scale type: NVFP4's E4M3 scale (``f8E4M3FN``, the
#: element type of the same name), always with a per-tensor f32 global scale.
E4M3_SCALE_TYPE = "f8E4M3FN"
#: Every block-scale type (the dialect's ``scale_type`` values).
SCALE_TYPES = (SCALE_TYPE, E4M3_SCALE_TYPE)
#: The name (lower case) of the one format with E4M3 block scales.
NVFP4 = "nvfp4"
#: NVFP4's block size, the only one E4M3 scales come with.
NVFP4_BLOCK_SIZE = 16


@dataclass(frozen=True)
class ElementFormat:
    """One MX element format.

    ``ebits``/``mbits``/``bias`` describe the floating-point layout (for ``i8``:
    ``ebits = 0``, ``mbits = 6`` fractional bits, ``bias = 0``).  ``emax`` is the
    exponent of the largest power of two that is a normal value (the ``emax_elem``
    of the OCP spec), ``max_normal`` the largest finite magnitude, and
    ``min_subnormal`` the smallest positive magnitude (``2**-6`` for ``i8``).

    Behaviour that code would otherwise re-derive from names and widths:

    * ``group``: ``(codes, bytes)`` of one packing group in packed storage
      (FP4 two codes per byte, FP6 four per three bytes, 8-bit formats 1:1;
      :mod:`mlir_mx.numerics.packing`);
    * ``widening``: how compiled code widens a code to its exact value
      (:mod:`mlir_mx.kernels.common.codec`): ``"values"`` (few enough codes for a
      16-entry value table in one register: FP4), ``"f16"`` (the code's bits
      placed into an f16, then a hardware f16 -> f32 conversion), ``"int"``
      (a signed integer conversion, then the fixed-point scale);
    * ``int_exp2``: where it exists, the power of two that makes every value
      an integer small enough for the CPU's integer dot units
      (``value * 2**int_exp2`` in int8, or int16 for E3M2): E2M1 1, E2M3 3,
      E3M2 4, INT8 6 (the codes themselves); None for FP8, whose values span
      too many binades.
    """

    name: str
    #: The numpy dtype of one code, by name: an ``ml_dtypes`` type, or
    #: ``int8`` (:attr:`dtype`; ml_dtypes is imported on first use).
    dtype_name: str
    bits: int
    emax: int
    max_normal: float
    ebits: int
    mbits: int
    bias: int
    min_subnormal: float
    is_int: bool = False
    has_nan: bool = False
    has_inf: bool = False
    group: tuple[int, int] = (1, 1)
    widening: str = "f16"
    int_exp2: int | None = None
    #: Other names users type for this format (lower case, looked up
    #: case-insensitively by :func:`element_format`): the OCP/MLX ``mxfp4``
    #: style, torch's and torchao's dtype names.  Never IR syntax.
    aliases: tuple[str, ...] = field(default=(), repr=False, compare=False)
    #: Names of formats with these elements and E4M3 block scales in blocks
    #: of :data:`NVFP4_BLOCK_SIZE` with a per-tensor f32 global scale
    #: (:func:`block_scaling`): ``nvfp4`` on E2M1.  Not element aliases:
    #: :func:`element_format` refuses them, with the places that take them.
    e4m3_scaled: tuple[str, ...] = field(default=(), repr=False, compare=False)

    @property
    def dtype(self) -> np.dtype:
        """The numpy dtype of one code (``ml_dtypes.float8_e4m3fn``, ..., ``int8``)."""
        return _code_dtype(self.dtype_name)

    @property
    def is_sub_byte(self) -> bool:
        """True when a code has fewer than 8 bits (FP6, FP4): one code per byte
        in memory (ml_dtypes' and memref's layout), but LLVM bit-packs vectors
        of such types."""
        return self.bits < 8

    @property
    def int_bits(self) -> int | None:
        """Bits of the integers ``value * 2**int_exp2`` (8 or 16; None without ``int_exp2``)."""
        if self.int_exp2 is None:
            return None
        return 8 if self.max_normal * 2.0**self.int_exp2 < 128 else 16

    @property
    def mx_name(self) -> str:
        """The OCP name of the MX format with these elements: ``MXFP8`` (E4M3
        and E5M2), ``MXFP6``, ``MXFP4``, ``MXINT8``."""
        return f"MX{'INT' if self.is_int else 'FP'}{self.bits}"

    @property
    def num_codes(self) -> int:
        """Number of distinct codes (``2**bits``)."""
        return 1 << self.bits

    @property
    def sign_bit(self) -> int:
        """Mask of the sign bit inside the code byte (float formats only)."""
        return 1 << (self.bits - 1)


@functools.cache
def _code_dtype(name: str) -> np.dtype:
    if name == "int8":
        return np.dtype(np.int8)
    import ml_dtypes

    return np.dtype(getattr(ml_dtypes, name))


def __getattr__(name: str):
    """``SCALE_DTYPE``, made (and kept) on first use."""
    if name == "SCALE_DTYPE":
        value = globals()[name] = _code_dtype("float8_e8m0fnu")
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _fp(name, dtype, bits, ebits, mbits, bias, emax, max_normal, has_nan, has_inf, **more):
    return ElementFormat(
        name=name,
        dtype_name=dtype,
        bits=bits,
        emax=emax,
        max_normal=float(max_normal),
        ebits=ebits,
        mbits=mbits,
        bias=bias,
        min_subnormal=float(2.0 ** (1 - bias - mbits)),
        has_nan=has_nan,
        has_inf=has_inf,
        **more,
    )


ELEMENT_FORMATS: dict[str, ElementFormat] = {
    f.name: f
    for f in (
        _fp("f8E4M3FN", "float8_e4m3fn", 8, 4, 3, 7, 8, 448.0, True, False,
            aliases=("mxfp8", "mxfp8_e4m3", "float8_e4m3fn")),
        _fp("f8E5M2", "float8_e5m2", 8, 5, 2, 15, 15, 57344.0, True, True,
            aliases=("mxfp8_e5m2", "float8_e5m2")),
        # mxfp6 is E2M3: the OCP spec lists it first, and AMD Quark's MXFP6 is E2M3.
        _fp("f6E2M3FN", "float6_e2m3fn", 6, 2, 3, 1, 2, 7.5, False, False,
            group=(4, 3), int_exp2=3,
            aliases=("mxfp6", "mxfp6_e2m3", "fp6_e2m3", "float6_e2m3fn")),
        _fp("f6E3M2FN", "float6_e3m2fn", 6, 3, 2, 3, 4, 28.0, False, False,
            group=(4, 3), int_exp2=4, aliases=("mxfp6_e3m2", "fp6_e3m2", "float6_e3m2fn")),
        _fp("f4E2M1FN", "float4_e2m1fn", 4, 2, 1, 1, 2, 6.0, False, False,
            group=(2, 1), widening="values", int_exp2=1,
            aliases=("mxfp4", "mxfp4_e2m1", "fp4_e2m1", "float4_e2m1fn", "float4_e2m1fn_x2"),
            e4m3_scaled=(NVFP4,)),
        ElementFormat(
            name="i8",
            dtype_name="int8",
            bits=8,
            emax=0,
            max_normal=127.0 / 64.0,
            ebits=0,
            mbits=6,
            bias=0,
            min_subnormal=2.0**-6,
            is_int=True,
            widening="int",
            int_exp2=6,
            aliases=("mxint8",),
        ),
    )
}

#: Every alias (lower case) -> the name of its format, derived from the
#: table's ``aliases``: ``"mxfp4"`` -> ``"f4E2M1FN"``, ``"mxfp6"`` ->
#: ``"f6E2M3FN"`` (E2M3 is MXFP6's default; ``"mxfp6_e3m2"`` names the other),
#: ``"mxfp8"`` -> ``"f8E4M3FN"``, ``"mxint8"`` -> ``"i8"``, ...
FORMAT_ALIASES: dict[str, str] = {
    alias: f.name for f in ELEMENT_FORMATS.values() for alias in f.aliases
}

#: The E4M3-scaled format names (``"nvfp4"``) -> the name of their element
#: format, derived from the table's ``e4m3_scaled``.
E4M3_SCALED: dict[str, str] = {
    name: f.name for f in ELEMENT_FORMATS.values() for name in f.e4m3_scaled
}


def scale_rule(element: str, scale_type: str, block_size: int) -> str | None:
    """The one rule on (element, scale type, block size) triples, shared by the
    dialect's type verifier and :class:`~mlir_mx.numerics.MXArray`: None when
    the triple is accepted, else why not.

    E8M0 scales (OCP MX) take every element format and any block size.  E4M3
    scales take only the formats of the table's ``e4m3_scaled`` (E2M1: NVFP4)
    and only blocks of :data:`NVFP4_BLOCK_SIZE`: that is the one published
    format with E4M3 block scales, and the one the references
    (compressed-tensors, MLX, ModelOpt) define and check; any other triple
    would be a format with no reference to be bit-exact against.
    """
    if scale_type == SCALE_TYPE:
        return None
    if scale_type != E4M3_SCALE_TYPE:
        return f"scale type {scale_type} is not one of {', '.join(SCALE_TYPES)}"
    fmt = ELEMENT_FORMATS.get(element)
    if fmt is None or not fmt.e4m3_scaled:
        scaled = ", ".join(f"{v} ({k})" for k, v in E4M3_SCALED.items())
        return f"{E4M3_SCALE_TYPE} scales take {scaled} elements only, got {element}"
    if block_size != NVFP4_BLOCK_SIZE:
        return f"{E4M3_SCALE_TYPE} scales take block_size {NVFP4_BLOCK_SIZE} only (NVFP4), got {block_size}"
    return None


def block_scaling(name) -> tuple[ElementFormat, str]:
    """``(element format, scale type)`` of a format name: an E4M3-scaled name
    (``"nvfp4"``, any case) gives E2M1 and ``f8E4M3FN``; every name
    :func:`element_format` takes gives its format and ``f8E8M0FNU``."""
    if isinstance(name, str) and name.lower() in E4M3_SCALED:
        return ELEMENT_FORMATS[E4M3_SCALED[name.lower()]], E4M3_SCALE_TYPE
    return element_format(name), SCALE_TYPE


def format_names() -> str:
    """The names :func:`element_format` takes, for error messages: each format's
    MLIR type name with its aliases, ``f8E4M3FN (mxfp8, ...), ..., i8 (mxint8)``."""
    return ", ".join(
        f"{f.name} ({', '.join(f.aliases)})" if f.aliases else f.name
        for f in ELEMENT_FORMATS.values()
    )


def _torch_dtype_name(obj) -> str | None:
    """``"float8_e4m3fn"`` for ``torch.float8_e4m3fn`` (a torch dtype, told apart
    without importing torch), else None."""
    if type(obj).__name__ == "dtype" and type(obj).__module__ == "torch":
        return str(obj).removeprefix("torch.")
    return None


def element_format(name) -> ElementFormat:
    """Look up an element format by its MLIR type spelling or an alias.

    An :class:`ElementFormat` is returned unchanged.  An alias
    (:data:`FORMAT_ALIASES`, any case: ``"mxfp4"``, ``"MXFP8_E5M2"``,
    ``"float8_e4m3fn"``, ``"fp6_e3m2"``, ...) or a torch dtype
    (``torch.float8_e4m3fn``, ``torch.float4_e2m1fn_x2``) gives the same object
    as the format's name, so ``fmt.name`` is always the MLIR type name.  Unknown
    names raise ``ValueError`` listing the valid names and aliases (never
    ``KeyError``).
    """
    if isinstance(name, ElementFormat):
        return name
    if not isinstance(name, str):
        torch_name = _torch_dtype_name(name)
        if torch_name is None:
            raise MXArgTypeError(
                f"element: expected a format name (str) or a torch dtype, got {type(name).__name__}; "
                f"valid names: {format_names()}"
            )
        if torch_name in FORMAT_ALIASES:
            return ELEMENT_FORMATS[FORMAT_ALIASES[torch_name]]
    elif name in ELEMENT_FORMATS:
        return ELEMENT_FORMATS[name]
    elif name.lower() in FORMAT_ALIASES:
        return ELEMENT_FORMATS[FORMAT_ALIASES[name.lower()]]
    elif name.lower() in E4M3_SCALED:
        raise MXValueError(
            f"element: {name!r} is not an MX element format: it is {E4M3_SCALED[name.lower()]} "
            f"codes with {E4M3_SCALE_TYPE} block scales (blocks of {NVFP4_BLOCK_SIZE}) and a "
            "per-tensor global scale, which quantize / dequantize (the oracle's and the "
            "compiled ones), MXArray and the dialect take (not yet the matmul kernels, "
            "Linear or the torch layers)"
        )
    raise MXValueError(
        f"element: unknown MX element format {str(name)!r}; valid names: {format_names()}"
    )


def element_bits(codes: np.ndarray, element: str | ElementFormat) -> np.ndarray:
    """The raw code bits of element ``codes`` as ``uint8`` (int8 codes as two's complement)."""
    fmt = element_format(element)
    codes = np.asarray(codes)
    if codes.dtype != fmt.dtype:
        raise MXArgTypeError(f"codes: expected dtype {fmt.dtype} for {fmt.name}, got {codes.dtype}")
    return codes.view(np.uint8)


def decode_elements(codes: np.ndarray, element: str | ElementFormat) -> np.ndarray:
    """Real values of element ``codes`` as float64 (exact).

    Float formats decode exactly like ``ml_dtypes`` (including NaN/Inf codes of
    E4M3/E5M2, which MX quantization never produces); ``i8`` code ``c`` decodes to
    ``c / 64`` (code -128 decodes to -2.0 although it is never produced).
    """
    fmt = element_format(element)
    codes = np.asarray(codes)
    if codes.dtype != fmt.dtype:
        raise MXArgTypeError(f"codes: expected dtype {fmt.dtype} for {fmt.name}, got {codes.dtype}")
    if fmt.is_int:
        return codes.astype(np.float64) * 2.0**-6
    return codes.astype(np.float64)


def decode_scales(scales: np.ndarray) -> np.ndarray:
    """Values of E8M0 ``scales`` as float64: ``2**(code - 127)``, NaN for code 255.

    Code 0 is ``2**-127`` (never zero).  Every value is exactly representable in
    float32 (code 0 as an f32 subnormal).
    """
    scales = np.asarray(scales)
    scale_dtype = _code_dtype("float8_e8m0fnu")
    if scales.dtype != scale_dtype:
        raise MXArgTypeError(f"scales: expected dtype {scale_dtype} ({SCALE_TYPE}), got {scales.dtype}")
    k = scales.view(np.uint8).astype(np.int32)
    out = np.ldexp(1.0, k - SCALE_BIAS)
    return np.where(k == SCALE_NAN_CODE, np.nan, out)


def decode_e4m3_scales(scales: np.ndarray) -> np.ndarray:
    """Values of E4M3 block ``scales`` (``ml_dtypes.float8_e4m3fn``) as float64,
    exact; NaN for the codes 0x7f and 0xff."""
    scales = np.asarray(scales)
    dtype = _code_dtype("float8_e4m3fn")
    if scales.dtype != dtype:
        raise MXArgTypeError(f"scales: expected dtype {dtype} ({E4M3_SCALE_TYPE}), got {scales.dtype}")
    return scales.astype(np.float64)


def finite_codes(element: str | ElementFormat) -> np.ndarray:
    """Every code of ``element`` that decodes to a finite value, as a 1-D array.

    For ``i8`` this excludes -128 (a valid decode, -2.0, but never produced by
    quantization); for E4M3 it excludes the two NaN codes, for E5M2 the NaN and
    Inf codes.  Both signed zeros of the float formats are included.
    """
    fmt = element_format(element)
    if fmt.is_int:
        return np.arange(-127, 128, dtype=np.int8)
    raw = np.arange(fmt.num_codes, dtype=np.uint8).view(fmt.dtype)
    return raw[np.isfinite(raw.astype(np.float64))]

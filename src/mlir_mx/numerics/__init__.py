"""The numpy oracle for OCP MX v1.0 block-scaled formats.

Every MX kernel in this project is tested bit-for-bit against :func:`quantize` and
:func:`dequantize`; the semantics are stated in ``docs/numerics.md``.
:func:`pack_codes` / :func:`unpack_codes` convert sub-byte codes between one code
per byte and the packed storage layout (``docs/numerics.md``, "Packed storage").
"""

from .formats import (
    ELEMENT_FORMATS,
    FORMAT_ALIASES,
    SCALE_BIAS,
    SCALE_NAN_CODE,
    SCALE_TYPE,
    ElementFormat,
    decode_elements,
    decode_scales,
    element_bits,
    element_format,
    finite_codes,
    format_names,
)
from .mx import (
    MIN_SHARED_EXP,
    NAN_SHARED_EXP,
    MXArray,
    block_amax,
    dequantize,
    encode_scales,
    f32_exponent,
    fold_scale,
    quantize,
    round_to_element,
    scale_shape,
    shared_exponent,
)
from .packing import (
    is_packed_storage,
    pack_codes,
    packed_shape,
    packing_group,
    unpack_codes,
    unpacked_shape,
)

__all__ = [
    "ELEMENT_FORMATS",
    "FORMAT_ALIASES",
    "MIN_SHARED_EXP",
    "NAN_SHARED_EXP",
    "SCALE_BIAS",
    "SCALE_DTYPE",
    "SCALE_NAN_CODE",
    "SCALE_TYPE",
    "ElementFormat",
    "is_packed_storage",
    "MXArray",
    "block_amax",
    "decode_elements",
    "decode_scales",
    "dequantize",
    "element_bits",
    "element_format",
    "encode_scales",
    "f32_exponent",
    "fold_scale",
    "finite_codes",
    "format_names",
    "pack_codes",
    "packed_shape",
    "packing_group",
    "quantize",
    "round_to_element",
    "scale_shape",
    "shared_exponent",
    "unpack_codes",
    "unpacked_shape",
]


def __getattr__(name: str):
    """``SCALE_DTYPE``, from :mod:`.formats` on first use (it imports ml_dtypes)."""
    if name == "SCALE_DTYPE":
        from . import formats

        return formats.SCALE_DTYPE
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

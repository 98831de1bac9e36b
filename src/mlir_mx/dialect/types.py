"""The ``!mx.tensor`` type: a static tensor of MX-encoded values.

Custom (seed) syntax, as in the v1 dialect, plus an optional block axis::

    !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>
    !mx.tensor<64x48xf4E2M1FN, block_size = 32, scale_type = f8E8M0FNU, axis = 0>

``axis`` is the blocked dimension; when omitted it is the last one, and the
printer omits it when it is the last one, so every v1 text round-trips
unchanged.  The IRDL type underneath has five positional parameters (its
generic form, which is what upstream MLIR prints and parses)::

    !mx.tensor<array<i64: 32, 64>, f8E4M3FN, 32 : i64, f8E8M0FNU, 1 : i64>

:class:`MXTensorType` is the typed Python view of either spelling: parsing,
printing, verification (the v1 rules and messages plus the block-axis ones)
and the derived mantissa/scale tensor types of the 1:N split.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from mlir import ir

from mlir_mx.errors import MXTypeError
from mlir_mx.numerics.formats import (
    E4M3_SCALE_TYPE,
    ELEMENT_FORMATS,
    SCALE_TYPE,
    scale_rule,
)
from mlir_mx.numerics.formats import SCALE_TYPES as _SCALE_TYPES
from mlir_mx.numerics.packing import is_packed_storage, packed_shape

__all__ = [
    "ELEMENT_TYPES",
    "SCALE_TYPES",
    "MXTensorType",
    "MXTypeError",
    "is_mx_type",
]

#: Element (mantissa) types the OCP MX spec defines, spelled as MLIR types
#: (the keys of :data:`mlir_mx.numerics.formats.ELEMENT_FORMATS`).
ELEMENT_TYPES = tuple(ELEMENT_FORMATS)
#: The block-scale types: E8M0 (OCP MX) and E4M3 (NVFP4, with E2M1 elements
#: in blocks of 16 only: :func:`mlir_mx.numerics.formats.scale_rule`).
SCALE_TYPES = _SCALE_TYPES

# MLIR's float types: the ones MX does not use, then the MX ones.
_FLOAT_TYPES = (
    {
        "f16",
        "bf16",
        "f32",
        "f64",
        "f80",
        "f128",
        "tf32",
        "f8E4M3",
        "f8E3M4",
        "f8E4M3FNUZ",
        "f8E5M2FNUZ",
        "f8E4M3B11FNUZ",
    }
    | {f.name for f in ELEMENT_FORMATS.values() if not f.is_int}
    | set(SCALE_TYPES)
)


@dataclass(frozen=True)
class MXTensorType:
    """Typed view of ``!mx.tensor``: shape, element type, block size, scale type, axis."""

    shape: tuple[int, ...]
    element_type: str
    block_size: int
    scale_type: str = SCALE_TYPE
    axis: int | None = None  # None = last axis

    # ------------------------------------------------------------------ derived
    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def block_axis(self) -> int:
        """The blocked dimension, normalized (the last one by default)."""
        return self.rank - 1 if self.axis is None else self.axis

    @property
    def has_global_scale(self) -> bool:
        """True for ``f8E4M3FN`` scales (NVFP4): the ops that produce or read
        such a tensor take its f32 ``global_scale`` operand."""
        return self.scale_type == E4M3_SCALE_TYPE

    @property
    def scale_shape(self) -> tuple[int, ...]:
        """Shape of the scale tensor: the blocked dim divided by the block size."""
        s = list(self.shape)
        s[self.block_axis] //= self.block_size
        return tuple(s)

    def mantissa_tensor_type(self, context: ir.Context | None = None) -> ir.Type:
        """``tensor<shape x element>``: the first value of the 1:N split."""
        return ir.Type.parse(_tensor(self.shape, self.element_type), context)

    @property
    def packs_codes(self) -> bool:
        """True when ``subbyte-storage=packed`` stores this type's codes packed
        (:func:`mlir_mx.numerics.is_packed_storage`: FP4/FP6 whose last axis
        holds whole packing groups)."""
        return is_packed_storage(self.shape, self.element_type)

    def packed_tensor_type(self, context: ir.Context | None = None) -> ir.Type:
        """``tensor<... x L x i8>``: the codes packed along the last axis
        (L = the packed byte count), the storage form at function boundaries
        under ``subbyte-storage=packed``."""
        return ir.Type.parse(_tensor(packed_shape(self.shape, self.element_type), "i8"), context)

    def storage_tensor_types(self, packed: bool, context: ir.Context | None = None) -> list[ir.Type]:
        """The pair an ``!mx.tensor`` splits into at a function boundary: the
        codes (packed when ``packed`` and :attr:`packs_codes`) and the scales."""
        codes = (
            self.packed_tensor_type(context)
            if packed and self.packs_codes
            else self.mantissa_tensor_type(context)
        )
        return [codes, self.scale_tensor_type(context)]

    def scale_tensor_type(self, context: ir.Context | None = None) -> ir.Type:
        """``tensor<scale_shape x scale>``: the second value of the 1:N split."""
        return ir.Type.parse(_tensor(self.scale_shape, self.scale_type), context)

    # ---------------------------------------------------------------- verifying
    def errors(self) -> list[str]:
        """Every rule this parameter set breaks, in the v1 verifier's order."""
        out: list[str] = []
        if not self.shape:
            out.append("shape must have at least one dimension")
        for d in self.shape:
            if d < 0:
                out.append("shape must be static, got a dynamic dimension")
                break
            if d == 0:
                out.append("dimensions must be positive, got 0")
                break
        if self.block_size <= 0:
            out.append(f"block_size must be positive, got {self.block_size}")
        if self.axis is not None and self.shape and not 0 <= self.axis < len(self.shape):
            out.append(f"axis {self.axis} is out of range for a rank-{len(self.shape)} shape")
        if not out and self.shape:
            ax = self.block_axis
            dim = self.shape[ax]
            if dim % self.block_size:
                which = "last dimension" if ax == len(self.shape) - 1 else f"dimension {ax}"
                out.append(f"{which} ({dim}) must be divisible by block_size ({self.block_size})")
        if self.element_type not in ELEMENT_TYPES:
            if self.element_type not in _FLOAT_TYPES and not re.fullmatch(r"[su]?i\d+", self.element_type):
                out.append(f"elementType must be a float type, got {self.element_type}")
            else:
                out.append(
                    f"elementType {self.element_type} is not an MX element type "
                    f"(expected one of {', '.join(ELEMENT_TYPES)})"
                )
        if self.scale_type not in SCALE_TYPES:
            if self.scale_type not in _FLOAT_TYPES:
                out.append(f"scaleType must be a float type, got {self.scale_type}")
            else:
                out.append(
                    f"scaleType {self.scale_type} is not supported: block scales are "
                    f"{SCALE_TYPE} (OCP MX) or {E4M3_SCALE_TYPE} (NVFP4)"
                )
        elif self.block_size > 0:
            rule = scale_rule(self.element_type, self.scale_type, self.block_size)
            if rule is not None:
                out.append(f"scaleType {rule}")
        return out

    def verify(self) -> MXTensorType:
        """Raise :class:`MXTypeError` with the first broken rule; return self."""
        errs = self.errors()
        if errs:
            raise MXTypeError(errs[0])
        return self

    # ----------------------------------------------------------------- printing
    def custom_str(self) -> str:
        """The seed syntax, ``axis`` printed only when it is not the last dim."""
        dims = "x".join(str(d) for d in self.shape)
        text = f"!mx.tensor<{dims}x{self.element_type}, block_size = {self.block_size}, scale_type = {self.scale_type}"
        if self.axis is not None and self.axis != self.rank - 1:
            text += f", axis = {self.axis}"
        return text + ">"

    def generic_str(self) -> str:
        """The IRDL type's positional form, the one upstream parses."""
        dims = ", ".join(str(d) for d in self.shape)
        return (
            f"!mx.tensor<array<i64: {dims}>, {self.element_type}, {self.block_size} : i64, "
            f"{self.scale_type}, {self.block_axis} : i64>"
        )

    __str__ = custom_str

    def to_mlir(self, context: ir.Context | None = None) -> ir.Type:
        """The upstream ``ir.Type`` (the mx dialect must be loaded in ``context``)."""
        self.verify()
        return ir.Type.parse(self.generic_str(), context)

    # ------------------------------------------------------------------ parsing
    @classmethod
    def parse(cls, text: str) -> MXTensorType:
        """Parse either spelling (custom or generic) and verify it."""
        t = cls.parse_unverified(text)
        errs = t.errors()
        if errs:
            raise MXTypeError(errs[0], 0)
        return t

    @classmethod
    def parse_unverified(cls, text: str) -> MXTensorType:
        text = text.strip()
        if not text.startswith("!mx.tensor<") or not text.endswith(">"):
            raise MXTypeError(f"expected '!mx.tensor<...>', got '{text}'")
        body = text[len("!mx.tensor<") : -1]
        base = len("!mx.tensor<")
        if body.lstrip().startswith("array<"):
            return cls._parse_generic(body, base)
        return cls._parse_custom(body, base)

    @classmethod
    def _parse_custom(cls, body: str, base: int) -> MXTensorType:
        parts = _split_top(body)
        if not parts:
            raise MXTypeError("expected shape and element type", base)
        head, hoff = parts[0]
        m = re.fullmatch(r"\s*((?:[0-9?]+x)*)([A-Za-z_][A-Za-z0-9_]*)\s*", head)
        if not m:
            raise MXTypeError(f"expected '<dims>x<element type>', got '{head.strip()}'", base + hoff)
        dims_txt, elem = m.group(1), m.group(2)
        shape: list[int] = []
        for d in dims_txt.split("x")[:-1] if dims_txt else []:
            if "?" in d:
                raise MXTypeError(
                    "!mx.tensor requires a static shape; '?' is not allowed", base + hoff
                )
            shape.append(_int(d, base + hoff, "a dimension"))
        params: dict[str, tuple[str, int]] = {}
        for p, off in parts[1:]:
            if "=" not in p:
                raise MXTypeError(
                    f"expected 'key = value' (block_size, scale_type or axis), got '{p.strip()}'",
                    base + off,
                )
            k, v = p.split("=", 1)
            k = k.strip()
            if k not in ("block_size", "scale_type", "axis"):
                raise MXTypeError(
                    f"unknown !mx.tensor parameter '{k}' (expected block_size, scale_type or axis)",
                    base + off,
                )
            if k in params:
                raise MXTypeError(f"parameter '{k}' given twice", base + off)
            params[k] = (v.strip(), base + off)
        for required in ("block_size", "scale_type"):
            if required not in params:
                raise MXTypeError(f"missing parameter '{required}'", base + len(body))
        bs = _int(*params["block_size"], "block_size")
        axis = _int(*params["axis"], "axis") if "axis" in params else None
        return cls(tuple(shape), elem, bs, params["scale_type"][0], axis)

    @classmethod
    def _parse_generic(cls, body: str, base: int) -> MXTensorType:
        parts = _split_top(body)
        if len(parts) != 5:
            raise MXTypeError(
                "expected 5 parameters (shape, element type, block size, scale type, axis)", base
            )
        (arr, aoff), (elem, _), (bs, boff), (st, _), (ax, xoff) = parts
        m = re.fullmatch(r"\s*array<i64(?::\s*([-0-9,\s]*))?>\s*", arr)
        if not m:
            raise MXTypeError(f"expected 'array<i64: ...>' shape, got '{arr.strip()}'", base + aoff)
        dims = [x.strip() for x in (m.group(1) or "").split(",")]
        if dims != [""] and "" in dims:
            raise MXTypeError(f"expected 'array<i64: ...>' shape, got '{arr.strip()}'", base + aoff)
        shape = tuple(_int(x, base + aoff, "a dimension") for x in dims if x)
        return cls(
            shape,
            elem.strip(),
            _int(bs.split(":")[0].strip(), base + boff, "block_size"),
            st.strip(),
            _int(ax.split(":")[0].strip(), base + xoff, "axis"),
        )

    @classmethod
    def from_mlir(cls, t: ir.Type) -> MXTensorType:
        """The typed view of an upstream ``ir.Type`` (raises if not ``!mx.tensor``)."""
        return cls.parse(str(t))

    # ------------------------------------------------------------------ helpers
    def __eq__(self, other) -> bool:  # axis=None and axis=rank-1 are the same type
        if not isinstance(other, MXTensorType):
            return NotImplemented
        return (
            self.shape == other.shape
            and self.element_type == other.element_type
            and self.block_size == other.block_size
            and self.scale_type == other.scale_type
            and self.block_axis == other.block_axis
        )

    def __hash__(self) -> int:
        return hash((self.shape, self.element_type, self.block_size, self.scale_type, self.block_axis))


def is_mx_type(t: ir.Type | str) -> bool:
    """True for ``!mx.tensor<...>`` (either spelling)."""
    return str(t).startswith("!mx.tensor<")


def _tensor(shape, elem: str) -> str:
    return "tensor<" + "".join(f"{d}x" for d in shape) + elem + ">"


def _int(text: str, offset: int, what: str) -> int:
    """A decimal integer as MLIR spells it (optional '-', digits), else MXTypeError."""
    if not re.fullmatch(r"-?[0-9]+", text):
        raise MXTypeError(f"{what} must be an integer, got '{text}'", offset)
    value = int(text)
    if not -(2**63) <= value < 2**63:
        raise MXTypeError(f"{what} does not fit in 64 bits: {text}", offset)
    return value


def _split_top(body: str) -> list[tuple[str, int]]:
    """Split on commas outside brackets; returns (piece, offset) pairs."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(body):
        if ch in "<([{":
            depth += 1
        elif ch in ">)]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append((body[start:i], start))
            start = i + 1
    if body[start:].strip() or parts:
        parts.append((body[start:], start))
    return parts

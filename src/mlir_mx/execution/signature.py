"""What a Runner knows about a public function before lowering: the
parameters and results as declared (shapes, element types, numpy dtypes, and
why one cannot be passed), recorded from the mx-level or upstream signature.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
from mlir import ir

from mlir_mx.dialect import MXTensorType, is_mx_type
from mlir_mx.ir_utils import function_type, public_functions
from mlir_mx.numerics import formats
from mlir_mx.numerics.formats import ELEMENT_FORMATS, SCALE_TYPE

__all__ = [
    "MXParam",
    "Param",
    "Signature",
    "dtype_named",
    "emit_c_interfaces",
    "flatten",
    "numpy_dtype",
    "signatures",
]

# MLIR element type (as printed) -> numpy dtype: the types numpy has.
_PLAIN_DTYPES = {
    "f64": np.dtype(np.float64),
    "f32": np.dtype(np.float32),
    "f16": np.dtype(np.float16),
    "i64": np.dtype(np.int64),
    "i32": np.dtype(np.int32),
    "i16": np.dtype(np.int16),
    "i8": np.dtype(np.int8),
    "ui8": np.dtype(np.uint8),
    "i1": np.dtype(np.bool_),
    "index": np.dtype(np.int64),
}


# The others: bf16 and the MX element and scale types, from the format
# table: ml_dtypes stores every narrow float in one byte, which is exactly
# LLVM's in-memory layout of the i4/i6/i8 the narrow floats lower to.
@functools.cache
def _narrow_dtypes() -> dict[str, np.dtype]:
    # Made on first use: it imports ml_dtypes (0.8-1.3 s), which a process
    # that only reports a usage error, verifies IR or runs f32 code never needs.
    import ml_dtypes

    return {
        "bf16": np.dtype(ml_dtypes.bfloat16),
        **{f.name: f.dtype for f in ELEMENT_FORMATS.values()},
        SCALE_TYPE: formats.SCALE_DTYPE,
    }


def numpy_dtype(t: ir.Type | str) -> np.dtype | None:
    """The numpy dtype of MLIR element type ``t``, or None if unsupported."""
    name = str(t)
    plain = _PLAIN_DTYPES.get(name)
    return plain if plain is not None else _narrow_dtypes().get(name)


#: The same plain dtypes by numpy's name (``float32``).
_PLAIN_BY_NAME = {dt.name: dt for dt in _PLAIN_DTYPES.values()}


def dtype_named(name: str) -> np.dtype | None:
    """The dtype of a parameter by its numpy name (``float32``,
    ``float8_e4m3fn``; the compile cache's JSON), or None if no parameter
    can have it; ml_dtypes is imported only for a narrow float's name."""
    plain = _PLAIN_BY_NAME.get(name)
    if plain is not None:
        return plain
    return next((dt for dt in _narrow_dtypes().values() if dt.name == name), None)


@dataclass(frozen=True)
class Param:
    """One argument or result of a public function, as declared."""

    name: str  # '%arg0' / 'result 0'
    type: str  # the MLIR type as printed
    dtype: np.dtype | None
    shape: tuple[int | None, ...] | None  # None: scalar; None entries: dynamic
    error: str | None = None  # why this parameter cannot be passed, if so

    @property
    def is_buffer(self) -> bool:
        return self.shape is not None


@dataclass(frozen=True)
class MXParam:
    """An ``!mx.tensor`` parameter: passed as an :class:`MXArray` (or a
    ``(codes, scales)`` pair) and lowered by mx-to-linalg to two buffers,
    mantissa first.  ``packed``: the codes buffer holds packed FP4/FP6 bytes
    (``subbyte-storage=packed`` and a shape that packs), ``uint8``."""

    name: str
    type: str
    mx: MXTensorType
    parts: tuple[Param, Param]
    error: str | None = None
    packed: bool = False

    @property
    def is_buffer(self) -> bool:
        return True


@dataclass(frozen=True)
class Signature:
    name: str
    args: tuple[Param | MXParam, ...]
    results: tuple[Param | MXParam, ...]

    @property
    def flat_args(self) -> tuple[Param, ...]:
        return flatten(self.args)

    @property
    def flat_results(self) -> tuple[Param, ...]:
        return flatten(self.results)


def flatten(params) -> tuple[Param, ...]:
    out: list[Param] = []
    for p in params:
        out.extend(p.parts if isinstance(p, MXParam) else (p,))
    return tuple(out)


def param(name: str, t: ir.Type, packed: bool = True) -> Param | MXParam:
    """The parameter of type ``t``; ``packed``: mx codes cross the boundary in
    ``subbyte-storage=packed`` form (as ``uint8`` bytes where they pack)."""
    if is_mx_type(t):
        mx = MXTensorType.from_mlir(t)
        codes_t, scales_t = mx.storage_tensor_types(packed, t.context)
        codes = param(f"{name} codes", codes_t)
        packs = packed and mx.packs_codes
        if packs:  # i8 in the IR, raw bytes to the caller
            codes = Param(codes.name, codes.type, np.dtype(np.uint8), codes.shape, codes.error)
        return MXParam(name, str(mx), mx, (codes, param(f"{name} scales", scales_t)), packed=packs)
    t = t.maybe_downcast()
    if isinstance(t, ir.RankedTensorType | ir.MemRefType):
        elem = t.element_type
        dt = numpy_dtype(elem)
        shape = tuple(None if t.is_dynamic_dim(i) else t.shape[i] for i in range(t.rank))
        err = None if dt is not None else f"element type {elem} is not supported"
        if isinstance(t, ir.MemRefType) and err is None:
            layout = t.layout
            identity = isinstance(
                layout, ir.AffineMapAttr
            ) and layout.value == ir.AffineMap.get_identity(t.rank)
            if not identity:
                err = f"memref layout {layout} is not supported (identity layouts only)"
        return Param(name, str(t), dt, shape, err)
    if isinstance(t, ir.ShapedType):
        return Param(name, str(t), None, None, f"type {t} is not supported")
    dt = numpy_dtype(t)
    err = None
    if dt is None or dt.itemsize == 1 and dt.kind == "V":  # narrow floats: no C scalar ABI
        err = f"scalar type {t} is not supported"
    return Param(name, str(t), dt, None, err)


def signatures(module: ir.Module, packed: bool = True) -> dict[str, Signature]:
    """Signatures of the public functions with bodies (the module is not
    changed).  ``packed``: the lowering stores sub-byte mx codes packed at
    function boundaries (``mx-to-linalg{subbyte-storage=packed}``)."""
    sigs: dict[str, Signature] = {}
    for op in public_functions(module):
        attrs = op.attributes
        name = ir.StringAttr(attrs["sym_name"]).value
        ftype = function_type(op)
        args = tuple(param(f"%arg{i}", t, packed) for i, t in enumerate(ftype.inputs))
        results = tuple(param(f"result {i}", t, packed) for i, t in enumerate(ftype.results))
        sigs[name] = Signature(name, args, results)
    return sigs


def emit_c_interfaces(module: ir.Module) -> None:
    """Mark every public function for upstream's C interface (the entry
    points the Runner calls, :mod:`mlir_mx.execution.c_interface`)."""
    for op in public_functions(module):
        op.attributes["llvm.emit_c_interface"] = ir.UnitAttr.get()

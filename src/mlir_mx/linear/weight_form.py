"""The one form ``mlir_mx.Linear`` holds its weight in, and the conversions, in chunks.

A Linear multiplies by ``B = W^T`` (K = ``in_features`` rows, N =
``out_features`` columns, blocked along K) and holds it in one form, or in
the stored form with the dot kernels' records beside it:

* **stored** (:func:`stored_shape`): the codes the f32 kernels read, packed
  along N where they pack (``numerics.is_packed_storage``) and in 64-column
  tiles when N is a multiple of 64 (``kernels.common.problem.tile_b_codes``), plus
  the block scales ``(K / block, N)`` (E8M0; E4M3 for NVFP4, whose global scale
  the :class:`Geometry` holds);
* **records** (:func:`records_unit`): the dot kernels' records of one dot unit
  (``kernels.dot.units.RecordLayout``, scales inside), chosen only where the
  dot kernels serve every shape class for the Linear's ``activations``, the
  records keep every code bit for bit (FP4 nibbles, INT8), so that the stored
  form and the weight are derived from them exactly when asked for, and N is
  a multiple of 64 (no padding: the same bytes as the stored form);
* **stored and records** (:func:`side_records_unit`): where ``activations``
  runs on the dot units for some shape class but the records alone cannot
  hold the weight (FP6/FP8 records lose a negative zero or a NaN payload;
  FP8 has no decode dot kernel), both, so the dot kernels serve the classes
  they can and the f32 kernels the rest; ``Linear.nbytes`` counts both.

Every conversion runs over chunks of whole blocks along K (about
:data:`CHUNK_ELEMENTS` elements each), from a source (:func:`array_chunks`,
:func:`stored_chunks`, :func:`records_chunks`: the chunk's codes one per byte
and its scales, both in B's orientation) into a result allocated once
(:func:`to_stored`, :func:`to_records`, :func:`to_weight`): beyond its result
a conversion holds a few chunks (a few MiB), whatever the weight's size.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from mlir_mx.errors import MXArgTypeError, MXValueError
from mlir_mx.kernels import Problem
from mlir_mx.kernels.common.problem import BF16, TILE_COLUMNS, tile_b_codes
from mlir_mx.kernels.dot.biased import LIFT_E8M0_MAX
from mlir_mx.kernels.dot.units import KINDS, PANEL, RecordLayout, dot_kind
from mlir_mx.kernels.registry import SCHEDULES, SHAPE_CLASSES, choose
from mlir_mx.linear.activations import f32_at
from mlir_mx.numerics import (
    ELEMENT_FORMATS,
    SCALE_DTYPE,
    SCALE_TYPE,
    ElementFormat,
    MXArray,
    is_packed_storage,
    pack_codes,
    packed_shape,
    unpack_codes,
)
from mlir_mx.numerics.formats import E4M3_SCALE_TYPE, SCALE_NAN_CODE, scale_rule
from mlir_mx.numerics.mxarray import check_global_scale

__all__ = [
    "CHUNK_ELEMENTS",
    "Geometry",
    "applies_global",
    "array_chunks",
    "bind_matmul",
    "check_held",
    "check_mx_activations",
    "divide_at",
    "divide_by_global",
    "global_operand",
    "kernel_names",
    "lifts",
    "records_chunks",
    "records_unit",
    "side_records_unit",
    "stored_chunks",
    "to_records",
    "to_stored",
    "to_weight",
    "unpack_records",
    "warn_without_records",
]

#: Elements of B per conversion chunk (whole blocks along K; at least one block row).
CHUNK_ELEMENTS = 1 << 18

#: ``(k0, k1, codes, scales)``: rows ``k0:k1`` of B, codes ``(k1 - k0, N)`` one per
#: byte (the element dtype) and scales ``((k1 - k0) / block, N)``.
Chunk = tuple[int, int, np.ndarray, np.ndarray]


@dataclass(frozen=True)
class Geometry:
    """B's format and shape: ``k`` rows (in), ``n`` columns (out), blocked along k;
    an NVFP4 weight's global scale (None: E8M0 scales, OCP MX)."""

    format: ElementFormat
    block: int
    k: int
    n: int
    global_scale: np.float32 | None = None

    @classmethod
    def of(cls, fmt: ElementFormat, block: int, k: int, n: int, global_scale=None) -> Geometry:
        """The geometry of a weight; ``global_scale`` given: NVFP4 (E4M3 block
        scales), checked by the format table's rule (``MXValueError`` naming it)."""
        if global_scale is None:
            return cls(fmt, block, k, n)
        why = scale_rule(fmt.name, E4M3_SCALE_TYPE, block)
        if why is not None:
            raise MXValueError(f"global_scale: an NVFP4 weight's, but {why}")
        return cls(fmt, block, k, n, check_global_scale(global_scale))

    @property
    def scale_type(self) -> str:
        """B's block scale type: E4M3 for NVFP4, else E8M0."""
        return SCALE_TYPE if self.global_scale is None else E4M3_SCALE_TYPE

    @property
    def scale_dtype(self) -> np.dtype:
        """The numpy dtype of B's block scales (the kernels' ``sb`` memref)."""
        return SCALE_DTYPE if self.global_scale is None else ELEMENT_FORMATS[self.scale_type].dtype

    @property
    def element(self) -> str:
        """The format's name (the kernels' spelling: ``Problem``, ``RecordLayout``)."""
        return self.format.name

    @property
    def packed(self) -> bool:
        """The stored codes pack along N (FP4/FP6 with whole packing groups)."""
        return is_packed_storage((self.k, self.n), self.format)

    @property
    def tiled(self) -> bool:
        """The stored codes are in 64-column tiles (N a multiple of 64)."""
        return self.n % TILE_COLUMNS == 0

    @property
    def tiles(self) -> int:
        return self.n // TILE_COLUMNS

    def layout(self, unit: str) -> RecordLayout:
        return RecordLayout(KINDS[unit], self.element, self.block)

    def ranges(self) -> Iterator[tuple[int, int]]:
        """Chunks ``(k0, k1)`` of whole blocks (and whole packing groups along K)."""
        step = math.lcm(self.block, self.format.group[0])
        rows = max(1, CHUNK_ELEMENTS // max(self.n, 1) // step) * step
        for k0 in range(0, self.k, rows):
            yield k0, min(k0 + rows, self.k)


def check_weight(weight) -> None:
    """``Linear``'s ``weight``: a 2-D :class:`MXArray` (E8M0-scaled, or NVFP4);
    an :class:`~mlir_mx.errors.MXError` naming ``weight`` otherwise."""
    if not isinstance(weight, MXArray):
        raise MXArgTypeError(
            f"weight: expected an MXArray (or float weights with element=...), "
            f"got {type(weight).__name__}"
        )
    if weight.ndim != 2:
        raise MXValueError(f"weight: expected a 2-D MXArray, got shape {weight.shape}")


def check_mx_activations(x: MXArray) -> None:
    """MX activations (an MXArray ``x``) are E8M0-scaled: the kernels' A scales.
    NVFP4 activations (E4M3 scales and a global scale) are refused by name
    (``docs/numerics.md``, "NVFP4 in the matmul"); NVFP4 goes in the weight."""
    if x.global_scale is not None:
        raise MXValueError(
            f"x: {x.format_name} activations are not taken (E4M3 block scales and a global "
            "scale); MX activations are E8M0-scaled (e.g. mxfp4, mxint8), NVFP4 goes in the weight"
        )


def stored_shape(g: Geometry) -> tuple[tuple[int, int], np.dtype]:
    """Shape and dtype of the stored codes (``uint8`` when packed or tiled)."""
    fmt = g.format
    width = packed_shape((1, g.n), fmt)[1] if g.packed else g.n
    dtype = np.dtype(np.uint8) if g.packed or g.tiled else fmt.dtype
    if not g.tiled:
        return (g.k, width), dtype
    tile_bytes = packed_shape((1, TILE_COLUMNS), fmt)[1] if g.packed else TILE_COLUMNS
    return (g.k // g.block * g.tiles, g.block * tile_bytes), dtype


def records_unit(g: Geometry, activations: ElementFormat | None) -> str | None:
    """The dot unit whose records ALONE hold the weight of a Linear with
    ``activations``, or None: the dot kernels serve every shape class for f32
    activations quantized to ``activations`` on this CPU, the records keep
    every code (FP4 as nibbles, INT8 as its integers) so the weight can be
    derived from them bit for bit, and N is a multiple of 64 (no zero columns
    padding the last panel), so the records take exactly the stored form's
    bytes (4.25 bits per MXFP4 element)."""
    unit, classes = _dot_unit(g, activations)
    if unit is None or g.n % PANEL or not _standalone(g, unit, classes):
        return None
    return unit


def side_records_unit(g: Geometry, activations: ElementFormat | None) -> str | None:
    """The dot unit whose records a Linear holds BESIDE its stored form, or
    None: ``activations`` pairs with the weight on this CPU's dot units for
    some shape class, but the records cannot stand alone: they would lose
    codes (FP6/FP8 values: a negative zero, a NaN payload) or some class has
    no dot kernel (FP8's decode).  (A weight whose records could stand alone
    but for N not a multiple of 64 keeps its stored form only, at its stored
    size: the f32 kernels serve it.)"""
    unit, classes = _dot_unit(g, activations)
    if unit is None or not classes or _standalone(g, unit, classes):
        return None
    return unit


def _standalone(g: Geometry, unit: str, classes: list[str]) -> bool:
    """The records serve every shape class and keep every code."""
    lossless = g.layout(unit).nibbles or g.format.is_int
    return lossless and len(classes) == len(SHAPE_CLASSES)


def _dot_unit(g: Geometry, activations: ElementFormat | None) -> tuple[str | None, list[str]]:
    """The CPU's dot unit for f32 activations quantized to ``activations``
    against this weight, and the shape classes its kernels serve."""
    if activations is None or activations.name == BF16 or not g.k or not g.n:
        return None, []  # bf16 activations: the bf16 dot kernels read the stored codes
    a_quant = activations.name
    dot = dot_kind(a_quant, g.element, g.block)
    if dot is None:
        return None, []
    prob = Problem(
        None, g.n, g.k, g.block, None, g.element, a_quant=a_quant, b_dot=dot.name,
        b_scale_type=g.scale_type,
    )  # fmt: skip
    classes = [cls for cls in SHAPE_CLASSES if choose(prob, cls=cls, required=False)]
    return dot.name, classes


def warn_without_records(g: Geometry, unit, activations, a_element, schedule: str) -> None:
    """Warn (once per message) when MX activations ``a_element`` run on the f32
    kernels (``schedule``) although this CPU has a dot unit for the pair: the
    Linear holds no records of that unit (made without ``activations=``, or
    for another format), and records are never made per call (they would
    hold the weight a second time)."""
    dot = dot_kind(a_element, g.element, g.block) if a_element is not None else None
    if dot is None or dot.name == unit or SCHEDULES[schedule].unit is not None:
        return
    fix = f"; Linear(w, activations={a_element!r}) holds them" if activations != a_element else ""
    warnings.warn(
        f"Linear: {a_element} activations run on the f32 kernels ({schedule}), not the "
        f"{dot.name} dot kernels: the weight holds no {dot.name} dot records{fix}",
        stacklevel=4,
    )


# -- sources ------------------------------------------------------------------------


def array_chunks(w: MXArray, g: Geometry) -> Iterator[Chunk]:
    """Chunks of B from an MXArray: ``W`` (out, in) blocked along axis 1, or
    ``B`` (in, out) blocked along axis 0; read from its stored bytes, unpacked
    one chunk at a time."""
    raw, scales = w.held_buffers()
    fmt = g.format
    per, nbytes = fmt.group
    for k0, k1 in g.ranges():
        b0, b1 = k0 // g.block, k1 // g.block
        if w.axis == 1:  # columns k0:k1 of W, transposed
            if w.is_packed:
                part = unpack_codes(raw[:, k0 // per * nbytes : k1 // per * nbytes], fmt)
            else:
                part = raw[:, k0:k1].view(fmt.dtype)
            yield k0, k1, np.ascontiguousarray(part.T), np.ascontiguousarray(scales[:, b0:b1].T)
        else:
            part = unpack_codes(raw[k0:k1], fmt) if w.is_packed else raw[k0:k1].view(fmt.dtype)
            yield k0, k1, part, scales[b0:b1]


def stored_chunks(codes: np.ndarray, scales: np.ndarray, g: Geometry) -> Iterator[Chunk]:
    """Chunks of B from its stored form (the inverse of :func:`to_stored`)."""
    fmt = g.format
    raw = codes.view(np.uint8)
    for k0, k1 in g.ranges():
        b0, b1 = k0 // g.block, k1 // g.block
        if g.tiled:  # the inverse of tile_b_codes, for these blocks
            t = raw[b0 * g.tiles : b1 * g.tiles].reshape(b1 - b0, g.tiles, g.block, -1)
            part = np.ascontiguousarray(t.transpose(0, 2, 1, 3)).reshape(k1 - k0, -1)
        else:
            part = raw[k0:k1]
        part = unpack_codes(part, fmt) if g.packed else np.ascontiguousarray(part).view(fmt.dtype)
        yield k0, k1, part, scales[b0:b1]


def records_chunks(records: np.ndarray, unit: str, g: Geometry) -> Iterator[Chunk]:
    """Chunks of B from its records (:func:`unpack_records`)."""
    layout = g.layout(unit)
    panels = -(-g.n // PANEL)
    rec = records.reshape(panels, g.k // g.block, layout.nbytes)
    for k0, k1 in g.ranges():
        b0, b1 = k0 // g.block, k1 // g.block
        yield k0, k1, *unpack_records(rec[:, b0:b1], layout, g)


#: pack_records' axis order (K, Npad) -> (panels, nb, groups, 4 vectors, 16 columns, g)
_ORDER = (3, 0, 1, 4, 5, 2)
_INVERSE = tuple(int(i) for i in np.argsort(_ORDER))


def unpack_records(
    rec: np.ndarray, layout: RecordLayout, g: Geometry
) -> tuple[np.ndarray, np.ndarray]:
    """The inverse of ``kernels.dot.units.pack_records`` for records that keep
    the codes: ``rec`` ``(panels, nb, layout.nbytes)`` of B (``g``'s format,
    ``layout`` one of ``g.layout(unit)``) -> codes ``(nb * block, g.n)``
    (element dtype) and the block scales ``(nb, g.n)``."""
    fmt, n, scale_dtype = g.format, g.n, g.scale_dtype
    panels, nb, _ = rec.shape
    bs, g = layout.block, layout.kind.group
    scales = rec[..., :PANEL].transpose(1, 0, 2).reshape(nb, panels * PANEL)[:, :n]
    data = rec[..., layout.data_offset :]
    if layout.nibbles:  # (.., groups, h, 64 bytes): low nibble vector 2h, high 2h + 1
        d = data.reshape(panels, nb, bs // g, 2, 1, 64)
        vals = np.concatenate([d & np.uint8(0x0F), d >> np.uint8(4)], axis=4)
    elif fmt.is_int and layout.kind.name in ("i8", "i16"):
        dtype = np.uint8 if layout.kind.name == "i8" else np.int16
        vals = np.ascontiguousarray(data).view(dtype).astype(np.int16)
        vals = (vals - 128 if layout.kind.comp else vals).astype(np.int8).view(np.uint8)
    else:
        raise ValueError(f"unpack_records: {layout.kind.name} records of {fmt.name} lose codes")
    vals = vals.reshape(panels, nb, bs // g, 4, 16, g).transpose(_INVERSE)
    codes = vals.reshape(nb * bs, panels * PANEL)[:, :n]
    codes = np.ascontiguousarray(codes).view(fmt.dtype)
    return codes, np.ascontiguousarray(scales).view(scale_dtype)


# -- results ------------------------------------------------------------------------


def to_stored(chunks: Iterator[Chunk], g: Geometry) -> tuple[np.ndarray, np.ndarray]:
    """B's stored form ``(codes, scales)`` (:func:`stored_shape`), new arrays."""
    fmt = g.format
    shape, dtype = stored_shape(g)
    codes = np.empty(shape, dtype)
    raw = codes.view(np.uint8)
    scales = np.empty((g.k // g.block, g.n), g.scale_dtype)
    for k0, k1, c, s in chunks:
        b0, b1 = k0 // g.block, k1 // g.block
        scales[b0:b1] = s
        part = pack_codes(c, fmt) if g.packed else c.view(np.uint8)
        if g.tiled:
            raw[b0 * g.tiles : b1 * g.tiles] = tile_b_codes(part, g.block, fmt, g.packed)
        else:
            raw[k0:k1] = part
    return codes, scales


def to_records(chunks: Iterator[Chunk], unit: str, g: Geometry) -> np.ndarray:
    """B's records of dot unit ``unit`` (``kernels.dot.units.pack_records``), a new array."""
    from mlir_mx.kernels.dot.units import pack_records

    layout = g.layout(unit)
    rows, width = layout.shape(g.k, g.n)
    records = np.empty((rows, width), np.uint8)
    rec = records.reshape(-(-g.n // PANEL), g.k // g.block, width)
    for k0, k1, c, s in chunks:
        b0, b1 = k0 // g.block, k1 // g.block
        rec[:, b0:b1] = pack_records(c, s, layout).reshape(rec.shape[0], b1 - b0, width)
    return records


def to_weight(chunks: Iterator[Chunk], g: Geometry) -> MXArray:
    """``W`` ``(n, k)`` blocked along axis 1 (nn.Linear's layout), new arrays."""
    fmt = g.format
    packed = is_packed_storage((g.n, g.k), fmt)
    per, nbytes = fmt.group
    codes = np.empty(packed_shape((g.n, g.k), fmt) if packed else (g.n, g.k), np.uint8)
    scales = np.empty((g.n, g.k // g.block), g.scale_dtype)
    for k0, k1, c, s in chunks:
        scales[:, k0 // g.block : k1 // g.block] = s.T
        if packed:
            codes[:, k0 // per * nbytes : k1 // per * nbytes] = pack_codes(c.T, fmt)
        else:
            codes[:, k0:k1] = c.T.view(np.uint8)
    name = fmt if g.global_scale is None else fmt.e4m3_scaled[0]  # "nvfp4"
    return MXArray.from_packed(
        codes, scales, name, g.block, axis=1, copy=False, global_scale=g.global_scale
    )


def check_held(name: str, a, shape: tuple, dtype: np.dtype) -> None:
    """An array a Linear holds as it is (``Linear.from_stored`` /
    ``from_records``): this dtype and shape, C-contiguous; else an
    ``MXValueError`` naming ``name``."""
    if not isinstance(a, np.ndarray) or a.dtype != dtype or a.shape != tuple(shape):
        got = f"{a.dtype} {a.shape}" if isinstance(a, np.ndarray) else type(a).__name__
        raise MXValueError(f"{name}: expected a {dtype} array of shape {tuple(shape)}, got {got}")
    if not a.flags.c_contiguous:
        raise MXValueError(f"{name}: expected a C-contiguous array")


def global_operand(g: Geometry) -> list[np.ndarray]:
    """The dot kernel's operand after the records (``Problem.b_global``): an
    NVFP4 weight's global scale as a ``(1,)`` f32 array; none for E8M0."""
    return [] if g.global_scale is None else [np.array([g.global_scale], np.float32)]


def lifts(records: np.ndarray, g: Geometry) -> bool:
    """``Problem.b_lift`` of dot ``records`` (uint8, :class:`RecordLayout`:
    each record opens with its 64 columns' scale codes): every E8M0 code at
    most ``LIFT_E8M0_MAX`` (``2^105``) or NaN, so the expanding dot kernels
    may take the lifted step (``mlir_mx.kernels.dot.biased``); E4M3 scales
    need no flag (False)."""
    if g.scale_type != SCALE_TYPE:
        return False
    codes = records.reshape(records.shape[0], -1)[:, :PANEL]
    return not bool(((codes > LIFT_E8M0_MAX) & (codes != SCALE_NAN_CODE)).any())


#: The names of a Linear kernel's arguments in its messages, by their count.
_X_NAMES = {1: ("x",), 2: ("x (codes)", "x (scales)")}
_W_NAMES = {2: ("the weight (codes)", "the weight (scales)"), 1: ("the weight (dot records)",)}


def kernel_names(n_act: int, weights: list, b_global: bool) -> list[str]:
    """Names of the arguments of ``@matmul`` (``Linear._bound``): ``x``, the
    weight's (the last the global scale where ``b_global``), the output."""
    w = _W_NAMES[len(weights) - b_global] + ("the weight's global scale",) * b_global
    return [*_X_NAMES[n_act], *w, "the output"]


def bind_matmul(runner, n_act: int, weights: list, b_global: bool):
    """``runner``'s ``@matmul`` with the held ``weights`` bound (``x`` and the
    output free), its arguments named (:func:`kernel_names`); marked
    ``divides_global`` where its kernel divides by the global scale itself
    (``Problem.b_global``: :func:`applies_global`)."""
    from mlir_mx.execution import FREE

    names = kernel_names(n_act, weights, b_global)
    bound = runner.bind("matmul", *[FREE] * n_act, *weights, FREE, names=names)
    bound.divides_global = bool(b_global)
    return bound


def applies_global(call) -> bool:
    """Whether ``call``, a bound kernel (:func:`bind_matmul`), divides by the
    global scale itself: a kernel with ``Problem.b_global``, whose argument
    before the output is the ``(1,)`` f32 global scale (:func:`global_operand`)."""
    return bool(getattr(call, "divides_global", False))


def divide_by_global(out: np.ndarray, g: Geometry, call=None) -> None:
    """An NVFP4 weight's last step (``docs/numerics.md``, "NVFP4 in the
    matmul"): ``out = f32(out / global_scale)`` in place, one f32 division per
    output, after ``call`` (whose kernel applied the E4M3 block scales only),
    unless the kernel did it at its last store (:func:`applies_global`)."""
    if g.global_scale is not None and not applies_global(call):
        np.divide(out, g.global_scale, out=out)


def divide_at(call, g: Geometry, m: int, bound=None):
    """``call(x_addr, out_addr)`` followed by :func:`divide_by_global` on the
    ``(m, g.n)`` f32 output at ``out_addr`` (``Linear.call_into``), unless
    ``bound``'s kernel divides itself; ``call`` as it is for an E8M0 weight."""
    if g.global_scale is None or applies_global(bound):
        return call

    def scaled(x_addr: int, out_addr: int) -> None:
        call(x_addr, out_addr)
        out = f32_at(out_addr, m, g.n)
        np.divide(out, g.global_scale, out=out)

    return scaled

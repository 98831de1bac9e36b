"""Builders and typed accessors for the four mx ops.

Every mx op is built here and nowhere else (nothing outside ``dialect/``
creates mx ops from strings).  Builders take upstream ``ir.Value`` operands
and return the result ``ir.Value``; they use the current insertion point and
location unless ``ip``/``loc`` are given, like upstream's generated builders.

Semantics (all four are pure, value semantics on tensors):

``mx.quantize_block``    f32 tensor -> ``!mx.tensor``: OCP MX quantization
                         (NVFP4 for ``f8E4M3FN`` scales, with the f32
                         ``global_scale`` operand).
``mx.dequantize_block``  ``!mx.tensor`` -> f32 tensor: element x 2^scale
                         (element x f32(scale / global_scale) for NVFP4).
``mx.block_matmul``      (mx lhs [M,K] blocked along K, rhs [K,N] f32 or mx
                         blocked along K (``axis = 0``), acc [M,N] f32) ->
                         acc + dequant(lhs) x rhs, destination-passing style
                         (an NVFP4 rhs with its f32 ``global_scale``:
                         acc + f32((dequant(lhs) x rhs') / global_scale),
                         rhs' its codes times its E4M3 scales).
``mx.fold_scale``        (``!mx.tensor``, f32 alpha) -> same type: multiply
                         the tensor's real values by alpha.
"""

from __future__ import annotations

from mlir import ir

from mlir_mx.dialect.irdl import OP_NAMES, OPS
from mlir_mx.dialect.types import MXTensorType, is_mx_type
from mlir_mx.errors import MXArgTypeError, MXValueError, expect_type

__all__ = [
    "quantize_block",
    "dequantize_block",
    "block_matmul",
    "fold_scale",
    "mx_type",
    "is_mx_op",
    "OpView",
]


def _ty(t: MXTensorType | ir.Type, ctx=None) -> ir.Type:
    return t.to_mlir(ctx) if isinstance(t, MXTensorType) else t


def _values(**operands) -> None:
    """Each operand an ``ir.Value`` (None allowed for ``global_scale``), else
    ``MXArgTypeError`` naming it."""
    for name, v in operands.items():
        if v is not None or name != "global_scale":
            expect_type(v, ir.Value, name, "an ir.Value")


def _create(name, operands, result, loc, ip) -> ir.Value:
    op = ir.Operation.create(name, results=[result], operands=list(operands), loc=loc, ip=ip)
    return op.result


def quantize_block(
    input: ir.Value, result_type: MXTensorType | ir.Type, global_scale: ir.Value | None = None,
    *, loc=None, ip=None,
) -> ir.Value:
    """``%r = mx.quantize_block %input : tensor<...xf32> -> !mx.tensor<...>``;
    with ``global_scale`` (an f32, for ``f8E4M3FN`` scales: NVFP4)
    ``mx.quantize_block %input, %g : tensor<...xf32>, f32 -> !mx.tensor<...>``."""
    _values(input=input, global_scale=global_scale)
    expect_type(result_type, (MXTensorType, ir.Type), "result_type", "an MXTensorType or ir.Type")
    operands = [input] + ([global_scale] if global_scale is not None else [])
    return _create("mx.quantize_block", operands, _ty(result_type, input.context), loc, ip)


def dequantize_block(
    input: ir.Value, result_type: ir.Type | None = None, global_scale: ir.Value | None = None,
    *, loc=None, ip=None,
) -> ir.Value:
    """``%r = mx.dequantize_block %t : !mx.tensor<...> -> tensor<...xf32>`` (with
    ``global_scale``, for ``f8E4M3FN`` scales: ``%t, %g : !mx.tensor<...>, f32``).

    The result type defaults to an f32 tensor of the input's shape.
    """
    _values(input=input, global_scale=global_scale)
    if result_type is None:
        shape = mx_type(input).shape
        result_type = ir.RankedTensorType.get(list(shape), ir.F32Type.get(input.context))
    operands = [input] + ([global_scale] if global_scale is not None else [])
    return _create("mx.dequantize_block", operands, result_type, loc, ip)


def block_matmul(
    lhs: ir.Value, rhs: ir.Value, acc: ir.Value, global_scale: ir.Value | None = None,
    *, loc=None, ip=None,
) -> ir.Value:
    """``%r = mx.block_matmul %a, %b, %acc : !mx.tensor<..>, T, tensor<..> -> tensor<..>``;
    with ``global_scale`` (the f32 global scale of an NVFP4 ``rhs``)
    ``mx.block_matmul %a, %b, %acc, %g : ..., tensor<..>, f32 -> tensor<..>``.

    The result type is the accumulator's (destination-passing style).
    """
    _values(lhs=lhs, rhs=rhs, acc=acc, global_scale=global_scale)
    operands = [lhs, rhs, acc] + ([global_scale] if global_scale is not None else [])
    return _create("mx.block_matmul", operands, acc.type, loc, ip)


def fold_scale(input: ir.Value, alpha: ir.Value, *, loc=None, ip=None) -> ir.Value:
    """``%r = mx.fold_scale %t, %alpha : !mx.tensor<..>, f32 -> !mx.tensor<..>``"""
    _values(input=input, alpha=alpha)
    return _create("mx.fold_scale", [input, alpha], input.type, loc, ip)


def mx_type(value_or_type: ir.Value | ir.Type) -> MXTensorType:
    """Typed view of the ``!mx.tensor`` type of a value (or of a type)."""
    t = value_or_type.type if isinstance(value_or_type, ir.Value) else value_or_type
    return MXTensorType.from_mlir(t)


def is_mx_op(op) -> bool:
    """True for the ops of the mx dialect (:data:`~mlir_mx.dialect.irdl.OPS`)."""
    name = getattr(getattr(op, "operation", op), "name", None)
    if not isinstance(name, str):
        raise MXArgTypeError(f"op: expected an MLIR operation, got {type(op).__name__}")
    return name in OP_NAMES


def _operation(op) -> ir.Operation:
    """``op``'s ``ir.Operation`` (an op view or the operation), else ``MXArgTypeError``."""
    operation = getattr(op, "operation", op)
    return expect_type(operation, ir.Operation, "op", "an MLIR operation")


class OpView:
    """Typed accessors over a generic mx operation (``op.operation``).

    ``OpView(op).input``, ``.result``, ``.input_type`` (an
    :class:`MXTensorType` when the value is mx-typed) and so on.
    """

    _NAMES = {op.name: op.operands for op in OPS}
    _OPTIONAL = {op.name: op.optional for op in OPS}

    def __init__(self, op):
        self.operation = _operation(op)
        if self.operation.name not in self._NAMES:
            raise MXValueError(f"not an mx op: {self.operation.name}")

    @property
    def name(self) -> str:
        return self.operation.name

    @property
    def result(self) -> ir.Value:
        return self.operation.results[0]

    def __getattr__(self, attr: str):
        names = OpView._NAMES[self.operation.name]
        if attr in names:
            return self.operation.operands[names.index(attr)]
        optional = OpView._OPTIONAL[self.operation.name]
        if attr in optional:  # None when absent
            i = len(names) + optional.index(attr)
            operands = list(self.operation.operands)
            return operands[i] if i < len(operands) else None
        if attr.endswith("_type") and attr[:-5] in names + ("result",):
            v = self.result if attr == "result_type" else getattr(self, attr[:-5])
            return MXTensorType.from_mlir(v.type) if is_mx_type(v.type) else v.type
        raise AttributeError(attr)

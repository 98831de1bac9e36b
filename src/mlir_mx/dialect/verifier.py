"""Verifier of the mx ops: the v1 rules and messages plus the block-axis rules.

IRDL (22.1.8) only checks operand and result counts, so the semantic rules
run here, on every mx op of a module, after parsing and after our passes.
Errors are emitted as MLIR diagnostics at the op's location with upstream's
``'op.name' op message`` prefix, exactly like a C++ ``emitOpError``.
"""

from __future__ import annotations

from mlir import ir

from mlir_mx.dialect.irdl import OP_NAMES
from mlir_mx.dialect.types import MXTensorType, MXTypeError, is_mx_type
from mlir_mx.errors import expect_type
from mlir_mx.ir_utils import collect, declared_types
from mlir_mx.numerics.formats import E4M3_SCALE_TYPE

__all__ = ["RULES", "op_errors", "verify_module"]


def _tensor_shape(t: ir.Type) -> tuple[int, ...] | None:
    """Static shape of a ranked tensor type, else None."""
    rt = t.maybe_downcast()
    if not isinstance(rt, ir.RankedTensorType) or not rt.has_static_shape:
        return None
    return tuple(rt.shape)


def _is_f32_tensor(t: ir.Type) -> bool:
    return _tensor_shape(t) is not None and _is_f32(t.maybe_downcast().element_type)


def _is_f32(t: ir.Type) -> bool:
    return isinstance(t.maybe_downcast(), ir.F32Type)


def _shape_of(t: ir.Type) -> tuple[int, ...]:
    return MXTensorType.from_mlir(t).shape if is_mx_type(t) else _tensor_shape(t)


def _mx(t: ir.Type, what: str) -> tuple[MXTensorType | None, str | None]:
    if not is_mx_type(t):
        return None, f"{what} must be an !mx.tensor, got {t}"
    try:
        return MXTensorType.from_mlir(t), None
    except MXTypeError as e:
        return None, f"{what} has an invalid type: {e.message}"


def _f32(t: ir.Type, what: str) -> str | None:
    if not _is_f32_tensor(t):
        return f"{what} must be a statically shaped f32 tensor, got {t}"
    return None


def _global_scale(t: MXTensorType, ops: list[ir.Value], what: str) -> str | None:
    """The NVFP4 rule: a ``global_scale`` operand (an f32 scalar) exactly when
    ``t`` (the op's ``what``) has ``f8E4M3FN`` scales."""
    if len(ops) > 2:
        return f"expects at most 2 operands, got {len(ops)}"
    if t.has_global_scale and len(ops) < 2:
        return f"{what} has {t.scale_type} scales (NVFP4): a global_scale operand (f32) is required"
    if not t.has_global_scale and len(ops) == 2:
        return f"global_scale is only for {E4M3_SCALE_TYPE}-scaled tensors, {what} has {t.scale_type} scales"
    if len(ops) == 2 and not _is_f32(ops[1].type):
        return f"global_scale must be an f32 scalar, got {ops[1].type}"
    return None


def _quantize_block(ops: list[ir.Value], res: ir.Type) -> str | None:
    err = _f32(ops[0].type, "input")
    if err:
        return err
    rt, err = _mx(res, "result")
    if err:
        return err
    if _tensor_shape(ops[0].type) != rt.shape:
        return "input shape doesn't match result shape"
    return _global_scale(rt, ops, "result")


def _dequantize_block(ops: list[ir.Value], res: ir.Type) -> str | None:
    it, err = _mx(ops[0].type, "input")
    if err:
        return err
    err = _f32(res, "result")
    if err:
        return err
    if it.shape != _tensor_shape(res):
        return "input shape doesn't match result shape"
    return _global_scale(it, ops, "input")


def _not_nvfp4(t: MXTensorType, what: str, why: str) -> str | None:
    if t.has_global_scale:
        return f"{what} has {t.scale_type} scales (NVFP4), which {why}"
    return None


def _fold_scale(ops: list[ir.Value], res: ir.Type) -> str | None:
    it, err = _mx(ops[0].type, "input")
    if err:
        return err
    err = _not_nvfp4(it, "input", "fold_scale does not take: fold alpha into its global_scale")
    if err:
        return err
    if not _is_f32(ops[1].type):
        return f"alpha must be an f32 scalar, got {ops[1].type}"
    if str(ops[0].type) != str(res):
        return "input and output types must be the same."
    return None


def _block_matmul(ops: list[ir.Value], res: ir.Type) -> str | None:
    lhs, err = _mx(ops[0].type, "lhs")
    if err:
        return err
    rhs_t, acc_t = ops[1].type, ops[2].type
    rhs = None
    if is_mx_type(rhs_t):
        rhs, err = _mx(rhs_t, "rhs")
        if err:
            return err
    else:
        err = _f32(rhs_t, "rhs")
        if err:
            return f"{err} or an !mx.tensor"
    err = _f32(acc_t, "acc") or _f32(res, "result")
    if err:
        return err
    a, b, c = lhs.shape, _shape_of(rhs_t), _tensor_shape(acc_t)
    if len(a) != 2 or len(b) != 2 or len(c) != 2:
        return "all operands must be 2D"
    if a[1] != b[0]:
        return f"reduction dimension mismatch: lhs has K={a[1]} but rhs has K={b[0]}"
    if a[0] != c[0]:
        return f"M dimension mismatch: lhs has M={a[0]} but acc has M={c[0]}"
    if b[1] != c[1]:
        return f"N dimension mismatch: rhs has N={b[1]} but acc has N={c[1]}"
    if c != _tensor_shape(res):
        return "acc shape doesn't match result shape"
    err = _not_nvfp4(lhs, "lhs", "block_matmul takes as rhs only (the NVFP4 operand is the rhs)")
    if err or len(ops) > 3 and not _is_f32(ops[3].type):
        return err or f"global_scale must be an f32 scalar, got {ops[3].type}"
    if rhs is not None and rhs.has_global_scale and len(ops) < 4:
        return f"rhs has {rhs.scale_type} scales (NVFP4): a global_scale operand (f32) is required"
    if (rhs is None or not rhs.has_global_scale) and len(ops) > 3:
        kind = "an f32 tensor" if rhs is None else f"{rhs.scale_type} scales"
        return f"global_scale is only for an {E4M3_SCALE_TYPE}-scaled rhs, rhs has {kind}"
    if lhs.block_axis != 1:
        return f"lhs must be blocked along its last (contraction) axis, got axis = {lhs.block_axis}"
    if rhs is not None:
        if rhs.block_axis != 0:
            return f"rhs must be blocked along the contraction axis (axis = 0), got axis = {rhs.block_axis}"
        if rhs.block_size != lhs.block_size:
            return f"lhs and rhs block sizes differ ({lhs.block_size} vs {rhs.block_size})"
    return None


#: The rules of each op of :data:`~mlir_mx.dialect.irdl.OPS` (one entry per op:
#: ``tests/dialect/test_tables.py``).  A rule returns the first rule broken.
RULES = {
    "mx.quantize_block": _quantize_block,
    "mx.dequantize_block": _dequantize_block,
    "mx.fold_scale": _fold_scale,
    "mx.block_matmul": _block_matmul,
}


def op_errors(op: ir.Operation) -> list[str]:
    """The rules ``op`` breaks (first one first); empty when it verifies."""
    op = expect_type(getattr(op, "operation", op), ir.Operation, "op", "an MLIR operation")
    rule = RULES.get(op.name)
    err = rule(list(op.operands), op.results[0].type) if rule is not None else None
    return [err] if err else []


def _nested_mx(t: ir.Type, cache: dict) -> bool:
    """True when ``t`` holds an ``!mx.tensor`` inside another type (``tensor<2x!mx.tensor<..>>``)."""
    hit = cache.get(t)
    if hit is None:
        text = str(t)
        hit = cache[t] = "!mx.tensor<" in text and not is_mx_type(text)
    return hit


def _nesting_errors(op: ir.Operation, cache: dict) -> list[tuple[ir.Location, str]]:
    """An ``!mx.tensor`` is a value type of its own: it may not be the element
    of a tensor, memref, vector or any other type (upstream's bufferization
    asserts on such types: a ``memref`` of ``!mx.tensor`` is not a valid type)."""
    found = []
    msg = "!mx.tensor cannot be nested inside another type, got {}"
    for r in op.results:
        if _nested_mx(r.type, cache):
            found.append((op.location, msg.format(r.type)))
    for t in declared_types(op):  # a declaration has no block arguments
        if _nested_mx(t, cache):
            found.append((op.location, msg.format(t)))
            break
    for region in op.regions:
        for block in region.blocks:
            for a in block.arguments:
                if _nested_mx(a.type, cache):
                    found.append((a.location, msg.format(a.type)))
    return found


def verify_module(module_op) -> bool:
    """Verify every mx op under ``module_op``, and that no other type nests an
    ``!mx.tensor``; emit located errors; True if all pass."""
    expect_type(getattr(module_op, "operation", module_op), ir.Operation, "module_op", "an ir.Module")
    bad: list[tuple[ir.Location, str]] = []
    cache: dict = {}
    for op in collect(module_op, lambda o: True):
        if op.name in OP_NAMES:
            for msg in op_errors(op):
                bad.append((op.location, f"'{op.name}' op {msg}"))
        bad.extend(_nesting_errors(op, cache))
    for loc, msg in bad:
        loc.emit_error(msg)
    return not bad

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

__all__ = ["op_errors", "verify_module"]


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


def _fmt(shape) -> str:
    return "x".join(str(d) for d in shape)


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


def op_errors(op: ir.Operation) -> list[str]:
    """The rules ``op`` breaks (first one first); empty when it verifies."""
    name = op.name
    ops, res = list(op.operands), op.results[0].type
    if name == "mx.quantize_block":
        err = _f32(ops[0].type, "input")
        if err:
            return [err]
        rt, err = _mx(res, "result")
        if err:
            return [err]
        if _tensor_shape(ops[0].type) != rt.shape:
            return ["input shape doesn't match result shape"]
        return []
    if name == "mx.dequantize_block":
        it, err = _mx(ops[0].type, "input")
        if err:
            return [err]
        err = _f32(res, "result")
        if err:
            return [err]
        if it.shape != _tensor_shape(res):
            return ["input shape doesn't match result shape"]
        return []
    if name == "mx.fold_scale":
        it, err = _mx(ops[0].type, "input")
        if err:
            return [err]
        if not _is_f32(ops[1].type):
            return [f"alpha must be an f32 scalar, got {ops[1].type}"]
        if str(ops[0].type) != str(res):
            return ["input and output types must be the same."]
        return []
    if name == "mx.block_matmul":
        lhs, err = _mx(ops[0].type, "lhs")
        if err:
            return [err]
        rhs_t, acc_t = ops[1].type, ops[2].type
        rhs = None
        if is_mx_type(rhs_t):
            rhs, err = _mx(rhs_t, "rhs")
            if err:
                return [err]
        else:
            err = _f32(rhs_t, "rhs")
            if err:
                return [f"{err} or an !mx.tensor"]
        err = _f32(acc_t, "acc") or _f32(res, "result")
        if err:
            return [err]
        a, b, c = lhs.shape, _shape_of(rhs_t), _tensor_shape(acc_t)
        if len(a) != 2 or len(b) != 2 or len(c) != 2:
            return ["all operands must be 2D"]
        if a[1] != b[0]:
            return [f"reduction dimension mismatch: lhs has K={a[1]} but rhs has K={b[0]}"]
        if a[0] != c[0]:
            return [f"M dimension mismatch: lhs has M={a[0]} but acc has M={c[0]}"]
        if b[1] != c[1]:
            return [f"N dimension mismatch: rhs has N={b[1]} but acc has N={c[1]}"]
        if c != _tensor_shape(res):
            return ["acc shape doesn't match result shape"]
        if lhs.block_axis != 1:
            return [f"lhs must be blocked along its last (contraction) axis, got axis = {lhs.block_axis}"]
        if rhs is not None:
            if rhs.block_axis != 0:
                return [f"rhs must be blocked along the contraction axis (axis = 0), got axis = {rhs.block_axis}"]
            if rhs.block_size != lhs.block_size:
                return [f"lhs and rhs block sizes differ ({lhs.block_size} vs {rhs.block_size})"]
        return []
    return []


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
    has_body = any(len(r.blocks) for r in op.regions)
    if not has_body and "function_type" in op.attributes:  # a declaration
        try:
            ft = ir.FunctionType(ir.TypeAttr(op.attributes["function_type"]).value)
        except ValueError:  # not a builtin function type (e.g. llvm.func)
            ft = None
        for t in list(ft.inputs) + list(ft.results) if ft is not None else []:
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
    bad: list[tuple[ir.Location, str]] = []
    cache: dict = {}

    def visit(op):
        op = getattr(op, "operation", op)
        if op.name in OP_NAMES:
            for msg in op_errors(op):
                bad.append((op.location, f"'{op.name}' op {msg}"))
        bad.extend(_nesting_errors(op, cache))
        return ir.WalkResult.ADVANCE

    getattr(module_op, "operation", module_op).walk(visit)
    for loc, msg in bad:
        loc.emit_error(msg)
    return not bad

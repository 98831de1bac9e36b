"""The smallest AMX-BF16 kernel: one ``TDPBF16PS`` on one tile of each operand.

``func @name(a: memref<16x32xbf16>, b: memref<16x32xbf16>, c: memref<16x16xf32>)``
computes ``c = TDPBF16PS(c, a, b)``: A is 16 rows of 32 bf16 (K = 32), B is
AMX's pair layout (row ``k // 2`` holds ``b[k][n]`` at column ``2 n + k % 2``,
:func:`mlir_mx.oracle.amx_pair_layout`), C the 16 x 16 f32 accumulator, read
and written in place.  What the instruction computes is
:func:`mlir_mx.oracle.amx_tdpbf16ps` (``docs/numerics.md``, "AMX-BF16").

Built with upstream's ``amx`` dialect (``amx.tile_load``, ``amx.tile_mulf``,
``amx.tile_store``; the bindings have no Python classes for it, so the ops
are created generically), lowered by ``convert-vector-to-llvm{enable-amx=true}``
(:func:`mlir_mx.pipelines.amx.amx_library_pipeline`) to the
``llvm.x86.t*.internal`` intrinsics, which LLVM's x86 backend gives their
tile configuration (``ldtilecfg``).  Only for a CPU with ``amx_tile`` and
``amx_bf16`` whose OS granted the tile state (:mod:`mlir_mx.amx_permission`):
``mx-host-target`` refuses these intrinsics for a target without them.
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, func

__all__ = ["TILE_K", "TILE_M", "TILE_N", "tile_product_module"]

#: One tile product's shape: M rows of A and C, K bf16 per row of A (64
#: bytes, a full tile row), N f32 columns of C.
TILE_M, TILE_K, TILE_N = 16, 32, 16


def _tile(shape: tuple[int, int], elem: str) -> ir.Type:
    return ir.Type.parse(f"!amx.tile<{shape[0]}x{shape[1]}x{elem}>")


def _load(memref: ir.Value, zero: ir.Value, tile: ir.Type) -> ir.Value:
    """``amx.tile_load %memref[0, 0]`` (the row stride is the memref's)."""
    op = ir.Operation.create(
        "amx.tile_load",
        results=[tile],
        operands=[memref, zero, zero],
        attributes={"operandSegmentSizes": ir.DenseI32ArrayAttr.get([1, 2, 0])},
    )
    return op.result


def _store(memref: ir.Value, zero: ir.Value, value: ir.Value) -> None:
    ir.Operation.create(
        "amx.tile_store",
        operands=[memref, zero, zero, value],
        attributes={"operandSegmentSizes": ir.DenseI32ArrayAttr.get([1, 2, 1, 0])},
    )


def tile_product_module(name: str = "tdpbf16ps") -> ir.Module:
    """A module with ``func @name(a, b, c)`` running one ``TDPBF16PS``
    (the module docstring); in the current context and location."""
    a_type = ir.MemRefType.get([TILE_M, TILE_K], ir.BF16Type.get())
    b_type = ir.MemRefType.get([TILE_K // 2, 2 * TILE_N], ir.BF16Type.get())
    c_type = ir.MemRefType.get([TILE_M, TILE_N], ir.F32Type.get())
    module = ir.Module.create()
    with ir.InsertionPoint(module.body):
        fn = func.FuncOp(name, ir.FunctionType.get([a_type, b_type, c_type], []))
        entry = fn.add_entry_block()
        with ir.InsertionPoint(entry):
            a, b, c = entry.arguments
            zero = arith.ConstantOp(ir.IndexType.get(), 0).result
            ta = _load(a, zero, _tile((TILE_M, TILE_K), "bf16"))
            tb = _load(b, zero, _tile((TILE_K // 2, 2 * TILE_N), "bf16"))
            tc = _load(c, zero, _tile((TILE_M, TILE_N), "f32"))
            product = ir.Operation.create(
                "amx.tile_mulf", results=[tc.type], operands=[ta, tb, tc]
            ).result
            _store(c, zero, product)
            func.ReturnOp([])
    return module

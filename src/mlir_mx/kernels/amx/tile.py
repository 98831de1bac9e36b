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

__all__ = ["TILE_K", "TILE_M", "TILE_N", "tile_load", "tile_mulf", "tile_product_module",
           "tile_store", "tile_type", "tile_zero"]  # fmt: skip

#: One tile product's shape: M rows of A and C, K bf16 per row of A (64
#: bytes, a full tile row), N f32 columns of C.
TILE_M, TILE_K, TILE_N = 16, 32, 16


def tile_type(rows: int, cols: int, elem: str) -> ir.Type:
    """``!amx.tile<rows x cols x elem>``."""
    return ir.Type.parse(f"!amx.tile<{rows}x{cols}x{elem}>")


def tile_load(base: ir.Value, idx: list[ir.Value], tile: ir.Type) -> ir.Value:
    """``amx.tile_load %base[idx]`` (the row stride is the memref's)."""
    return ir.Operation.create(
        "amx.tile_load",
        results=[tile],
        operands=[base, *idx],
        attributes={"operandSegmentSizes": ir.DenseI32ArrayAttr.get([1, len(idx), 0])},
    ).result


def tile_store(base: ir.Value, idx: list[ir.Value], value: ir.Value) -> None:
    """``amx.tile_store %base[idx], %value``."""
    ir.Operation.create(
        "amx.tile_store",
        operands=[base, *idx, value],
        attributes={"operandSegmentSizes": ir.DenseI32ArrayAttr.get([1, len(idx), 1, 0])},
    )


def tile_zero(tile: ir.Type) -> ir.Value:
    """``amx.tile_zero``."""
    return ir.Operation.create("amx.tile_zero", results=[tile]).result


def tile_mulf(a: ir.Value, b: ir.Value, c: ir.Value) -> ir.Value:
    """``amx.tile_mulf`` (``TDPBF16PS``): ``c`` plus A's rows times B's pairs."""
    return ir.Operation.create("amx.tile_mulf", results=[c.type], operands=[a, b, c]).result


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
            ta = tile_load(a, [zero, zero], tile_type(TILE_M, TILE_K, "bf16"))
            tb = tile_load(b, [zero, zero], tile_type(TILE_K // 2, 2 * TILE_N, "bf16"))
            tc = tile_load(c, [zero, zero], tile_type(TILE_M, TILE_N, "f32"))
            tile_store(c, [zero, zero], tile_mulf(ta, tb, tc))
            func.ReturnOp([])
    return module

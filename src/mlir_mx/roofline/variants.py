"""The matmul variants the roofline compares, as IR.

Each variant is a module with ``@kernel`` (one ``C += A x B`` on tensors,
the accumulator as ``outs``, returned) and, for timing, ``@bench`` (the same
contraction inside an ``scf.for`` running ``%n`` times on the same
accumulator, so a measurement does not include Python's call overhead):

``f32``            a plain f32 matmul, one ``linalg.generic`` (mulf, addf).
``mx-a``           ``mx.block_matmul`` with an mx lhs, f32 rhs.
``mx-ab``          both operands mx (rhs blocked along K, ``axis = 0``).
``mx-a-blocked``   ``mx-a`` lowered with ``mx-to-linalg{matmul-lowering=blocked}``.
``mx-ab-blocked``  ``mx-ab`` lowered with ``mx-to-linalg{matmul-lowering=blocked}``.

``mx-a`` and ``mx-ab`` use the v1 fused lowering (``matmul-lowering=fused``).

An NVFP4 rhs (``element="nvfp4"``: E2M1 codes, ``f8E4M3FN`` scales in blocks
of 16) adds ``mx.block_matmul``'s f32 ``global_scale`` operand: the functions
take it after the operands, ``@kernel(A, B, g, C)`` and ``@bench(A, B, g, C, n)``
(``docs/dialect.md``).  The lhs of ``mx.block_matmul`` is E8M0-scaled.

The mx ops are built with the dialect builders; the f32 baseline has no mx
op and is written as text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from mlir import ir
from mlir.dialects import arith, func, scf

from mlir_mx.dialect import MXTensorType, block_matmul, load_dialect, print_module
from mlir_mx.errors import MXValueError
from mlir_mx.numerics.formats import SCALE_TYPE, block_scaling

__all__ = [
    "VARIANTS",
    "Shape",
    "Variant",
    "parse_shape",
    "variant_module_text",
]


@dataclass(frozen=True)
class Variant:
    name: str
    lhs_mx: bool
    rhs_mx: bool
    matmul_lowering: str | None = None  # mx-to-linalg option, None = default
    #: shipped pipeline run before lower-to-llvm when the kernel is timed
    #: (the variant's vectorized schedule); None = scalar loops
    exec_pipeline: str | None = None

    @property
    def is_mx(self) -> bool:
        return self.lhs_mx or self.rhs_mx


VARIANTS: dict[str, Variant] = {
    v.name: v
    for v in (
        Variant("f32", False, False, None, "decode-f32-vectorize"),
        # The original v1 post's variants: the v1 fused lowering, pinned explicitly
        # (the pass's default is the measured-faster blocked lowering).  They
        # are timed as scalar loops: their vectorized form (mx-vectorize)
        # compiles for 8-26 s per shape and runs slower than blocked.
        Variant("mx-a", True, False, "fused"),
        Variant("mx-ab", True, True, "fused"),
        Variant("mx-a-blocked", True, False, "blocked", "mx-vectorize-blocked"),
        Variant("mx-ab-blocked", True, True, "blocked", "mx-vectorize-blocked"),
    )
}


@dataclass(frozen=True)
class Shape:
    M: int
    N: int
    K: int

    def __str__(self) -> str:
        return f"{self.M}x{self.N}x{self.K}"


def parse_shape(text: str, block_size: int = 32) -> Shape:
    """``"32x64x64"`` (M x N x K) -> Shape; K must be a multiple of the block size."""
    m = re.fullmatch(r"\s*(\d+)x(\d+)x(\d+)\s*", text)
    if not m:
        raise MXValueError(f"bad shape '{text}': expected MxNxK, e.g. 32x64x64")
    M, N, K = (int(g) for g in m.groups())
    if min(M, N, K) < 1:
        raise MXValueError(f"bad shape '{text}': sizes must be positive")
    if K % block_size:
        raise MXValueError(
            f"bad shape '{text}': K={K} is not a multiple of the block size {block_size}"
        )
    return Shape(M, N, K)


def _f32_text(s: Shape) -> str:
    M, N, K = s.M, s.N, s.K
    a, b, c = f"tensor<{M}x{K}xf32>", f"tensor<{K}x{N}xf32>", f"tensor<{M}x{N}xf32>"
    generic = """linalg.generic {{indexing_maps = [affine_map<(m, n, k) -> (m, k)>,
        affine_map<(m, n, k) -> (k, n)>, affine_map<(m, n, k) -> (m, n)>],
        iterator_types = ["parallel", "parallel", "reduction"]}}
        ins({a_}, {b_} : {a}, {b}) outs({c_} : {c}) {{
    ^bb0(%x: f32, %y: f32, %acc: f32):
      %p = arith.mulf %x, %y : f32
      %s = arith.addf %acc, %p : f32
      linalg.yield %s : f32
    }} -> {c}"""
    kern = generic.format(a_="%a", b_="%b", c_="%c", a=a, b=b, c=c)
    loop = generic.format(a_="%a", b_="%b", c_="%x0", a=a, b=b, c=c)
    return f"""func.func @kernel(%a: {a}, %b: {b}, %c: {c}) -> {c} {{
  %0 = {kern}
  return %0 : {c}
}}
func.func @bench(%a: {a}, %b: {b}, %c: {c}, %n: index) -> {c} {{
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %r = scf.for %i = %c0 to %n step %c1 iter_args(%x0 = %c) -> ({c}) {{
    %y = {loop}
    scf.yield %y : {c}
  }}
  return %r : {c}
}}
"""


def _mx_text(s: Shape, v: Variant, element: str, block_size: int, a_element: str) -> str:
    b_fmt, b_scale = block_scaling(element)
    global_scale = v.rhs_mx and b_scale != SCALE_TYPE  # NVFP4 B: the f32 operand
    ctx = ir.Context()
    load_dialect(ctx)
    with ctx, ir.Location.unknown():
        f32 = ir.F32Type.get()
        a_t = MXTensorType((s.M, s.K), a_element, block_size).to_mlir(ctx)
        if v.rhs_mx:
            b_t = MXTensorType((s.K, s.N), b_fmt.name, block_size, b_scale, axis=0).to_mlir(ctx)
        else:
            b_t = ir.RankedTensorType.get([s.K, s.N], f32)
        c_t = ir.RankedTensorType.get([s.M, s.N], f32)
        ins = [a_t, b_t] + ([f32] if global_scale else [])
        idx = ir.IndexType.get()
        module = ir.Module.create()
        with ir.InsertionPoint(module.body):
            kern = func.FuncOp("kernel", ir.FunctionType.get([*ins, c_t], [c_t]))
            entry = kern.add_entry_block()
            with ir.InsertionPoint(entry):
                *ops, c = entry.arguments
                func.ReturnOp([block_matmul(ops[0], ops[1], c, *ops[2:])])
            bench = func.FuncOp("bench", ir.FunctionType.get([*ins, c_t, idx], [c_t]))
            entry = bench.add_entry_block()
            with ir.InsertionPoint(entry):
                *ops, c, n = entry.arguments
                c0 = arith.ConstantOp(idx, 0).result
                c1 = arith.ConstantOp(idx, 1).result
                loop = scf.ForOp(c0, n, c1, [c])
                with ir.InsertionPoint(loop.body):
                    acc = loop.inner_iter_args[0]
                    scf.YieldOp([block_matmul(ops[0], ops[1], acc, *ops[2:])])
                func.ReturnOp([loop.results[0]])
        return print_module(module)


def variant_module_text(
    variant: str,
    shape: Shape,
    element: str = "f8E4M3FN",
    block_size: int = 32,
    a_element: str | None = None,
) -> str:
    """The module (``@kernel`` and ``@bench``) of ``variant`` at ``shape``, before
    lowering (A in ``a_element`` when given, else ``element``).

    ``element="nvfp4"``: B is NVFP4 (blocks of 16, the ``global_scale``
    operand after the operands); A must then be an E8M0-scaled format
    (``a_element``), as ``mx.block_matmul``'s lhs is."""
    v = VARIANTS.get(variant)
    if v is None:
        raise MXValueError(f"unknown variant '{variant}' (available: {', '.join(VARIANTS)})")
    if not v.is_mx:
        return _f32_text(shape)
    a_fmt, a_scale = block_scaling(a_element or element)
    if a_scale != SCALE_TYPE:
        raise MXValueError(
            f"a_element: {a_element or element} has {a_scale} scales; the lhs of "
            f"mx.block_matmul takes {SCALE_TYPE} scales (an MX A, e.g. a_element='mxfp4')"
        )
    return _mx_text(shape, v, element, block_size, a_fmt.name)

"""``mx-matmul-kernels``: replace the blocked matmul by a generated kernel.

Runs on buffers, after ``bufferize`` (one-shot bufferization and the
deallocation pipeline): it finds the two ``linalg.generic`` ops that
``mx-to-linalg{matmul-lowering=blocked}`` emits for one ``mx.block_matmul``
(tagged ``mx.kernel = "block_partials"`` and ``"block_scales"``), with the
``(M, K/B, N)`` partials buffer between them, and puts one kernel of
:mod:`mlir_mx.kernels` in their place.  The partials buffer, its fill and
its deallocation go away: no partials tensor exists at any M.

The kernel performs the same f32 operations per output element as the two
generics (the blocked order, ``docs/numerics.md``), so the rewrite never
changes a result; the pass only chooses how fast it runs:

* ``schedule``: ``auto`` (the registry's choice by M's shape class and the
  formats, :func:`mlir_mx.kernels.registry.choose`) or a name of
  :data:`mlir_mx.kernels.SCHEDULES`;
* ``threads``: parallel column panels (``scf.parallel``, lowered by
  ``async-parallel-for``); 0 means the cores of this machine, else
  :func:`mlir_mx.host.check_threads`' range.

A pair whose operands it cannot handle (a non-unit innermost stride, an
unexpected user of the partials buffer) is left to the generic lowering.
"""

from __future__ import annotations

from mlir import ir

from mlir_mx.errors import MXError
from mlir_mx.host import check_threads
from mlir_mx.ir_utils import KernelTag, collect, kernel_tag, owner_op, users
from mlir_mx.kernels import Operands, Problem, emit_matmul, plan_kernel
from mlir_mx.kernels.registry import SCHEDULES, schedule_names
from mlir_mx.numerics import element_format
from mlir_mx.numerics.formats import SCALE_TYPE
from mlir_mx.passes.kernels.packed_sources import erase_unpack, packed_source
from mlir_mx.passes.registry import Option, PassError, register_pass

__all__ = ["mx_matmul_kernels"]


@register_pass(
    "mx-matmul-kernels",
    "Replace each blocked MX matmul (after bufferization) by a generated, "
    "vectorized and optionally multi-threaded kernel chosen by shape",
    options=[
        Option(
            "schedule",
            str,
            "auto",
            "Kernel schedule: 'auto' (by M and formats) or one of: "
            + "; ".join(f"'{s.name}' ({s.help})" for s in SCHEDULES.values()),
            choices=schedule_names(),
        ),
        Option("threads", int, 0, "Threads (parallel column panels); 0: this machine's cores"),
    ],
)
def mx_matmul_kernels(op: ir.Operation, *, schedule: str = "auto", threads: int = 0) -> None:
    """Rewrite every blocked matmul pair under ``op``."""
    op = getattr(op, "operation", op)
    try:  # the Option's choices checked the schedule
        threads = check_threads(threads or None)
    except MXError as err:
        raise PassError(
            f"mx-matmul-kernels: {err} (or 0: this machine's cores)", op.location
        ) from None
    for scales in collect(op, lambda o: kernel_tag(o) == KernelTag.BLOCK_SCALES):
        match = _match(scales)
        if match is None:
            continue
        prob, ops, dead, unpacks = match
        plan = plan_kernel(prob, schedule, threads)
        with ir.InsertionPoint(scales), scales.location:
            emit_matmul(prob, ops, plan)
        for d in dead:
            d.erase()
        for chain in unpacks:
            erase_unpack(chain)


def _unit_inner_stride(v: ir.Value) -> bool:
    t = ir.MemRefType(v.type)
    strides, _offset = t.get_strides_and_offset()
    return t.has_static_shape and strides[-1] == 1


def _match(scales: ir.Operation):
    """(problem, operands, ops to erase) for one scales generic, or None."""
    ins = list(scales.operands)[:-1]
    acc = scales.operands[len(scales.operands) - 1]
    partials_buf = ins[0]
    alloc = owner_op(partials_buf)
    if alloc is None or alloc.name != "memref.alloc":
        return None
    partials = fill = None
    dead: list[ir.Operation] = []
    for user in users(partials_buf):
        if user == scales:
            continue
        if kernel_tag(user) in (KernelTag.BLOCK_PARTIALS, KernelTag.BLOCK_PARTIALS_SUBBYTE):
            partials = user
        elif user.name == "linalg.fill":
            fill = user
        elif user.name == "memref.dealloc":
            dead.append(user)
        else:
            return None
    if partials is None or fill is None:
        return None
    a3, b3 = partials.operands[0], partials.operands[1]
    a_src, b_src = owner_op(a3), owner_op(b3)
    if a_src is None or b_src is None or "expand_shape" not in a_src.name + b_src.name:
        return None
    a, b = a_src.operands[0], b_src.operands[0]
    sa = ins[1]
    sb = ins[2] if len(ins) == 3 else None
    a_t, b_t = ir.MemRefType(a.type), ir.MemRefType(b.type)
    block = ir.MemRefType(a3.type).shape[-1]
    m, k = a_t.shape
    n = b_t.shape[1]
    a_element = str(a_t.element_type)
    b_element = None if sb is None else str(b_t.element_type)
    # Sub-byte codes that arrive packed (subbyte-storage=packed) are read as
    # packed bytes, each operand on its own; its unpacking then goes away.
    ua = packed_source(a) if _is_sub_byte(a_element) else None
    ub = packed_source(b) if b_element is not None and _is_sub_byte(b_element) else None
    a = ua[0] if ua else a
    b = ub[0] if ub else b
    if not all(_unit_inner_stride(v) for v in (a, b, sa, acc) + ((sb,) if sb else ())):
        return None
    # An NVFP4 B (f8E4M3FN scales): the kernel decodes its E4M3 scales; the
    # division by the global scale is the generic after the pair (mx-to-linalg).
    sb_type = SCALE_TYPE if sb is None else str(ir.MemRefType(sb.type).element_type)
    prob = Problem(
        m, n, k, block, a_element, b_element, a_packed=bool(ua), b_packed=bool(ub),
        b_scale_type=sb_type,
    )
    ops = Operands(a, sa, b, sb, acc)
    dead = [scales, partials, fill] + dead + [alloc]
    # The expand_shape views die with the partials generic (unless used elsewhere).
    for view in (a_src, b_src):
        if sum(1 for _ in view.results[0].uses) == 1:
            dead.append(view)
    tails = [u[1] for u in (ua, ub) if u]
    return prob, ops, dead, tails


def _is_sub_byte(element: str) -> bool:
    return element_format(element).is_sub_byte

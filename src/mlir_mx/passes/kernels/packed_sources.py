"""The packed codes behind an unpacked view, for the passes that replace the
lowering's generics with kernels reading packed codes directly
(``mx-matmul-kernels``, ``mx-quantize-kernels``): find the unpacking chain
``mx-to-linalg{subbyte-storage=packed}`` left after bufferization, and erase
it once the kernel no longer needs it."""

from __future__ import annotations

from mlir import ir

from mlir_mx.ir_utils import KernelTag, kernel_tag, owner_op, users

__all__ = ["erase_unpack", "packed_source"]


def packed_source(codes: ir.Value):
    """``(packed bytes, unpack chain)`` when ``codes`` is the unpacked view of
    packed codes (``mx-to-linalg{subbyte-storage=packed}``): a
    ``collapse_shape`` of a buffer written by a ``mx.kernel = "unpack_codes"``
    generic.  None otherwise."""
    collapse = owner_op(codes)
    if collapse is None or collapse.name != "memref.collapse_shape":
        return None
    buf = collapse.operands[0]
    writer = next((u for u in users(buf) if kernel_tag(u) == KernelTag.UNPACK_CODES), None)
    if writer is None:
        return None
    grouped = owner_op(writer.operands[0])
    if grouped is None or grouped.name != "memref.expand_shape":
        return None
    return grouped.operands[0], (collapse, writer, buf, grouped)


def erase_unpack(chain) -> None:
    """Erase an unpacking the kernel no longer needs (when nothing else reads it)."""
    collapse, writer, buf, grouped = chain
    if any(True for _ in collapse.results[0].uses):
        return
    collapse.erase()
    others = [u for u in users(buf) if u != writer]
    if any(u.name != "memref.dealloc" for u in others):
        return
    writer.erase()
    for u in others:
        u.erase()
    alloc = owner_op(buf)
    if alloc is not None and alloc.name == "memref.alloc":
        alloc.erase()
    if not any(True for _ in grouped.results[0].uses):
        grouped.erase()

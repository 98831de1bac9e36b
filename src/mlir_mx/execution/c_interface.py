"""The C interface of a compiled function: the one place it is spelled.

With ``llvm.emit_c_interface`` (:func:`~mlir_mx.execution.signature.emit_c_interfaces`)
upstream emits, beside each public function ``@f``, a wrapper whose symbol is
:data:`C_INTERFACE` + ``f``; ``ExecutionEngine.raw_lookup`` finds it
(:func:`lookup_entry`, which :meth:`mlir_mx.execution.Runner.entry` uses).  It
takes one argument, an array of pointers (:func:`pointer_array`): one per
argument, to a scalar's cell or to a pointer to a memref descriptor, and a
slot for the results.  The Runner's call, :class:`~mlir_mx.execution.BoundFunction`
and the conversion kernels of :mod:`mlir_mx.convert` (:func:`call_packed`) all
call through here.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence

__all__ = ["C_INTERFACE", "call_packed", "lookup_entry", "packed_function", "pointer_array"]

#: The symbol prefix of a function's C interface wrapper.
C_INTERFACE = "_mlir_ciface_"

_PACKED = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


def lookup_entry(engine, name: str) -> int:
    """The address of ``@name``'s C interface in ``engine`` (0: none).  With
    LLJIT the first lookup is when the machine code is emitted."""
    return engine.raw_lookup(C_INTERFACE + name)


def packed_function(address: int) -> Callable[[ctypes.Array], None]:
    """The C interface at ``address`` as a ctypes function of the pointer array."""
    return _PACKED(address)


def pointer_array(pointers: Sequence) -> ctypes.Array:
    """A ``void *[]`` of ``pointers`` (ctypes pointers; None: a slot filled later)."""
    return (ctypes.c_void_p * len(pointers))(
        *[None if p is None else ctypes.cast(p, ctypes.c_void_p) for p in pointers]
    )


def call_packed(
    fn: Callable[[ctypes.Array], None], descriptors: Sequence, scalars: Sequence = ()
) -> None:
    """Call ``fn`` (:func:`packed_function`) on memref ``descriptors``, then
    scalar ``scalars`` (ctypes cells, e.g. ``c_int64`` for an ``index``): its
    arguments in order (a function without results)."""
    cells = [ctypes.pointer(ctypes.pointer(d)) for d in descriptors]  # alive during the call
    cells += [ctypes.pointer(c) for c in scalars]
    fn(pointer_array(cells))

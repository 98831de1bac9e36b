"""The ``mx`` dialect: IRDL definition, the ``!mx.tensor`` type, op builders,
verifier and the seed syntax at the text boundary.

Typical use::

    from mlir import ir
    from mlir_mx.dialect import parse_module, print_module

    ctx = ir.Context()
    module = parse_module(text, ctx, filename="f.mlir")   # loads mx, verifies
    print(print_module(module))                           # v1 custom syntax

Modules: :mod:`.irdl` (the op table, the dialect), :mod:`.types`
(``!mx.tensor``), :mod:`.ops` (builders), :mod:`.verifier`, :mod:`.syntax`
(custom <-> generic text, with :mod:`.tokens` and :mod:`.guards`) and
:mod:`.text` (:func:`parse_module`, :func:`print_module`).
"""

from __future__ import annotations

from mlir_mx.dialect.irdl import load_dialect
from mlir_mx.dialect.ops import (
    OpView,
    block_matmul,
    dequantize_block,
    fold_scale,
    is_mx_op,
    mx_type,
    quantize_block,
)
from mlir_mx.dialect.text import parse_module, print_module, remap_diagnostics
from mlir_mx.dialect.types import ELEMENT_TYPES, SCALE_TYPES, MXTensorType, MXTypeError, is_mx_type
from mlir_mx.dialect.verifier import op_errors, verify_module

__all__ = [
    "ELEMENT_TYPES",
    "SCALE_TYPES",
    "MXTensorType",
    "MXTypeError",
    "OpView",
    "block_matmul",
    "dequantize_block",
    "fold_scale",
    "is_mx_op",
    "is_mx_type",
    "load_dialect",
    "mx_type",
    "op_errors",
    "parse_module",
    "print_module",
    "quantize_block",
    "remap_diagnostics",
    "verify_module",
]

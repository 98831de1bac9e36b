"""Kernels on AMX tiles (upstream's ``amx`` dialect): :mod:`.tile`, the one
``TDPBF16PS`` tile product that the start-up self-test runs
(:mod:`mlir_mx.linear.amx`), and :mod:`.matmul`, the guarded AMX-BF16 matmul
(its driver: :mod:`mlir_mx.linear.amx_matmul`), whose B :mod:`.panel`
widens from the MX codes."""

from __future__ import annotations

from mlir_mx.kernels.amx.matmul import matmul_module
from mlir_mx.kernels.amx.tile import TILE_K, TILE_M, TILE_N, tile_product_module

__all__ = ["TILE_K", "TILE_M", "TILE_N", "matmul_module", "tile_product_module"]

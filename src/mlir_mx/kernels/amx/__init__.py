"""Kernels on AMX tiles (upstream's ``amx`` dialect): :mod:`.tile`, the one
``TDPBF16PS`` tile product that the start-up self-test runs
(:mod:`mlir_mx.linear.amx`)."""

from __future__ import annotations

from mlir_mx.kernels.amx.tile import TILE_K, TILE_M, TILE_N, tile_product_module

__all__ = ["TILE_K", "TILE_M", "TILE_N", "tile_product_module"]

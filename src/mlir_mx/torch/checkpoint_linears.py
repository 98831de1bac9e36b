"""The plan and the build of a family's quantized linears and embeddings, for
:mod:`mlir_mx.torch.checkpoint` (the layouts: :mod:`.checkpoint_layouts`).

A module whose layout says quantized is read as such when the file holds its
codes in the layout's dtype; a module whose ``weight`` the file holds in a
float dtype (and without its scales) is read dense, as compressed-tensors'
ModelOpt converter and MLX's loader do.  Every tensor's dtype and shape is
checked from the headers before a byte is read.
"""

from __future__ import annotations

import warnings

import numpy as np
import torch

from mlir_mx.errors import MXValueError

from .checkpoint_layouts import Scheme

__all__ = ["layout_embedding", "plan_embedding", "plan_linear"]

_FLOATS = ("BF16", "F16", "F32")


def _dtype(files, key: str) -> str | None:
    if key not in files.where:
        return None
    return files.handles[files.where[key]].get_slice(key).get_dtype()


def _check(files, key: str, dtypes, shape) -> None:
    """``files.check``, a per-tensor scalar taken as ``()`` or ``(1,)``."""
    if shape and isinstance(shape[0], tuple):  # the scalar's two forms
        got = tuple(files.handles[files.where[key]].get_slice(key).get_shape()) if key in files.where else None
        shape = got if got in shape else shape[0]
    files.check(key, dtypes, shape)


def plan_linear(scheme: Scheme, name: str, module, files, seen: set, dense: dict):
    """The layout of ``name`` (an ``nn.Linear``) if the file holds it quantized
    (its tensors checked and added to ``seen``), else None (read dense)."""
    lay = scheme.linear(name, files)
    codes = f"{name}.{lay.codes}" if lay is not None else None
    if lay is None or codes not in files.where:
        return None
    if lay.codes == "weight" and _dtype(files, codes) in _FLOATS and f"{name}.{lay.scales}" not in files.where:
        return None  # stored dense (an unquantized layer of a family that names codes "weight")
    out, k = module.weight.shape
    if k % lay.block:
        raise MXValueError(
            f"{name}.weight: in_features {k} is not a multiple of the {lay.family} block size {lay.block}"
        )
    for key, (dtypes, shape) in lay.tensors(name, out, k).items():
        if key.endswith(tuple(lay.extra)) and key not in files.where:
            continue  # an input scale is optional (dynamic activations)
        _check(files, key, dtypes, shape)
        seen.add(key)
    if codes != f"{name}.weight":
        dense[f"{name}.weight"] = f"{codes} / {lay.scales}"
    if module.bias is not None:
        files.check(f"{name}.bias", _FLOATS, (out,))
        seen.add(f"{name}.bias")
    return lay


def plan_embedding(scheme: Scheme, name: str, module, files, seen: set) -> bool:
    """True where ``name`` is an ``nn.Embedding`` the file holds quantized (MLX)."""
    lay = scheme.embeddings
    if lay is None or type(module) is not torch.nn.Embedding or f"{name}.{lay.scales}" not in files.where:
        return False
    num, dim = module.weight.shape
    if dim % lay.block:
        raise MXValueError(f"{name}.weight: embedding_dim {dim} is not a multiple of {lay.block}")
    for key, (dtypes, shape) in lay.tensors(name, num, dim).items():
        files.check(key, dtypes, shape)
        seen.add(key)
    return True


def layout_embedding(old, name: str, lay, files, dtype) -> torch.nn.Embedding:
    """An MLX quantized embedding table, dequantized (a table is indexed, not
    multiplied: no MX kernel reads it); one warning names it."""
    w = lay.weight(name, files.tensor)
    values = torch.from_numpy(np.asarray(w.dequantize(), dtype=np.float32))
    warnings.warn(
        f"{name}: the {lay.family} {lay.element} embedding table is dequantized to "
        f"{dtype or torch.float32} ({values.numel() * 4} bytes in f32): it is indexed, not multiplied",
        stacklevel=4,
    )
    return torch.nn.Embedding.from_pretrained(
        values.to(dtype or torch.float32), freeze=True, padding_idx=old.padding_idx
    )

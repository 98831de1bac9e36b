"""What an object really holds: the memory of every array it references.

:func:`referenced_bytes` follows ``gc.get_referents`` from the roots through
instances, containers, bound methods and partials (not into modules, classes
or functions: module state such as caches is not what an object holds), and
adds up the memory blocks of every numpy array (its owning array's buffer)
and torch tensor (its storage) found, each byte once (overlapping blocks, a
tensor over a numpy array's memory say, count once).
"""

from __future__ import annotations

import functools
import gc
import sys
import types

import numpy as np

__all__ = ["referenced_bytes", "referenced_blocks"]

_SKIP = (
    types.ModuleType,
    type,
    types.FunctionType,
    types.BuiltinFunctionType,
    types.CodeType,
    types.FrameType,
)


def _owner(a: np.ndarray) -> np.ndarray:
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a


def _block(obj) -> tuple[int, int] | None:
    """``(start, end)`` of the memory an array or tensor lives in, or None."""
    if isinstance(obj, np.ndarray):
        o = _owner(obj)
        start = o.__array_interface__["data"][0]
        return start, start + o.nbytes
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(obj, torch.Tensor):
        s = obj.untyped_storage()
        return s.data_ptr(), s.data_ptr() + s.nbytes()
    return None


def referenced_blocks(*roots, limit: int = 200_000) -> list[tuple[int, int]]:
    """The merged memory blocks ``(start, end)`` of the arrays reachable from ``roots``."""
    seen: set[int] = set()
    todo = list(roots)
    blocks = []
    while todo:
        obj = todo.pop()
        if id(obj) in seen or isinstance(obj, _SKIP):
            continue
        seen.add(id(obj))
        if len(seen) > limit:
            raise RuntimeError(f"referenced_blocks: more than {limit} objects reachable")
        block = _block(obj)
        if block is not None:
            blocks.append(block)
            if isinstance(obj, np.ndarray):
                continue  # its base chain is the block
        if isinstance(obj, types.MethodType):
            todo.append(obj.__self__)
        elif isinstance(obj, functools.partial):
            todo += [obj.func, *obj.args, *obj.keywords.values()]
        else:
            todo += gc.get_referents(obj)
    merged: list[list[int]] = []
    for start, end in sorted(blocks):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(a, b) for a, b in merged]


def referenced_bytes(*roots) -> int:
    """Bytes of the memory of every array and tensor reachable from ``roots``, each byte once."""
    return sum(end - start for start, end in referenced_blocks(*roots))

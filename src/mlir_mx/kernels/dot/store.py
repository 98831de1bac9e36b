"""C's store at the end of a register tile's pass, with NVFP4's global scale
at the last one (issue 54, ``Problem.b_global``).

An NVFP4 weight's outputs are ``C = f32(c / g)``: the blocked order's ``c``
divided once by the global scale ``g`` (``docs/numerics.md``, "NVFP4 in the
matmul").  With ``Problem.b_global`` the dot kernel does that division in
its last store of each output: ``vdivps`` of the tile's registers by ``g``
(one ``(1,)`` f32 operand, broadcast), the same correctly rounded f32
division numpy made after the kernel, so the bits are the same.  It is a
division, not a multiply by ``1 / g``: ``c * f32(1 / g)`` rounds twice and
differs from ``c / g`` unless ``g`` is a power of two.  Nor can ``1 / g``
go into the chunk's scales (``t = P * sb' / g``): each block's ``t`` and
its sum would then be rounded at another scale (``docs/numerics.md``).

Only the last pass over K divides: where K takes several chunks, a tile's
earlier passes store ``c`` as it is and the next pass loads it again.  The
chunk is the last when it is the tail chunk or the only one (known when the
kernel is emitted), else where its blocks end at ``K / block`` (one compare
per tile pass, an ``scf.if`` around each form of the store).
"""

from __future__ import annotations

from mlir import ir

from mlir_mx.kernels.common.widen import LANES

__all__ = ["last_chunk", "store_tile"]


def last_chunk(k, c0, nblk: int) -> bool | ir.Value:
    """Whether the chunk of ``nblk`` blocks at ``c0`` is K's last (a bool
    where the kernel knows it, else an ``i1``).  The chunks of
    ``kernel._Dot.panels`` are full ones of ``k.kcb`` blocks, then a shorter
    tail; the side-by-side decode takes all of K in one."""
    nb = k.prob.kblocks
    if nblk != k.kcb or nblk == nb:  # the tail chunk, or all of K
        return True
    if nb % k.kcb:  # a full chunk: the tail comes after it
        return False
    return k.kb.icmp("eq", k.kb.add(c0, nblk), k.kb.idx(nb))


def store_tile(k, c: list, rows: list, col0s: list, valids: list, c0, nblk: int) -> None:
    """Store the tile's registers ``c`` (per panel of ``col0s``, row, vector)
    into C (every row one of A's: :func:`~.tiles.row_tiles`), columns past N
    masked (``valids``); divided
    by the global scale where the kernel takes it and this is K's last chunk."""
    kb = k.kb
    last = False if k.ops.g is None else last_chunk(k, c0, nblk)
    if isinstance(last, bool):
        _store(k, _divided(k, c) if last else c, rows, col0s, valids)
        return
    with kb.if_(last):
        _store(k, _divided(k, c), rows, col0s, valids)
    with kb.if_(kb.icmp("ne", kb.add(c0, nblk), kb.idx(k.prob.kblocks))):
        _store(k, c, rows, col0s, valids)


def _divided(k, c: list) -> list:
    """``c / g`` per register (``g`` broadcast from its operand)."""
    kb = k.kb
    g = kb.broadcast(kb.load(k.ops.g, [0]), LANES)
    return [kb.fdiv(v, g) for v in c]


def _store(k, c: list, rows: list, col0s: list, valids: list) -> None:
    kb, nv = k.kb, k.cfg.nv
    n = len(rows) * nv
    for p, (col0, val) in enumerate(zip(col0s, valids, strict=True)):
        for r, row in enumerate(rows):
            for v in range(nv):
                idx = [row, kb.add(col0, LANES * v)]
                kb.store_lanes(c[p * n + r * nv + v], k.ops.c, idx, val[v])

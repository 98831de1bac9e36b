"""Linear's tiled MXFP8 decode: read-order variants against the row-major form (issue 51).

Builds ``mlir_mx.Linear`` (f32 activations, 1 x N x N E4M3) once per variant,
each with the stream kernel (:mod:`mlir_mx.kernels.matmul.stream`) patched
for that variant, checks every variant gives the tiled Linear's output bytes,
then times them alternating (2 warm-up and 10 timed calls per round) and
prints median, 10th percentile and minimum per call.  ``--cpu-time`` times
the calling thread's CPU time instead of the wall clock: on the shared
machine (load average 5-12) it leaves out the time the thread waited for a
core, so 1-thread ratios survive the load (it is wrong for 2 threads).

Variants (comma-separated):
  tiled        Linear as stored and as it decodes today (64-column tiles; for
               one-byte codes on Intel ``TILED_STREAMS`` blocks in turn, no prefetch)
  s52          session 52's: one block at a time, software prefetch 4 tiles ahead
  row-major    the codes row-major (``Geometry.tiled`` forced off): the Runner's sweep
  nopf         one block at a time, no software prefetch
  cfg:F=V[/F=V]  StreamConfig fields after ``adapt`` (e.g. cfg:blocks=2, cfg:ku=16)
  pf:D/L[/S]   one block at a time, prefetch D tiles ahead, locality L (3: T0,
               2: T1), every S-th row; ``+`` joins several
  cols:S       S column ranges of the chunk, their tiles in turn (S streams, 2 KiB bursts)
  rows:S       S column ranges side by side, row by row in one loop (S x 4 partials)
  blocks:S     the same tile of S consecutive blocks side by side, row by row
  sweep        the row-major sweep's order (8 rows across all tiles) over the tiles
A trailing ``n`` after S (``rows:2n``) drops the software prefetch.

    PYTHONPATH=src MLIR_MX_CACHE_DIR=off python bench/probes/fp8_tiled_decode_variants.py \
        THREADS ROUNDS VARIANTS [--n N] [--cpu-time]

Session 53 (this Xeon, loaded: load average 5-12, ``--cpu-time``, 1 thread,
N = 8192), medians (p10) in ms: tiled 4.4-5.2 (4.0-4.5), row-major 3.5-3.9
(3.4-3.7); none of nopf, pf:{1,2,4,8,16}/3, pf:4/2, pf:8/2, pf:4/3+16/2, T0
every 2nd-8th row, 2 MiB pages, cols:{2,4,8}, sweep, blocks:{2,4,8}, ku:{4,16,32}
came within 10 % of row-major; docs/passes/mx-matmul-kernels.md ("Where
the MXFP8 decode time goes") has the table.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import time

import numpy as np

import mlir_mx
from mlir_mx.kernels.common.problem import code_columns
from mlir_mx.kernels.common.widen import LANES, decode_scales
from mlir_mx.kernels.matmul import stream
from mlir_mx.linear import weight_form

K = stream._Kernel
SAVED = {
    "chunk": K.chunk,
    "prefetch": K._prefetch_tiled,
    "sweeps": K._sweeps,
    "adapt": stream.StreamConfig.adapt,
    "software_prefetch": stream.software_prefetch,
    "tiled": weight_form.Geometry.tiled,
}


def restore() -> None:
    K.chunk, K._prefetch_tiled, K._sweeps = SAVED["chunk"], SAVED["prefetch"], SAVED["sweeps"]
    stream.StreamConfig.adapt = SAVED["adapt"]
    stream.software_prefetch = SAVED["software_prefetch"]
    weight_form.Geometry.tiled = SAVED["tiled"]


def prefetch_variant(specs):
    """``_prefetch_tiled`` for (distance in tiles, locality, row step) triples."""

    def pf(self, blk, n0):
        kb, prob, cfg = self.kb, self.prob, self.cfg
        lo, hi = self.span
        tile = LANES * cfg.nv
        for dist, loc, step in specs:
            nxt = kb.add(n0, dist * tile)
            wrap = kb.icmp("sge", nxt, hi)
            col = kb.select(wrap, kb.min(kb.add(lo, kb.sub(nxt, hi)), kb.sub(hi, tile)), nxt)
            last = kb.icmp("sge", blk, prob.kblocks - 1)
            col = kb.select(kb.andi(wrap, last), kb.sub(hi, tile), col)
            ahead = kb.select(wrap, kb.min(kb.add(blk, 1), prob.kblocks - 1), blk)
            step = step or max(1, 64 // code_columns(prob.b_element, tile, prob.b_packed))
            for r in range(0, prob.block, step):
                addr = self.b.address(None, col, (ahead, kb.idx(r)))
                kb.prefetch(self.b.mem, addr, locality=loc)

    return pf


def side_by_side(self, pairs) -> None:
    """Full tiles ``(blk, n0)`` of ``pairs`` row by row in one loop; C in pair order."""
    kb, prob, cfg = self.kb, self.prob, self.cfg
    nv, bs = cfg.nv, prob.block
    sbv = [
        [
            decode_scales(
                kb, kb.load_lanes(self.sb, [b, kb.add(n0, LANES * v)], LANES, None),
                prob.b_scale_type,
            )
            for v in range(nv)
        ]
        for b, n0 in pairs
    ]  # fmt: skip
    if cfg.prefetch:
        for b, n0 in pairs:
            self._prefetch_tiled(b, n0)
    zero = kb.const(0.0, kb.vec(LANES, kb.f32))
    with kb.loop(0, bs, cfg.ku, [zero] * (len(pairs) * nv)) as kk:
        p = list(kk.args)
        for u in range(cfg.ku):
            row = kb.add(kk.iv, u)
            for j, (b, n0) in enumerate(pairs):
                bvec = self.b_row(b, row, n0, nv, None)
                a = kb.broadcast(
                    kb.load(self.pa.af, [kb.idx(0), kb.add(kb.mul(b, bs), row)]), LANES
                )
                for v in range(nv):
                    p[j * nv + v] = kb.fma(a, bvec[v], p[j * nv + v])
        kk.yield_(p)
    p = list(kk.results)
    for j, (b, n0) in enumerate(pairs):
        q = p[j * nv : (j + 1) * nv]
        if self._paired(nv, None):
            q = self.dec.in_order(kb, q)
        sa = kb.broadcast(kb.load(self.pa.saf, [kb.idx(0), b]), LANES)
        self._scale_row(kb.idx(0), n0, nv, None, q, sa, sbv[j])


def chunk_variant(kind: str, s: int):
    """``chunk`` reading S streams: ``cols`` (tiles in turn), ``rows`` (side by side),
    ``blocks`` (S blocks' same tile side by side).  Full tiles only (N % (64 S) == 0)."""

    def chunk(self, lo, hi):
        kb, cfg, prob = self.kb, self.cfg, self.prob
        assert self.single_group and prob.b_tiled and self.dec.factor(LANES * cfg.nv) is None
        assert not self._block_nan(cfg.nv, None) and prob.kblocks % s == 0
        self.span, self.scratch = (lo, hi), None
        if cfg.threads > 1:
            self._own_c(lo, hi)
        tile = LANES * cfg.nv
        if kind == "blocks":
            with kb.loop(0, prob.kblocks, s) as blk, kb.loop(lo, hi, tile) as t:
                side_by_side(self, [(kb.add(blk.iv, j), t.iv) for j in range(s)])
            return
        per = kb.divu(kb.divu(kb.sub(hi, lo), tile), s)
        with kb.loop(0, prob.kblocks, 1) as blk, kb.loop(0, per, 1) as i:
            cols = [kb.add(lo, kb.mul(kb.add(kb.mul(per, j), i.iv), tile)) for j in range(s)]
            if kind == "rows":
                side_by_side(self, [(blk.iv, n0) for n0 in cols])
            else:
                for n0 in cols:
                    self.tile(blk.iv, n0, cfg.nv, None)

    return chunk


def override(**fields) -> None:
    """``StreamConfig.adapt`` as it is, then these fields."""
    stream.StreamConfig.adapt = lambda cfg, prob: dataclasses.replace(
        SAVED["adapt"](cfg, prob), **fields
    )


def apply(variant: str) -> None:
    restore()
    head, _, arg = variant.partition(":")
    pf = 0 if arg.endswith("n") else stream.TILED_PREFETCH  # e.g. rows:2n: no prefetch
    arg = arg.rstrip("n")
    if head == "row-major":
        weight_form.Geometry.tiled = property(lambda self: False)
    elif head == "s52":
        override(blocks=1, prefetch=stream.TILED_PREFETCH)
    elif head == "nopf":
        override(blocks=1, prefetch=0)
    elif head == "cfg":
        override(**{k: int(v) for k, v in (f.split("=") for f in arg.split("/"))})
    elif head == "pf":
        override(blocks=1, prefetch=stream.TILED_PREFETCH)
        specs = [tuple(int(x) for x in s.split("/")) + (0,) for s in arg.split("+")]
        K._prefetch_tiled = prefetch_variant([s[:3] for s in specs])
    elif head in ("cols", "rows", "blocks"):
        override(blocks=1, prefetch=pf)
        K.chunk = chunk_variant(head, int(arg))
    elif head == "sweep":
        override(blocks=1, prefetch=pf)
        K._sweeps = lambda self: self.single_group and self.prob.m == 1 and self.prob.b_is_mx
    elif head != "tiled":
        raise SystemExit(f"unknown variant {variant!r}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("threads", type=int)
    p.add_argument("rounds", type=int)
    p.add_argument("variants")
    p.add_argument("--n", type=int, default=8192)
    p.add_argument("--cpu-time", action="store_true")
    a = p.parse_args()
    clock = time.thread_time if a.cpu_time else time.perf_counter
    rng = np.random.default_rng(0)
    w = mlir_mx.quantize(rng.standard_normal((a.n, a.n)).astype(np.float32), "f8E4M3FN", 32)
    x = rng.standard_normal((1, a.n)).astype(np.float32)
    layers, outs = {}, []
    for v in a.variants.split(","):
        apply(v)
        layers[v] = mlir_mx.Linear(w, threads=a.threads)
        outs.append(layers[v](x).view(np.uint32).copy())
    restore()
    print("same output bytes:", all(np.array_equal(o, outs[0]) for o in outs))
    times = {v: [] for v in layers}
    for _ in range(a.rounds):
        for v, lin in layers.items():
            for _ in range(2):
                lin(x)
            t0 = clock()
            for _ in range(10):
                lin(x)
            times[v].append((clock() - t0) / 10)
    how = "thread CPU time" if a.cpu_time else "wall"
    print(f"1 x {a.n} x {a.n} MXFP8, {a.threads} thread(s), {how}, load {os.getloadavg()}")
    for v, ts in times.items():
        ts.sort()
        print(f"  {v:14s} median {statistics.median(ts) * 1e3:.3f} "
              f"p10 {ts[len(ts) // 10] * 1e3:.3f} min {ts[0] * 1e3:.3f} ms")  # fmt: skip


if __name__ == "__main__":
    main()

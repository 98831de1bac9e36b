"""The AMX kernel's time in a bf16 Llama's prefill, split (issue 51): the
model of ``bf16_llama_split.py`` (TinyLlama's shape, LAYERS layers, bf16,
``quantize_(model, "f4E2M1FN", fuse=FUSE)``, the bench's 128-token prompt),
each AMX call's real input captured once, then per call, interleaved,
thread CPU time, median of ROUNDS, 1 thread:

- ``prepare``: the prepare kernel and the by-block lists (``prepare_activations``);
- ``kernel``: ``AMXMatmul.run`` on the real prepared input (its failing
  (row, block)s run the f32 fallback chains);
- ``all pass``: the same kernel on an input of the same shape whose every
  (row, block) passes the guard (the signs of the real one, ±1): the tiles
  and B's widening alone, so ``kernel - all pass`` is the fallback's cost;
- ``torch``: ``torch.nn.functional.linear`` of the bf16 input and the
  dequantized weight in bf16 (oneDNN, the torch bf16 row's call).

``--fit``: per shape also the all-pass kernel at M = 32, 64, 128 and 256
rows (inputs of ±1 of the model's K), and the least-squares line through
them: its intercept is the per-call cost that does not grow with M (B's
widening, once per call, and the call itself), its slope the per-row cost
(the tiles and A's tile loads).

    PYTHONPATH=src python bench/probes/bf16_llama_kernel_split.py [--layers 8] \
        [--rounds 5] [--no-fuse] [--fit]
"""

from __future__ import annotations

import argparse
import collections
import functools
import statistics
import time

import numpy as np
import torch
from transformers import LlamaForCausalLM

from mlir_mx import oracle
from mlir_mx.linear import amx_linear
from mlir_mx.linear.amx_prepare import prepare_activations
from mlir_mx.torch import quantize_
from mlir_mx_bench.models.llama.worker import llama_config


def capture(model, ids) -> list:
    """(found, x, weight) of each AMX call of one prefill, in call order."""
    seen, real = [], amx_linear._on_amx

    def spy(ref, found, x, out, threads, g=None):
        seen.append((found, x.copy(), ref().weight()))
        return real(ref, found, x, out, threads, g)

    amx_linear._on_amx = spy
    with torch.inference_mode():
        model(ids, use_cache=True, logits_to_keep=1)
    amx_linear._on_amx = real
    return seen


def cpu(fn) -> float:
    t0 = time.thread_time()
    fn()
    return time.thread_time() - t0


def fit(mm, params, k: int, rounds: int) -> tuple[float, float, list]:
    """``(intercept, slope per row)`` ms of the all-pass kernel over M = 32..256."""
    rng = np.random.default_rng(0)
    ms, ts = (32, 64, 128, 256), []
    for m in ms:
        x = np.where(rng.random((m, k)) < 0.5, -1.0, 1.0).astype(np.float32)
        p = prepare_activations(x, params, mm.max_fallback_share)
        out = np.empty((m, mm.weight.source.shape[1]), np.float32)
        mm.run(p.args, m, 1, out=out)
        call = functools.partial(mm.run, p.args, m, 1, out=out)
        ts.append(statistics.median(cpu(call) for _ in range(rounds)))
    slope, intercept = np.polyfit(ms, ts, 1)
    return 1e3 * intercept, 1e3 * slope, [1e3 * t for t in ts]


def fallback_work(args, n: int) -> tuple[int, int]:
    """``(chains, stops)`` of one call: groups of four in-order FMA chains
    (four failing rows, 32 columns, 32 steps; each block's list padded to
    fours) and tile stops (a row tile's accumulators stored, ``c + t``,
    reloaded: once per (row tile, even block pair) with a failing row),
    each counted per column group of 32 columns."""
    _tiles, ptr, _rows, _bptr, bidx, _fa = args
    groups = -(-n // 32)
    nb = (len(ptr) - 1) // _tiles.shape[0]
    counts = np.diff(ptr).reshape(-1, nb)
    pairs = counts[:, 0::2] + np.pad(counts[:, 1::2], ((0, 0), (0, nb % 2)))
    return len(bidx) // 4 * groups, int((pairs > 0).sum()) * groups


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--no-fuse", action="store_true")
    ap.add_argument("--fit", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = LlamaForCausalLM(llama_config(args.layers)).eval().to(torch.bfloat16)
    quantize_(model, "f4E2M1FN", fuse=not args.no_fuse)
    ids = torch.randint(0, 32000, (1, 128), generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        model(ids, use_cache=True, logits_to_keep=1)  # compiles, prepares the weights
    calls = capture(model, ids)
    sums: dict = collections.defaultdict(lambda: collections.Counter())
    fails: dict = collections.defaultdict(list)
    for found, x, w in calls:
        mm, params = found
        m, k = x.shape
        n = mm.weight.source.shape[1]
        key = f"{m}x{k}x{n}"
        p_real = prepare_activations(x, params, mm.max_fallback_share)
        x_pass = np.where(x < 0, -1.0, 1.0).astype(np.float32)
        p_pass = prepare_activations(x_pass, params, mm.max_fallback_share)
        assert p_pass.failing == 0 and p_real.args is not None
        fails[key].append(p_real.failing / (m * (k // 32)))
        if p_real.failing:
            chains, stops = fallback_work(p_real.args, n)
            sums[key]["chains"] += chains
            sums[key]["stops"] += stops
        out = np.empty((m, n), np.float32)
        xt = torch.from_numpy(x).to(torch.bfloat16)
        wt = torch.from_numpy(oracle.dequantize(w)).to(torch.bfloat16)
        with torch.inference_mode():
            steps = {
                "prepare": lambda x=x, p=params, s=mm.max_fallback_share: prepare_activations(x, p, s),
                "kernel": lambda mm=mm, a=p_real.args, m=m, o=out: mm.run(a, m, 1, out=o),
                "all pass": lambda mm=mm, a=p_pass.args, m=m, o=out: mm.run(a, m, 1, out=o),
                "torch": lambda xt=xt, wt=wt: torch.nn.functional.linear(xt, wt),
            }
            for f in steps.values():
                f()
            times = {s: [] for s in steps}
            for _ in range(args.rounds):
                for s, f in steps.items():
                    times[s].append(cpu(f))
        for s, ts in times.items():
            sums[key][s] += statistics.median(ts)
        sums[key]["calls"] += 1
    print(f"{args.layers} layers, fuse={not args.no_fuse}, 1 thread, thread CPU ms "
          f"(per shape: summed over its calls, median of {args.rounds} each)")  # fmt: skip
    cols = ("prepare", "kernel", "all pass", "torch")
    print(f"  {'M x K x N':18s} {'calls':>5s} {'fail %':>7s} " + " ".join(f"{c:>9s}" for c in cols)
          + f" {'fallback':>9s}")  # fmt: skip
    total = collections.Counter()
    for key, s in sums.items():
        total.update({c: s[c] for c in cols})
        print(f"  {key:18s} {s['calls']:5d} {100 * statistics.mean(fails[key]):7.1f} "
              + " ".join(f"{1e3 * s[c]:9.1f}" for c in cols)
              + f" {1e3 * (s['kernel'] - s['all pass']):9.1f}")  # fmt: skip
    print(f"  {'all':18s} {len(calls):5d} {'':7s} " + " ".join(f"{1e3 * total[c]:9.1f}" for c in cols)
          + f" {1e3 * (total['kernel'] - total['all pass']):9.1f}")  # fmt: skip
    keys = [kk for kk in sums if sums[kk]["chains"]]
    work = np.array([[sums[kk]["chains"], sums[kk]["stops"]] for kk in keys], float)
    cost = np.array([sums[kk]["kernel"] - sums[kk]["all pass"] for kk in keys])
    (per_chain, per_stop), *_ = np.linalg.lstsq(work, cost, rcond=None)
    print("the fallback (kernel - all pass) against its work, least squares over the shapes:")
    for kk, (c, st), f in zip(keys, work, cost, strict=True):
        print(f"  {kk:18s} {c / 1e3:8.1f} k chain groups {st / 1e3:8.1f} k stops: {1e3 * f:6.1f} ms"
              f" = {1e3 * per_chain * c:5.1f} chains + {1e3 * per_stop * st:5.1f} stops")  # fmt: skip
    print(f"  {1e9 * per_chain:.0f} ns a chain group (4 rows x 32 columns x 32 steps, "
          f"{1e9 * per_chain / 32:.1f} ns a step of 8 FMAs), {1e9 * per_stop:.0f} ns a stop")  # fmt: skip
    if args.fit:
        print("all-pass kernel, ms at M = 32 / 64 / 128 / 256, and the line through them")
        done = set()
        for found, x, _w in calls:
            key = (x.shape[1], found[0].weight.source.shape[1])
            if key in done:
                continue
            done.add(key)
            b0, b1, ts = fit(found[0], found[1], x.shape[1], args.rounds)
            print(f"  K {key[0]:5d} N {key[1]:5d}: " + " / ".join(f"{t:.2f}" for t in ts)
                  + f"; intercept {b0:.2f} ms, {b1 * 128:.2f} ms per 128 rows "
                  f"(at M = 128 the intercept is {100 * b0 / (b0 + 128 * b1):.0f} %)")  # fmt: skip


if __name__ == "__main__":
    main()

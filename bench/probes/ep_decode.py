"""Decode ms/token of a gpt-oss-shaped MoE: one process on 2 threads against
2 ranks on 1 thread each, expert parallel (issue 56; docs/torch.md, "Expert
parallel"):

    python bench/probes/ep_decode.py [--layers 2] [--vocab 201088] [--rounds 3]

A checkpoint of gpt-oss-20b's shape (``mx-bench --model gpt-oss``'s writer:
random MXFP4 experts, the rest bf16; ``--layers`` layers, ``--vocab``) is
loaded by ``mlir_mx.torch.from_pretrained`` in fresh processes
(``mlir_mx_testing.distributed.run_ranks``, gloo over loopback), one row at a
time, the rows interleaved ``--rounds`` times:

* ``1 x 2``: one process, 2 threads, the model whole;
* ``2 x 1 exact`` / ``2 x 1 sum``: 2 ranks of 1 thread each, the experts
  sharded (``shard_experts(model, combine=...)``), attention, router and
  ``lm_head`` replicated; a decode step's combine by the decode exchange
  (``decode_collectives.replicated``);
* ``2 x 1 exact torch``: the same with
  ``set_decode_collective("torch")`` (gloo's all-reduce, as before session 52).

``--rows`` picks rows by name (comma-separated).

Each process runs a 16-token prompt, 4 warm-up steps, then ``--steps`` timed
one-token steps (``model(token, cache=...)``): the median step, the MoE
blocks' share of it (forward hooks), and, for the ranks, one ``all_reduce``
of each combine's size on its own (median of 200).  Prints one table.  On a
shared machine the figures are loaded-machine figures (the load average is
printed with them)."""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist

from mlir_mx_testing.distributed import run_ranks


def _moe_timer(model):
    from mlir_mx.torch import MXExperts

    spent = [0.0]
    starts = {}

    def pre(module, args):
        starts[id(module)] = time.perf_counter()

    def post(module, args, out):
        spent[0] += time.perf_counter() - starts.pop(id(module))

    for m in model.modules():
        if isinstance(m, MXExperts):
            m.register_forward_pre_hook(pre)
            m.register_forward_hook(post)
    return spent


def _rss_mb() -> float:
    """The resident set now (after the decode), MiB."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _allreduce_us(shape) -> float:
    x = torch.zeros(shape)
    dist.barrier()
    times = []
    for _ in range(200):
        t = time.perf_counter()
        dist.all_reduce(x)
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e6


def decode_rank(rank, ranks, folder, out, combine, steps, row) -> None:
    from mlir_mx.torch import MXExperts, from_pretrained, precompile
    from mlir_mx.torch.distributed import shard_experts
    from mlir_mx.torch.distributed.decode_collectives import set_decode_collective

    combine, _, collective = combine.partition("+")
    set_decode_collective(collective or "exchange")
    model = from_pretrained(folder)
    if ranks > 1:
        shard_experts(model, combine=combine)
    precompile(model)
    held = sum(m.nbytes for m in model.modules() if isinstance(m, MXExperts))
    spent = _moe_timer(model)
    ids = torch.randint(0, model.config.vocab_size, (1, 16), generator=torch.Generator().manual_seed(0))
    times, moe, tokens = [], [], []
    with torch.inference_mode():
        o = model(ids, use_cache=True)
        for i in range(4 + steps):
            nxt = o.logits[:, -1].argmax(-1, keepdim=True)
            tokens.append(int(nxt))
            spent[0] = 0.0
            t = time.perf_counter()
            o = model(nxt, cache=o.cache, use_cache=True)
            if i >= 4:
                times.append(time.perf_counter() - t)
                moe.append(spent[0])
    h = model.config.hidden_size
    k = model.config.num_experts_per_tok
    result = {
        "row": row, "rank": rank, "step_ms": statistics.median(times) * 1e3,
        "moe_ms": statistics.median(moe) * 1e3, "tokens": tokens, "held": held,
        "maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "rss_mb": _rss_mb(),
    }  # fmt: skip
    if ranks > 1:
        result["ar_exact_us"] = _allreduce_us((1, k, h))
        result["ar_sum_us"] = _allreduce_us((1, h))
    torch.save(result, Path(out) / f"{row}-rank{rank}.pt")


ROWS = (
    ("1 x 2", 1, 2, "exact"), ("2 x 1 exact", 2, 1, "exact"),
    ("2 x 1 exact torch", 2, 1, "exact+torch"), ("2 x 1 sum", 2, 1, "sum"),
)  # fmt: skip


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--vocab", type=int, default=201088)
    p.add_argument("--steps", type=int, default=16)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--rows", default=",".join(r[0] for r in ROWS),
                   help="the rows to run, comma-separated (default: all)")  # fmt: skip
    args = p.parse_args(argv)
    rows = [r for r in ROWS if r[0] == "1 x 2" or r[0] in args.rows.split(",")]  # 1 x 2: the base
    from mlir_mx_bench.models.gpt_oss.worker import write_checkpoint

    with tempfile.TemporaryDirectory(prefix="ep-decode-") as tmp:
        folder = Path(tmp) / "ckpt"
        write_checkpoint(folder, args.layers, 0, {"vocab_size": args.vocab})
        got = {row: [] for row, *_ in rows}
        for r in range(args.rounds):
            for row, ranks, threads, combine in rows:
                tag = f"{row.replace(' ', '')}-{r}"
                run_ranks(decode_rank, ranks, (str(folder), tmp, combine, args.steps, tag),
                          timeout=600, threads=threads)  # fmt: skip
                got[row].append([torch.load(Path(tmp) / f"{tag}-rank{i}.pt") for i in range(ranks)])
    print(f"gpt-oss-20b shape, {args.layers} layers, vocab {args.vocab}; median of "
          f"{args.steps} steps per process, {args.rounds} rounds; load average "
          f"{os.getloadavg()[0]:.1f} at the end")  # fmt: skip
    print("| row | decode ms/token (rounds) | MoE ms | all_reduce us | expert MB per rank "
          "| RSS MB per rank (peak at load) | tokens as 1 x 2 |")
    print("|---|---|---|---|---|---|---|")
    base = got["1 x 2"][0][0]["tokens"]
    for row, ranks, *_ in rows:
        steps = [max(x["step_ms"] for x in rnd) for rnd in got[row]]  # the slowest rank
        moe = statistics.median(max(x["moe_ms"] for x in rnd) for rnd in got[row])
        first = got[row][0][0]
        ar = (f"{statistics.median(x['ar_exact_us'] for rnd in got[row] for x in rnd):.0f} "
              f"(k x H) / {statistics.median(x['ar_sum_us'] for rnd in got[row] for x in rnd):.0f}"
              " (H)") if ranks > 1 else "-"  # fmt: skip
        same = all(x["tokens"] == base for rnd in got[row] for x in rnd)
        print(f"| {row} | {statistics.median(steps):.1f} ({', '.join(f'{s:.1f}' for s in steps)}) "
              f"| {moe:.1f} | {ar} | {first['held'] / 2**20:.0f} | {first['rss_mb']:.0f} "
              f"({first['maxrss_mb']:.0f}) "
              f"| {'same' if same else 'differ'} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Tensor parallel on one machine: 1 process x 2 threads against 2 ranks x 1 thread.

1 process x 1 thread runs too (a loaded machine's threads can stall).
A random Llama (TinyLlama's widths: hidden 2048, intermediate 5632, 32 heads,
4 KV heads, vocab 32000; ``--layers`` of them, 8 by default: 211.7 MiB of
MXFP4, twice this Xeon's L3) quantized to
MXFP4 and saved once as a compressed-tensors checkpoint (``--folder``; the
other tensors bf16).  Each configuration runs in fresh processes
(``mlir_mx_testing.distributed.run_ranks``, gloo over loopback) that load the
checkpoint (2 ranks: each its shard, ``from_pretrained(device_mesh=,
tp_plan="auto")``), then prefill a 16-token prompt and decode ``--tokens``
greedy tokens on the KV cache, timed per step after 2 warm-up steps.  Printed
per configuration (rank 0's; the ranks' RSS both):

* decode ms/token (median step) and the ratio of tokens/s, TP over 1 x 2;
* MX weight bytes held per rank, and all tensors held (parameters and
  buffers, local shards) per rank;
* peak RSS at load (``VmHWM`` after the load) and the RSS before it;
* where the time goes: one all-reduce of a ``(1, hidden)`` f32 row timed
  alone (median of 200), times the collectives a token makes (2 per layer,
  the embedding's all-reduce, the head's all-gather of the logits);
* a per-rank timeline of the median token (perf_counter stamps, one clock
  for both ranks): the MX layers' own compute, the embedding, the rest
  (attention, norms, Python), and each decode collective split into the time
  both ranks were inside it (the collective's own cost) and the time this
  rank waited for the other to arrive.

``--collective exchange,torch`` runs the 2-rank row once per kind of decode
collective (``set_decode_collective``; ``exchange+sleep``: the exchange
waited for as torch waits, not polled: ``decode_collectives.POLL_S = 0``;
``K+pin``: every thread of rank r on its half of the CPUs, as ``mx-generate
--tp`` / ``torchrun -m mlir_mx.torch.generate`` do: ``affinity.pin_rank``,
gloo's I/O thread then ``SCHED_IDLE``; ``K+pin+noidle``: not:
``affinity.IDLE_GLOO_IO``;
``K+poll``: every wait polled whatever the load: ``pool_load.configure(0)``);
``--rounds R`` repeats every row R times, interleaved (A B A B ...), and prints each row's median of the rounds
with its spread, since a loaded machine's timings move between runs.

    python bench/probes/tp_decode.py [--layers 8] [--tokens 32] [--rounds 1]
        [--collective exchange,torch] [--folder /tmp/mx-tp-probe]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

from mlir_mx_testing.distributed import run_ranks

WIDTHS = dict(hidden_size=2048, intermediate_size=5632, num_attention_heads=32,
              num_key_value_heads=4, vocab_size=32000, max_position_embeddings=256)  # fmt: skip


def build(folder: Path, layers: int) -> None:
    import transformers

    from mlir_mx.torch import quantize_, save_pretrained

    torch.manual_seed(0)
    config = transformers.LlamaConfig(num_hidden_layers=layers, **WIDTHS)
    model = transformers.LlamaForCausalLM(config).to(torch.bfloat16).eval()
    quantize_(model, element="mxfp4")
    save_pretrained(model, folder)


def _status(field: str) -> int:
    """``VmRSS`` / ``VmHWM`` of /proc/self/status in bytes (``VmHWM``: this
    process's peak since its exec; ``ru_maxrss`` is not, it keeps the forking
    parent's peak across the exec)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def _held_tensors(model) -> int:
    total = 0
    for t in (*model.parameters(), *model.buffers()):
        t = t.to_local() if hasattr(t, "to_local") else t
        total += t.numel() * t.element_size()
    return total


def _allreduce_us(hidden: int) -> float:
    import torch.distributed as dist

    if dist.get_world_size() == 1:
        return 0.0
    x, times = torch.ones(1, hidden), []
    for _ in range(200):
        t0 = time.perf_counter()
        dist.all_reduce(x)
        times.append(time.perf_counter() - t0)
    return 1e6 * statistics.median(times)


def _timed_collectives(events: list) -> None:
    """The MX layers' (and the embedding's) decode collectives,
    ``decode_collectives.replicated`` (the collective, its wait and the local
    sum or concatenation), timed: ``("comm", enter, exit)`` appended."""
    from mlir_mx.torch.distributed import decode_collectives as dc

    inner = dc.replicated

    def timed(*args, **kw):
        t0 = time.perf_counter()
        try:
            return inner(*args, **kw)
        finally:
            events.append(("comm", t0, time.perf_counter()))

    dc.replicated = timed


def _timed_modules(model, events: list) -> None:
    """Each MX layer's and the embedding's forward call (its hooks, the TP
    collectives, included): ``("mx" | "embed", enter, exit)`` appended."""
    from mlir_mx.torch.module import MXLinear

    for name, m in model.named_modules():
        kind = "mx" if isinstance(m, MXLinear) else "embed" if name.endswith("embed_tokens") else None
        if kind is None:
            continue
        stamp = {}
        m.register_forward_pre_hook(lambda *a, s=stamp: s.update(t=time.perf_counter()), prepend=True)
        m.register_forward_hook(lambda *a, s=stamp, k=kind: events.append((k, s["t"], time.perf_counter())))


def timeline(ranks: list) -> list[dict]:
    """Per rank, ms a token: ``mx`` (the MX layers less their collectives),
    ``embed``, ``rest`` (the step less both), ``inside`` (both ranks inside a
    collective) and ``waiting`` (this rank inside, the other not yet);
    averaged over the timed steps."""
    out = []
    for r in ranks:
        steps = r["events"]
        acc = dict(step=0.0, mx=0.0, embed=0.0, inside=0.0, waiting=0.0)
        each = []  # every collective's time with both ranks inside
        for i, (t0, t1, ev) in enumerate(steps):
            comm = [e for e in ev if e[0] == "comm"]
            others = [[e for e in o["events"][i][2] if e[0] == "comm"] for o in ranks]
            acc["step"] += t1 - t0
            for e in ev:
                if e[0] in ("mx", "embed"):
                    inner = sum(c[2] - c[1] for c in comm if e[1] <= c[1] and c[2] <= e[2])
                    acc[e[0]] += e[2] - e[1] - inner
            for j, c in enumerate(comm):
                last_in = max(o[j][1] for o in others)
                acc["waiting"] += last_in - c[1]
                acc["inside"] += c[2] - last_in
                each.append(c[2] - last_in)
        n = len(steps)
        row = {k: 1e3 * v / n for k, v in acc.items()}
        row["rest"] = row["step"] - row["mx"] - row["embed"] - row["inside"] - row["waiting"]
        row["median_us"] = 1e6 * statistics.median(each) if each else 0.0
        row["collectives"] = len(steps[0][2] and [e for e in steps[0][2] if e[0] == "comm"])
        out.append(row)
    return out


def measure(rank, world, folder, tokens, collective="exchange"):
    import torch.distributed as dist
    import torch.distributed.tensor.parallel  # noqa: F401 - imported before the RSS is read
    from torch.distributed.device_mesh import init_device_mesh

    from mlir_mx.torch import from_pretrained, precompile
    from mlir_mx.torch.distributed import (
        decode_collectives,
        held_weight_bytes,
        set_decode_collective,
    )

    kind, *flags = collective.split("+")
    set_decode_collective(kind)
    if "sleep" in flags:  # waited for as torch waits, never polled
        decode_collectives.POLL_S = 0.0
    if "poll" in flags:  # every wait polled, whatever the load (the load check off)
        from mlir_mx.execution import pool_load

        pool_load.configure(0)
    if "noidle" in flags:  # gloo's I/O thread left SCHED_OTHER when pinned
        from mlir_mx.torch.distributed import affinity

        affinity.IDLE_GLOO_IO = False
    if "pin" in flags:  # every thread of rank r on CPU share r
        from mlir_mx.torch.distributed.affinity import pin_rank

        pin_rank(rank, world)

    mesh = init_device_mesh("cpu", (world,)) if world > 1 else None
    rss0 = _status("VmRSS")
    t0 = time.perf_counter()
    model = from_pretrained(folder, device_mesh=mesh, tp_plan="auto" if mesh else None)
    load_s = time.perf_counter() - t0
    peak = _status("VmHWM")
    precompile(model)
    ids = torch.randint(0, WIDTHS["vocab_size"], (1, 16), generator=torch.Generator().manual_seed(1))
    steps, events, toks = [], [], []
    with torch.inference_mode():
        out = model(ids, use_cache=True)
        for i in range(tokens + 2):
            nxt = out.logits[:, -1].argmax(-1, keepdim=True)
            toks.append(int(nxt))
            dist.barrier() if world > 1 else None  # each step starts together
            if i == 2:
                _timed_collectives(events)
                _timed_modules(model, events)
            events.clear()
            t0 = time.perf_counter()
            out = model(nxt, cache=out.cache, use_cache=True)
            if i >= 2:
                steps.append((t0, time.perf_counter(), list(events)))
    return dict(ms=1e3 * statistics.median(t1 - t0 for t0, t1, _ in steps), events=steps, toks=toks,
                held=held_weight_bytes(model), tensors=_held_tensors(model), peak=peak, rss0=rss0,
                load_s=load_s, allreduce_us=_allreduce_us(WIDTHS["hidden_size"]))  # fmt: skip


def _row(name: str, res: list, times: list) -> None:
    mib, r = 2.0**20, res[0]
    spread = f" (rounds {min(times):.2f}-{max(times):.2f})" if len(times) > 1 else ""
    print(f"{name}: decode {statistics.median(times):.2f} ms/token{spread}; "
          f"MX weights held {r['held'] / mib:.1f} MiB, all tensors {r['tensors'] / mib:.1f} MiB "
          f"per rank; load {r['load_s']:.1f} s; peak RSS at load "
          + ", ".join(f"{x['peak'] / mib:.0f} MiB (before {x['rss0'] / mib:.0f})" for x in res))  # fmt: skip


def _where(name: str, res: list) -> None:
    for rank, t in enumerate(timeline(res)):
        print(f"  {name} rank {rank}, ms a token: step {t['step']:.2f} = MX layers {t['mx']:.2f} "
              f"+ embedding {t['embed']:.2f} + rest {t['rest']:.2f} + {t['collectives']} "
              f"collectives: both inside {t['inside']:.2f} (one: median {t['median_us']:.0f} us), "
              f"waiting for the other "
              f"{t['waiting']:.2f}")  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--tokens", type=int, default=32)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--collective", default="exchange", help="comma-separated: exchange, torch")
    p.add_argument("--no-single-thread", action="store_true", help="leave out 1 process x 1 thread")
    p.add_argument("--folder", default="/tmp/mx-tp-probe")
    a = p.parse_args()
    folder = Path(a.folder) / f"llama-{a.layers}"
    if not (folder / "config.json").exists():
        print(f"building {folder} ...", file=sys.stderr)
        build(folder, a.layers)
    rows = ([] if a.no_single_thread else [("1 process x 1 thread", 1, 1, "torch")])
    rows += [("1 process x 2 threads", 1, 2, "torch")]
    rows += [(f"2 ranks x 1 thread ({k})", 2, 1, k) for k in a.collective.split(",")]
    times, last = {r[0]: [] for r in rows}, {}
    for _ in range(a.rounds):  # interleaved: A B A B ...
        for name, world, threads, kind in rows:
            res = run_ranks(measure, world, (str(folder), a.tokens, kind), timeout=900, threads=threads)
            times[name].append(res[0]["ms"])
            last[name] = res
    for name, *_ in rows:
        _row(name, last[name], times[name])
    one = last["1 process x 2 threads"][0]
    base = statistics.median(times["1 process x 2 threads"])
    for name, world, *_ in rows:
        if world == 1:
            continue
        two = last[name][0]
        paired = [b / t for b, t in zip(times["1 process x 2 threads"], times[name], strict=True)]
        print(f"{name}: tokens/s over 1 x 2 {base / statistics.median(times[name]):.2f}x "
              f"(per round {', '.join(f'{x:.2f}' for x in paired)}); greedy tokens equal: "
              f"{two['toks'] == one['toks']}; MX weights per rank "
              f"{two['held'] / one['held']:.2f}x; all tensors {two['tensors'] / one['tensors']:.2f}x; "
              f"peak RSS at load {max(x['peak'] for x in last[name]) / one['peak']:.2f}x, its growth "
              f"over the RSS before the load "
              f"{max(x['peak'] - x['rss0'] for x in last[name]) / (one['peak'] - one['rss0']):.2f}x")  # fmt: skip
    per_token = 2 * a.layers + 2
    two = last[rows[-1][0]][0]
    print(f"where the time goes (the last round): one all-reduce of (1, {WIDTHS['hidden_size']}) "
          f"f32 {two['allreduce_us']:.0f} us alone, back to back; {per_token} collectives a token")
    for name, *_ in rows[-len(a.collective.split(",")) - 1 :]:
        _where(name, last[name])


if __name__ == "__main__":
    main()

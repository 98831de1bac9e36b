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
  the embedding's all-reduce, the head's all-gather of the logits).

    python bench/probes/tp_decode.py [--layers 8] [--tokens 32] [--folder /tmp/mx-tp-probe]
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


def _timed_collectives(dist, spent: list) -> None:
    """``dist.all_reduce`` / ``dist.all_gather`` (the MX layers' collectives)
    timed: their seconds added to ``spent[0]``."""
    for name in ("all_reduce", "all_gather"):
        inner = getattr(dist, name)

        def timed(*args, _inner=inner, **kw):
            t0 = time.perf_counter()
            try:
                return _inner(*args, **kw)
            finally:
                spent[0] += time.perf_counter() - t0

        setattr(dist, name, timed)


def measure(rank, world, folder, tokens):
    import torch.distributed as dist
    import torch.distributed.tensor.parallel  # noqa: F401 - imported before the RSS is read
    from torch.distributed.device_mesh import init_device_mesh

    from mlir_mx.torch import from_pretrained, precompile
    from mlir_mx.torch.distributed import held_weight_bytes

    mesh = init_device_mesh("cpu", (world,)) if world > 1 else None
    rss0 = _status("VmRSS")
    t0 = time.perf_counter()
    model = from_pretrained(folder, device_mesh=mesh, tp_plan="auto" if mesh else None)
    load_s = time.perf_counter() - t0
    peak = _status("VmHWM")
    precompile(model)
    ids = torch.randint(0, WIDTHS["vocab_size"], (1, 16), generator=torch.Generator().manual_seed(1))
    steps, spent = [], [0.0]
    with torch.inference_mode():
        out = model(ids, use_cache=True)
        for i in range(tokens + 2):
            nxt = out.logits[:, -1].argmax(-1, keepdim=True)
            dist.barrier() if world > 1 else None  # each step starts together
            t0 = time.perf_counter()
            out = model(nxt, cache=out.cache, use_cache=True)
            if i == 1:
                _timed_collectives(dist, spent)
            if i >= 2:
                steps.append(time.perf_counter() - t0)
    return dict(ms=1e3 * statistics.median(steps), comm_ms=1e3 * spent[0] / len(steps), held=held_weight_bytes(model),
                tensors=_held_tensors(model), peak=peak, rss0=rss0, load_s=load_s,
                allreduce_us=_allreduce_us(WIDTHS["hidden_size"]))  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--tokens", type=int, default=32)
    p.add_argument("--folder", default="/tmp/mx-tp-probe")
    a = p.parse_args()
    folder = Path(a.folder) / f"llama-{a.layers}"
    if not (folder / "config.json").exists():
        print(f"building {folder} ...", file=sys.stderr)
        build(folder, a.layers)
    mib = 2.0**20
    rows = {}
    for world, threads in ((1, 1), (1, 2), (2, 1)):
        res = run_ranks(measure, world, (str(folder), a.tokens), timeout=900, threads=threads)
        rows[world, threads] = res
        r = res[0]
        print(f"{world} process(es) x {threads} thread(s): decode {r['ms']:.2f} ms/token; "
              f"MX weights held {r['held'] / mib:.1f} MiB, all tensors {r['tensors'] / mib:.1f} MiB "
              f"per rank; load {r['load_s']:.1f} s; peak RSS at load "
              + ", ".join(f"{x['peak'] / mib:.0f} MiB (before {x['rss0'] / mib:.0f})" for x in res))  # fmt: skip
    one, two = rows[1, 2][0], rows[2, 1][0]
    per_token = 2 * a.layers + 2
    print(f"TP tokens/s over 1 x 2: {one['ms'] / two['ms']:.2f}x; MX weights per rank "
          f"{two['held'] / one['held']:.2f}x; all tensors {two['tensors'] / one['tensors']:.2f}x; "
          f"peak RSS at load {max(x['peak'] for x in rows[2, 1]) / one['peak']:.2f}x, its growth "
          f"over the RSS before the load "
          f"{max(x['peak'] - x['rss0'] for x in rows[2, 1]) / (one['peak'] - one['rss0']):.2f}x")  # fmt: skip
    print(f"where the time goes: one all-reduce of (1, {WIDTHS['hidden_size']}) f32 "
          f"{two['allreduce_us']:.0f} us alone; {per_token} collectives a token -> about "
          f"{per_token * two['allreduce_us'] / 1e3:.2f} ms of {two['ms']:.2f} ms; inside the "
          f"MX layers' all-reduce / all-gather calls during the steps: "
          f"{two['comm_ms']:.2f} ms a token (waiting for the other rank included)")  # fmt: skip


if __name__ == "__main__":
    main()

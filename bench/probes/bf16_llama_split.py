"""Where a bf16 Llama's prefill goes (issue 51, the ``mx-bench --model``
bf16-model row): TinyLlama's shape with LAYERS layers (random weights, the
bench's seed), ``model.to(torch.bfloat16)`` then ``quantize_(model,
"f4E2M1FN")`` (``--fuse``: ``fuse=True``), the bench's 128-token prompt and
call (``logits_to_keep=1``), on THREADS threads; torch bf16 (the same model
unconverted) as the reference.

Three views, each after a warm-up:

1. ``--split`` (default): timers wrapped around our layer's steps (wall
   ms per prefill, median of ROUNDS): ``MXLinear.forward`` in all; inside it
   ``Linear.call_into``; inside that the hook's ``_on_amx``, inside that the
   prepare kernel + by-block lists (``prepare_activations``) and the AMX
   kernel (``AMXMatmul.run``); the exact path's calls where AMX declined.
   The rest of ``forward`` (bf16 -> f32 input copy, output allocation and
   f32 -> bf16 output, checks, Python) is the difference.  The model's
   other modules (attention, norms, rotary, MLP activation, head) are the
   prefill minus ``MXLinear.forward``.
2. ``--torch-profile``: ``torch.profiler`` (record_shapes) over one
   prefill of each model, its top ops by self CPU time.
3. ``--cprofile``: cProfile of one prefill of ours, top functions by tottime.

    PYTHONPATH=src python bench/probes/bf16_llama_split.py [--layers 8] \
        [--threads 1] [--rounds 5] [--fuse] [--reference] [--clock thread|wall] \
        [--torch-profile] [--cprofile]

Times are the calling thread's CPU time by default (at 1 thread every step
runs there; at 2 threads the kernels' second thread is not counted: use
``--clock wall`` on a quiet machine).
"""

from __future__ import annotations

import argparse
import collections
import copy
import cProfile
import functools
import io
import pstats
import statistics
import time

import torch
from transformers import LlamaForCausalLM

from mlir_mx.linear import Linear, amx_linear, amx_matmul, amx_prepare
from mlir_mx.torch import quantize_
from mlir_mx.torch.module import MXLinear
from mlir_mx_bench.models.llama.worker import llama_config

TIMES: collections.Counter = collections.Counter()
#: The clock: the calling thread's CPU time (``--clock thread``, the default:
#: robust on a shared machine, and at 1 thread every step runs on the caller)
#: or wall time (``--clock wall``).
CLOCK = [time.thread_time]
COUNTS: collections.Counter = collections.Counter()


def timed(name, fn):
    @functools.wraps(fn)
    def wrapper(*a, **k):
        t0 = CLOCK[0]()
        try:
            return fn(*a, **k)
        finally:
            TIMES[name] += CLOCK[0]() - t0
            COUNTS[name] += 1

    return wrapper


def instrument() -> None:
    MXLinear.forward = timed("MXLinear.forward", MXLinear.forward)
    Linear.call_into = timed("Linear.call_into", Linear.call_into)
    amx_linear._on_amx = timed("_on_amx", amx_linear._on_amx)
    amx_prepare.prepare_activations = timed("prepare_activations", amx_prepare.prepare_activations)
    amx_prepare.by_block = timed("by_block (in prepare)", amx_prepare.by_block)
    runner = amx_prepare.prepare_runner()
    kernel = runner.amx_prepare
    runner.amx_prepare = timed("prepare kernel (in prepare)", kernel)
    amx_matmul.AMXMatmul.run = timed("AMXMatmul.run (kernel)", amx_matmul.AMXMatmul.run)


def prefill(model, ids) -> float:
    t0 = CLOCK[0]()
    with torch.inference_mode():
        model(ids, use_cache=True, logits_to_keep=1)
    return CLOCK[0]() - t0


def split(model, ids, rounds: int) -> None:
    instrument()
    prefill(model, ids)
    per_round = []
    for _ in range(rounds):
        TIMES.clear()
        COUNTS.clear()
        total = prefill(model, ids)
        per_round.append((total, dict(TIMES), dict(COUNTS)))
    med = sorted(per_round, key=lambda r: r[0])[len(per_round) // 2]
    total, times, counts = med
    print(f"prefill {1e3 * total:.1f} ms ({CLOCK[0].__name__}) (the median round of {rounds}; others "
          f"{', '.join(f'{1e3 * r[0]:.1f}' for r in per_round)})")  # fmt: skip
    for name in times:
        print(f"  {name:32s} {1e3 * times[name]:8.1f} ms  {counts[name]:4d} calls  "
              f"{1e6 * times[name] / counts[name]:8.1f} us/call")  # fmt: skip
    fwd, into = times["MXLinear.forward"], times["Linear.call_into"]
    print(f"  {'forward outside call_into':32s} {1e3 * (fwd - into):8.1f} ms")
    on = times.get("_on_amx", 0.0)
    print(f"  {'call_into outside _on_amx':32s} {1e3 * (into - on):8.1f} ms")
    inner = times.get("prepare_activations", 0.0) + times.get("AMXMatmul.run (kernel)", 0.0)
    print(f"  {'_on_amx outside prepare+run':32s} {1e3 * (on - inner):8.1f} ms")
    print(f"  {'model outside MXLinear':32s} {1e3 * (total - fwd):8.1f} ms")


def torch_profile(model, ref, ids) -> None:
    from torch.profiler import ProfilerActivity, profile

    for label, m in (("ours MXFP4 bf16 model", model), ("torch bf16", ref)):
        prefill(m, ids)
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
            prefill(m, ids)
        print(f"== {label}: top ops by self CPU time")
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=18,
                                        max_name_column_width=40))  # fmt: skip


def cprofile(model, ids) -> None:
    prefill(model, ids)
    pr = cProfile.Profile()
    pr.enable()
    prefill(model, ids)
    pr.disable()
    s = io.StringIO()
    pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(25)
    print(s.getvalue())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--fuse", action="store_true")
    ap.add_argument("--torch-profile", action="store_true")
    ap.add_argument("--cprofile", action="store_true")
    ap.add_argument("--reference", action="store_true", help="torch bf16's prefill too")
    ap.add_argument("--clock", choices=("thread", "wall"), default="thread")
    args = ap.parse_args()
    CLOCK[0] = time.thread_time if args.clock == "thread" else time.perf_counter
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)  # the bench's seed and prompt (workers.prompt_ids)
    ref = LlamaForCausalLM(llama_config(args.layers)).eval().to(torch.bfloat16)
    model = copy.deepcopy(ref)
    quantize_(model, "f4E2M1FN", fuse=args.fuse)
    ids = torch.randint(0, 32000, (1, 128), generator=torch.Generator().manual_seed(1))
    for _ in range(2):
        prefill(model, ids)  # compiles, prepares the weights for the tiles
    if args.reference:
        prefill(ref, ids)
        t = statistics.median(prefill(ref, ids) for _ in range(args.rounds))
        print(f"torch bf16 prefill {1e3 * t:.1f} ms (median of {args.rounds})")
    if args.torch_profile:
        torch_profile(model, ref, ids)
    if args.cprofile:
        cprofile(model, ids)
    if not (args.torch_profile or args.cprofile):
        split(model, ids, args.rounds)


if __name__ == "__main__":
    main()

"""Decode ms/token with our kernels on torch's OpenMP team, on their own threads,
and at 1 thread, beside torch f32: which threads run our parallel kernels.

    python bench/threads_decode.py [--layers 2] [--threads 2] [--rounds 6] [--priority -20]
    OMP_WAIT_POLICY=PASSIVE python bench/threads_decode.py ...   # the other environment

A transformers ``LlamaForCausalLM`` of TinyLlama-1.1B's shape with ``--layers``
layers (random weights, nothing downloaded), torch f32 and a copy converted by
``mlir_mx.torch.quantize_`` (MXFP4).  Rows, interleaved in rounds in one
process (one environment per process: ``OMP_WAIT_POLICY`` is read when torch
loads its OpenMP runtime):

* ``f32``: torch;
* ``async``: our kernels on upstream's async runtime (its own worker threads:
  how every parallel kernel ran before ``parallel="tasks"``);
* ``tasks``: on torch's OpenMP team (``mlir_mx.execution.threads``, the
  default when torch is loaded);
* ``t1``: our layers at 1 thread.

Each row: 8 greedy decode steps after a 32-token prompt, the median step;
per row the median and min over rounds, and the mean time per token inside
our ``MXLinear`` calls.  ``--priority N`` (Linux, root): set this process's
autogroup nice to ``N`` first (``/proc/self/autogroup``), so that on a machine
shared with other jobs the rows measure the threads' cooperation rather than
the other jobs; say so when quoting.
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--priority", type=int, default=None)
    args = ap.parse_args()
    if args.priority is not None:
        with open("/proc/self/autogroup", "w") as f:
            f.write(str(args.priority))

    import torch
    from transformers import LlamaForCausalLM

    from mlir_mx.execution.threads import set_parallel
    from mlir_mx.torch import MXLinear, quantize_
    from mlir_mx_bench.models.llama.worker import llama_config

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    f32 = LlamaForCausalLM(llama_config(args.layers)).eval()
    mx = copy.deepcopy(f32)
    quantize_(mx, "f4E2M1FN")
    layers = [m for m in mx.modules() if isinstance(m, MXLinear)]
    ids = torch.randint(0, 32000, (1, 32), generator=torch.Generator().manual_seed(1))
    in_linears = [0.0]
    forward = MXLinear.forward

    def timed(self, x):
        t0 = time.perf_counter()
        y = forward(self, x)
        in_linears[0] += time.perf_counter() - t0
        return y

    MXLinear.forward = timed

    def use(row: str) -> None:
        set_parallel("async" if row == "t1" else row)
        for m in layers:
            m._linear._calls.clear()  # rebind: the runners of both modes stay compiled
            m.threads = 1 if row == "t1" else None

    def decode(model, steps: int = 8) -> tuple[float, float]:
        times = []
        with torch.inference_mode():
            out = model(ids, use_cache=True, logits_to_keep=1)
            in_linears[0] = 0.0
            for _ in range(steps):
                nxt = out.logits[:, -1].argmax(-1, keepdim=True)
                t0 = time.perf_counter()
                out = model(nxt, past_key_values=out.past_key_values, use_cache=True,
                            logits_to_keep=1)  # fmt: skip
                times.append(time.perf_counter() - t0)
        return statistics.median(times) * 1e3, in_linears[0] / steps * 1e3

    rows = ["f32", "async", "tasks", "t1"]
    for row in rows[1:]:  # compile every row's kernels first
        use(row)
        decode(mx, 2)
    decode(f32, 2)
    step: dict[str, list[float]] = {r: [] for r in rows}
    ours: dict[str, list[float]] = {r: [] for r in rows}
    for _ in range(args.rounds):
        for row in rows:
            if row != "f32":
                use(row)
            ms, lin = decode(f32 if row == "f32" else mx)
            step[row].append(ms)
            ours[row].append(lin)
    env = os.environ.get("OMP_WAIT_POLICY", "default environment")
    print(f"{env}, {args.threads} threads, {args.layers} layers, load {os.getloadavg()[0]:.1f}")
    base = statistics.median(step["f32"])
    for row in rows:
        med = statistics.median(step[row])
        line = f"  {row:6s} median {med:7.2f} min {min(step[row]):7.2f} ms/token  {base / med:.2f}x f32"
        if row != "f32":
            line += f"  in our linears {statistics.median(ours[row]):6.2f} ms"
        print(line)


if __name__ == "__main__":
    main()

"""A converted model's decode steps with its wide torch layers on the decode
block's threads and on 1 thread, alternating in one process (issue 51;
``mlir_mx.torch.thread_policy.WIDE_LINEAR_BYTES``).

A gpt-oss of gpt-oss-20b's shape with ``--layers`` layers is written as an
MXFP4 checkpoint (``mx-bench --model gpt-oss``'s writer: random codes and
scales, the rest random bf16) and loaded with ``mlir_mx.torch.from_pretrained``;
its bf16 ``lm_head`` (201088 x 2880, 1.16 GB) is the one wide torch layer.
Blocks of ``--steps`` greedy decode steps alternate between the model as
loaded (the wide layer's hooks: torch on the block's thread count while it
runs) and the same model with those hooks taken off (every torch op of a
step on 1 thread, the policy before); the tokens are checked equal.

    python bench/probes/wide_linear_decode.py [--threads 2] [--layers 1]
        [--rounds 4] [--steps 8] [--spin]

``--spin``: one CPU-bound process beside it (the load check then keeps the
wide layer on 1 thread).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

import mlir_mx.torch  # noqa: F401
from mlir_mx.torch import from_pretrained, thread_policy
from mlir_mx_bench.models.gpt_oss.worker import write_checkpoint


def _steps(model, ids, n):
    """``n`` greedy steps after ``ids`` (the prompt's prefill untimed): the
    tokens and each step's seconds."""
    out, times = [], []
    with torch.inference_mode():
        res = model(ids, use_cache=True)
        cache, tok = res.past_key_values, res.logits[:, -1:].argmax(-1)
        for _ in range(n):
            t0 = time.perf_counter()
            res = model(tok, past_key_values=cache, use_cache=True)
            times.append(time.perf_counter() - t0)
            cache, tok = res.past_key_values, res.logits[:, -1:].argmax(-1)
            out.append(int(tok))
    return out, times


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--layers", type=int, default=1)
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--spin", action="store_true")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory(prefix="wide-linear-") as tmp:
        write_checkpoint(Path(tmp), args.layers, 0)
        model = from_pretrained(tmp)
    wide = thread_policy.wide_linears(model)
    print(f"wide torch layers: {[tuple(m.weight.shape) for m in wide]}, threads {args.threads}")
    hooks = [(m, dict(m._forward_pre_hooks), dict(m._forward_hooks)) for m in wide]

    def set_hooks(on: bool) -> None:
        for m, pre, post in hooks:
            m._forward_pre_hooks.clear()
            m._forward_hooks.clear()
            if on:
                m._forward_pre_hooks.update(pre)
                m._forward_hooks.update(post)

    ids = torch.randint(0, 1000, (1, 16))
    _steps(model, ids, 2)  # warm-up: compiles
    spin = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if args.spin else None
    times: dict[str, list[float]] = {"wide on threads": [], "all on 1 thread": []}
    tokens = {}
    try:
        for _ in range(args.rounds):
            for name, on in (("wide on threads", True), ("all on 1 thread", False)):
                set_hooks(on)
                tokens[name], t = _steps(model, ids, args.steps)
                times[name] += t
    finally:
        if spin is not None:
            spin.kill()
        set_hooks(True)
    same = tokens["wide on threads"] == tokens["all on 1 thread"]
    base = statistics.median(times["all on 1 thread"])
    for name, t in times.items():
        med = statistics.median(t)
        print(f"{name:16s} decode step median {1e3 * med:7.2f} ms ({len(t)} steps), "
              f"{1 / med:6.2f} tokens/s, speed {base / med:.3f}x")  # fmt: skip
    print(f"same tokens: {same}")


if __name__ == "__main__":
    main()

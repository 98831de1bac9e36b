"""Our layer's steps around the kernel in a bf16 Llama's prefill, per step
and per shape, for three ways of making the f32 buffers (issue 51): the
model of ``bf16_llama_split.py`` (TinyLlama's shape, LAYERS layers, random
weights, bf16, ``quantize_(model, "f4E2M1FN")``, separate layers), the
bench's 128-token prompt and call, 1 thread.  ``MXLinear.forward`` is
replaced by a replica of a separate layer's bf16 path with timers (wall
time) around each step:

- ``float``: the input's f32 copy (``x.float()``; ``scratch``: ``copy_``
  into a buffer kept per shape);
- ``alloc``: the f32 output (``zeros``: ``torch.zeros``, what the product
  does; ``empty``: ``torch.empty``; ``scratch``: a buffer kept per shape);
- ``call``: the kernel call (``zeros``: ``Linear.call_into``; ``empty`` and
  ``scratch``: the AMX path on the uninitialized output, ``amx_linear``'s
  ``_on_amx``: the AMX kernel writes every element of C; the one-row lm
  head zeroes its output and calls ``call_into``);
- ``tobf16``: the output's bf16 conversion (``y.to(torch.bfloat16)``).

The three sides alternate by prefill (rotating order); the logits of every
side are checked bit for bit against the product's.  Prints each side's
median prefill and its steps summed per prefill (ms, mean over ROUNDS),
and with ``--shapes`` the ``zeros`` side per (M, K, N).

    PYTHONPATH=src python bench/probes/bf16_layer_steps.py [--layers 8] [--rounds 6] [--shapes]
"""

from __future__ import annotations

import argparse
import collections
import math
import statistics
import time
import weakref

import torch
from transformers import LlamaForCausalLM

from mlir_mx.linear import amx_linear
from mlir_mx.linear.activations import f32_at
from mlir_mx.torch import quantize_
from mlir_mx.torch.module import MXLinear
from mlir_mx_bench.models.llama.worker import llama_config

SIDES = ("zeros", "empty", "scratch")
STEPS = ("float", "alloc", "call", "tobf16")
TIMES: collections.Counter = collections.Counter()
SIDE = ["zeros"]
KEPT: dict = {}


def kept(key, shape) -> torch.Tensor:
    if key not in KEPT:
        KEPT[key] = torch.empty(shape, dtype=torch.float32)
    return KEPT[key]


def forward(self, x):
    """A separate layer's bf16 path (contiguous ``x``, no bias), timed."""
    side, pc = SIDE[0], time.perf_counter
    m, lin = math.prod(x.shape[:-1]), self._linear
    oshape = (*x.shape[:-1], self.out_features)
    t0 = pc()
    xf = kept(("x", x.shape), x.shape).copy_(x) if side == "scratch" else x.float()
    t1 = pc()
    if side == "zeros" or m < amx_linear.MIN_ROWS:
        y = torch.zeros(oshape, dtype=torch.float32)
        t2 = pc()
        assert lin.call_into(xf.data_ptr(), m, y.data_ptr(), 1, True)
    else:
        y = kept(("y", oshape), oshape) if side == "scratch" else torch.empty(oshape)
        t2 = pc()
        found = amx_linear.amx_matmul_of(lin)
        xs, ys = f32_at(xf.data_ptr(), m, self.in_features), f32_at(y.data_ptr(), m, self.out_features)
        assert amx_linear._on_amx(weakref.ref(lin), found, xs, ys, 1, lin.global_scale)
    t3 = pc()
    out = y.to(x.dtype)
    t4 = pc()
    shape = (m, self.in_features, self.out_features)
    for step, dt in zip(STEPS, (t1 - t0, t2 - t1, t3 - t2, t4 - t3), strict=True):
        TIMES[(side, shape, step)] += dt
    return out


def prefill(model, ids) -> tuple[float, torch.Tensor]:
    t0 = time.perf_counter()
    with torch.inference_mode():
        out = model(ids, use_cache=True, logits_to_keep=1).logits
    return time.perf_counter() - t0, out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--shapes", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = LlamaForCausalLM(llama_config(args.layers)).eval().to(torch.bfloat16)
    quantize_(model, "f4E2M1FN")
    ids = torch.randint(0, 32000, (1, 128), generator=torch.Generator().manual_seed(1))
    prefill(model, ids)
    want = prefill(model, ids)[1]  # the product's logits
    MXLinear.forward = forward
    for side in SIDES:
        SIDE[0] = side
        assert torch.equal(prefill(model, ids)[1].view(torch.int16), want.view(torch.int16)), side
    TIMES.clear()
    totals: dict[str, list[float]] = {s: [] for s in SIDES}
    for r in range(args.rounds):
        for side in SIDES[r % 3 :] + SIDES[: r % 3]:
            SIDE[0] = side
            t, out = prefill(model, ids)
            assert torch.equal(out.view(torch.int16), want.view(torch.int16)), side
            totals[side].append(t)
    print(f"{args.layers} layers, 1 thread, wall ms; steps summed per prefill (mean of "
          f"{args.rounds}); logits equal to the product's in every prefill")  # fmt: skip
    shapes = sorted({k[1] for k in TIMES})
    for side in SIDES:
        steps = {s: sum(TIMES[(side, sh, s)] for sh in shapes) / args.rounds for s in STEPS}
        print(f"  {side:8s} prefill {1e3 * statistics.median(totals[side]):6.1f}  "
              + "  ".join(f"{s} {1e3 * v:6.2f}" for s, v in steps.items())
              + f"  around the call {1e3 * (sum(steps.values()) - steps['call']):6.2f}")  # fmt: skip
    if args.shapes:
        for sh in shapes:
            print(f"  zeros {sh}: " + "  ".join(
                f"{s} {1e3 * TIMES[('zeros', sh, s)] / args.rounds:6.2f}" for s in STEPS))  # fmt: skip


if __name__ == "__main__":
    main()

"""Our layer's work around the kernel in a bf16 Llama's prefill, old against
new, in one process (issue 51): the model of ``bf16_llama_split.py``
(TinyLlama's shape, LAYERS layers, random weights, bf16, ``quantize_(model,
"f4E2M1FN")``, ``--fuse``: ``fuse=True``), the bench's 128-token prompt and
call, prefills alternating between

- ``old``: session 56's ``MXLinear.forward`` for a bf16 input (reshape to 2-D,
  ``float()``, ``contiguous()``, a zeroed f32 output, ``Linear.call_into``,
  the bias, ``to(bf16)``, reshape back; a fused part: ``output_narrow`` with a
  zeroed fused result), replicated here;
- ``new``: the code as it stands (``MXLinear._by_address``: ``x.float()`` in
  ``x``'s shape, the output made in its leading shape, no reshape);
- ``--fill``: also ``fill``, the new code with a separate layer's output left uninitialized
  where the AMX path takes the call (``torch.empty``: the AMX kernel writes
  every element of C, its tiles start from zero): the zeroing pass saved.
  Session 57 measured it at 1.00x: the zeroing's cost moves into the
  kernel's stores to the cold output, so the product keeps the zeroing.

Wall ms per prefill, median of ROUNDS each, the per-pair ratio's median, and
the logits of every prefill compared bit for bit with the first.

    PYTHONPATH=src python bench/probes/bf16_layer_ab.py [--layers 8] [--threads 1] \\
        [--rounds 7] [--fuse]
"""

from __future__ import annotations

import argparse
import copy
import math
import statistics
import time
import weakref

import torch
from transformers import LlamaForCausalLM

from mlir_mx.execution.threads import call_threads
from mlir_mx.linear import amx_linear
from mlir_mx.linear.activations import f32_at
from mlir_mx.torch import quantize_
from mlir_mx.torch.module import MXLinear
from mlir_mx.torch.thread_policy import layer_threads
from mlir_mx_bench.models.llama.worker import llama_config

NEW_FORWARD = MXLinear.forward
NEW_CALL_IN_PLACE = MXLinear._call_in_place


def old_forward(self, x):
    """Session 56's path for a bf16 / f16 input (its checks are the same)."""
    if self._fused is not None and x.is_contiguous():
        y = self._fused.output_narrow(self, x)
        if y is not None:
            return (y if self.bias is None else y + self.bias.to(torch.float32)).to(x.dtype)
    x2 = x if x.dim() == 2 else x.reshape(-1, self.in_features)
    x2 = x2.float().contiguous()
    y = torch.zeros(*x2.shape[:-1], self.out_features, dtype=torch.float32)
    m, n = math.prod(x2.shape[:-1]), self._threads or layer_threads()
    if not self._linear.call_into(x2.data_ptr(), m, y.data_ptr(), n, x.dtype == torch.bfloat16):
        y = torch.from_numpy(self._linear(x2.numpy(), threads=n))
    if self.bias is not None:
        y = y + self.bias.to(torch.float32)
    y = y.to(x.dtype)
    return y if x.dim() == 2 else y.reshape(*x.shape[:-1], self.out_features)


def fill_call_in_place(self, x, bf16=False):
    """``_call_in_place`` into ``torch.empty`` where the AMX path takes the
    call (``amx_linear._on_amx``: a probe may reach private names), else as
    it stands."""
    m = math.prod(x.shape[:-1])
    lin, n = self._linear, call_threads(self._threads or layer_threads())
    found = amx_linear.amx_matmul_of(lin) if bf16 and m >= amx_linear.MIN_ROWS else None
    if found is None:
        return NEW_CALL_IN_PLACE(self, x, bf16)
    y = torch.empty(*x.shape[:-1], self.out_features, dtype=torch.float32)
    xs, ys = f32_at(x.data_ptr(), m, self.in_features), f32_at(y.data_ptr(), m, self.out_features)
    if amx_linear._on_amx(weakref.ref(lin), found, xs, ys, n, lin.global_scale):
        return y
    return NEW_CALL_IN_PLACE(self, x, bf16)


def side(name: str) -> None:
    MXLinear.forward = old_forward if name == "old" else NEW_FORWARD
    MXLinear._call_in_place = fill_call_in_place if name == "fill" else NEW_CALL_IN_PLACE


def prefill(model, ids) -> tuple[float, torch.Tensor]:
    t0 = time.perf_counter()
    with torch.inference_mode():
        out = model(ids, use_cache=True, logits_to_keep=1).logits
    return time.perf_counter() - t0, out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--fuse", action="store_true")
    ap.add_argument("--fill", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = LlamaForCausalLM(llama_config(args.layers)).eval().to(torch.bfloat16)
    ref = copy.deepcopy(model)
    quantize_(model, "f4E2M1FN", fuse=args.fuse)
    ids = torch.randint(0, 32000, (1, 128), generator=torch.Generator().manual_seed(1))
    first = None
    sides = ("old", "new", "fill") if args.fill else ("old", "new")
    for name in sides + sides:  # compiles, prepares; the bits
        side(name)
        out = prefill(model, ids)[1]
        first = out if first is None else first
        assert torch.equal(out.view(torch.int16), first.view(torch.int16)), name
    times: dict[str, list[float]] = {name: [] for name in (*sides, "torch bf16")}
    for r in range(args.rounds):
        for name in sides[r % 3 :] + sides[: r % 3]:
            side(name)
            t, out = prefill(model, ids)
            assert torch.equal(out.view(torch.int16), first.view(torch.int16)), name
            times[name].append(t)
        times["torch bf16"].append(prefill(ref, ids)[0])
    side("new")
    print(f"{args.layers} layers, fuse={args.fuse}, {args.threads} thread(s), wall ms, "
          f"median of {args.rounds} (rotating); logits equal in all "
          f"{len(sides) * (args.rounds + 2)}")  # fmt: skip
    for name, ts in times.items():
        print(f"  {name:10s} {1e3 * statistics.median(ts):7.1f}  "
              f"({', '.join(f'{1e3 * t:.1f}' for t in ts)})")  # fmt: skip
    for a, b in (("new", "old"), ("fill", "new"))[: len(sides) - 1]:
        ratios = [x / y for x, y in zip(times[a], times[b], strict=True)]
        print(f"  {a} / {b}, per round: median {statistics.median(ratios):.3f} "
              f"(min {min(ratios):.3f}, max {max(ratios):.3f})")  # fmt: skip


if __name__ == "__main__":
    main()

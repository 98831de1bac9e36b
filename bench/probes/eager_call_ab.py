"""A/B of MXLinear's eager call, in one process, on the decode of an 8-layer
TinyLlama-shaped MXFP4 model (random weights): each token is run by both
paths at the same position (the old path's cache entry is cropped), and
their times alternate.  "new" is today's ``Linear.call_into``; "old" is

- ``checked`` (default): the Linear's own checked call (``call_into`` made to
  decline), the path before 2026-12-03;
- ``per-call``: ``call_into`` (then ``_call_raw``) as it was until session 48, which looked the
  bound kernel up and passed ``(address, shape)`` pairs to
  ``BoundFunction.call_unchecked`` on every call, where today it keeps one
  addresses-only call per ``(m, threads)`` (``BoundFunction.on_shapes``).

    python bench/probes/eager_call_ab.py [threads] [checked|per-call]
"""

from __future__ import annotations

import sys
import time

import numpy as np
import torch
from transformers import LlamaForCausalLM

from mlir_mx.execution import BoundFunction
from mlir_mx.host import check_threads
from mlir_mx.linear.activations import Activations
from mlir_mx.linear.layer import Linear
from mlir_mx.torch import quantize_
from mlir_mx_bench.models.llama.worker import llama_config


def per_call(self, x_addr: int, m: int, out_addr: int, threads: int) -> bool:
    """``Linear.call_into`` (then ``_call_raw``) until session 48."""
    if not (m and self.out_features and self.in_features):
        return False
    call = self._bound(Activations(None, False, self.activations), m, check_threads(threads))
    if not isinstance(call, BoundFunction):
        return False
    call.call_unchecked((x_addr, (m, self.in_features)), (out_addr, (m, self.out_features)))
    return True


def main() -> None:
    threads = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    mode = sys.argv[2] if len(sys.argv) > 2 else "checked"
    old = {"checked": lambda *a: False, "per-call": per_call}[mode]
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = LlamaForCausalLM(llama_config(8)).eval()
    quantize_(model, "f4E2M1FN")
    raw = Linear.call_into
    ts: dict[str, list[float]] = {"old": [], "new": []}
    with torch.inference_mode():
        out = model(torch.randint(0, 32000, (1, 64)), use_cache=True)
        past, tok = out.past_key_values, out.logits[:, -1:].argmax(-1)
        for _ in range(40):
            for k in ("old", "new"):
                Linear.call_into = raw if k == "new" else old
                t0 = time.perf_counter()
                o = model(tok, past_key_values=past, use_cache=True)
                ts[k].append(time.perf_counter() - t0)
                if k == "old":
                    past.crop(-1)  # the same position for the new path
            past, tok = o.past_key_values, o.logits[:, -1:].argmax(-1)
    Linear.call_into = raw
    for k, v in ts.items():
        print(f"{threads} thread(s) {k}: median {np.median(v) * 1e3:.2f} ms/token")
    print(f"old / new: {np.median(ts['old']) / np.median(ts['new']):.3f}")


if __name__ == "__main__":
    main()

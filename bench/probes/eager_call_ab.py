"""A/B of MXLinear's eager call: the kernel handed the tensors' addresses
(``Linear._call_raw``, the default since 2026-12-03) against the Linear's own
checked call (``_call_raw`` made to decline), in one process, on the decode of
an 8-layer TinyLlama-shaped MXFP4 model (random weights): each token is run by
both paths at the same position (the old path's cache entry is cropped), and
their times alternate.

    python bench/probes/eager_call_ab.py [threads]
"""

from __future__ import annotations

import sys
import time

import numpy as np
import torch
from transformers import LlamaForCausalLM

from mlir_mx.linear.layer import Linear
from mlir_mx.torch import quantize_
from mlir_mx_bench.llama_worker import llama_config


def main() -> None:
    threads = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = LlamaForCausalLM(llama_config(8)).eval()
    quantize_(model, "f4E2M1FN")
    raw = Linear._call_raw
    ts: dict[str, list[float]] = {"old": [], "new": []}
    with torch.inference_mode():
        out = model(torch.randint(0, 32000, (1, 64)), use_cache=True)
        past, tok = out.past_key_values, out.logits[:, -1:].argmax(-1)
        for _ in range(40):
            for k in ("old", "new"):
                Linear._call_raw = raw if k == "new" else (lambda *a: False)
                t0 = time.perf_counter()
                o = model(tok, past_key_values=past, use_cache=True)
                ts[k].append(time.perf_counter() - t0)
                if k == "old":
                    past.crop(-1)  # the same position for the new path
            past, tok = o.past_key_values, o.logits[:, -1:].argmax(-1)
    Linear._call_raw = raw
    for k, v in ts.items():
        print(f"{threads} thread(s) {k}: median {np.median(v) * 1e3:.2f} ms/token")
    print(f"old / new: {np.median(ts['old']) / np.median(ts['new']):.3f}")


if __name__ == "__main__":
    main()

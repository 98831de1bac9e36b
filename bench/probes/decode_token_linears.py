"""The 57 linear layers of an 8-layer TinyLlama-shaped model, called as one
decode step calls them (q, k, v, o, gate, up, down per layer, then lm_head),
outside torch and transformers: each layer's time per token and the step's.

Every layer holds its own weight (211.7 MiB of MXFP4 in all, twice this
Xeon's 105 MB L3), so each call streams its weight from DRAM, as in the
model.  1 and 2 threads alternate in one process; 10 timed steps after 2.
``--fused`` builds the fused shapes instead (q/k/v as one 2560 x 2048
weight, gate/up as one 11264 x 2048).

    python bench/probes/decode_token_linears.py [ELEMENT] [--activations i8] [--fused]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

import mlir_mx
from mlir_mx import Linear

H, FF, KV, V, LAYERS = 2048, 5632, 256, 32000, 8


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("element", nargs="?", default="f4E2M1FN")
    p.add_argument("--activations")
    p.add_argument("--fused", action="store_true")
    a = p.parse_args()
    if a.fused:
        names, per = ["qkv", "o", "gate/up", "down"], [(H + 2 * KV, H), (H, H), (2 * FF, H), (H, FF)]
    else:
        names = ["q", "k", "v", "o", "gate", "up", "down"]
        per = [(H, H), (KV, H), (KV, H), (H, H), (FF, H), (FF, H), (H, FF)]
    shapes = per * LAYERS + [(V, H)]
    rng = np.random.default_rng(0)
    layers: dict[int, list[Linear]] = {1: [], 2: []}
    for n, k in shapes:
        q = mlir_mx.quantize(rng.standard_normal((n, k), dtype=np.float32) * 0.02, a.element, axis=1)
        for t in (1, 2):
            layers[t].append(Linear(q, threads=t, activations=a.activations))
    xs = {k: rng.standard_normal((1, k)).astype(np.float32) for k in (H, FF)}
    nbytes = sum(layer.nbytes for layer in layers[1])
    per_layer = {t: np.zeros(len(shapes)) for t in (1, 2)}
    steps: dict[int, list[float]] = {1: [], 2: []}
    for it in range(12):
        for t in (1, 2):
            torch.set_num_threads(t)
            t00 = time.perf_counter()
            for i, (layer, (_, k)) in enumerate(zip(layers[t], shapes, strict=True)):
                t0 = time.perf_counter()
                layer(xs[k])
                if it >= 2:
                    per_layer[t][i] += time.perf_counter() - t0
            if it >= 2:
                steps[t].append(time.perf_counter() - t00)
    for t in (1, 2):
        ms = per_layer[t] / 10 * 1e3
        parts = " ".join(f"{nm} {ms[j:-1:len(per)].sum():.2f}" for j, nm in enumerate(names))
        step = float(np.median(steps[t]))
        print(f"{a.element} activations={a.activations} {t} thread(s): step {step * 1e3:.2f} ms "
              f"({nbytes / step / 1e9:.1f} GB/s); ms per step: {parts} lm_head {ms[-1]:.2f}")  # fmt: skip


if __name__ == "__main__":
    main()

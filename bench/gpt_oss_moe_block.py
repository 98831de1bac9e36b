"""The MoE block alone at gpt-oss-20b's shape (32 experts, H = I = 2880, top-4), 1 thread:
MXExperts (MXFP4, f32 activations) against transformers' GptOssExperts (eager:
the per-expert loop of its CPU path) holding the same weights dequantized, in
f32 and bf16.  Random codes and scales (2^-9..2^-5), random routing; median
times.  Run: ``python bench/gpt_oss_moe_block.py`` (no environment variable set).
"""

from __future__ import annotations

import statistics
import time

import numpy as np
import torch
import transformers
from transformers.models.gpt_oss.modeling_gpt_oss import GptOssExperts

from mlir_mx.numerics import MXArray
from mlir_mx.torch import MXExperts

E, H, INTER, K = 32, 2880, 2880, 4


def _weight(rng, out: int, k: int) -> MXArray:
    codes = rng.integers(0, 256, (out, k // 2), dtype=np.uint8)
    scales = rng.integers(118, 123, (out, k // 32), dtype=np.uint8)
    return MXArray.from_packed(codes, scales, "f4E2M1FN", 32, axis=1, copy=False)


def _models():
    rng = np.random.default_rng(0)
    gate_up = [_weight(rng, 2 * INTER, H) for _ in range(E)]
    down = [_weight(rng, H, INTER) for _ in range(E)]
    ours = MXExperts(gate_up, down, torch.zeros(E, 2 * INTER), torch.zeros(E, H))
    cfg = transformers.GptOssConfig(hidden_size=H, intermediate_size=INTER, num_local_experts=E)
    cfg._experts_implementation = "eager"
    ref = GptOssExperts(cfg).eval()
    with torch.no_grad():
        ref.gate_up_proj.copy_(torch.stack([m.dequantized_weight().t() for m in ours.gate_up]))
        ref.down_proj.copy_(torch.stack([m.dequantized_weight().t() for m in ours.down]))
        ref.gate_up_proj_bias.zero_()
        ref.down_proj_bias.zero_()
    ref_bf16 = GptOssExperts(cfg).eval().to(torch.bfloat16)
    ref_bf16.load_state_dict(ref.state_dict())
    return ours, ref, ref_bf16


def _median_s(module, args, n: int) -> float:
    times = []
    with torch.inference_mode():
        for _ in range(3):
            module(*args)
        for _ in range(n):
            t0 = time.perf_counter()
            module(*args)
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    torch.set_num_threads(1)
    ours, ref, ref_bf16 = _models()
    gen = torch.Generator().manual_seed(1)
    for tokens in (1, 128):
        idx = torch.stack([torch.randperm(E, generator=gen)[:K] for _ in range(tokens)])
        weights = torch.softmax(torch.randn(tokens, K, generator=gen), -1)
        x = torch.randn(tokens, H, generator=gen)
        n = 12 if tokens == 1 else 3
        a = _median_s(ours, (x, idx, weights), n)
        b = _median_s(ref, (x, idx, weights), n)
        c = _median_s(ref_bf16, (x.bfloat16(), idx, weights.bfloat16()), n)
        print(f"T={tokens}: ours MXFP4 {a * 1e3:.1f} ms, transformers f32 {b * 1e3:.1f} ms, "
              f"bf16 {c * 1e3:.1f} ms; ours vs f32 {b / a:.2f}x, vs bf16 {c / a:.2f}x")  # fmt: skip


if __name__ == "__main__":
    main()

"""The MoE block alone at gpt-oss-20b's shape (32 experts, H = I = 2880, top-4),
at 1 thread and at all of this process's cores (``torch.set_num_threads``; our
layers follow it): MXExperts (MXFP4 with f32 activations, the exact default; and
W4A8, activations quantized to MXINT8 for the integer dot units) against
transformers' GptOssExperts (eager: the per-expert loop of its CPU path) holding
the same weights dequantized, in f32 and bf16.  Random codes and scales
(2^-9..2^-5), random routing; median times, the rows interleaved per call.
Run: ``python bench/gpt_oss_moe_block.py [--tokens 1,128]`` (no environment
variable set: the default environment, as users run it).  ``--tokens 1``: the
decode rows alone (on a CPU without a bf16 unit torch emulates the bf16 row's
matmuls, and its 128-token calls take most of a minute each).
"""

from __future__ import annotations

import statistics
import time

import numpy as np
import torch
import transformers
from transformers.models.gpt_oss.modeling_gpt_oss import GptOssExperts

from mlir_mx.host import default_thread_counts, features_summary, isa_summary
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
    w4a8 = MXExperts(
        gate_up, down, torch.zeros(E, 2 * INTER), torch.zeros(E, H), activations="i8"
    )
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
    return ours, w4a8, ref, ref_bf16


def _medians_s(rows: dict, n: int) -> dict[str, float]:
    """Median seconds of each ``name: (module, args)``, the rows called in turn."""
    times: dict[str, list[float]] = {name: [] for name in rows}
    with torch.inference_mode():
        for i in range(n + 3):
            for name, (module, args) in rows.items():
                t0 = time.perf_counter()
                module(*args)
                if i >= 3:  # 3 warm-up calls
                    times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(t) for name, t in times.items()}


def main(argv=None) -> None:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokens", default="1,128", help="comma-separated token counts (1,128)")
    token_counts = [int(t) for t in ap.parse_args(argv).tokens.split(",")]
    ours, w4a8, ref, ref_bf16 = _models()
    print(f"ISA: {isa_summary()} ({features_summary()}); torch {torch.__version__}")
    print("| threads | tokens | ours MXFP4 ms | ours W4A8 ms | transformers f32 ms "
          "| transformers bf16 ms | MXFP4 vs f32 | MXFP4 vs bf16 | W4A8 vs f32 | W4A8 vs bf16 |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|")
    for threads in default_thread_counts():
        torch.set_num_threads(threads)
        gen = torch.Generator().manual_seed(1)
        for tokens in token_counts:
            idx = torch.stack([torch.randperm(E, generator=gen)[:K] for _ in range(tokens)])
            weights = torch.softmax(torch.randn(tokens, K, generator=gen), -1)
            x = torch.randn(tokens, H, generator=gen)
            args = (x, idx, weights)
            rows = {
                "ours": (ours, args),
                "w4a8": (w4a8, args),
                "f32": (ref, args),
                "bf16": (ref_bf16, (x.bfloat16(), idx, weights.bfloat16())),
            }
            t = _medians_s(rows, 12 if tokens == 1 else 3)
            ms = {k: v * 1e3 for k, v in t.items()}
            print(
                f"| {threads} | {tokens} | {ms['ours']:.1f} | {ms['w4a8']:.1f} | {ms['f32']:.1f} "
                f"| {ms['bf16']:.1f} | {t['f32'] / t['ours']:.2f}x | {t['bf16'] / t['ours']:.2f}x "
                f"| {t['f32'] / t['w4a8']:.2f}x | {t['bf16'] / t['w4a8']:.2f}x |"
            )


if __name__ == "__main__":
    main()

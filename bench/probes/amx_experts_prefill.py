"""A gpt-oss-20b-shaped MoE block's prefill with bf16 activations, AMX-BF16
on and off (issue 51; ``mlir_mx.torch.experts_amx``): ``MXExperts`` with
``E`` MXFP4 experts (codes uniform, scales 2^-9..2^-5, as ``mx-bench --model
gpt-oss``'s checkpoint), biases N(0, 0.02), bf16 hidden states N(0, 1), a
random router (N(0, 0.02) weights, top-k, softmax of the top k), ``T`` tokens.
Interleaved rounds of the same call with ``MLIR_MX_AMX=0`` and ``1`` (and,
with ``--hf``, transformers' ``GptOssExperts`` holding the same weights
dequantized to bf16: its CPU loop over experts), wall time medians; the
outputs are checked bit for bit (AMX on against off) in every round.

    python bench/probes/amx_experts_prefill.py [--tokens 128] [--experts 32]
        [--hidden 2880] [--k 4] [--threads 1] [--rounds 7] [--acts none|bf16] [--hf]
        [--min-rows 32]

``--acts none``: a bf16 model as ``quantize_`` converts it (``gate_up`` takes
the bf16 hidden states as they are; ``down``'s input is the gate's f32
output: the exact path); ``bf16``: ``activations="bf16"`` (both projections).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np
import torch

from mlir_mx.numerics import MXArray, element_format
from mlir_mx.torch import MXExperts, experts_amx


def random_mx(rng, out: int, inp: int) -> MXArray:
    fmt = element_format("f4E2M1FN")
    codes = rng.integers(0, 16, (out, inp), dtype=np.uint8).view(fmt.dtype)
    scales = rng.integers(118, 123, (out, inp // 32), dtype=np.uint8)
    return MXArray(codes, scales, "f4E2M1FN", 32, 1)


def build(ns, rng):
    h = i = ns.hidden
    e = ns.experts
    gu = [random_mx(rng, 2 * i, h) for _ in range(e)]
    dn = [random_mx(rng, h, i) for _ in range(e)]
    gub = torch.from_numpy(rng.standard_normal((e, 2 * i)).astype(np.float32) * 0.02)
    dnb = torch.from_numpy(rng.standard_normal((e, h)).astype(np.float32) * 0.02)
    acts = None if ns.acts == "none" else ns.acts
    ex = MXExperts(gu, dn, gub.bfloat16(), dnb.bfloat16(), threads=ns.threads, activations=acts)
    return ex, gu, dn, gub, dnb


def hf_experts(ns, gu, dn, gub, dnb):
    from transformers import GptOssConfig
    from transformers.models.gpt_oss.modeling_gpt_oss import GptOssExperts

    cfg = GptOssConfig(hidden_size=ns.hidden, intermediate_size=ns.hidden,
                       num_local_experts=ns.experts, num_experts_per_tok=ns.k)  # fmt: skip
    m = GptOssExperts(cfg)
    with torch.no_grad():  # (E, in, out): transposed
        m.gate_up_proj.copy_(torch.stack([torch.from_numpy(w.dequantize().T) for w in gu]))
        m.down_proj.copy_(torch.stack([torch.from_numpy(w.dequantize().T) for w in dn]))
        m.gate_up_proj_bias.copy_(gub)
        m.down_proj_bias.copy_(dnb)
    return m.to(torch.bfloat16).eval()


def route(ns, rng, x):
    wr = torch.from_numpy(rng.standard_normal((ns.experts, ns.hidden)).astype(np.float32) * 0.02)
    logits = x.float() @ wr.T
    top, idx = torch.topk(logits, ns.k, dim=-1)
    return idx, torch.softmax(top, dim=-1).to(torch.bfloat16)


def timed(fn):
    """``(fn(), wall ms, this thread's CPU ms)``: with 1 thread the CPU time is
    the call's own, less sensitive to a loaded machine than the wall time."""
    t0, c0 = time.perf_counter(), time.thread_time()
    out = fn()
    return out, (time.perf_counter() - t0) * 1e3, (time.thread_time() - c0) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--experts", type=int, default=32)
    ap.add_argument("--hidden", type=int, default=2880)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--acts", choices=("none", "bf16"), default="bf16")
    ap.add_argument("--hf", action="store_true")
    ap.add_argument("--min-rows", type=int, default=experts_amx.EXPERT_MIN_ROWS)
    ns = ap.parse_args()
    torch.set_num_threads(ns.threads)
    experts_amx.EXPERT_MIN_ROWS = ns.min_rows
    rng = np.random.default_rng(0)
    ex, gu, dn, gub, dnb = build(ns, rng)
    hf = hf_experts(ns, gu, dn, gub, dnb) if ns.hf else None
    x = torch.from_numpy(rng.standard_normal((ns.tokens, ns.hidden)).astype(np.float32))
    x = x.to(torch.bfloat16)
    idx, w = route(ns, rng, x)
    counts = torch.bincount(idx.reshape(-1), minlength=ns.experts)
    print(
        f"load {os.getloadavg()[0]:.2f}; {ns.tokens} tokens, top-{ns.k} of {ns.experts}, "
        f"H = I = {ns.hidden}, {ns.threads} thread(s), acts={ns.acts}, min rows {ns.min_rows}"
    )
    print(f"rows per expert (sorted): {sorted(counts.tolist())}")
    print(
        f"experts with >= {ns.min_rows} rows: {int((counts >= ns.min_rows).sum())}, "
        f">= 32: {int((counts >= 32).sum())}"
    )
    times: dict[str, list[tuple[float, float]]] = {"exact": [], "amx": [], "hf": []}
    with torch.inference_mode():
        for r in range(ns.rounds + 1):  # round 0: warm-up (compiles, prepares)
            os.environ["MLIR_MX_AMX"] = "0"
            want, *t_exact = timed(lambda: ex(x, idx, w))
            os.environ["MLIR_MX_AMX"] = "1"
            got, *t_amx = timed(lambda: ex(x, idx, w))
            assert torch.equal(got.view(torch.int16), want.view(torch.int16)), "bits differ"
            if hf is not None:
                _, *t_hf = timed(lambda: hf(x, idx, w))
            if r:
                times["exact"].append(t_exact)
                times["amx"].append(t_amx)
                if hf is not None:
                    times["hf"].append(t_hf)
    paths = experts_amx.last_paths(ex.gate_up), experts_amx.last_paths(ex.down)
    for name, p in zip(("gate_up", "down"), paths, strict=True):
        print(
            f"{name}: amx {p.count('amx')}, declined {p.count('exact')}, below/none {p.count(None)}"
        )
    for col, label in ((0, "wall"), (1, "thread CPU (the caller's)")):
        med = {k: statistics.median(t[col] for t in v) for k, v in times.items() if v}
        hf_part = ""
        if "hf" in med:
            hf_part = f", transformers bf16 {med['hf']:.1f} (AMX {med['hf'] / med['amx']:.2f}x)"
        print(
            f"MoE block ms (median of {ns.rounds}, {label}): exact {med['exact']:.1f}, "
            f"AMX {med['amx']:.1f} ({med['exact'] / med['amx']:.2f}x){hf_part}"
        )
    print(
        f"AMX-prepared weights held: {experts_amx.prepared_bytes(ex) / 2**20:.1f} MiB "
        f"(the experts' own: {ex.nbytes / 2**20:.1f} MiB); load {os.getloadavg()[0]:.2f}"
    )


if __name__ == "__main__":
    main()

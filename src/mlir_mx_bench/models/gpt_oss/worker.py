"""One row of ``mx-bench --model gpt-oss``, in a process of its own (its RSS its own).

``python -m mlir_mx_bench.models.gpt_oss.worker SPEC.json`` loads the checkpoint of the
spec (written once by :func:`write_checkpoint`: gpt-oss's layout, MXFP4
experts), times the load, a prefill and a greedy decode, and writes
``<out>/<name>.json`` and ``<name>-logits.npy`` (the prefill's logits); with
``bound`` also ``<name>-bound.npy`` (:func:`mlir_mx.torch.logit_bound`).

Each row also times its MoE blocks inside the model (:class:`MoEClock`: every
decoder layer's ``mlp``, router and experts, the same modules in every row),
so that the MoE's own speed is reported beside the whole model's.

Row kinds: ``hf-f32`` / ``hf-bf16`` (transformers' own CPU path:
``GptOssForCausalLM.from_pretrained(dtype=...)``, which dequantizes the
experts to that dtype; needs ``accelerate``), ``mx-bf16`` / ``mx-f32`` (ours:
``mlir_mx.torch.from_pretrained``, the experts MXFP4 as stored with f32
activations, the other tensors bf16 as stored or f32), ``mx-i8`` (ours, the
experts' activations quantized to MXINT8 per call: W4A8).
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

from mlir_mx_bench.models.llama.worker import release_free_memory, rss_kib
from mlir_mx_bench.models.workers import (
    greedy_decode,
    host_gflops,
    prefill_seconds,
    prompt_ids,
    worker_main,
    write_logit_bound,
)

__all__ = ["GPT_OSS_20B", "MoEClock", "expert_bytes", "run_row", "write_checkpoint"]

#: gpt-oss-20b's shape (its config.json), but for the layer count.
GPT_OSS_20B = dict(
    hidden_size=2880,
    intermediate_size=2880,
    num_local_experts=32,
    num_experts_per_tok=4,
    num_attention_heads=64,
    num_key_value_heads=8,
    head_dim=64,
    vocab_size=201088,
    sliding_window=128,
    max_position_embeddings=131072,
    rms_norm_eps=1e-5,
    swiglu_limit=7.0,
    tie_word_embeddings=False,
)


def write_checkpoint(folder: Path, layers: int, seed: int, config: dict | None = None) -> int:
    """A gpt-oss checkpoint of gpt-oss-20b's shape with ``layers`` layers in
    ``folder``: random experts as MXFP4 bytes (codes uniform, scales 2^-9..2^-5),
    every other tensor random bf16 (std 0.02; norms 1); returns its bytes."""
    from safetensors.torch import save_file
    from transformers import GptOssConfig, GptOssForCausalLM

    cfg = GptOssConfig(**{**GPT_OSS_20B, "num_hidden_layers": layers, **(config or {})})
    with torch.device("meta"):
        meta = GptOssForCausalLM(cfg)
    gen = torch.Generator().manual_seed(seed)
    tensors = {}
    for key, t in meta.state_dict().items():
        if key.endswith(("gate_up_proj", "down_proj")):
            e, a, b = t.shape  # (E, in, out): transposed
            tensors[key + "_blocks"] = torch.randint(
                0, 256, (e, b, a // 32, 16), dtype=torch.uint8, generator=gen
            )
            tensors[key + "_scales"] = torch.randint(
                118, 123, (e, b, a // 32), dtype=torch.uint8, generator=gen
            )
        elif key.endswith("norm.weight"):
            tensors[key] = torch.ones(t.shape, dtype=torch.bfloat16)
        else:
            tensors[key] = (torch.randn(t.shape, generator=gen) * 0.02).to(torch.bfloat16)
    folder.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    config_dict = cfg.to_dict()
    config_dict["quantization_config"] = {
        "quant_method": "mxfp4",
        "modules_to_not_convert": [
            "model.layers.*.self_attn",
            "model.layers.*.mlp.router",
            "model.embed_tokens",
            "lm_head",
        ],
    }
    (folder / "config.json").write_text(json.dumps(config_dict, indent=1))
    return (folder / "model.safetensors").stat().st_size


def expert_bytes(model) -> tuple[int, int]:
    """``(bytes, weights)`` of the experts' matrices as the model holds them."""
    from mlir_mx.torch import MXExperts

    total = n = 0
    for m in model.modules():
        if isinstance(m, MXExperts):
            total += m.nbytes
            n += m.num_experts * 3 * m.hidden_size * m.intermediate_size
        elif hasattr(m, "gate_up_proj") and isinstance(m.gate_up_proj, torch.Tensor):
            for p in (m.gate_up_proj, m.down_proj):
                total += p.numel() * p.element_size()
                n += p.numel()
    return total, n


class MoEClock:
    """Wall seconds spent in the model's MoE blocks (each decoder layer's
    ``mlp``: router and experts), per call of the model: forward hooks, so
    that the figure is the MoE's share of the same run.  ``calls[i]``: the
    seconds of the i-th model call since :meth:`reset`."""

    def __init__(self, model):
        self.calls: list[float] = []
        self._t0 = 0.0
        blocks = [layer.mlp for layer in model.model.layers]
        self._handles = [model.register_forward_pre_hook(lambda *_: self.calls.append(0.0))]
        for b in blocks:
            self._handles.append(b.register_forward_pre_hook(self._start))
            self._handles.append(b.register_forward_hook(self._stop))

    def _start(self, *_):
        self._t0 = time.perf_counter()

    def _stop(self, *_):
        self.calls[-1] += time.perf_counter() - self._t0

    def reset(self) -> None:
        self.calls = []

    def remove(self) -> None:
        for h in self._handles:
            h.remove()


def _load(spec: dict):
    kind, path = spec["kind"], spec["checkpoint"]
    dtype = torch.float32 if kind.endswith("f32") else torch.bfloat16
    if kind.startswith("hf"):
        from transformers import GptOssForCausalLM, Mxfp4Config

        # transformers' own (dequantizing) path: with mlir_mx.torch imported, a plain
        # from_pretrained would load our MXExperts (docs/torch.md, "transformers' own API").
        deq = Mxfp4Config(dequantize=True)
        return GptOssForCausalLM.from_pretrained(path, dtype=dtype, quantization_config=deq).eval()
    from mlir_mx.torch import from_pretrained

    acts = {"mx-i8": "i8", "mx-abf16": "bf16"}.get(kind)
    return from_pretrained(path, dtype=None if dtype == torch.bfloat16 else dtype, activations=acts)


def run_row(spec: dict) -> dict:
    """Load, time and check one row (the module docstring)."""
    import transformers  # noqa: F401  (imported before the baseline RSS)

    import mlir_mx.torch  # noqa: F401

    torch.set_num_threads(spec["threads"])
    out_dir, name = Path(spec["out"]), spec["name"]
    rec: dict = {"spec": spec, "rss_start_kib": rss_kib()["VmRSS"]}
    t0 = time.perf_counter()
    model = _load(spec)
    rec["load_s"] = time.perf_counter() - t0
    release_free_memory()
    rec["rss_model_kib"] = rss_kib()["VmRSS"]
    rec["expert_bytes"], rec["expert_weights"] = expert_bytes(model)
    ids = prompt_ids(model, spec)
    t0 = time.perf_counter()
    greedy_decode(model, ids, 2)  # warm-up: our kernels compile here
    rec["warmup_s"] = time.perf_counter() - t0
    clock = MoEClock(model)
    probe = host_gflops(spec["threads"])
    rec["host_gflops"] = [probe()]
    times = prefill_seconds(model, ids, spec["prefill_samples"])
    rec["prefill_ms"] = 1e3 * statistics.median(times)
    rec["moe_prefill_ms"] = 1e3 * statistics.median(clock.calls)
    clock.reset()
    rec["tokens"], steps = greedy_decode(model, ids, spec["new_tokens"])
    rec["host_gflops"].append(probe())
    rec["decode_tokens_per_s"] = 1.0 / statistics.median(steps)
    # calls[0]: greedy_decode's prefill; then one call per timed step.
    rec["moe_decode_ms"] = 1e3 * statistics.median(clock.calls[1:])
    clock.remove()
    if spec.get("bound"):
        write_logit_bound(model, ids, spec)
    elif spec.get("logits"):
        with torch.inference_mode():
            np.save(out_dir / f"{name}-logits.npy", model(ids).logits[0].float().numpy())
    mem = rss_kib()
    rec["rss_end_kib"], rec["rss_peak_kib"] = mem["VmRSS"], mem["VmHWM"]
    return rec


if __name__ == "__main__":
    sys.exit(worker_main(run_row, sys.argv[1:]))

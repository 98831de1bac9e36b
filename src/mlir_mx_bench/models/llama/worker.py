"""One row of ``mx-bench --model``, in a process of its own (so that its RSS is its own).

``python -m mlir_mx_bench.models.llama.worker SPEC.json`` builds the Llama of the spec
(``transformers`` ``LlamaForCausalLM`` from a config, random weights from a
fixed seed, nothing downloaded), converts it as the row says, times a prefill
and a greedy decode, and writes ``<out>/<name>.json`` (figures) and
``<name>-logits.npy`` (the prefill's logits, every position); a reference row
also writes ``<name>-bound.npy`` (:func:`mlir_mx.torch.logit_bound`).

Row kinds: ``f32``, ``bf16`` (torch), ``torchao`` (torchao's MX path on the CPU:
``MXDynamicActivationMXWeightConfig``, emulated kernels), ``mx`` (ours:
``mlir_mx.torch.quantize_``) and ``reference`` (``mlir_mx.torch.dequantize_``).
"""

from __future__ import annotations

import ctypes
import gc
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

from mlir_mx_bench.models.workers import (
    greedy_decode,
    host_gflops,
    prefill_seconds,
    prompt_ids,
    worker_main,
    write_logit_bound,
)

__all__ = [
    "linear_weight_bytes",
    "llama_config",
    "module_weight_blocks",
    "release_free_memory",
    "rss_kib",
    "run_row",
]

#: TinyLlama-1.1B's shape (its config.json), the default model.
TINYLLAMA = dict(
    hidden_size=2048,
    intermediate_size=5632,
    num_hidden_layers=22,
    num_attention_heads=32,
    num_key_value_heads=4,
    vocab_size=32000,
    max_position_embeddings=2048,
    rms_norm_eps=1e-5,
    tie_word_embeddings=False,
)


def llama_config(layers: int, **overrides):
    """The ``LlamaConfig`` of TinyLlama-1.1B's shape with ``layers`` layers."""
    from transformers import LlamaConfig

    return LlamaConfig(**{**TINYLLAMA, "num_hidden_layers": layers, **overrides})


def rss_kib() -> dict[str, int]:
    """``VmRSS`` (now) and ``VmHWM`` (peak) of this process, KiB (Linux)."""
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0])
    return out


def release_free_memory() -> None:
    """Return freed heap memory to the OS (glibc ``malloc_trim``), so that RSS shows
    what the model holds, not what the conversion once used."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _tensor_storages(t: torch.Tensor, out: dict[int, int]) -> None:
    if hasattr(t, "__tensor_flatten__") and type(t) is not torch.Tensor and type(t) is not torch.nn.Parameter:
        names, _ = t.__tensor_flatten__()
        for name in names:
            _tensor_storages(getattr(t, name), out)
        return
    s = t.untyped_storage()
    out[s.data_ptr()] = s.nbytes()


def linear_weight_bytes(model: torch.nn.Module) -> tuple[int, int]:
    """``(bytes, parameters)`` of the linear layers' weights, measured from the
    memory they reference: every tensor of every ``nn.Linear`` / ``MXLinear``
    (a tensor subclass's inner tensors) and every array an ``MXLinear``'s
    ``mlir_mx.Linear`` holds (``Linear.held``: its stored codes and scales, or
    the dot kernels' records, the only form it keeps), each block of memory
    counted once."""
    mem: dict[int, int] = {}
    params = sum(_module_weights(m, mem) for m in model.modules())
    return sum(mem.values()), params


def module_weight_blocks(module: torch.nn.Module) -> dict[int, int]:
    """The memory blocks (address -> bytes) one linear layer's weights
    reference, as :func:`linear_weight_bytes` counts them (none for other
    modules; fused siblings share theirs)."""
    mem: dict[int, int] = {}
    _module_weights(module, mem)
    return mem


def _module_weights(m: torch.nn.Module, mem: dict[int, int]) -> int:
    """Add the memory blocks ``m`` references to ``mem`` (address -> bytes) if it
    is a linear layer; its parameter count (0 otherwise)."""
    from mlir_mx.torch import MXLinear

    if isinstance(m, MXLinear):
        for a in m.linear.held:
            while isinstance(a.base, np.ndarray):
                a = a.base
            mem[a.ctypes.data] = a.nbytes
    elif not isinstance(m, torch.nn.Linear):
        return 0
    for t in (*m.parameters(recurse=False), *m.buffers(recurse=False)):
        _tensor_storages(t, mem)
    return m.in_features * m.out_features


def _convert(model, spec: dict) -> dict:
    kind, fmt = spec["kind"], spec.get("format")
    t0 = time.perf_counter()
    info: dict = {}
    if kind == "bf16":
        model.to(torch.bfloat16)
    elif kind == "torchao":
        from torchao.prototype.mx_formats import MXDynamicActivationMXWeightConfig
        from torchao.quantization import quantize_ as ao_quantize_
        from torchao.quantization.quantize_.common.kernel_preference import KernelPreference

        dt = torch.float4_e2m1fn_x2 if fmt == "f4E2M1FN" else torch.float8_e4m3fn
        model.to(torch.bfloat16)  # torchao's MX inference path takes bf16 only
        ao_quantize_(
            model,
            MXDynamicActivationMXWeightConfig(
                activation_dtype=dt, weight_dtype=dt, kernel_preference=KernelPreference.EMULATED
            ),
        )
    elif kind in ("mx", "mx-w4a8", "mx-fused", "mx-w4a8-fused", "mx-bf16", "mx-bf16-fused"):
        from mlir_mx.torch import quantize_

        if kind.startswith("mx-bf16"):  # a bf16 model: its linear layers get bf16 inputs
            model.to(torch.bfloat16)

        acts = "i8" if kind.startswith("mx-w4a8") else None
        fuse = kind.endswith("fused")
        info["summary"] = str(quantize_(model, fmt, activations=acts, fuse=fuse))
    elif kind == "reference":
        from mlir_mx.torch import dequantize_

        dequantize_(model, fmt)
    info["convert_s"] = time.perf_counter() - t0
    return info


def run_row(spec: dict) -> dict:
    """Build, convert, time and check one row (see the module docstring)."""
    from transformers import LlamaForCausalLM

    import mlir_mx.torch  # noqa: F401  (imported before the baseline RSS)

    torch.set_num_threads(spec["threads"])
    out_dir, name = Path(spec["out"]), spec["name"]
    rec: dict = {"spec": spec, "rss_start_kib": rss_kib()["VmRSS"]}
    torch.manual_seed(spec["seed"])
    model = LlamaForCausalLM(llama_config(spec["layers"], **spec.get("config", {}))).eval()
    release_free_memory()
    rec["rss_f32_model_kib"] = rss_kib()["VmRSS"]
    rec.update(_convert(model, spec))
    release_free_memory()
    rec["rss_model_kib"] = rss_kib()["VmRSS"]
    rec["linear_bytes"], rec["linear_params"] = linear_weight_bytes(model)
    ids = prompt_ids(model, spec)
    if spec["kind"] == "reference":
        write_logit_bound(model, ids, spec)
        rec["tokens"], _ = greedy_decode(model, ids, spec["new_tokens"])
    else:
        t0 = time.perf_counter()
        if spec["kind"] != "torchao":  # (torchao: nothing to compile, and it is slow)
            greedy_decode(model, ids, 3)  # warm-up: compiles our kernels (prefill and decode)
        rec["warmup_s"] = time.perf_counter() - t0
        probe = host_gflops(spec["threads"])
        rec["host_gflops"] = [probe()]
        rec["prefill_s"] = prefill_seconds(model, ids, spec["prefill_samples"])
        rec["tokens"], rec["decode_step_s"] = greedy_decode(model, ids, spec["new_tokens"])
        rec["host_gflops"].append(probe())
        with torch.inference_mode():
            logits = model(ids).logits[0].to(torch.float32)
        np.save(out_dir / f"{name}-logits.npy", logits.numpy())
        rec["prefill_ms"] = 1e3 * statistics.median(rec["prefill_s"])
        # The median step: robust to bursts of other processes on shared cores.
        rec["decode_tokens_per_s"] = 1.0 / statistics.median(rec["decode_step_s"])
        rec["decode_tokens_per_s_mean"] = len(rec["decode_step_s"]) / sum(rec["decode_step_s"])
        if spec.get("profile"):
            from mlir_mx_bench.models.llama.profiling import profile_decode

            rec["profile"] = profile_decode(
                model, ids, spec["profile"], rec["linear_bytes"], module_weight_blocks
            )
    mem = rss_kib()
    rec["rss_end_kib"], rec["rss_peak_kib"] = mem["VmRSS"], mem["VmHWM"]
    return rec


if __name__ == "__main__":
    sys.exit(worker_main(run_row, sys.argv[1:]))

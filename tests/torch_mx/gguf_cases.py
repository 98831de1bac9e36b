"""GGUF model files written as llama.cpp's ``convert_hf_to_gguf.py`` writes them
(``LlamaModel``, ``GptOssModel``: tensor names, the Q/K row permutation of
llama, gpt-oss's ``gate_up_proj`` split into ``ffn_gate_exps`` rows ``0::2``
and ``ffn_up_exps`` rows ``1::2``, the hyperparameter keys), with ``gguf``
(gguf-py), from a transformers model; and the reference each file must match:
the same transformers model with every tensor replaced by gguf-py's own
dequantization of the bytes written (``gguf.quants.dequantize``, independent
of mlir-mx's reader)."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

gguf = pytest.importorskip("gguf", reason="gguf not installed (pip install 'mlir-mx[gguf]')")
Q = gguf.GGMLQuantizationType

from llama_cases import TINY  # noqa: E402

#: A tiny Llama (hidden 64 so every ``ne0`` is a multiple of 32).
TINY_LLAMA = {**TINY, "vocab_size": 264, "max_position_embeddings": 256, "tie_word_embeddings": False}
ARCH = {"llama": "llama", "gpt_oss": "gpt-oss"}


def permute(w: np.ndarray, n_head: int, n_head_kv: int | None) -> np.ndarray:
    """convert_hf_to_gguf's ``LlamaModel.permute`` (Q and K rows, for ggml's rope)."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return (
        w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
        .swapaxes(1, 2)
        .reshape(w.shape)
    )


def unpermute(w: np.ndarray, n_head: int, n_head_kv: int | None) -> np.ndarray:
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return (
        w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:])
        .swapaxes(1, 2)
        .reshape(w.shape)
    )


def encode(w: np.ndarray, qtype) -> np.ndarray:
    """The bytes (or values) gguf-py stores for ``w`` (f32) as ``qtype``."""
    w = np.ascontiguousarray(w, np.float32)
    if qtype == Q.F32:
        return w
    if qtype == Q.F16:
        return w.astype(np.float16)
    if qtype == Q.MXFP4:  # quantized by mlir-mx's oracle, laid out by its writer's conversion
        from mlir_mx import oracle
        from mlir_mx.interop.gguf import mxfp4_to_ggml

        return mxfp4_to_ggml(oracle.quantize(w, "f4E2M1FN", 32, axis=-1))
    if qtype == 40:  # NVFP4: gguf-py 0.19.0 has no quantizer; the oracle's, global scale 1
        from mlir_mx import oracle
        from mlir_mx.interop.gguf_nvfp4 import nvfp4_to_ggml

        return nvfp4_to_ggml(oracle.quantize(w, "nvfp4", axis=-1, global_scale=1.0))
    return gguf.quants.quantize(w, qtype)


def decode(raw: np.ndarray, qtype) -> np.ndarray:
    """gguf-py's dequantization, f32."""
    if qtype in (Q.F32, Q.F16):
        return np.array(raw, np.float32)
    return gguf.quants.dequantize(raw, qtype).astype(np.float32)


def _byte_tokens(n: int) -> tuple[list[str], list[int], list[str]]:
    """A byte-level BPE vocabulary of ``n`` tokens: the 256 byte symbols, merges
    of a few letter pairs, and ``<|endoftext|>`` (control) last."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    symbols = list(bytes_to_unicode().values())
    merges = [("h", "e"), ("l", "l"), ("o", "r"), ("Ġ", "w"), ("he", "ll"), ("t", "h")]
    tokens = symbols + ["".join(m) for m in merges]
    tokens = tokens[: n - 1]
    tokens += [f"<|reserved_{i}|>" for i in range(n - 1 - len(tokens))] + ["<|endoftext|>"]
    types = [1] * (n - 1) + [3]
    return tokens, types, [" ".join(m) for m in merges]


def write_metadata(w, config, arch: str, tokenizer: bool) -> None:
    w.add_context_length(config.max_position_embeddings)
    w.add_embedding_length(config.hidden_size)
    w.add_block_count(config.num_hidden_layers)
    w.add_feed_forward_length(config.intermediate_size)
    w.add_head_count(config.num_attention_heads)
    w.add_head_count_kv(config.num_key_value_heads)
    w.add_layer_norm_rms_eps(config.rms_norm_eps)
    rope = config.rope_parameters
    w.add_rope_freq_base(rope["rope_theta"])
    w.add_key_length(config.head_dim)
    w.add_value_length(config.head_dim)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    if arch == "llama":
        w.add_rope_dimension_count(config.head_dim)
        w.add_vocab_size(config.vocab_size)
    else:
        w.add_expert_count(config.num_local_experts)
        w.add_expert_used_count(config.num_experts_per_tok)
        w.add_sliding_window(config.sliding_window)
        w.add_expert_feed_forward_length(config.intermediate_size)
        if rope.get("rope_type") == "yarn":
            w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
            w.add_rope_scaling_factor(rope["factor"])
            w.add_rope_scaling_orig_ctx_len(rope["original_max_position_embeddings"])
    if tokenizer:
        tokens, types, merges = _byte_tokens(config.vocab_size)
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre("gpt-4o")
        w.add_token_list(tokens)
        w.add_token_types(types)
        w.add_token_merges(merges)
        w.add_eos_token_id(len(tokens) - 1)
        w.add_bos_token_id(len(tokens) - 1)


def _gguf_tensors(model, arch: str) -> dict[str, tuple[str, np.ndarray, object]]:
    """GGUF name -> (HF name, f32 array in the file's layout, how to put it back)."""
    cfg = model.config
    names = gguf.get_tensor_name_map(
        next(k for k, v in gguf.MODEL_ARCH_NAMES.items() if v == arch), cfg.num_hidden_layers
    )
    out = {}
    for key, t in model.state_dict().items():
        if key == "lm_head.weight" and getattr(cfg, "tie_word_embeddings", False):
            continue  # llama.cpp writes no output.weight for tied embeddings
        a = t.detach().float().numpy()
        stem, _, suffix = key.rpartition(".")
        if key.endswith("experts.gate_up_proj"):  # (E, H, 2I): gate columns 0::2, up 1::2
            blk = key.split(".")[2]
            out[f"blk.{blk}.ffn_gate_exps.weight"] = (key, a[:, :, 0::2].transpose(0, 2, 1), "g")
            out[f"blk.{blk}.ffn_up_exps.weight"] = (key, a[:, :, 1::2].transpose(0, 2, 1), "u")
            continue
        if key.endswith("experts.gate_up_proj_bias"):
            blk = key.split(".")[2]
            out[f"blk.{blk}.ffn_gate_exps.bias"] = (key, a[:, 0::2], "gb")
            out[f"blk.{blk}.ffn_up_exps.bias"] = (key, a[:, 1::2], "ub")
            continue
        if key.endswith("experts.down_proj"):
            out[f"blk.{key.split('.')[2]}.ffn_down_exps.weight"] = (key, a.transpose(0, 2, 1), "t")
            continue
        if key.endswith("experts.down_proj_bias"):
            out[f"blk.{key.split('.')[2]}.ffn_down_exps.bias"] = (key, a, None)
            continue
        if key.endswith("self_attn.sinks"):
            stem, suffix = key, "weight"
        name = names.get_name(stem)
        assert name is not None, key
        how = None
        if arch == "llama" and key.endswith(("q_proj.weight", "k_proj.weight")):
            kv = cfg.num_key_value_heads if "k_proj" in key else cfg.num_attention_heads
            a, how = permute(a, cfg.num_attention_heads, kv), "p"
        out[f"{name}.{suffix}"] = (key, a, how)
    return out


def write_model_gguf(model, path, types=None, *, tokenizer: bool = True):
    """Write ``model`` (a Llama or gpt-oss ``...ForCausalLM``) to the GGUF file
    ``path``; ``types(gguf_name, array) -> GGMLQuantizationType`` (default: F32).
    Returns the reference: a copy of ``model`` in f32 holding gguf-py's
    dequantization of every tensor written."""
    import copy

    arch = ARCH[model.config.model_type]
    tensors = _gguf_tensors(model, arch)
    ref = copy.deepcopy(model).float().eval()
    state = {k: v.detach().clone().float() for k, v in ref.state_dict().items()}
    w = gguf.GGUFWriter(str(path), arch)
    write_metadata(w, model.config, arch, tokenizer)
    for name, (key, a, how) in tensors.items():
        qtype = Q.F32 if types is None else types(name, a)
        raw = encode(a, qtype)
        w.add_tensor(name, raw, raw_dtype=None if qtype in (Q.F32, Q.F16) else qtype)
        back = torch.from_numpy(decode(raw, qtype).reshape(a.shape).copy())
        if how == "p":
            kv = model.config.num_key_value_heads if "k_proj" in key else None
            back = torch.from_numpy(
                unpermute(
                    back.numpy(),
                    model.config.num_attention_heads,
                    kv or model.config.num_attention_heads,
                ).copy()
            )
        if how in ("g", "u"):
            state[key][:, :, 0 if how == "g" else 1 :: 2] = back.transpose(1, 2)
        elif how in ("gb", "ub"):
            state[key][:, 0 if how == "gb" else 1 :: 2] = back
        elif how == "t":
            state[key] = back.transpose(1, 2).contiguous()
        else:
            state[key] = back
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    ref.load_state_dict(state, strict=False)
    if getattr(ref.config, "tie_word_embeddings", False):
        ref.tie_weights()
    return ref


def tiny_llama(seed: int = 0, **overrides):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(seed)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**{**TINY_LLAMA, **overrides}))
    with torch.no_grad():  # init std 0.02 leaves the logits near a tie
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.15)
    return model.eval()


# -- the gpt-oss-shaped file of the target (issue 53): written without a model ----------


def gpt_oss_shaped_config(layers: int = 2, vocab: int = 8192):
    """gpt-oss-20b's shape (hidden 2880, 32 experts of 2880, top-4, 64 query heads,
    8 KV heads of 64, yarn rope), ``layers`` layers, a ``vocab``-token tied embedding."""
    transformers = pytest.importorskip("transformers")
    rope = {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
            "truncate": False, "original_max_position_embeddings": 4096, "rope_theta": 150000.0}  # fmt: skip
    return transformers.GptOssConfig(
        num_hidden_layers=layers, vocab_size=vocab, hidden_size=2880, intermediate_size=2880,
        num_local_experts=32, num_experts_per_tok=4, num_attention_heads=64,
        num_key_value_heads=8, head_dim=64, sliding_window=128,
        max_position_embeddings=131072, tie_word_embeddings=True, rope_parameters=rope,
    )  # fmt: skip


def write_gpt_oss_shaped(path, config, seed: int = 0, q8_0=("blk.0.attn_k.weight",)) -> None:
    """A GGUF file of ``config``'s shape with random weights: every ``*_exps``
    tensor MXFP4 (random codes, scale bytes 119..122: 2**-8 .. 2**-5), the
    tensors named in ``q8_0`` Q8_0, the rest F32 (no output.weight: tied)."""
    rng = np.random.default_rng(seed)
    h, inter, e = config.hidden_size, config.intermediate_size, config.num_local_experts
    nq, nkv, hd = config.num_attention_heads, config.num_key_value_heads, config.head_dim

    def normal(shape, std, mean=0.0):
        return (rng.standard_normal(shape, dtype=np.float32) * std + mean).astype(np.float32)

    def mxfp4(rows, cols):
        raw = rng.integers(0, 256, (e, rows, cols // 32, 17), dtype=np.uint8)
        raw[..., 0] = rng.integers(119, 123, (e, rows, cols // 32), dtype=np.uint8)
        return raw.reshape(e, rows, cols // 32 * 17)

    w = gguf.GGUFWriter(str(path), "gpt-oss")
    write_metadata(w, config, "gpt-oss", tokenizer=False)
    tensors = {"token_embd.weight": normal((config.vocab_size, h), 1.0),
               "output_norm.weight": normal(h, 0.1, 1.0)}  # fmt: skip
    for b in range(config.num_hidden_layers):
        p = f"blk.{b}."
        tensors |= {
            p + "attn_norm.weight": normal(h, 0.1, 1.0),
            p + "post_attention_norm.weight": normal(h, 0.1, 1.0),
            p + "attn_q.weight": normal((nq * hd, h), 0.02), p + "attn_q.bias": normal(nq * hd, 0.1),
            p + "attn_k.weight": normal((nkv * hd, h), 0.02), p + "attn_k.bias": normal(nkv * hd, 0.1),
            p + "attn_v.weight": normal((nkv * hd, h), 0.02), p + "attn_v.bias": normal(nkv * hd, 0.1),
            p + "attn_output.weight": normal((h, nq * hd), 0.02), p + "attn_output.bias": normal(h, 0.1),
            p + "attn_sinks.weight": normal(nq, 1.0),
            p + "ffn_gate_inp.weight": normal((e, h), 0.3), p + "ffn_gate_inp.bias": normal(e, 0.1),
            p + "ffn_gate_exps.weight": mxfp4(inter, h), p + "ffn_gate_exps.bias": normal((e, inter), 0.1),
            p + "ffn_up_exps.weight": mxfp4(inter, h), p + "ffn_up_exps.bias": normal((e, inter), 0.1),
            p + "ffn_down_exps.weight": mxfp4(h, inter), p + "ffn_down_exps.bias": normal((e, h), 0.1),
        }  # fmt: skip
    for name, a in tensors.items():
        if name.endswith("_exps.weight"):
            w.add_tensor(name, a, raw_dtype=Q.MXFP4)
        elif name in q8_0:
            w.add_tensor(name, gguf.quants.quantize(a, Q.Q8_0), raw_dtype=Q.Q8_0)
        else:
            w.add_tensor(name, a)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def reference_from_gguf(path, config, scratch=None):
    """A transformers ``GptOssForCausalLM`` (f32) holding gguf-py's dequantization
    of every tensor of the gpt-oss GGUF file ``path`` (read with
    ``gguf.GGUFReader``, not mlir-mx's reader), experts one at a time.
    ``scratch`` (a folder): the experts' f32 parameters live in memory-mapped
    files there (``.npy``), so the kernel can write them back and evict them
    under memory pressure instead of the process running out of memory."""
    transformers = pytest.importorskip("transformers")
    reader = gguf.GGUFReader(str(path))
    tensors = {t.name: t for t in reader.tensors}

    def deq(name, index=None):
        t = tensors[name]
        raw = np.asarray(t.data if index is None else t.data[index])
        return torch.from_numpy(decode(raw, t.tensor_type).reshape(raw.shape[:-1] + (-1,)))

    with torch.device("meta"):
        model = transformers.GptOssForCausalLM(config)
    model.to_empty(device="cpu")
    model.model.rotary_emb = type(model.model.rotary_emb)(config)  # computed, not stored
    if scratch is not None:
        for b, layer in enumerate(model.model.layers):
            for name in ("gate_up_proj", "down_proj"):
                shape = tuple(getattr(layer.mlp.experts, name).shape)
                mm = np.lib.format.open_memmap(
                    os.path.join(scratch, f"{b}.{name}.npy"), "w+", np.float32, shape
                )
                setattr(layer.mlp.experts, name, torch.nn.Parameter(torch.from_numpy(mm), False))
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.GPT_OSS, config.num_hidden_layers)
    with torch.no_grad():
        for key, p in model.state_dict().items():
            if key == "lm_head.weight" and config.tie_word_embeddings:
                continue
            blk = key.split(".")[2] if key.startswith("model.layers.") else None
            if key.endswith("experts.gate_up_proj"):
                for i in range(p.shape[0]):
                    p[i, :, 0::2] = deq(f"blk.{blk}.ffn_gate_exps.weight", i).t()
                    p[i, :, 1::2] = deq(f"blk.{blk}.ffn_up_exps.weight", i).t()
            elif key.endswith("experts.gate_up_proj_bias"):
                p[:, 0::2] = deq(f"blk.{blk}.ffn_gate_exps.bias")
                p[:, 1::2] = deq(f"blk.{blk}.ffn_up_exps.bias")
            elif key.endswith("experts.down_proj"):
                for i in range(p.shape[0]):
                    p[i] = deq(f"blk.{blk}.ffn_down_exps.weight", i).t()
            elif key.endswith("experts.down_proj_bias"):
                p.copy_(deq(f"blk.{blk}.ffn_down_exps.bias"))
            elif key.endswith("self_attn.sinks"):
                p.copy_(deq(names.get_name(key) + ".weight"))
            else:
                stem, _, suffix = key.rpartition(".")
                p.copy_(deq(f"{names.get_name(stem)}.{suffix}").reshape(p.shape))
    if config.tie_word_embeddings:
        model.tie_weights()
    return model.eval()

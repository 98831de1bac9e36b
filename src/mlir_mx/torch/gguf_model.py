"""GGUF model files (llama.cpp's) as ``transformers`` models with MX weights.

:func:`from_gguf` (reached through ``mlir_mx.torch.from_pretrained("x.gguf")``)
builds the model a GGUF file describes, for the ``llama`` and ``gpt-oss``
architectures (``docs/torch.md``, "GGUF model files"):

* **config**: transformers' own GGUF mapping for ``llama``
  (``AutoConfig.from_pretrained(folder, gguf_file=...)``); for ``gpt-oss``
  transformers 5.24's mapping fails on llama.cpp's files (its rope-scaling
  reader raises ``TypeError``) and misses ``attention.key_length`` /
  ``attention.sliding_window``, so the config is read here from llama.cpp's
  key names (``convert_hf_to_gguf.py``'s ``GptOssModel``).
* **tensors**: the file is memory-mapped and checked (:func:`open_gguf`) and
  every tensor's name, type and shape is checked against the model before a
  byte of data is read.  Names are gguf-py's map (``get_tensor_name_map``);
  llama's Q/K rows are put back in transformers' order (the inverse of the
  converter's permutation).  MXFP4 tensors stay MXFP4: an ``nn.Linear`` weight
  becomes an :class:`MXLinear`, gpt-oss's ``ffn_{gate,up,down}_exps`` an
  :class:`MXExperts` (gate rows ``0::2``, up rows ``1::2``, as the converter
  split them), each expert converted once from ggml's nibble order
  (:func:`~mlir_mx.interop.gguf.mxfp4_packed_from_ggml`), nothing decoded.
  An ``NVFP4`` (type 40) ``nn.Linear`` weight becomes an NVFP4 :class:`MXLinear`
  the same way (:mod:`mlir_mx.interop.gguf_nvfp4`; global scale 1).
  F32/F16/BF16 tensors are copied as they are.  Every other ggml type gguf-py
  can decode (Q8_0, Q4_K, ...) is dequantized, with one warning that names the
  tensors and says what it costs; a type it cannot decode is refused, named.
* the pages of the map that were read are dropped from the RSS after each
  tensor (:meth:`GGUFFile.release`), and the heap the conversion freed is given
  back at the end (``malloc_trim``), so the RSS grows by the model's own bytes.

:func:`gguf_tokenizer` builds the tokenizer from the file's metadata with
transformers' GGUF tokenizer conversion.
"""

from __future__ import annotations

import os
import re
import warnings

import numpy as np
import torch

from mlir_mx.errors import MXArgTypeError, MXValueError
from mlir_mx.files import path_argument, release_free_heap
from mlir_mx.interop.gguf import GGUFFile, gguf_package, mxfp4_packed_from_ggml, open_gguf
from mlir_mx.interop.gguf_nvfp4 import NVFP4_TYPE, nvfp4_packed_from_ggml
from mlir_mx.numerics import MXArray

from .experts import MXExperts, experts_gate, is_stacked_experts
from .module import MXLinear
from .thread_policy import install as install_decode_policy

__all__ = ["GGUF_ARCHITECTURES", "from_gguf", "gguf_tokenizer"]

#: The ``general.architecture`` values read.
GGUF_ARCHITECTURES = ("llama", "gpt-oss")
_FP4, _BLOCK = "f4E2M1FN", 32
_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
_F32, _F16, _BF16, _MXFP4 = 0, 1, 30, 39
_FLOATS = {_F32: torch.float32, _F16: torch.float16, _BF16: torch.bfloat16}
_EXPERTS = re.compile(r"model\.layers\.(\d+)\.mlp\.experts$")


def from_gguf(path, *, dtype=None, threads: int | None = None, activations=None, shards=None):
    """A ``transformers`` causal LM from the GGUF file ``path`` (the module
    docstring).  ``dtype``: the dtype of the tensors that are not MX (None: the
    file's 16-bit float type where it has one, else f32: as transformers'
    GGUF reader decides; tensors stored in it are kept bit for bit).
    ``threads`` / ``activations``: every MX layer's, as for :class:`MXLinear`.
    ``shards``: None, or a function of the meta model giving ``{layer name:
    (dim, start, stop)}`` (tensor parallel, ``distributed.shard_load``): those
    MXFP4 layers read only those rows or block-aligned columns from the map.

    Raises:
        MXValueError: no such file; a file that does not read as GGUF (the
            path named); an architecture other than :data:`GGUF_ARCHITECTURES`;
            a tensor missing, of another shape, or of a ggml type gguf-py
            cannot decode (named); ``dtype`` not bf16, f16 or f32.
        MXArgTypeError: ``dtype`` not a ``torch.dtype``.
    """
    where = str(path_argument(path))
    if dtype is not None and not isinstance(dtype, torch.dtype):
        raise MXArgTypeError(f"dtype: expected a torch.dtype or None, got {dtype!r}")
    if dtype is not None and dtype not in _DTYPES:
        raise MXValueError(
            f"dtype: expected one of {', '.join(map(str, _DTYPES))} or None, got {dtype}"
        )
    if not os.path.isfile(where):
        raise MXValueError(f"path: no GGUF file at {where!r}")
    with open_gguf(where) as f:
        arch = f.metadata.get("general.architecture")
        if arch not in GGUF_ARCHITECTURES:
            raise MXValueError(
                f"{where}: architecture {arch!r} is not read (GGUF architectures read: "
                f"{', '.join(GGUF_ARCHITECTURES)})"
            )
        model = _meta_model(_config(f, arch), where)
        plan = _plan(model, f, arch)
        plan["shards"] = {} if shards is None else shards(model)
        dtype = dtype or _file_dtype(f)
        _warn_dequantized(f, plan, dtype)
        _fill(model, f, plan, dtype, dict(threads=threads, activations=activations))
        f.release()
    release_free_heap()  # the experts' transient arrays (a layer's worth) leave the RSS
    install_decode_policy(model)  # decode steps: torch on 1 thread (thread_policy)
    return model


def gguf_tokenizer(path):
    """The ``transformers`` tokenizer the GGUF file ``path``'s metadata
    describes: transformers' GGUF tokenizer conversion
    (``integrations.gguf.get_gguf_tokenizer`` / ``convert_gguf_tokenizer``, for
    ``tokenizer.ggml.model`` ``gpt2``, ``llama``, ``t5``, ``gemma4``) in a
    ``PreTrainedTokenizerFast`` with the file's special tokens and chat
    template.  (Not ``AutoTokenizer.from_pretrained(gguf_file=)``: it reads the
    config first, which fails on gpt-oss files in transformers 5.24.)  Raises
    ``MXValueError`` naming the file where the file does not read or
    transformers builds no tokenizer from it (its reason given)."""
    where = str(path_argument(path))
    if not os.path.isfile(where):
        raise MXValueError(f"path: no GGUF file at {where!r}")
    with open_gguf(where) as f:
        kind = f.metadata.get("tokenizer.ggml.model")
    import transformers
    from transformers.integrations.gguf import convert_gguf_tokenizer, get_gguf_tokenizer

    try:
        arch, tokenizer, config = get_gguf_tokenizer(where)
        backend, extra = convert_gguf_tokenizer(arch, tokenizer)
        return transformers.PreTrainedTokenizerFast(tokenizer_object=backend, **config, **extra)
    except Exception as e:  # noqa: BLE001 - transformers' reasons vary: name the file
        raise MXValueError(
            f"{where}: transformers builds no tokenizer from its metadata "
            f"(tokenizer.ggml.model {kind!r}; {type(e).__name__}: {e})"
        ) from None


# -- the config ---------------------------------------------------------------------------


def _config(f: GGUFFile, arch: str):
    import transformers

    if arch == "gpt-oss":
        try:
            return transformers.GptOssConfig(**_gpt_oss_config(f))
        except KeyError as e:
            raise MXValueError(f"{f.path}: metadata {e.args[0]!r} is missing") from None
    folder, name = os.path.split(os.path.abspath(f.path))
    try:  # transformers' own mapping (modeling_gguf_pytorch_utils)
        return transformers.AutoConfig.from_pretrained(folder, gguf_file=name)
    except Exception as e:  # noqa: BLE001 - the metadata only: name the file
        raise MXValueError(
            f"{f.path}: transformers builds no config from its metadata ({type(e).__name__}: {e})"
        ) from None


def _gpt_oss_config(f: GGUFFile) -> dict:
    """GptOssConfig's fields from llama.cpp's keys (``GptOssModel.set_gguf_parameters``);
    ``swiglu_alpha`` / ``swiglu_limit`` are not in the file (llama.cpp hard-codes
    1.702 and 7.0, GptOssConfig's defaults)."""
    md = f.metadata

    def key(name):
        return md[f"gpt-oss.{name}"]

    rope = {"rope_type": "default", "rope_theta": float(key("rope.freq_base"))}
    if md.get("gpt-oss.rope.scaling.type") == "yarn":
        rope = {
            **rope, "rope_type": "yarn", "factor": float(key("rope.scaling.factor")),
            "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False,
            "original_max_position_embeddings": int(key("rope.scaling.original_context_length")),
        }  # fmt: skip
    embd = f.tensors.get("token_embd.weight")
    if embd is None:
        raise MXValueError(f"{f.path}: no tensor 'token_embd.weight'")
    heads = key("attention.head_count")
    return {
        "num_hidden_layers": key("block_count"),
        "hidden_size": key("embedding_length"),
        "intermediate_size": md.get("gpt-oss.expert_feed_forward_length",
                                    md.get("gpt-oss.feed_forward_length")),
        "num_attention_heads": heads,
        "num_key_value_heads": key("attention.head_count_kv"),
        "head_dim": md.get("gpt-oss.attention.key_length", key("embedding_length") // heads),
        "rms_norm_eps": float(key("attention.layer_norm_rms_epsilon")),
        "max_position_embeddings": key("context_length"),
        "num_local_experts": key("expert_count"),
        "num_experts_per_tok": key("expert_used_count"),
        "sliding_window": key("attention.sliding_window"),
        "vocab_size": embd.shape[0],
        "tie_word_embeddings": "output.weight" not in f.tensors,
        "rope_parameters": rope,
        "eos_token_id": md.get("tokenizer.ggml.eos_token_id"),
        "bos_token_id": md.get("tokenizer.ggml.bos_token_id"),
        "pad_token_id": md.get("tokenizer.ggml.padding_token_id"),
    }  # fmt: skip


def _meta_model(config, where: str):
    import transformers

    try:
        with torch.device("meta"):
            model = transformers.AutoModelForCausalLM.from_config(config)
    except Exception as e:  # noqa: BLE001 - the metadata's values only: name the file
        raise MXValueError(
            f"{where}: transformers builds no causal LM from its metadata ({type(e).__name__}: {e})"
        ) from None
    return model.eval()


def _file_dtype(f: GGUFFile) -> torch.dtype:
    types = {t.type for t in f.tensors.values()}
    return torch.bfloat16 if _BF16 in types else torch.float16 if _F16 in types else torch.float32


# -- the plan: every tensor checked before a byte is read -----------------------------------


def _plan(model, f: GGUFFile, arch: str) -> dict:
    """``{"plain": {hf key: gguf name}, "linear": {module: gguf name},
    "experts": {module: block index}}``, every name, type and shape checked."""
    gguf = gguf_package()
    enum = next(k for k, v in gguf.MODEL_ARCH_NAMES.items() if v == arch)
    names = gguf.get_tensor_name_map(enum, model.config.num_hidden_layers)
    plan, used = {"plain": {}, "linear": {}, "experts": {}}, set()
    tied = bool(getattr(model.config, "tie_word_embeddings", False))
    for mod_name, module in model.named_modules():
        if is_stacked_experts(module) and (m := _EXPERTS.fullmatch(mod_name)):
            used |= _check_experts(f, module, int(m[1]))
            plan["experts"][mod_name] = int(m[1])
    experts = tuple(n + "." for n in plan["experts"])
    for key, t in model.state_dict().items():
        if key.startswith(experts) or (tied and key == "lm_head.weight"):
            continue
        stem, _, suffix = key.rpartition(".")
        if key.endswith("self_attn.sinks"):  # the converter appends ".weight"
            stem, suffix = key, "weight"
        base = names.get_name(stem)
        if base is None:
            raise MXValueError(f"{f.path}: {key} has no GGUF name (gguf-py's map for {arch})")
        name = f"{base}.{suffix}"
        _check(f, name, tuple(t.shape))
        used.add(name)
        owner = model.get_submodule(stem) if key.endswith(".weight") else None
        if f.tensors[name].type in (_MXFP4, NVFP4_TYPE) and type(owner) is torch.nn.Linear:
            plan["linear"][stem] = name
        else:
            plan["plain"][key] = name
    _check_types(f, used)
    extra = sorted(set(f.tensors) - used)
    if extra:
        warnings.warn(f"{f.path}: tensors not read (no place in the model): {', '.join(extra)}",
                      stacklevel=3)  # fmt: skip
    return plan


def _check(f: GGUFFile, name: str, shape: tuple) -> None:
    t = f.tensors.get(name)
    if t is None:
        raise MXValueError(f"{f.path}: tensor {name!r} is missing")
    if tuple(t.shape) != shape:
        raise MXValueError(
            f"{f.path}: tensor {name!r} has shape {tuple(t.shape)}, expected {shape}"
        )


def _check_experts(f: GGUFFile, module, bid: int) -> set:
    e, h, inter2 = module.gate_up_proj.shape
    inter = inter2 // 2
    shapes = {"gate": (e, inter, h), "up": (e, inter, h), "down": (e, h, inter)}
    used = set()
    for proj, shape in shapes.items():
        name = f"blk.{bid}.ffn_{proj}_exps"
        _check(f, name + ".weight", shape)
        if f.tensors[name + ".weight"].type != _MXFP4:
            kind = gguf_package().GGMLQuantizationType(f.tensors[name + ".weight"].type).name
            raise MXValueError(f"{f.path}: {name}.weight is {kind}; experts are read as MXFP4 only")
        used.add(name + ".weight")
        if getattr(module, "has_bias", True):
            _check(f, name + ".bias", shape[:2])
            used.add(name + ".bias")
    return used


def _check_types(f: GGUFFile, used: set) -> None:
    """Refuse, named, the types gguf-py cannot decode (before anything is read)."""
    types = {f.tensors[n].type for n in used} - set(_FLOATS) - {_MXFP4, NVFP4_TYPE}
    bad_types = {t for t in types if not _decodable(t)}
    bad = sorted(n for n in used if f.tensors[n].type in bad_types)
    if bad:
        kinds = sorted({_type_name(f.tensors[n].type) for n in bad})
        raise MXValueError(
            f"{f.path}: ggml type(s) {', '.join(kinds)} cannot be read (gguf-py decodes no such "
            f"type): tensors {', '.join(bad[:4])}{' ...' if len(bad) > 4 else ''}"
        )


def _decodable(t: int) -> bool:
    """Whether gguf-py's ``quants.dequantize`` decodes ggml type ``t`` (tried on one zero block)."""
    gguf = gguf_package()
    try:
        qtype = gguf.GGMLQuantizationType(t)
        gguf.quants.dequantize(np.zeros(gguf.GGML_QUANT_SIZES[qtype][1], np.uint8), qtype)
    except (NotImplementedError, ValueError, KeyError):
        return False
    return True


def _type_name(t: int) -> str:
    try:
        return gguf_package().GGMLQuantizationType(t).name
    except ValueError:
        return f"type {t}"


def _warn_dequantized(f: GGUFFile, plan: dict, dtype: torch.dtype) -> None:
    names = [n for n in plan["plain"].values() if f.tensors[n].type not in _FLOATS]
    if not names:
        return
    stored = sum(f.tensors[n].nbytes for n in names)
    held = sum(int(np.prod(f.tensors[n].shape)) for n in names) * dtype.itemsize
    kinds = sorted({_type_name(f.tensors[n].type) for n in names})
    warnings.warn(
        f"{f.path}: {len(names)} tensor(s) of ggml type {', '.join(kinds)} are dequantized to "
        f"{str(dtype).removeprefix('torch.')} and run as dense layers, not MX kernels: "
        f"{_size(stored)} in the file become {_size(held)} in memory "
        f"({held / max(stored, 1):.1f}x); their values are the file's, exactly "
        f"({', '.join(names[:3])}{' ...' if len(names) > 3 else ''})",
        stacklevel=3,
    )


def _size(n: int) -> str:
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n / 2**10:.1f} KiB"


# -- reading ------------------------------------------------------------------------------


def _fill(model, f: GGUFFile, plan: dict, dtype: torch.dtype, kw: dict) -> None:
    heads = (
        getattr(model.config, "num_attention_heads", 0),
        getattr(model.config, "num_key_value_heads", 0),
    )
    permuted = (
        {"attn_q": heads[0], "attn_k": heads[1]}
        if f.metadata["general.architecture"] == "llama"
        else {}
    )
    for key, name in plan["plain"].items():
        owner, _, attr = key.rpartition(".")
        module = model.get_submodule(owner)
        t = _plain(f, name, dtype, permuted)
        if attr in module._parameters:
            module._parameters[attr] = torch.nn.Parameter(t, requires_grad=False)
        else:
            module._buffers[attr] = t
        f.release()
    for stem, name in plan["linear"].items():
        old = model.get_submodule(stem)
        out, k = old.weight.shape
        n_head = permuted.get(name.split(".")[-2])
        rows = _unpermute_rows(out, heads[0], n_head) if n_head else None
        cut = plan["shards"].get(stem)
        nv = f.tensors[name].type == NVFP4_TYPE  # global scale 1 (interop.gguf_nvfp4)
        if nv:  # read whole, then this rank's rows / columns (64-element ggml blocks)
            packed, scales = nvfp4_packed_from_ggml(f.data(name), out, k)
            packed, scales = _rows_cols(packed, scales, rows, cut, 2, 16)
        elif cut is None:
            packed, scales = mxfp4_packed_from_ggml(f.data(name), out, k)
            packed, scales = _rows_cols(packed, scales, rows, None, 2, _BLOCK)
        else:
            packed, scales = _mxfp4_shard(f.data(name), out, k, rows, cut)
        w = MXArray.from_packed(packed, scales, *(("nvfp4", 16) if nv else (_FP4, _BLOCK)),
                                axis=1, copy=False, global_scale=1.0 if nv else None)  # fmt: skip
        bias = None if old.bias is None else old.bias.detach()  # read with the plain tensors
        _replace(model, stem, linear_layer(w, bias, cut, kw))
        f.release()
    for stem, bid in plan["experts"].items():
        mine = plan["shards"].get(stem)  # expert parallel: a range of experts
        _replace(model, stem, _experts(f, model.get_submodule(stem), bid, dtype, kw, mine))
    if getattr(model.config, "tie_word_embeddings", False):
        model.tie_weights()
    _rebuild_meta_buffers(model)


def _rows_cols(packed, scales, rows, cut, per_byte: int, block: int) -> tuple:
    """``packed`` / ``scales`` in transformers' row order (``rows``: the file row
    of each, or None), then rows / block-aligned columns ``cut`` (or all)."""
    if rows is not None:
        packed, scales = packed[rows], scales[rows]
    if cut is None:
        return packed, scales
    dim, a, b = cut
    if dim == 0:
        return packed[a:b], scales[a:b]
    return packed[:, a // per_byte : b // per_byte], scales[:, a // block : b // block]


def _mxfp4_shard(data, out: int, k: int, rows, cut) -> tuple[np.ndarray, np.ndarray]:
    """The stored form of rows / block-aligned columns ``cut`` (transformers'
    order; ``rows``: the file row of each, llama's Q/K, or None) of a ggml
    MXFP4 matrix: only those 17-byte blocks read from the map, then converted."""
    dim, a, b = cut
    blocks = np.asarray(data, dtype=np.uint8).reshape(out, k // _BLOCK, -1)
    if dim == 0:
        blocks = blocks[rows[a:b] if rows is not None else slice(a, b)]
    else:
        blocks = blocks[:, a // _BLOCK : b // _BLOCK]
        blocks = blocks[rows] if rows is not None else blocks
    blocks = np.ascontiguousarray(blocks)
    return mxfp4_packed_from_ggml(blocks, blocks.shape[0], blocks.shape[1] * _BLOCK)


def linear_layer(w: MXArray, bias, cut, kw: dict) -> MXLinear:
    """The layer over ``w``; a shard (``cut``) notes it (``mx_tp_shard``), a
    colwise one with its bias rows, a rowwise one with its bias apart (added
    once, after the all-reduce)."""
    if cut is None:
        return MXLinear(w, bias, **kw)
    dim, a, b = cut
    layer = MXLinear(w, bias[a:b] if dim == 0 and bias is not None else None, **kw)
    if dim == 1 and bias is not None:
        layer.mx_tp_bias = bias
    layer.mx_tp_shard = cut
    return layer


def _replace(model, name: str, new) -> None:
    owner, _, attr = name.rpartition(".")
    setattr(model.get_submodule(owner) if owner else model, attr, new)


def _unpermute_rows(rows: int, n_head: int, n_kv: int) -> np.ndarray:
    """The row order that undoes convert_hf_to_gguf's ``permute`` (llama's Q/K;
    transformers' ``_reverse_permute_weights``)."""
    n = n_kv if n_kv and n_kv != n_head else n_head
    idx = np.arange(rows).reshape(n, rows // n // 2, 2).swapaxes(1, 2)
    return idx.reshape(rows)


def _plain(f: GGUFFile, name: str, dtype: torch.dtype, permuted: dict) -> torch.Tensor:
    """Tensor ``name`` in ``dtype``: copied as stored (F32/F16/BF16), or decoded by gguf-py."""
    info = f.tensors[name]
    raw = f.data(name)
    if info.type in _FLOATS:
        t = torch.frombuffer(bytearray(raw), dtype=_FLOATS[info.type]) if raw.size else (
            torch.empty(0, dtype=_FLOATS[info.type]))  # fmt: skip
        t = t.reshape(info.shape)
    else:
        gguf = gguf_package()
        values = gguf.quants.dequantize(raw.reshape(info.shape[:-1] + (-1,)), info.type)
        t = torch.from_numpy(np.ascontiguousarray(values, np.float32)).reshape(info.shape)
    n_head = permuted.get(name.split(".")[-2]) if name.endswith(".weight") else None
    if n_head:
        t = t[torch.from_numpy(_unpermute_rows(t.shape[0], permuted["attn_q"], n_head))]
    return t.to(dtype).contiguous()


def _experts(f: GGUFFile, old, bid: int, dtype: torch.dtype, kw: dict, mine=None) -> MXExperts:
    e, h, inter2 = old.gate_up_proj.shape
    inter, pre = inter2 // 2, f"blk.{bid}.ffn_"
    gate_up, down = [], []
    for i in range(e) if mine is None else mine:  # ``mine``: only these experts read
        packed = np.empty((inter2, h // 2), np.uint8)
        scales = np.empty((inter2, h // _BLOCK), np.uint8)
        for proj, rows in (("gate", slice(0, None, 2)), ("up", slice(1, None, 2))):
            mxfp4_packed_from_ggml(f.data(f"{pre}{proj}_exps.weight", i), inter, h,
                                   out=(packed[rows], scales[rows]))  # fmt: skip
        gate_up.append(MXArray.from_packed(packed, scales, _FP4, _BLOCK, axis=1, copy=False))
        p, s = mxfp4_packed_from_ggml(f.data(f"{pre}down_exps.weight", i), h, inter)
        down.append(MXArray.from_packed(p, s, _FP4, _BLOCK, axis=1, copy=False))
        f.release()  # this expert's pages of the map
    biases = [None, None]
    if getattr(old, "has_bias", True):
        gb, ub = (_plain(f, f"{pre}{p}_exps.bias", torch.float32, {}) for p in ("gate", "up"))
        gu = torch.empty(e, inter2, dtype=torch.float32)
        gu[:, 0::2], gu[:, 1::2] = gb, ub
        biases = [b if mine is None else b[mine.start : mine.stop]
                  for b in (gu.to(dtype), _plain(f, f"{pre}down_exps.bias", dtype, {}))]  # fmt: skip
    return MXExperts(gate_up, down, *biases, gate=experts_gate(old), **kw)


def _rebuild_meta_buffers(model) -> None:
    """Computed buffers (rotary frequencies) are built again from the config, on the CPU."""
    for name, module in list(model.named_modules()):
        if any(b is not None and b.is_meta for b in module._buffers.values()):
            _replace(model, name, type(module)(model.config))
    left = [n for n, t in (*model.named_parameters(), *model.named_buffers()) if t.is_meta]
    if left:
        raise MXValueError(f"{', '.join(left[:3])}: not in the GGUF file")

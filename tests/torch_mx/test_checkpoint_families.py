"""``from_pretrained`` / ``mx_weights`` on the block-scaled checkpoint families
(issue 54 item 4; ``docs/torch.md``, "Block-scaled checkpoint families"):
MLX mxfp4 / mxfp8 / nvfp4, AMD Quark OCP MX (FP4, FP6), compressed-tensors
nvfp4-pack-quantized and ModelOpt NVFP4, on folders written here from the tiny
Llama (``family_cases.py`` says how each is written and what its reference
is).  Each loaded weight is the file's bytes bit for bit and dequantizes to
the reference package's values bit for bit; the MX families' greedy tokens
equal those of transformers' model built from the dequantized weights, with
the logits within ``logit_bound``; schemes we do not run and malformed files
are refused, named."""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch not installed (pip install 'mlir-mx[torch]')")
pytest.importorskip("safetensors", reason="safetensors not installed (pip install 'mlir-mx[test]')")
pytest.importorskip("transformers", reason="transformers not installed (pip install 'mlir-mx[test]')")

from family_cases import (  # noqa: E402
    QUARK_DTYPES,
    compressed_nvfp4_checkpoint,
    mlx_checkpoint,
    modelopt_checkpoint,
    quark_checkpoint,
    quark_spec,
    reference_model,
)
from llama_cases import prompt  # noqa: E402

from mlir_mx.errors import MXValueError  # noqa: E402
from mlir_mx.torch import MXLinear, from_pretrained, greedy, logit_bound, mx_weights  # noqa: E402

_LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def _bytes(t) -> np.ndarray:
    """A file tensor's bytes, row by row (MLX's uint32 words little-endian)."""
    a = t.view(torch.uint8).numpy() if isinstance(t, torch.Tensor) else np.asarray(t)
    return np.ascontiguousarray(a).view(np.uint8).reshape(a.shape[0], -1)


def _assert_same_tokens(loaded, ref, ids) -> float:
    """The logits within the bound, and 4 greedy tokens equal; the bound's use."""
    bound = logit_bound(ref, ids, probes=2)
    with torch.inference_mode():
        used = bound.check(loaded(ids).logits)
    assert 0 <= used <= 1
    assert list(greedy(loaded, ids, 4)) == list(greedy(ref, ids, 4))
    return used


def _assert_as_stored(w, tensors: dict, base: str, codes: str, scales: str, ref) -> None:
    assert np.array_equal(w.packed_codes(), _bytes(tensors[f"{base}.{codes}"]))
    assert np.array_equal(w.scales.view(np.uint8), _bytes(tensors[f"{base}.{scales}"]))
    deq = np.asarray(w.dequantize(), np.float32)
    assert np.array_equal(deq.view(np.uint32), ref[f"{base}.weight"].numpy().view(np.uint32))


# -- MLX mxfp4 / mxfp8 ------------------------------------------------------------------------


@pytest.mark.parametrize("mode, element", [("mxfp4", "f4E2M1FN"), ("mxfp8", "f8E4M3FN")])
def test_mlx_mx_modes(tmp_path, mode, element):
    """MLX's own mx.quantize codes and scales, loaded as they are (uint32 words
    viewed as their bytes); the weights dequantize to mx.dequantize's bit for
    bit; the embedding table is dequantized, with a warning naming it."""
    model, tensors, ref = mlx_checkpoint(tmp_path / mode, mode)
    with pytest.warns(UserWarning, match=f"model.embed_tokens: the mlx {element} embedding table"):
        loaded = from_pretrained(tmp_path / mode)
    for i, layer in enumerate(loaded.model.layers):
        for proj in _LINEARS:
            part = "mlp" if proj in ("gate_proj", "up_proj", "down_proj") else "self_attn"
            m = getattr(getattr(layer, part), proj)
            assert isinstance(m, MXLinear) and m.weight().element == element
            _assert_as_stored(m.weight(), tensors, f"model.layers.{i}.{part}.{proj}", "weight", "scales", ref)
    assert isinstance(loaded.lm_head, MXLinear)
    emb = loaded.model.embed_tokens.weight
    assert torch.equal(emb, ref["model.embed_tokens.weight"])
    _assert_same_tokens(loaded, reference_model(model, ref), prompt(8))


# -- Quark OCP MX -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "weight, activations", [("fp4", "fp4"), ("fp6_e2m3", None), ("fp6_e3m2", "fp6_e3m2")]
)
def test_quark_ocp_mx(tmp_path, weight, activations):
    """Quark's weight / weight_scale bytes taken over as they are; they
    decode to Quark's unpacking bit for bit; the activations the config
    gives (dynamic MX) become the layers' activations=; lm_head, excluded,
    stays dense."""
    model, tensors, ref = quark_checkpoint(tmp_path / weight, weight, activations)
    loaded = from_pretrained(tmp_path / weight)
    element = QUARK_DTYPES[weight][0]
    acts = None if activations is None else QUARK_DTYPES[activations][0]
    for name, m in loaded.named_modules():
        if name.endswith("proj"):
            assert isinstance(m, MXLinear) and m.weight().element == element
            assert m.activations == acts
            _assert_as_stored(m.weight(), tensors, name, "weight", "weight_scale", ref)
    assert type(loaded.lm_head) is torch.nn.Linear
    used = _assert_same_tokens(loaded, reference_model(model, ref, acts), prompt(8))
    if acts is not None:  # the same activation rounding on both sides: exact products
        assert used == 0
    if weight == "fp4":  # activations= given to from_pretrained wins over the config's
        again = from_pretrained(tmp_path / weight, activations="f8E4M3FN")
        assert again.model.layers[0].mlp.down_proj.activations == "f8E4M3FN"


def test_a_loaded_family_saves_in_compressed_tensors_mxfp4(tmp_path):
    """save_pretrained writes a Quark MXFP4 model in compressed-tensors'
    layout, which loads back to the same logits; MXFP6 does not fit it."""
    from mlir_mx.torch import save_pretrained

    quark_checkpoint(tmp_path / "q4", "fp4", None)
    model = from_pretrained(tmp_path / "q4")
    save_pretrained(model, tmp_path / "s4")
    saved = json.loads((tmp_path / "s4/config.json").read_text())["quantization_config"]
    assert saved["format"] == "mxfp4-pack-quantized"
    ids = prompt(8)
    with torch.inference_mode():
        assert torch.equal(from_pretrained(tmp_path / "s4")(ids).logits, model(ids).logits)
    quark_checkpoint(tmp_path / "q6", "fp6_e2m3", None)
    with pytest.raises(MXValueError, match="holds f6E2M3FN weights in blocks of 32"):
        save_pretrained(from_pretrained(tmp_path / "q6"), tmp_path / "s6")


def _quark_folder(tmp_path, **over):
    d = tmp_path / "quark"
    quark_checkpoint(d, "fp4", "fp4")
    cfg = json.loads((d / "config.json").read_text())
    q = cfg["quantization_config"]
    for path, value in over.items():
        *parents, last = path.split(".")
        node = q
        for p in parents:
            node = node[p]
        node[last] = value
    (d / "config.json").write_text(json.dumps(cfg))
    return d


QUARK_REFUSED = {
    "int4 weights": ({"global_quant_config.weight.dtype": "int4"}, "weight dtype 'int4' is not read"),
    "group 16": ({"global_quant_config.weight.group_size": 16}, r"'per_group', 16, 'e8m0'"),
    "fp8 scales": ({"global_quant_config.weight.scale_format": "float"}, "scale_format"),
    "static activations": (
        {"global_quant_config.input_tensors.is_dynamic": False}, "input_tensors .* is not read"),
    "fp8 per-tensor activations": (
        {"global_quant_config.input_tensors": {"dtype": "fp8_e4m3", "qscheme": "per_tensor",
                                               "is_dynamic": False}}, "input_tensors"),
    "nvfp4 (a weight list)": (
        {"global_quant_config.weight": [quark_spec("fp4", False), {"dtype": "fp8_e4m3"}]},
        r"weight dtype \['fp4', 'fp8_e4m3'\]"),
    "output quantized": ({"global_quant_config.output_tensors": quark_spec("fp4", True)}, "output_tensors"),
    "fake quantized": ({"export.weight_format": "fake_quantized"}, "weight_format 'fake_quantized'"),
    "fp8 KV cache": ({"export.kv_cache_group": ["*k_proj", "*v_proj"]}, "kv_cache_group is not read"),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(QUARK_REFUSED))
def test_quark_schemes_we_do_not_run_are_named(tmp_path, case):
    over, match = QUARK_REFUSED[case]
    with pytest.raises(MXValueError, match=match):
        from_pretrained(_quark_folder(tmp_path, **over))


def test_quark_layer_configs_and_excludes(tmp_path):
    """layer_quant_config patterns pick a layer's scheme (here the MLP's
    activations exact); exclude keeps a layer dense."""
    d = tmp_path / "q"
    quark_checkpoint(d, "fp4", "fp4")
    cfg = json.loads((d / "config.json").read_text())
    glob = cfg["quantization_config"]["global_quant_config"]
    cfg["quantization_config"]["layer_quant_config"] = {"*mlp*": {**glob, "input_tensors": None}}
    (d / "config.json").write_text(json.dumps(cfg))
    loaded = from_pretrained(d)
    assert loaded.model.layers[0].mlp.up_proj.activations is None
    assert loaded.model.layers[0].self_attn.q_proj.activations == "f4E2M1FN"
    cfg["quantization_config"]["exclude"] = ["lm_head", "model.layers.0.mlp.up_proj"]
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(MXValueError, match="up_proj.weight: expected dtype"):
        from_pretrained(d)  # excluded, yet its weight is stored quantized


# -- malformed files and schemes we do not run (MX families) --------------------------------------


def _resave(d, tensors: dict, change) -> None:
    from safetensors.numpy import save_file

    tensors = {k: np.asarray(v) for k, v in tensors.items()}
    change(tensors)
    save_file(tensors, str(d / "model.safetensors"), metadata={"format": "pt"})


def test_malformed_mx_family_files(tmp_path):
    d = tmp_path / "m"
    _, tensors, _ = mlx_checkpoint(d, "mxfp4")
    key = "model.layers.0.mlp.up_proj"
    # scales of blocks of 16 in an mxfp4 file: a wrong group size
    _resave(d, tensors, lambda t: t.__setitem__(f"{key}.scales", np.zeros((128, 4), np.uint8)))
    with pytest.raises(MXValueError, match=rf"{key}.scales: expected shape \(128, 2\), got \(128, 4\)"):
        from_pretrained(d)
    _resave(d, tensors, lambda t: t.pop(f"{key}.scales"))
    with pytest.raises(MXValueError, match=rf"{key}.scales: missing from the checkpoint"):
        from_pretrained(d)  # uint32 codes without their scales
    q = tmp_path / "q"
    _, qt, _ = quark_checkpoint(q, "fp6_e2m3", None)
    _resave(q, qt, lambda t: t.pop(f"{key}.weight_scale"))
    with pytest.raises(MXValueError, match=rf"{key}.weight_scale: missing from the checkpoint"):
        from_pretrained(q)


@pytest.mark.parametrize(
    "quantization, match",
    [
        ({"group_size": 64, "bits": 4}, "MLX quantization mode 'affine' is not read"),
        ({"group_size": 32, "bits": 4, "mode": "mxfp6"}, "mode 'mxfp6'"),
        ({"group_size": 32, "bits": 4, "mode": "nvfp4"}, r"nvfp4 with bits/group_size \(4, 32\)"),
        ({"group_size": 64, "bits": 4, "mode": "mxfp4"}, r"mxfp4 with bits/group_size \(4, 64\)"),
    ],
)
def test_mlx_schemes_we_do_not_run_are_named(tmp_path, quantization, match):
    d = tmp_path / "m"
    mlx_checkpoint(d, "mxfp4")
    cfg = json.loads((d / "config.json").read_text())
    cfg["quantization"] = cfg["quantization_config"] = quantization
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(MXValueError, match=match):
        from_pretrained(d)


# -- NVFP4 families: read as stored ------------------------------------------------------------

NVFP4_FAMILIES = {
    "compressed-tensors": (compressed_nvfp4_checkpoint, "weight_packed"),
    "modelopt": (modelopt_checkpoint, "weight"),
    "modelopt hf_quant_config.json": (lambda d: modelopt_checkpoint(d, hf_quant_config=True), "weight"),
    "mlx": (lambda d: mlx_checkpoint(d, "nvfp4"), "weight"),
}


def _global_scale(family: str, tensors: dict, base: str) -> np.float32:
    if family == "compressed-tensors":
        return np.float32(tensors[f"{base}.weight_global_scale"].item())
    if family.startswith("modelopt"):  # compressed-tensors' converter: 1 / weight_scale_2 in f32
        return np.float32((1 / tensors[f"{base}.weight_scale_2"]).item())
    return np.float32(1.0)  # MLX stores none: its dequantization is code * scale


@pytest.mark.parametrize("family", sorted(NVFP4_FAMILIES))
def test_nvfp4_families_read_as_stored(tmp_path, family):
    """Each quantized linear an nvfp4 MXArray over the file's codes and E4M3
    scales bit for bit, its global scale the file's (as compressed-tensors
    reads it); it dequantizes to the reference package's values bit for bit
    (compressed-tensors' dequantize; for ModelOpt its ModelOpt converter
    first; mx.dequantize for MLX)."""
    write, codes = NVFP4_FAMILIES[family]
    _, tensors, ref = write(tmp_path / "c")
    weights = mx_weights(tmp_path / "c")
    linears = [k[: -len(".weight")] for k in ref if k != "model.embed_tokens.weight"]
    assert sorted(weights) == sorted(linears)  # the MLX embedding table is no linear
    scales = "scales" if family == "mlx" else "weight_scale"
    for base, w in weights.items():
        assert w.format_name == "nvfp4" and w.block_size == 16
        assert w.global_scale.view(np.uint32) == _global_scale(family, tensors, base).view(np.uint32)
        _assert_as_stored(w, tensors, base, codes, scales, ref)
        if family.startswith("modelopt"):  # ModelOpt's own product, code * f32(s * weight_scale_2)
            s2 = np.float32(tensors[f"{base}.weight_scale_2"].item())
            factor = (w.scale_values().astype(np.float32) * s2).astype(np.float32)
            theirs = w.element_values().astype(np.float32) * np.repeat(factor, 16, axis=1)
            ours = np.asarray(w.dequantize(), np.float32)
            assert np.allclose(ours, theirs, rtol=2.0**-22, atol=0)  # 1 / weight_scale_2 rounded


def _nvfp4_folder(tmp_path, change=None, config=None):
    d = tmp_path / "ct"
    _, tensors, _ = compressed_nvfp4_checkpoint(d)
    if change is not None:
        from safetensors.torch import save_file

        change(tensors)
        save_file(tensors, str(d / "model.safetensors"), metadata={"format": "pt"})
    if config is not None:
        cfg = json.loads((d / "config.json").read_text())
        config(cfg["quantization_config"])
        (d / "config.json").write_text(json.dumps(cfg))
    return d


_KEY = "model.layers.1.self_attn.o_proj"


def _nan_scale(t):
    s = t[f"{_KEY}.weight_scale"].view(torch.uint8).clone()
    s[3, 2] = 0x7F
    t[f"{_KEY}.weight_scale"] = s.view(torch.float8_e4m3fn)


def _neg_scale(t):
    s = t[f"{_KEY}.weight_scale"].view(torch.uint8).clone()
    s[0, 0] |= 0x80
    t[f"{_KEY}.weight_scale"] = s.view(torch.float8_e4m3fn)


NVFP4_MALFORMED = {
    "E4M3 NaN scale": (_nan_scale, None, rf"{_KEY}.weight_scale: E4M3 NaN block scale \(0x7f\) at \[3, 2\]"),
    "negative scale": (_neg_scale, None, rf"{_KEY}.weight_scale: negative E4M3 block scale"),
    "missing global scale": (
        lambda t: t.pop(f"{_KEY}.weight_global_scale"), None,
        rf"{_KEY}.weight_global_scale: missing from the checkpoint"),
    "zero global scale": (
        lambda t: t.__setitem__(f"{_KEY}.weight_global_scale", torch.zeros(1)), None,
        rf"{_KEY}.weight_global_scale: the per-tensor scale is 0.0"),
    "scales of blocks of 32": (
        lambda t: t.__setitem__(f"{_KEY}.weight_scale", torch.ones(64, 2).to(torch.float8_e4m3fn)),
        None, rf"{_KEY}.weight_scale: expected shape \(64, 4\), got \(64, 2\)"),
    "E8M0 scale bytes": (
        lambda t: t.__setitem__(f"{_KEY}.weight_scale", torch.ones(64, 4, dtype=torch.uint8)),
        None, rf"{_KEY}.weight_scale: expected dtype F8_E4M3, got U8"),
    "group_size 32 in the config": (
        None, lambda q: q["config_groups"]["group_0"]["weights"].__setitem__("group_size", 32),
        "nvfp4-pack-quantized with group_size 32; it is read in groups of 16 only"),
    "an fp8 KV cache": (
        None, lambda q: q.__setitem__("kv_cache_scheme", {"num_bits": 8, "type": "float"}),
        "kv_cache_scheme is not read"),
    "an int4 format": (
        None, lambda q: q.__setitem__("format", "pack-quantized"),
        r"compressed-tensors format \['pack-quantized'\] is not read"),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(NVFP4_MALFORMED))
def test_malformed_nvfp4_files_are_named(tmp_path, case):
    change, config, match = NVFP4_MALFORMED[case]
    with pytest.raises(MXValueError, match=match):
        mx_weights(_nvfp4_folder(tmp_path, change, config))


def test_modelopt_algorithms_we_do_not_run_are_named(tmp_path):
    d = tmp_path / "mo"
    modelopt_checkpoint(d)
    cfg = json.loads((d / "config.json").read_text())
    cfg["quantization_config"]["quant_algo"] = "FP8"
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(MXValueError, match="ModelOpt quant_algo 'FP8' is not read"):
        mx_weights(d)
    cfg["quantization_config"].update(quant_algo="NVFP4", group_size=32)
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(MXValueError, match="ModelOpt NVFP4 with group_size 32"):
        mx_weights(d)
    cfg["quantization_config"].update(group_size=16, kv_cache_quant_algo="FP8")
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(MXValueError, match="ModelOpt kv_cache_quant_algo 'FP8' is not read"):
        mx_weights(d)


# -- NVFP4 families: tokens (need the NVFP4 Linear) ----------------------------------------------


@pytest.mark.parametrize("family", sorted(NVFP4_FAMILIES))
def test_nvfp4_families_tokens_after_nvfp4_linear(tmp_path, family):
    """The NVFP4 families end to end: greedy tokens equal those of transformers'
    model from the reference dequantization, logits within the bound."""
    write, _ = NVFP4_FAMILIES[family]
    model, tensors, ref = write(tmp_path / "c")
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # MLX's embedding table, dequantized
        loaded = from_pretrained(tmp_path / "c")
    assert isinstance(loaded.model.layers[0].mlp.down_proj, MXLinear)
    _assert_same_tokens(loaded, reference_model(model, ref), prompt(8))


# -- GGUF NVFP4 (ggml type 40) ----------------------------------------------------------------


def _nvfp4_mlp(name: str, a) -> int:
    from gguf_cases import Q

    return 40 if ".ffn_" in name and name.endswith(".weight") and "norm" not in name else Q.F32


@pytest.fixture(scope="module")
def nvfp4_gguf(tmp_path_factory):
    from gguf_cases import tiny_llama, write_model_gguf

    path = tmp_path_factory.mktemp("gguf") / "nvfp4.gguf"
    ref = write_model_gguf(tiny_llama(), path, _nvfp4_mlp, tokenizer=False)
    return path, ref


def test_gguf_nvfp4_type_and_layout_are_gguf_py_s():
    """ggml's NVFP4 as gguf-py 0.19.0 has it: type 40, 64 elements in 36 bytes."""
    gguf = pytest.importorskip("gguf", reason="gguf not installed (pip install 'mlir-mx[gguf]')")
    from mlir_mx.interop.gguf_nvfp4 import NVFP4_BLOCK, NVFP4_BLOCK_BYTES, NVFP4_TYPE

    assert gguf.GGMLQuantizationType.NVFP4 == NVFP4_TYPE
    assert gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType.NVFP4] == (NVFP4_BLOCK, NVFP4_BLOCK_BYTES)


def test_gguf_nvfp4_tensors_read_as_stored(nvfp4_gguf):
    """Each NVFP4 tensor of the file: its scale bytes and re-paired nibbles an
    nvfp4 MXArray (global scale 1) that dequantizes to gguf-py's decoder bit
    for bit, and writes back to the same bytes."""
    gguf = pytest.importorskip("gguf")
    from mlir_mx.interop.gguf_nvfp4 import nvfp4_packed_from_ggml, nvfp4_to_ggml
    from mlir_mx.numerics import MXArray

    tensors = [t for t in gguf.GGUFReader(str(nvfp4_gguf[0])).tensors if int(t.tensor_type) == 40]
    assert len(tensors) == 6  # gate, up, down of 2 layers
    for t in tensors:
        raw = np.array(t.data)
        rows, n = raw.shape[0], raw.shape[1] // 36 * 64
        packed, scales = nvfp4_packed_from_ggml(raw, rows, n)
        w = MXArray.from_packed(packed, scales, "nvfp4", 16, axis=1, global_scale=1.0)
        theirs = gguf.quants.dequantize(raw, gguf.GGMLQuantizationType.NVFP4)
        ours = np.asarray(w.dequantize(), np.float32)
        assert np.array_equal(ours, theirs)  # as values: ggml decodes code 8 (-0) as +0
        assert np.array_equal(nvfp4_to_ggml(w), raw)


def test_gguf_nvfp4_malformed_scales_are_refused():
    from mlir_mx.interop.gguf_nvfp4 import nvfp4_packed_from_ggml

    raw = np.zeros((2, 36), np.uint8)
    raw[1, 2] = 0x7F
    with pytest.raises(MXValueError, match=r"0x7f \(E4M3 NaN; ggml reads it as 0\), first at \(1, 2\)"):
        nvfp4_packed_from_ggml(raw, 2, 64)
    raw[1, 2] = 0x81
    with pytest.raises(MXValueError, match="a sign bit"):
        nvfp4_packed_from_ggml(raw, 2, 64)
    with pytest.raises(MXValueError, match="not a multiple of ggml's NVFP4 block of 64"):
        nvfp4_packed_from_ggml(np.zeros((2, 18), np.uint8), 2, 32)


def test_gguf_nvfp4_tokens_after_nvfp4_linear(nvfp4_gguf):
    """The GGUF NVFP4 Llama end to end against gguf-py's dequantized model."""
    path, ref = nvfp4_gguf
    loaded = from_pretrained(path, dtype=torch.float32)
    assert loaded.model.layers[0].mlp.up_proj.weight().format_name == "nvfp4"
    _assert_same_tokens(loaded, ref, prompt(8))


# -- the config readings, without files ---------------------------------------------------------


def test_each_family_s_config_reading(tmp_path):
    """scheme_of: which layout each module gets (patterns, excludes,
    per-layer entries), before any file is read."""
    from family_cases import quark_config

    from mlir_mx.torch.checkpoint_layouts import scheme_of

    q = quark_config("fp6_e2m3", "fp8_e4m3")
    q["layer_quant_config"] = {"*.mlp.down_proj": {**q["global_quant_config"], "input_tensors": None}}
    q["exclude"] = ["lm_head", "*.self_attn.k_proj"]
    s = scheme_of(tmp_path, {"quantization_config": q})
    up, down = s.linear("model.layers.3.mlp.up_proj"), s.linear("model.layers.3.mlp.down_proj")
    assert (up.element, up.activations, down.activations) == ("f6E2M3FN", "f8E4M3FN", None)
    assert s.linear("lm_head") is None and s.linear("model.layers.0.self_attn.k_proj") is None
    mlx = {"group_size": 32, "bits": 8, "mode": "mxfp8", "lm_head": False,
           "model.layers.0.mlp.up_proj": {"group_size": 32, "bits": 4, "mode": "mxfp4"}}  # fmt: skip
    s = scheme_of(tmp_path, {"quantization": mlx})
    assert s.linear("lm_head") is None
    assert s.linear("model.layers.0.mlp.up_proj").element == "f4E2M1FN"
    assert s.linear("model.layers.1.mlp.up_proj").element == "f8E4M3FN"
    ct = {"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized",
          "ignore": ["re:.*lm_head$"]}  # fmt: skip
    s = scheme_of(tmp_path, {"quantization_config": ct})
    assert s.linear("lm_head") is None and s.linear("model.layers.0.mlp.up_proj").element == "nvfp4"
    assert scheme_of(tmp_path, {"quantization_config": {"quant_method": "mxfp4"}}) is None

"""transformers' own ``AutoModelForCausalLM.from_pretrained`` on the block-scaled
checkpoint families (issue 54; ``docs/torch.md``, "transformers' own API":
the families): compressed-tensors ``nvfp4-pack-quantized``, ModelOpt NVFP4
(``quant_method: modelopt``) and AMD Quark OCP MX (W4A4 and MXFP6
weight-only), through the one hook (``MXHfQuantizer``) and the one registry
(``checkpoint_layouts``).  Each quantized linear is an ``MXLinear`` over the
bytes transformers read (its codes, scales and global scale equal the
file's, as ``mlir_mx.torch.from_pretrained`` reads them, bit for bit); the
logits equal ``mlir_mx.torch.from_pretrained``'s bit for bit (that loader's
tokens against transformers' model of the reference dequantization:
``test_checkpoint_families.py``).  What transformers' loader cannot be made
to take (MLX's config, ModelOpt's ``hf_quant_config.json`` alone) is
transformers' own refusal, tested here as such; schemes we do not run are
refused naming the family.  Folders written from the tiny Llama, nothing
downloaded."""

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
)
from llama_cases import prompt  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

import mlir_mx.torch as mt  # noqa: E402
from mlir_mx.errors import MXValueError  # noqa: E402
from mlir_mx.torch import MXLinear  # noqa: E402

FAMILIES = {
    "compressed-tensors nvfp4": (compressed_nvfp4_checkpoint, "compressed-tensors", None),
    "modelopt nvfp4": (modelopt_checkpoint, "modelopt", None),
    "quark fp4 W4A4": (lambda d: quark_checkpoint(d, "fp4", "fp4"), "quark", "fp4"),
    "quark fp6_e2m3": (lambda d: quark_checkpoint(d, "fp6_e2m3", None), "quark", None),
}


def _bits(a) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.uint8)


def _mx_layers(model) -> dict:
    return {n: m for n, m in model.named_modules() if isinstance(m, MXLinear)}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_transformers_loads_the_family_as_stored(tmp_path, family):
    write, layout, acts = FAMILIES[family]
    write(tmp_path / "c")
    got = AutoModelForCausalLM.from_pretrained(tmp_path / "c")
    ours = mt.from_pretrained(tmp_path / "c")
    assert got.mx_source["layout"] == layout and got.mx_source["loader"] == "transformers"
    mine, theirs = _mx_layers(got), _mx_layers(ours)
    assert sorted(mine) == sorted(theirs) and len(mine) >= 14
    for name, m in mine.items():
        w, r = m.weight(), theirs[name].weight()
        assert (w.format_name, w.block_size) == (r.format_name, r.block_size)
        np.testing.assert_array_equal(_bits(w.packed_codes()), _bits(r.packed_codes()))
        np.testing.assert_array_equal(_bits(w.scales), _bits(r.scales))
        if r.global_scale is not None:  # NVFP4: the file's per-tensor scale, as read
            assert np.float32(w.global_scale).view(np.uint32) == np.float32(r.global_scale).view(np.uint32)
        assert m.activations == theirs[name].activations
        assert m.activations == (None if acts is None else QUARK_DTYPES[acts][0])
    ids = prompt(8)
    with torch.inference_mode():
        a, b = got(ids).logits, ours(ids).logits
    assert torch.equal(a, b)


def test_no_weight_byte_is_dequantized(tmp_path):
    """The MXLinear's codes are the bytes transformers loaded into the holder
    (taken over, no copy); no float weight of a quantized linear remains."""
    compressed_nvfp4_checkpoint(tmp_path / "c")
    got = AutoModelForCausalLM.from_pretrained(tmp_path / "c")
    floats = [n for n, p in got.named_parameters() if n.endswith("proj.weight")]
    assert floats == []
    w = got.model.layers[0].mlp.down_proj.weight()
    assert w.format_name == "nvfp4" and w.packed_codes().dtype == np.uint8


def _edit_config(folder, edit) -> None:
    cfg = json.loads((folder / "config.json").read_text())
    edit(cfg["quantization_config"])
    (folder / "config.json").write_text(json.dumps(cfg))


def test_schemes_we_do_not_run_are_refused_naming_the_family(tmp_path):
    """A Quark or ModelOpt scheme the registry does not run: refused when
    transformers reads the config, naming the family and why transformers
    has no loader to hand it to (amd-quark is not installed here)."""
    quark_checkpoint(tmp_path / "q", "fp4", None)
    _edit_config(tmp_path / "q", lambda q: q["global_quant_config"]["weight"].update(dtype="int4"))
    with pytest.raises(MXValueError, match=r"quark checkpoint: .*weight dtype 'int4' is not read.*amd-quark"):
        AutoModelForCausalLM.from_pretrained(tmp_path / "q")
    modelopt_checkpoint(tmp_path / "m")
    _edit_config(tmp_path / "m", lambda q: q.update(quant_algo="FP8"))
    with pytest.raises(MXValueError, match=r"modelopt checkpoint: .*ModelOpt quant_algo 'FP8' is not read"):
        AutoModelForCausalLM.from_pretrained(tmp_path / "m")


def test_malformed_nvfp4_file_is_named_through_transformers(tmp_path):
    from safetensors.torch import load_file, save_file

    d = tmp_path / "c"
    compressed_nvfp4_checkpoint(d)
    t = load_file(str(d / "model.safetensors"))
    key = "model.layers.1.self_attn.o_proj.weight_scale"
    s = t[key].view(torch.uint8).clone()
    s[3, 2] = 0x7F
    t[key] = s.view(torch.float8_e4m3fn)
    save_file(t, str(d / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(MXValueError, match=rf"{key}: E4M3 NaN block scale \(0x7f\) at \[3, 2\]"):
        AutoModelForCausalLM.from_pretrained(d)
    t.pop("model.layers.1.self_attn.o_proj.weight_global_scale")
    save_file(t, str(d / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(MXValueError, match="o_proj.weight_global_scale: missing from the checkpoint"):
        AutoModelForCausalLM.from_pretrained(d)


def test_what_transformers_itself_refuses(tmp_path):
    """MLX's config (``quantization`` without a ``quant_method``) and ModelOpt's
    ``hf_quant_config.json`` alone (no ``quantization_config``) never reach a
    quantizer: transformers refuses them itself, before any hook (its
    messages); ``mlir_mx.torch.from_pretrained`` reads both."""
    modelopt_checkpoint(tmp_path / "m", hf_quant_config=True)
    with pytest.raises(RuntimeError, match="ignore_mismatched_sizes"):
        AutoModelForCausalLM.from_pretrained(tmp_path / "m")
    assert isinstance(mt.from_pretrained(tmp_path / "m").model.layers[0].mlp.down_proj, MXLinear)
    pytest.importorskip("mlx.core", reason="mlx not installed (pip install 'mlx[cpu]')")
    mlx_checkpoint(tmp_path / "x", "nvfp4")
    with pytest.raises(ValueError, match="has no `quant_method` attribute"):
        AutoModelForCausalLM.from_pretrained(tmp_path / "x")
    with pytest.warns(UserWarning, match="embedding table"):
        assert isinstance(mt.from_pretrained(tmp_path / "x").lm_head, MXLinear)


def test_quark_entry_is_transformers_own_after_unregister():
    """``unregister()`` puts transformers' own Quark quantizer and config back
    (``"modelopt"``, which transformers lacks, stays ours, as ``"mlir_mx"``)."""
    from transformers.quantizers.auto import (
        AUTO_QUANTIZATION_CONFIG_MAPPING,
        AUTO_QUANTIZER_MAPPING,
    )
    from transformers.quantizers.quantizer_quark import QuarkHfQuantizer

    from mlir_mx.torch import transformers_quantizer as tq

    assert AUTO_QUANTIZER_MAPPING["quark"] is tq.MXHfQuantizer
    assert AUTO_QUANTIZER_MAPPING["modelopt"] is tq.MXHfQuantizer
    tq.unregister()
    try:
        assert AUTO_QUANTIZER_MAPPING["quark"] is QuarkHfQuantizer
        assert AUTO_QUANTIZATION_CONFIG_MAPPING["quark"] is not tq.QuarkEntry
        assert AUTO_QUANTIZER_MAPPING["modelopt"] is tq.MXHfQuantizer
    finally:
        tq.register()
    assert AUTO_QUANTIZER_MAPPING["quark"] is tq.MXHfQuantizer

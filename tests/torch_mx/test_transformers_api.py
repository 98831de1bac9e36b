"""transformers' own API over mlir-mx (``docs/torch.md``, "transformers' own API"):
``AutoModelForCausalLM.from_pretrained`` quantizes on load to an ``MXConfig``
and reads MXFP4 checkpoints through our kernels; ``model.save_pretrained``
writes what ``mlir_mx.torch.save_pretrained`` writes.  Small random models
(tiny Llama and gpt-oss), nothing downloaded."""

from __future__ import annotations

import ctypes
import json
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="torch not installed (pip install 'mlir-mx[torch]')")
pytest.importorskip("safetensors", reason="safetensors not installed (pip install 'mlir-mx[test]')")

from gpt_oss_cases import (  # noqa: E402
    prompt,
    tiny_gpt_oss,
    transformers_or_skip,
    write_gpt_oss_checkpoint,
)
from llama_cases import prompt as llama_prompt  # noqa: E402
from llama_cases import tiny_llama  # noqa: E402

import mlir_mx.torch as mt  # noqa: E402
from mlir_mx.errors import MXArgTypeError, MXValueError  # noqa: E402
from mlir_mx.torch import MXConfig, MXExperts, MXLinear  # noqa: E402

transformers = transformers_or_skip()
from transformers import AutoModelForCausalLM  # noqa: E402
from transformers.quantizers.auto import AUTO_QUANTIZER_MAPPING  # noqa: E402

from mlir_mx.torch.transformers_quantizer import MXHfQuantizer  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def _logits(model, ids):
    with torch.inference_mode():
        return model(ids).logits


def _tensors(folder: Path) -> dict:
    from safetensors import safe_open

    out = {}
    for path in sorted(folder.glob("*.safetensors")):
        with safe_open(str(path), framework="pt") as f:
            out.update({(path.name, k): f.get_tensor(k) for k in f.keys()})
    return out


def _same_files(a: Path, b: Path) -> None:
    """The same safetensors files with the same tensors (name, dtype, shape,
    bytes) and the same config.json, byte for byte."""
    ta, tb = _tensors(a), _tensors(b)
    assert ta and sorted(ta) == sorted(tb)
    for key, t in ta.items():
        u = tb[key]
        assert (t.dtype, t.shape) == (u.dtype, u.shape), key
        assert torch.equal(t.reshape(-1).view(torch.uint8), u.reshape(-1).view(torch.uint8)), key
    for name in sorted(p.name for p in a.glob("*.safetensors")):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    assert (a / "config.json").read_text() == (b / "config.json").read_text()


@pytest.fixture(scope="module")
def gpt_oss_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("hf") / "gpt-oss-mxfp4"
    write_gpt_oss_checkpoint(tiny_gpt_oss(), folder)
    return folder


@pytest.fixture(scope="module")
def plain_llama(tmp_path_factory):
    """A tiny Llama saved by transformers in f32, as any checkpoint is."""
    folder = tmp_path_factory.mktemp("hf") / "llama"
    tiny_llama().save_pretrained(folder)
    return folder


# -- MXConfig as transformers' quantization_config -----------------------------------------


def test_mxconfig_keyword_and_transformers_entry():
    """``element=`` is the keyword (``weights=`` refused, saying so); the
    config goes through transformers' table and back."""
    with pytest.raises(MXArgTypeError, match=r"weights: .*element=.*MXConfig\(element='mxfp4'\)"):
        MXConfig(weights="mxfp4", activations=None)
    with pytest.raises(MXArgTypeError, match="bits: not an MXConfig field"):
        MXConfig(bits=4)
    config = MXConfig(element="mxfp4", activations="i8")
    assert config.to_dict() == {"quant_method": "mlir_mx", "element": "f4E2M1FN",
                                "activations": "i8", "block_size": 32}  # fmt: skip
    from transformers.quantizers.auto import AutoQuantizationConfig

    assert AutoQuantizationConfig.from_dict(config.to_dict()) == config
    assert AUTO_QUANTIZER_MAPPING["mlir_mx"] is MXHfQuantizer


@pytest.mark.parametrize("kind", ["llama", "gpt-oss"])
def test_quantize_on_load_is_quantize_(kind, plain_llama, tmp_path):
    """``from_pretrained(path, quantization_config=MXConfig(...))``: the layers
    quantize_ converts, with the same bits: the logits are quantize_'s bit for bit."""
    if kind == "llama":
        folder, ids = plain_llama, llama_prompt(8)
    else:
        folder, ids = tmp_path / "g", prompt(8)
        tiny_gpt_oss(num_hidden_layers=1).save_pretrained(folder)
    config = MXConfig(element="mxfp4", activations="i8" if kind == "llama" else None)
    loaded = AutoModelForCausalLM.from_pretrained(folder, quantization_config=config)
    reference = AutoModelForCausalLM.from_pretrained(folder)
    summary = mt.quantize_(reference, config)
    assert isinstance(loaded.hf_quantizer, MXHfQuantizer)
    assert sorted(loaded.mx_source["modules"]) == sorted(summary.converted + summary.experts)
    assert isinstance(loaded.lm_head, MXLinear) and loaded.lm_head.activations == config.activations
    if kind == "gpt-oss":
        assert isinstance(loaded.model.layers[0].mlp.experts, MXExperts)
    assert torch.equal(_logits(loaded, ids), _logits(reference, ids))


_MEASURE = r"""
import ctypes, sys, threading, time
import torch, transformers
import mlir_mx.torch as mt

class _Mallinfo2(ctypes.Structure):
    _fields_ = [(f, ctypes.c_size_t) for f in
                "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]
_mallinfo2 = ctypes.CDLL("libc.so.6").mallinfo2
_mallinfo2.restype = _Mallinfo2

def in_use():
    # bytes malloc has handed out and not had back: the heap's in-use chunks
    # plus the mmapped ones (torch's and numpy's buffers are malloc'd)
    info = _mallinfo2()
    return info.uordblks + info.hblkhd

def peak_growth(load):
    base, peak, run = in_use(), [0], [True]
    def sample():
        while run[0]:
            peak[0] = max(peak[0], in_use()); time.sleep(0.0005)
    t = threading.Thread(target=sample); t.start()
    try:
        model = load()
    finally:
        run[0] = False; t.join()
    return max(peak[0], in_use()) - base, model

sys.setswitchinterval(0.0002)
folder, load = sys.argv[1], transformers.AutoModelForCausalLM.from_pretrained
# once unmeasured: the imports, transformers' model code and our quantize kernels
# (compiled at first use) stay loaded; then each load's own memory is measured
load(folder, dtype=torch.float32, quantization_config=mt.MXConfig())
mx, model = peak_growth(lambda: load(folder, dtype=torch.float32, quantization_config=mt.MXConfig()))
assert isinstance(model.lm_head, mt.MXLinear)
held = sum(t.numel() * t.element_size() for t in [*model.parameters(), *model.buffers()])
del model
plain, model = peak_growth(lambda: load(folder, dtype=torch.float32))
f32 = sum(p.numel() * 4 for p in model.parameters())
biggest = max(p.numel() * 4 for p in model.parameters())  # the largest f32 weight
print(f32, held, biggest, mx, plain)
"""


def _bf16_llama(folder: Path, layers: int) -> None:
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        hidden_size=512, intermediate_size=1536, num_hidden_layers=layers, num_attention_heads=8,
        num_key_value_heads=8, vocab_size=512, max_position_embeddings=64, dtype="bfloat16",
    )  # fmt: skip
    transformers.LlamaForCausalLM(config).to(torch.bfloat16).save_pretrained(folder)


def _has_mallinfo2() -> bool:
    try:
        return hasattr(ctypes.CDLL("libc.so.6"), "mallinfo2")
    except OSError:
        return False


@pytest.mark.skipif(
    not _has_mallinfo2(),
    reason="the meter is glibc's mallinfo2 (glibc >= 2.33); this C library has none",
)
def test_quantize_on_load_never_holds_the_model_in_f32(tmp_path):
    """The measurement: a bf16 checkpoint (4 Llama layers, 54 MiB in f32)
    loaded in f32.  transformers memory-maps the file, so a tensor read as
    stored costs no allocation, while each tensor cast to f32 does: the peak
    of the bytes glibc's malloc has handed out (mallinfo2: in-use heap chunks
    plus mmapped ones; sampled every 0.5 ms in a fresh process, after one
    unmeasured load that warms the imports and the compiled kernels) bounds
    the f32 bytes held at once.  The process's RssAnon is not the meter: what
    malloc frees inside its heap stays resident until trimmed, and how much
    of a load's freed memory is reused depends on where small long-lived
    objects land (the same load grew RssAnon by 10 to 32 MiB from one process
    to the next; 17 to 33 MiB of the heap was free once the model was
    deleted: docs/torch.md).  The plain load's growth shows the meter sees a
    whole model held in f32 (>= 90 % of it); the load that quantizes each
    weight as it is read grows by what the quantized model holds plus at most
    two f32 weights and 4 MiB (< 40 % of the f32 model)."""
    _bf16_llama(tmp_path / "llama-bf16", layers=4)
    out = subprocess.run(
        [sys.executable, "-c", _MEASURE, str(tmp_path / "llama-bf16")],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    f32, held, biggest, mx, plain = map(int, out.stdout.split()[-5:])
    assert plain >= 0.9 * f32, (f32, held, biggest, mx, plain)
    assert mx <= held + 2 * biggest + 4 * 2**20, (f32, held, biggest, mx, plain)
    assert mx < 0.4 * f32, (f32, held, biggest, mx, plain)


# -- MXFP4 checkpoints read through our kernels ----------------------------------------------


def test_gpt_oss_checkpoint_through_our_kernels(gpt_oss_folder, tmp_path):
    """gpt-oss's own MXFP4 layout: transformers' from_pretrained builds MXExperts
    over the stored bytes; the logits are mlir_mx.torch.from_pretrained's bit
    for bit; transformers' save_pretrained writes mlir_mx's files, which are
    the checkpoint's own safetensors bytes."""
    theirs = AutoModelForCausalLM.from_pretrained(gpt_oss_folder)
    ours = mt.from_pretrained(gpt_oss_folder)
    assert isinstance(theirs.hf_quantizer, MXHfQuantizer)
    assert theirs.mx_source["layout"] == "mxfp4" and len(theirs.mx_source["modules"]) == 2
    experts = theirs.model.layers[0].mlp.experts
    assert isinstance(experts, MXExperts)
    for mine, its in zip(ours.model.layers[0].mlp.experts.gate_up, experts.gate_up, strict=True):
        assert torch.equal(mine.dequantized_weight(), its.dequantized_weight())
    ids = prompt(8)
    assert torch.equal(_logits(theirs, ids), _logits(ours, ids))
    theirs.save_pretrained(tmp_path / "transformers")
    mt.save_pretrained(theirs, tmp_path / "mlir_mx")
    _same_files(tmp_path / "transformers", tmp_path / "mlir_mx")
    saved = (tmp_path / "transformers/model.safetensors").read_bytes()
    assert saved == (gpt_oss_folder / "model.safetensors").read_bytes()
    again = AutoModelForCausalLM.from_pretrained(tmp_path / "transformers")
    assert torch.equal(_logits(again, ids), _logits(ours, ids))


def test_quantized_llama_saves_and_reloads_both_ways(tmp_path):
    """quantize_ then transformers' save_pretrained: compressed-tensors
    mxfp4-pack-quantized files equal to mlir_mx.torch.save_pretrained's (both
    orders); AutoModelForCausalLM.from_pretrained reloads them as MXLinear
    layers (no compressed_tensors package needed), logits bit for bit those of
    mlir_mx.torch.from_pretrained and of the model saved."""
    model = tiny_llama()
    mt.quantize_(model, MXConfig(element="mxfp4"), filter_fn=lambda m, name: name != "lm_head")
    mt.save_pretrained(model, tmp_path / "mlir_mx")
    model.save_pretrained(tmp_path / "transformers")
    _same_files(tmp_path / "transformers", tmp_path / "mlir_mx")
    config = json.loads((tmp_path / "transformers/config.json").read_text())
    assert config["quantization_config"]["format"] == "mxfp4-pack-quantized"
    assert "lm_head" in config["quantization_config"]["ignore"]
    theirs = AutoModelForCausalLM.from_pretrained(tmp_path / "transformers")
    ours = mt.from_pretrained(tmp_path / "transformers")
    assert isinstance(theirs.hf_quantizer, MXHfQuantizer) and theirs.mx_source["layout"] == "compressed-tensors"
    assert isinstance(theirs.model.layers[1].mlp.down_proj, MXLinear)
    assert type(theirs.lm_head) is torch.nn.Linear
    ids = llama_prompt(8)
    reference = _logits(model, ids)
    assert torch.equal(_logits(theirs, ids), reference)
    assert torch.equal(_logits(ours, ids), reference)
    # a model loaded so saves the same files again (the other order: ours last)
    theirs.save_pretrained(tmp_path / "again")
    mt.save_pretrained(theirs, tmp_path / "again-mlir_mx")
    _same_files(tmp_path / "again", tmp_path / "again-mlir_mx")
    _same_files(tmp_path / "again", tmp_path / "transformers")


def test_tied_embeddings_with_an_mx_lm_head(tmp_path):
    """A tied Llama converted whole (lm_head an MXLinear over the embeddings'
    weight): transformers' from_pretrained of its save keeps lm_head MX and
    the embeddings as stored, untied, as mlir_mx.torch.from_pretrained does:
    the same logits bits, the same files saved again."""
    model = tiny_llama(tie_word_embeddings=True)
    assert model.lm_head.weight is model.model.embed_tokens.weight
    mt.quantize_(model)
    model.save_pretrained(tmp_path / "tied")
    theirs = AutoModelForCausalLM.from_pretrained(tmp_path / "tied")
    ours = mt.from_pretrained(tmp_path / "tied")
    assert isinstance(theirs.lm_head, MXLinear) and theirs.config.tie_word_embeddings is False
    ids = llama_prompt(6)
    assert torch.equal(_logits(theirs, ids), _logits(model, ids))
    assert torch.equal(_logits(ours, ids), _logits(model, ids))
    theirs.save_pretrained(tmp_path / "again")
    mt.save_pretrained(ours, tmp_path / "again-mlir_mx")
    _same_files(tmp_path / "again", tmp_path / "again-mlir_mx")


def test_a_model_converted_on_load_saves_as_mlir_mx_does(plain_llama, tmp_path):
    """MXConfig on load, then model.save_pretrained: the compressed-tensors files
    (the config's quant_method "mlir_mx" replaced by the layout's) that reload
    to the same logits; a model mixing MXExperts and MXLinear is refused by
    both saves, with the same MXValueError."""
    model = AutoModelForCausalLM.from_pretrained(plain_llama, quantization_config=MXConfig())
    mt.save_pretrained(model, tmp_path / "mlir_mx")
    model.save_pretrained(tmp_path / "transformers")
    _same_files(tmp_path / "transformers", tmp_path / "mlir_mx")
    back = AutoModelForCausalLM.from_pretrained(tmp_path / "transformers")
    ids = llama_prompt(6)
    assert torch.equal(_logits(back, ids), _logits(model, ids))
    mixed = tiny_gpt_oss(num_hidden_layers=1)
    mt.quantize_(mixed)
    for save in (mixed.save_pretrained, lambda p: mt.save_pretrained(mixed, p)):
        with pytest.raises(MXValueError, match="not both"):
            save(tmp_path / "mixed")


def test_configs_we_do_not_take_stay_transformers(gpt_oss_folder):
    """Mxfp4Config(dequantize=True) is transformers' own dequantizing load
    (float experts, no MXExperts); a compressed-tensors format other than
    mxfp4-pack-quantized goes to transformers' own config class; an MXConfig
    for a quantized checkpoint is transformers' own refusal."""
    from transformers import Mxfp4Config
    from transformers.quantizers.quantizer_mxfp4 import Mxfp4HfQuantizer

    from mlir_mx.torch.transformers_quantizer import CompressedMXFP4Config

    model = AutoModelForCausalLM.from_pretrained(
        gpt_oss_folder, quantization_config=Mxfp4Config(dequantize=True)
    )
    assert not isinstance(model.model.layers[0].mlp.experts, MXExperts)
    assert model.model.layers[0].mlp.experts.gate_up_proj.dtype == torch.bfloat16
    with pytest.raises(ValueError, match="quantized with Mxfp4Config but you are passing a MXConfig"):
        AutoModelForCausalLM.from_pretrained(gpt_oss_folder, quantization_config=MXConfig())
    q = MXHfQuantizer(Mxfp4Config(dequantize=True), pre_quantized=True)
    assert type(q) is Mxfp4HfQuantizer
    other = {"quant_method": "compressed-tensors", "format": "float-quantized", "config_groups": {}}
    try:
        got = CompressedMXFP4Config.from_dict(other)
    except ImportError as e:  # transformers' own class, without the compressed-tensors package
        assert "compressed-tensors" in str(e)
    else:
        assert not isinstance(got, CompressedMXFP4Config)


def test_device_map_off_the_cpu_is_refused(plain_llama):
    with pytest.raises(MXValueError, match="device_map: mlir-mx layers run on the CPU"):
        AutoModelForCausalLM.from_pretrained(plain_llama, quantization_config=MXConfig(),
                                             device_map={"": "meta"})  # fmt: skip


def test_hub_id_says_how_to_download():
    """A Hub id is answered with how to get the folder; nothing is downloaded."""
    with pytest.raises(MXValueError, match=r"hf download openai/gpt-oss-20b --local-dir gpt-oss-20b"):
        mt.from_pretrained("openai/gpt-oss-20b")
    with pytest.raises(MXValueError, match="snapshot_download") as e:
        mt.from_pretrained("openai/gpt-oss-20b")
    assert str(e.value).startswith("path: expected a checkpoint folder")


_TABLES = r"""
import sys
from importlib import import_module
def tables():
    auto = import_module("transformers.quantizers.auto")
    return [auto.AUTO_QUANTIZER_MAPPING[m].__name__ for m in ("mxfp4", "compressed-tensors")] + [
        "mlir_mx" in auto.AUTO_QUANTIZER_MAPPING]
if sys.argv[1] == "mlir_mx first":
    import mlir_mx.torch
    print("transformers imported:", "transformers" in sys.modules)
    # imports transformers' quantizers itself, while the import hook waits for them
    from mlir_mx.torch.transformers_quantizer import unregister
    print(*tables())
    unregister()
    print(*tables())
else:
    print(*tables())
    import mlir_mx.torch
    print(*tables())
"""


def test_transformers_tables_only_when_mlir_mx_torch_is_imported():
    """Without mlir_mx.torch, transformers' quantizers are its own; with it
    imported before transformers (which ``import mlir_mx.torch`` does not
    import) or after, ours; unregister() restores transformers' own."""

    def run(order):
        out = subprocess.run([sys.executable, "-c", _TABLES, order], capture_output=True,
                             text=True, timeout=300, cwd=ROOT)  # fmt: skip
        assert out.returncode == 0, out.stderr[-3000:]
        return out.stdout.split("\n")[:-1]

    theirs, ours = "Mxfp4HfQuantizer CompressedTensorsHfQuantizer", "MXHfQuantizer MXHfQuantizer True"
    assert run("mlir_mx first") == ["transformers imported: False", ours, theirs + " True"]
    assert run("mlir_mx after") == [theirs + " False", ours]

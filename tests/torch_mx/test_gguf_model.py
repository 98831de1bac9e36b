"""``mlir_mx.torch.from_pretrained("x.gguf")``: GGUF model files (issue 53, item 4).

Files are written by gguf-py from small random transformers models, as
llama.cpp's converter writes them (``gguf_cases.py``), with MXFP4 tensors
(a Llama's MLP, gpt-oss's experts) beside Q8_0, F16 and F32 ones.  Each loaded
model is checked against a transformers model holding the same dequantized
weights: for the Llama, transformers' own GGUF loader
(``AutoModelForCausalLM.from_pretrained(gguf_file=)``, which dequantizes every
tensor with gguf-py); for gpt-oss (whose GGUF loading transformers 5.24 does
not do: its config reader raises on llama.cpp's rope keys), the model written,
each tensor replaced by gguf-py's dequantization of the bytes in the file.

The bound: the two models hold the same weight values (the MX layers' weights
decode exactly to the reference's), so they differ only by f32 rounding in the
MX layers' sums; :func:`logit_bound` bounds that (``lam = 8`` standard
deviations of the measured propagation of ``sqrt(2K + 2) u |x||W|`` per layer,
``docs/torch.md``, "The correctness reference").  Greedy tokens must be equal.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import time

import numpy as np
import pytest
import torch
from gguf_cases import (
    Q,
    gguf,
    gpt_oss_shaped_config,
    reference_from_gguf,
    tiny_llama,
    write_model_gguf,
)
from gpt_oss_cases import tiny_gpt_oss

from mlir_mx import oracle
from mlir_mx.errors import MXValueError
from mlir_mx.interop.gguf import mxfp4_from_ggml, mxfp4_packed_from_ggml, open_gguf
from mlir_mx.torch import MXExperts, MXLinear, from_pretrained, gguf_tokenizer, greedy, logit_bound

transformers = pytest.importorskip("transformers")

YARN = {"rope_type": "yarn", "factor": 4.0, "beta_fast": 32.0, "beta_slow": 1.0,
        "truncate": False, "original_max_position_embeddings": 64, "rope_theta": 150000.0}  # fmt: skip


def mixed_types(name: str, a) -> int:
    """MXFP4 for the MLP / experts, Q8_0 for Q and the output, F16 for K and the
    embeddings, F32 for the rest (norms, V, O, biases, sinks, router)."""
    if (
        ".ffn_" in name
        and name.endswith(".weight")
        and not name.endswith(("inp.weight", "norm.weight"))
    ):
        return Q.MXFP4
    if "attn_q." in name or name == "output.weight":
        return Q.Q8_0
    if "attn_k." in name or name == "token_embd.weight":
        return Q.F16
    return Q.F32


def ids(n: int = 12, seed: int = 1):
    return torch.randint(0, 264, (1, n), generator=torch.Generator().manual_seed(seed))


@pytest.fixture(scope="module")
def llama_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("gguf") / "llama.gguf"
    write_model_gguf(tiny_llama(), path, mixed_types)
    return path


@pytest.fixture(scope="module")
def oss_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("gguf") / "gpt-oss.gguf"
    ref = write_model_gguf(tiny_gpt_oss(vocab_size=264, rope_parameters=YARN), path, mixed_types)
    return path, ref


def load(path, **kw):
    with pytest.warns(
        UserWarning,
        match=r"ggml type Q8_0 are dequantized to float32 .* KiB in the file become .* KiB",
    ):
        return from_pretrained(path, dtype=torch.float32, **kw)


def check_against(model, ref, n_new: int = 4) -> float:
    x = ids()
    bound = logit_bound(ref, x, probes=3)
    with torch.inference_mode():
        logits = model(x).logits
    used = bound.check(logits)  # raises past the bound; the fraction of it used
    assert 0 <= used <= 1
    top2 = bound.logits[0, -1].topk(2).values  # the greedy choice is not a near tie
    assert float(top2[0] - top2[1]) > 10 * float(bound.bound.max())
    assert list(greedy(model, x, n_new)) == list(greedy(ref, x, n_new))
    return used


def file_tensor(path, name: str) -> tuple[np.ndarray, int]:
    t = next(t for t in gguf.GGUFReader(str(path)).tensors if t.name == name)
    return np.array(t.data), int(t.tensor_type)


# -- the pieces in interop.gguf ----------------------------------------------------------


def test_packed_conversion_is_the_per_tensor_readers_and_writes_into_views():
    rng = np.random.default_rng(0)
    raw = rng.integers(0, 256, (6, 3 * 17), dtype=np.uint8)
    raw.reshape(-1, 17)[:, 0] = rng.integers(0, 255, 18, dtype=np.uint8)  # every scale but 255
    want = mxfp4_from_ggml(raw, (6, 96))
    packed, scales = mxfp4_packed_from_ggml(raw, 6, 96)
    assert np.array_equal(packed, want.packed_codes())
    assert np.array_equal(scales, want.scales.view(np.uint8))
    both = (np.zeros((12, 48), np.uint8), np.zeros((12, 3), np.uint8))
    mxfp4_packed_from_ggml(raw, 6, 96, out=(both[0][1::2], both[1][1::2]))  # every other row
    assert np.array_equal(both[0][1::2], packed) and not both[0][0::2].any()
    columns = np.zeros((48, 6), np.uint8)  # written through a transposed view too
    mxfp4_packed_from_ggml(raw, 6, 96, out=(columns.T, np.zeros((6, 3), np.uint8)))
    assert np.array_equal(columns.T, packed)
    raw.reshape(-1, 17)[4, 0] = 255
    with pytest.raises(MXValueError, match="scale byte 255"):
        mxfp4_packed_from_ggml(raw, 6, 96)


def test_open_gguf_gives_the_scalar_metadata(llama_file):
    with open_gguf(llama_file) as f:
        md, t = f.metadata, f.tensors["blk.0.ffn_up.weight"]
        assert md["general.architecture"] == "llama" and md["llama.block_count"] == 2
        assert md["general.alignment"] == 32 and md["tokenizer.ggml.model"] == "gpt2"
        assert "tokenizer.ggml.tokens" not in md  # arrays are skipped
        assert (t.shape, t.type) == ((128, 64), Q.MXFP4)
        assert f.data("blk.0.ffn_up.weight").nbytes == 128 * 2 * 17
        assert f.data("blk.0.ffn_up.weight", 1).nbytes == 2 * 17  # one row of the first axis


# -- Llama ------------------------------------------------------------------------------


def test_llama_matches_transformers_own_gguf_loading(llama_file):
    ours = load(llama_file)
    theirs = transformers.AutoModelForCausalLM.from_pretrained(
        str(llama_file.parent), gguf_file=llama_file.name, dtype=torch.float32
    ).eval()
    mlp = ours.model.layers[0].mlp
    assert all(isinstance(getattr(mlp, p), MXLinear) for p in ("gate_proj", "up_proj", "down_proj"))
    assert type(ours.model.layers[0].self_attn.q_proj) is torch.nn.Linear  # Q8_0: dequantized
    check_against(ours, theirs)
    # Q (Q8_0, permuted by the converter) and K (F16) back in transformers' row order
    for p in ("q_proj", "k_proj", "v_proj"):
        a = getattr(ours.model.layers[1].self_attn, p).weight
        assert torch.equal(a, getattr(theirs.model.layers[1].self_attn, p).weight)


def test_llama_mxfp4_codes_are_the_files_bytes_and_decode_as_gguf_py(llama_file):
    ours = load(llama_file)
    for i, layer in enumerate(ours.model.layers):
        for proj, name in (
            ("gate_proj", "ffn_gate"),
            ("up_proj", "ffn_up"),
            ("down_proj", "ffn_down"),
        ):
            raw, qtype = file_tensor(llama_file, f"blk.{i}.{name}.weight")
            assert qtype == Q.MXFP4
            w = getattr(layer.mlp, proj).weight()
            expected = mxfp4_from_ggml(raw, w.shape)  # the per-tensor reader, one code a byte
            assert np.array_equal(w.packed_codes(), expected.packed_codes())
            assert np.array_equal(w.scales.view(np.uint8), expected.scales.view(np.uint8))
            theirs = gguf.quants.dequantize(raw, Q.MXFP4)  # ggml's decoder, ported
            # equal values (ggml decodes code 8, E2M1's -0, as +0: compared as values)
            assert np.array_equal(oracle.dequantize(w), theirs)


def test_default_dtype_keeps_the_16_bit_tensors_bit_for_bit(llama_file):
    with pytest.warns(UserWarning, match="dequantized to float16"):
        model = from_pretrained(llama_file)  # the file's 16-bit type: F16
    emb = model.model.embed_tokens.weight
    raw, qtype = file_tensor(llama_file, "token_embd.weight")
    assert qtype == Q.F16 and emb.dtype == torch.float16
    assert np.array_equal(emb.detach().numpy().view(np.uint16), raw.view(np.uint16))
    with torch.inference_mode():
        logits = model(ids()).logits
    assert logits.dtype == torch.float16 and bool(torch.isfinite(logits).all())


def test_tokenizer_from_the_metadata(llama_file, tmp_path):
    tok = gguf_tokenizer(llama_file)
    enc = tok("hello world<|endoftext|>")["input_ids"]
    assert enc[-1] == 263 and tok.eos_token == "<|endoftext|>"
    assert 260 in enc  # the merge "he"+"ll" from the file's merges
    assert tok.decode(enc) == "hello world<|endoftext|>"
    bare = tmp_path / "bare.gguf"
    write_model_gguf(tiny_llama(), bare, tokenizer=False)
    with pytest.raises(MXValueError, match=r"bare\.gguf: transformers builds no tokenizer"):
        gguf_tokenizer(bare)


# -- gpt-oss ----------------------------------------------------------------------------


def test_gpt_oss_matches_the_dequantized_model(oss_file, monkeypatch):
    path, ref = oss_file
    decoded = []
    real = gguf.quants.dequantize
    monkeypatch.setattr(gguf.quants, "dequantize", lambda d, t: decoded.append(t) or real(d, t))
    ours = load(path)
    assert Q.MXFP4 not in decoded and set(decoded) == {Q.Q8_0}  # no expert byte decoded
    cfg = ours.config
    assert (cfg.head_dim, cfg.sliding_window, cfg.rope_parameters) == (16, 8, YARN)
    assert (cfg.num_local_experts, cfg.num_experts_per_tok, cfg.tie_word_embeddings) == (
        4,
        2,
        False,
    )
    for layer in ours.model.layers:
        assert isinstance(layer.mlp.experts, MXExperts)
        assert 8 * layer.mlp.experts.nbytes / (4 * 3 * 64 * 64) == 4.25
    check_against(ours, ref)


def test_gpt_oss_expert_codes_are_the_files_bytes(oss_file):
    path, _ = oss_file
    ours = load(path)
    for i, layer in enumerate(ours.model.layers):
        ex = layer.mlp.experts
        raws = {
            p: file_tensor(path, f"blk.{i}.ffn_{p}_exps.weight")[0] for p in ("gate", "up", "down")
        }
        for e in range(ex.num_experts):
            gu, dn = ex.gate_up[e].weight(), ex.down[e].weight()
            for p, rows in (("gate", slice(0, None, 2)), ("up", slice(1, None, 2))):
                want = mxfp4_from_ggml(raws[p][e], (64, 64))
                assert np.array_equal(gu.packed_codes()[rows], want.packed_codes())
                assert np.array_equal(gu.scales.view(np.uint8)[rows], want.scales.view(np.uint8))
            want = mxfp4_from_ggml(raws["down"][e], (64, 64))
            assert np.array_equal(dn.packed_codes(), want.packed_codes())
            assert np.array_equal(dn.scales.view(np.uint8), want.scales.view(np.uint8))


def test_gpt_oss_tokenizer(oss_file):
    tok = gguf_tokenizer(oss_file[0])
    assert tok.decode(tok("the world")["input_ids"]) == "the world"


# -- refusals ---------------------------------------------------------------------------


def copy_gguf(src, dst, tensor):
    """Write ``dst`` as ``src`` (its metadata, its tensors' bytes), each tensor
    through ``tensor(name, raw)``: ``(raw, raw_dtype or None)``, or None to drop it."""
    reader = gguf.GGUFReader(str(src))
    w = gguf.GGUFWriter(str(dst), "llama")
    for field in reader.fields.values():
        if not field.name.startswith(("GGUF.", "general.architecture")):
            sub = field.types[-1] if len(field.types) > 1 else None
            w.add_key_value(field.name, field.contents(), field.types[0], sub)
    for t in reader.tensors:
        out = tensor(t.name, np.array(t.data))
        if out is not None:
            w.add_tensor(t.name, out[0], raw_dtype=out[1])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@pytest.fixture(scope="module")
def f32_llama_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("gguf") / "f32.gguf"
    write_model_gguf(tiny_llama(), path, tokenizer=False)
    return path


def test_a_type_gguf_py_cannot_decode_is_refused_by_name(f32_llama_file, tmp_path):
    def q81(name, raw):
        if name != "blk.1.attn_v.weight":
            return raw, None
        # 40-byte blocks of 32 values: a type gguf-py has no decoder for
        return np.zeros((raw.shape[0], raw.shape[1] // 32 * 40), np.uint8), Q.Q8_1

    path = tmp_path / "q81.gguf"
    copy_gguf(f32_llama_file, path, q81)
    with pytest.raises(
        MXValueError, match=r"q81\.gguf: ggml type\(s\) Q8_1 cannot be read.*attn_v"
    ):
        from_pretrained(path)


def test_a_missing_tensor_is_named(f32_llama_file, tmp_path):
    path = tmp_path / "short.gguf"
    copy_gguf(
        f32_llama_file, path, lambda n, raw: None if n == "blk.1.ffn_up.weight" else (raw, None)
    )
    with pytest.raises(
        MXValueError, match=r"short\.gguf: tensor 'blk\.1\.ffn_up\.weight' is missing"
    ):
        from_pretrained(path)


def test_experts_not_in_mxfp4_are_refused(tmp_path):
    path = tmp_path / "q8experts.gguf"
    write_model_gguf(tiny_gpt_oss(vocab_size=264), path,
                     lambda n, a: Q.Q8_0 if "_exps.weight" in n else Q.F32)  # fmt: skip
    with pytest.raises(
        MXValueError, match=r"q8experts\.gguf: blk\.0\.ffn_gate_exps\.weight is Q8_0"
    ):
        from_pretrained(path)


def test_bad_files_name_the_path(llama_file, tmp_path):
    cut = tmp_path / "cut.gguf"
    data = llama_file.read_bytes()
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(
        MXValueError, match=r"cut\.gguf: not a readable GGUF file \(tensor .* end past"
    ):
        from_pretrained(cut)
    (tmp_path / "empty.gguf").write_bytes(b"")
    with pytest.raises(MXValueError, match=r"empty\.gguf: not a readable GGUF file"):
        from_pretrained(tmp_path / "empty.gguf")
    with pytest.raises(MXValueError, match=r"path: no GGUF file at .*missing\.gguf"):
        from_pretrained(tmp_path / "missing.gguf")
    other = tmp_path / "falcon.gguf"
    w = gguf.GGUFWriter(str(other), "falcon")
    w.add_tensor("token_embd.weight", np.zeros((4, 32), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(
        MXValueError, match=r"falcon\.gguf: architecture 'falcon' is not read .*llama, gpt-oss"
    ):
        from_pretrained(other)
    with pytest.raises(MXValueError, match="dtype: expected one of"):
        from_pretrained(llama_file, dtype=torch.float64)


# -- the target: a gpt-oss-shaped file of more than a gigabyte ---------------------------


def rss() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))


@pytest.mark.slow
def test_gpt_oss_shaped_file_of_a_gigabyte(tmp_path, monkeypatch):
    """2 layers of gpt-oss-20b's shape (32 experts of 2880 x 2880, MXFP4), an 8192-token
    tied F32 embedding, F32 attention (one Q8_0 tensor): 1.15 GB.  The RSS grows by
    at most 1.1x the file's size over the load; no expert byte is decoded; the
    tokens and logits are the f32 reference's (gguf-py's dequantization, 6.7 GB,
    its experts in memory-mapped scratch files)."""
    path = tmp_path / "gpt-oss-shaped.gguf"
    here = os.path.dirname(__file__)
    tests = os.path.dirname(here)  # llama_cases, which gguf_cases imports
    code = (f"import sys; sys.path[:0] = [{here!r}, {tests!r}]; from gguf_cases import *; "
            f"write_gpt_oss_shaped({str(path)!r}, gpt_oss_shaped_config())")  # fmt: skip
    try:
        subprocess.run([sys.executable, "-c", code], check=True)  # the writer's memory apart
        size = path.stat().st_size
        assert size >= 10**9
        decoded = []
        real = gguf.quants.dequantize
        monkeypatch.setattr(gguf.quants, "dequantize", lambda d, t: decoded.append(t) or real(d, t))
        transformers.GptOssForCausalLM  # noqa: B018 - the lazy import, before the baseline
        gc.collect()
        before, start = rss(), time.perf_counter()
        with pytest.warns(UserWarning, match="Q8_0 are dequantized"):
            model = from_pretrained(path)
        growth, seconds = rss() - before, time.perf_counter() - start
        monkeypatch.undo()
        print(f"\nfile {size / 2**20:.1f} MiB, RSS growth over the load {growth / 2**20:.1f} MiB "
              f"({growth / size:.3f}x), load {seconds:.1f} s")  # fmt: skip
        assert growth <= 1.1 * size
        # Q8_0 only (the one tensor, and the check that gguf-py decodes the type); no MXFP4
        assert set(decoded) == {Q.Q8_0}
        reader = gguf.GGUFReader(str(path))
        raw = {t.name: t.data for t in reader.tensors}
        for b, layer in enumerate(model.model.layers):
            ex = layer.mlp.experts
            assert isinstance(ex, MXExperts) and 8 * ex.nbytes / (32 * 3 * 2880**2) == 4.25
            for e in range(ex.num_experts):
                gu = ex.gate_up[e].weight()
                for p, rows in (("gate", slice(0, None, 2)), ("up", slice(1, None, 2))):
                    want = mxfp4_from_ggml(
                        np.asarray(raw[f"blk.{b}.ffn_{p}_exps.weight"][e]), (2880, 2880)
                    )
                    assert np.array_equal(gu.packed_codes()[rows], want.packed_codes())
                    assert np.array_equal(
                        gu.scales.view(np.uint8)[rows], want.scales.view(np.uint8)
                    )
                dn = ex.down[e].weight()
                want = mxfp4_from_ggml(
                    np.asarray(raw[f"blk.{b}.ffn_down_exps.weight"][e]), (2880, 2880)
                )
                assert np.array_equal(dn.packed_codes(), want.packed_codes())
                assert np.array_equal(dn.scales.view(np.uint8), want.scales.view(np.uint8))
        del reader, raw
        x = torch.randint(0, 8192, (1, 8), generator=torch.Generator().manual_seed(1))
        with torch.inference_mode():
            logits = model(x).logits
        tokens = list(greedy(model, x, 4))
        del model
        gc.collect()
        scratch = tmp_path / "scratch"  # the reference's 6.4 GB of f32 experts, mapped
        scratch.mkdir()
        ref = reference_from_gguf(path, gpt_oss_shaped_config(), scratch)
        bound = logit_bound(ref, x, probes=3)
        used = bound.check(logits)
        top2 = bound.logits[0, -1].topk(2).values
        print(f"logits: max |ours - ref| {float((logits - bound.logits).abs().max()):.3g}, "
              f"bound max {float(bound.bound.max()):.3g}, fraction of the bound used {used:.3f}, "
              f"top-2 gap {float(top2[0] - top2[1]):.3g}; tokens {tokens}")  # fmt: skip
        assert tokens == list(greedy(ref, x, 4))
    finally:
        path.unlink(missing_ok=True)
        for f in (tmp_path / "scratch").glob("*.npy"):
            f.unlink()

"""Tensor parallel for MX layers (issue 56): 2 ranks x 1 thread, gloo over loopback.

Each 2-rank test is one ``run_ranks`` (``mlir_mx_testing.distributed``:
spawned processes, a free port, killed past the timeout) that does several
checks, since a spawn costs seconds.  The single-process reference runs here,
on 1 thread, as each rank does.

The logits bound: the rowwise layers' products are summed in two halves of
``in`` (each rank's, in the kernel's blocked order) and the halves added by
the all-reduce, where one process sums all of ``in`` in the blocked order: a
different order of the same f32 terms, each through at most ``K/2 + 3 <= K + 2``
roundings, so the difference obeys the model of
:func:`mlir_mx.torch.logit_bound` (``docs/torch.md``, "The correctness
reference"): the TP logits are checked against the dequantized reference
within that bound, as the single process's are.  (On this tiny model they are
equal to the last bit or within a few ulps.)
"""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch not installed (pip install 'mlir-mx[test]')")
pytest.importorskip("transformers", reason="transformers not installed (pip install 'mlir-mx[test]')")

from llama_cases import prompt, tiny_llama  # noqa: E402

from mlir_mx.errors import MXValueError  # noqa: E402
from mlir_mx.torch import (  # noqa: E402
    MXLinear,
    dequantize_,
    from_pretrained,
    greedy,
    logit_bound,
    quantize_,
    save_pretrained,
)
from mlir_mx.torch.distributed import (  # noqa: E402
    check_plan,
    held_weight_bytes,
    parallelize,
    resolve_plan,
    set_decode_collective,
    slice_mx,
)
from mlir_mx.torch.distributed.tensor_parallel import expand_plan  # noqa: E402
from mlir_mx_testing.distributed import (  # noqa: E402
    RanksTimedOut,
    hang_in_a_collective,
    run_ranks,
)

NEW = 8
FP6 = "f6E3M2FN"


def _weights(model) -> dict:
    """``{name: (codes, scales)}`` of every MXLinear's weight, unpacked codes."""
    return {n: (m.weight().codes.copy(), np.array(m.weight().scales.view(np.uint8)))
            for n, m in model.named_modules() if isinstance(m, MXLinear)}  # fmt: skip


def _run(model, ids) -> tuple:
    with torch.inference_mode():
        logits = [model(ids).logits.clone() for _ in range(2)]
    return logits, [greedy(model, ids, NEW) for _ in range(2)]


#: (name, element, fuse): the default test's FP4 fused (each part's rows
#: split; FP4 unfused is the checkpoint's, "load"); the slow test's adds FP4
#: in memory and FP6 (packed 4 codes in 3 bytes, sliced by columns rowwise;
#: ``slice_mx`` on FP6 is also the default in-process test's).
CASES = (("fused", "mxfp4", True),)
ALL_CASES = (("fp4", "mxfp4", False), ("fp6", FP6, False), *CASES)


def _rank(rank, world, cases, folder, gguf_file=None):
    """One rank: a bad plan refused; the tiny Llama quantized per case and
    split by the auto plan; the FP4 checkpoint in ``folder`` loaded as this
    rank's shard (``from_pretrained(device_mesh=, tp_plan="auto")``)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import RowwiseParallel

    mesh = init_device_mesh("cpu", (world,))
    out = {}
    bad = torch.nn.Sequential(torch.nn.Linear(96, 64))  # in 96 / 2 ranks = 48: not a block
    quantize_(bad)
    try:
        parallelize(bad, mesh, {"0": RowwiseParallel()})
    except MXValueError as e:
        out["bad"] = str(e)
    for case, element, fuse in cases:
        m = tiny_llama()
        quantize_(m, element=element, fuse=fuse)
        full = held_weight_bytes(m)
        parallelize(m, mesh, resolve_plan(m, "auto"))
        out[case] = (*_run(m, prompt()), full, held_weight_bytes(m), _weights(m))
    m = from_pretrained(folder, device_mesh=mesh, tp_plan="auto")
    out["load"] = (*_run(m, prompt()), None, held_weight_bytes(m), _weights(m))
    previous = set_decode_collective("torch")  # gloo's all-reduce / all-gather
    try:
        out["load_torch"] = _run(m, prompt())
    finally:
        set_decode_collective(previous)
    if gguf_file is not None:  # MXFP4 rows / columns read from the GGUF map
        m = from_pretrained(gguf_file, device_mesh=mesh, tp_plan="auto")
        ids = prompt(vocab=m.config.vocab_size)
        out["gguf"] = (*_run(m, ids), None, held_weight_bytes(m), _weights(m))
    return out


def _reference(element, fuse=False):
    """The single process's model (its tokens), its weights and the logits bound."""
    m = tiny_llama()
    quantize_(m, element=element, fuse=fuse)
    ref = tiny_llama()
    dequantize_(ref, element)
    return greedy(m, prompt(), NEW), held_weight_bytes(m), _weights(m), logit_bound(ref, prompt())


def _check_shards(full: dict, shards: list[dict], world: int) -> int:
    """Each rank's codes and scales are its slice of the full MXArray's (rows
    colwise, block-aligned columns rowwise); the layers compared."""
    for name, (codes, scales) in full.items():
        got = [s[name] for s in shards]
        rows = got[0][0].shape[0] != codes.shape[0]
        for r, (c, s) in enumerate(got):
            if rows:
                n = codes.shape[0] // world
                assert np.array_equal(c, codes[r * n : (r + 1) * n]), name
                assert np.array_equal(s, scales[r * n : (r + 1) * n]), name
            else:
                k, b = codes.shape[1] // world, scales.shape[1] // world
                assert np.array_equal(c, codes[:, r * k : (r + 1) * k]), name
                assert np.array_equal(s, scales[:, r * b : (r + 1) * b]), name
    return len(full)


def _check(results, cases, gguf=None) -> None:
    for out in results:
        assert "rowwise over 2 ranks splits in_features 96 into 48, not a multiple" in out["bad"]
        assert out["bad"].startswith("0: ")  # the layer named
    for case, element, fuse in (*cases, ("load", "mxfp4", False), ("gguf", None, None)):
        if case == "gguf" and gguf is None:
            continue
        tokens, full, weights, lb = gguf if case == "gguf" else _reference(element, fuse)
        for logits, toks, _, held, _ in (out[case] for out in results):
            assert all(torch.equal(a, logits[0]) for a in logits)  # run to run: bit for bit
            assert all(np.array_equal(t, toks[0]) for t in toks)
            assert np.array_equal(toks[0], tokens), case
            assert lb.check(logits[0]) <= 1.0, case
            assert held <= 0.55 * full, (case, held, full)
        # A fused layer's weight() is its part's rows: the same check.
        if case == "load":  # 2 ranks: the exchange's a + b is the all-reduce's bits
            for out in results:
                assert torch.equal(out["load_torch"][0][0], out["load"][0][0])
                assert np.array_equal(out["load_torch"][1][0], out["load"][1][0])
        assert _check_shards(weights, [out[case][4] for out in results], 2) == 15, case


def _mxfp4_linears(name: str, a) -> int:
    """GGUF types: MXFP4 for every linear weight (Q and K stored permuted), F32 else."""
    from gguf import GGMLQuantizationType as Q

    linear = name.endswith(".weight") and a.ndim == 2 and name != "token_embd.weight"
    return Q.MXFP4 if linear else Q.F32


@pytest.fixture(scope="module")
def gguf_file(tmp_path_factory):
    """A tiny Llama GGUF with MXFP4 linears; its single-process load's tokens,
    held bytes and weights, and the bound from gguf-py's dequantized reference."""
    pytest.importorskip("gguf", reason="gguf not installed (pip install 'mlir-mx[test]')")
    from gguf_cases import tiny_llama as gguf_llama
    from gguf_cases import write_model_gguf

    path = tmp_path_factory.mktemp("tp-gguf") / "llama.gguf"
    ref = write_model_gguf(gguf_llama(), path, _mxfp4_linears, tokenizer=False)
    m = from_pretrained(path)
    ids = prompt(vocab=m.config.vocab_size)
    return str(path), (greedy(m, ids, NEW), held_weight_bytes(m), _weights(m), logit_bound(ref, ids))


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """The tiny Llama quantized to MXFP4, saved (compressed-tensors layout)."""
    folder = tmp_path_factory.mktemp("tp") / "ck"
    m = tiny_llama()
    quantize_(m, element="mxfp4")
    save_pretrained(m, folder)
    return str(folder)


def test_two_ranks_match_one_process(checkpoint):
    """One spawn of 2 ranks x 1 thread: a bad plan refused on both ranks,
    then FP4 fused and the FP4 checkpoint loaded as shards: greedy tokens
    equal to one process's, logits within the bound, bit-identical from call
    to call, held MX bytes <= 0.55x, each shard its slice; the checkpoint's
    logits and tokens the same bits with gloo's all-reduce / all-gather as
    with the default one-round exchange (``set_decode_collective``)."""
    torch.set_num_threads(1)
    _check(run_ranks(_rank, 2, (CASES, checkpoint), timeout=300), CASES)


def _collectives_3(rank, world):
    """Each rank's ``_replicated`` of a partial sum (decode-sized, and past
    ``EXCHANGE_BYTES``: the ring) and of a shard, by both kinds."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Partial, Shard

    from mlir_mx.torch.distributed import decode_collectives as tp

    mesh = init_device_mesh("cpu", (world,))
    g = torch.Generator().manual_seed(rank)
    small, big = torch.randn(1, 1, 64, generator=g), torch.randn(1, 512, 64, generator=g)
    out = {}
    for kind in tp.COLLECTIVES:
        tp.set_decode_collective(kind)
        out[kind] = [tp.replicated(t.clone(), Partial(), mesh) for t in (small, big)]
        out[kind].append(tp.replicated(small.clone(), Shard(-1), mesh))
    return out, small, big


@pytest.mark.slow
def test_three_ranks_exchange_sums_in_rank_order():
    """3 ranks: the exchange sums a decode row in rank order, the same bits
    on every rank; a partial sum past ``EXCHANGE_BYTES`` takes gloo's ring
    (the same bits as ``"torch"``); a shard is concatenated in rank order."""
    from mlir_mx.torch.distributed.decode_collectives import EXCHANGE_BYTES

    assert 512 * 64 * 4 > EXCHANGE_BYTES >= 64 * 4
    results = run_ranks(_collectives_3, 3, timeout=300)
    smalls, bigs = [r[1] for r in results], [r[2] for r in results]
    want = smalls[0] + smalls[1] + smalls[2]
    for out, _, _ in results:
        assert torch.equal(out["exchange"][0], want)
        assert torch.equal(out["exchange"][1], out["torch"][1])  # the ring, both kinds
        torch.testing.assert_close(out["exchange"][1], bigs[0] + bigs[1] + bigs[2])
        assert torch.equal(out["exchange"][2], torch.cat(smalls, dim=-1))
        assert torch.equal(out["exchange"][2], out["torch"][2])
        torch.testing.assert_close(out["torch"][0], want)  # the ring's order may differ


def test_an_unknown_decode_collective_is_refused():
    with pytest.raises(MXValueError, match="kind: expected one of exchange, torch, got 'ring'"):
        set_decode_collective("ring")


@pytest.mark.slow
def test_two_ranks_every_case_bit_identical_across_runs(checkpoint, gguf_file):
    """Every case (FP4, FP6, FP4 fused, the checkpoint, the GGUF file: its
    Q/K rows in transformers' order), and two separate runs (new processes)
    give the same bits."""
    torch.set_num_threads(1)
    path, gguf = gguf_file
    first = run_ranks(_rank, 2, (ALL_CASES, checkpoint, path), timeout=900)
    _check(first, ALL_CASES, gguf)
    again = run_ranks(_rank, 2, (ALL_CASES, checkpoint, path), timeout=900)
    for a, b in zip(first, again, strict=True):
        for case in (*(c[0] for c in ALL_CASES), "load", "gguf"):
            assert torch.equal(a[case][0][0], b[case][0][0]), case
            assert np.array_equal(a[case][1][0], b[case][1][0]), case


def test_slice_mx_at_block_boundaries_packed_fp4_and_fp6():
    from mlir_mx import quantize

    x = np.random.default_rng(0).standard_normal((6, 128)).astype(np.float32)
    for element in ("f4E2M1FN", FP6):
        w = quantize(x, element=element, block_size=32, axis=1)
        assert w.is_packed
        cols = slice_mx(w, 1, 32, 96)
        assert np.array_equal(cols.codes, w.codes[:, 32:96])
        assert np.array_equal(cols.scales, w.scales[:, 1:3])
        rows = slice_mx(w, 0, 2, 5)
        assert np.array_equal(rows.codes, w.codes[2:5]) and np.array_equal(rows.scales, w.scales[2:5])
        with pytest.raises(MXValueError, match="not at block boundaries"):
            slice_mx(w, 1, 16, 48)


def test_slice_mx_keeps_nvfp4s_scales_and_global_scale():
    """An NVFP4 shard keeps its E4M3 block scales and the tensor's one global
    scale, so it dequantizes to the same slice of the whole weight, bit for bit."""
    from mlir_mx import dequantize, quantize

    x = np.random.default_rng(1).standard_normal((6, 128)).astype(np.float32)
    w = quantize(x, "nvfp4", axis=1)
    whole = dequantize(w)
    for dim, a, b, cut in ((1, 32, 96, np.s_[:, 32:96]), (0, 2, 5, np.s_[2:5])):
        part = slice_mx(w, dim, a, b)
        assert part.format_name == "nvfp4" and part.global_scale == w.global_scale
        assert np.array_equal(part.scales, w.scales[cut[0], cut[1].start // 16 : cut[1].stop // 16]
                              if dim else w.scales[cut])  # fmt: skip
        assert np.array_equal(dequantize(part).view(np.uint32), whole[cut].view(np.uint32))


@pytest.mark.parametrize(
    ("world", "plan", "fuse", "message"),
    [
        (3, {"model.layers.*.mlp.gate_proj": "colwise"}, False,
         "model.layers.0.mlp.gate_proj: colwise over 3 ranks: out_features 128 is not divisible by 3"),
        (4, {"model.layers.*.self_attn.o_proj": "rowwise"}, False,
         "model.layers.0.self_attn.o_proj: rowwise over 4 ranks splits in_features 64 into 16, "
         "not a multiple of the MX block 32"),
        (4, {"model.layers.*.self_attn.k_proj": "colwise"}, False,
         "model.layers.0.self_attn.k_proj: 2 attention heads do not split over 4 ranks"),
        (2, {"model.layers.*.mlp.gate_proj": "colwise"}, True,
         "model.layers.0.mlp.up_proj: fused with model.layers.0.mlp.gate_proj"),
        (2, {"model.layers.*.self_attn.q_proj": "rowwise"}, True,
         "model.layers.0.self_attn.q_proj: a part of a fused weight"),
    ],  # fmt: skip
)
def test_bad_plan_refused_naming_the_layer(world, plan, fuse, message):
    """Checked on the model alone: no process group exists here, so nothing
    collective can have started (``parallelize`` runs this check first)."""
    m = tiny_llama()
    quantize_(m, fuse=fuse)
    with pytest.raises(MXValueError, match="^" + message.replace("(", r"\(")):
        check_plan(m, world, expand_plan(m, resolve_plan(m, plan)))


@pytest.mark.slow
def test_a_hung_collective_is_killed(tmp_path):
    t0 = time.monotonic()
    with pytest.raises(RanksTimedOut, match="killed"):
        run_ranks(hang_in_a_collective, 2, (str(tmp_path),), timeout=60)
    assert time.monotonic() - t0 < 120  # the timeout, then the kills and joins
    for rank in range(2):
        pid = int((tmp_path / f"pid{rank}").read_text())
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_generate_tp_option_checked_first(checkpoint, capsys):
    from mlir_mx.torch.generate import main

    assert main([checkpoint, "--prompt", "w7", "--tp", "0"]) == 2
    assert "mx-generate: error: --tp: expected 1 or more processes, got 0" in capsys.readouterr().err


def test_rank_threads_share_out_this_machines_cpus():
    """``mx-generate --tp N``'s threads per rank (OMP_NUM_THREADS unless set)."""
    from mlir_mx.torch.distributed.launch import rank_threads

    cpus = len(os.sched_getaffinity(0))
    assert rank_threads(1) == cpus
    assert rank_threads(2) == max(1, cpus // 2)
    assert rank_threads(4 * cpus) == 1


@pytest.mark.slow
def test_mx_generate_tp_2_streams_the_single_process_text(checkpoint):
    """``mx-generate --tp 2`` (torchrun on itself, 2 ranks x 1 thread) prints the
    text the one-process run prints, once (rank 0)."""
    import subprocess
    import sys
    from pathlib import Path

    from test_generate_cli import word_tokenizer

    word_tokenizer().save_pretrained(checkpoint)
    src = str(Path(__file__).resolve().parents[2] / "src")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    args = [sys.executable, "-m", "mlir_mx.torch.generate", checkpoint, "--prompt", "w7 w8 w9",
            "--no-chat-template", "--max-new-tokens", "8"]  # fmt: skip
    one = subprocess.run([*args, "--threads", "1"], capture_output=True, text=True, env=env, timeout=300)
    two = subprocess.run([*args, "--tp", "2"], capture_output=True, text=True, env=env, timeout=300)
    assert one.returncode == 0 and two.returncode == 0, two.stderr
    assert one.stdout.strip() and two.stdout == one.stdout
    assert "1 threads in each of 2 ranks" in two.stderr
    assert two.stderr.count("decode: ") == 1  # rank 0 alone prints the figures

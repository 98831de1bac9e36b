"""``bench/probes/scaling_out.py`` (docs/scaling-out.md): a few of its table's
entries against the arithmetic done by hand."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import pytest

PATH = Path(__file__).resolve().parents[2] / "bench" / "probes" / "scaling_out.py"


@pytest.fixture(scope="module")
def so():
    spec = importlib.util.spec_from_file_location("scaling_out", PATH)
    module = importlib.util.module_from_spec(spec)
    sys.modules["scaling_out"] = module  # its dataclasses look their module up
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules["scaling_out"]
    return module


def test_bytes_sent_per_token_per_layer(so):
    oss = so.GPT_OSS_120B
    # TP, 2 ranks: two ring all-reduces of 2880 f32 each, each rank sending
    # 2 (N - 1) / N of it: 2 x 11,520 bytes.
    assert so.sent_per_token_layer(oss, "TP", 2) == 2 * 2880 * 4 == 23_040
    # EP exact, 8 ranks: one all-reduce of (k=4, 2880) f32: 2 * 7/8 * 46,080.
    assert so.sent_per_token_layer(oss, "EP", 8) == pytest.approx(80_640)
    # EP sum: (2880,) only.
    assert so.sent_per_token_layer(oss, "EP", 8, combine="sum") == pytest.approx(20_160)
    # bf16 activations halve it; a prompt's tokens send as much per token.
    assert so.sent_per_token_layer(oss, "TP", 2, act=2) == 11_520
    assert so.sent_per_token_layer(oss, "TP", 4, tokens=128) == pytest.approx(2 * 1.5 * 11_520)


def test_decode_times(so):
    oss = so.GPT_OSS_120B
    # One machine: attention 2880 x 9216 bf16, four experts 3 x 2880^2 MXFP4
    # (4.25 bits), per layer, 36 layers, plus lm_head 201088 x 2880 bf16, at 100 GB/s.
    weights = 36 * (2880 * 9216 * 2 + 4 * 3 * 2880 * 2880 * 4.25 / 8) + 201088 * 2880 * 2
    assert weights == 4_972_861_440
    assert so.compute_ms(oss, "TP", 1, 100) == pytest.approx(49.7286144)
    assert so.compute_ms(oss, "TP", 4, 100) == pytest.approx(49.7286144 / 4)
    # TP comm, 2 ranks, 25 Gb/s, 25 us a message: per layer 2 all-reduces of
    # 2 messages and 11,520 bytes; then the logits' all-gather (1 message, half
    # of 201088 f32).
    link = 25e9 / 8
    per_ar = 11_520 / link + 2 * 25e-6
    gather = 201088 * 4 / 2 / link + 25e-6
    assert so.comm_ms(oss, "TP", 2, 25, 25) == pytest.approx((72 * per_ar + gather) * 1e3)
    assert so.comm_ms(oss, "TP", 2, 25, 25) == pytest.approx(4.0191, abs=1e-4)


def test_expected_max_load(so):
    # 4 of 128 experts over 2 ranks of 64: P(4-0) = C(64,4)/C(128,4) per side,
    # P(3-1) = C(64,3) 64 / C(128,4) per side, P(2-2) = C(64,2)^2 / C(128,4).
    total = math.comb(128, 4)
    p40, p31 = math.comb(64, 4) / total, math.comb(64, 3) * 64 / total
    p22 = math.comb(64, 2) ** 2 / total
    assert 2 * p40 + 2 * p31 + p22 == pytest.approx(1)
    want = 4 * 2 * p40 + 3 * 2 * p31 + 2 * p22
    assert so.expected_max_load(128, 4, 2) == pytest.approx(want) == pytest.approx(2.7381417)
    assert so.expected_max_load(128, 4, 1) == 4
    assert so.expected_max_load(128, 4, 128) == pytest.approx(1)


def test_the_tables_print(so, capsys):
    assert so.main(["--algorithm", "ring"]) == 0
    out = capsys.readouterr().out
    assert "| TP | 23,040 | 34,560 | 40,320 | 43,200 |" in out
    assert "Fastest decode at 25 Gb/s (gpt-oss-120b): TP on 4 machines" in out


def test_the_exchange_sends_n_minus_1_rows_in_one_round(so):
    """``--algorithm exchange`` (one all_to_all, what the TP decode runs):
    an all-reduce of S over N sends (N - 1) S in 1 round where the ring sends
    2 (N - 1) / N S in 2 (N - 1); an all-gather (N - 1) / N S in 1 round."""
    assert so.allreduce(1000.0, 4) == (1500.0, 6)  # the ring
    previous, so.ALGORITHM[0] = so.ALGORITHM[0], "exchange"
    try:
        assert so.allreduce(1000.0, 4) == (3000.0, 1)
        assert so.allgather(1000.0, 4) == (750.0, 1)
        assert so.main(["--algorithm", "exchange"]) == 0
    finally:
        so.ALGORITHM[0] = previous

"""MXLinear's saved form carries its meaning (format, block size, shape, checked
on load, issue 29), and a converted module pickles (rebuilt from that form)."""

from __future__ import annotations

import copy
import io
import pickle

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch not installed (pip install 'mlir-mx[test]')")

from mlir_mx.torch import MXLinear  # noqa: E402


def _mx(n_in=64, n_out=32, element="f8E4M3FN", block_size=32, seed=0, **kw) -> MXLinear:
    torch.manual_seed(seed)
    return MXLinear.from_linear(torch.nn.Linear(n_in, n_out), element, block_size, threads=1, **kw)


def _same_output(a: MXLinear, b: MXLinear) -> bool:
    x = torch.randn(3, a.in_features, generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        return torch.equal(a(x), b(x))


def test_state_dict_records_format_block_size_and_shape():
    sd = _mx(element="f6E3M2FN", block_size=16).state_dict()
    assert bytes(sd["weight_format"].tolist()) == b"f6E3M2FN" and sd["weight_format"].dtype == torch.uint8
    assert int(sd["weight_block_size"]) == 16
    assert sd["weight_shape"].tolist() == [32, 64]
    assert all(isinstance(v, torch.Tensor) for v in sd.values())  # safetensors can hold it


@pytest.mark.parametrize(
    "saved, into, key",
    [
        # the reproducer: same byte shapes, another format (the layer then returned NaN)
        (dict(element="f8E4M3FN"), dict(element="f8E5M2"), "weight_format"),
        # f8 in 64 block 32 and f4 in 128 block 64: the same code and scale bytes
        (dict(element="f8E4M3FN"), dict(n_in=128, element="f4E2M1FN", block_size=64), "weight_format"),
        (dict(element="f8E4M3FN", block_size=16), dict(element="f8E4M3FN", block_size=32), "weight_block_size"),
        (dict(n_in=64, n_out=32), dict(n_in=64, n_out=48), "weight_shape"),
    ],
)
# Reproducer: ../shared/repro/round3/r3_state_dict_format_mismatch.py
def test_a_state_dict_of_another_meaning_is_refused_naming_the_key(saved, into, key):
    src, dst = _mx(**saved), _mx(seed=1, **into)
    before = dst.weight()
    with pytest.raises(RuntimeError, match=f"{key}: saved .* but this layer holds"):
        dst.load_state_dict(src.state_dict())
    assert dst.weight().bitwise_equal(before)  # nothing was loaded
    model = torch.nn.Sequential(torch.nn.ReLU(), dst)  # and under a prefix: the full key
    with pytest.raises(RuntimeError, match=f"1.{key}: saved"):
        model.load_state_dict({"1." + k: v for k, v in src.state_dict().items()})


def test_a_state_dict_of_the_same_meaning_loads_bit_for_bit():
    src, dst = _mx(seed=0), _mx(seed=1)
    assert not _same_output(src, dst)
    assert dst.load_state_dict(src.state_dict()) is not None  # strict: all keys matched
    assert dst.weight().bitwise_equal(src.weight()) and _same_output(src, dst)


def test_a_state_dict_saved_without_its_meaning_still_loads():
    """Saved before the format entries existed: codes, scales and bias only."""
    src, dst = _mx(seed=0), _mx(seed=1)
    old = {k: v for k, v in src.state_dict().items() if k in ("weight_codes", "weight_scales", "bias")}
    dst.load_state_dict(old)
    assert _same_output(src, dst)


@pytest.mark.parametrize(
    "key, value, message",
    [
        ("weight_format", torch.tensor([0xFF, 0xFE], dtype=torch.uint8), "weight_format: cannot read it"),
        ("weight_format", torch.zeros(2, 2, dtype=torch.uint8), "weight_format: cannot read it"),
        ("weight_block_size", torch.tensor([32, 32]), "weight_block_size: cannot read it"),
        ("weight_block_size", torch.tensor(32.0), "weight_block_size: cannot read it"),
        ("weight_shape", torch.tensor(7), "weight_shape: cannot read it"),
    ],
)
def test_an_unreadable_meaning_entry_is_an_error_naming_it(key, value, message):
    layer = _mx()
    sd = layer.state_dict()
    sd[key] = value
    with pytest.raises(RuntimeError, match=message):
        layer.load_state_dict(sd)


# Reproducer: ../shared/repro/round3/r3_pickle_converted_model.py
@pytest.mark.parametrize("activations", [None, "i8"])
def test_a_converted_model_pickles_and_torch_saves(activations):
    layer = _mx(n_in=64, n_out=64, element="f4E2M1FN", activations=activations)
    model = torch.nn.Sequential(layer, torch.nn.ReLU())
    for back in (
        pickle.loads(pickle.dumps(model)),
        _torch_round_trip(model),
    ):
        copied = back[0]
        assert type(copied) is MXLinear and copied.activations == activations
        assert copied.weight().bitwise_equal(layer.weight())
        assert not np.shares_memory(copied.weight().codes, layer.weight().codes)
        x = torch.randn(4, 64)
        with torch.no_grad():
            assert torch.equal(back(x), model(x))
        assert copied.nbytes == layer.nbytes and copied.threads == layer.threads
    twice = pickle.loads(pickle.dumps(pickle.loads(pickle.dumps(layer))))
    assert twice.weight().bitwise_equal(layer.weight()) and _same_output(twice, layer)
    assert _same_output(copy.copy(layer), layer)  # copy.copy goes through the same state


def _torch_round_trip(model):
    buf = io.BytesIO()
    torch.save(model, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=False)


# -- the saved-form campaign (mlir_mx_testing.state_dict_fuzz, docs/testing.md) ----------


def test_quick_state_dict_campaign():
    from mlir_mx_testing.campaign import run_campaign
    from mlir_mx_testing.state_dict_fuzz import KINDS

    report = run_campaign("state-dict", seed=1, count=14, timeout=300)
    assert report.clean, report.summary()
    assert report.cases == 14 and report.kinds["ok"] > 5 and report.kinds["rejected"] > 5
    assert set(KINDS) <= set(report.configs) and report.configs["other-same-bytes"] > 0


def test_the_state_dict_campaign_finds_a_load_that_ignores_the_saved_meaning(monkeypatch):
    """Without the check of the saved format, block size and shape (the defect
    of issue 29), the campaign reports wrong loads."""
    from mlir_mx_testing.campaign import run_inline

    monkeypatch.setattr(MXLinear, "_meaning_problems", lambda self, sd, prefix: [])
    report = run_inline("state-dict", 1, range(10))
    assert {o.kind for o in report.findings} == {"wrong"}
    assert any(o.config == "other-same-bytes" for o in report.findings)


@pytest.mark.slow
def test_long_state_dict_campaign():
    """The long mode recorded in docs/testing.md (same seed, same count)."""
    from mlir_mx_testing.campaign import run_campaign

    report = run_campaign("state-dict", seed=2026, count=1_000, timeout=300)
    assert report.clean, report.summary()
    assert report.cases == 1_000

"""The campaigns of the files and the library API: malformed GGUF files,
corrupted compile-cache entries, and the Linear / matmul API suite against the
oracle (docs/testing.md).

Quick sets run by default; the long modes (>= 1,000 GGUF files, >= 1,000
GGUF writes, >= 200 cache entries, >= 2,000 Linear calls) are marked slow:
``./scripts/run-tests -m slow -k long`` or ``python -m mlir_mx_testing.fuzz
--cases 0 --api-calls 0 --gguf-files 5000 --gguf-writes 1000 --cache-entries 200
--linear-calls 2000``.

The Linear suite runs its whole generator in both sets (every format pair,
storage and value range). Its named restrictions, ``pairs``,
``unpacked_subbyte_activations=False`` and ``value_range="normal"``, kept the
generator away from four fixed defects (FP4/FP6 activations refused against
unpacked weights, NaN from scale products that overflow, Inf from pre-scaled
large activations, flushed subnormal activations) while they were open;
``test_restricted_linear_calls`` runs the restricted generator (clean, most
calls valid) so the options keep working.
"""

from __future__ import annotations

import collections

import pytest
from format_cases import SUB_BYTE

from mlir_mx.numerics import is_packed_storage
from mlir_mx_testing import cache_fuzz, gguf_fuzz, linear_fuzz
from mlir_mx_testing.campaign import FINDINGS, run_campaign, run_inline

#: The Linear suite's named restrictions (see the module docstring).
LINEAR_RESTRICTED = {"unpacked_subbyte_activations": False, "value_range": "normal"}


def _assert_clean(report):
    assert report.clean, report.summary()
    assert all(report.kinds.get(k, 0) == 0 for k in FINDINGS)


def test_quick_gguf_files():
    report = run_campaign("gguf", seed=1, count=300, timeout=120)
    _assert_clean(report)
    assert report.cases == 300
    assert report.kinds["rejected"] > 150 and report.kinds["ok"] > 5
    assert set(report.configs) == set(gguf_fuzz.MUTATIONS)


def test_quick_gguf_writes():
    """The writer mode: random, often invalid, write_gguf arguments over a good
    file; every part of the arguments reached, both outcomes reached."""
    report = run_campaign("gguf-write", seed=1, count=200, timeout=120)
    _assert_clean(report)
    assert report.cases == 200
    assert report.kinds["rejected"] > 40 and report.kinds["ok"] > 40
    assert set(report.configs) == set(gguf_fuzz.WRITE_PARTS)


def test_the_writer_mode_checks_what_it_claims(tmp_path, monkeypatch):
    """Against a writer that drops its checks of sizes and of empty strings
    (the two defects it found), the writer mode reports them."""
    from mlir_mx.interop import gguf as ours

    monkeypatch.setattr(ours, "check_tensor", lambda *a: 0)
    report = run_inline("gguf-write", 1, range(120))
    assert {o.kind for o in report.findings} == {"wrong"}
    assert any(
        "refused by the reader" in o.detail and "too large" in o.detail for o in report.findings
    )
    assert gguf_fuzz.write_case(1, 7) == gguf_fuzz.write_case(1, 7)


#: Each module of the cache fuzzer as each kind of entry this host writes.
_CACHE_CONFIGS = {f"{m} ({k})" for m in ("linear", "add") for k in cache_fuzz._kinds()}


def test_quick_cache_corruptions():
    report = run_campaign("cache", seed=1, count=16, timeout=300)
    _assert_clean(report)
    assert report.kinds["ok"] == 16 and set(report.configs) == _CACHE_CONFIGS


def test_quick_linear_calls():
    # 8 groups of four calls (seed 1: 30 ok, 2 malformed and refused); the
    # generator's coverage of every pair, storage and block size is
    # test_linear_generator_covers_the_space, the long mode -m slow
    report = run_campaign("linear", seed=1, count=32, timeout=600)
    _assert_clean(report)
    assert report.cases == 32
    assert report.kinds["ok"] > 20 and report.kinds["rejected"] > 0


def test_restricted_linear_calls():
    report = run_campaign("linear", seed=2, count=24, timeout=600, options=LINEAR_RESTRICTED)
    _assert_clean(report)
    assert report.kinds["ok"] > 10


def test_linear_generator_covers_the_space():
    """Over 600 groups: every weight x activation pair (78: MX, f32, and f32
    quantized per call by ``activations=``), both storages of
    FP4/FP6 weights, every block size, every thread count, both layouts and
    entry points, empty outputs, and both value ranges."""
    configs = [linear_fuzz._config(7, g, None, True, "full") for g in range(600)]
    pairs = {f"{c['w_elem']}/{c['a_kind']}" for c in configs}
    assert pairs == set(linear_fuzz.all_pairs()) and len(pairs) == 78
    assert all(c["entry"] == "Linear" for c in configs if ":" in c["a_kind"])
    storage = collections.Counter(
        (c["w_elem"], is_packed_storage((1, c["n"]), c["w_elem"]))
        for c in configs if c["w_elem"] in SUB_BYTE and c["n"]
    )  # fmt: skip
    assert all(storage[(e, p)] for e in SUB_BYTE for p in (True, False))
    assert {c["block"] for c in configs} == set(linear_fuzz.BLOCKS)
    assert {c["threads"] for c in configs} == set(linear_fuzz.THREADS)
    assert {c["layout"] for c in configs} == {"out_in", "in_out"}
    assert {c["entry"] for c in configs} == {"Linear", "matmul"}
    assert {c["values"] for c in configs} == {"normal", "edge"}
    assert any(c["n"] == 0 for c in configs)
    # the restriction removes exactly the FP4/FP6-activation cases stored one code per byte
    restricted = [linear_fuzz._config(7, g, None, False, "normal") for g in range(300)]
    for c in restricted:
        assert c["values"] == "normal"
        if c["a_kind"] in SUB_BYTE:
            assert c["w_elem"] in SUB_BYTE
            assert c["n"] == 0 or is_packed_storage((1, c["n"]), c["w_elem"])


def test_cases_are_deterministic_and_options_reach_the_case():
    assert gguf_fuzz.case(3, 5) == gguf_fuzz.case(3, 5)
    assert linear_fuzz._config(3, 1, None, True, "full") == linear_fuzz._config(
        3, 1, None, True, "full"
    )
    only = {"pairs": ["f8E4M3FN/f32"], "value_range": "normal"}
    report = run_inline("linear", 3, range(4), options=only)
    assert set(report.configs) == {"f8E4M3FN/f32"} and report.clean, report.summary()
    with pytest.raises(ValueError, match="value_range"):
        linear_fuzz.case(3, 0, value_range="huge")


def test_the_cache_fuzzer_targets_every_region():
    import random

    hows = {cache_fuzz._corrupt(bytes(range(256)) * 8, random.Random(i))[1].split(" at ")[0]
            for i in range(300)}  # fmt: skip
    for region in (*cache_fuzz.REGIONS, "anywhere"):
        assert f"bytes changed in {region}" in hows
    assert any(h.startswith("truncated") for h in hows) and "NUL" in hows


@pytest.mark.slow
def test_long_gguf_files():
    """The long mode recorded in docs/testing.md (same seed, same count)."""
    report = run_campaign("gguf", seed=2026, count=5_000, timeout=300)
    _assert_clean(report)
    assert report.cases == 5_000


@pytest.mark.slow
def test_long_gguf_writes():
    """The writer mode's long run recorded in docs/testing.md."""
    report = run_campaign("gguf-write", seed=2026, count=1_000, timeout=300)
    _assert_clean(report)
    assert report.cases == 1_000


@pytest.mark.slow
def test_long_cache_corruptions():
    report = run_campaign("cache", seed=2026, count=200, timeout=300)
    _assert_clean(report)
    assert report.cases == 200


@pytest.mark.slow
def test_long_linear_calls():
    """The whole generator: every pair, storage and value range."""
    report = run_campaign("linear", seed=2026, count=2_000, timeout=600)
    _assert_clean(report)
    assert report.cases == 2_000


def test_quick_failed_cache_stores():
    """Reliability round 4, ``08``: a fresh process whose every store fails
    (each way once) runs its kernels with the right bits and exits 0."""
    report = run_campaign("cache-store", seed=1, count=len(cache_fuzz.STORE_FAILURES), timeout=600)
    _assert_clean(report)
    assert report.kinds["ok"] == 4 and set(report.configs) == set(cache_fuzz.STORE_FAILURES)


@pytest.mark.slow
def test_long_failed_cache_stores():
    report = run_campaign("cache-store", seed=2, count=24, timeout=600)
    _assert_clean(report)
    assert report.kinds["ok"] == 24

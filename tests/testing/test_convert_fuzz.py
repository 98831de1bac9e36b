"""The conversion suite (``mlir_mx_testing.convert_fuzz``): ``mlir_mx.quantize``
/ ``dequantize`` on random array layouts against the oracle (docs/testing.md).

The quick set runs by default; the long mode (2,000 calls) is marked slow:
``python -m mlir_mx_testing.fuzz --cases 0 --api-calls 0 --gguf-files 0
--gguf-writes 0 --cache-entries 0 --linear-calls 0 --convert-calls 2000``.
"""

from __future__ import annotations

import collections

import pytest

from mlir_mx_testing import convert_fuzz
from mlir_mx_testing.campaign import FINDINGS, run_campaign


def _assert_clean(report):
    assert report.clean, report.summary()
    assert all(report.kinds.get(k, 0) == 0 for k in FINDINGS)


def test_generator_covers_every_layout_and_dtype():
    """Every layout x dtype, every ``out=`` layout, ranks 1-4, 1-3 threads,
    and a case is a function of (seed, index) alone."""
    configs = [convert_fuzz._config(7, i) for i in range(800)]
    pairs = collections.Counter((c["layout"], c["dtype"]) for c in configs)
    assert set(pairs) == {(lay, d) for lay in convert_fuzz.LAYOUTS for d in convert_fuzz.DTYPES}
    assert {c["out"] for c in configs} == set(convert_fuzz.OUTS)
    assert {len(c["shape"]) for c in configs} == {1, 2, 3, 4}
    assert {c["threads"] for c in configs} == {1, 2, 3}
    assert convert_fuzz._config(3, 5) == convert_fuzz._config(3, 5)


def test_quick_convert_calls():
    report = run_campaign("convert", seed=1, count=16, timeout=600)
    _assert_clean(report)
    assert report.cases == 16 and report.kinds["ok"] > 8 and report.kinds["rejected"] > 0


@pytest.mark.slow
def test_long_convert_calls():
    report = run_campaign("convert", seed=2026, count=2_000, timeout=600)
    _assert_clean(report)
    assert report.cases == 2_000

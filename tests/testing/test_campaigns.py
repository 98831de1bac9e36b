"""The fuzzing harness: the mutation fuzzer of mx-opt and the Runner API misuse
sweep, seeded, in-process in worker subprocesses (docs/testing.md).

The quick set runs by default; the long mode (>= 10,000 IR mutants over every
configuration and >= 2,000 Runner calls) is marked slow:
``./scripts/run-tests -m slow -k long`` or
``python -m mlir_mx_testing.fuzz --cases 10000 --api-calls 2000``.
"""

from __future__ import annotations

import pytest

from mlir_mx_testing import fuzz
from mlir_mx_testing.campaign import FINDINGS, run_campaign


def _assert_clean(report):
    assert report.clean, report.summary()
    assert all(report.kinds.get(k, 0) == 0 for k in FINDINGS)


def test_quick_fuzz_campaign():
    # 20 mutants per configuration (seed 1: 37 ok, 83 rejected); the long
    # mode below runs 10,000 (-m slow)
    report = run_campaign("fuzz", seed=1, count=120, timeout=300)
    _assert_clean(report)
    assert report.cases == 120
    # every configuration ran, and the mutants exercise both outcomes
    assert set(report.configs) == set(fuzz.CONFIGS)
    assert report.kinds["ok"] > 20 and report.kinds["rejected"] > 20


def test_quick_misuse_sweep():
    """Every bad call is refused with an MXError (a bare TypeError/ValueError/
    AttributeError from the library is a not-mx-error finding) before native code."""
    report = run_campaign("misuse", seed=1, count=300, timeout=300)
    _assert_clean(report)
    assert report.kinds["ok"] > 30 and report.kinds["rejected"] > 100
    assert "constructor" in report.configs


def test_every_refused_misuse_is_caught_by_except_mxerror():
    """The sweep's calls made here, as a user would: every call with broken
    arguments that is refused is caught by ``except mlir_mx.MXError`` (any
    other exception fails this test), and untouched arguments compute."""
    import mlir_mx
    from mlir_mx_testing import misuse

    refused = computed = 0
    for i in range(200):
        c = misuse.build(7, i)
        try:
            c.call()
        except mlir_mx.MXError:
            assert not c.valid, (i, c.what)
            refused += 1
        else:
            computed += 1
    assert refused > 80 and computed > 20, (refused, computed)


def test_mutants_are_deterministic():
    assert fuzz.mutant(5, 17) == fuzz.mutant(5, 17)
    assert fuzz.mutant(5, 17) != fuzz.mutant(6, 17)
    assert [fuzz.mutant(3, i)[0] for i in range(6)] == list(fuzz.CONFIGS)


def test_campaign_turns_signals_and_hangs_into_findings():
    # the self-test suite aborts on cases 3 and 8 and hangs on case 7
    report = run_campaign("mlir_mx_testing.selftest", seed=0, count=10, timeout=5)
    assert report.cases == 10 and report.kinds["ok"] == 7
    found = {(o.index, o.kind) for o in report.findings}
    assert found == {(3, "signal"), (7, "hang"), (8, "signal")}
    assert report.restarts == 3


@pytest.mark.slow
def test_long_fuzz_campaign():
    """The long mode recorded in docs/testing.md (same seed, same counts)."""
    report = run_campaign("fuzz", seed=2026, count=10_000, timeout=300)
    _assert_clean(report)
    assert report.cases == 10_000


@pytest.mark.slow
def test_long_misuse_sweep():
    report = run_campaign("misuse", seed=2026, count=2_000, timeout=300)
    _assert_clean(report)
    assert report.cases == 2_000

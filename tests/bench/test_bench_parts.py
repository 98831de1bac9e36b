"""mx-bench's parts: the emulation dequantizes like the oracle, the oracle's
tolerance accepts any f32 summation order and rejects real errors, and the
ggml baseline checks against its own operands."""

import numpy as np
import pytest

from mlir_mx import numerics as N
from mlir_mx import oracle
from mlir_mx.roofline.pinned import probe_cpus
from mlir_mx.roofline.variants import Shape
from mlir_mx_bench.baselines import emulate_dequantize
from mlir_mx_bench.cases import BenchFailure, Oracle, make_problem
from mlir_mx_bench.ggml_baseline import ggml_available, ggml_methods


@pytest.mark.parametrize("element", list(N.ELEMENT_FORMATS))
@pytest.mark.parametrize("axis", [0, 1])
def test_emulation_dequantizes_bit_exactly(element, axis):
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((64, 64)) * np.exp2(rng.integers(-20, 20, (64, 64)))).astype(
        np.float32
    )
    q = oracle.quantize(x, element, 32, axis=axis)
    got, want = emulate_dequantize(q), oracle.dequantize(q)
    assert got.dtype == np.float32
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


def test_oracle_accepts_f32_in_any_order_and_rejects_errors():
    p = make_problem(Shape(3, 16, 256), "f8E4M3FN")
    o = p.oracle
    # f32 sums in two different orders are both inside the bound
    assert o.check("fwd", "t", p.da @ p.db) <= 1
    rev = (p.da[:, ::-1].copy() @ p.db[::-1, :].copy()).astype(np.float32)
    assert o.check("rev", "t", rev) <= 1
    bad = (p.da @ p.db).astype(np.float32)
    bad[2, 5] += np.float32(1e-2)
    with pytest.raises(BenchFailure, match=r"WRONG RESULT: bad at t: 1 of 48 .* \[2, 5\]"):
        o.check("bad", "t", bad)
    nan = (p.da @ p.db).astype(np.float32)
    nan[0, 0] = np.nan
    with pytest.raises(BenchFailure, match="WRONG RESULT"):
        o.check("nan", "t", nan)
    with pytest.raises(BenchFailure, match="shape"):
        o.check("shape", "t", nan[:2])


def test_oracle_output_rounding_term():
    a = np.ones((1, 32), np.float32)
    b = np.full((32, 1), 1.0 + 2.0**-10, np.float32)
    o = Oracle.of(a, b)
    rounded = np.array([[32.0]], np.float32)  # 32 + 2^-5 rounded to bf16
    with pytest.raises(BenchFailure):
        o.check("f32 output", "t", rounded)
    assert o.check("bf16 output", "t", rounded, out_unit=2.0**-8) <= 1


@pytest.mark.skipif(ggml_available() is not None, reason=f"{ggml_available()}")
def test_ggml_methods_match_their_own_oracle():
    p = make_problem(Shape(3, 40, 96), "f8E4M3FN")
    methods = ggml_methods(p, 1)
    try:
        assert [m.name for m in methods] == ["ggml Q8_0", "ggml MXFP4"]
        for m in methods:
            assert m.oracle.check(m.name, "t", m.result()) <= 1
            # ggml's result is NOT the MX oracle's: the formats differ
            with pytest.raises(BenchFailure):
                p.oracle.check(m.name, "t", m.result())
    finally:
        for m in methods:
            m.close()


def test_a_disturbed_timing_is_repeated(monkeypatch):
    from pathlib import Path

    from mlir_mx_bench import loop as harness
    from mlir_mx_bench.machine import Roof
    from mlir_mx_bench.method import Method

    p = make_problem(Shape(2, 8, 32), "f8E4M3FN")
    m = Method("numpy", "baseline", 1, 100, lambda n: None, lambda: p.da @ p.db, p.oracle)
    shares = iter([0.6, 0.3, 0.05])
    monkeypatch.setattr(harness, "other_load", lambda a, b: {"others": next(shares), "steal": 0})
    opts = harness.Options(
        [p.shape],
        ["f8E4M3FN"],
        [1],
        "mx-bench",
        "t",
        Path("."),
        samples=3,
        target_s=1e-4,
        budget_s=0.01,
        settle_s=0,
        retry_wait_s=0,
    )
    roof = Roof(1, 1e10, 1e10, 1e11, 1e11, "test")
    row = harness._measure(p, m, 1, roof, opts, lambda s: None)
    assert row["attempts"] == 3 and row["cpu"]["others"] == 0.05
    shares = iter([0.9] * 10)
    opts.retries = 1
    row = harness._measure(p, m, 1, roof, opts, lambda s: None)
    assert row["attempts"] == 2 and row["cpu"]["others"] == 0.9  # kept, and says so


#: The host probe's pinned pair needs 2 CPUs it may pin to (``probe_cpus``).
TWO_PINNED = pytest.mark.skipif(
    probe_cpus(2) is None, reason="pinning 2 probe threads needs 2 CPUs and sched_setaffinity (Linux)"
)


class _Probe:
    """A stand-in for ``FmaProbe`` whose rates are given (FLOP/s)."""

    def __init__(self, rates):
        self.rates, self.best = iter(rates), 0.0

    def rate(self):
        got = next(self.rates)
        self.best = max(self.best, got)
        return got


def test_a_timing_beside_a_busy_host_neighbour_is_repeated(monkeypatch):
    """No other process on the cores (``others`` 0), but the FMA probe around
    the timing got under ``min_host`` of the peak: timed again, and the row
    records the probes; a probe at the peak passes at once."""
    from pathlib import Path

    from mlir_mx_bench import loop as harness
    from mlir_mx_bench.machine import Roof
    from mlir_mx_bench.method import Method

    p = make_problem(Shape(2, 8, 32), "f8E4M3FN")
    m = Method("numpy", "baseline", 1, 100, lambda n: None, lambda: p.da @ p.db, p.oracle)
    monkeypatch.setattr(harness, "other_load", lambda a, b: {"others": 0.0, "steal": 0})
    opts = harness.Options(
        [p.shape], ["f8E4M3FN"], [1], "mx-bench", "t", Path("."),
        samples=3, target_s=1e-4, budget_s=0.01, settle_s=0, retry_wait_s=0,
    )  # fmt: skip
    roof = Roof(1, 1e10, 1e10, 100e9, 100e9, "test")
    said = []
    # before/after pairs: (95, 40) disturbed, (50, 96) disturbed, (97, 99) clean
    probe = _Probe([95e9, 40e9, 50e9, 96e9, 97e9, 99e9])
    row = harness._measure(p, m, 1, roof, opts, said.append, probe=probe)
    assert row["attempts"] == 3
    assert row["host"] == {"before": 0.97, "after": 0.99, "share": 0.97}
    assert sum("40% of their FMA peak" in s for s in said) == 1
    assert sum("50% of their FMA peak" in s for s in said) == 1
    # a probe above the recorded peak raises the reference, never a share above 1
    row = harness._measure(p, m, 1, roof, opts, said.append, probe=_Probe([120e9, 108e9]))
    assert row["attempts"] == 1 and row["host"]["share"] == 0.9
    opts.retries = 0
    row = harness._measure(p, m, 1, roof, opts, said.append, probe=_Probe([30e9, 30e9]))
    assert row["attempts"] == 1 and row["host"]["share"] == 0.3  # kept, and the table says so
    from mlir_mx_bench.results import _host

    assert _host(row) == "30%" and _host({"host": None}) == "-"


def test_the_fma_probe_measures_the_cores():
    """The real probe: a positive rate, its best kept, and a share within (0, 1]."""
    from mlir_mx.roofline.measure import FmaProbe, host_share

    probe = FmaProbe(1, seconds=0.001)
    rates = [probe.rate() for _ in range(3)]
    assert min(rates) > 1e8 and probe.best == max(rates) and probe.cpus is None
    assert 0 < host_share(probe, max(rates)) <= 1.0
    assert host_share(probe, 1.0) <= 1.0  # a peak below the probe's own best is not used


@TWO_PINNED
def test_the_two_thread_probe_runs_one_pinned_thread_per_cpu():
    """At 2 threads the probe pins one thread to each of the first two CPUs
    (unpinned, a woken worker shared the waker's vCPU: docs/bench.md); each
    runs the 1-thread loop, so a 2-thread rate counts both threads' FMAs."""
    import threading

    from mlir_mx.roofline.measure import FmaProbe

    before = threading.active_count()
    probe = FmaProbe(2, seconds=0.001)
    try:
        assert probe.cpus == probe_cpus(2)
        assert threading.active_count() == before + 2
        assert min(probe.rate() for _ in range(3)) > 1e8
        assert all(out[0] != 0 for out in probe._outs)  # both threads ran their loop
    finally:
        probe.close()
    probe.close()  # a second close is a no-op
    assert threading.active_count() == before  # close joined them
    unpinned = FmaProbe(2, seconds=0.001, pinned=False)
    assert unpinned.cpus is None and unpinned.rate() > 1e8


@TWO_PINNED
def test_a_pinned_thread_whose_call_fails_raises_in_the_caller_and_never_hangs():
    from mlir_mx.roofline.pinned import PinnedTeam

    calls = []

    def fails():
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("boom")

    team = PinnedTeam([fails, lambda: None], probe_cpus(2))
    try:
        with pytest.raises(RuntimeError, match="boom"):
            team.run()
        assert team.run() >= 0  # the next run goes on
    finally:
        team.close()


def test_a_multi_thread_roof_below_its_share_is_reported(monkeypatch):
    """A 2-thread FMA peak under 1.5x the 1-thread one (the cores were busy)
    is never reported without a warning; a plausible one is."""
    from mlir_mx_bench import machine
    from mlir_mx_bench.machine import Roof, roof_warnings

    monkeypatch.setattr(machine, "default_threads", lambda: 2)
    one = Roof(1, 20e9, 20e9, 100e9, 100e9, "x")
    assert roof_warnings({1: one, 2: Roof(2, 25e9, 25e9, 195e9, 190e9, "x")}) == []
    (w,) = roof_warnings({1: one, 2: Roof(2, 25e9, 25e9, 108e9, 100e9, "x")})
    assert "only 1.08x the 1-thread one" in w and "not reliable" in w
    assert roof_warnings({1: one, 4: Roof(4, 1, 1, 100e9, 1, "x")}) == []  # 4 > the 2 cores

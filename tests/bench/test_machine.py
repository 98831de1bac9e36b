"""What a results file records about the machine: a library that is installed
but whose version cannot be read is logged, not dropped silently."""

import importlib.machinery
import importlib.util
import logging
import sys
import types

from mlir_mx_bench import machine


def test_a_library_without_a_version_is_logged(monkeypatch, caplog):
    fake = types.ModuleType("threadpoolctl")  # installed, but no __version__
    fake.__spec__ = importlib.machinery.ModuleSpec("threadpoolctl", None)
    monkeypatch.setitem(sys.modules, "threadpoolctl", fake)
    with caplog.at_level(logging.WARNING, logger=machine.__name__):
        versions = machine._versions()
    assert "threadpoolctl" not in versions
    assert versions["numpy"]
    (rec,) = [r for r in caplog.records if r.name == machine.__name__]
    assert rec.getMessage().startswith("machine info: no threadpoolctl version recorded")
    assert "AttributeError" in rec.getMessage()


def test_a_library_that_is_not_installed_is_skipped_quietly(monkeypatch, caplog):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name: None if name == "ggml" else real(name)
    )
    with caplog.at_level(logging.WARNING, logger=machine.__name__):
        versions = machine._versions()
    assert "ggml" not in versions
    assert not [r for r in caplog.records if r.name == machine.__name__]


def test_rows_name_the_isa_level_they_ran_on(monkeypatch):
    """Ours at the kernels' level (the mask applied), the baselines at the
    CPU's own (they dispatch on the CPU, not on MLIR_MX_CPU_FEATURES)."""
    from mlir_mx import host
    from mlir_mx_bench.results import row_isa

    monkeypatch.setenv("MLIR_MX_CPU_FEATURES", "baseline")
    info = machine.machine_info()
    assert info["isa_level"] == host.isa_level() != "AVX2"  # baseline: below AVX2
    assert info["isa_level_cpu"] == host.isa_level(masked=False)
    assert info["env"]["MLIR_MX_CPU_FEATURES"] == "baseline"
    assert row_isa("ours", info) == info["isa_level"]
    assert row_isa("baseline", info) == info["isa_level_cpu"]
    assert row_isa("ours", {}) == "-"  # a record from before the levels
    # ggml runs what its build was compiled for, recorded when installed
    built = {**info, "isa_level_ggml": "AVX2"}
    assert row_isa("baseline", built, "ggml MXFP4") == "AVX2"
    assert row_isa("baseline", built, "numpy f32") == info["isa_level_cpu"]
    assert row_isa("baseline", {**info, "isa_level_ggml": None}, "ggml Q8_0") == info["isa_level_cpu"]
    described = host.machine_description()
    assert f"ISA level {info['isa_level']}" in described
    if info["isa_level"] != info["isa_level_cpu"]:
        assert f"the CPU: {info['isa_level_cpu']}" in described

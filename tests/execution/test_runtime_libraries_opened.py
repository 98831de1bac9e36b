"""A runtime library is opened only for a symbol the process lacks (issue 56).

``symbol_address`` resolves a kernel's libc calls (``malloc``, ``free``,
``aligned_alloc``...) in the process first, as the JIT's ``link_runtime``
does; opening ``libmlir_c_runner_utils`` for them mapped it and the
``libMLIR`` it needs (27 MiB of RSS) into every process that loaded a cached
kernel.  Each check runs in a fresh subprocess: a library once opened stays.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="reads /proc/self/maps; the wheels' ELF libraries"
)

_PROBE = textwrap.dedent(
    """
    import ctypes, json, os, sys
    from mlir_mx.execution.libraries import runtime_libraries, symbol_address

    def mapped():
        with open("/proc/self/maps") as f:
            return sorted({os.path.basename(l.split()[-1]) for l in f if ".so" in l})

    libs = runtime_libraries()
    libc = ctypes.CDLL(None)
    out = {}
    for name in ("malloc", "free", "aligned_alloc", "abort"):
        out[name] = symbol_address(name, libs) == ctypes.cast(libc[name], ctypes.c_void_p).value
    out["after_libc"] = mapped()
    out["memrefCopy"] = symbol_address("memrefCopy", libs) is not None
    out["after_runtime"] = mapped()
    print(json.dumps(out))
    """
)


def test_libc_symbols_open_no_runtime_library_and_runtime_symbols_still_resolve():
    got = json.loads(
        subprocess.run(
            [sys.executable, "-c", _PROBE], capture_output=True, text=True, check=True, timeout=120
        ).stdout
    )
    for name in ("malloc", "free", "aligned_alloc", "abort"):
        assert got[name] is True, f"{name}: not the process's own"
    assert not any(n.startswith(("libmlir_c_runner_utils", "libMLIR.")) for n in got["after_libc"])
    # a name only a runtime library defines: that library is opened, as before
    assert got["memrefCopy"] is True
    assert any(n.startswith("libmlir_c_runner_utils") for n in got["after_runtime"])

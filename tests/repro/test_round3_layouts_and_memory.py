"""Round 3's reproducers of array layouts and kernel memory, each as a test
(``r3_quantize_odd_strides.py``, ``r3_kernel_cache_unbounded.py``).

Each test says what the reproducer showed and what it must show now.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from format_cases import ALL

import mlir_mx
import mlir_mx.convert as convert
from mlir_mx import oracle
from mlir_mx.kernels.convert import RUNTIME_THREADS


def test_quantize_a_structured_array_field_with_odd_strides():
    """r3_quantize_odd_strides.py: a float32 field of a structured array (byte
    stride 6) quantized to all-zero codes; now the oracle's bits."""
    x = np.random.default_rng(1).standard_normal((3, 32)).astype(np.float32)
    rec = np.zeros((3, 32), dtype=[("a", "<f4"), ("b", "<i2")])
    rec["a"] = x
    view = rec["a"]
    assert view.strides == (192, 6)
    for el in ALL:
        got = mlir_mx.quantize(view, el, 32)
        assert got.bitwise_equal(oracle.quantize(x, el, 32))
        np.testing.assert_array_equal(mlir_mx.dequantize(got), oracle.dequantize(got))


def test_one_kernel_for_every_thread_count():
    """r3_kernel_cache_unbounded.py: each thread count compiled one more
    kernel (about 4 MiB kept each); now the count is a run-time argument and
    one kernel serves them all."""
    x = np.random.default_rng(0).standard_normal((4, 26)).astype(np.float32)
    before = set(convert._KERNELS)
    for t in range(1, 41):
        got = mlir_mx.quantize(x, "f6E2M3FN", 13, threads=t)
        assert got.bitwise_equal(oracle.quantize(x, "f6E2M3FN", 13))
        np.testing.assert_array_equal(mlir_mx.dequantize(got, threads=t), oracle.dequantize(got))
    new = set(convert._KERNELS) - before
    assert len(new) == 2  # one quantize and one dequantize kernel
    assert all(spec.threads == RUNTIME_THREADS for spec, _features in new)


def test_kernel_cache_is_bounded(monkeypatch):
    """Kernels for other formats and block sizes are kept in an LRU of
    KERNEL_CACHE_SIZE; an evicted one is compiled again when needed."""
    monkeypatch.setattr(convert, "KERNEL_CACHE_SIZE", 3)
    monkeypatch.setattr(convert, "_KERNELS", type(convert._KERNELS)())
    x = np.ones((2, 3 * 5 * 7 * 11), np.float32)
    for b in (3, 5, 7):
        mlir_mx.quantize(x, "f8E5M2", b)
    first = next(iter(convert._KERNELS))
    mlir_mx.quantize(x, "f8E5M2", 3)  # used again: now the most recent
    mlir_mx.quantize(x, "f8E5M2", 11)  # evicts block 5, the least recently used
    assert len(convert._KERNELS) == 3
    assert [k[0].block for k in convert._KERNELS] == [7, 3, 11]
    assert next(reversed(convert._KERNELS)) != first
    assert mlir_mx.quantize(x, "f8E5M2", 5).bitwise_equal(oracle.quantize(x, "f8E5M2", 5))


_RSS = textwrap.dedent(
    """
    import numpy as np, mlir_mx

    def rss():
        for line in open("/proc/self/status"):
            if line.startswith("VmRSS"):
                return int(line.split()[1]) / 1024

    x = np.random.default_rng(0).standard_normal((4, 96)).astype(np.float32)
    mlir_mx.quantize(x, "f8E4M3FN", 32, threads=1)
    r0 = rss()
    for t in range(2, 42):
        mlir_mx.quantize(x, "f8E4M3FN", 32, threads=t)
    print(rss() - r0)
    """
)


def test_thread_counts_keep_no_memory():
    """The reproducer itself: RSS after 40 more thread counts (it grew by
    164 MiB, 4.1 MiB a kernel; now by nothing a kernel holds)."""
    env = dict(os.environ, MLIR_MX_CACHE_DIR="off")
    out = subprocess.run([sys.executable, "-c", _RSS], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert float(out.stdout.split()[-1]) < 20.0


_LIMITED = textwrap.dedent(
    """
    import resource, numpy as np, mlir_mx

    def vm():
        for line in open("/proc/self/status"):
            if line.startswith("VmSize"):
                return int(line.split()[1]) * 1024

    mlir_mx.quantize(np.ones((4, 64), np.float32), "f8E4M3FN", 32, threads=2)
    resource.setrlimit(resource.RLIMIT_AS, (vm() + (1 << 20), resource.RLIM_INFINITY))
    try:
        mlir_mx.quantize(np.ones((4, 14), np.float32), "f6E2M3FN", 7, threads=2)
        print("compiled under the limit")
    except MemoryError as e:
        print("MemoryError:", e)
    resource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    mlir_mx.quantize(np.ones((4, 14), np.float32), "f6E2M3FN", 7, threads=2)
    print("compiled once the limit was lifted")
    """
)


@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_AS and /proc are Linux's")
def test_compile_under_an_address_space_limit_raises_memory_error():
    """Under a cap of the process's size plus 1 MiB, compiling aborted the
    process in LLVM ("Unable to allocate section memory", exit 134); now a
    MemoryError before LLVM runs, and the process carries on."""
    env = dict(os.environ, MLIR_MX_CACHE_DIR="off")
    out = subprocess.run([sys.executable, "-c", _LIMITED], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "MemoryError: compiling needs about 64 MiB of address space" in out.stdout
    assert "compiled once the limit was lifted" in out.stdout


def test_low_available_memory_is_a_memory_error(monkeypatch):
    """Too little available memory for a compilation: MemoryError naming the
    figures, before LLVM runs; a module already compiled is still served."""
    from mlir_mx.execution import Runner, compiled

    src = "func.func @f(%x: f32) -> f32 {\n  return %x : f32\n}\n"
    Runner(src)  # compiled (or served from the cache) first
    real = compiled._status_bytes
    monkeypatch.setattr(
        compiled, "_status_bytes", lambda p, k: 1 << 20 if k == "MemAvailable" else real(p, k)
    )
    with pytest.raises(MemoryError, match="the machine has 1 MiB available"):
        Runner(src.replace("@f", "@g"))
    assert Runner(src).f(2.0) == 2.0

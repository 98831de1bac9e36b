"""The host machine as mlir-mx sees it: CPU features and thread counts.

The one place for both (the kernels, the Runner's cache key, ``Linear``,
the tools and ``mx-bench`` all ask here):

* **CPU features** (:func:`host_features`): read once from ``/proc/cpuinfo`` (the ``flags`` line, i.e. what CPUID
reports and the kernel enabled), the same source LLVM's host detection uses
for the JIT, so an instruction is only emitted when the JIT may use it.

``MLIR_MX_CPU_FEATURES`` adjusts the set for testing fallbacks:
``-avx512vbmi`` removes a feature, ``+flag`` adds one (only use ``+`` for
features the machine really has: the JIT would crash otherwise), ``none``
clears the set.

* **Threads**: :func:`default_threads` is the number of cores this process
  may run on (its CPU affinity, not ``os.cpu_count()``), and
  :func:`check_threads` validates a user's thread count once, the same way
  everywhere (a positive integer up to :data:`MAX_THREADS`; ``None`` means
  the default); :func:`default_thread_counts` are the benchmarks' (1 and all).
"""

from __future__ import annotations

import functools
import operator
import os

from mlir_mx.errors import MXArgTypeError, MXValueError

__all__ = [
    "INTERESTING",
    "MAX_THREADS",
    "check_threads",
    "cpu_model",
    "default_thread_counts",
    "default_threads",
    "feature_table",
    "features_summary",
    "has_features",
    "host_features",
    "lscpu",
    "machine_description",
]

#: Features that decide which kernels can run fast here (reports, mx-bench).
INTERESTING = (
    "avx2",
    "fma",
    "f16c",
    "avx512f",
    "avx512bw",
    "avx512vl",
    "avx512vbmi",
    "avx512_vnni",
    "avx512_bf16",
    "avx512_fp16",
    "avx_vnni",
    "gfni",
    "amx_tile",
    "amx_bf16",
    "amx_int8",
)


@functools.cache
def _cpuinfo_flags() -> frozenset[str]:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def host_features() -> frozenset[str]:
    """The CPU feature flags the kernels may use on this machine."""
    flags = set(_cpuinfo_flags())
    for item in os.environ.get("MLIR_MX_CPU_FEATURES", "").replace(",", " ").split():
        if item == "none":
            flags.clear()
        elif item.startswith("-"):
            flags.discard(item[1:])
        elif item.startswith("+"):
            flags.add(item[1:])
    return frozenset(flags)


def has_features(*names: str) -> bool:
    """True when every feature in ``names`` is available."""
    f = host_features()
    return all(n in f for n in names)


def feature_table() -> dict[str, bool]:
    """Each of :data:`INTERESTING`: present on this machine?"""
    f = host_features()
    return {name: name in f for name in INTERESTING}


def features_summary() -> str:
    """The interesting features present, e.g. ``avx512f avx512vbmi ...``."""
    f = host_features()
    return " ".join(n for n in INTERESTING if n in f) or "none"


#: The largest thread count accepted.  Threads become tasks of upstream's
#: async runtime (``async-parallel-for{num-workers}``); far beyond the cores
#: they only cost memory, and a count near 2**31 overflows the pass option.
MAX_THREADS = 1024


def default_threads() -> int:
    """The cores this process may run on (its CPU affinity), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - non-Linux
        return max(1, os.cpu_count() or 1)


def default_thread_counts() -> tuple[int, ...]:
    """The thread counts a benchmark runs by default: 1 and
    :func:`default_threads` (once, on a single core)."""
    return tuple(dict.fromkeys((1, default_threads())))


def check_threads(value, arg: str = "threads") -> int:
    """A user's thread count, validated: ``None`` is :func:`default_threads`,
    else a positive integer up to :data:`MAX_THREADS` (``MXValueError`` /
    ``MXArgTypeError`` naming ``arg`` otherwise)."""
    if value is None:
        return default_threads()
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise MXArgTypeError(f"{arg}: expected a positive integer, got {value!r}")
    value = operator.index(value)
    if not 1 <= value <= MAX_THREADS:
        raise MXValueError(f"{arg}: expected an integer in [1, {MAX_THREADS}], got {value}")
    return value


def lscpu() -> dict[str, str]:
    """``lscpu`` as a dict (empty when unavailable)."""
    import subprocess

    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return {}
    info = {}
    for line in out.splitlines():
        k, _, v = line.partition(":")
        info[k.strip()] = v.strip()
    return info


def cpu_model() -> str:
    """The CPU's model name: ``lscpu``'s, else ``/proc/cpuinfo``'s, else
    what :mod:`platform` knows, else ``unknown``."""
    name = lscpu().get("Model name")
    if name:
        return name
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine() or "unknown"


def machine_description() -> str:
    """One line saying what machine a measurement ran on, the same in every
    report (mx-bench, mx-roofline, the benchmark scripts): the CPU model, the
    cores this process may use, the caches and the interesting features."""
    info = lscpu()
    caches = ", ".join(
        f"{name} {info[key]}" for key, name in (("L2 cache", "L2"), ("L3 cache", "L3")) if key in info
    )
    return (
        f"{cpu_model()}, {default_threads()} core(s) available"
        + (f", {caches}" if caches else "")
        + f"; features: {features_summary()}"
    )

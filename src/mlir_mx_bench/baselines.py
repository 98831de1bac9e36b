"""The baselines a user would run without us: numpy f32, the ml_dtypes
emulation, torch f32/bf16.

Thread counts are set by the harness for the whole group
(:func:`mlir_mx_bench.machine.thread_limits`): numpy's BLAS through
threadpoolctl, torch through ``torch.set_num_threads``.
"""

from __future__ import annotations

import importlib.util

import numpy as np

from mlir_mx.numerics import MXArray

from .cases import Problem, is_nvfp4, mx_bytes
from .method import Method, Skipped

__all__ = ["emulate_dequantize", "numpy_methods", "torch_methods"]

BF16_UNIT = 2.0**-8


def emulate_dequantize(q: MXArray) -> np.ndarray:
    """Dequantize the way a user writes it with ml_dtypes: codes -> f32 values,
    times ``2^(scale - 127)`` (ml_dtypes' E8M0 -> f32 conversion), per block."""
    vals = q.codes.astype(np.float32)
    if q.codes.dtype == np.int8:  # MXINT8: code c is c * 2^-6
        vals *= np.float32(2.0**-6)
    scales = q.scales.astype(np.float32)
    shape = vals.shape
    bs = q.block_size
    if q.axis == 1:
        vals = vals.reshape(shape[0], shape[1] // bs, bs) * scales[:, :, None]
    else:
        vals = vals.reshape(shape[0] // bs, bs, shape[1]) * scales[:, None, :]
    return vals.reshape(shape)


def numpy_methods(p: Problem, threads: int) -> list[Method]:
    """numpy f32 ``a @ b`` and the two emulations (dequantization timed)."""
    s = p.shape
    mk, kn, mn = s.M * s.K, s.K * s.N, s.M * s.N
    da, db, qa, qb = p.da, p.db, p.qa, p.qb
    bs = p.block_size
    f32 = Method(
        "numpy f32",
        "baseline",
        threads,
        4 * (mk + kn + mn),
        run=lambda n: [da @ db for _ in range(n)],
        result=lambda: da @ db,
        oracle=p.oracle,
        note="BLAS sgemm on the dequantized operands",
    )

    def emu_ab():
        return emulate_dequantize(qa) @ emulate_dequantize(qb)

    def emu_a():
        return emulate_dequantize(qa) @ db

    # Bytes: the MX operands read, their f32 values written and read back by
    # the GEMM, the other operand and the output.
    ab = Method(
        "emulation mx x mx",
        "baseline",
        threads,
        mx_bytes(s.M, s.K, bs) + mx_bytes(s.K, s.N, bs) + 8 * (mk + kn) + 4 * mn,
        run=lambda n: [emu_ab() for _ in range(n)],
        result=emu_ab,
        oracle=p.oracle,
        operands="mx-ab",
        note="ml_dtypes dequantize of A and B, then numpy f32 matmul",
    )
    a = Method(
        "emulation mx x f32",
        "baseline",
        threads,
        mx_bytes(s.M, s.K, bs) + 8 * mk + 4 * kn + 4 * mn,
        run=lambda n: [emu_a() for _ in range(n)],
        result=emu_a,
        oracle=p.oracle,
        operands="mx-a",
        note="ml_dtypes dequantize of A, then numpy f32 matmul",
    )
    if is_nvfp4(p.element):  # ml_dtypes' E8M0 emulation does not apply
        why = "the emulation rows dequantize E8M0 scales (OCP MX); NVFP4 has no such row"
        return [f32, Skipped("emulation (nvfp4)", why)]
    return [f32, ab, a]


def torch_available() -> str | None:
    """None when torch can be imported, else why not."""
    if importlib.util.find_spec("torch") is None:
        return "torch is not installed (pip install 'mlir-mx[torch]', a CPU build)"
    return None


#: The largest problem (multiply-adds) torch's bf16 row runs on a CPU without
#: bf16 units (:func:`torch_bf16_emulated`): there torch's bf16 matmul ran
#: at about 0.3 GFLOP/s on an AMD EPYC (Zen 3), 986 ms for 8 x 4096 x 4096
#: and 32 s a call for 256 x 4096 x 4096 (each timing calls it at least 3
#: times), so larger shapes skip it with the reason.
BF16_EMULATED_MAX_MACS = 2**28


def torch_bf16_emulated() -> str | None:
    """Why torch's bf16 matmul is emulated here (no bf16 dot unit on the CPU
    itself: AVX512-BF16 or AMX on x86, BF16 on Arm), or None where it is not.
    The CPU's own ISA level, not ``MLIR_MX_CPU_FEATURES``: torch dispatches
    on the CPU, unless ``--emulate`` capped it."""
    from mlir_mx.host import isa_level

    from .emulate import baseline_level

    capped = baseline_level()
    if capped is not None and "BF16" not in capped:
        return f"torch is capped at {capped} (--emulate): no bf16 dot unit"
    level = isa_level(masked=False)
    if "BF16" in level or "AMX" in level:
        return None
    return f"the CPU ({level}) has no bf16 dot unit"


def torch_methods(p: Problem, threads: int) -> list[Method | Skipped] | Skipped:
    """torch f32 and bf16 ``a @ b`` (operands converted once, outside the
    timing); bf16 skipped for shapes over :data:`BF16_EMULATED_MAX_MACS`
    where the CPU has no bf16 unit."""
    why = torch_available()
    if why:
        return Skipped("torch f32/bf16", why)
    import torch

    s = p.shape
    mk, kn, mn = s.M * s.K, s.K * s.N, s.M * s.N
    ta, tb = torch.from_numpy(p.da), torch.from_numpy(p.db)
    # MX element values have at most 7 significant bits (MXINT8; E4M3 has 4)
    # and power-of-two scales, so they are exact in bf16 (8 bits) unless they
    # fall below f32's normal range; the oracle check would catch that.
    ha, hb = ta.to(torch.bfloat16), tb.to(torch.bfloat16)

    def method(label, a, b, itemsize, note, **extra):
        return Method(
            label,
            "baseline",
            threads,
            itemsize * (mk + kn + mn),
            run=lambda n: [a @ b for _ in range(n)],
            result=lambda: (a @ b).float().numpy(),
            oracle=p.oracle,
            note=f"torch {torch.__version__}{note}",
            **extra,
        )

    emulated = torch_bf16_emulated()
    if is_nvfp4(p.element):
        bf16: Method | Skipped = Skipped(
            "torch bf16 (nvfp4)",
            "NVFP4's values (code x f32(block scale / global scale)) are not exact in bf16, "
            "so torch bf16 would multiply other operands",
        )
    elif emulated and s.M * s.N * s.K > BF16_EMULATED_MAX_MACS:
        bf16 = Skipped(
            "torch bf16 (large shapes)",
            f"{emulated}: torch emulates bf16 matmuls at about 0.3 GFLOP/s (32 s a call "
            f"at 256x4096x4096 on an AMD EPYC), so shapes over "
            f"{BF16_EMULATED_MAX_MACS:,} multiply-adds skip it",
        )
    else:
        bf16 = method(
            "torch bf16",
            ha,
            hb,
            2,
            "; bf16 output (bound includes its rounding)",
            out_unit=BF16_UNIT,
        )
    return [method("torch f32", ta, tb, 4, ""), bf16]

"""``mx-bench --emulate avx2``: every row, ours and the baselines', as on an
AVX2-only x86 CPU, on a machine that has AVX-512.

Masking only our kernels (``MLIR_MX_CPU_FEATURES``) compares AVX2 code with
baselines that still run AVX-512 (numpy's sgemm, torch's bf16 matmul on
AVX512-BF16 units).  Each library here is capped by its own documented
switch, set before it loads: mx-bench runs itself again in a child process
with them (:class:`Reexec`), and every row's process inherits them.

============================  ===========================  =====================================
library                       variable                     effect
============================  ===========================  =====================================
ours                          ``MLIR_MX_CPU_FEATURES``     no AVX-512, AVX-VNNI or GFNI code
numpy's OpenBLAS              ``OPENBLAS_CORETYPE``        its Haswell (AVX2 + FMA) kernels
torch's ATen                  ``ATEN_CPU_CAPABILITY``      vectorized ops at AVX2
torch's MKL                   ``MKL_ENABLE_INSTRUCTIONS``  BLAS at AVX2
torch's oneDNN                ``ONEDNN_MAX_CPU_ISA``       no AVX-512 (bf16 matmuls emulated, as
                                                           on an AVX2 CPU)
ggml-python                   none: it runs the ISA it     its rows run only with an AVX2 build
                              was compiled for             (``docs/bench.md``), else skipped
============================  ===========================  =====================================

The run checks what each library reports once loaded
(:func:`mlir_mx_bench.machine.emulated_libraries`) and
records it.  What still differs from a real AVX2 CPU: the caches, the clock,
the memory bandwidth and the core's pipes (a Zen 4 core runs 256-bit code on
the same pipes as its AVX-512 code; a Zen 3 or a Skylake client core does
not), which each report says.
"""

from __future__ import annotations

import os
import subprocess
import sys

__all__ = ["EMULATIONS", "MARK", "Reexec", "active", "baseline_level", "summary"]

_NO_AVX512 = "-avx512f -avx512bw -avx512vl -avx512vbmi -avx512_vnni -avx512_bf16 -avx512_fp16"

#: level -> (the ISA level name, the variables that cap each library at it).
EMULATIONS = {
    "avx2": (
        "AVX2",
        {
            "MLIR_MX_CPU_FEATURES": f"{_NO_AVX512} -avx_vnni -gfni",
            "OPENBLAS_CORETYPE": "Haswell",
            "ATEN_CPU_CAPABILITY": "avx2",
            "MKL_ENABLE_INSTRUCTIONS": "AVX2",
            "ONEDNN_MAX_CPU_ISA": "AVX2",
        },
    ),
}

#: Set in the child process: the emulation it runs under.
MARK = "MLIR_MX_BENCH_EMULATE"

#: What still differs from a real CPU of the level (every report says it).
DIFFERS = (
    "caches, clock, memory bandwidth and the core's pipes are this CPU's own (a real AVX2 "
    "CPU such as a Zen 3 or an Intel client core has other ones)"
)


def active() -> str | None:
    """The emulation this process runs under (``avx2``), or None."""
    level = os.environ.get(MARK)
    return level if level in EMULATIONS else None


def baseline_level() -> str | None:
    """The ISA level the baselines are capped at here (``AVX2``), or None."""
    level = active()
    return EMULATIONS[level][0] if level else None


class Reexec:
    """mx-bench again, in a child process with the emulation's variables set
    before any library loads; its exit code is this run's."""

    def __init__(self, level: str, argv: list[str]):
        self.level, self.argv = level, list(argv)

    def run(self) -> int:
        env = {**os.environ, **EMULATIONS[self.level][1], MARK: self.level}
        print(
            f"mx-bench: --emulate {self.level}: running again with "
            + " ".join(f"{k}={v!r}" for k, v in EMULATIONS[self.level][1].items()),
            flush=True,
        )
        return subprocess.run([sys.executable, "-m", "mlir_mx_bench.cli", *self.argv], env=env).returncode


def summary(machine: dict) -> str | None:
    """One report line on the run's emulation (None without one)."""
    emu = machine.get("emulated")
    if not emu:
        return None
    libs = ", ".join(f"{k} {v}" for k, v in emu["libraries"].items())
    return (
        f"- **Emulated {emu['level']}** (`--emulate`): every library capped at run time "
        f"({', '.join(f'{k}={v}' for k, v in emu['variables'].items())}); the libraries "
        f"report: {libs}. What differs: {DIFFERS}"
    )

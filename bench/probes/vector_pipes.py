"""Issue rates and latencies of the zmm instructions the dot kernels' block
step runs (issue 51, session 63): ``vdpbf16ps``, ``vfmadd231ps``,
``vmulps``, ``vaddps``, ``vpdpbusd``, alone and mixed, and ``vdpbf16ps`` over
8-16 independent chains.  Each case is a loop of 24 (48 for the chains)
instructions on registers only, in assembly that this script writes and
``gcc`` builds; ns per instruction, best of 3 rounds.

* ``alone``: 24 independent accumulators of one instruction (its throughput);
* ``mixed``: ``vdpbf16ps`` alternating with another (do they share pipes?);
  ``mixed vnni+...``: ``vpdpbusd`` alternating with an FMA, ``vaddps``,
  ``vcvtdq2ps`` or ``vpaddd`` (the integer block step's neighbours, session 64);
* ``latency``: one chain (the instruction's latency);
* ``chains N``: ``vdpbf16ps`` round-robin over N accumulators (how many the
  latency needs for the full rate: the register tile's accumulators).

Needs gcc and a CPU with AVX512-BF16 and AVX512-VNNI; x86-64 Linux only.

    python bench/probes/vector_pipes.py
"""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

DP, FMA = "vdpbf16ps %zmm30, %zmm31, %zmm{i}", "vfmadd231ps %zmm30, %zmm31, %zmm{i}"
MUL, ADD = "vmulps %zmm30, %zmm{i}, %zmm{i}", "vaddps %zmm30, %zmm{i}, %zmm{i}"
VNNI = "vpdpbusd %zmm30, %zmm31, %zmm{i}"
CVT, PADD = "vcvtdq2ps %zmm{i}, %zmm{i}", "vpaddd %zmm30, %zmm{i}, %zmm{i}"


def _cases() -> dict[str, tuple[int, list[str]]]:
    one = {"dp": DP, "fma": FMA, "mul": MUL, "add": ADD, "vpdpbusd": VNNI, "cvt": CVT, "paddd": PADD}
    cases = {f"alone {k}": (24, [v.format(i=i) for i in range(24)]) for k, v in one.items()}
    for k in ("fma", "mul", "add"):
        cases[f"mixed dp+{k}"] = (24, [(DP if i % 2 else one[k]).format(i=i) for i in range(24)])
    for k in ("fma", "add", "cvt", "paddd"):  # the integer block step's neighbours
        cases[f"mixed vnni+{k}"] = (24, [(VNNI if i % 2 else one[k]).format(i=i) for i in range(24)])
    for k in ("dp", "fma", "add"):
        cases[f"latency {k}"] = (24, [one[k].format(i=0)] * 24)
    for n in (8, 10, 12, 14, 16):
        cases[f"chains {n}"] = (48, [DP.format(i=i % n) for i in range(48)])
    return cases


MAIN = r"""
#include <stdio.h>
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t);
                          return t.tv_sec + t.tv_nsec * 1e-9; }
"""


def main() -> None:
    cases = _cases()
    asm, c = [".text"], [MAIN]
    for i, (_, (_, body)) in enumerate(cases.items()):
        asm += [f".globl case{i}", f"case{i}:", "1:"] + [f"\t{x}" for x in body]
        asm += ["\tdec %rdi", "\tjnz 1b", "\tvzeroupper", "\tret"]
        c.append(f"void case{i}(long);\n")
    c.append("int main(void) { long n = 5000000; double t0, t, best;\n")
    for i, (name, (per, _)) in enumerate(cases.items()):
        c.append(
            f"best = 1e9; for (int r = 0; r < 3; r++) {{ t0 = now(); case{i}(n); t = now() - t0;"
            f" if (t < best) best = t; }}\n"
            f'printf("%-14s %.4f ns per instruction\\n", "{name}", best / n / {per} * 1e9);\n'
        )
    c.append("return 0; }\n")
    tmp = Path(tempfile.mkdtemp(prefix="vector_pipes_"))
    (tmp / "k.S").write_text("\n".join(asm) + "\n")
    (tmp / "m.c").write_text("".join(c))
    exe = tmp / "pipes"
    subprocess.run(["gcc", "-O2", "-z", "noexecstack", str(tmp / "m.c"), str(tmp / "k.S"),
                    "-o", str(exe)], check=True)  # fmt: skip
    print(subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout, end="")


if __name__ == "__main__":
    main()

"""Time the dot kernels' inner loop alone: NVFP4 against MXFP4 (issue 54).

``kernel_asm.py`` compiles the ``Linear`` kernel of each weight (``--records
i8 --a-quant i8``: ``activations="i8"``; NVFP4 is ``--block 16
--scale-type f8E4M3FN``) with ``llc -mcpu=CPU``; this probe takes from each
the loop with the most dot instructions (``vpdpbusd``: the register tile's
block loop, one block per pass), wraps it in a function that runs its
``--blocks`` passes ``--outer`` times over a zero-filled mapping (every
general register points into it, so every address the loop forms is
mapped and no value it computes is a denormal or a NaN), and times the two
in turn, ``--rounds`` times (process CPU time).  It prints the ns per 32
codes per register tile (MXFP4: one pass; NVFP4: two passes of 16) and the
median ratio: what the inner loop alone costs, with B, A and the scales in
L1/L2, without A's preparation, the chunk expansion, C's loads and stores
and the global-scale division of a whole call (``nvfp4_vs_mxfp4.py``).
Needs ``gcc``; x86-64 Linux only.

    python bench/probes/loop_isolated.py [--schedule int-prefill] [--m 256] [--rounds 15]
"""

from __future__ import annotations

import argparse
import collections
import re
import subprocess
import tempfile
from pathlib import Path

from kernel_asm import compile_asm  # the probes' folder is sys.path[0]

from mlir_mx.kernels import Problem

#: The mapping every general register points into (its base, its size).
BASE, SIZE = 0x1000000, 0x10000000
REGS = "rax rbx rcx rdx rsi rdi rbp r8 r9 r10 r11 r12 r13 r14 r15".split()

MAIN = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>
void run_mx(long); void run_nv(long);
static double cpu(void) { struct timespec t; clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
                          return t.tv_sec + t.tv_nsec * 1e-9; }
static int cmp(const void *a, const void *b) { double x = *(double *)a, y = *(double *)b;
                                               return (x > y) - (x < y); }
int main(int argc, char **argv) {
  void *p = mmap((void *)BASE, SIZE, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  if (p != (void *)BASE) { perror("mmap"); return 1; }
  memset(p, 0, SIZE);
  long outer = atol(argv[1]), rounds = atol(argv[2]), tm = atol(argv[3]), tn = atol(argv[4]);
  double mx = 1e9, nv = 1e9, r[256];
  for (long i = 0; i < rounds && i < 256; i++) {
    double t0 = cpu(); run_mx(outer); double t1 = cpu(); run_nv(outer); double t2 = cpu();
    double a = (t1 - t0) / outer / tm, b = 2 * (t2 - t1) / outer / tn;
    r[i] = b / a; if (a < mx) mx = a; if (b < nv) nv = b;
  }
  qsort(r, rounds, sizeof(double), cmp);
  printf("per 32 codes per tile: MXFP4 %.2f ns, NVFP4 %.2f ns (best of %ld); "
         "median NVFP4 / MXFP4 %.3f\n", mx * 1e9, nv * 1e9, rounds, r[rounds / 2]);
  return 0;
}
"""


def dot_loop(s: Path) -> tuple[list[str], str, int]:
    """The body (label to backward jump) of the innermost loop with the most
    ``vpdpbusd``, its counter register (the one compared with an immediate)
    and its trip count."""
    lines = [x.split("#")[0].rstrip() for x in s.read_text().splitlines()]
    labels = {m.group(1): i for i, x in enumerate(lines) if (m := re.match(r"^(\.LBB\S+):", x))}
    best = None
    for i, x in enumerate(lines):
        m = re.match(r"^\s+j\w+\s+(\.LBB\S+)", x)
        if m and labels.get(m.group(1), i) < i:
            body = [y for y in lines[labels[m.group(1)] + 1 : i + 1] if y.startswith("\t")]
            dots = sum(y.split()[0] == "vpdpbusd" for y in body)
            inner = not any(re.match(r"^\.LBB", y) for y in lines[labels[m.group(1)] + 1 : i])
            if inner and (best is None or dots > best[0]):
                best = (dots, body)
    if best is None:
        raise SystemExit(f"{s}: no loop with vpdpbusd")
    body = best[1]
    cmp = next(re.match(r"\s+cmpq\s+\$(\d+), %(\w+)", y) for y in body if "cmpq\t$" in y)
    counter, last = cmp.group(2), int(cmp.group(1))
    return body, counter, last + 1


def wrapper(name: str, body: list[str], counter: str, align: int) -> str:
    """``name(outer)``: every register at ``BASE`` (stack slots too), the
    counter at 0, the loop (starting ``align`` bytes past a 64-byte
    boundary), ``outer`` times."""
    out = [f".globl {name}", f"{name}:"]
    out += [f"\tpush %{r}" for r in ("rbx", "rbp", "r12", "r13", "r14", "r15")]
    out += ["\tsub $256, %rsp", "\tmov %rdi, 200(%rsp)"]
    out += [f"\tvpxord %zmm{i}, %zmm{i}, %zmm{i}" for i in range(32)]
    out += [f"{name}_outer:"] + [f"\tmovabs ${BASE:#x}, %{r}" for r in REGS]
    out += [f"\tmov %rax, {o}(%rsp)" for o in range(0, 192, 8)]
    out += [f"\txor %{counter}, %{counter}", "\t.p2align 6", f"\t.fill {align}, 1, 0x90"]
    out += [f"{name}_loop:"]
    out += [re.sub(r"\.LBB\S+", f"{name}_loop", y) for y in body]
    out += ["\tdecq 200(%rsp)", f"\tjnz {name}_outer", "\tadd $256, %rsp"]
    out += [f"\tpop %{r}" for r in ("r15", "r14", "r13", "r12", "rbp", "rbx")]
    return "\n".join(out + ["\tvzeroupper", "\tret"])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--schedule", default="int-prefill")
    p.add_argument("--m", type=int, default=256)
    p.add_argument("--size", type=int, default=4096, help="N = K")
    p.add_argument("--cpu", default="sapphirerapids")
    p.add_argument("--outer", type=int, default=2000)
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument(
        "--align",
        default="0,16,32,48",
        help="the loops' start past a 64-byte boundary, MXFP4/NVFP4 pairs tried in turn "
        "(the JIT put them at 0 and 32 in one build: 16-byte aligned, varying); "
        "measured, the ratio moved by several percent with it",
    )
    a = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="loop_isolated_"))
    loops = {}
    for name, block, scale in (("run_mx", 32, "f8E8M0FNU"), ("run_nv", 16, "f8E4M3FN")):
        prob = Problem(a.m, a.size, a.size, block, None, "f4E2M1FN", b_dot="i8",
                       b_scale_type=scale, a_quant="i8")  # fmt: skip
        s = compile_asm(prob, a.schedule, a.cpu, tmp / name)
        body, counter, trips = dot_loop(s)
        ops = collections.Counter(y.split()[0] for y in body)
        print(f"{name}: {len(body)} instructions per pass (a block of {block}), {trips} passes,",
              dict(ops.most_common(8)))  # fmt: skip
        loops[name] = (body, counter, trips)
    (tmp / "main.c").write_text(MAIN.replace("BASE", f"{BASE:#x}L").replace("SIZE", f"{SIZE:#x}L"))
    trips = [str(loops[n][2]) for n in ("run_mx", "run_nv")]
    for mx_at in [int(x) for x in a.align.split(",")]:
        for nv_at in [int(x) for x in a.align.split(",")]:
            ats = zip(loops.items(), (mx_at, nv_at), strict=True)
            text = [wrapper(n, b, c, at) for (n, (b, c, _)), at in ats]
            (tmp / "loops.S").write_text(".text\n" + "\n".join(text) + "\n")
            exe = tmp / "loops"
            subprocess.run(["gcc", "-O2", "-z", "noexecstack", str(tmp / "main.c"),
                            str(tmp / "loops.S"), "-o", str(exe)], check=True)  # fmt: skip
            out = subprocess.run([str(exe), str(a.outer), str(a.rounds), *trips], check=True,
                                 capture_output=True, text=True)  # fmt: skip
            print(f"loops at +{mx_at} / +{nv_at}: {out.stdout.strip()}", flush=True)


if __name__ == "__main__":
    main()

"""Read a generated f32 kernel's loops as a given CPU would run them.

Lowers one kernel (``kernel_module`` + ``kernel_library_pipeline``) with the
host features as ``MLIR_MX_CPU_FEATURES`` leaves them, translates it to LLVM
IR and compiles it with the LLVM tools wheel's ``llc -mcpu=CPU`` (the JIT
compiles for the host whatever the mask: this shows what an AVX2 CPU gets),
then prints each loop body over 100 instructions: its size, stack references
(spills and reloads) and most common instructions.  Divide by the codes per
iteration (``ku`` rows x ``16 nv`` columns for the stream kernels).

    MLIR_MX_CPU_FEATURES="-avx512f -avx512bw -avx512vl -avx512vbmi -avx512_vnni \
        -avx512_bf16 -avx512_fp16 -avx_vnni" \
    python bench/probes/kernel_asm.py f4E2M1FN 1 decode [N=K] [--cpu znver3] [--nv 2 --ku 8]

``--block 16 --scale-type f8E4M3FN`` gives NVFP4's B, ``--a-quant i8`` an f32
A quantized in the kernel (``Linear``'s ``activations="i8"``).
``--a ELEM`` gives A as MX codes of ELEM (the dot schedules' A), ``--records
KIND`` B as the dot records of KIND, ``--tiled`` / ``--row-major`` B's layout
(default: tiled at M = 1, as ``mlir_mx.Linear`` stores it, row-major else).
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import re
import subprocess
from pathlib import Path

import llvm
import mlir
from mlir import ir

from mlir_mx.dialect import load_dialect, parse_module
from mlir_mx.kernels import Problem, kernel_module, plan_kernel
from mlir_mx.numerics import ELEMENT_FORMATS
from mlir_mx.numerics.formats import SCALE_TYPE
from mlir_mx.passes.pipeline import run_pipeline
from mlir_mx.pipelines import kernel_library_pipeline


def tool(package, name: str) -> str:
    return str(Path(list(package.__path__)[0]) / "bin" / name)


def compile_asm(prob: Problem, schedule: str, cpu: str, out: Path, **over) -> Path:
    with ir.Context() as ctx, ir.Location.unknown():
        load_dialect(ctx)
        plan = plan_kernel(prob, schedule, 1)
        if over:
            plan = dataclasses.replace(plan, config=dataclasses.replace(plan.config, **over))
        print(plan.describe())
        text = str(kernel_module(prob, plan))
    with ir.Context() as ctx:
        module = parse_module(text, ctx)
        run_pipeline(module, kernel_library_pipeline(1))
        out.with_suffix(".mlir").write_text(str(module))
    ll, s = out.with_suffix(".ll"), out.with_suffix(".s")
    subprocess.run(
        [tool(mlir, "mlir-translate"), "--mlir-to-llvmir", str(out.with_suffix(".mlir")), "-o", ll],
        check=True,
    )
    subprocess.run([tool(llvm, "llc"), "-O3", f"-mcpu={cpu}", str(ll), "-o", str(s)], check=True)
    return s


def mca(body: list[str], cpu: str) -> str:
    """llvm-mca's simulated cycles per pass of a loop body (100 passes), and
    its block reciprocal throughput (the busiest port's bound)."""
    out = subprocess.run([tool(llvm, "llvm-mca"), "-mtriple=x86_64-linux-gnu", f"-mcpu={cpu}"],
                         input="\n".join(body) + "\n", capture_output=True, text=True)  # fmt: skip
    total = re.search(r"Total Cycles:\s*(\d+)", out.stdout)
    rthr = re.search(r"Block RThroughput:\s*([\d.]+)", out.stdout)
    if not total or not rthr:
        return "mca: n/a"
    return f"mca {int(total.group(1)) / 100:.1f} cycles/pass (bound {rthr.group(1)})"


def loops(path: Path):
    """(label, body lines) of every loop: a label up to the backward jump to it."""
    lines = path.read_text().splitlines()
    labels = {m.group(1): i for i, x in enumerate(lines) if (m := re.match(r"^(\.LBB\S+):", x))}
    for i, line in enumerate(lines):
        m = re.match(r"^\s+j\w+\s+(\.LBB\S+)", line)
        if m and labels.get(m.group(1), i) < i:
            body = lines[labels[m.group(1)] : i + 1]
            yield m.group(1), [x for x in body if x.startswith("\t") and not x.startswith("\t.")]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("element", choices=list(ELEMENT_FORMATS))
    p.add_argument("m", type=int)
    p.add_argument("schedule")
    p.add_argument("size", type=int, nargs="?", default=4096, help="N = K")
    p.add_argument("--cpu", default="znver3")
    p.add_argument("--nv", type=int)
    p.add_argument("--ku", type=int)
    p.add_argument("--a", choices=list(ELEMENT_FORMATS), help="A's MX element (default: f32 A)")
    p.add_argument("--a-quant", help="an f32 A quantized in the kernel (i8, bf16: Linear's)")
    p.add_argument("--records", help="B as the dot records of this kind (i8, i16, bf16)")
    p.add_argument("--tiled", action="store_true", help="a tiled B at any M (Linear's stored form)")
    p.add_argument("--row-major", action="store_true", help="a row-major B at M = 1 (the Runner's)")
    p.add_argument("--block", type=int, default=32, help="B's block size (16: NVFP4's)")
    p.add_argument("--scale-type", default=SCALE_TYPE, help="B's scale type (f8E4M3FN: NVFP4)")
    p.add_argument("--mca", action="store_true", help="llvm-mca's cycles per pass of each loop")
    p.add_argument("--out", default="/tmp/kernel_asm")
    a = p.parse_args()
    packed = ELEMENT_FORMATS[a.element].is_sub_byte
    a_packed = a.a is not None and ELEMENT_FORMATS[a.a].is_sub_byte
    if a.records:
        # b_lift: E8M0 records whose scales allow the lifted step, as Linear
        # finds for every weight of ordinary magnitude (weight_form.lifts).
        prob = Problem(a.m, a.size, a.size, a.block, a.a, a.element, a_packed=a_packed,
                       b_dot=a.records, b_scale_type=a.scale_type, a_quant=a.a_quant,
                       b_lift=a.scale_type == SCALE_TYPE)  # fmt: skip
    else:
        tiled = (a.m == 1 and not a.row_major) or a.tiled
        prob = Problem(a.m, a.size, a.size, a.block, a.a, a.element, a_packed=a_packed,
                       b_packed=packed, b_tiled=tiled, b_scale_type=a.scale_type,
                       a_quant=a.a_quant)  # fmt: skip
    over = {k: v for k, v in (("nv", a.nv), ("ku", a.ku)) if v is not None}
    s = compile_asm(prob, a.schedule, a.cpu, Path(a.out), **over)
    for label, body in loops(s):
        if len(body) > 40:
            ops = collections.Counter(x.split()[0] for x in body)
            stack = sum("(%rsp)" in x for x in body)
            cyc = f" {mca(body, a.cpu)}" if a.mca else ""
            print(label, len(body), "stack refs", stack, dict(ops.most_common(12)), cyc)


if __name__ == "__main__":
    main()

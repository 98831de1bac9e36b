"""Instruction counts of the NEON dot kernels per 32-code block, from the machine code.

Issue 55, item 3 ("speed without hardware"): no aarch64 machine here, so
this counts what an aarch64 CPU would execute.  For each CPU class it
generates the ``int-decode`` and ``int-prefill`` kernels as ``mlir_mx``
chooses them on that CPU (the process is made to look like qemu's guest:
``platform.machine()`` and the reported features of
``tests/host/samples/cpuinfo-aarch64-qemu-<cpu>.txt``), lowers them with
``mx-host-target{arch=aarch64 features=...}``, compiles them as the JIT
would (the LLVM tools wheel's ``opt -O2`` and ``llc -O3 -mcpu=CPU``), finds
the hot loop (the loop with the most ``sdot``/``usdot``) and reports:

* its instructions, dot instructions and loads, and the share of multiplies;
* instructions per **column-block** (32 K x 1 column of B x 1 row of A: the
  work of one ggml ``block_mxfp4`` x ``block_q8_0`` dot);
* ``llvm-mca -mcpu=CPU``'s block reciprocal throughput (cycles per
  iteration, an estimate from LLVM's scheduling model), per column-block.

The x86 kernels are counted the same way (``llc -mcpu=sapphirerapids``,
this host's features), and ggml's NEON ``ggml_vec_dot_mxfp4_q8_0`` by
reading its source (:data:`GGML_NEON`).  Run from the checkout::

    PYTHONPATH=src python bench/probes/neon_counts.py [--mca] [--out /tmp/neon_counts]

The figures are estimates of instruction counts and throughput, not
timings: docs/portability.md has the table and says how to measure on a
real aarch64 machine (``mx-bench``).
"""

from __future__ import annotations

import argparse
import contextlib
import re
import subprocess
from pathlib import Path
from unittest import mock

from mlir import ir

from mlir_mx import cpu_features, host
from mlir_mx.dialect import load_dialect
from mlir_mx.execution.libraries import wheel_tool
from mlir_mx.kernels import Problem, kernel_module, plan_kernel
from mlir_mx.passes.pipeline import run_pipeline
from mlir_mx.pipelines import kernel_library_pipeline

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "tests" / "host" / "samples"

#: (qemu sample, llc/llvm-mca CPU, features for mx-host-target).  Apple M1
#: has asimddp but no i8mm (M2 adds i8mm and bf16): the neoverse-n1 kernels.
#: The neoverse-n1 sample on the V1 model is the sdot kernels (no i8mm) there,
#: to weigh smmla against sdot on one core model; Neoverse V2 (Graviton4) has
#: i8mm: the V1 sample's kernels, as Apple M2 (its sdot kernels beside them).
#: LLVM prefetches (``prfm``) in loops on the Apple cores only
#: (``kernels/dot/neon_scratch.py``); the table counts them in ``prfm``.
TARGETS = [
    ("neoverse-n1", "neoverse-n1", "asimddp"),
    ("neoverse-v1", "neoverse-v1", "asimddp,i8mm"),
    ("neoverse-n1", "neoverse-v1", "asimddp"),
    ("neoverse-v1", "neoverse-v2", "asimddp,i8mm"),
    ("neoverse-n1", "neoverse-v2", "asimddp"),
    ("neoverse-n1", "apple-m1", "asimddp"),
    ("neoverse-v1", "apple-m2", "asimddp,i8mm"),
    ("neoverse-n1", "apple-m2", "asimddp"),
]
#: (name, A element, B element)
PAIRS = [("W4A8", "i8", "f4E2M1FN"), ("FP4xFP4", "f4E2M1FN", "f4E2M1FN"), ("INT8xINT8", "i8", "i8")]
#: (schedule, M, K = N)
SHAPES = [("int-decode", 1, 4096), ("int-prefill", 256, 4096)]

#: ggml's NEON loop of ``ggml_vec_dot_mxfp4_q8_0`` (ggml/src/ggml-cpu/arch/arm/
#: quants.c, ggml-org/llama.cpp at f5a137d), two blocks per iteration, read
#: from the source, one entry per instruction an aarch64 compiler emits for
#: it at best (loads paired where adjacent):
GGML_NEON = {
    "ldr q (2 x 16 B of nibbles, x[ib].qs, x[ib+1].qs)": 2,
    "ldp q (2 x 32 B of q8, y[ib].qs, y[ib+1].qs)": 2,
    "and + ushr (the nibbles, 2 blocks)": 4,
    "tbl (kvalues_mxfp4, 4 vectors)": 4,
    "sdot (4, vdotq_s32)": 4,
    "addv (vaddvq_s32, 2) + fmov/scvtf to float (2 x 2)": 6,
    "GGML_E8M0_TO_FP32_HALF (ldrb, cmp, csel/shift, fmov: about 5, 2 blocks)": 10,
    "GGML_CPU_FP16_TO_FP32 of y.d (ldr h + fcvt, 2 blocks)": 4,
    "fmul x 2, fmul x 2, fadd x 2 (the scalar sumf update)": 6,
    "loop (add, cmp, b.lt; address increments)": 4,
}


@contextlib.contextmanager
def as_aarch64(cpu: str):
    """Choose kernels as on qemu's ``cpu`` (the architecture and the
    features its /proc/cpuinfo sample reports)."""
    text = (SAMPLES / f"cpuinfo-aarch64-qemu-{cpu}.txt").read_text()
    feats = cpu_features.parse_cpuinfo(text)
    with (
        mock.patch.object(host.platform, "machine", lambda: "aarch64"),
        mock.patch.object(host, "_reported_features", lambda: feats),
        mock.patch.dict("os.environ", {"MLIR_MX_CPU_FEATURES": ""}),
    ):
        yield


def lowered(prob: Problem, schedule: str, arch: str, features: str) -> tuple[str, str]:
    with ir.Context() as ctx, ir.Location.unknown():
        load_dialect(ctx)
        plan = plan_kernel(prob, schedule, 1)
        assert plan.schedule.name == schedule, (plan.schedule.name, schedule)
        module = ir.Module.parse(str(kernel_module(prob, plan)), ctx)
        pipeline = kernel_library_pipeline(1).with_options(
            "mx-host-target", arch=arch, features=features
        )
        run_pipeline(module, pipeline)
        return str(module), plan.describe()


def assemble(text: str, triple: str, cpu: str, out: Path) -> str:
    ll = subprocess.run([str(wheel_tool("mlir-translate")), "--mlir-to-llvmir"],
                        input=text, capture_output=True, text=True, check=True).stdout  # fmt: skip
    target = [f"-mtriple={triple}", f"-mcpu={cpu}"]
    opt = subprocess.run([str(wheel_tool("opt")), "-O2", *target, "-o", "-"],
                         input=ll.encode(), capture_output=True, check=True).stdout  # fmt: skip
    asm = subprocess.run([str(wheel_tool("llc")), "-O3", *target, "-o", "-"],
                         input=opt, capture_output=True, check=True).stdout.decode()  # fmt: skip
    out.write_text(asm)
    return asm


BRANCH = re.compile(r"^\s+(?:b(?:\.\w+)?|cbn?z\s+\w+,|tbn?z\s+\w+,\s*#\d+,|j\w+)\s+(\.LBB\S+)")
DOTS = re.compile(r"^\s+(sdot|usdot|smmla|vpdpbusd|vpdpwssd)\b")


def hot_loop(asm: str) -> list[str]:
    """The instructions of the innermost loop (label .. backward branch, no
    loop inside) with the most dot instructions (the kernel's full row tile:
    the tiles of fewer rows after it have fewer), the fewest instructions
    among equals."""
    lines = asm.splitlines()
    labels = {m.group(1): i for i, x in enumerate(lines) if (m := re.match(r"^(\.LBB\S+):", x))}
    loops = []
    for i, line in enumerate(lines):
        m = BRANCH.match(line)
        if m and labels.get(m.group(1), i) < i:
            loops.append((labels[m.group(1)], i))
    best: list[str] = []
    best_key = (0, 0)
    for lo, hi in loops:
        if any(lo <= a and b <= hi and (a, b) != (lo, hi) for a, b in loops):
            continue  # an outer loop
        body = [x for x in lines[lo : hi + 1] if x.startswith("\t") and not x.startswith("\t.")]
        key = (sum(bool(DOTS.match(x)) for x in body), -len(body))
        if key[0] and (not best or key > best_key):
            best, best_key = body, key
    return best


def mca(body: list[str], triple: str, cpu: str) -> float | None:
    """llvm-mca's block reciprocal throughput (cycles per iteration)."""
    out = subprocess.run([str(wheel_tool("llvm-mca")), f"-mtriple={triple}", f"-mcpu={cpu}"],
                         input="\n".join(body) + "\n", capture_output=True, text=True)  # fmt: skip
    m = re.search(r"Block RThroughput:\s*([\d.]+)", out.stdout)
    return float(m.group(1)) if m else None


def count(body: list[str], rows: int, lanes: int) -> dict:
    """The loop's counts; ``lanes``: products per dot instruction (16 for
    sdot/usdot on 128 bits, 64 for vpdpbusd zmm; an ``smmla`` does twice
    ``lanes``: 2 x 8 by 8 x 2); ``rows``: rows of A per iteration."""
    ops = [x.split()[0] for x in body]
    dots = sum(bool(DOTS.match(x)) for x in body)
    products = sum(lanes * (2 if o == "smmla" else 1) for o in ops if DOTS.match("\t" + o))
    loads = sum(o.startswith("ld") or "(%" in x for o, x in zip(ops, body, strict=True))
    col_blocks = products / 32  # 32 products = one column-block of one row
    return {
        "insns": len(body), "dots": dots, "loads": loads, "kind": _dot_names(ops),
        "spills": sum("[sp" in x for x in body),
        "prfm": sum(o == "prfm" for o in ops),
        "mult_share": dots / max(1, len(body)),
        "per_col_block": len(body) / col_blocks if col_blocks else float("nan"),
        "col_blocks": col_blocks, "rows": rows,
    }  # fmt: skip


def _dot_names(ops: list[str]) -> str:
    return "/".join(sorted({o for o in ops if DOTS.match("\t" + o)}))


def ggml_per_block() -> float:
    return sum(GGML_NEON.values()) / 2


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mca", action="store_true", help="add llvm-mca's cycles per column-block")
    p.add_argument("--out", default="/tmp/neon_counts")
    a = p.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    print(
        f"ggml NEON mxfp4 x q8_0 (read from the source): {ggml_per_block():.1f} insns/column-block"
        f" ({sum(GGML_NEON.values())} per 2 blocks; 2 sdot per block)"
    )
    rows = []
    for sample, cpu, feats in TARGETS:
        for name, ea, eb in PAIRS:
            for schedule, m, size in SHAPES:
                prob = Problem(m, size, size, 32, ea, eb, b_dot="i8")
                with as_aarch64(sample):
                    text, desc = lowered(prob, schedule, "aarch64", feats)
                tag = f"{cpu}-{feats.replace(',', '+')}-{name}-{schedule}"
                body = hot_loop(assemble(text, "aarch64-linux-gnu", cpu, out / f"{tag}.s"))
                c = count(body, m, 16)
                cyc = mca(body, "aarch64-linux-gnu", cpu) if a.mca else None
                rows.append((f"{cpu} ({feats})", name, schedule, desc, c, cyc))
    x86 = []
    for name, ea, eb in PAIRS:
        for schedule, m, size in SHAPES:
            prob = Problem(m, size, size, 32, ea, eb, b_dot="i8")
            text, desc = lowered(prob, schedule, "host", "host")
            body = hot_loop(assemble(text, "x86_64-linux-gnu", "sapphirerapids",
                                     out / f"x86-{name}-{schedule}.s"))  # fmt: skip
            c = count(body, m, 64)
            cyc = mca(body, "x86_64-linux-gnu", "sapphirerapids") if a.mca else None
            x86.append(("sapphirerapids", name, schedule, desc, c, cyc))
    print(
        "| CPU (features) | pair | schedule | loop insns | dots | mult share | stack |"
        " prfm | insns/col-block | mca cycles/col-block |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for cpu, name, schedule, _desc, c, cyc in rows + x86:
        per = f"{cyc / c['col_blocks']:.2f}" if cyc and c["col_blocks"] else "-"
        print(
            f"| {cpu} | {name} | {schedule} | {c['insns']} | {c['dots']} {c['kind']} |"
            f" {100 * c['mult_share']:.0f} % | {c['spills']} | {c['prfm']} | {c['per_col_block']:.2f}"
            f" | {per} |"
        )
    print(f"(assembly under {out})")


if __name__ == "__main__":
    main()

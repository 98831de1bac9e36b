"""A's preparation's host side (numpy) for the guarded AMX-BF16 matmul, old
against new, in one process (issue 51, session 57): ``prepare_activations``
of this tree against the same module from another commit (``--old``, a copy
of ``src/mlir_mx/linear/amx_prepare.py``, e.g. ``git show
main:src/mlir_mx/linear/amx_prepare.py > /tmp/old.py``), interleaved (the
sides alternate, each first in every other round), wall time, median of
ROUNDS, 1 thread; every round's arrays compared byte for byte.

Per call and side: ``prepare_activations`` (the prepare kernel and the
numpy after it; since session 57 the serial E8M0 kernel builds the by-block
lists itself, so the kernel's and numpy's shares differ between the
sides and only the whole compares).  Inputs: M = 128, bf16 N(0, 1)
activations, E2M1 weights at K = 2048 and 5632 and NVFP4 at 2048; with
``--llama`` also the 56 AMX calls' captured inputs of the 8-layer bf16
Llama's 128-token prefill (``bf16_llama_kernel_split.capture``), summed.

    PYTHONPATH=src python bench/probes/amx_prepare_host_ab.py --old /tmp/old.py \\
        [--rounds 300] [--llama]
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time

import ml_dtypes
import numpy as np

from mlir_mx import oracle
from mlir_mx.linear import amx_prepare
from mlir_mx.numerics import MXArray


def load(path: str):
    spec = importlib.util.spec_from_file_location("amx_prepare_old", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def weight(element: str, k: int, n: int = 256):
    w = np.random.default_rng(0).standard_normal((k, n)).astype(np.float32)
    if element == "nvfp4":
        return oracle.amx_prepare(oracle.quantize(w, "nvfp4", 16, axis=0))
    q = oracle.quantize(w.T.copy(), element, 32)
    b = MXArray(q.codes.T.copy(), q.scales.view(np.uint8).T.copy(), element, 32, 0)
    return oracle.amx_prepare(b)


def steps(mod, a, params):
    """``{step: call}`` of one side on ``a``, its buffers its own."""
    buffers: dict = {}
    return {"all": lambda: mod.prepare_activations(a, params, 1.0, buffers).args}


def same(x, y) -> None:
    for p, q in zip(x, y, strict=True):
        assert p.dtype == q.dtype and p.shape == q.shape, (p.dtype, q.dtype, p.shape, q.shape)
        assert np.array_equal(np.asarray(p).view(np.uint8), np.asarray(q).view(np.uint8))


def compare(old, cases, rounds: int) -> dict:
    """``{(case, step, side): median seconds}`` over ``cases`` ((name, a,
    params)), sides interleaved."""
    out = {}
    for name, a, params in cases:
        sides = {"old": steps(old, a, params), "new": steps(amx_prepare, a, params)}
        same(sides["old"]["all"](), sides["new"]["all"]())
        times = {(s, side): [] for s in sides["new"] for side in sides}
        for r in range(rounds):
            for side in ("old", "new") if r % 2 else ("new", "old"):
                for s, f in sides[side].items():
                    t0 = time.perf_counter()
                    f()
                    times[s, side].append(time.perf_counter() - t0)
        for (s, side), ts in times.items():
            out[name, s, side] = statistics.median(ts)
    return out


def llama_cases() -> list:
    import torch
    from bf16_llama_kernel_split import capture
    from transformers import LlamaForCausalLM

    from mlir_mx.torch import quantize_
    from mlir_mx_bench.models.llama.worker import llama_config

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = LlamaForCausalLM(llama_config(8)).eval().to(torch.bfloat16)
    quantize_(model, "f4E2M1FN")
    ids = torch.randint(0, 32000, (1, 128), generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        model(ids, use_cache=True, logits_to_keep=1)
    return [(f"llama {i}", x, found[1]) for i, (found, x, _w) in enumerate(capture(model, ids))]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--old", required=True)
    ap.add_argument("--rounds", type=int, default=300)
    ap.add_argument("--llama", action="store_true")
    args = ap.parse_args()
    old = load(args.old)
    rng = np.random.default_rng(1)
    cases = []
    for element, k in (("f4E2M1FN", 2048), ("f4E2M1FN", 5632), ("nvfp4", 2048)):
        a = rng.standard_normal((128, k)).astype(ml_dtypes.bfloat16).astype(np.float32)
        cases.append((f"{element} 128x{k}", a, amx_prepare.guard_params(weight(element, k))))
    res = compare(old, cases, args.rounds)
    print(f"wall us per call, median of {args.rounds}, interleaved; arrays byte-equal")
    for name, _a, _p in cases:
        o, n = res[name, "all", "old"], res[name, "all", "new"]
        print(f"  {name:22s} {1e6 * o:7.1f} -> {1e6 * n:7.1f} ({n / o:.2f}x)")
    if args.llama:
        lcases = llama_cases()
        res = compare(old, lcases, max(args.rounds // 10, 5))
        print(f"the 8-layer bf16 Llama's {len(lcases)} AMX calls, summed ms "
              f"(median of {max(args.rounds // 10, 5)} per call):")  # fmt: skip
        o, n = (sum(res[c[0], "all", side] for c in lcases) for side in ("old", "new"))
        print(f"  prepare_activations {1e3 * o:7.2f} -> {1e3 * n:7.2f} ms ({n / o:.2f}x)")


if __name__ == "__main__":
    main()

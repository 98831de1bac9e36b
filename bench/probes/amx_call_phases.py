"""One ``AMXMatmul`` call at MoE row counts split into its phases, in
process, interleaved, median of many (issue 51, session 57): the prepare
kernel (the guard, A packed), ``check_prepared``, the kernel alone, the
whole ``run`` (checks, C allocated, the kernel, the result sliced), and the
exact path's call at the same M.  ``E`` experts in turn (each weight read
once a round, as a MoE call reads them); thread CPU time.

    python bench/probes/amx_call_phases.py [--rows 8,16,24] [--shapes 5760x2880,2880x2880]
        [--acts normal|pass] [--experts 8] [--rounds 15]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np
import torch

from mlir_mx.linear.amx_linear import ENV, amx_matmul_of
from mlir_mx.linear.amx_matmul import amx_matmul_runner, check_prepared
from mlir_mx.linear.amx_prepare import prepare_activations
from mlir_mx.torch import MXLinear

sys.path.insert(0, os.path.dirname(__file__))
from amx_experts_prefill import random_mx  # noqa: E402


def timed(fn):
    c0 = time.thread_time()
    out = fn()
    return out, (time.thread_time() - c0) * 1e3


def exact_call(lay, x):
    os.environ[ENV] = "0"
    try:
        y = torch.zeros(x.shape[0], lay.out_features, dtype=torch.float32)
        assert lay.linear.call_into(x.data_ptr(), x.shape[0], y.data_ptr(), 1, True)
        return y
    finally:
        os.environ[ENV] = "1"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", default="8,16,24")
    ap.add_argument("--shapes", default="5760x2880,2880x2880")
    ap.add_argument("--acts", choices=["normal", "pass"], default="normal")
    ap.add_argument("--experts", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=15)
    ns = ap.parse_args()
    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    print(f"load {os.getloadavg()[0]:.2f}; acts {ns.acts}; {ns.experts} experts in turn; "
          f"thread CPU ms per call, median of {ns.rounds} rounds")  # fmt: skip
    for shape in ns.shapes.split(","):
        n, k = (int(v) for v in shape.split("x"))
        lays = [MXLinear(random_mx(rng, n, k), threads=1) for _ in range(ns.experts)]
        for m in (int(v) for v in ns.rows.split(",")):
            if ns.acts == "pass":
                xs = [np.where(rng.random((m, k)) < 0.5, -1.0, 1.0).astype(np.float32)
                      for _ in lays]  # fmt: skip
            else:
                xs = [torch.randn(m, k).bfloat16().float().numpy() for _ in lays]
            t = {p: [] for p in ("prepare", "check", "kernel", "run", "exact")}
            fails = []
            for r in range(ns.rounds + 1):
                acc = dict.fromkeys(t, 0.0)
                for lay, x in zip(lays, xs, strict=True):
                    mm, params = amx_matmul_of(lay.linear)
                    buffers: dict = {}
                    order = ("amx", "exact") if r % 2 else ("exact", "amx")
                    for side in order:
                        if side == "exact":
                            want, dt = timed(lambda: exact_call(lay, torch.from_numpy(x)))  # noqa: B023
                            acc["exact"] += dt
                            continue
                        prep, dt = timed(lambda: prepare_activations(x, params, 0.3, buffers))  # noqa: B023
                        acc["prepare"] += dt
                        assert prep.args is not None
                        nb = k // 32
                        _, dt = timed(lambda: check_prepared(prep.args, nb, 32))  # noqa: B023
                        acc["check"] += dt
                        run = amx_matmul_runner(mm.group, mm.weight.element, 1).amx_matmul
                        c = np.empty((prep.args[0].shape[0] * 16, mm.b_codes.shape[0] * 16),
                                     np.float32)  # fmt: skip
                        a_t, ptr, rows, bptr, bidx, fa = prep.args
                        _, dt = timed(lambda: run(a_t, mm.b_codes, c, ptr, rows, mm.b_scales,  # noqa: B023
                                                  bptr, bidx, fa))  # noqa: B023
                        acc["kernel"] += dt
                        got, dt = timed(lambda: mm.run(prep.args, m, 1))  # noqa: B023
                        acc["run"] += dt
                    assert np.array_equal(got.view(np.uint32), want.numpy().view(np.uint32))
                    if r == 0:
                        fails.append(prep.failing / (m * (k // 32)))
                if r:
                    for p in t:
                        t[p].append(acc[p] / len(lays))
            med = {p: statistics.median(v) for p, v in t.items()}
            print(f"{n}x{k} M={m:3d} fail {100 * statistics.mean(fails):4.1f}%: "
                  + ", ".join(f"{p} {v:6.3f}" for p, v in med.items())
                  + f"; exact/(prepare+run) {med['exact'] / (med['prepare'] + med['run']):.2f}x",
                  flush=True)  # fmt: skip
    print(f"load {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()

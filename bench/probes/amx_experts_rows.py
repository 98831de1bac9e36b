"""Per projection, AMX-BF16 against the exact path at small row counts, the
way a MoE call reads its weights (issue 51; ``mlir_mx.torch.experts_amx``).

``E`` gpt-oss-20b-shaped MXFP4 experts (``amx_experts_prefill.build``: codes
uniform, scales 2^-9..2^-5, biases N(0, 0.02)); each round calls every
expert's projection once in turn (so each weight is read once, from
memory, as in a MoE call), on ``m`` rows:

- ``gate_up``: bf16 hidden states N(0, 1) (a bf16 model's input, as it is);
- ``down``: the gate of ``gate_up``'s exact output on those rows, rounded to
  bf16 (``activations="bf16"``: the only way ``down`` can take AMX).

Sides, interleaved in each round (AMX, then exact, per expert, the order
alternating between rounds): ``exact`` the layer's own call (``gate_up``:
the bf16 kernels through ``Linear.call_into``, as ``MXExperts.expert``;
``down``: the layer's call); ``amx`` the prepare kernel (the guard) and,
where it passes, the AMX kernel (``AMXMatmul.run``), else the exact call
after it (what a declined call costs).  Bits are checked where AMX ran.
Thread CPU time (1 thread), median over rounds of the per-expert mean.
Also the share of the call's (row, block)s that fail the guard, how many
calls passed, and the guard alone (``prepare_activations``) in ms.

    python bench/probes/amx_experts_rows.py [--rows 4,8,12,16,24,32]
        [--experts 16] [--rounds 9] [--proj gate_up,down] [--shares 0,0.1,0.3]
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
from mlir_mx.linear.amx_prepare import prepare_activations
from mlir_mx.torch import Gate, MXLinear

sys.path.insert(0, os.path.dirname(__file__))
from amx_experts_prefill import random_mx  # noqa: E402


def layers(rng, e: int, h: int, proj: str):
    if proj == "gate_up":
        return [MXLinear(random_mx(rng, 2 * h, h), threads=1) for _ in range(e)]
    return [MXLinear(random_mx(rng, h, h), threads=1, activations="bf16") for _ in range(e)]


def inputs(rng, ups, m: int, h: int, proj: str, share: float | None = None):
    """Per expert: its ``m`` input rows (f32 holding bf16 values).  ``share``:
    no block fails but a random ``share`` of the (row, block)s, made to fail
    by one element of 2^-20 (the others at least 1/16; ``down`` too: not the
    gate's output then)."""
    xs = []
    for up in ups:
        x = torch.from_numpy(rng.standard_normal((m, h)).astype(np.float32))
        if share is not None:
            x = torch.sign(x) * x.abs().clamp(min=1 / 16)
            hit = np.nonzero(rng.random((m, h // 32)) < share)
            x[hit[0], hit[1] * 32] = 2.0**-20
        x = x.bfloat16().float()
        if proj == "down" and share is None:
            x = Gate().rows(exact(up, x, "gate_up")).bfloat16().float()
        xs.append(x.contiguous())
    return xs


def exact(layer, x, proj):
    """The exact path (``MLIR_MX_AMX=0``: from 32 rows ``Linear``'s own hook
    would take AMX)."""
    os.environ[ENV] = "0"
    try:
        if proj == "down":
            return layer(x)
        y = torch.zeros(x.shape[0], layer.out_features, dtype=torch.float32)
        assert layer.linear.call_into(x.data_ptr(), x.shape[0], y.data_ptr(), 1, True)
        return y
    finally:
        os.environ[ENV] = "1"


def amx(layer, x, proj, buffers):
    """``(y, failing, passed)``: the guard, then AMX or the exact call."""
    mm, params = amx_matmul_of(layer.linear)
    a = x.numpy()
    prep = prepare_activations(a, params, mm.max_fallback_share, buffers)
    if prep.args is None:
        return exact(layer, x, proj), prep.failing, False
    return torch.from_numpy(np.asarray(mm.run(prep.args, a.shape[0], 1))), prep.failing, True


def cpu_ms(fn):
    c0 = time.thread_time()
    out = fn()
    return out, (time.thread_time() - c0) * 1e3


def measure(ns, rng, proj: str, ups, lays, m: int, share: float | None = None) -> str:
    h = ns.hidden
    xs = inputs(rng, ups, m, h, proj, share)
    buffers: dict = {}
    fails, passed = [], 0
    t_amx, t_exact, t_guard = [], [], []
    for r in range(ns.rounds + 1):  # round 0: warm-up (prepares every weight)
        ta = te = tg = 0.0
        for lay, x in zip(lays, xs, strict=True):
            sides = ("amx", "exact") if r % 2 else ("exact", "amx")
            for side in sides:
                if side == "exact":
                    want, t = cpu_ms(lambda: exact(lay, x, proj))  # noqa: B023
                    te += t
                else:
                    (got, failing, ok), t = cpu_ms(lambda: amx(lay, x, proj, buffers))  # noqa: B023
                    ta += t
            assert torch.equal(got, want), "bits differ"
            mm, params = amx_matmul_of(lay.linear)
            a = x.numpy()
            _, t = cpu_ms(lambda: prepare_activations(a, params, mm.max_fallback_share, buffers))  # noqa: B023
            tg += t
            if r == 0:
                fails.append(failing / (m * (h // 32)))
                passed += ok
        if r:
            n = len(lays)
            t_amx.append(ta / n)
            t_exact.append(te / n)
            t_guard.append(tg / n)
    ma, me, mg = (statistics.median(v) for v in (t_amx, t_exact, t_guard))
    return (
        f"{proj:8s} {m:3d} rows: exact {me:6.2f} ms, amx {ma:6.2f} ms ({me / ma:4.2f}x), "
        f"guard {mg:5.2f} ms; failing (row, block)s {100 * statistics.mean(fails):5.1f} % "
        f"(min {100 * min(fails):.1f}, max {100 * max(fails):.1f}); "
        f"AMX ran {passed}/{len(lays)}"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", default="4,8,12,16,24,32")
    ap.add_argument("--experts", type=int, default=16)
    ap.add_argument("--hidden", type=int, default=2880)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--proj", default="gate_up,down")
    ap.add_argument("--shares", default="", help="failing shares to make, e.g. 0,0.1,0.3")
    ns = ap.parse_args()
    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    ups = layers(rng, ns.experts, ns.hidden, "gate_up")
    print(
        f"load {os.getloadavg()[0]:.2f}; {ns.experts} experts in turn, H = I = {ns.hidden}, "
        f"E2M1, 1 thread, thread CPU ms per expert call, median of {ns.rounds} rounds"
    )
    with torch.inference_mode():
        for proj in ns.proj.split(","):
            lays = ups if proj == "gate_up" else layers(rng, ns.experts, ns.hidden, proj)
            shares = [float(v) for v in ns.shares.split(",")] if ns.shares else [None]
            for m in (int(v) for v in ns.rows.split(",")):
                for share in shares:
                    print(measure(ns, rng, proj, ups, lays, m, share), flush=True)
    print(f"load {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()

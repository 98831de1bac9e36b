"""MXFP8 decode with the table widening in lane order against the ordered one (issue 51).

Builds the Runner's mx x mx kernel of ``1 x N x N`` (E4M3 by default) twice
with one schedule: once as the registry emits it (8-bit table codes in lane
order, ``kernels/common/lane_table.py``) and once with the lane order off
(``StreamConfig.lanes = False``: the ``vpermb`` reorder per 64 codes, as
before session 52), checks that both give the same output bytes, then times
them alternating (per round 2 warm-up calls and 10 timed ones) and prints
each one's median, 10th percentile and minimum per call.  Give the load
average with the figures: a shared host's speed drifts.

    PYTHONPATH=src MLIR_MX_CACHE_DIR=off python bench/probes/fp8_lanes_ab.py \\
        [ELEMENT] [THREADS] [SCHEDULE] [N] [ROUNDS]
"""

from __future__ import annotations

import dataclasses
import os
import sys

import numpy as np
from decode_ahead_ab import alternate  # the probes' folder is sys.path[0]

from mlir_mx.execution import Runner, compiled
from mlir_mx.kernels import registry
from mlir_mx.roofline.variants import Shape, variant_module_text
from mlir_mx_bench.cases import make_problem


def runner(text: str, threads: int, schedule: str, lanes: bool) -> Runner:
    """The Runner of ``schedule`` with ``StreamConfig.lanes = lanes``."""
    entry = registry.SCHEDULES[schedule]
    patched = dataclasses.replace(entry, settings={**entry.settings, "lanes": lanes})
    registry.SCHEDULES[schedule] = patched
    compiled.clear_cache()
    try:
        return Runner(text, threads=threads, schedule=schedule)
    finally:
        registry.SCHEDULES[schedule] = entry


def main() -> None:
    args = sys.argv[1:]
    element = args[0] if args else "f8E4M3FN"
    threads = int(args[1]) if len(args) > 1 else 1
    schedule = args[2] if len(args) > 2 else "decode"
    n = int(args[3]) if len(args) > 3 else 8192
    rounds = int(args[4]) if len(args) > 4 else 30
    shape = Shape(1, n, n)
    p = make_problem(shape, element)
    text = variant_module_text("mx-ab", shape, element)
    names = ("lane order", "ordered")
    calls, outs = [], []
    for lanes in (True, False):
        r = runner(text, threads, schedule, lanes)
        out = np.zeros((1, n), np.float32)
        r.invoke("bench", p.qa, p.qb, out, 1)
        outs.append(out)
        c = np.zeros((1, n), np.float32)
        calls.append(lambda k, r=r, c=c: r.invoke("bench", p.qa, p.qb, c, k))
    same = np.array_equal(outs[0].view(np.uint32), outs[1].view(np.uint32))
    header = f"1 x {n} x {n} {element} {schedule}, {threads} thread(s), load {os.getloadavg()}"
    alternate(names, calls, rounds, header)
    print(f"  same output bytes: {same}")


if __name__ == "__main__":
    main()

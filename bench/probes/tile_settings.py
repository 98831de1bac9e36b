"""Time one f32 schedule of ``mlir_mx.Linear`` under several config settings,
side by side in one process, and check every setting gives the same bits.

    SCHED=prefill python bench/probes/tile_settings.py M THREADS "{'mr': 6, 'nv': 1}" ...

Each setting replaces the registry entry's ``settings``; with ``RAW=1`` the
config's ``adapt`` is skipped, so the settings run as given (this is how the
tiles used without AVX-512, ``StreamConfig.adapt`` / ``PrefillConfig.adapt``,
were measured against the AVX-512 ones on an AVX2-only machine; ``adapt``
also sets the tiled-B prefetch, which ``RAW=1`` leaves at the setting's).
4096 x 4096 MXFP4 weights, f32 activations, min and median of 5 calls, then
numpy f32 on the dequantized weight.
"""

from __future__ import annotations

import ast
import dataclasses
import os
import sys
import time

os.environ.setdefault("MLIR_MX_CACHE_DIR", "off")

import numpy as np  # noqa: E402
import threadpoolctl  # noqa: E402

import mlir_mx  # noqa: E402
from mlir_mx.kernels import registry  # noqa: E402


def main() -> None:
    m, threads = int(sys.argv[1]), int(sys.argv[2])
    sched = os.environ.get("SCHED", "prefill")
    rng = np.random.default_rng(0)
    w = mlir_mx.quantize(rng.standard_normal((4096, 4096)).astype(np.float32), "f4E2M1FN", 32)
    x = rng.standard_normal((m, 4096)).astype(np.float32)
    base = registry.SCHEDULES[sched]
    if os.environ.get("RAW") == "1":
        raw = type(base.config.__name__, (base.config,), {"adapt": lambda self, prob: self})
        base = dataclasses.replace(base, config=raw)
    ref = None
    for text in sys.argv[3:]:
        settings = ast.literal_eval(text)
        registry.SCHEDULES[sched] = dataclasses.replace(base, settings=settings)
        lin = mlir_mx.Linear(w, threads=threads)
        y = lin(x)
        ref = y if ref is None else ref
        same = np.array_equal(ref.view(np.uint32), y.view(np.uint32))
        ts = []
        for _ in range(5):
            t0 = time.perf_counter()
            lin(x)
            ts.append(time.perf_counter() - t0)
        print(
            f"{settings} {lin.schedule(x)}: min {1e3 * min(ts):.1f} ms,"
            f" median {1e3 * np.median(ts):.1f} ms, same bits {same}",
            flush=True,
        )
    wd = mlir_mx.dequantize(w)
    ts = []
    with threadpoolctl.threadpool_limits(threads):
        for _ in range(5):
            t0 = time.perf_counter()
            x @ wd.T
            ts.append(time.perf_counter() - t0)
    print(f"numpy f32: min {1e3 * min(ts):.1f} ms")


if __name__ == "__main__":
    main()

"""The cost of ``mx-legalize-masked-stores`` on a tail-heavy kernel: a
``quantize_block`` of 4096 x 100 f32 (rows of 6 full vectors and a 4-lane
tail, block 4), compiled with the default kernel pipeline and with the same
pipeline without the pass, called in turn in one process; medians of 30.
Run: ``python bench/probes/masked_store_guard.py`` (and with
``MLIR_MX_CPU_FEATURES="-avx512f -avx_vnni"`` for an AVX2 CPU's code)."""

import os
import time

import numpy as np

from mlir_mx.execution import Runner
from mlir_mx.passes.pipeline import Pipeline
from mlir_mx.pipelines import kernel_pipeline

T = """
func.func @q(%a: tensor<4096x100xf32>) -> !mx.tensor<4096x100xf8E4M3FN, block_size = 4, scale_type = f8E8M0FNU, axis = 1> {
  %v = mx.quantize_block %a : tensor<4096x100xf32> -> !mx.tensor<4096x100xf8E4M3FN, block_size = 4, scale_type = f8E8M0FNU, axis = 1>
  return %v : !mx.tensor<4096x100xf8E4M3FN, block_size = 4, scale_type = f8E8M0FNU, axis = 1>
}"""
full = kernel_pipeline("auto", 1)
plain = Pipeline(tuple(e for e in full if e.name != "mx-legalize-masked-stores"))
print(
    "guard in full:",
    "mx-legalize-masked-stores" in str(full),
    "in plain:",
    "mx-legalize-masked-stores" in str(plain),
)
x = np.random.default_rng(0).normal(size=(4096, 100)).astype(np.float32)
ra, rb = Runner(T, full), Runner(T, plain)
a, b = [], []
for _ in range(30):
    t = time.perf_counter()
    qa = ra.invoke("q", x)
    a.append(time.perf_counter() - t)
    t = time.perf_counter()
    qb = rb.invoke("q", x)
    b.append(time.perf_counter() - t)
print(
    os.environ.get("MLIR_MX_CPU_FEATURES"),
    f"guarded {np.median(a) * 1e3:.3f} ms  unguarded {np.median(b) * 1e3:.3f} ms",
    "same bits:",
    qa.bitwise_equal(qb),
)

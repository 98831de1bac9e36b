"""A transformer MLP with MXFP4 weights from a GGUF file, on the library API.

    python examples/mlp_mxfp4.py [--dims 4096 14336] [--tokens 1 128] [--threads 2]

The gate/up/down projections of a SwiGLU MLP (``d -> f -> d``), as an LLM
stores them: f32 weights (trained-like: normal, std 0.02, 0.1 % outliers)
quantized to MXFP4, written to a GGUF file and read back, then run with
:class:`mlir_mx.Linear` for a decode step and a prefill::

    lin = {n: mlir_mx.Linear(w[n]) for n in ("gate", "up", "down")}
    y = lin["down"](silu(lin["gate"](x)) * lin["up"](x))

Prints the time per step and the error against f64 on the same (dequantized)
weights and against f32 on the original weights.  ``mx-bench --mlp`` times the
same MLP side by side with numpy f32 and ggml MXFP4.  Needs the ``gguf``
package (``pip install 'mlir-mx[gguf]'``).
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

import mlir_mx
from mlir_mx.errors import MXError
from mlir_mx.host import check_threads
from mlir_mx.tools.driver import check_fits
from mlir_mx_bench.mlp import NAMES, dense, make_weights, mlp_forward, mxfp4_through_gguf


class OneLineParser(argparse.ArgumentParser):
    """argparse whose usage errors are one ``mlp_mxfp4.py: error: ...`` line, exit 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


def main(argv=None) -> int:
    ap = OneLineParser(prog="mlp_mxfp4.py", description=__doc__.splitlines()[0])
    ap.add_argument("--dims", nargs=2, type=int, default=[4096, 14336], metavar=("D", "F"))
    ap.add_argument("--tokens", nargs="+", type=int, default=[1, 128])
    ap.add_argument("--threads", type=int, default=None)
    ns = ap.parse_args(argv)
    d, f = ns.dims
    if d % 32 or f % 32 or d <= 0 or f <= 0:
        ap.error(f"--dims: D and F must be positive multiples of 32, got {d} {f}")
    if min(ns.tokens) < 1:
        ap.error(f"--tokens: expected positive counts, got {' '.join(map(str, ns.tokens))}")
    try:
        if ns.threads is not None:
            check_threads(ns.threads, "--threads")
        # the f32 weights, their dequantized f32 and f64 copies, the activations
        check_fits(f"--dims {d} {f}", 3 * 16 * d * f + 32 * max(ns.tokens) * (d + f))
    except MXError as err:
        ap.error(str(err))
    w32 = make_weights(d, f)
    q, size, exact = mxfp4_through_gguf(w32, print)
    print(f"GGUF: {size} bytes, round trip bit-exact: {'yes' if exact else 'NO'}")
    lin = {n: mlir_mx.Linear(q[n], threads=ns.threads) for n in NAMES}
    bits = 8 * sum(x.nbytes for x in lin.values()) / sum(q[n].codes.size for n in NAMES)
    print(f"weights in memory: {bits:.3f} bits per weight, {lin['gate'].threads} thread(s)")
    deq = dense({n: mlir_mx.dequantize(q[n]).T.astype(np.float64) for n in NAMES})
    orig = dense({n: np.ascontiguousarray(w32[n].T) for n in NAMES})
    rng = np.random.default_rng(1)
    ok = exact
    for m in ns.tokens:
        x = rng.standard_normal((m, d)).astype(np.float32)
        y = mlp_forward(lin, x)  # compiles the kernels of this batch size class
        t0 = time.perf_counter()
        y = mlp_forward(lin, x)
        dt = time.perf_counter() - t0
        ref64, ref32 = mlp_forward(deq, x.astype(np.float64)), mlp_forward(orig, x)
        e64 = np.max(np.abs(y - ref64)) / np.max(np.abs(ref64))
        e32 = np.max(np.abs(y - ref32)) / np.max(np.abs(ref32))
        print(f"M = {m:4d}: {dt * 1e3:9.3f} ms; max rel error {e64:.2e} vs f64 on the MXFP4 "
              f"weights, {e32:.2e} vs f32 on the original weights")  # fmt: skip
        ok &= bool(e64 < 1e-5)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

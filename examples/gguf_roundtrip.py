"""Write an MXFP4 weight to a GGUF file, read it back and check it against the oracle.

    python examples/gguf_roundtrip.py [--out w.gguf] [--shape N_OUT N_IN] [--seed S]

The weight is f32 data shaped like an LLM linear layer, ``(n_out, n_in)``: normal
with standard deviation 0.02 plus 0.1% outliers at 10-50x.  ``write_gguf`` takes
it as f32 and quantizes it with the compiled ``mlir_mx.quantize`` (MXFP4: E2M1
elements, E8M0 scales, blocks of 32 along n_in), writes it with the ``gguf``
package; it is read back and checked:

* the MXArray read back equals the oracle's ``quantize(x)`` bit for bit;
* ggml's own decoder (``gguf.quants.dequantize``) on the file's bytes gives the
  values of ``mlir_mx.dequantize`` (the oracle's);
* the matmul right-hand side ``B = W^T`` (blocked along K) equals the oracle's
  quantization of ``x.T`` along axis 0.

Prints the storage cost and the quantization error against f32; exits 1 if a check
fails.  Needs ``pip install 'mlir-mx[gguf]'``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

import numpy as np

import mlir_mx
from mlir_mx import oracle
from mlir_mx.errors import MXError
from mlir_mx.interop import weight_to_rhs
from mlir_mx.interop.gguf import read_gguf, write_gguf
from mlir_mx.tools.driver import check_fits

NAME = "blk.0.ffn_down.weight"


def make_weight(n_out: int, n_in: int, seed: int) -> np.ndarray:
    """f32 ``(n_out, n_in)``: N(0, 0.02) with 0.1% outliers scaled by 10-50."""
    rng = np.random.default_rng(seed)
    w = rng.normal(0.0, 0.02, size=(n_out, n_in)).astype(np.float32)
    outliers = rng.random(w.shape) < 0.001
    w[outliers] *= rng.uniform(10.0, 50.0, size=int(outliers.sum())).astype(np.float32)
    return w


def ggml_decode(path: str, name: str, shape) -> tuple[np.ndarray, int]:
    """Decode tensor ``name`` with gguf's ggml decoder; also return its byte count."""
    import gguf
    from gguf import quants

    for t in gguf.GGUFReader(path).tensors:
        if t.name == name:
            values = quants.dequantize(t.data, gguf.GGMLQuantizationType.MXFP4)
            return values.reshape(shape), int(t.n_bytes)
    raise KeyError(name)


def run(path: str, n_out: int, n_in: int, seed: int) -> bool:
    x = make_weight(n_out, n_in, seed)
    write_gguf(path, {NAME: x}, metadata={"mlir_mx.example.seed": seed})  # f32 in
    w = read_gguf(path)[NAME]
    q = oracle.quantize(x, "f4E2M1FN", 32, axis=-1)

    bit_exact = w.bitwise_equal(q)
    ggml_values, nbytes = ggml_decode(path, NAME, x.shape)
    decoded = mlir_mx.dequantize(w)
    ggml_equal = np.array_equal(ggml_values, decoded)
    rhs_ok = weight_to_rhs(w).bitwise_equal(oracle.quantize(x.T, "f4E2M1FN", 32, axis=0))

    err = decoded.astype(np.float64) - x
    rel_rms = np.sqrt(np.mean(err**2) / np.mean(x.astype(np.float64) ** 2))
    print(f"weight {NAME}: {n_out} x {n_in} f32, seed {seed} -> {path}")
    print(f"  MXFP4 tensor bytes: {nbytes} ({nbytes * 8 / x.size:.2f} bits per element)")
    print(f"  read back == quantize(x) bit for bit: {'yes' if bit_exact else 'NO'}")
    print(f"  ggml decoder == dequantize:           {'yes' if ggml_equal else 'NO'}")
    print(f"  B = W^T (axis 0) == quantize(x.T):    {'yes' if rhs_ok else 'NO'}")
    print(f"  error vs f32: relative RMS {rel_rms:.4f}, max abs {np.abs(err).max():.4g}")
    return bit_exact and ggml_equal and rhs_ok


class OneLineParser(argparse.ArgumentParser):
    """argparse whose usage errors are one ``gguf_roundtrip.py: error: ...`` line, exit 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


def main(argv=None) -> int:
    p = OneLineParser(prog="gguf_roundtrip.py", description=__doc__.splitlines()[0])
    p.add_argument("--out", help="GGUF file to write (default: a temporary file)")
    p.add_argument("--shape", nargs=2, type=int, default=(512, 2048), metavar=("N_OUT", "N_IN"))
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    n_out, n_in = args.shape
    if n_out < 1 or n_in < 32 or n_in % 32:
        p.error(f"--shape: N_OUT >= 1 and N_IN a positive multiple of 32, got {n_out} {n_in}")
    if not 0 <= args.seed < 2**63:
        p.error(f"--seed: expected 0 <= S < 2**63, got {args.seed}")
    try:  # the f32 weight, the oracle's and the decoders' copies
        check_fits(f"--shape {n_out} {n_in}", 24 * n_out * n_in)
    except MXError as err:
        p.error(str(err))
    if args.out:
        folder = os.path.dirname(os.path.abspath(args.out))
        if os.path.isdir(args.out) or not os.path.isdir(folder) or not os.access(folder, os.W_OK):
            p.error(f"--out: cannot write a file '{args.out}' (a folder, or no writable folder)")
    if args.out:
        return 0 if run(args.out, n_out, n_in, args.seed) else 1
    with tempfile.TemporaryDirectory() as tmp:
        return 0 if run(os.path.join(tmp, "weight.gguf"), n_out, n_in, args.seed) else 1


if __name__ == "__main__":
    sys.exit(main())

"""``mx-demo``: the end-to-end demo (the README's first command).

1. Quantize random data with the compiled ``mx.quantize_block`` kernel (every
   MX element type) and check it bit for bit against the numpy oracle.
2. Run the v1 32x64x64 ``mx.block_matmul`` compiled (scalar loops), then the
   tiled + pinned + vectorized version of the same kernel, and mx x mx
   (both operands quantized), and compare with numpy.
3. The generated kernels (``mx-matmul-kernels``, the Runner's default) at a
   decode, a small-batch and a prefill shape, 1 and 2 threads, against the
   exact result and numpy, bit-identical across thread counts; numpy timed at
   the same thread counts (its BLAS held there by threadpoolctl).
4. An MXFP4 weight quantized by the compiled ``mlir_mx.quantize`` (checked
   against the oracle) through the library API (``mlir_mx.Linear``).
5. Print what it did, with timings.

``--quick`` is a cut-down run, for a first check of a new machine or of an
emulated one (``scripts/run-tests-aarch64`` runs it under qemu): two formats
in step 1, only the default (blocked, vectorized) lowering in step 2, smaller
shapes in steps 3 and 4; the same checks.

Exit status 0 when every check passes, 1 otherwise, 2 for a bad command line
(one ``mx-demo: error: ...`` line).
"""

from __future__ import annotations

import sys
import time

import numpy as np

from mlir_mx import oracle
from mlir_mx.execution import Runner
from mlir_mx.numerics import ELEMENT_FORMATS
from mlir_mx.passes.pipeline import PipelineElement
from mlir_mx.pipelines import load_pipeline
from mlir_mx.roofline.variants import Shape, variant_module_text
from mlir_mx.tools.driver import ArgParser, UsageError, tool_main

M, N, K, B = 32, 64, 64, 32


def _mx(shape, elem, axis=None) -> str:
    dims = "x".join(str(d) for d in shape)
    ax = "" if axis is None else f", axis = {axis}"
    return f"!mx.tensor<{dims}x{elem}, block_size = {B}, scale_type = f8E8M0FNU{ax}>"


def quantize_module(elem: str) -> str:
    t = _mx((M, K), elem)
    return (
        f"func.func @quantize(%x: tensor<{M}x{K}xf32>) -> {t} {{\n"
        f"  %q = mx.quantize_block %x : tensor<{M}x{K}xf32> -> {t}\n"
        f"  return %q : {t}\n}}\n"
    )


def _bound(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Worst-case f32 summation error of a K-long dot product (see tests)."""
    return (K + 2) * 2.0**-24 * (np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64)))


def _parse(argv):
    ap = ArgParser(prog="mx-demo", description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    ap.add_argument(
        "--quick",
        action="store_true",
        help="a cut-down run (two formats, the default lowering, small shapes): the same checks",
    )
    args = ap.parse(argv)
    if not isinstance(args, str) and args.seed < 0:
        raise UsageError(f"--seed: expected 0 or more, got {args.seed}")
    return args


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``mx-demo`` console script (through the shared tool_main)."""
    return tool_main("mx-demo", _parse, run, argv)


def run(args) -> int:
    """The demo; returns the exit status."""
    rng = np.random.default_rng(args.seed)
    lower = load_pipeline("lower-to-llvm")
    ok = True

    quick = getattr(args, "quick", False)
    print(
        f"mlir-mx demo: OCP MX on upstream MLIR 22.1.8, JIT on this CPU (seed {args.seed}"
        + ("; --quick: cut down" if quick else "")
        + ")\n"
    )
    print(f"1. mx.quantize_block on a {M}x{K} f32 tensor, block 32, compiled vs the numpy oracle")
    x = (rng.standard_normal((M, K)) * np.exp2(rng.integers(-20, 20, (M, 1)))).astype(np.float32)
    x[0, :B] = 0.0  # an all-zero block
    x[1, 3] = 500.0  # saturates in E4M3 (448)
    for elem in QUICK_FORMATS if quick else ELEMENT_FORMATS:
        t0 = time.perf_counter()
        r = Runner(quantize_module(elem), PipelineElement("mx-to-linalg") + lower)
        t1 = time.perf_counter()
        got = r.quantize(x)
        want = oracle.quantize(x, elem, B)
        same = got.bitwise_equal(want)
        ok &= same
        rel = np.abs(oracle.dequantize(got).astype(np.float64) - x).max(axis=1) / np.maximum(
            np.abs(x).max(axis=1), np.finfo(np.float32).tiny
        )
        print(
            f"   {elem:<9} codes+scales {'bit-exact' if same else 'MISMATCH'}"
            f"  (compile {t1 - t0:.2f} s; max |x - dequant| / row max |x| = {rel.max():.3g})"
        )

    a = oracle.quantize(rng.standard_normal((M, K)).astype(np.float32), "f8E4M3FN", B)
    bf = rng.standard_normal((K, N)).astype(np.float32)
    bq = oracle.quantize(bf, "f8E4M3FN", B, axis=0)
    fused = PipelineElement.of("mx-to-linalg", matmul_lowering="fused") + lower
    runs = [
        ("2. v1 block_matmul, mx x f32, scalar loops (the v1 fused generic)", False, fused),
        (
            "3. same kernel tiled [8,32,32] + mx-pin-map-constants + vectorized",
            False,
            load_pipeline("mx-vectorize") + lower,
        ),
        ("4. both operands quantized (mx x mx), fused, scalar loops", True, fused),
        (
            "5. mx x mx, blocked lowering (the default: ~1.03x f32 FLOPs), vectorized",
            True,
            load_pipeline("mx-vectorize-blocked") + lower,
        ),
    ]
    for title, rhs_mx, pipeline in runs[-1:] if quick else runs:
        print(f"\n{title}: {M}x{N}x{K}, f8E4M3FN")
        t0 = time.perf_counter()
        # the model's variant modules: @kernel is the v1 block_matmul function
        r = Runner(variant_module_text("mx-ab" if rhs_mx else "mx-a", Shape(M, N, K)), pipeline)
        t1 = time.perf_counter()
        acc = rng.standard_normal((M, N)).astype(np.float32)
        b_in = bq if rhs_mx else bf
        b_deq = oracle.dequantize(bq) if rhs_mx else bf
        a_deq = oracle.dequantize(a)
        exact = acc.astype(np.float64) + a_deq.astype(np.float64) @ b_deq.astype(np.float64)
        got = r.kernel(a, b_in, acc.copy())
        err = np.abs(got - exact)
        bound = _bound(a_deq, b_deq) + 2.0**-24 * np.abs(exact)
        good = bool(np.all(err <= bound))
        ok &= good
        ref = acc + a_deq @ b_deq  # numpy f32
        print(
            f"   compile {t1 - t0:.2f} s; max |err| vs exact = {err.max():.3g} "
            f"(bound {bound.max():.3g}): {'OK' if good else 'FAILED'}; "
            f"max |kernel - numpy f32| = {np.abs(got - ref).max():.3g}"
        )

    ok &= _kernels_demo(rng, QUICK_KERNEL_SHAPES if quick else KERNEL_SHAPES)
    ok &= _library_demo(rng, QUICK_LINEAR if quick else (1024, 2048))
    print("\nall checks passed" if ok else "\nSOME CHECKS FAILED")
    return 0 if ok else 1


def _time(fn, reps: int = 5) -> float:
    fn()
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


#: the shapes (M, N, K) of the kernels step: decode, a small batch, prefill
KERNEL_SHAPES = ((1, 2048, 2048), (8, 1024, 1024), (128, 512, 512))
#: ``--quick``: the formats of step 1, the kernels step's shapes, Linear's (out, in)
QUICK_FORMATS = ("f4E2M1FN", "f8E4M3FN")
QUICK_KERNEL_SHAPES = ((1, 256, 256), (40, 128, 128))
QUICK_LINEAR = (128, 256)
#: the thread counts ours and numpy run at in the kernels step
KERNEL_THREADS = (1, 2)


def _numpy_times(fn, counts) -> tuple[list[float], str]:
    """``fn`` (a numpy matmul) timed with numpy's BLAS held to each thread
    count (threadpoolctl), as ours run, and the words that say so; where
    threadpoolctl is missing, once at the BLAS's own default, which says so
    too (that default swings with the load: the two are not comparable)."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        why = "at its BLAS's default threads, not ours: threadpoolctl is not installed"
        return [_time(fn)], why
    times = []
    for t in counts:
        with threadpool_limits(limits=t, user_api="blas"):
            times.append(_time(fn))
    return times, "its BLAS held to the same thread counts by threadpoolctl"


def _kernels_demo(rng, shapes=None) -> bool:
    """The generated kernels (the Runner's default): every shape class, 1 and 2 threads."""
    from mlir_mx.host import features_summary

    print(
        f"\n6. the generated kernels (Runner default: mx-matmul-kernels), mx x mx f8E4M3FN;"
        f" CPU features: {features_summary()}"
    )
    ok = True
    counts = " / ".join(str(t) for t in KERNEL_THREADS)
    for m, n, k in KERNEL_SHAPES if shapes is None else shapes:
        a = oracle.quantize(rng.standard_normal((m, k)).astype(np.float32), "f8E4M3FN", B)
        b = oracle.quantize(rng.standard_normal((k, n)).astype(np.float32), "f8E4M3FN", B, axis=0)
        da, db = oracle.dequantize(a).astype(np.float64), oracle.dequantize(b).astype(np.float64)
        text = variant_module_text("mx-ab", Shape(m, n, k))
        outs, times = [], []
        for threads in KERNEL_THREADS:
            r = Runner(text, threads=threads)

            def call(r=r, a=a, b=b, shape=(m, n)):
                return r.kernel(a, b, np.zeros(shape, np.float32))

            outs.append(call())
            times.append(_time(call))
        fa, fb = da.astype(np.float32), db.astype(np.float32)
        t_np, how = _numpy_times(lambda fa=fa, fb=fb: fa @ fb, KERNEL_THREADS)
        bound = (k + 2) * 2.0**-24 * (np.abs(da) @ np.abs(db))
        good = bool(np.all(np.abs(outs[0] - da @ db) <= bound))
        same = all(np.array_equal(outs[0].view(np.uint32), o.view(np.uint32)) for o in outs)
        ok &= good and same
        print(
            f"   {m}x{n}x{k}: {'OK' if good else 'FAILED'} vs exact; {counts.replace('/', 'and')} threads "
            f"{'bit-identical' if same else 'DIFFER'}; {_ms(times)} ms ({counts} threads), "
            f"numpy f32 {_ms(t_np)} ms ({how})"
        )
    return ok


def _ms(times: list[float]) -> str:
    return " / ".join(f"{t * 1e3:.3f}" for t in times)


def _library_demo(rng, size=(1024, 2048)) -> bool:
    """MXFP4 weights through mlir_mx.Linear: packed, any batch size, batch-invariant."""
    import mlir_mx

    n_out, n_in = size
    print(f"\n7. mlir_mx.Linear: an MXFP4 weight (out {n_out}, in {n_in}), f32 activations")
    w32 = rng.standard_normal((n_out, n_in)).astype(np.float32) * 0.02
    mlir_mx.quantize(w32, "f4E2M1FN", B)  # compiles the kernel
    t_fast = _time(lambda: mlir_mx.quantize(w32, "f4E2M1FN", B), reps=3)
    w = mlir_mx.quantize(w32, "f4E2M1FN", B)
    t0 = time.perf_counter()
    same = w.bitwise_equal(oracle.quantize(w32, "f4E2M1FN", B))
    t_oracle = time.perf_counter() - t0
    print(
        f"   mlir_mx.quantize (compiled): {t_fast * 1e3:.2f} ms, bit-exact with the numpy "
        f"oracle ({t_oracle * 1e3:.0f} ms): {'yes' if same else 'NO'}"
    )
    lin = mlir_mx.Linear(w)
    x = rng.standard_normal((17, n_in)).astype(np.float32)
    dw = oracle.dequantize(w).astype(np.float64)
    y = lin(x)
    bound = (n_in + 2) * 2.0**-24 * (np.abs(x.astype(np.float64)) @ np.abs(dw.T))
    good = bool(np.all(np.abs(y - x.astype(np.float64) @ dw.T) <= bound))
    rows = [lin(x[:m]) for m in (1, 8)]
    invariant = all(np.array_equal(r.view(np.uint32), y[: len(r)].view(np.uint32)) for r in rows)
    bits = 8 * lin.nbytes / w.codes.size
    print(
        f"   {bits:.2f} bits per weight in memory; M = 17: {'OK' if good else 'FAILED'} vs "
        f"exact; rows of M = 1 and 8 {'bit-identical' if invariant else 'DIFFER'} to M = 17; "
        f"{lin.threads} thread(s)"
    )
    return good and invariant and same


if __name__ == "__main__":
    sys.exit(main())

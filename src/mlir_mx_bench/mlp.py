"""``mx-bench --mlp``: a transformer MLP with MXFP4 weights, end to end.

The gate/up/down projections of a ``d -> f -> d`` SwiGLU MLP
(``y = W_down (silu(W_gate x) * W_up x)``, default 4096 -> 14336 -> 4096):

1. f32 weights drawn like trained ones (normal, std 0.02, 0.1 % outliers
   10-50x larger), quantized to MXFP4 by the compiled ``mlir_mx.quantize``
   (bit for bit the oracle's), written to a GGUF file with the ``gguf``
   package and read back (checked bit-exact);
2. a decode step (M = 1) and a prefill (M = 128 tokens), timed side by side
   at each thread count: ours (:class:`mlir_mx.Linear`, f32 activations
   entering the products exactly), ours W4A8 (``activations="i8"``: each
   projection's input quantized to MXINT8 per call, inside the integer dot
   kernels where the CPU has them), numpy f32 on the dequantized weights
   (BLAS), and ggml MXFP4 on the same blocks when ggml-python is installed
   (it quantizes activations to Q8_0 inside each matmul);
3. errors: each output against the f64 MLP on the dequantized weights (the
   kernels' own error; for W4A8 also what quantizing the activations costs)
   and against the f32 MLP on the original weights (what the MXFP4 weights
   cost).
"""

from __future__ import annotations

import ctypes
import tempfile
import time
from pathlib import Path

import numpy as np

from mlir_mx.roofline.measure import time_repeated
from mlir_mx_bench.machine import cpu_sample, other_load, thread_limits

__all__ = ["NAMES", "dense", "make_weights", "mlp_forward", "mxfp4_through_gguf", "run_mlp"]

NAMES = ("gate", "up", "down")


def make_weights(d: int, f: int, seed: int = 0) -> dict[str, np.ndarray]:
    """f32 weights (out, in) with a trained-like distribution and outliers."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in (("gate", (f, d)), ("up", (f, d)), ("down", (d, f))):
        w = rng.standard_normal(shape, dtype=np.float32) * np.float32(0.02)
        n_out = max(1, w.size // 1000)
        idx = rng.integers(0, w.size, n_out)
        w.reshape(-1)[idx] *= rng.uniform(10, 50, n_out).astype(np.float32)
        out[name] = w
    return out


def _silu(x: np.ndarray) -> np.ndarray:
    return x / (np.float32(1) + np.exp(-x))


def mlp_forward(mm, x: np.ndarray) -> np.ndarray:
    return mm["down"](_silu(mm["gate"](x)) * mm["up"](x))


class _Ggml:
    """ggml MXFP4: the same blocks in one graph (3 mul_mat, silu, mul)."""

    def __init__(self, weights, d: int, f: int, m: int, threads: int):
        from mlir_mx.interop.gguf import mxfp4_to_ggml
        from mlir_mx_bench.ggml_baseline import load_ggml

        gg = self.gg = load_ggml()
        raw = {n: mxfp4_to_ggml(w) for n, w in weights.items()}
        mem = sum(r.nbytes for r in raw.values()) + 4 * m * (4 * f + 3 * d) + (64 << 20)
        self.ctx = gg.ggml_init(gg.ggml_init_params(mem_size=mem, mem_buffer=None, no_alloc=False))
        t = {}
        for n, r in raw.items():
            rows, cols = weights[n].shape
            t[n] = gg.ggml_new_tensor_2d(self.ctx, gg.GGML_TYPE_MXFP4, cols, rows)
            ctypes.memmove(gg.ggml_get_data(t[n]), r.ctypes.data, r.nbytes)
        self.x = gg.ggml_new_tensor_2d(self.ctx, gg.GGML_TYPE_F32, d, m)
        h = gg.ggml_mul(
            self.ctx,
            gg.ggml_silu(self.ctx, gg.ggml_mul_mat(self.ctx, t["gate"], self.x)),
            gg.ggml_mul_mat(self.ctx, t["up"], self.x),
        )
        self.y = gg.ggml_mul_mat(self.ctx, t["down"], h)
        self.graph = gg.ggml_new_graph(self.ctx)
        gg.ggml_build_forward_expand(self.graph, self.y)
        self.plan = gg.ggml_graph_plan(self.graph, threads, None)
        self.work = np.empty(max(int(self.plan.work_size), 1), np.uint8)
        self.plan.work_data = self.work.ctypes.data_as(ctypes.POINTER(ctypes.c_uint8))
        self.shape = (m, d)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        gg = self.gg
        ctypes.memmove(gg.ggml_get_data(self.x), x.ctypes.data, x.nbytes)
        if gg.ggml_graph_compute(self.graph, ctypes.byref(self.plan)) != 0:
            raise RuntimeError("ggml_graph_compute failed")
        ptr = ctypes.cast(gg.ggml_get_data(self.y), ctypes.POINTER(ctypes.c_float))
        return np.ctypeslib.as_array(ptr, shape=self.shape).copy()

    def close(self) -> None:
        self.gg.ggml_free(self.ctx)


def mxfp4_through_gguf(w32: dict, say) -> tuple[dict, int, bool]:
    """MXFP4 weights through a GGUF file: (weights read back, file bytes, bit-exact)."""
    from mlir_mx.convert import quantize
    from mlir_mx.interop.gguf import read_gguf, write_gguf

    say("  quantizing the weights to MXFP4 (mlir_mx.quantize) and writing them to GGUF...")
    q = {n: quantize(w, "f4E2M1FN", 32) for n, w in w32.items()}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "mlp.gguf"
        write_gguf(path, {f"mlp.{n}.weight": q[n] for n in NAMES})
        size = path.stat().st_size
        back = read_gguf(path)
    back = {n: back[f"mlp.{n}.weight"] for n in NAMES}
    exact = all(back[n].bitwise_equal(q[n]) for n in NAMES)
    return back, size, exact


def _errors(y: np.ndarray, ref64: np.ndarray, ref32: np.ndarray) -> tuple[float, float]:
    scale64 = np.max(np.abs(ref64)) or 1.0
    scale32 = np.max(np.abs(ref32)) or 1.0
    return (
        float(np.max(np.abs(y - ref64)) / scale64),
        float(np.max(np.abs(y - ref32)) / scale32),
    )


def dense(weights_t: dict) -> dict:
    """``x @ W.T`` per projection, from transposed (in, out) arrays."""
    return {n: (lambda a, w=w: a @ w) for n, w in weights_t.items()}


def _timed(fn, x, samples: int, say, name: str, retries: int):
    """Timing of ``fn(x)``, repeated (up to ``retries`` times, 5 s apart)
    while other processes use more than 10 % of the cores, like the matmul
    benchmark."""
    for attempt in range(retries + 1):
        cpu0 = cpu_sample()
        tm = time_repeated(
            lambda n: [fn(x) for _ in range(n)], samples=samples, target_s=0.05, budget_s=4.0
        )
        cpu = other_load(cpu0, cpu_sample())
        if cpu is None or cpu["others"] <= 0.1 or attempt == retries:
            return tm, cpu, attempt + 1
        say(f"    {name}: other processes used {cpu['others']:.0%} of the cores; timing again")
        time.sleep(5)
    raise AssertionError("unreachable")


def _time_group(methods, x, ref64, ref32, m: int, t: int, samples: int, say, retries: int):
    rows = []
    for name, fn in methods.items():
        e64, e32 = _errors(fn(x), ref64, ref32)
        tm, cpu, attempts = _timed(fn, x, samples, say, name, retries)
        rows.append(
            dict(
                method=name,
                M=m,
                threads=t,
                median_s=tm.median,
                min_s=tm.min,
                spread=tm.spread,
                err_vs_f64=e64,
                err_vs_f32_weights=e32,
                cpu=cpu,
                attempts=attempts,
            )
        )
        say(
            f"    {name:<24} {tm.median * 1e3:9.3f} ms (spread {tm.spread:5.1%})  max err "
            f"{e64:.2e} (vs f64, dequantized weights), {e32:.2e} (vs f32 weights)"
        )
    return rows


def run_mlp(
    d: int, f: int, threads: list[int], tokens: list[int], say, samples: int = 5, retries: int = 3
):
    """The MLP benchmark; returns a record (rows of method x M x threads)."""
    import mlir_mx
    from mlir_mx.convert import dequantize
    from mlir_mx_bench.ggml_baseline import ggml_available

    say(f"MLP {d} -> {f} -> {d}, MXFP4 weights, M in {tokens}, threads {threads}")
    w32 = make_weights(d, f)
    q, gguf_bytes, exact = mxfp4_through_gguf(w32, say)
    deq_t = {n: np.ascontiguousarray(dequantize(q[n]).T) for n in NAMES}
    ref32_mm = dense({n: np.ascontiguousarray(w32[n].T) for n in NAMES})
    ref64_mm = dense({n: w.astype(np.float64) for n, w in deq_t.items()})
    del w32
    rows, skipped = [], ggml_available()
    rng = np.random.default_rng(1)
    ours_bytes = 0
    for m in tokens:
        x = rng.standard_normal((m, d)).astype(np.float32)
        ref64, ref32 = mlp_forward(ref64_mm, x.astype(np.float64)), mlp_forward(ref32_mm, x)
        for t in threads:
            say(f"  M = {m}, {t} thread(s):")
            with thread_limits(t):
                lins = {n: mlir_mx.Linear(q[n], threads=t) for n in NAMES}
                ours_bytes = sum(lin.nbytes for lin in lins.values())
                w4a8 = {n: mlir_mx.Linear(q[n], threads=t, activations="i8") for n in NAMES}
                numpy_mm = dense(deq_t)
                methods = {
                    "ours (mlir_mx.Linear)": lambda a, li=lins: mlp_forward(li, a),
                    "ours W4A8 (activations=i8)": lambda a, li=w4a8: mlp_forward(li, a),
                    "numpy f32": lambda a, mm=numpy_mm: mlp_forward(mm, a),
                }
                gg = None if skipped else _Ggml(q, d, f, m, t)
                if gg is not None:
                    methods["ggml MXFP4"] = gg
                try:
                    rows += _time_group(methods, x, ref64, ref32, m, t, samples, say, retries)
                finally:
                    if gg is not None:
                        gg.close()
    weight_bytes = {"ours": ours_bytes, "numpy f32": sum(a.nbytes for a in deq_t.values())}
    return dict(
        d=d,
        f=f,
        tokens=tokens,
        threads=threads,
        rows=rows,
        gguf_bytes=gguf_bytes,
        gguf_roundtrip_bit_exact=exact,
        weight_bytes=weight_bytes,
        bits_per_weight=8 * ours_bytes / (3 * d * f),
        ggml_skipped=skipped,
    )


def mlp_markdown(rec: dict) -> list[str]:
    """The MLP section of the markdown report."""
    lines = [
        f"## MLP {rec['d']} -> {rec['f']} -> {rec['d']}, MXFP4 weights (GGUF)",
        "",
        f"- GGUF file {rec['gguf_bytes']} bytes; round trip bit-exact: "
        f"{'yes' if rec['gguf_roundtrip_bit_exact'] else 'NO'}",
        f"- Our weights in memory: {rec['weight_bytes']['ours']} bytes "
        f"({rec['bits_per_weight']:.3f} bits per weight); numpy f32: "
        f"{rec['weight_bytes']['numpy f32']} bytes",
    ]
    if rec["ggml_skipped"]:
        lines.append(f"- ggml skipped: {rec['ggml_skipped']}")
    lines += [
        "",
        "| M | threads | method | median ms | spread | vs ours | max rel err vs f64 | vs f32 weights | others |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    ours = {
        (r["M"], r["threads"]): r["median_s"]
        for r in rec["rows"]
        if r["method"] == "ours (mlir_mx.Linear)"
    }
    for r in rec["rows"]:
        ratio = r["median_s"] / ours[(r["M"], r["threads"])]
        others = "?" if not r.get("cpu") else f"{r['cpu']['others']:.0%}"
        lines.append(
            f"| {r['M']} | {r['threads']} | {r['method']} | {r['median_s'] * 1e3:.3f} | "
            f"{r['spread']:.1%} | {ratio:.2f}x | {r['err_vs_f64']:.2e} | "
            f"{r['err_vs_f32_weights']:.2e} | {others} |"
        )
    return lines

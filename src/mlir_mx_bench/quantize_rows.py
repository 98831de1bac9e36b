"""``mx-bench --quantize``: converting an f32 matrix to MX, and back.

One standard-normal f32 matrix (default 8192 x 8192, 256 MiB), blocks of 32
along its rows (16 for ``nvfp4``, whose ``ours quantize`` row computes the
global scale too, as ``mlir_mx.quantize`` does, and ``ours quantize,
global_scale=`` is the kernel alone), per element format and thread count:

* ours: :func:`mlir_mx.convert.quantize_stored` (the compiled kernels; codes
  in their stored form, what ``MXArray.from_packed``, ``write_gguf`` and
  ``Linear`` take) and :func:`mlir_mx.dequantize` (MX -> f32; into a new
  array, whose pages the OS zeroes on first touch, and into a reused one,
  ``out=``); checked bit for bit against the oracle before they are timed
  (a mismatch fails the run);
* the oracle, :func:`mlir_mx.oracle.quantize` (numpy, one thread; timed
  at the lowest thread count only);
* ggml's ``ggml_quantize_chunk`` (ggml-python, when installed): MXFP4 for
  FP4 and Q8_0 (8-bit codes, f16 scale per 32) for the 8-bit formats, its
  nearest counterpart; one thread per row range at ``t`` threads, as
  llama.cpp's quantize tool splits a tensor;
* torchao's ``MXTensor.to_mx`` (when torch and torchao are installed;
  ``torch.set_num_threads``); whether its bytes equal the oracle's is
  recorded.

Rows give the median time, elements per second and GB/s of f32 input read
(4 bytes per element; written bytes are not counted), and for ours and the
oracle the peak of numpy allocations during one call (``tracemalloc``).
"""

from __future__ import annotations

import ctypes
import threading
import time
import tracemalloc

import numpy as np

from mlir_mx_bench.cases import BenchFailure
from mlir_mx_bench.machine import cpu_sample, other_load, thread_limits

__all__ = ["TARGETS", "quantize_markdown", "quantize_targets", "run_quantize"]

BLOCK = 32
#: The one format with another block size (E4M3 block scales: docs/numerics.md).
NVFP4 = "nvfp4"


def block_of(element: str) -> int:
    """The block size a format's rows use: 32, 16 for ``nvfp4``."""
    return 16 if element == NVFP4 else BLOCK

#: The conversion targets: elements per second of ``f32 -> MXFP4`` and
#: ``f32 -> MXFP8`` (quantize) and of every dequantize into a new array, with
#: all threads; quantize against ggml's quantize at the same thread count;
#: peak numpy allocations during a call against the bytes of its output.
TARGETS = {"rate": 1e9, "vs_ggml": 5.0, "peak_over_output": 1.1}


def _timed(fn, samples: int, budget_s: float = 20.0):
    """(median, min, max, samples) of single calls after a warm-up call; fewer
    samples (at least 2) when they would take longer than ``budget_s``."""
    t0 = time.perf_counter()
    fn()
    one = time.perf_counter() - t0
    n = max(2, min(samples, int(budget_s / max(one, 1e-9))))
    ts = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    ts.sort()
    return float(np.median(ts)), ts[0], ts[-1], n


def _peak(fn) -> int:
    """Peak numpy allocations (bytes) during one call of ``fn``."""
    tracemalloc.start()
    try:
        out = fn()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    del out
    return peak


def _ours_nvfp4(x, threads):
    import mlir_mx
    from mlir_mx import oracle

    want = oracle.quantize(x, NVFP4, axis=1)
    if not mlir_mx.quantize(x, NVFP4, axis=1, threads=threads).bitwise_equal(want):
        raise BenchFailure("WRONG RESULT: mlir_mx.quantize nvfp4 differs from the oracle")
    if not np.array_equal(mlir_mx.dequantize(want, threads), want.dequantize(), equal_nan=True):
        raise BenchFailure("WRONG RESULT: mlir_mx.dequantize nvfp4 differs from the oracle")
    g, out = want.global_scale, np.empty_like(x)
    return {
        "ours quantize": (lambda: mlir_mx.quantize(x, NVFP4, axis=1, threads=threads), True),
        "ours quantize, global_scale=": (
            lambda: mlir_mx.quantize(x, NVFP4, axis=1, threads=threads, global_scale=g), True
        ),
        "ours dequantize": (lambda: mlir_mx.dequantize(want, threads), True),
        "ours dequantize, out=": (lambda: mlir_mx.dequantize(want, threads, out=out), True),
    }


def _ours(x, element, threads):
    if element == NVFP4:
        return _ours_nvfp4(x, threads)
    import mlir_mx
    from mlir_mx import oracle
    from mlir_mx.convert import quantize_stored
    from mlir_mx.numerics import SCALE_DTYPE, MXArray

    codes, scales = quantize_stored(x, element, BLOCK, 1, threads)
    want = oracle.quantize(x, element, BLOCK, 1)
    got = MXArray.from_packed(codes, scales.view(SCALE_DTYPE), element, BLOCK, 1)
    if not got.bitwise_equal(want):
        raise BenchFailure(f"WRONG RESULT: mlir_mx.quantize {element} differs from the oracle")
    back = mlir_mx.dequantize(want, threads)
    if not np.array_equal(back, want.dequantize(), equal_nan=True):
        raise BenchFailure(f"WRONG RESULT: mlir_mx.dequantize {element} differs from the oracle")
    want.packed_codes()
    out = np.empty_like(x)
    return {
        "ours quantize": (lambda: quantize_stored(x, element, BLOCK, 1, threads), True),
        "ours dequantize": (lambda: mlir_mx.dequantize(want, threads), True),
        "ours dequantize, out=": (lambda: mlir_mx.dequantize(want, threads, out=out), True),
    }


def _ggml(x, element, threads):
    from mlir_mx_bench.ggml_baseline import ggml_available
    from mlir_mx_bench.ggml_baseline import load_ggml as load

    if ggml_available() or element == NVFP4:
        return {}
    gg = load()
    if element == "f4E2M1FN":
        typ, label = gg.GGML_TYPE_MXFP4, "ggml MXFP4"
    elif element == "f8E4M3FN":  # no MXFP8 in ggml: Q8_0, its 8-bit block format
        typ, label = gg.GGML_TYPE_Q8_0, "ggml Q8_0"
    else:
        return {}
    rows, cols = x.shape
    dst = np.empty(gg.ggml_row_size(typ, cols) * rows, np.uint8)
    src = x.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
    per = -(-rows // threads)

    def chunk(r0):
        n = min(per, rows - r0)
        gg.ggml_quantize_chunk(typ, src, dst.ctypes.data, r0 * cols, n, cols, None)

    def run():
        ts = [threading.Thread(target=chunk, args=(r0,)) for r0 in range(0, rows, per)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()

    return {f"{label} quantize": (run, None)}


def _torchao(x, element, threads):
    try:
        import torch

        from mlir_mx.interop.torchao import from_mxtensor, torchao_modules
    except ImportError:
        return {}
    try:
        _, MXTensor, _, elems = torchao_modules()
    except ImportError:
        return {}
    if element == NVFP4 or element not in elems:
        return {}
    from mlir_mx import oracle

    t = torch.from_numpy(x)

    def run():
        return MXTensor.to_mx(t, elems[element], block_size=BLOCK)

    exact = from_mxtensor(run()).bitwise_equal(oracle.quantize(x, element, BLOCK, 1))
    return {"torchao MXTensor.to_mx": (run, exact)}


def _methods(x, element, threads, oracle_row: bool):
    from mlir_mx import oracle

    out = _ours(x, element, threads)
    if oracle_row:
        bs = block_of(element)
        out["oracle numerics.quantize"] = (lambda: oracle.quantize(x, element, bs, 1), True)
    out.update(_ggml(x, element, threads))
    out.update(_torchao(x, element, threads))
    return out


def _measure(fn, samples: int, retries: int):
    """Timing and CPU share of others; repeated (after 5 s, up to ``retries``
    times) while other processes use more than 10 % of the cores."""
    for attempt in range(retries + 1):
        cpu0 = cpu_sample()
        timing = _timed(fn, samples)
        cpu = other_load(cpu0, cpu_sample())
        if cpu is None or cpu["others"] <= 0.1 or attempt == retries:
            return timing, cpu, attempt + 1
        time.sleep(5)
    raise AssertionError("unreachable")


def run_quantize(
    rows: int, cols: int, formats, threads, say, samples: int = 5, retries: int = 3
) -> dict:
    """The conversion benchmark; returns a record (rows of format x method x threads).

    Our rows are timed again (up to ``retries`` times) while other processes
    load the cores; the slow baselines are timed once."""
    from mlir_mx_bench.ggml_baseline import ggml_available

    blocks = f"blocks of {BLOCK}" + (f" ({NVFP4}: {block_of(NVFP4)})" if NVFP4 in formats else "")
    say(f"quantize: {rows} x {cols} f32 ({rows * cols * 4 / 2**20:.0f} MiB), {blocks}")
    x = np.random.default_rng(0).standard_normal((rows, cols), dtype=np.float32)
    out = []
    for element in formats:
        for t in threads:
            say(f"  {element}, {t} thread(s):")
            with thread_limits(t):
                for name, (fn, exact) in _methods(x, element, t, t == min(threads)).items():
                    tries = retries if name.startswith("ours") else 0
                    (med, lo, hi, n), cpu, attempts = _measure(fn, samples, tries)
                    peak = _peak(fn) if name.startswith(("ours", "oracle")) else None
                    out.append(
                        dict(
                            format=element,
                            method=name,
                            threads=t,
                            median_s=med,
                            min_s=lo,
                            spread=(hi - lo) / med,
                            samples=n,
                            elements_per_s=x.size / med,
                            input_gb_per_s=x.nbytes / med / 1e9,
                            bit_exact=exact,
                            peak_numpy_bytes=peak,
                            cpu=cpu,
                            attempts=attempts,
                        )
                    )
                    say(
                        f"    {name:<28} {med * 1e3:10.2f} ms  {x.size / med / 1e6:8.0f} M el/s "
                        f"{x.nbytes / med / 1e9:6.2f} GB/s"
                    )
    return dict(
        rows_=rows,
        cols=cols,
        block_size=BLOCK,
        formats=list(formats),
        threads=list(threads),
        rows=out,
        ggml_skipped=ggml_available(),
    )


def _output_bytes(rec: dict, element: str, method: str) -> int:
    """Bytes of one call's output: f32 for dequantize; the stored codes and
    the scales for quantize."""
    from mlir_mx.numerics import is_packed_storage, packed_shape, scale_shape

    shape = (rec["rows_"], rec["cols"])
    if "dequantize" in method:
        return 4 * shape[0] * shape[1]
    from mlir_mx.numerics.formats import E4M3_SCALED

    fmt = E4M3_SCALED.get(element, element)  # nvfp4's codes: E2M1
    codes = packed_shape(shape, fmt) if is_packed_storage(shape, fmt) else shape
    scales = scale_shape(shape, block_of(element) if element == NVFP4 else rec["block_size"], 1)
    return codes[0] * codes[1] + scales[0] * scales[1]


def _row(rec: dict, element: str, method: str, threads: int) -> dict | None:
    key = (element, method, threads)
    return next((r for r in rec["rows"] if (r["format"], r["method"], r["threads"]) == key), None)


def _at_least(target: str, element: str, t: int, value, measured: str, want: float) -> dict:
    """One target of a format at ``t`` threads: met when ``value`` (None: not
    measured, ``measured`` says why) is at least ``want``."""
    met = None if value is None else value >= want
    return dict(target=target, format=element, threads=t, measured=measured, met=met)


def _rate_target(rec, element, method, what, t) -> dict:
    r = _row(rec, element, method, t)
    rate = None if r is None else r["elements_per_s"]
    target = f"{what} >= {TARGETS['rate'] / 1e6:,.0f} M elements/s"
    measured = "not measured" if rate is None else f"{rate / 1e6:,.0f} M/s"
    return _at_least(target, element, t, rate, measured, TARGETS["rate"])


def _ggml_target(rec, element, t) -> dict:
    ours = _row(rec, element, "ours quantize", t)
    ggml = next(
        (
            r
            for r in rec["rows"]
            if r["format"] == element and r["threads"] == t and r["method"].startswith("ggml")
        ),
        None,
    )
    ratio = None if ours is None or ggml is None else ggml["median_s"] / ours["median_s"]
    target = f"quantize >= {TARGETS['vs_ggml']:g}x ggml at the same thread count"
    measured = "no ggml row" if ratio is None else f"{ratio:.1f}x {ggml['method']}"
    return _at_least(target, element, t, ratio, measured, TARGETS["vs_ggml"])


def _memory_target(rec, op: str) -> dict:
    """The largest peak / output over every format and thread count of ``op``."""
    worst = None
    for r in rec["rows"]:
        if r["method"] == f"ours {op}" and r["peak_numpy_bytes"] is not None:
            ratio = r["peak_numpy_bytes"] / _output_bytes(rec, r["format"], r["method"])
            if worst is None or ratio > worst[0]:
                worst = (ratio, r["format"], r["threads"])
    limit = TARGETS["peak_over_output"]
    return dict(
        target=f"{op}: peak extra memory <= {limit:g}x the output",
        format="all" if worst is None else f"worst: {worst[1]}",
        threads="all" if worst is None else worst[2],
        measured="not measured" if worst is None else f"{worst[0]:.3f}x",
        met=None if worst is None else worst[0] <= limit,
    )


def quantize_targets(rec: dict) -> list[dict]:
    """The targets (:data:`TARGETS`), each with its measured figure and whether
    it is met (None: not measured in this run), at the run's largest thread
    count ("all threads"): f32 -> MXFP4 / MXFP8 rates and against ggml,
    dequantize rates of every format, and the peak memory of ours."""
    from mlir_mx.numerics import ELEMENT_FORMATS

    t = max(rec["threads"])
    mx = [f for f in rec["formats"] if f in ELEMENT_FORMATS]  # nvfp4: not an element format
    quantized = [f for f in mx if ELEMENT_FORMATS[f].mx_name in ("MXFP4", "MXFP8")]
    out = []
    for f in quantized:
        what = f"f32 -> {ELEMENT_FORMATS[f].mx_name}"
        out += [_rate_target(rec, f, "ours quantize", what, t), _ggml_target(rec, f, t)]
    if NVFP4 in rec["formats"]:  # issue 54: NVFP4 quantize at >= 1 G elements/s
        out.append(_rate_target(rec, NVFP4, "ours quantize", "f32 -> NVFP4", t))
    out += [
        _rate_target(rec, f, "ours dequantize", "dequantize into a new array", t)
        for f in rec["formats"]
    ]
    return out + [_memory_target(rec, "quantize"), _memory_target(rec, "dequantize")]


def _targets_markdown(rec: dict) -> list[str]:
    size = f"{rec['rows_']} x {rec['cols']}"
    lines = [
        "",
        f"### Targets ({max(rec['threads'])} threads, the most in this run)",
        "",
        "Each target is stated for an 8192 x 8192 f32 input measured in one run"
        + ("." if size == "8192 x 8192" else f"; this run's input is {size}.")
        + " met: yes / **no** from the rows above; '-': not measured in this run.",
        "",
        "| target | format | threads | measured | met |",
        "|---|---|---|---|---|",
    ]
    for x in quantize_targets(rec):
        met = {True: "yes", False: "**no**", None: "-"}[x["met"]]
        lines.append(
            f"| {x['target']} | {x['format']} | {x['threads']} | {x['measured']} | {met} |"
        )
    return lines


def quantize_markdown(rec: dict) -> list[str]:
    """The conversion section of the markdown report."""
    n = rec["rows_"] * rec["cols"]
    lines = [
        f"## Converting a {rec['rows_']} x {rec['cols']} f32 matrix "
        f"({n * 4 / 2**20:.0f} MiB), blocks of {rec['block_size']} along rows",
        "",
        "ours quantize = `mlir_mx.convert.quantize_stored` (the compiled kernels, output in "
        "its stored form); ours dequantize = `mlir_mx.dequantize` (MX -> f32). GB/s: f32 "
        "input read (quantize) or f32 output written (dequantize), 4 bytes per element. "
        "peak MiB: numpy allocations during one call (tracemalloc). vs ours: this time / "
        "ours quantize at the same thread count. others: the share of the cores other "
        "processes used during the timing; our rows are timed again (up to 3 times) while "
        "it is above 10%, the baselines once.",
        "",
        "| format | threads | method | median ms | M elements/s | GB/s | spread | vs ours "
        "| bit-exact | peak MiB | others |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    if rec["ggml_skipped"]:
        lines.insert(1, f"\n- ggml skipped: {rec['ggml_skipped']}")
    ours = {
        (r["format"], r["threads"]): r["median_s"]
        for r in rec["rows"]
        if r["method"] == "ours quantize"
    }
    for r in rec["rows"]:
        exact = {True: "yes", False: "no", None: "-"}[r["bit_exact"]]
        peak = "-" if r["peak_numpy_bytes"] is None else f"{r['peak_numpy_bytes'] / 2**20:.1f}"
        others = "?" if not r.get("cpu") else f"{r['cpu']['others']:.0%}"
        if r.get("attempts", 1) > 1:
            others += f" (timed {r['attempts']}x)"
        lines.append(
            f"| {r['format']} | {r['threads']} | {r['method']} | {r['median_s'] * 1e3:.1f} | "
            f"{r['elements_per_s'] / 1e6:.0f} | {r['input_gb_per_s']:.2f} | {r['spread']:.0%} | "
            f"{r['median_s'] / ours[(r['format'], r['threads'])]:.2f}x | {exact} | {peak} | "
            f"{others} |"
        )
    return lines + _targets_markdown(rec)

"""The conversion report's targets: computed from the measured rows."""

from __future__ import annotations

from mlir_mx.numerics import ELEMENT_FORMATS
from mlir_mx_bench.quantize_rows import TARGETS, quantize_markdown, quantize_targets

FP4 = next(n for n, f in ELEMENT_FORMATS.items() if f.mx_name == "MXFP4")
INT8 = next(n for n, f in ELEMENT_FORMATS.items() if f.mx_name == "MXINT8")
N = 1024 * 1024


def _row(fmt, method, threads, seconds, peak=None):
    return dict(
        format=fmt, method=method, threads=threads, median_s=seconds, min_s=seconds,
        spread=0.0, samples=3, elements_per_s=N / seconds, input_gb_per_s=4 * N / seconds / 1e9,
        bit_exact=True, peak_numpy_bytes=peak, cpu=None, attempts=1,
    )  # fmt: skip


def _record(rows):
    return dict(rows_=1024, cols=1024, block_size=32, formats=[FP4, INT8], threads=[1, 2],
                rows=rows, ggml_skipped=None)  # fmt: skip


def test_targets_follow_the_measured_rows():
    fast, slow = N / 2e9, N / 0.5e9  # 2,000 and 500 M elements/s
    fp4_out = N // 2 + N // 32  # packed codes and scales
    rows = [
        _row(FP4, "ours quantize", 1, slow),  # below the rate, but not at "all threads"
        _row(FP4, "ours quantize", 2, fast, peak=fp4_out),
        _row(FP4, "ggml MXFP4 quantize", 2, 4 * fast),  # only 4x ours: missed
        _row(FP4, "ours dequantize", 2, slow, peak=int(4 * N * 1.2)),  # 1.2x its output
        _row(INT8, "ours dequantize", 2, fast, peak=4 * N),
    ]
    got = {(t["target"].split(" ")[0], t["format"]): t for t in quantize_targets(_record(rows))}
    assert got[("f32", FP4)]["met"] is True and got[("f32", FP4)]["threads"] == 2
    assert got[("quantize", FP4)]["met"] is False and got[("quantize", FP4)]["measured"].startswith(
        "4.0x"
    )
    assert got[("dequantize", FP4)]["met"] is False
    assert got[("dequantize", INT8)]["met"] is True
    mem = {t["target"]: t for t in quantize_targets(_record(rows)) if "memory" in t["target"]}
    quant, deq = (
        next(t for k, t in mem.items() if k.startswith(op)) for op in ("quantize", "dequantize")
    )
    assert quant["met"] is True and quant["measured"] == "1.000x"
    assert deq["met"] is False and deq["format"] == f"worst: {FP4}"
    assert TARGETS["peak_over_output"] == 1.1


def test_unmeasured_targets_are_not_counted_as_met():
    targets = quantize_targets(_record([]))
    assert targets and all(t["met"] is None for t in targets)
    md = "\n".join(quantize_markdown(_record([])))
    assert "### Targets (2 threads" in md and "| yes |" not in md and "| **no** |" not in md

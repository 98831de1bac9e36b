"""``mx-bench --quantize --formats nvfp4``: the rows run, are checked against the
oracle before they are timed, and report blocks of 16 (quick size; the
timings themselves are mx-bench's business, not a test's)."""

from __future__ import annotations

from mlir_mx_bench.options import element_spec
from mlir_mx_bench.quantize_rows import block_of, quantize_markdown, quantize_targets, run_quantize


def test_nvfp4_rows_run_and_are_exact():
    """run_quantize raises BenchFailure where ours differs from the oracle."""
    assert element_spec("NVFP4") == "nvfp4" and block_of("nvfp4") == 16
    rec = run_quantize(32, 64, ["nvfp4"], [1], lambda _msg: None, samples=2, retries=0)
    methods = {r["method"] for r in rec["rows"]}
    assert {"ours quantize", "ours quantize, global_scale=", "ours dequantize",
            "oracle numerics.quantize"} <= methods  # fmt: skip
    assert {r["format"] for r in rec["rows"]} == {"nvfp4"}
    # The report's targets name NVFP4's quantize rate (they raised KeyError before).
    targets = [t["target"] for t in quantize_targets(rec)]
    assert any(t.startswith("f32 -> NVFP4 >= 1,000 M elements/s") for t in targets), targets
    assert any("NVFP4" in line for line in quantize_markdown(rec))

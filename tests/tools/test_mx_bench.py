"""mx-bench: the harness works end to end (--quick), a wrong result fails the
run, and bad arguments get one-line errors.  No timing is asserted."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mlir_mx.host import default_thread_counts
from mlir_mx_bench import loop as harness
from mlir_mx_bench import ours
from mlir_mx_bench.baselines import torch_available
from mlir_mx_bench.cli import main
from mlir_mx_bench.ggml_baseline import ggml_available
from mlir_mx_bench.openvino_baseline import openvino_available

ROW_FIELDS = {
    "shape",
    "M",
    "N",
    "K",
    "format",
    "block_size",
    "threads",
    "method",
    "kind",
    "method_threads",
    "median_s",
    "min_s",
    "max_s",
    "spread",
    "samples",
    "bytes",
    "gb_per_s",
    "gflop_per_s",
    "roof",
    "roof_fraction",
    "max_err_over_bound",
    "compile_s",
}


@pytest.fixture(autouse=True)
def _user_data_home(tmp_path_factory, monkeypatch):
    """The default --out (a user folder) is a temporary one here: a test that
    parses options without --out writes nothing under the real home."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path_factory.mktemp("xdg")))


def test_quick_run_writes_json_and_markdown(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "mlir_mx_bench.cli", "--quick", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    counts = default_thread_counts()  # the default --threads: 1 and all cores
    assert f"5x40x96 f8E4M3FN at {counts[-1]} thread(s):" in proc.stdout  # progress lines
    assert proc.stdout.splitlines()[-1].startswith("summary: tiny shapes measure call overhead")
    [js] = tmp_path.glob("mx-bench-*-quick.json")
    [md] = tmp_path.glob("mx-bench-*-quick.md")
    rec = json.loads(js.read_text())
    assert rec["command"] == f"mx-bench --quick --out {tmp_path}"
    assert rec["machine"]["cpu"] and "avx512f" in rec["machine"]["cpu_features"]
    assert {"loadavg_start", "loadavg_end", "cpu", "total_s"} <= set(rec)
    assert [r["threads"] for r in rec["roofs"]] == list(counts)
    assert all(r["bandwidth"] > 0 and r["peak"] > 0 for r in rec["roofs"])
    rows = rec["rows"]
    assert all(ROW_FIELDS <= set(r) for r in rows)
    assert all(0 <= r["max_err_over_bound"] <= 1 for r in rows)
    # quick timings are too short to attribute CPU time: None, or a share
    assert all(r["cpu"] is None or 0 <= r["cpu"]["others"] <= 1 for r in rows)
    # the host probes around each timing: two shares in (0, 1], the row's the lower
    assert all(0 < r["host"]["share"] == min(r["host"]["before"], r["host"]["after"]) <= 1
               for r in rows)  # fmt: skip
    assert "- Host contention (per row in the 'host' column)" in md.read_text()
    methods = {(r["shape"], r["threads"], r["method"]) for r in rows}
    for shape in ("1x64x128", "5x40x96"):
        for t in counts:
            for m in (
                "numpy f32",
                "emulation mx x mx",
                "emulation mx x f32",
                "ours mx x mx",
                "ours mx x f32",
            ):
                assert (shape, t, m) in methods
    ours_rows = [r for r in rows if r["kind"] == "ours"]
    # our kernels run on the group's thread count
    assert all(r["compile_s"] > 0 and r["method_threads"] == r["threads"] for r in ours_rows)
    skipped = {s["method"] for s in rec["skipped"]}
    for name, why, family in (
        ("torch f32", torch_available(), "torch f32/bf16"),
        ("ggml Q8_0", ggml_available(), "ggml Q8_0/MXFP4"),
    ):
        present = any(r["method"] == name for r in rows)
        assert present == (why is None) and (family in skipped) == (why is not None)
    # openvino's rows are MXFP4's (issue 51): this f8E4M3FN run skips them, with a reason
    ov = "openvino MXFP4" if openvino_available() else "openvino MXFP4 (other weight formats)"
    assert ov in skipped and not any(r["method"].startswith("openvino") for r in rows)
    # the auto-selected kernels, mx x mx with each other schedule that
    # supports the problem (the dot schedules where the CPU has the units),
    # and Linear on the dot kernels where they serve the shape
    from mlir_mx.kernels import SCHEDULES, Problem, plan_kernel, shape_class

    expected = {"ours mx x mx", "ours mx x f32", "ours Linear f32 x"}  # Linear: every problem
    for m, n, k in ((1, 64, 128), (5, 40, 96)):
        prob = Problem(m, n, k, 32, "f8E4M3FN", "f8E4M3FN")
        chosen = plan_kernel(prob, "auto", 1).name
        expected |= {f"ours mx x mx {s.name}" for s in SCHEDULES.values()
                     if s.name != chosen and s.supports(prob)
                     and (s.shape_class != shape_class(1) or m == 1)}  # fmt: skip
        if SCHEDULES[chosen].unit is not None:  # a dot schedule: Linear's rows too
            expected |= {"ours Linear mx x mx", "ours Linear f32->f8E4M3FN"}
    # activations="bf16" (bf16_rows): the automatic choice on every f32 problem,
    # and the vdpbf16ps kernels forced where the CPU has them but the choice
    # keeps the f32 kernels (5 x 40 x 96 is small: bf16-small serves it)
    from mlir_mx.host import bf16_dot_pays, has_features

    expected.add("ours Linear f32->bf16")
    if has_features("avx512_bf16", "avx512bw") and not bf16_dot_pays():
        expected.add("ours Linear f32->bf16 vdpbf16ps")
    assert {q["ours"] for q in rec["ratios"]} == expected
    text = md.read_text()
    assert f"`mx-bench --quick --out {tmp_path}`" in text
    isa, cpu_isa = rec["machine"]["isa_level"], rec["machine"]["isa_level_cpu"]
    assert f"| 5x40x96 | f8E4M3FN | {counts[-1]} | ours mx x mx | {isa} | {counts[-1]} |" in text
    assert f"| 5x40x96 | f8E4M3FN | {counts[-1]} | numpy f32 | {cpu_isa} |" in text
    assert "## Our kernels against each baseline" in text


class _WrongRunner:
    """Computes the right shape and adds 1 to one element."""

    def invoke(self, name, qa, qb, acc, n):
        from mlir_mx import oracle

        acc += n * (oracle.dequantize(qa) @ oracle.dequantize(qb))
        acc[0, 0] += 1.0


def test_wrong_result_is_a_failure_not_a_row(tmp_path, monkeypatch, capsys):
    wrong = ours.OurKernel("ours broken", "mx-ab", _WrongRunner, 1, "none")
    monkeypatch.setattr(ours, "our_kernels", lambda *a, **k: [wrong])
    monkeypatch.setattr(harness, "FAMILIES", ())
    rc = main(["--quick", "--shapes", "2x8x64", "--threads", "1", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert rc == 1
    assert err.startswith("mx-bench: error: WRONG RESULT: ours broken at 2x8x64 f8E4M3FN")
    assert "first at [0, 0]" in err
    assert not list(tmp_path.iterdir())


def test_kernel_that_does_not_compile_fails_the_run(tmp_path, monkeypatch, capsys):
    from mlir_mx.execution import Runner

    def build():
        return Runner("func.func @bench(%x: i32) {\n  return %y : i32\n}\n")

    broken = ours.OurKernel("ours bad ir", "mx-ab", build, 1, "none")
    monkeypatch.setattr(ours, "our_kernels", lambda *a, **k: [broken])
    monkeypatch.setattr(harness, "FAMILIES", ())
    rc = main(["--quick", "--shapes", "1x8x32", "--threads", "1", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert rc == 1 and err.count("\n") == 1
    assert err.startswith("mx-bench: error: ours bad ir at 1x8x32 f8E4M3FN: does not compile: ")


@pytest.mark.parametrize(
    "args, message",
    [
        (["--shapes", "1x8x30"], "K=30 is not a multiple of the block size 32"),
        (["--shapes", "8x8"], "bad shape '8x8'"),
        (["--formats", "f9E9"], "unknown MX element format 'f9E9'"),
        (["--formats", "i8:f9E9"], "unknown MX element format 'f9E9'"),
        (["--formats", "i8:i8:i8"], "--formats: expected F or A:B"),
        (["--threads", "0"], "--threads: values must be positive"),
        (["--threads", "two"], "--threads: expected comma-separated integers"),
        (["--threads", "1,2000"], "--threads: expected an integer in [1, 1024], got 2000"),
        (["--mlp", "100,200"], "--mlp: expected D,F, multiples of 32, got '100,200'"),
        (["--tag", "a/b"], "--tag: use letters"),
        (["--samples", "1"], "--samples: at least 3"),
        (["--min-host", "1.5"], "--min-host: a share from 0 to 1, got 1.5"),
        (["--min-host", "-0.1"], "--min-host: a share from 0 to 1, got -0.1"),
        (["--mlp", "--min-host", "0.5"], "--min-host is not used by the MLP benchmark"),
        (["--bogus"], "unrecognized arguments: --bogus"),
        (["--quantize", "64x30"], "--quantize: expected RxC with C a multiple of 32"),
    ],
)
def test_bad_arguments(args, message, capsys):
    assert main(args) == 2  # a usage error: argparse's exit status
    err = capsys.readouterr().err
    assert err.startswith("mx-bench: error: ") and message in err and err.count("\n") == 1


def test_help(capsys):
    assert main(["--help"]) == 0
    assert "--threads" in capsys.readouterr().out


def test_our_kernels_are_runner_constructions():
    from mlir_mx.roofline.variants import Shape

    vs = ours.our_kernels(Shape(1, 8, 32), threads=2)
    assert {v.operands for v in vs} == {"mx-ab", "mx-a"}
    runner = vs[0].build()
    acc = np.zeros((1, 8), np.float32)
    assert "bench" in runner.functions and acc.shape == (1, 8)


def test_default_threads_and_sizes():
    """--threads defaults to 1 and all cores; --mlp / --quantize without a
    size take their default size, the --quick one under --quick."""
    from mlir_mx_bench.cli import _parse

    opts, _quiet = _parse(["--mlp"])
    assert opts.threads == list(default_thread_counts()) and opts.mlp == (4096, 14336)
    assert (opts.shapes, opts.tag) == ([], "default-mlp")
    opts, _quiet = _parse(["--quantize", "--quick", "--threads", "3,1"])
    assert (opts.quantize, opts.mlp, opts.threads, opts.tag) == ((128, 256), None, [3, 1], "quick-quantize")
    opts, _quiet = _parse(["--quantize", "64x96", "--quick"])
    assert (opts.quantize, opts.shapes, opts.mlp_tokens) == ((64, 96), [], (1, 128))


def test_formats_take_mixed_pairs():
    from mlir_mx.roofline.variants import Shape
    from mlir_mx_bench.cases import make_problem
    from mlir_mx_bench.cli import _parse

    opts, _quiet = _parse(["--formats", "i8:f4E2M1FN, f8E4M3FN,i8:i8", "--quick"])
    assert opts.formats == ["i8:f4E2M1FN", "f8E4M3FN", "i8"]
    p = make_problem(Shape(2, 64, 64), "f4E2M1FN", a_element="i8")
    assert (p.qa.element, p.qb.element, p.label) == ("i8", "f4E2M1FN", "i8:f4E2M1FN")


def test_an_out_that_cannot_be_a_directory_is_a_usage_error(tmp_path, capsys):
    """Round 2 reproducer f6_mx_bench_out_traceback.sh: ``--out`` naming a file or a
    path that cannot be created gave a traceback; now one ``mx-bench: error:`` line
    and exit 2 (a usage error), before any benchmark runs (as mx-roofline)."""
    afile = tmp_path / "afile"
    afile.write_text("keep")
    for out, message in [
        (afile, f"--out '{afile}' exists and is not a directory"),
        (afile / "x", f"cannot create --out directory '{afile / 'x'}': Not a directory"),
        ("/dev/null/x", "cannot create --out directory '/dev/null/x': Not a directory"),
    ]:
        assert main(["--quick", "--quiet", "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert err == f"mx-bench: error: {message}\n"
    assert afile.read_text() == "keep"


def test_results_that_cannot_be_written_are_an_error_not_half_a_file(tmp_path, monkeypatch, capsys):
    from mlir_mx import files

    def full(path, text, encoding="utf-8"):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(harness, "FAMILIES", ())
    monkeypatch.setattr("mlir_mx_bench.results.write_text", full)
    rc = main(["--quick", "--quiet", "--shapes", "1x8x32", "--threads", "1", "--out", str(tmp_path)])
    assert rc == 1
    err = capsys.readouterr().err
    assert err == f"mx-bench: error: cannot write the results to '{tmp_path}': No space left on device\n"
    assert not list(tmp_path.iterdir())
    assert files.write_text is not full


@pytest.mark.parametrize("where", [pytest.param("process", marks=pytest.mark.slow), "in-process"])
def test_quick_quantize_run(tmp_path, capsys, where):
    """``--quantize``: ours (checked against the oracle first) and the oracle
    per format and thread count, written to the JSON and markdown results.
    By default through ``main`` in this process (a process of its own imports
    torch again for the machine record; ``test_quick_run_writes_json_and_markdown``
    runs the command in one), with ``-m slow`` in a process too."""
    args = ["--quantize", "--quick", "--threads", "1,2", "--formats", "f4E2M1FN,i8",
            "--out", str(tmp_path)]  # fmt: skip
    if where == "process":
        proc = subprocess.run([sys.executable, "-m", "mlir_mx_bench.cli", *args],
                              capture_output=True, text=True, timeout=600)  # fmt: skip
        assert proc.returncode == 0, proc.stderr
    else:
        assert main(args) == 0, capsys.readouterr().err
    [js] = tmp_path.glob("mx-bench-*-quick-quantize.json")
    rec = json.loads(js.read_text())["quantize"]
    assert (rec["rows_"], rec["cols"]) == (128, 256)
    got = {(r["format"], r["method"], r["threads"]) for r in rec["rows"]}
    for fmt in ("f4E2M1FN", "i8"):
        assert {(fmt, "ours quantize", 1), (fmt, "ours quantize", 2),
                (fmt, "ours dequantize", 2), (fmt, "oracle numerics.quantize", 1)} <= got  # fmt: skip
    assert all(r["bit_exact"] for r in rec["rows"] if r["method"].startswith("ours"))
    if not ggml_available():
        assert ("f4E2M1FN", "ggml MXFP4 quantize", 2) in got
    md = next(tmp_path.glob("mx-bench-*-quick-quantize.md")).read_text()
    assert "## Converting a 128 x 256 f32 matrix" in md


def test_torch_bf16_skips_large_shapes_where_it_is_emulated(monkeypatch):
    """torch's bf16 matmul without a bf16 unit ran at 0.3 GFLOP/s (32 s a call
    at 256x4096x4096 on Zen 3): shapes over BF16_EMULATED_MAX_MACS skip its
    row with the reason there, and keep it where the CPU has the unit or the
    shape is small; the loop records a skipped item of a family's list."""
    pytest.importorskip("torch", reason="the torch rows need torch")
    from mlir_mx.roofline.variants import Shape
    from mlir_mx_bench import baselines, loop
    from mlir_mx_bench.cases import make_problem
    from mlir_mx_bench.method import Skipped

    p = make_problem(Shape(2, 64, 64), "f8E4M3FN")  # 8,192 multiply-adds
    monkeypatch.setattr(baselines, "BF16_EMULATED_MAX_MACS", 8191)
    monkeypatch.setattr(baselines, "torch_bf16_emulated", lambda: "the CPU (AVX2) has no bf16 dot unit")
    got = baselines.torch_methods(p, 1)
    assert [m.name for m in got] == ["torch f32", "torch bf16 (large shapes)"]
    assert isinstance(got[1], Skipped) and "AVX2" in got[1].reason and "8,191" in got[1].reason
    monkeypatch.setattr(loop, "FAMILIES", (baselines.torch_methods,))
    monkeypatch.setattr(loop, "our_methods", lambda *a: [])
    monkeypatch.setattr(loop, "_measure", lambda p, m, *a: {"method": m.name})
    skipped, said = {}, []
    rows = loop._group(p, 1, None, None, None, skipped, said.append)
    assert rows == [{"method": "torch f32"}] and list(skipped) == ["torch bf16 (large shapes)"]
    assert any("skipping torch bf16 (large shapes)" in s for s in said)
    monkeypatch.setattr(baselines, "BF16_EMULATED_MAX_MACS", 8192)  # not larger: kept
    assert [m.name for m in baselines.torch_methods(p, 1)] == ["torch f32", "torch bf16"]
    monkeypatch.setattr(baselines, "BF16_EMULATED_MAX_MACS", 8191)
    monkeypatch.setattr(baselines, "torch_bf16_emulated", lambda: None)  # the CPU has the unit
    assert [m.name for m in baselines.torch_methods(p, 1)] == ["torch f32", "torch bf16"]
    from mlir_mx.host import isa_level

    level = isa_level(masked=False)  # the real CPU's: what torch dispatches on
    want = None if ("BF16" in level or "AMX" in level) else f"the CPU ({level}) has no bf16 dot unit"
    monkeypatch.undo()
    assert baselines.torch_bf16_emulated() == want


def test_model_results_are_written_atomically_and_a_failure_is_a_tool_error(tmp_path, monkeypatch):
    """Round 4's audit of every file the project writes: ``--model``'s and
    ``--model gpt-oss``'s results go through ``mlir_mx.files`` too, the
    markdown rendered before either file is touched."""
    from mlir_mx_bench import cli
    from mlir_mx_bench.models.llama import report

    def render(record):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(report, "model_markdown", render)
    record = {"date": "2026-12-05T00:00", "tag": "t"}
    with pytest.raises(cli.ToolError, match=f"^cannot write the results to '{tmp_path}': No space"):
        cli._written(lambda: report.write_model_results(record, tmp_path), tmp_path)
    assert not list(tmp_path.iterdir())
    monkeypatch.setattr(report, "model_markdown", lambda record: "# ok\n")
    js, md = report.write_model_results(record, tmp_path)
    assert md.read_text() == "# ok\n" and '"tag": "t"' in js.read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == [js.name, md.name]  # no temporary left


def test_results_go_to_a_user_folder_by_default(tmp_path, monkeypatch):
    """No --out: $XDG_DATA_HOME/mlir-mx/bench-results, else (unset, empty or
    relative) ~/.local/share/mlir-mx/bench-results; never bench/results unless
    asked."""
    from mlir_mx_bench.cli import _parse
    from mlir_mx_bench.console import default_out_dir

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    opts, _quiet = _parse(["--quick"])
    assert opts.out == tmp_path / "data" / "mlir-mx" / "bench-results" and opts.out.is_dir()
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for xdg in ("", "relative/data"):
        monkeypatch.setenv("XDG_DATA_HOME", xdg)
        assert default_out_dir() == tmp_path / "home" / ".local" / "share" / "mlir-mx" / "bench-results"
    monkeypatch.delenv("XDG_DATA_HOME")
    opts, _quiet = _parse(["--quick", "--mlp"])
    assert opts.out == tmp_path / "home" / ".local" / "share" / "mlir-mx" / "bench-results"
    monkeypatch.chdir(tmp_path)
    opts, _quiet = _parse(["--quick", "--out", "bench/results"])
    assert opts.out == Path("bench/results")


def _row(shape, threads, method, ms, kind="ours"):
    return {"shape": shape, "format": "f8E4M3FN", "threads": threads, "method": method,
            "kind": kind, "median_s": ms / 1e3}  # fmt: skip


def test_quick_summary_is_computed_from_the_rows():
    from mlir_mx_bench.console import quick_summary

    rows = [
        _row("1x64x128", 1, "numpy f32", 0.001, "baseline"),
        _row("1x64x128", 1, "ours mx x mx", 0.004),
        _row("1x64x128", 1, "ours mx x f32", 0.005),
        _row("4x512x512", 1, "numpy f32", 0.100, "baseline"),
        _row("4x512x512", 1, "ours mx x mx", 0.200),
        _row("4x512x512", 2, "numpy f32", 0.100, "baseline"),
        _row("4x512x512", 2, "ours mx x mx", 0.040),
    ]
    line = quick_summary(rows)
    assert line.startswith("summary: tiny shapes measure call overhead")
    assert "numpy f32 wins at 1x64x128 (up to 8192 MACs; our fastest at 0.25x its speed)" in line
    # the best thread count counts: 0.100 / 0.040 at 2 threads
    assert "ours win at 4x512x512 (from 1048576 MACs; up to 2.50x numpy)" in line
    assert line.endswith("run without --quick for the 8192-wide shapes (minutes)")
    assert "ours win at none of these shapes" in quick_summary(rows[:3])


def test_the_rows_table_is_aligned_with_long_method_names():
    from mlir_mx_bench.console import rows_table

    long = "ours Linear f32->f8E4M3FN with a much longer name than any column"
    lines = rows_table([
        _row("1x64x128", 1, "numpy f32", 0.001, "baseline"),
        _row("1x64x128", 1, long, 0.004),
        _row("256x4096x4096", 16, "ours mx x mx", 12.5),
    ])  # fmt: skip
    assert len(lines) == 4 and lines[0].startswith("shape")
    # each column starts at the same place on every line
    for head in ("format", "method"):
        col = lines[0].index(head)
        assert all(line[col - 2 : col] == "  " and line[col] != " " for line in lines)
    ends = {len(line) for line in lines}  # the last column is right-aligned
    assert ends == {len(lines[0])}
    assert lines[2].split()[-1] == "0.25x" and lines[3].endswith(" -")


def test_min_host_default_and_off():
    """The host probe's threshold: 0.85 unless given; 0 is accepted (no probes)."""
    from mlir_mx_bench.cli import _parse

    assert _parse(["--shapes", "1x8x32"])[0].min_host == 0.85
    assert _parse(["--shapes", "1x8x32", "--min-host", "0"])[0].min_host == 0.0

"""The mx-roofline CLI: the table on the M4 preset, plots, and one-line errors."""

from __future__ import annotations

import pytest

from mlir_mx.tools.mx_roofline import main


def test_table_m4(capsys, mx_to_linalg):
    assert (
        main(
            ["--shape", "32x64x64", "--shape", "1x64x64", "--variants", "f32,mx-a,mx-ab", "--quiet"]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "m4: BW 120.0 GB/s, peak 560.0 GFLOP/s" in out
    lines = {
        tuple(ln.split()[:2]): ln.split()
        for ln in out.splitlines()
        if ln.split()[:1] in (["f32"], ["mx-a"], ["mx-ab"])
    }
    f32 = lines[("f32", "32x64x64")]
    assert f32[2:5] == ["32,768", "262,144", "262,144"] and "468.1" in f32
    mx = lines[("mx-a", "32x64x64")]
    assert (
        mx[2:8] == ["26,688", "393,216", "262,144", "131,072", "14.734", "560.0"] and "702.2" in mx
    )
    assert "139.2" in lines[("mx-a", "1x64x64")] and "88.3" in lines[("mx-a", "1x64x64")]
    assert "4,546" in lines[("mx-ab", "1x64x64")]
    assert "mx-a vs f32 at 32x64x64: 1.84x = 1.23x bytes x 1.50x FLOPs; modelled time 1.50x" in out
    assert "mx-a vs f32 at 1x64x64: 1.52x = 1.01x bytes x 1.50x FLOPs" in out


def test_plots_and_breakdown(tmp_path, capsys, mx_to_linalg):
    assert main(["--variants", "f32,mx-a", "--out", str(tmp_path), "--breakdown", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "A scale" in out and "C (accumulator)" in out
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["roofline.png", "roofline.svg", "time.png", "time.svg"]
    assert "1.84x = 1.23x bytes x 1.50x FLOPs" in (tmp_path / "roofline.svg").read_text()


def test_report_writes_a_results_page(tmp_path, capsys, mx_to_linalg):
    """--report: the dated plots and a results page with the machine, the table
    and the measured timings (what bench/roofline.py used to write)."""
    import datetime

    argv = ["--shape", "1x64x64", "--variants", "f32,mx-ab-blocked", "--machine", "m4",
            "--measure-kernels", "--report", "--out", str(tmp_path), "--quiet"]  # fmt: skip
    assert main(argv) == 0
    date = datetime.date.today().isoformat()
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == sorted(
        [f"roofline-{date}.md", f"roofline-{date}.png", f"roofline-{date}.svg",
         f"time-{date}.png", f"time-{date}.svg"]
    )  # fmt: skip
    page = (tmp_path / f"roofline-{date}.md").read_text()
    assert "Command: `mx-roofline --shape 1x64x64" in page
    assert "core(s) available" in page and "features:" in page  # host.machine_description
    assert page.count("| mx-ab-blocked | 1x64x64 |") == 1 and "| f32 | 1x64x64 |" in page
    assert main(["--report", "--quiet"]) == 2
    assert "--report needs --out" in capsys.readouterr().err


def test_blocked_variant_never_fails(capsys, mx_to_linalg):
    assert main(["--shape", "1x64x64", "--variants", "f32,mx-ab-blocked", "--quiet"]) == 0
    out = capsys.readouterr().out
    row = next(ln for ln in out.splitlines() if ln.startswith("mx-ab-blocked"))
    assert "unavailable" in row or "1x64x64" in row


def test_ir_file(tmp_path, capsys, mx_to_linalg):
    from mlir_mx.roofline.variants import Shape, variant_module_text

    f = tmp_path / "k.mlir"
    f.write_text(variant_module_text("mx-a", Shape(32, 64, 64)))
    assert main([str(f), "--function", "kernel", "--matmul-lowering", "fused", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "k.mlir:@kernel" in out and "26,688" in out and "393,216" in out


@pytest.mark.parametrize(
    "argv, message, rc",
    [
        (["--shape", "32x64"], "bad shape '32x64'", 2),
        (["--shape", "4x4x33"], "not a multiple of the block size", 2),
        (["--variants", "f32,mx-z"], "unknown variant 'mx-z'", 2),
        (["--machine", "m9"], "unknown machine 'm9'", 2),
        (["--element", "f7"], "unknown element type 'f7'", 2),
        (["/nonexistent/k.mlir"], "cannot read '/nonexistent/k.mlir'", 1),  # input, not usage
        (["--measure-kernels", "--shape", "99999999x99999x99968"], "needs about", 2),
        (["--bogus"], "unrecognized arguments", 2),
        (["--shape", "32x64x64", "--block-size", "0"], "--block-size must be a positive integer", 2),
        (["--shape", "32x64x64", "--block-size", "-32"], "--block-size must be a positive integer", 2),
        (["--shape", "32x64x64", "--out", "/proc/nope"], "cannot create --out directory", 2),
    ],
)
def test_errors(capsys, argv, message, rc):
    assert main(argv + ["--quiet"]) == rc
    err = capsys.readouterr().err
    assert err.startswith("mx-roofline: error: ") and message in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_invalid_ir(tmp_path, capsys):
    f = tmp_path / "bad.mlir"
    f.write_text("func.func @f( {\n")
    assert main([str(f), "--quiet"]) == 1
    err = capsys.readouterr().err
    # a located diagnostic, as every tool prints it (line, caret)
    assert err.startswith(f"{f}:1:14: error: expected non-function type")
    assert "Traceback" not in err


def test_out_must_not_be_a_file(tmp_path, capsys):
    f = tmp_path / "exists.txt"
    f.write_text("keep me")
    assert main(["--shape", "32x64x64", "--out", str(f), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("mx-roofline: error: ") and "exists and is not a directory" in err
    assert f.read_text() == "keep me"


@pytest.mark.parametrize(
    "text", ["", "// only a comment\n", "module {\n  module {\n    func.func @f() { return }\n  }\n}\n"]
)
def test_nothing_to_model_is_an_error(tmp_path, capsys, text):
    f = tmp_path / "k.mlir"
    f.write_text(text)
    assert main([str(f), "--quiet"]) == 1
    captured = capsys.readouterr()
    assert "nothing to model" in captured.err and "Traceback" not in captured.err
    assert captured.out == ""  # no empty table


def test_help_returns_0(capsys):
    assert main(["--help"]) == 0
    assert "usage: mx-roofline" in capsys.readouterr().out


def test_failing_lowering_is_a_located_diagnostic(tmp_path, capsys):
    t = "!mx.tensor<4x32xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>"
    f = tmp_path / "k.mlir"
    f.write_text(
        f"func.func @f(%c: i1, %x: tensor<4x32xf32>) -> tensor<4x32xf32> {{\n"
        f"  %q = mx.quantize_block %x : tensor<4x32xf32> -> {t}\n"
        f"  %r = scf.if %c -> ({t}) {{\n    scf.yield %q : {t}\n  }} else {{\n    scf.yield %q : {t}\n  }}\n"
        f"  %d = mx.dequantize_block %r : {t} -> tensor<4x32xf32>\n  return %d : tensor<4x32xf32>\n}}\n"
    )
    assert main([str(f), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"{f}:4:5: error: mx-to-linalg: an !mx.tensor value is still used by 'scf.yield'")
    assert "Traceback" not in err


def test_failing_upstream_pass_is_a_located_diagnostic(tmp_path, capsys):
    """one-shot-bufferize (upstream) fails on the model's bufferization: its
    diagnostic, located in the user's file, exit 1."""
    f = tmp_path / "raw.mlir"
    f.write_text(
        "func.func private @use(tensor<*xf32>)\n"
        "func.func @main() {\n"
        "  %x = arith.constant dense<2.0> : tensor<4x32xf32>\n"
        "  %u = tensor.cast %x : tensor<4x32xf32> to tensor<*xf32>\n"
        "  call @use(%u) : (tensor<*xf32>) -> ()\n"
        "  call @use(%u) : (tensor<*xf32>) -> ()\n"
        "  return\n"
        "}\n"
    )
    assert main([str(f), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"{f}:4:8: error: 'tensor.cast' op not bufferizable")
    assert "Traceback" not in err

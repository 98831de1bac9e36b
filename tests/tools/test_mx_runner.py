"""mx-runner: mlir-runner conventions, and errors instead of crashes."""

import subprocess
import sys
from pathlib import Path

import pytest

from mlir_mx.kernels.registry import schedule_names

ROOT = Path(__file__).resolve().parents[2]
ROUNDTRIP = ROOT / "examples" / "run-roundtrip.mlir"


def run(args, stdin=None):
    proc = subprocess.run(
        [sys.executable, "-m", "mlir_mx.tools.mx_runner", *args],
        input=stdin, capture_output=True, text=True, timeout=300,
    )
    return proc.returncode, proc.stdout, proc.stderr


def test_roundtrip_prints_all_twos():
    rc, out, err = run([str(ROUNDTRIP), "-e", "main", "--entry-point-result=void"])
    assert rc == 0, err
    body = out.split("data =", 1)[1]
    values = [v.strip(" []\n") for v in body.replace("\n", ",").split(",") if v.strip(" []\n")]
    assert len(values) == 32 * 64
    assert set(values) == {"2"}


def test_scalar_result_is_printed():
    src = "func.func @main() -> f32 {\n  %c = arith.constant 1.5 : f32\n  return %c : f32\n}\n"
    rc, out, err = run(["-", "--entry-point-result=f32"], stdin=src)
    assert rc == 0, err
    assert out.strip() == "1.5"


def test_errors_are_reported_not_crashed(tmp_path):
    rc, _, err = run([str(ROUNDTRIP), "-e", "nope"])
    assert rc == 1 and "entry point 'nope' not found (public functions: main)" in err
    rc, _, err = run([str(ROUNDTRIP), "--entry-point-result=f16"])
    assert rc == 2 and "--entry-point-result must be one of" in err  # a usage error
    rc, _, err = run([str(ROUNDTRIP), "--shared-libs=/no/such/lib.so"])
    assert rc == 1 and "cannot load shared library '/no/such/lib.so'" in err
    bad = tmp_path / "bad.mlir"
    bad.write_text("func.func @main( {\n")
    rc, _, err = run([str(bad)])
    assert rc == 1 and f"{bad}:1:17: error:" in err
    rc, _, err = run(["/no/file.mlir"])
    assert rc == 1 and "could not open input file" in err
    for e in (err,):
        assert "Traceback" not in e


def test_entry_with_arguments_is_refused():
    src = "func.func @main(%x: f32) -> f32 {\n  return %x : f32\n}\n"
    rc, _, err = run(["-", "--entry-point-result=f32"], stdin=src)
    assert rc == 1 and "must take no arguments" in err


_MATMUL = """
func.func @main() {
  %x = arith.constant dense<0.75> : tensor<3x64xf32>
  %w = arith.constant dense<-1.25> : tensor<64x40xf32>
  %acc = arith.constant dense<0.5> : tensor<3x40xf32>
  %a = mx.quantize_block %x : tensor<3x64xf32> -> !mx.tensor<3x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>
  %b = mx.quantize_block %w : tensor<64x40xf32> -> !mx.tensor<64x40xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU, axis = 0>
  %c = mx.block_matmul %a, %b, %acc : !mx.tensor<3x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>, !mx.tensor<64x40xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU, axis = 0>, tensor<3x40xf32> -> tensor<3x40xf32>
  %u = tensor.cast %c : tensor<3x40xf32> to tensor<*xf32>
  call @printMemrefF32(%u) : (tensor<*xf32>) -> ()
  return
}
func.func private @printMemrefF32(tensor<*xf32>)
"""


def test_threads_and_schedule_of_the_default_lowering(tmp_path):
    """--threads / --schedule choose the kernels; every choice prints the same values."""
    f = tmp_path / "mm.mlir"
    f.write_text(_MATMUL)
    outs = []
    for flags in ([], ["--threads=1"], ["--threads=2", "--schedule=prefill"], ["--schedule=decode"]):
        rc, out, err = run([str(f), *flags])
        assert rc == 0, err
        outs.append(out.split("data =", 1)[1])
    assert "-59.5" in outs[0]  # 0.5 + 64 * 0.75 * -1.25
    assert all(o == outs[0] for o in outs)


@pytest.mark.parametrize(
    "flags,message",
    [
        (["--threads=0"], "--threads: expected an integer in [1, 1024], got '0'"),
        (["--threads=2147483648"], "--threads: expected an integer in [1, 1024], got '2147483648'"),
        (["--threads=x"], "--threads: expected an integer in [1, 1024], got 'x'"),
        # the value as typed, after a space too (it was "got ''")
        (["--threads", "-3"], "--threads: expected an integer in [1, 1024], got '-3'"),
        (["--threads", "99999"], "--threads: expected an integer in [1, 1024], got '99999'"),
        (["--schedule=fast"], "unknown schedule 'fast' (available: " + ", ".join(schedule_names())),
        (["--threads=2", "--pass-pipeline=mx-to-linalg"], "configure the default pipeline"),
    ],
)
def test_bad_kernel_options(tmp_path, flags, message):
    f = tmp_path / "mm.mlir"
    f.write_text(_MATMUL)
    rc, _out, err = run([str(f), *flags])
    assert rc == 2  # a usage error: argparse's exit status
    assert err.startswith("mx-runner: error: ") and err.count("\n") == 1
    assert message in err and "Traceback" not in err

"""mx-runner: mlir-runner conventions, and errors instead of crashes."""

import subprocess
import sys
from pathlib import Path

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
    assert rc == 1 and "--entry-point-result must be one of" in err
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

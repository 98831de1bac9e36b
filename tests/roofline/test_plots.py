"""The roofline and time plots: produced, non-empty, labelled."""

from __future__ import annotations

from mlir_mx.roofline import M4
from mlir_mx.roofline.measure import Timing
from mlir_mx.roofline.plots import roofline_plot, time_plot
from mlir_mx.roofline.report import model_rows
from mlir_mx.roofline.variants import Shape


def _rows():
    return model_rows([Shape(32, 64, 64), Shape(1, 64, 64)], ["f32", "mx-a"])


def test_roofline_plot(tmp_path, mx_to_linalg):
    paths = roofline_plot(_rows(), M4, tmp_path)
    assert sorted(p.name for p in paths) == ["roofline.png", "roofline.svg"]
    assert all(p.stat().st_size > 1000 for p in paths)
    svg = (tmp_path / "roofline.svg").read_text()
    assert "1.84x = 1.23x bytes x 1.50x FLOPs" in svg
    assert "1.52x = 1.01x bytes x 1.50x FLOPs" in svg
    assert "ridge 4.67" in svg and "(measured)" not in svg


def test_measured_points_and_time_plot(tmp_path, mx_to_linalg):
    rows = _rows()
    for r, t in zip(rows, (70e-6, 270e-6, 5e-6, 12e-6), strict=True):
        r.measured = Timing(t, t * 0.98, t * 1.1, 5, 10)
    roofline_plot(rows, M4, tmp_path)
    svg = (tmp_path / "roofline.svg").read_text()
    assert "f32 32x64x64 (measured)" in svg and "mx-a 1x64x64 (model)" in svg
    paths = time_plot(rows, M4, tmp_path)
    assert all(p.stat().st_size > 1000 for p in paths)
    svg = (tmp_path / "time.svg").read_text()
    assert "468.1 ns" in svg and "702.2 ns" in svg
    assert "1.50x" in svg  # modelled ratio at M=32
    assert "3.86x" in svg  # measured ratio at M=32 (270 / 70)

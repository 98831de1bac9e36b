"""MLX's CPU quantized matmul as a baseline: ``mlx MXFP4`` and ``mlx NVFP4``.

MLX (``mlx`` on PyPI, Linux CPU wheels) quantizes the SAME f32 weights ``B``
itself (``mx.quantize(B^T, group_size, bits=4, mode)``: ``"mxfp4"`` blocks of
32, ``"nvfp4"`` blocks of 16; its codes packed in ``uint32``, its scales in
``uint8``) and multiplies f32 activations with ``mx.quantized_matmul(x, w,
scales, transpose=True, ...)``, evaluated with ``mx.eval`` (MLX is lazy).  Its
quantizer rounds differently from ours (``docs/numerics.md``: ties toward
zero, no global scale here), so the row is checked against its OWN operands:
the f64 product of ``a`` and MLX's ``mx.dequantize`` of its weights, with the
usual f32 summation bound.  MLX takes no thread count: each group's row runs
MLX's CPU stream as it is (the note says so).
"""

from __future__ import annotations

import importlib.util

import numpy as np

from .cases import Oracle, Problem, is_nvfp4
from .method import Method, Skipped

__all__ = ["MLX_MODES", "mlx_available", "mlx_methods"]

#: Our weight format -> (label, MLX mode, group size).
MLX_MODES = {"f4E2M1FN": ("mlx MXFP4", "mxfp4", 32), "nvfp4": ("mlx NVFP4", "nvfp4", 16)}


def mlx_available() -> str | None:
    """None when ``mlx.core`` imports, else why not."""
    if importlib.util.find_spec("mlx") is None:
        return "mlx is not installed (pip install mlx: its Linux CPU wheel)"
    try:
        import mlx.core  # noqa: F401
    except (ImportError, OSError) as err:
        return f"mlx does not load: {err}"
    return None


def mlx_methods(p: Problem, threads: int) -> list[Method] | Skipped:
    """The MLX row of ``p``'s weight format (:data:`MLX_MODES`), at its own threads."""
    key = "nvfp4" if is_nvfp4(p.element) else p.element
    if key not in MLX_MODES or p.a_element is not None:
        return Skipped(
            "mlx (other formats)", "MLX's CPU rows: MXFP4 and NVFP4 weights, f32 activations"
        )
    label = MLX_MODES[key][0]
    why = mlx_available()
    if why:
        return Skipped(label, why)
    import mlx.core as mx

    _, mode, group = MLX_MODES[key]
    s = p.shape
    with mx.stream(mx.cpu):
        w, scales = mx.quantize(mx.array(np.ascontiguousarray(p.b.T)), group, 4, mode=mode)
        x = mx.array(p.a)
        mx.eval(w, scales, x)
        if f"mlx-{mode}" not in p.cache:
            deq = mx.dequantize(w, scales, group_size=group, bits=4, mode=mode, dtype=mx.float32)
            p.cache[f"mlx-{mode}"] = Oracle.of(p.a, np.array(deq).T)

    def call():
        with mx.stream(mx.cpu):
            y = mx.quantized_matmul(
                x, w, scales, transpose=True, group_size=group, bits=4, mode=mode
            )
            mx.eval(y)
        return y

    w_bytes = w.nbytes + scales.nbytes
    return [
        Method(
            label,
            "baseline",
            threads,
            w_bytes + 4 * (s.M * s.K + s.M * s.N),
            run=lambda n: [call() for _ in range(n)],
            result=lambda: np.array(call()),
            oracle=p.cache[f"mlx-{mode}"],
            note=f"mlx {mx.__version__} mode={mode}, group {group}: its own quantization of B "
            f"({w_bytes / (s.K * s.N):.4g} B/weight); MLX takes no thread count",
        )
    ]

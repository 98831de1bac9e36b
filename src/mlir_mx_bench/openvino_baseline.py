"""OpenVINO's MXFP4 MatMul as an mx-bench baseline (the anchor of issue 51).

What a user who picks OpenVINO for MXFP4 weights runs: an OpenVINO model of
one MatMul ``x (M x K, f32) @ W^T`` with ``W = B^T`` (N x K) as a constant,
compressed by NNCF (``nncf.compress_weights``, ``CompressWeightsMode.MXFP4``,
group 32, ``ratio=1``, ``all_layers=True``: NNCF would otherwise keep a model's
only layer in 8 bits), and compiled on the CPU plugin twice:

* ``openvino MXFP4``: the plugin's default inference precision (bf16 on a CPU
  with bf16 units, AVX512-BF16 or AMX: the activations are rounded to bf16);
* ``openvino MXFP4 f32``: ``INFERENCE_PRECISION_HINT=f32``.

Each at the group's thread count (``INFERENCE_NUM_THREADS``; the plugin's
other settings are its defaults).  A row records the kernel OpenVINO's
execution graph reports for the MatMul (the ``FullyConnected`` node's
``primitiveType``, e.g. ``brgemm_avx512_bf16``), in its note and in
:attr:`OvMatmul.kernel`.

The weights NNCF compresses are ``B`` dequantized (``Problem.db``): MXFP4
values already, which its compression gives back bit for bit (checked per
problem: the decompression subgraph is run alone, at f32); where it would not,
the oracle is that of OpenVINO's own weights, as ggml's rows are checked.
The activations are ``Problem.a`` as they are (f32, not quantized): the
oracle is ``a @ db``, that of ``ours Linear f32 x``.  The bound follows from
the precisions the execution graph reports (:func:`ov_oracle`).
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import logging
import time

import numpy as np

from .cases import F32_UNIT, Oracle, Problem
from .emulate import baseline_level
from .method import Method, Skipped

__all__ = [
    "OV_ELEMENT",
    "OV_ROWS",
    "OvMatmul",
    "compress_mxfp4",
    "openvino_available",
    "openvino_methods",
    "ov_oracle",
]

#: The weights' element format NNCF's ``CompressWeightsMode.MXFP4`` writes.
OV_ELEMENT = "f4E2M1FN"
#: (row label, the plugin's ``INFERENCE_PRECISION_HINT``; None: its default)
OV_ROWS = (("openvino MXFP4", None), ("openvino MXFP4 f32", "f32"))
_INSTALL = "pip install 'mlir-mx[bench]' (openvino and nncf)"
#: unit roundoff of the precisions the CPU plugin computes in
_UNITS = {"f32": 0.0, "bf16": 2.0**-8, "f16": 2.0**-11}


def openvino_available() -> str | None:
    """None when openvino and nncf import, else why not; under ``--emulate``
    also why not (no switch of OpenVINO's caps its CPU plugin's ISA)."""
    missing = [m for m in ("openvino", "nncf") if importlib.util.find_spec(m) is None]
    if missing:
        return f"{' and '.join(missing)} not installed ({_INSTALL})"
    if (level := baseline_level()) is not None:
        return (
            f"OpenVINO's CPU plugin dispatches on the CPU itself and no switch caps it at "
            f"{level} (--emulate)"
        )
    try:
        import nncf  # noqa: F401
        import openvino  # noqa: F401
    except (ImportError, OSError) as err:
        return f"openvino/nncf do not load: {err}"
    return None


def compress_mxfp4(w: np.ndarray, m: int):
    """An OpenVINO model ``x (m x K, f32) @ w^T``, ``w`` (N x K) compressed by
    NNCF to MXFP4 (group 32); NNCF's log and progress bar kept quiet."""
    import nncf
    import openvino as ov
    from openvino import opset13 as ops

    x = ops.parameter([m, w.shape[1]], ov.Type.f32, name="x")
    mm = ops.matmul(x, ops.constant(np.ascontiguousarray(w, np.float32)), False, True)
    model = ov.Model([mm], [x], "mx_bench_matmul")
    level = logging.getLogger("nncf").level
    nncf.set_log_level(logging.WARNING)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            return nncf.compress_weights(
                model,
                mode=nncf.CompressWeightsMode.MXFP4,
                group_size=32,
                ratio=1.0,
                all_layers=True,
            )
    finally:
        nncf.set_log_level(level)


def decompressed_weights(model) -> np.ndarray:
    """The f32 weights (N x K) the compressed model's MatMul multiplies: its
    decompression subgraph run alone on the CPU plugin at f32."""
    import openvino as ov

    (mm,) = [op for op in model.get_ordered_ops() if op.get_type_name() == "MatMul"]
    sub = ov.Model([mm.input_value(1)], [], "weights")
    req = ov.Core().compile_model(sub, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    return np.array(req.create_infer_request().infer({})[0], np.float32)


def ov_oracle(base: Oracle, k: int, in_unit: float) -> Oracle:
    """``base`` (the f32 bound of ``a @ b``) widened for activations rounded
    to a type of unit roundoff ``in_unit`` before the f32 products: with
    ``|a~ - a| <= u |a|`` the error is at most ``u |a| @ |b|`` from the
    rounding plus the f32 sum's bound on the rounded values,
    ``gamma (1 + u)``.  (The output's rounding is ``Oracle.check``'s
    ``out_unit``.)"""
    if in_unit == 0:
        return base
    abs_product = base.gamma / ((k + 2) * F32_UNIT)  # |a| @ |b|
    return Oracle(base.exact, base.gamma * (1 + in_unit) + in_unit * abs_product)


def _unit(precision: str) -> float:
    if precision not in _UNITS:
        raise RuntimeError(f"OpenVINO ran the MatMul in {precision}, which mx-bench cannot bound")
    return _UNITS[precision]


class OvMatmul:
    """``model`` compiled for ``threads`` threads at ``hint`` (None: the
    default), its input set once; what the execution graph reports."""

    def __init__(self, model, a: np.ndarray, threads: int, hint: str | None):
        import openvino as ov

        config: dict = {"INFERENCE_NUM_THREADS": threads}
        if hint is not None:
            config["INFERENCE_PRECISION_HINT"] = hint
        t0 = time.perf_counter()
        self.compiled = ov.Core().compile_model(model, "CPU", config)
        self.compile_s = time.perf_counter() - t0
        self.precision = self.compiled.get_property("INFERENCE_PRECISION_HINT").to_string()
        self.pinning = bool(self.compiled.get_property("ENABLE_CPU_PINNING"))
        self.kernel, self.in_precision, self.out_precision = self._matmul_node()
        self.request = self.compiled.create_infer_request()
        self.a = np.ascontiguousarray(a, np.float32)
        self.request.set_input_tensor(ov.Tensor(self.a, shared_memory=True))

    def _matmul_node(self) -> tuple[str, str, str]:
        """The MatMul's kernel (``primitiveType``), the precision of its
        activations (what the node feeding it outputs) and its output's."""
        runtime = self.compiled.get_runtime_model()
        nodes = [
            op for op in runtime.get_ordered_ops()
            if op.get_rt_info()["layerType"].astype(str) in ("FullyConnected", "MatMul")
        ]  # fmt: skip
        if len(nodes) != 1:
            raise RuntimeError(f"expected one MatMul in OpenVINO's execution graph, got {nodes}")
        (fc,) = nodes
        rt = fc.get_rt_info()
        src = fc.input_value(0).get_node().get_rt_info()["outputPrecisions"].astype(str)
        return rt["primitiveType"].astype(str), src, rt["outputPrecisions"].astype(str)

    def run(self, n: int) -> None:
        for _ in range(n):
            self.request.infer(share_outputs=True)

    def result(self) -> np.ndarray:
        self.request.infer()
        return np.array(self.request.get_output_tensor().data, np.float32)


def _problem_model(p: Problem):
    """The compressed model of ``p``'s weights, once per problem, and its oracle."""
    if "openvino" not in p.cache:
        s = p.shape
        t0 = time.perf_counter()
        model = compress_mxfp4(p.db.T, s.M)
        compress_s = time.perf_counter() - t0
        w = decompressed_weights(model)
        same = bool(np.array_equal(w, p.db.T))
        oracle = p.f32_a_oracle if same else Oracle.of(p.a, w.T)
        p.cache["openvino"] = (model, oracle, same, compress_s)
    return p.cache["openvino"]


def openvino_methods(p: Problem, threads: int) -> list[Method] | Skipped:
    """The two OpenVINO rows of :data:`OV_ROWS` at ``threads`` threads."""
    why = openvino_available()
    if why:
        return Skipped("openvino MXFP4", why)
    if p.element != OV_ELEMENT:
        return Skipped(
            "openvino MXFP4 (other weight formats)",
            f"NNCF's MXFP4 mode writes {OV_ELEMENT} weights; groups of other weight formats "
            "have no openvino row",
        )
    import openvino as ov

    s = p.shape
    model, oracle, same, compress_s = _problem_model(p)
    w_bytes = s.N * s.K // 2 + s.N * s.K // 32  # f4e2m1 codes, one f8e8m0 scale per 32
    out = []
    for label, hint in OV_ROWS:
        mm = OvMatmul(model, p.a, threads, hint)
        out.append(
            Method(
                label,
                "baseline",
                threads,
                4 * s.M * s.K + w_bytes + 4 * s.M * s.N,
                run=mm.run,
                result=mm.result,
                oracle=ov_oracle(oracle, s.K, _unit(mm.in_precision)),
                out_unit=_unit(mm.out_precision),
                operands="f32-a",
                compile_s=mm.compile_s,
                extra={"kernel": mm.kernel, "inference_precision": mm.precision},
                note=f"OpenVINO {ov.get_version().split('-')[0]}, kernel {mm.kernel} "
                f"(inference precision {mm.precision}: activations {mm.in_precision}, "
                f"output {mm.out_precision}; CPU pinning {'on' if mm.pinning else 'off'}); "
                f"NNCF MXFP4 group 32 ({compress_s:.1f} s), weights "
                + ("= B bit for bit" if same else "differ from B: checked on its own"),
            )
        )
    return out

"""Bad arguments to the public API that needs no torch raise an ``MXError``
naming the argument (the sweep's parts: ``tests/api_cases.py``; ``mlir_mx.torch``'s
half: ``tests/torch_mx/test_api_arguments.py``).

Found in session 60: ``ggml_e8m0_half(-1)`` / ``mxfp4_from_ggml(data, None)``
raised numpy's or int()'s errors, ``read_gguf`` with a non-path ``os.fspath``'s
``TypeError``; the oracle's ``matmul_reference`` / ``blocked_order`` / ``amx_*``,
the numerics' shape helpers, the dialect's builders and text functions,
``BoundFunction``, the pipelines' thread counts and the roofline the same. Here
so that a machine without torch runs it too.
"""

from __future__ import annotations

import numpy as np
import pytest
from api_cases import public_functions, refuses_junk

import mlir_mx
import mlir_mx.convert
import mlir_mx.dialect
import mlir_mx.execution
import mlir_mx.interop.gguf as gguf_interop
import mlir_mx.interop.gguf_nvfp4 as gguf_nvfp4
import mlir_mx.interop.torchao
import mlir_mx.numerics
import mlir_mx.oracle
import mlir_mx.pipelines
import mlir_mx.roofline
from mlir_mx.errors import MXError

MODULES = (mlir_mx, gguf_interop, gguf_nvfp4, mlir_mx.interop.torchao, mlir_mx.oracle,
           mlir_mx.numerics, mlir_mx.convert, mlir_mx.dialect, mlir_mx.execution,
           mlir_mx.pipelines, mlir_mx.roofline)  # fmt: skip


@pytest.mark.parametrize("name, f", list(public_functions(*MODULES)),
                         ids=lambda v: v if isinstance(v, str) else "")  # fmt: skip
def test_every_public_function_refuses_junk_with_an_mx_error(name, f):
    """Junk in each required position (a format name in the others) raises an
    ``MXError`` (or what ``api_cases.ALLOWED`` names), never an AttributeError
    or another library's error."""
    assert refuses_junk(name, f) > 0


#: A (K, N) = (32, 4) MX B for the oracle's checks.
_W = mlir_mx.quantize(np.ones((32, 4), np.float32), "f4E2M1FN", 32, axis=0)


@pytest.mark.parametrize(
    "call, arg",
    [
        (lambda: gguf_interop.read_gguf(3), "path"),
        (lambda: gguf_nvfp4.nvfp4_packed_from_ggml(np.zeros(36, np.uint8), 1, "64"), "rows, n"),
        (lambda: gguf_nvfp4.nvfp4_packed_from_ggml(np.zeros(35, np.uint8), 1, 64), "data"),
        (lambda: mlir_mx.numerics.packed_shape(None, "f4E2M1FN"), "shape"),
        (lambda: mlir_mx.numerics.packed_shape((2, "x"), "f4E2M1FN"), "shape"),
        (lambda: mlir_mx.numerics.scale_shape((2, -32), 32, 1), "shape"),
        (lambda: mlir_mx.oracle.matmul_reference("a", _W, np.zeros((1, 4), np.float32)), "a"),
        (lambda: mlir_mx.oracle.blocked_order(np.zeros((1, 32), np.float32), None, None), "b"),
        (lambda: mlir_mx.oracle.blocked_order(np.zeros((1, 32), np.float32), _W, None), "acc"),
        (lambda: mlir_mx.oracle.blocked_order(np.zeros((1, 32), np.float32), _W,
                                              np.zeros((2, 4), np.float32)), "acc"),  # fmt: skip
        (lambda: mlir_mx.oracle.blocked_order(np.zeros((1, 16), np.float32), _W,
                                              np.zeros((1, 4), np.float32)), "a, b"),  # fmt: skip
        (lambda: mlir_mx.oracle.amx_tdpbf16ps("a", np.zeros((2, 2)), np.zeros((1, 2))), "a"),
        (lambda: mlir_mx.oracle.amx_pair_layout([[1.0]]), "b"),
        (lambda: mlir_mx.oracle.amx_pass(np.zeros((1, 32), np.float32), "w"), "w"),
        (lambda: mlir_mx.dialect.parse_module(b"module {}"), "text"),
        (lambda: mlir_mx.dialect.print_module("module {}"), "module"),
        (lambda: mlir_mx.dialect.verify_module(None), "module_op"),
        (lambda: mlir_mx.dialect.load_dialect("ctx"), "context"),
        (lambda: mlir_mx.dialect.load_dialect(), "context"),  # no current context
        (lambda: mlir_mx.dialect.is_mx_op("mx.block_matmul"), "op"),
        (lambda: mlir_mx.execution.BoundFunction(None, "main", ()), "runner"),
        (lambda: mlir_mx.pipelines.threads_pipeline(2.0), "threads"),
        (lambda: mlir_mx.pipelines.check_parallel(["tasks"]), "parallel"),
        (lambda: mlir_mx.roofline.analyze(None), "module_or_text"),
        (lambda: mlir_mx.roofline.get_machine(["zen4"]), "name"),
        (lambda: mlir_mx.roofline.roofline_table([], "zen4"), "machine"),
        (lambda: gguf_interop.ggml_e8m0_half(-1), "e"),
        (lambda: gguf_interop.ggml_e8m0_half([1.5]), "e"),
        (lambda: gguf_interop.mxfp4_from_ggml(np.zeros(17, np.uint8), None), "shape"),
        (lambda: gguf_interop.mxfp4_from_ggml(np.zeros(17, np.uint8), (1, -32)), "shape"),
        (lambda: gguf_interop.mxfp4_packed_from_ggml(np.zeros(17, np.uint8), 1, 30), "n"),
        (lambda: gguf_interop.mxfp4_packed_from_ggml(np.zeros(16, np.uint8), 1, 32), "data"),
        (lambda: gguf_interop.mxfp4_packed_from_ggml(np.zeros(17, np.int8), 1, 32), "data"),
        (lambda: gguf_interop.mxfp4_packed_from_ggml(np.zeros(17, np.uint8), "1", 32), "rows, n"),
        (
            lambda: gguf_interop.mxfp4_packed_from_ggml(
                np.zeros(17, np.uint8), 1, 32, out=(np.zeros((1, 16), np.uint8), None)
            ),
            "out",
        ),
    ],
)
def test_each_refusal_names_its_argument(call, arg):
    with pytest.raises(MXError, match=rf"^{arg}[: ]"):
        call()


def test_the_checked_gguf_conversions_still_convert():
    """The new checks refuse nothing the loaders pass: a block through both conversions."""
    rng = np.random.default_rng(0)
    data = rng.integers(0, 255, (2, 17), dtype=np.uint8)  # scale bytes < 255
    a = gguf_interop.mxfp4_from_ggml(data, (2, 32))
    packed, scales = gguf_interop.mxfp4_packed_from_ggml(data, 2, 32)
    b = mlir_mx.MXArray.from_packed(packed, scales, "f4E2M1FN", 32, axis=1)
    assert np.array_equal(np.asarray(a.codes).view(np.uint8), np.asarray(b.codes).view(np.uint8))
    assert np.array_equal(np.asarray(a.scales).view(np.uint8), scales)
    rows = (np.zeros((2, 16), np.uint8), np.zeros((2, 1), np.uint8))
    out = gguf_interop.mxfp4_packed_from_ggml(data, 2, 32, out=rows)
    assert out[0] is rows[0] and np.array_equal(rows[0], packed)
    assert np.array_equal(gguf_interop.ggml_e8m0_half(np.array([0, 1, 127, 255], np.uint8)),
                          np.array([2.0**-128, 2.0**-127, 2.0**-1, 2.0**127], np.float32))  # fmt: skip

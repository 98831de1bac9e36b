"""Bad arguments to the public API raise an ``MXError`` naming the argument.

Found in session 60 by calling every public function of ``mlir_mx``,
``mlir_mx.torch`` and ``mlir_mx.interop.gguf`` with junk in each required
position: ``quantize_(nn.Linear(...))`` raised ``AttributeError: 'Linear'
object has no attribute ''`` (the root module looked up by its empty name),
``dequantize_(3)`` and ``save_pretrained(3, path)`` an ``AttributeError``,
``quantize_weight(None, ...)`` one on ``.detach``, ``from_pretrained(None)`` /
``mx_weights`` / ``gguf_tokenizer`` / ``read_gguf`` with a non-path the
``os.fspath`` ``TypeError``, ``MXExperts(None, None)`` "not iterable",
``Gate(kind=array)`` / ``set_decode_policy(array)`` numpy's truth-value
``ValueError``, ``greedy`` / ``logit_bound`` torch's errors from deep inside
the model, and ``ggml_e8m0_half(-1)`` / ``mxfp4_from_ggml(data, None)`` numpy's
or int()'s; the oracle's ``matmul_reference`` / ``blocked_order`` / ``amx_*``
the numerics' shape helpers, the dialect's builders and text functions,
``BoundFunction``, the pipelines' thread counts and the roofline the same.  The sweep itself is :func:`test_every_public_function_refuses_junk_with_an_mx_error`.
"""

from __future__ import annotations

import inspect
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch not installed (pip install 'mlir-mx[test]')")

import mlir_mx  # noqa: E402
import mlir_mx.convert  # noqa: E402
import mlir_mx.dialect  # noqa: E402
import mlir_mx.execution  # noqa: E402
import mlir_mx.interop.gguf as gguf_interop  # noqa: E402
import mlir_mx.interop.gguf_nvfp4 as gguf_nvfp4  # noqa: E402
import mlir_mx.interop.torchao  # noqa: E402
import mlir_mx.numerics  # noqa: E402
import mlir_mx.oracle  # noqa: E402
import mlir_mx.pipelines  # noqa: E402
import mlir_mx.roofline  # noqa: E402
import mlir_mx.torch as mt  # noqa: E402
from mlir_mx.errors import MXArgTypeError, MXError, MXValueError  # noqa: E402

JUNK = [None, 3, -1, 2.5, "x", "", [], {}, b"ab", np.zeros(3, np.float32), torch.zeros(3)]


def _public_functions():
    """Each public callable with a positional parameter (``gguf_package`` has none)."""
    modules = (mlir_mx, mt, gguf_interop, gguf_nvfp4, mlir_mx.interop.torchao, mlir_mx.oracle,
               mlir_mx.numerics, mlir_mx.convert, mlir_mx.dialect, mlir_mx.execution,
               mlir_mx.pipelines, mlir_mx.roofline)  # fmt: skip
    for module in modules:
        for name in module.__all__:
            f = getattr(module, name)
            if callable(f) and not (inspect.isclass(f) and issubclass(f, BaseException)):
                if _positions(f):
                    yield f"{module.__name__}.{name}", f


def _positions(f) -> int:
    """The positions to fill with junk: every required positional parameter,
    else the first optional one (``Gate(kind)``, ``MXConfig(element)``)."""
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    ps = [p for p in inspect.signature(f).parameters.values() if p.kind in kinds]
    return sum(p.default is inspect.Parameter.empty for p in ps) or min(len(ps), 1)


#: What a junk argument may raise other than an MXError, and why it is right:
#: a call with the wrong argument count is Python's own TypeError; a missing
#: file is the documented FileNotFoundError.
ALLOWED = {
    "mlir_mx.interop.gguf.read_gguf": FileNotFoundError,
    "mlir_mx.interop.gguf.open_gguf": FileNotFoundError,
}


@pytest.mark.parametrize("name, f", list(_public_functions()), ids=lambda v: v if isinstance(v, str) else "")
def test_every_public_function_refuses_junk_with_an_mx_error(name, f):
    """Junk in each required position (the others: a small model for the torch
    functions' first argument, a format name elsewhere) raises an ``MXError``
    (or what ``ALLOWED`` names), never an AttributeError or another library's error."""
    n = _positions(f)
    calls = 0
    for pos in range(n):
        for junk in JUNK:
            filler = (
                [torch.nn.Sequential(torch.nn.Linear(32, 32))] if name.startswith("mlir_mx.torch.") else ["f4E2M1FN"]
            ) + ["f4E2M1FN"] * n
            args = [junk if i == pos else filler[i] for i in range(n)]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                try:
                    f(*args)
                except MXError:
                    pass
                except Exception as e:  # noqa: BLE001 - the point of the test
                    allowed = ALLOWED.get(name)
                    if allowed is None or not isinstance(e, allowed):
                        pytest.fail(f"{name}(arg {pos} = {junk!r}): {type(e).__name__}: {e}")
            calls += 1
    assert calls == n * len(JUNK)


def _gpt2_conv1d():
    pytest.importorskip("transformers", reason="transformers not installed (pip install 'mlir-mx[test]')")
    from transformers.pytorch_utils import Conv1D

    torch.manual_seed(0)
    return Conv1D(64, 32)


def _experts():
    from gpt_oss_cases import tiny_gpt_oss

    return tiny_gpt_oss().model.layers[0].mlp.experts


class _MyLinear(torch.nn.Linear):
    pass


@pytest.mark.parametrize(
    "make, build",
    [
        (lambda: torch.nn.Linear(64, 32), "MXLinear.from_linear"),
        (lambda: _MyLinear(64, 32), "MXLinear.from_linear"),
        (_gpt2_conv1d, "MXLinear.from_conv1d"),
        (_experts, "MXExperts.from_experts"),
    ],
    ids=["Linear", "Linear subclass", "Conv1D", "experts"],
)
@pytest.mark.parametrize("fn", ["quantize_", "dequantize_"])
def test_a_model_that_is_itself_a_layer_is_refused_and_left_unchanged(make, build, fn):
    layer = make()
    before = {k: v.clone() for k, v in layer.state_dict().items()}
    with pytest.raises(MXValueError, match=rf"model: is itself a {type(layer).__name__};.*{build}"):
        getattr(mt, fn)(layer, "f4E2M1FN")
    after = layer.state_dict()
    assert before.keys() == after.keys()
    assert all(torch.equal(before[k], after[k]) for k in before)
    # the way out the message names: the layer inside a container converts
    net = torch.nn.Sequential(layer)
    summary = getattr(mt, fn)(net, "f4E2M1FN")
    assert summary.converted == ["0"] or summary.experts == ["0"] or summary.skipped.keys() == {"0"}


def test_the_one_layer_constructor_the_message_names_converts_it():
    torch.manual_seed(0)
    layer = torch.nn.Linear(64, 32)
    with pytest.raises(MXValueError, match="MXLinear.from_linear"):
        mt.quantize_(layer, "f4E2M1FN")
    x = torch.randn(3, 64)
    new = mt.MXLinear.from_linear(layer, "f4E2M1FN")
    net = torch.nn.Sequential(torch.nn.Linear(64, 32))
    net[0].load_state_dict(layer.state_dict())
    mt.quantize_(net, "f4E2M1FN")
    with torch.inference_mode():
        assert torch.equal(new(x), net(x))


#: A (K, N) = (32, 4) MX B for the oracle's checks.
_W = mlir_mx.quantize(np.ones((32, 4), np.float32), "f4E2M1FN", 32, axis=0)


@pytest.mark.parametrize(
    "call, arg",
    [
        (lambda: mt.quantize_weight(np.zeros((4, 32), np.float32), "f4E2M1FN", 32), "weight"),
        (lambda: mt.save_pretrained(3, "/tmp/nowhere"), "model"),
        (lambda: mt.save_pretrained(torch.nn.Linear(32, 32), 3), "path"),
        (lambda: mt.from_pretrained(None), "path"),
        (lambda: mt.from_pretrained(b"/tmp"), "path"),
        (lambda: mt.mx_weights(3), "path"),
        (lambda: mt.gguf_tokenizer(["a.gguf"]), "path"),
        (lambda: mt.dequantize_(3), "model"),
        (lambda: mt.Gate(kind=np.zeros(2)), "gate: kind"),
        (lambda: mt.Gate(alpha="1"), "gate: alpha"),
        (lambda: mt.set_decode_policy(np.zeros(2)), "policy"),
        (lambda: mt.MXExperts(None, None), "gate_up"),
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


@pytest.mark.parametrize(
    "ids, why",
    [
        ([[1, 2]], "input_ids: expected a torch.Tensor"),
        (torch.zeros(1, 3), "input_ids: expected integer token ids"),
        (torch.zeros(3, dtype=torch.long), r"input_ids: expected shape \(batch, tokens\)"),
        (torch.zeros(1, 0, dtype=torch.long), r"input_ids: expected shape \(batch, tokens\)"),
    ],
)
def test_greedy_and_logit_bound_check_their_inputs_before_running_the_model(ids, why):
    net = torch.nn.Sequential(torch.nn.Linear(32, 32))  # would fail deep inside if run
    with pytest.raises((MXArgTypeError, MXValueError), match=why):
        mt.greedy(net, ids, 2)
    with pytest.raises((MXArgTypeError, MXValueError), match=why):
        mt.logit_bound(net, ids)
    with pytest.raises(MXArgTypeError, match="model: expected a transformers causal LM"):
        mt.greedy("gpt2", torch.zeros(1, 3, dtype=torch.long), 2)
    with pytest.raises(MXValueError, match="input_ids: expected batch 1"):
        mt.greedy(net, torch.zeros(2, 3, dtype=torch.long), 2)


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

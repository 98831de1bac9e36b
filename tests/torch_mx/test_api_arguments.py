"""Bad arguments to ``mlir_mx.torch`` raise an ``MXError`` naming the argument
(the sweep's parts: ``tests/api_cases.py``; the modules that need no torch:
``tests/test_api_arguments_core.py``).

Found in session 60 by calling every public function with junk in each
required position: ``quantize_(nn.Linear(...))`` raised ``AttributeError:
'Linear' object has no attribute ''`` (the root module looked up by its empty
name), ``dequantize_(3)`` and ``save_pretrained(3, path)`` an
``AttributeError``, ``quantize_weight(None, ...)`` one on ``.detach``,
``from_pretrained(None)`` / ``mx_weights`` / ``gguf_tokenizer`` with a
non-path the ``os.fspath`` ``TypeError``, ``MXExperts(None, None)`` "not
iterable", ``Gate(kind=array)`` / ``set_decode_policy(array)`` numpy's
truth-value ``ValueError``, ``greedy`` / ``logit_bound`` torch's errors from
deep inside the model.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch not installed (pip install 'mlir-mx[test]')")

from api_cases import public_functions, refuses_junk  # noqa: E402

import mlir_mx.torch as mt  # noqa: E402
from mlir_mx.errors import MXArgTypeError, MXError, MXValueError  # noqa: E402


@pytest.mark.parametrize("name, f", list(public_functions(mt)),
                         ids=lambda v: v if isinstance(v, str) else "")  # fmt: skip
def test_every_public_function_refuses_junk_with_an_mx_error(name, f):
    """Junk in each required position (a small model in the first of the
    others, a format name in the rest) raises an ``MXError``, never an
    AttributeError or torch's error from inside."""
    assert refuses_junk(name, f, lambda: torch.nn.Sequential(torch.nn.Linear(32, 32))) > 0


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

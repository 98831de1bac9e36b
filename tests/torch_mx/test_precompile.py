"""``precompile``: every kernel of a converted model compiled before its first forward.

After ``quantize_(..., precompile=True)`` (or ``precompile(model)``), forwards
with prompts of any length and decode steps build no new compilation (made to
fail here); the progress line goes to stderr only when asked (or on a terminal).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="torch not installed (pip install 'mlir-mx[torch]')")

from llama_cases import prompt, tiny_llama  # noqa: E402

from mlir_mx.errors import MXArgTypeError, MXValueError  # noqa: E402
from mlir_mx.execution import compiled  # noqa: E402
from mlir_mx.torch import precompile, quantize_  # noqa: E402


def _refuse_compiling(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a kernel was compiled after precompile")

    monkeypatch.setattr(compiled, "Compiled", refuse)


@pytest.mark.parametrize("activations", [None, "i8"])
def test_quantize_precompile_leaves_nothing_to_compile(monkeypatch, capsys, activations):
    model = tiny_llama()
    quantize_(model, "f4E2M1FN", activations=activations, precompile=True)
    assert "precompiling" not in capsys.readouterr().err  # not a terminal
    _refuse_compiling(monkeypatch)
    with torch.inference_mode():
        for n in (1, 2, 16, 60):  # every shape class: decode, small, prefill
            out = model(prompt(n), use_cache=True)
        step = model(out.logits[:, -1:].argmax(-1), cache=out.cache)
    assert step.logits.shape == (1, 1, 256)


def test_precompile_function_counts_layers_and_draws_progress(capsys):
    model = tiny_llama()
    summary = quantize_(model, "f8E4M3FN")
    assert precompile(model, m=[1, 16], progress=True) == len(summary.converted)
    err = capsys.readouterr().err
    assert f"{len(summary.converted)}/{len(summary.converted)} layers" in err and err.endswith("\n")
    assert precompile(torch.nn.Linear(4, 4)) == 0  # no MX layer: nothing to do


def test_precompile_refuses_bad_arguments():
    model = tiny_llama()
    quantize_(model, "f4E2M1FN")
    with pytest.raises(MXArgTypeError, match="model"):
        precompile("model")
    for bad in (0, -1, [1, 0], 1.5, True):
        with pytest.raises((MXValueError, MXArgTypeError), match="m:"):
            precompile(model, m=bad)

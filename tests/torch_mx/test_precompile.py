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


def test_a_bf16_models_prefill_compiles_nothing_after_precompile(monkeypatch):
    """A bf16 model's layers take bf16 inputs, which ``precompile`` infers
    from the model's bf16 parameters: on a CPU with AMX-BF16 it compiles the
    AMX kernels and prepares each weight for the tiles, so a 60-token
    prefill (on the AMX path) compiles and prepares nothing (both made to
    fail).  An f32 model's ``precompile`` prepares no AMX weight (checked
    where AMX is there to be refused; about 12 s of compiling elsewhere).  The
    compile cache is cleared first (the AMX Runners are not: each takes ~1 s
    to compile; ``test_linear_amx.py`` checks that ``precompile`` makes them)."""
    from mlir_mx import host
    from mlir_mx.amx_permission import amx_permission
    from mlir_mx.execution import clear_cache
    from mlir_mx.linear import amx_linear, amx_matmul
    from mlir_mx.torch import MXLinear

    def refuse(*args, **kwargs):
        raise AssertionError("an AMX weight was prepared")

    has_amx = host.has_features("amx_tile", "amx_bf16") and amx_permission().granted
    clear_cache()
    model = tiny_llama().to(torch.bfloat16)
    quantize_(model, "f4E2M1FN", precompile=True)
    with monkeypatch.context() as mp:
        mp.setattr(amx_matmul, "AMXMatmul", refuse)
        if has_amx:  # elsewhere no weight is ever prepared for AMX: nothing to check
            f32_model = tiny_llama()
            quantize_(f32_model, "f4E2M1FN")
            precompile(f32_model)
        _refuse_compiling(mp)
        with torch.inference_mode():
            model(prompt(60))
    paths = {amx_linear.last_path(mod.linear) for mod in model.modules() if isinstance(mod, MXLinear)}
    assert "amx" in paths if has_amx else paths == {None}


@pytest.mark.parametrize("dot", ["on", "off"])
def test_a_bf16_models_prefill_on_the_bf16_dot_kernels_compiles_nothing(monkeypatch, dot):
    """Without AMX (``MLIR_MX_AMX=0``), a bf16 model's prefill rows run the
    ``bf16-*`` dot kernels where the CPU has AVX512-BF16 and they pay
    (``MLIR_MX_BF16_DOT=on`` forces them on an Intel CPU, ``off`` keeps the
    exact path's): ``precompile`` compiles whichever the calls take, so a
    60-token prefill and a decode step compile nothing (session 58: on a Zen 4
    the prefill compiled ``bf16-prefill`` after ``precompile``)."""
    from mlir_mx.kernels.dot.units import dot_kind
    from mlir_mx.torch import MXLinear

    monkeypatch.setenv("MLIR_MX_AMX", "0")
    monkeypatch.setenv("MLIR_MX_BF16_DOT", dot)
    model = tiny_llama().to(torch.bfloat16)
    quantize_(model, "f4E2M1FN", precompile=True)
    with monkeypatch.context() as mp:
        _refuse_compiling(mp)
        with torch.inference_mode():
            out = model(prompt(60), use_cache=True)
            model(out.logits[:, -1:].argmax(-1), cache=out.cache)
    layers = [mod.linear for mod in model.modules() if isinstance(mod, MXLinear)]
    quant = {kind.quantize_to for lin in layers for (kind, _cls, _t) in lin._calls}
    # the bf16 dot kernels ran where this CPU has them (AVX512-BF16; NEON bf16 on aarch64)
    on_dots = dot == "on" and dot_kind("bf16", "f4E2M1FN", 32) is not None
    assert quant == ({None, "bf16"} if on_dots else {None})

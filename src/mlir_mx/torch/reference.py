"""The correctness reference of a converted model, and the logit bound it must meet.

The reference is the same f32 model with each converted ``nn.Linear``'s weight
replaced by its dequantized MX weight (:func:`dequantize_`): it computes the
converted model's function exactly, so the two differ only by f32 rounding.
:func:`logit_bound` bounds that difference, per logit; the derivation is in
``docs/torch.md`` ("The correctness reference"):

1. Rounding errors are modelled as independent, zero-mean, relative errors of
   size at most ``u = 2^-24`` per operation (the probabilistic analysis of Higham
   and Mary, SIAM J. Sci. Comput. 2019).  An output element of a linear layer
   is a sum of ``K`` products ``t_k = x_k w_k``; each term passes through at
   most ``n`` roundings (``n = K + 2`` for our blocked order, ``docs/numerics.md``;
   ``n = K`` for any order of torch's sgemm), each rounding a partial result no
   larger than ``T = sum |t_k|``.  So its error has variance at most
   ``n u^2 T^2``, and the difference of the two implementations on the same
   input a standard deviation at most ``b = sqrt(2K + 2) u (|x| @ |W|.T)``.
2. To first order the logits differ by ``sum_l J_l e_l`` (``J_l``: the Jacobian of
   the logits with respect to layer ``l``'s output; the ``e_l`` are tiny).
3. That sum of many independent terms is near-Gaussian, with a variance per logit
   we measure on the reference itself: ``probes`` runs with ``s * b_l`` (random
   signs ``s``: variance ``b_l^2``, never less than the rounding's) added to every
   linear layer's output give samples of it.
4. Bound: ``|z_ours - z_ref| <= lam * max(sigma_i, sigma_row)`` (``lam = 8``: a
   Gaussian tail below 1e-15 per logit; ``sigma_row``, the RMS over the row's
   logits, floors the per-logit estimate against the noise of a few probes).

The variance of step 1 takes every partial sum at ``T``, its largest possible
size, where with terms of mixed signs they are far smaller; that slack also
covers the roundings both models do outside the linear layers (attention,
norms: short sums, the same ops on slightly different inputs).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from mlir_mx import oracle
from mlir_mx.errors import MXArgTypeError, MXValueError
from mlir_mx.numerics import ElementFormat, element_format

from .experts import experts_gate, is_stacked_experts
from .quantize_model import (
    QuantizeSummary,
    check_root,
    is_conv1d,
    linear_weight,
    selected_experts,
    selected_linears,
)
from .quantizer import quantize_weight

__all__ = ["LogitBound", "dequantize_", "greedy", "logit_bound"]

_U = 2.0**-24


def dequantize_(
    model: torch.nn.Module,
    element: str | ElementFormat = "f4E2M1FN",
    block_size: int = 32,
    filter_fn: Callable[[torch.nn.Module, str], bool] | None = None,
) -> QuantizeSummary:
    """Make ``model`` the reference of ``quantize_(model, element, ...)``, in place:
    each ``nn.Linear`` (or ``transformers`` ``Conv1D``, in its ``(in, out)``
    layout) that ``quantize_`` would convert (same selection) gets
    ``dequantize(quantize_weight(weight))`` as its weight, in its dtype.

    Each such layer gets a new ``Parameter``; the one it had is left as it is,
    so a weight it shares (a tied ``lm_head`` and the embedding) keeps its
    values elsewhere, as ``quantize_`` leaves the embedding of a tied model.
    A stacked-experts module (gpt-oss's ``GptOssExperts``) that ``quantize_``
    makes an ``MXExperts`` keeps its class and gets each expert's dequantized
    weights, in its own layout (transposed for gpt-oss).  A ``model`` that is
    itself such a layer is refused, as ``quantize_`` refuses it."""
    if not isinstance(model, torch.nn.Module):
        raise MXArgTypeError(f"model: expected a torch.nn.Module, got {type(model).__name__}")
    fmt = element_format(element)  # names the argument when unknown
    check_root(model)
    summary = QuantizeSummary(fmt.name, block_size)
    with torch.no_grad():
        for name, owner, attr in selected_experts(model, block_size, filter_fn, summary):
            block = getattr(owner, attr)
            for pname in ("gate_up_proj", "down_proj"):
                old = getattr(block, pname)
                new = torch.stack([
                    _dequantized(expert_weight(block, pname, e), fmt, block_size)
                    for e in range(old.shape[0])
                ])  # fmt: skip
                if getattr(block, "is_transposed", False):
                    new = new.transpose(1, 2).contiguous()
                setattr(block, pname, torch.nn.Parameter(new.to(old.dtype), requires_grad=False))
                summary.bytes_before += old.numel() * old.element_size()
            summary.experts.append(name)
        for name, owner, attr in selected_linears(model, block_size, filter_fn, summary):
            layer = getattr(owner, attr)
            old = layer.weight
            w = quantize_weight(linear_weight(layer), fmt, block_size)
            new = torch.from_numpy(oracle.dequantize(w)).to(old.dtype)
            if is_conv1d(layer):  # its weight is (in, out)
                new = new.t().contiguous()
            layer.weight = torch.nn.Parameter(new, requires_grad=old.requires_grad)
            summary.converted.append(name)
            if is_conv1d(layer):
                summary.conv1d.append(name)
            summary.bytes_before += old.numel() * old.element_size()
            summary.bytes_after += w.nbytes
    return summary


def _dequantized(w: torch.Tensor, fmt: ElementFormat, block_size: int) -> torch.Tensor:
    return torch.from_numpy(oracle.dequantize(quantize_weight(w, fmt, block_size)))


def expert_weight(block, name: str, e: int) -> torch.Tensor:
    """Expert ``e``'s ``gate_up_proj`` / ``down_proj`` of a stacked-experts module
    in ``nn.Linear``'s layout ``(out, in)`` (a view: gpt-oss's are transposed)."""
    p = getattr(block, name)[e]
    return p.t() if getattr(block, "is_transposed", False) else p


def _perturb_experts(gen):
    """A forward hook on a stacked-experts module (called ``(x, indices,
    weights)``) adding what the roundings of its two projections could
    change, as :func:`logit_bound`'s hook on linear layers does: each
    active expert's ``gate_up`` output moves by ``s * b`` before the gate, its
    ``down`` output by ``s * b`` of its own input, weighted as routed."""

    def hook(module, inputs, out):
        x, idx, rw = inputs[0].to(torch.float32), inputs[1], inputs[2]
        gate = experts_gate(module)
        delta = torch.zeros(out.shape, dtype=torch.float32)
        for e in idx.unique().tolist():
            tok, slot = torch.where(idx == e)
            xs = x[tok]
            wgu = expert_weight(module, "gate_up_proj", e).to(torch.float32)
            wd = expert_weight(module, "down_proj", e).to(torch.float32)
            g = xs @ wgu.T
            bias = getattr(module, "gate_up_proj_bias", None)
            if bias is not None:
                g = g + bias[e].to(torch.float32)
            h0 = gate(g)
            h1 = gate(g + _signed(_rounding(xs, wgu), gen))
            y = (h1 - h0) @ wd.T + _signed(_rounding(h1, wd), gen)
            delta.index_add_(0, tok, y * rw[tok, slot, None].to(torch.float32))
        return out + delta.to(out.dtype)

    return hook


def _rounding(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """``b = sqrt(2K + 2) u (|x| @ |W|^T)``: the standard deviation's bound of
    the difference of two f32 products ``x @ W^T`` (the module docstring)."""
    return math.sqrt(2 * w.shape[1] + 2) * _U * (x.abs() @ w.abs().T)


def _signed(b: torch.Tensor, gen) -> torch.Tensor:
    return (torch.randint(0, 2, b.shape, generator=gen).to(b.dtype) * 2 - 1) * b


@dataclass
class LogitBound:
    """``logits``: the reference's logits; ``bound``: per logit, how far a correct
    converted model's logits may be from them (same shape)."""

    logits: torch.Tensor
    bound: torch.Tensor

    def check(self, logits: torch.Tensor) -> float:
        """``max |logits - self.logits| / bound`` (<= 1: within the bound)."""
        diff = (logits.to(torch.float32) - self.logits).abs()
        return float((diff / self.bound).max())


def _check_lm(model, input_ids, model_name: str) -> None:
    """``model`` a module and ``input_ids`` a 2-D integer tensor (batch, tokens) of
    at least one token; ``MXArgTypeError`` / ``MXValueError`` naming the argument."""
    if not isinstance(model, torch.nn.Module):
        raise MXArgTypeError(
            f"{model_name}: expected a transformers causal LM (a torch.nn.Module), got "
            f"{type(model).__name__}"
        )
    if not isinstance(input_ids, torch.Tensor):
        raise MXArgTypeError(f"input_ids: expected a torch.Tensor, got {type(input_ids).__name__}")
    if input_ids.dtype.is_floating_point or input_ids.dtype.is_complex or input_ids.dtype == torch.bool:
        raise MXArgTypeError(f"input_ids: expected integer token ids, got dtype {input_ids.dtype}")
    if input_ids.dim() != 2 or input_ids.shape[1] == 0:
        raise MXValueError(
            f"input_ids: expected shape (batch, tokens) with a token or more, got "
            f"{tuple(input_ids.shape)}"
        )


def _logits(model, input_ids) -> torch.Tensor:
    return model(input_ids).logits.to(torch.float32)


def logit_bound(
    reference: torch.nn.Module,
    input_ids: torch.Tensor,
    *,
    probes: int = 4,
    lam: float = 8.0,
    seed: int = 0,
) -> LogitBound:
    """The reference's logits for ``input_ids`` and the bound on a converted
    model's (the module docstring): ``1 + probes`` forward passes of
    ``reference`` (an f32 causal LM whose output has ``.logits``)."""
    _check_lm(reference, input_ids, "reference")
    gen = torch.Generator().manual_seed(seed)

    def perturb(module, inputs, out):
        x = inputs[0].to(torch.float32)
        w = linear_weight(module).to(torch.float32)  # (out, in)
        return out + _signed(_rounding(x, w), gen).to(out.dtype)

    with torch.inference_mode():
        base = _logits(reference, input_ids)
        sq = torch.zeros_like(base, dtype=torch.float64)
        linears = [
            m for m in reference.modules() if type(m) is torch.nn.Linear or is_conv1d(m)
        ]
        experts = [m for m in reference.modules() if is_stacked_experts(m)]
        for _ in range(probes):
            hooks = [m.register_forward_hook(perturb) for m in linears]
            hooks += [m.register_forward_hook(_perturb_experts(gen)) for m in experts]
            try:
                sq += (_logits(reference, input_ids) - base).to(torch.float64) ** 2
            finally:
                for h in hooks:
                    h.remove()
    sigma = (sq / probes).sqrt()
    row = sigma.pow(2).mean(dim=-1, keepdim=True).sqrt()
    bound = lam * torch.maximum(sigma, row)
    return LogitBound(base, bound.to(torch.float32))


def greedy(model: torch.nn.Module, input_ids: torch.Tensor, new_tokens: int) -> np.ndarray:
    """``new_tokens`` greedy tokens after ``input_ids`` (batch 1), with the KV cache
    (a ``transformers`` causal LM: ``cache=`` in, ``.cache`` out, as in 5.24).
    ``new_tokens`` 0: an empty array, without running the model."""
    _check_lm(model, input_ids, "model")
    if input_ids.shape[0] != 1:
        raise MXValueError(f"input_ids: expected batch 1, got shape {tuple(input_ids.shape)}")
    if isinstance(new_tokens, bool) or not isinstance(new_tokens, (int, np.integer)):
        raise MXArgTypeError(f"new_tokens: expected an int, got {type(new_tokens).__name__}")
    if new_tokens < 0:
        raise MXValueError(f"new_tokens: expected 0 or more, got {new_tokens}")
    tokens: list[int] = []
    if new_tokens == 0:
        return np.array(tokens, dtype=np.int64)
    with torch.inference_mode():
        out = model(input_ids, use_cache=True)
        while True:
            nxt = out.logits[:, -1].argmax(-1, keepdim=True)
            tokens.append(int(nxt))
            if len(tokens) == new_tokens:
                return np.array(tokens, dtype=np.int64)
            out = model(nxt, cache=out.cache, use_cache=True)

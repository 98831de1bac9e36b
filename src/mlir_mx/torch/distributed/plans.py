"""Tensor-parallel plans: ``"auto"`` is transformers' own plan of the model.

A transformers model carries its plan: ``model.tp_plan`` (``config.base_model_tp_plan``
under the base model's prefix, plus the head's, e.g. Llama's)::

    lm_head                          colwise_gather_output
    model.embed_tokens               embedding_rowwise
    model.layers.*.self_attn.q_proj  colwise     (k_proj, v_proj, mlp.gate_proj, mlp.up_proj too)
    model.layers.*.self_attn.o_proj  rowwise     (mlp.down_proj too)

:func:`auto_plan` translates it to torch styles: ``colwise`` / ``rowwise`` to
:class:`MXColwiseParallel` / :class:`MXRowwiseParallel` (an ``MXLinear`` or an
``nn.Linear``); ``colwise_gather_output`` (and ``colwise_rep``) to colwise
with the output gathered (``Replicate``: every rank gets all the logits);
``embedding_rowwise`` to torch's ``RowwiseParallel(input_layouts=Replicate())``
on the ``nn.Embedding`` (its rows split over the ranks, the lookup's partial
rows all-reduced: exact, each row is one rank's), left out where the
embeddings are tied to the head (the head reads the embedding's weight).
Another entry (sequence parallel, packed/local styles) is refused: this
package runs the plain Megatron split only.
"""

from __future__ import annotations

import torch
from torch.distributed.tensor import Replicate
from torch.distributed.tensor.parallel import ParallelStyle, RowwiseParallel

from mlir_mx.errors import MXArgTypeError, MXValueError

from .tensor_parallel import MXColwiseParallel, mx_style

__all__ = ["auto_plan", "resolve_plan"]

_STRINGS = ("colwise", "rowwise", "colwise_rep", "rowwise_rep", "colwise_gather_output",
            "embedding_rowwise")  # fmt: skip


def _style(key: str, value: str, tied: bool) -> ParallelStyle | None:
    if value == "colwise_gather_output":
        return MXColwiseParallel(output_layouts=Replicate())
    if value == "embedding_rowwise":
        return None if tied else RowwiseParallel(input_layouts=Replicate())
    if value not in _STRINGS:
        raise MXValueError(
            f"tp_plan: {key!r} is planned {value!r}; mlir_mx's tensor parallel runs "
            f"{', '.join(_STRINGS)}"
        )
    return mx_style(value)


def auto_plan(model: torch.nn.Module) -> dict[str, ParallelStyle]:
    """``{module name pattern: style}`` from ``model.tp_plan`` (transformers';
    the module docstring).  A model without one is an :class:`MXValueError`."""
    plan = getattr(model, "tp_plan", None) or getattr(model, "_tp_plan", None)
    if not plan:
        raise MXValueError(
            f"tp_plan: 'auto' needs the model's own plan (transformers' tp_plan / "
            f"base_model_tp_plan); {type(model).__name__} has none: pass a dict"
        )
    tied = bool(getattr(getattr(model, "config", None), "tie_word_embeddings", False))
    out = {}
    for key, value in plan.items():
        style = _style(key, value, tied)
        if style is not None:
            out[key] = style
    return out


def resolve_plan(model: torch.nn.Module, tp_plan) -> dict[str, ParallelStyle]:
    """``tp_plan`` as a dict of styles: ``"auto"`` (:func:`auto_plan`) or a dict of
    module name pattern -> torch style or plan string, as it is."""
    if tp_plan == "auto":
        return auto_plan(model)
    if isinstance(tp_plan, dict):
        tied = bool(getattr(getattr(model, "config", None), "tie_word_embeddings", False))
        styles = {k: _style(k, v, tied) if isinstance(v, str) else v for k, v in tp_plan.items()}
        return {k: v for k, v in styles.items() if v is not None}
    raise MXArgTypeError(f"tp_plan: expected 'auto' or a dict, got {tp_plan!r}")


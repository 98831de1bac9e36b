"""The rows of several experts' projections in one output, for
:class:`~.experts.MXExperts`: a token's ``k`` experts (decode) or each
expert's group of tokens (prefill), each projection's kernels in one
parallel region (:func:`mlir_mx.execution.threads.one_region`)."""

from __future__ import annotations

import itertools
from contextlib import nullcontext

import torch

from mlir_mx.execution.threads import one_region

from . import experts_amx
from .experts_amx import amx_projection
from .thread_policy import layer_threads

__all__ = ["project_rows"]


def project_rows(
    layers, experts: list[int], x, shared=False, bf16=False, counts=None
) -> torch.Tensor:
    """``(sum(counts), out)`` f32: segment ``i`` (``counts[i]`` rows, default
    one each) is ``layers[experts[i]]`` on ``x``'s rows of that segment
    (``x``'s only row for every segment when ``shared``), bias included,
    as the layer's own call computes it: the kernel into the rows
    (``Linear.call_into``), then the bias in f32; AMX-BF16 where
    :func:`~.experts_amx.amx_projection` takes the segment (the same
    bits); the layer's own call where neither applies (a fused layer,
    activations quantized by a separate kernel).  ``x``: f32,
    C-contiguous.  ``bf16``: ``x`` holds bf16 values (:meth:`MXExperts.expert`)."""
    counts = counts or [1] * len(experts)
    starts = [0, *itertools.accumulate(counts[:-1])]
    n_in = x.shape[-1]
    y = torch.zeros(sum(counts), layers[experts[0]].out_features, dtype=torch.float32)
    x_row, y_row = (0 if shared else 4 * n_in), 4 * y.shape[1]
    x_addr, y_addr = x.data_ptr(), y.data_ptr()
    own, biased = [], []  # segments the layer's own call makes; those with their bias in
    # the kernels: one parallel region (execution.threads), each layer's
    # bound call at most once in it (an expert routed twice: one region each)
    distinct = len(set(experts)) == len(experts)
    with one_region() if distinct else nullcontext():
        for i, e in enumerate(experts):
            lin, s, c = layers[e], starts[i], counts[i]
            part = (
                None
                if shared or c < experts_amx.EXPERT_MIN_ROWS
                else amx_projection(lin, x[s : s + c], bf16)
            )
            if part is not None:
                y[s : s + c] = part
                biased.append(i)
                continue
            threads = lin.threads or layer_threads()
            if lin.fused is not None or not lin.linear.call_into(
                x_addr + s * x_row, c, y_addr + s * y_row, threads, bf16
            ):
                own.append(i)
    for i in own:
        lin, s, c = layers[experts[i]], starts[i], counts[i]
        y[s : s + c] = lin(x[:1] if shared else x[s : s + c])
    biased += own
    biases = [layers[e].bias for e in experts]
    if not biased and all(b is not None for b in biases) and max(counts) == 1:
        y += torch.stack(biases).to(torch.float32)
    else:
        for i, b in enumerate(biases):
            if b is not None and i not in biased:
                y[starts[i] : starts[i] + counts[i]] += b.to(torch.float32)
    return y

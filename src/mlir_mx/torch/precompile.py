"""``precompile``: compile the kernels of a converted model now, not in its first forward."""

from __future__ import annotations

import itertools
import sys
import time

import torch

from mlir_mx.errors import MXArgTypeError

from .experts import MXExperts
from .module import MXLinear

__all__ = ["precompile"]


def precompile(
    model: torch.nn.Module, m=None, *, progress: bool | None = None, bf16: bool | None = None
) -> int:
    """Compile (or load from the compile cache) the kernels of every
    :class:`MXLinear` of ``model`` (those of ``MXExperts`` included) for
    calls with ``m`` rows of activations (``batch x tokens``; an int or a
    sequence; None: one of each shape class, so every kernel a forward may
    need), on each layer's thread count (None: ``torch.get_num_threads()``).
    ``bf16``: the layers' inputs will be bf16 (None: where the model holds
    a bfloat16 parameter or buffer, a bf16 model's), so the AMX path those
    take on a CPU with AMX-BF16 is made ready too (its kernels compiled and
    each weight prepared for the tiles, for row counts from
    ``amx_linear.MIN_ROWS``), as it is for ``activations="bf16"`` layers;
    not an ``MXExperts``' projections, which prepare theirs at their first
    call whose inputs pass the guard (``torch/experts_amx.py``).

    With the persistent compile cache (``MLIR_MX_CACHE_DIR``) warm, this loads
    machine code and takes well under a second; cold, it compiles each
    distinct kernel once (layers of the same shape share it).  ``progress``:
    a progress line on stderr (default: when stderr is a terminal).  Returns
    the number of layers prepared.
    """
    if not isinstance(model, torch.nn.Module):
        raise MXArgTypeError(f"model: expected a torch.nn.Module, got {type(model).__name__}")
    layers = [mod for mod in model.modules() if isinstance(mod, MXLinear)]
    # An MXExperts' projections prepare their AMX weight lazily, at their first
    # call whose inputs pass the guard (torch/experts_amx.py): not here.
    experts = {id(lay) for mod in model.modules() if isinstance(mod, MXExperts)
               for lay in (*mod.gate_up, *mod.down)}  # fmt: skip
    if bf16 is None:
        held = itertools.chain(model.parameters(), model.buffers())
        bf16 = any(t.dtype == torch.bfloat16 for t in held)
    show = sys.stderr.isatty() if progress is None else bool(progress)
    t0 = time.perf_counter()
    for i, layer in enumerate(layers, 1):
        layer.precompile(m, bf16=bool(bf16) and id(layer) not in experts)
        if show:
            elapsed = time.perf_counter() - t0
            bar = "#" * (30 * i // len(layers))
            sys.stderr.write(
                f"\rmlir_mx: precompiling [{bar:<30}] {i}/{len(layers)} layers, {elapsed:.1f} s"
            )
            sys.stderr.flush()
    if show and layers:
        sys.stderr.write("\n")
    return len(layers)

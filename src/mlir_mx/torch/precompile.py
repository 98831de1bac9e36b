"""``precompile``: compile the kernels of a converted model now, not in its first forward."""

from __future__ import annotations

import sys
import time

import torch

from mlir_mx.errors import MXArgTypeError

from .module import MXLinear

__all__ = ["precompile"]


def precompile(model: torch.nn.Module, m=None, *, progress: bool | None = None) -> int:
    """Compile (or load from the compile cache) the kernels of every
    :class:`MXLinear` of ``model`` (those of ``MXExperts`` included) for
    calls with ``m`` rows of activations (``batch x tokens``; an int or a
    sequence; None: one of each shape class, so every kernel a forward may
    need), on each layer's thread count (None: ``torch.get_num_threads()``).

    With the persistent compile cache (``MLIR_MX_CACHE_DIR``) warm, this loads
    machine code and takes well under a second; cold, it compiles each
    distinct kernel once (layers of the same shape share it).  ``progress``:
    a progress line on stderr (default: when stderr is a terminal).  Returns
    the number of layers prepared.
    """
    if not isinstance(model, torch.nn.Module):
        raise MXArgTypeError(f"model: expected a torch.nn.Module, got {type(model).__name__}")
    layers = [mod for mod in model.modules() if isinstance(mod, MXLinear)]
    show = sys.stderr.isatty() if progress is None else bool(progress)
    t0 = time.perf_counter()
    for i, layer in enumerate(layers, 1):
        layer.precompile(m)
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

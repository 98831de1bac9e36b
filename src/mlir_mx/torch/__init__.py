"""mlir-mx for torch models: ``MXLinear``, ``quantize_`` and the ``mlir_mx::linear`` op.

Needs torch (``pip install 'mlir-mx[torch]'``; tested with torch 2.13,
:data:`.versions.TESTED_TORCH`: another version warns once)::

    from mlir_mx.torch import quantize_
    summary = quantize_(model, element="f4E2M1FN")   # every nn.Linear -> MXLinear
    with torch.inference_mode():
        logits = model(input_ids).logits

See ``docs/torch.md``.
"""

from __future__ import annotations

try:
    import torch  # noqa: F401
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError(
        f"mlir_mx.torch needs torch (tested: torch 2.13.0 CPU): pip install 'mlir-mx[torch]' ({e})"
    ) from e

from .checkpoint import from_pretrained, mx_weights, save_pretrained
from .config import MXConfig
from .experts import Gate, MXExperts
from .gguf_model import gguf_tokenizer
from .module import InferenceOnlyError, MXLinear
from .precompile import precompile
from .quantize_model import QuantizeSummary, quantize_
from .quantizer import quantize_weight
from .reference import LogitBound, dequantize_, greedy, logit_bound
from .thread_policy import decode_threads, set_decode_policy
from .transformers_hook import register_on_import
from .versions import warn_untested_torch

warn_untested_torch()  # once, for a torch outside the tested range (versions.TESTED_TORCH)
# transformers' from_pretrained / save_pretrained through mlir-mx (docs/torch.md,
# "transformers' own API"): now, or when transformers' quantizers are imported.
register_on_import()

__all__ = [
    "Gate",
    "InferenceOnlyError",
    "LogitBound",
    "MXConfig",
    "MXExperts",
    "MXLinear",
    "QuantizeSummary",
    "decode_threads",
    "dequantize_",
    "from_pretrained",
    "gguf_tokenizer",
    "greedy",
    "logit_bound",
    "mx_weights",
    "precompile",
    "quantize_",
    "quantize_weight",
    "save_pretrained",
    "set_decode_policy",
]

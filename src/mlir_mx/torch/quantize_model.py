"""``quantize_``: replace a model's ``nn.Linear`` modules (and ``transformers``'
``Conv1D``, GPT-2's) by ``MXLinear``, in place."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from mlir_mx.errors import MXArgTypeError, MXValueError
from mlir_mx.numerics import ElementFormat

from .config import MXConfig
from .experts import MXExperts, is_stacked_experts
from .module import MXLinear, is_conv1d
from .thread_policy import install as install_decode_policy

__all__ = [
    "AFTER_QUANTIZE", "FUSE_GROUPS", "QuantizeSummary", "check_root", "is_conv1d", "linear_weight", "quantize_", "selected_experts",
    "selected_linears",
]  # fmt: skip


@dataclass
class QuantizeSummary:
    """What :func:`quantize_` did.

    ``converted``: the names of the layers now ``MXLinear``; ``skipped``: name ->
    reason for the linear layers kept (a shape that does not fit the block
    size, a subclass of ``nn.Linear``); ``conv1d``: the names of the converted
    layers that were ``transformers`` ``Conv1D``; ``bytes_before`` / ``bytes_after``:
    the weight bytes of the converted layers before (their dtype) and after (what
    each ``MXLinear`` holds, ``Linear.held``: the stored codes and scales, or the
    dot kernels' records; fixed at construction, so calls do not change it).
    """

    element: str
    block_size: int
    converted: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    conv1d: list[str] = field(default_factory=list)
    experts: list[str] = field(default_factory=list)
    bytes_before: int = 0
    bytes_after: int = 0
    #: the groups of converted layers fused (``fuse=``): their names, one list a group
    fused: list[list[str]] = field(default_factory=list)

    def __str__(self) -> str:
        ratio = self.bytes_after / self.bytes_before if self.bytes_before else 0.0
        conv = f", {len(self.conv1d)} of them Conv1D" if self.conv1d else ""
        moe = f", {len(self.experts)} experts modules -> MXExperts" if self.experts else ""
        moe += f", {len(self.fused)} groups fused" if self.fused else ""
        lines = [
            f"quantize_: {len(self.converted)} nn.Linear layers{conv} -> MXLinear{moe} ({self.element}, "
            f"block {self.block_size}); weights {self.bytes_before / 2**20:.1f} MiB -> "
            f"{self.bytes_after / 2**20:.1f} MiB ({ratio:.3f}x)"
        ]
        lines += [f"  kept {name}: {why}" for name, why in self.skipped.items()]
        return "\n".join(lines)


class _Unset:
    """A keyword left out, told apart from its default given (refused next to
    a config); a signature shows the default."""

    def __init__(self, default):
        self.default = default

    def __repr__(self) -> str:
        return repr(self.default)


_UNSET_ACTIVATIONS, _UNSET_BLOCK_SIZE = _Unset(None), _Unset(32)


def _config(element, activations, block_size) -> MXConfig:
    """``quantize_``'s :class:`MXConfig`: ``element`` itself when it is one (no
    ``activations=`` / ``block_size=`` beside it), else made from the three."""
    pairs = (("activations", activations), ("block_size", block_size))
    given = {name: value for name, value in pairs if not isinstance(value, _Unset)}
    if isinstance(element, MXConfig):
        if given:
            raise MXValueError(
                f"{', '.join(given)}: given beside an MXConfig, which holds them; "
                "give the config alone, or the keywords alone"
            )
        return element
    return MXConfig(element, given.get("activations"), given.get("block_size", 32))


def quantize_(
    model: torch.nn.Module,
    element: str | ElementFormat | MXConfig = "f4E2M1FN",
    activations=_UNSET_ACTIVATIONS,
    block_size: int = _UNSET_BLOCK_SIZE,
    filter_fn: Callable[[torch.nn.Module, str], bool] | None = None,
    *,
    threads: int | None = None,
    fuse=False,
    precompile: bool = False,
) -> QuantizeSummary:
    """Replace every ``nn.Linear`` of ``model`` (``lm_head`` included) by an
    :class:`MXLinear` with MX weights of format ``element``, in place, as torchao's
    ``quantize_`` does; ``transformers``' ``Conv1D`` (GPT-2's projections, a
    linear layer whose weight is ``(in, out)``) too (``MXLinear.from_conv1d``).

    ``element``, ``activations`` and ``block_size`` may come as one
    :class:`MXConfig` instead, in ``element``'s place (``quantize_(model,
    MXConfig(...))``); a config with either keyword beside it raises
    ``MXValueError``.

    ``filter_fn(module, name)`` (optional) chooses the layers: those for which it
    returns False are kept.  A layer whose ``in_features`` is not a multiple of
    ``block_size`` is kept too, and so is a subclass of ``nn.Linear``, each
    with a warning naming it and why (``summary.skipped``).  Layers are converted
    one at a time and each original weight is released as soon as its layer is
    replaced, so peak memory stays near the model's own.  ``activations``: None
    (activations enter exactly) or the MX format they are quantized to per call
    (``"i8"``: W4A8 on the CPU's integer dot units; ``MXLinear``).  ``threads``: as for
    ``MXLinear`` (None follows ``torch.get_num_threads()``).

    ``fuse``: False (default), True (the siblings of :data:`FUSE_GROUPS`:
    ``q_proj``/``k_proj``/``v_proj`` and ``gate_proj``/``up_proj``), or a list
    of tuples of attribute names.  Each group of converted ``MXLinear``
    siblings of one parent with one ``in_features`` then holds one MX weight
    (concatenated along ``out``) and runs one kernel call for an input they
    share (:mod:`mlir_mx.torch.fused`); each stays an ``MXLinear`` with its
    own name, bias and ``state_dict`` entries.  ``precompile``: compile every
    kernel the model's forward may need now (:func:`~mlir_mx.torch.precompile`;
    after fusing, so the fused kernels).  Returns a :class:`QuantizeSummary`.
    """
    if not isinstance(model, torch.nn.Module):
        raise MXArgTypeError(f"model: expected a torch.nn.Module, got {type(model).__name__}")
    config = _config(element, activations, block_size)  # names the argument when wrong
    check_root(model)
    fmt, activations, block_size = config.format, config.activations_format, config.block_size
    groups = _fuse_groups(fuse)
    summary = QuantizeSummary(fmt.name, block_size)
    for name, owner, attr in selected_experts(model, block_size, filter_fn, summary):
        block = getattr(owner, attr)
        before = sum(p.numel() * p.element_size() for p in (block.gate_up_proj, block.down_proj))
        new = MXExperts.from_experts(
            block, fmt, block_size, threads=threads, activations=activations
        )
        setattr(owner, attr, new)
        del block
        summary.experts.append(name)
        summary.bytes_before += before
        summary.bytes_after += new.nbytes
    for name, owner, attr in selected_linears(model, block_size, filter_fn, summary):
        layer = getattr(owner, attr)
        before = layer.weight.numel() * layer.weight.element_size()
        build = MXLinear.from_conv1d if is_conv1d(layer) else MXLinear.from_linear
        new = build(layer, fmt, block_size, threads=threads, activations=activations)
        if is_conv1d(layer):
            summary.conv1d.append(name)
        setattr(owner, attr, new)
        del layer  # the last reference: its weight is freed before the next layer
        summary.converted.append(name)
        summary.bytes_before += before
        summary.bytes_after += new.nbytes
    for names in groups:
        _fuse(model, names, summary)
    if precompile:
        from .precompile import precompile as precompile_model

        precompile_model(model)
    for hook in AFTER_QUANTIZE:
        hook(model)
    return summary


def _decode_policy(model: torch.nn.Module) -> None:
    """The decode thread policy's hooks on a model with MX layers (``thread_policy``)."""
    if any(isinstance(m, (MXLinear, MXExperts)) for m in model.modules()):
        install_decode_policy(model)


#: Called as ``hook(model)`` at the end of every ``quantize_``: the decode thread
#: policy's (``thread_policy.install``); ``transformers_quantizer`` adds the one
#: that lets transformers' ``model.save_pretrained`` write the MX checkpoint.
AFTER_QUANTIZE: list[Callable] = [_decode_policy]


#: The siblings ``quantize_(fuse=True)`` fuses: attribute names of one parent
#: module that read the same input (Llama-style attention and MLP).
FUSE_GROUPS = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))


def _fuse_groups(fuse) -> tuple[tuple[str, ...], ...]:
    if fuse is True:
        return FUSE_GROUPS
    if fuse is False or fuse is None:
        return ()
    try:
        groups = None if isinstance(fuse, str) else tuple(tuple(g) for g in fuse)
    except TypeError:
        groups = None
    if groups and any(isinstance(g, str) for g in fuse):
        groups = None
    if not groups or any(len(g) < 2 or not all(isinstance(n, str) for n in g) for g in groups):
        raise MXArgTypeError(
            f"fuse: expected True, False or a list of tuples of two or more attribute names "
            f"(e.g. [('q_proj', 'k_proj', 'v_proj')]), got {fuse!r}"
        )
    return groups


def _fuse(model, attrs: tuple[str, ...], summary: QuantizeSummary) -> None:
    """Fuse each group ``attrs`` of sibling MXLinear layers this call converted."""
    from .fused import FusedWeight, concat_rows

    converted = set(summary.converted)
    for parent_name, parent in model.named_modules():
        prefix = parent_name + "." if parent_name else ""
        names = [prefix + a for a in attrs]
        layers = [getattr(parent, a, None) for a in attrs]
        if not all(n in converted and isinstance(m, MXLinear) for n, m in zip(names, layers, strict=True)):
            continue
        if len({m.in_features for m in layers}) != 1 or any(m.fused for m in layers):
            continue
        fused = FusedWeight(
            concat_rows([m.weight() for m in layers]), [m.out_features for m in layers],
            layers[0].activations,
        )  # fmt: skip
        summary.bytes_after -= sum(m.nbytes for m in layers)
        for i, m in enumerate(layers):
            fused.attach(m, i)
        summary.bytes_after += fused.linear.nbytes
        summary.fused.append(names)


def linear_weight(module) -> torch.Tensor:
    """The weight of an ``nn.Linear`` or a ``Conv1D`` in ``nn.Linear``'s layout
    ``(out, in)`` (a Conv1D's: a transposed view)."""
    return module.weight.t() if is_conv1d(module) else module.weight


def selected_experts(model, block_size: int, filter_fn, summary: QuantizeSummary):
    """``(name, parent module, attribute)`` of each stacked-experts module to
    convert (:func:`mlir_mx.torch.experts.is_stacked_experts`: gpt-oss's
    ``GptOssExperts``, Mixtral's in transformers 5), one at a time; one whose
    ``hidden`` or ``intermediate`` size is not a multiple of ``block_size``
    is kept and recorded in ``summary.skipped``."""
    _check_filter(filter_fn)
    names = [n for n, m in model.named_modules() if n and is_stacked_experts(m)]
    for name in names:
        owner, attr, block = _lookup(model, name, filter_fn)
        if block is None:
            continue
        dims = block.down_proj.shape[1:]
        del block
        if any(d % block_size for d in dims):
            summary.skipped[name] = f"expert sizes {tuple(dims)} are not multiples of block_size {block_size}"
            continue
        yield name, owner, attr


def check_root(model: torch.nn.Module) -> None:
    """Refuse a ``model`` that is itself a layer ``quantize_`` would replace.

    ``quantize_`` swaps each converted layer for a new module on its parent
    (``setattr``); the object the caller holds cannot be swapped that way, so
    a bare ``nn.Linear`` (or ``Conv1D``, or a stacked-experts module) cannot be
    converted in place (torchao's ``quantize_`` converts one by replacing its
    weight tensor).  The error names the one-layer constructors instead (until
    session 60 the root's empty name raised ``AttributeError``)."""
    if is_conv1d(model):
        build = "MXLinear.from_conv1d"
    elif isinstance(model, torch.nn.Linear):
        build = "MXLinear.from_linear"
    elif is_stacked_experts(model):
        build = "MXExperts.from_experts"
    else:
        return
    raise MXValueError(
        f"model: is itself a {type(model).__name__}; quantize_ replaces the layers inside "
        "a model on their parent module, and cannot replace the object you hold: convert "
        f"one layer with mlir_mx.torch.{build}(layer, element) (it returns the new "
        "module), or quantize_ a module that contains it (e.g. nn.Sequential(layer))"
    )


def _check_filter(filter_fn) -> None:
    if filter_fn is not None and not callable(filter_fn):
        raise MXArgTypeError(
            f"filter_fn: expected a callable (module, name) -> bool, got {filter_fn!r}"
        )


def _lookup(model, name: str, filter_fn):
    """``(owner, attribute, module)`` of the submodule ``name``; the module
    None where ``filter_fn`` leaves it out."""
    parent, _, attr = name.rpartition(".")
    owner = model.get_submodule(parent) if parent else model
    module = getattr(owner, attr)
    if filter_fn is not None and not filter_fn(module, name):
        module = None
    return owner, attr, module


def _why_kept(layer, block_size: int) -> str | None:
    """Why a linear layer cannot be converted; None when it can."""
    if type(layer) is not torch.nn.Linear and not is_conv1d(layer):
        return (
            f"{type(layer).__name__} is a subclass of nn.Linear, kept: its owner may read "
            ".weight directly (as nn.MultiheadAttention does)"
        )
    k = linear_weight(layer).shape[1]
    if k % block_size:
        return f"in_features {k} is not a multiple of block_size {block_size}"
    return None


def selected_linears(model, block_size: int, filter_fn, summary: QuantizeSummary):
    """``(name, parent module, attribute)`` of each layer to convert, one at a
    time (the model may be changed between two): exactly ``torch.nn.Linear``,
    or ``transformers``' ``Conv1D``.  Linear layers kept (a shape that does
    not fit the block size; a subclass of ``nn.Linear``, whose owner may read
    ``.weight`` directly, as ``nn.MultiheadAttention`` does) are recorded in
    ``summary.skipped`` with why and named in a warning at the end."""
    _check_filter(filter_fn)
    # Names only: holding the modules would keep every original weight alive
    # until the end (the peak would be both models).
    names = [
        n for n, m in model.named_modules() if n and (isinstance(m, torch.nn.Linear) or is_conv1d(m))
    ]  # not the root: check_root refused it
    for name in names:
        owner, attr, layer = _lookup(model, name, filter_fn)
        if layer is None:
            continue
        why = _why_kept(layer, block_size)
        del layer
        if why is not None:
            summary.skipped[name] = why
            continue
        yield name, owner, attr
    if summary.skipped:
        kept = ", ".join(f"{n} ({why})" for n, why in summary.skipped.items())
        warnings.warn(
            f"quantize_: kept {len(summary.skipped)} linear layer(s): {kept}", stacklevel=3
        )

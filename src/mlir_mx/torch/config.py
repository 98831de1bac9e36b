"""``MXConfig``: how :func:`~mlir_mx.torch.quantize_` quantizes a model, as one
value (torchao's ``MXFPInferenceConfig`` plays this part there)::

    config = MXConfig(element="f4E2M1FN", activations="i8")   # W4A8, blocks of 32
    quantize_(model, config)

It is checked once, when made, and frozen: a config that exists is valid, and
the layers it reaches take its :attr:`~MXConfig.format` (an
:class:`~mlir_mx.numerics.ElementFormat`) as it is.  It holds what the
quantized model computes, not how the conversion runs (``filter_fn``,
``threads``, ``fuse`` and ``precompile`` stay ``quantize_``'s keywords).  A
field added later gets a default that keeps today's meaning, so a config
written now keeps its meaning.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import ClassVar

from mlir_mx.errors import MXArgTypeError, MXValueError
from mlir_mx.linear import activations_format
from mlir_mx.numerics import ElementFormat, element_format

__all__ = ["MXConfig"]


@dataclass(frozen=True)
class MXConfig:
    """The MX quantization of a model's linear layers.

    Args:
        element: the weights' MX element format: a name (``f4E2M1FN``,
            ``f8E4M3FN``, ``i8``, ...) or an :class:`~mlir_mx.numerics.ElementFormat`;
            held as its name.
        activations: None (activations enter the products exactly) or the MX
            element format f32 activations are quantized to per call (``"i8"``:
            W4A8 on the CPU's integer dot units); held as its name.
        block_size: elements per shared E8M0 scale, along ``in_features``.

    Raises:
        MXValueError, MXArgTypeError: an unknown format (naming ``element`` or
            ``activations``), a block size that is not a positive int.
    """

    element: str = "f4E2M1FN"
    activations: str | None = None
    block_size: int = 32
    #: transformers' name for it (``from_pretrained(path, quantization_config=MXConfig())``:
    #: ``docs/torch.md``, "transformers' own API"); not a field.
    quant_method: ClassVar[str] = "mlir_mx"

    def __new__(cls, *args, **kwargs):
        # Before the dataclass's __init__, so a keyword it lacks is named here
        # rather than in a bare TypeError.
        if "weights" in kwargs:
            raise MXArgTypeError(
                "weights: MXConfig names the weights' MX element format element= "
                f"(MXConfig(element={kwargs['weights']!r}))"
            )
        unknown = sorted(set(kwargs) - {f.name for f in fields(cls)})
        if unknown:
            raise MXArgTypeError(
                f"{unknown[0]}: not an MXConfig field (element, activations, block_size)"
            )
        return super().__new__(cls)

    def __post_init__(self) -> None:
        fmt, act = element_format(self.element), activations_format(self.activations)
        size = self.block_size
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise MXValueError(f"block_size: expected a positive int, got {size!r}")
        object.__setattr__(self, "element", fmt.name)
        object.__setattr__(self, "activations", None if act is None else act.name)
        # Not fields: not compared, shown or copied as such (``dataclasses.asdict``
        # gives the names alone).
        object.__setattr__(self, "_format", fmt)
        object.__setattr__(self, "_activations_format", act)

    @property
    def format(self) -> ElementFormat:
        """The weights' :class:`~mlir_mx.numerics.ElementFormat` (:attr:`element`'s)."""
        return self._format

    @property
    def activations_format(self) -> ElementFormat | None:
        """The activations' :class:`~mlir_mx.numerics.ElementFormat` (None: exact)."""
        return self._activations_format

    def to_dict(self) -> dict:
        """The fields and ``quant_method``: what transformers writes of it."""
        return {"quant_method": self.quant_method, **asdict(self)}

    @classmethod
    def from_dict(cls, d: dict) -> MXConfig:
        """The config :meth:`to_dict` gave (``quant_method`` may be there)."""
        if not isinstance(d, dict):
            raise MXArgTypeError(f"d: expected a dict, got {type(d).__name__}")
        return cls(**{k: v for k, v in d.items() if k != "quant_method"})

    def __reduce__(self):
        # Pickled and copied as its fields (names): made, and checked, again.
        return (type(self), tuple(getattr(self, f.name) for f in fields(self)))

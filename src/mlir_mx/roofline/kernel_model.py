"""What the byte and FLOP model returns: buffers, per-op counts, the model of
one function (totals, intensity, time floor on a machine) and the
decomposition of an intensity shift; plus :class:`ModelError`.

The rules that fill these in: :mod:`mlir_mx.roofline.buffers` (bytes) and
:mod:`mlir_mx.roofline.flops` (FLOPs); :mod:`mlir_mx.roofline.ir_model` lowers the
IR and applies both.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mlir import ir

from mlir_mx.errors import ModelError, expect_type
from mlir_mx.ir_utils import static_shape

__all__ = [
    "Buffer",
    "KernelModel",
    "LinalgCount",
    "ModelError",
    "Shift",
    "element_bits",
    "require_static_shape",
    "shift",
]


def element_bits(t: ir.Type) -> int:
    """Bit width of one element of type ``t`` (``index`` counts as 64)."""
    if isinstance(t, ir.FloatType):
        return t.width
    if isinstance(t, ir.IntegerType):
        return t.width
    if isinstance(t, ir.IndexType):
        return 64
    if isinstance(t, ir.ComplexType):
        return 2 * element_bits(t.element_type)
    raise ModelError(f"no bit width for element type {t}")


def _fmt_num(x: float) -> str:
    return f"{int(x):,}" if float(x).is_integer() else f"{x:,.2f}"


@dataclass
class Buffer:
    """One buffer at the function boundary (or a temporary)."""

    index: int | None  # argument index; None for a returned fresh buffer / temporary
    name: str  # role: "A mantissa", "A scale", "B", "C (accumulator)", "arg3", ...
    type: str
    shape: tuple[int, ...]
    element: str
    bits: int
    returned: bool = False

    @property
    def elements(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def bytes(self) -> float:
        """``elements * bits / 8``: fractional for sub-byte types (f6: 0.75 byte)."""
        b = self.elements * self.bits / 8
        return int(b) if float(b).is_integer() else b


@dataclass
class LinalgCount:
    """The count of one linalg op: its iteration space and per-point ops."""

    op: str
    iterations: int
    loop_ranges: tuple[int, ...]
    useful: int = 0  # FLOPs per point
    dequant: int = 0
    other: int = 0
    conversions: int = 0
    classified: list[tuple[str, str]] = field(default_factory=list)  # (op, class)


@dataclass
class KernelModel:
    """Bytes and FLOPs of one function, read from its lowered IR."""

    function: str
    buffers: list[Buffer]
    temporaries: list[Buffer]
    ops: list[LinalgCount]
    notes: list[str] = field(default_factory=list)
    label: str = ""

    # ---------------------------------------------------------------- totals
    @property
    def bytes(self) -> float:
        b = sum(buf.bytes for buf in self.buffers)
        return int(b) if float(b).is_integer() else b

    @property
    def flops_useful(self) -> int:
        return sum(c.useful * c.iterations for c in self.ops)

    @property
    def flops_dequant(self) -> int:
        return sum(c.dequant * c.iterations for c in self.ops)

    @property
    def flops_other(self) -> int:
        return sum(c.other * c.iterations for c in self.ops)

    @property
    def flops(self) -> int:
        return self.flops_useful + self.flops_dequant + self.flops_other

    @property
    def conversions(self) -> int:
        return sum(c.conversions * c.iterations for c in self.ops)

    @property
    def intensity(self) -> float:
        """FLOPs per byte (``inf`` when no bytes move)."""
        return self.flops / self.bytes if self.bytes else float("inf")

    # -------------------------------------------------------- on a machine
    def attainable(self, machine) -> float:
        """``min(peak, BW * I)`` in FLOP/s."""
        return min(machine.peak, machine.bandwidth * self.intensity)

    def time_floor(self, machine) -> float:
        """``max(bytes / BW, FLOPs / peak)`` in seconds."""
        return max(self.bytes / machine.bandwidth, self.flops / machine.peak)

    def bound(self, machine) -> str:
        """``"memory"`` or ``"compute"``: which ceiling sets the time floor."""
        return (
            "memory" if self.bytes / machine.bandwidth >= self.flops / machine.peak else "compute"
        )

    def breakdown(self) -> str:
        """Multi-line text: one line per buffer, then the FLOP split."""
        head = f"{self.label} (@{self.function})" if self.label else f"@{self.function}"
        lines = [f"{head}: {_fmt_num(self.bytes)} bytes"]
        for b in self.buffers:
            ret = " (returned)" if b.returned else ""
            lines.append(f"  {b.name:<18} {b.type:<32} {_fmt_num(b.bytes):>12} B{ret}")
        for b in self.temporaries:
            lines.append(
                f"  {b.name:<18} {b.type:<32} {_fmt_num(b.bytes):>12} B (temporary, not counted)"
            )
        lines.append(
            f"  FLOPs: {self.flops:,} = useful {self.flops_useful:,} + dequant "
            f"{self.flops_dequant:,} + other {self.flops_other:,}; conversions {self.conversions:,}"
        )
        for c in self.ops:
            per = ", ".join(f"{o}:{k}" for o, k in c.classified)
            lines.append(f"  {c.op} over {'x'.join(map(str, c.loop_ranges))}: {per}")
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


@dataclass(frozen=True)
class Shift:
    """``I_v / I_base = (B_base / B_v) x (F_v / F_base)``."""

    intensity_ratio: float
    byte_ratio: float
    flop_ratio: float

    @property
    def label(self) -> str:
        return (
            f"{self.intensity_ratio:.2f}x = {self.byte_ratio:.2f}x bytes x "
            f"{self.flop_ratio:.2f}x FLOPs"
        )


def shift(base: KernelModel, variant: KernelModel) -> Shift:
    """Decompose the intensity shift of ``variant`` against ``base``."""
    expect_type(base, KernelModel, "base", "a KernelModel")
    expect_type(variant, KernelModel, "variant", "a KernelModel")
    br = base.bytes / variant.bytes
    fr = variant.flops / base.flops
    return Shift(variant.intensity / base.intensity, br, fr)


def require_static_shape(t: ir.Type, what: str) -> tuple[int, ...]:
    """The static shape of ``t``; a :class:`ModelError` naming ``what`` otherwise."""
    shape = static_shape(t)
    if shape is None or None in shape:
        raise ModelError(f"{what} has a dynamic shape ({t}); the model needs static shapes")
    return shape

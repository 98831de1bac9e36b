"""Machine ceilings: memory bandwidth and peak f32 rate.

``MACHINES["m4"]`` is the base Apple M4 of the original v1 post (the design
post this project started from; its roofline is drawn for that machine):
120 GB/s (Apple's published LPDDR5X bandwidth) and 560 GFLOP/s (not published; estimated from core count,
FMA units, lane width and clock), with the ridge drawn as a band 30% either
side because the peak is an estimate.  This module is data only;
:func:`mlir_mx.roofline.measure.get_machine` returns a preset by name or
measures this machine (``"measure"``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["MACHINES", "M4", "Machine"]


@dataclass
class Machine:
    """Two ceilings and where they come from."""

    name: str
    bandwidth: float  # bytes/s
    peak: float  # FLOP/s (f32)
    ridge_band: float = 0.3  # the ridge is drawn as ridge x (1 - band) .. ridge x (1 + band)
    source: str = ""
    threads: int | None = None
    reference: dict[str, float] = field(default_factory=dict)  # e.g. numpy figures
    details: dict[str, str] = field(default_factory=dict)

    @property
    def ridge(self) -> float:
        """``peak / bandwidth``: the intensity where the two ceilings meet (FLOP/byte)."""
        return self.peak / self.bandwidth

    @property
    def ridge_range(self) -> tuple[float, float]:
        return self.ridge * (1 - self.ridge_band), self.ridge * (1 + self.ridge_band)

    def attainable(self, intensity: float) -> float:
        """``min(peak, BW * I)``."""
        return min(self.peak, self.bandwidth * intensity)

    def describe(self) -> str:
        s = (
            f"{self.name}: BW {self.bandwidth / 1e9:.1f} GB/s, peak {self.peak / 1e9:.1f} GFLOP/s, "
            f"ridge {self.ridge:.2f} FLOP/B"
        )
        if self.threads:
            s += f", {self.threads} thread(s)"
        if self.reference:
            s += " (" + ", ".join(f"{k} {v / 1e9:.1f}" for k, v in self.reference.items()) + ")"
        return s


M4 = Machine(
    "m4",
    bandwidth=120e9,
    peak=560e9,
    ridge_band=0.3,
    source="base Apple M4: 120 GB/s published; 560 GFLOP/s estimated (cores x FMA units "
    "x lanes x clock); ridge band +-30% (post 5)",
)

MACHINES: dict[str, Machine] = {"m4": M4}

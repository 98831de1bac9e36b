"""The torch versions ``mlir_mx.torch`` is tested with, and the one warning
for any other.

``TESTED_TORCH`` is the range the ``torch`` extra of ``pyproject.toml`` pins
(``torch>=2.13,<2.14``; a test keeps the two equal).  Another major or minor
version (an older torch, or a newer one than this release knew) may work, but
its custom-op, ``torch.compile`` and threading behaviour is unchecked:
importing ``mlir_mx.torch`` then warns once, naming the version, the tested
range and the commands that install a tested one.
"""

from __future__ import annotations

import re
import warnings

__all__ = ["TESTED_TORCH", "UntestedTorchWarning", "untested_torch", "warn_untested_torch"]

#: (major, minor) of the oldest and the newest torch tested, both included.
TESTED_TORCH = ((2, 13), (2, 13))

#: The install commands the warning names (docs/torch.md, README).
CPU_INSTALL = "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu"

_warned: set[str] = set()


class UntestedTorchWarning(UserWarning):
    """``mlir_mx.torch`` imported with a torch outside :data:`TESTED_TORCH`."""


def _tested_text() -> str:
    (lo_major, lo_minor), (hi_major, hi_minor) = TESTED_TORCH
    if (lo_major, lo_minor) == (hi_major, hi_minor):
        return f"torch {lo_major}.{lo_minor}"
    return f"torch {lo_major}.{lo_minor} to {hi_major}.{hi_minor}"


def untested_torch(version: str) -> str | None:
    """The warning's text when ``version`` (``torch.__version__``, e.g.
    ``2.14.1+cu130``) is outside :data:`TESTED_TORCH`, else None.  A version
    string with no ``major.minor`` is untested too."""
    m = re.match(r"\s*(\d+)\.(\d+)", version)
    if m is not None and TESTED_TORCH[0] <= (int(m[1]), int(m[2])) <= TESTED_TORCH[1]:
        return None
    return (
        f"mlir_mx.torch: torch {version} is untested: mlir-mx is tested with {_tested_text()} (pip install 'mlir-mx[torch]' installs one; "
        f"CPU-only: {CPU_INSTALL}). It may work: report what fails (docs/torch.md)"
    )


def warn_untested_torch(version: str | None = None) -> None:
    """Warn once per version when torch's (or ``version``) is untested."""
    if version is None:
        import torch

        version = str(torch.__version__)
    text = untested_torch(version)
    if text is not None and version not in _warned:
        _warned.add(version)
        warnings.warn(text, UntestedTorchWarning, stacklevel=3)

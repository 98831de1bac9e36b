"""How often NVFP4 blocks would pass an AMX exactness guard (issue 54, not built).

NVFP4 does not take the AMX-BF16 path (``linear/amx_linear.py``: E8M0 scales
in blocks of 32 only).  Carrying it there with the exact path's bits would
need B pre-scaled by its E4M3 block scale ``s = m_s 2^e`` (``m_s`` the odd
part of the scale's significand, 1..15) and one tile K step per block of 16
(``c + t`` rounds once per block).  Every product ``a b s`` is then a
multiple of ``g q 2^e`` and at most ``|a| bmax m_s 2^e``, so the guard of
``docs/numerics.md`` ("AMX-BF16") becomes ``S / g <= 2^24 q / (bmax m_s)``:
``m_s`` times tighter than MXFP4's.  This prints the share of bf16 activation
blocks of 16 that pass it for each ``m_s``, for N(0,1) and N(0,1) x
lognormal rows (``g``: the largest power of two dividing every nonzero
element; ``S``: the sum of magnitudes).

    python bench/probes/nvfp4_amx_guard_share.py [--blocks 20000]
"""

from __future__ import annotations

import argparse

import ml_dtypes
import numpy as np


def bf16(x: np.ndarray) -> np.ndarray:
    return x.astype(ml_dtypes.bfloat16).astype(np.float64)


def grid(a: np.ndarray) -> np.ndarray:
    """Per row: the largest power of two dividing every nonzero element."""
    mag = np.abs(a)
    m, e = np.frexp(np.where(mag == 0, 1.0, mag))  # mag = m 2^e, m in [0.5, 1)
    sig = np.round(m * 256).astype(np.int64)  # bf16: 8 significant bits
    low = e - 8 + np.array([[(int(v) & -int(v)).bit_length() - 1 for v in row] for row in sig])
    return np.exp2(np.where(mag == 0, 10**6, low).min(axis=-1).astype(np.float64))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--blocks", type=int, default=20000)
    args = p.parse_args()
    rng = np.random.default_rng(0)
    q, bmax = 0.5, 6.0  # E2M1
    t = 2.0**24 * q / bmax
    rows = {
        "N(0,1)": rng.standard_normal((args.blocks, 16)),
        "N(0,1) x lognormal(1)": rng.standard_normal((args.blocks, 16))
        * np.exp(rng.standard_normal((args.blocks, 1))),
    }
    for name, x in rows.items():
        a = bf16(x)
        r = np.abs(a).sum(-1) / grid(a)
        cells = ", ".join(f"m_s={m}: {np.mean(r <= t / m):.3f}" for m in (1, 3, 5, 7, 9, 11, 13, 15))
        print(f"{name}, blocks of 16, share passing: {cells}")


if __name__ == "__main__":
    main()

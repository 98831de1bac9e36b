"""NVFP4 references: compressed-tensors' quantize/dequantize and MLX's
``mx.quantize(..., mode="nvfp4")``, run on the same inputs, and the cases the
goldens hold (tests/numerics/data/nvfp4_goldens.npz).

The goldens were made once, with compressed-tensors 0.20.1 (torch 2.13.0 CPU)
and mlx[cpu] 0.32.4, by::

    python tests/numerics/nvfp4_refs.py   # from the repository root

``tests/numerics/test_nvfp4.py`` checks the oracle against the goldens
always, and against the live references where they are installed.
"""

from __future__ import annotations

import pathlib

import ml_dtypes
import numpy as np

GOLDENS = pathlib.Path(__file__).parent / "data" / "nvfp4_goldens.npz"
E2M1_VALUES = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6], np.float32)


def _wide(rng, shape, lo, hi):
    """Random signs and mantissas over binades [lo, hi], one binade spread per row."""
    e = rng.integers(lo, hi + 1, size=(shape[0], 1)) + rng.integers(-3, 4, size=shape)
    m = rng.uniform(1, 2, size=shape)
    s = rng.choice([-1.0, 1.0], size=shape)
    return np.ldexp(s * m, np.clip(e, lo, hi)).astype(np.float32)


def cases() -> list[tuple[str, np.ndarray, float | None]]:
    """(name, x as float32 (rows, 64), global scale or None for the computed one)."""
    rng = np.random.default_rng(54)
    out = []
    out.append(("normal", rng.standard_normal((16, 64)).astype(np.float32), None))
    out.append(("wide", _wide(rng, (32, 64), -140, 120), None))
    out.append(("whole_range", _wide(rng, (48, 64), -149, 127), None))
    z = rng.standard_normal((8, 64)).astype(np.float32)
    z[0] = 0
    z[1, :16] = 0
    z[2, 16:32] = -0.0
    z[3] = np.ldexp(rng.uniform(-2, 2, 64), -140).astype(np.float32)  # subnormals
    z[4, :16] = np.float32(1e-30)
    out.append(("zeros_subnormals", z, None))
    out.append(("all_zero", np.zeros((4, 32), np.float32), None))
    out.append(("tiny_tensor", np.ldexp(rng.uniform(-1, 1, (4, 32)), -130).astype(np.float32), None))
    out.append(("huge_tensor", (rng.uniform(-1, 1, (4, 32)) * 3.4e38).astype(np.float32), None))
    out.append(("max_f32", np.full((2, 32), np.finfo(np.float32).max, np.float32), None))
    ties = np.tile(np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5, 6], np.float32), (4, 8))
    ties *= np.array([[1], [-1], [0.5], [-2]], np.float32)
    out.append(("ties_g1", ties, 1.0))
    out.append(("normal_g1", rng.standard_normal((16, 64)).astype(np.float32), 1.0))
    for g in (2.0**-20, 3.0, 1.0e6, 2.0**100):
        out.append((f"wide_g{g:g}", _wide(rng, (16, 64), -60, 60), g))
    return out


def codes_of_values(v: np.ndarray) -> np.ndarray:
    """E2M1 code bytes (0..15) of E2M1 values (float), the sign of zero kept."""
    return v.astype(np.float32).astype(ml_dtypes.float4_e2m1fn).view(np.uint8)


def compressed_tensors_nvfp4(x: np.ndarray, g: float | None):
    """compressed-tensors' NVFP4 (its CPU path): (global scale, E4M3 scale
    bytes, E2M1 code bytes, dequantized f32)."""
    import torch
    from compressed_tensors.quantization import QuantizationArgs
    from compressed_tensors.quantization.lifecycle.forward import dequantize, quantize
    from compressed_tensors.quantization.utils.helpers import calculate_qparams, generate_gparam

    t = torch.from_numpy(np.ascontiguousarray(x))
    args = QuantizationArgs(
        num_bits=4, type="float", strategy="tensor_group", group_size=16, symmetric=True,
        dynamic=False, scale_dtype=torch.float8_e4m3fn,
    )  # fmt: skip
    gs = generate_gparam(t.min(), t.max()) if g is None else torch.tensor([g], dtype=torch.float32)
    tb = t.reshape(t.shape[0], -1, 16)
    scale, zp = calculate_qparams(tb.amin(-1), tb.amax(-1), args, global_scale=gs)
    q = quantize(t, scale, zp, args, global_scale=gs)
    d = dequantize(q, scale, zp, args, global_scale=gs)
    s8 = scale.to(torch.float8_e4m3fn).view(torch.uint8).numpy()
    return np.float32(gs.item()), s8, codes_of_values(q.numpy()), d.numpy()


def mlx_nvfp4(x: np.ndarray, tensor_amax: float | None):
    """MLX's NVFP4 (``mode="nvfp4"``; ``global_scale``: MLX's, the tensor's amax):
    (E4M3 scale bytes, E2M1 code bytes, dequantized f32)."""
    import mlx.core as mx

    kw = {} if tensor_amax is None else {"global_scale": mx.array(np.float32(tensor_amax))}
    q, s = mx.quantize(mx.array(x), mode="nvfp4", **kw)
    d = np.array(mx.dequantize(q, s, mode="nvfp4", dtype=mx.float32, **kw))
    q = np.array(q)
    codes = np.stack([(q >> (4 * i)) & 15 for i in range(8)], -1).reshape(x.shape)
    return np.array(s).astype(np.uint8), codes.astype(np.uint8), d


def mlx_tensor_amax(x: np.ndarray, g: float | None) -> float | None:
    """MLX's ``global_scale`` argument for a case: the tensor's amax where the
    oracle computes the global scale from it (``g`` None), else none (MLX's
    scale then equals a global scale of 1).  A tensor whose computed global
    scale falls back to 1 (all zero, tiny: ``2688 / amax`` is not a finite
    f32) gets none either: MLX divides by its amax as given."""
    amax = float(np.max(np.abs(x)))
    with np.errstate(over="ignore"):
        overflow = not np.isfinite(np.float32(2688) / np.float32(max(amax, 1e-38)))
    if g is not None or overflow:
        return None
    return amax


def main() -> None:
    arrays = {}
    for name, x, g in cases():
        gs, s8, codes, d = compressed_tensors_nvfp4(x, g)
        arrays.update({f"{name}/x": x, f"{name}/g": gs, f"{name}/scales": s8,
                       f"{name}/codes": codes, f"{name}/deq": d})  # fmt: skip
        if g is None or g == 1.0:  # MLX: no global scale, or its tensor-amax one
            ms, mc, md = mlx_nvfp4(x, mlx_tensor_amax(x, g))
            arrays.update({f"{name}/mlx_scales": ms, f"{name}/mlx_codes": mc, f"{name}/mlx_deq": md})
    GOLDENS.parent.mkdir(exist_ok=True)
    np.savez_compressed(GOLDENS, **arrays)
    print(f"wrote {GOLDENS} ({GOLDENS.stat().st_size} bytes, {len(arrays)} arrays)")


if __name__ == "__main__":
    main()

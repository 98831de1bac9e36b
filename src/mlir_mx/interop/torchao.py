"""Convert MXArrays to and from torchao's ``MXTensor`` (torchao.prototype.mx_formats).

``MXTensor`` holds ``qdata`` (the element codes) and ``scale`` (E8M0,
``torch.float8_e8m0fnu``) with blocks along the last dimension of its row-major
storage; a 2-D ``MXTensor`` may also be the ``.t()`` of one (blocks along dim 0).
The element formats map as:

==============  =========================  ==========================================
MXArray         torchao ``elem_dtype``     ``qdata``
==============  =========================  ==========================================
``f8E4M3FN``    ``torch.float8_e4m3fn``    the codes, same shape
``f8E5M2``      ``torch.float8_e5m2``      the codes, same shape
``f6E2M3FN``    ``"fp6_e2m3"``             ``uint8``, one code per byte (low 6 bits)
``f6E3M2FN``    ``"fp6_e3m2"``             ``uint8``, one code per byte (low 6 bits)
``f4E2M1FN``    ``torch.float4_e2m1fn_x2``  ``uint8``, two codes per byte, last dim
                                           halved, even element in the low nibble
==============  =========================  ==========================================

MXINT8 (``i8``) has no torchao counterpart.  The code and scale bytes are the same
in both libraries, and FP4 is packed alike (``MXArray.packed_codes`` is torchao's
``qdata``); an MXArray keeps FP6 packed where torchao keeps one code per byte.
Each conversion copies the codes and scales once: an ``MXArray`` is a value whose
arrays are read-only, and a torch tensor cannot be made read-only, so the two
never share memory.  Needs torch
and torchao (``pip install 'mlir-mx[torch]'``), imported on first use; tested with
torch 2.13.0 (CPU) and torchao 0.18.0.
"""

from __future__ import annotations

import numpy as np

from mlir_mx.errors import MXArgTypeError, MXValueError
from mlir_mx.numerics import SCALE_DTYPE, MXArray, element_format, pack_codes

from .orientation import transpose

__all__ = ["from_mxtensor", "to_mxtensor"]


def torchao_modules():
    """``(torch, MXTensor, KernelPreference, {format name: torch dtype})``, or an
    ImportError naming the extra to install."""
    try:
        import torch
        from torchao.prototype.mx_formats import constants
        from torchao.prototype.mx_formats.mx_tensor import MXTensor
        from torchao.quantization.quantize_.common.kernel_preference import KernelPreference
    except ImportError as e:
        raise ImportError(
            "torchao interop needs torch and torchao (tested: torch 2.13.0, torchao 0.18.0): "
            f"pip install 'mlir-mx[torch]' ({e})"
        ) from e
    elems = {
        "f8E4M3FN": torch.float8_e4m3fn,
        "f8E5M2": torch.float8_e5m2,
        "f6E2M3FN": constants.DTYPE_FP6_E2M3,
        "f6E3M2FN": constants.DTYPE_FP6_E3M2,
        "f4E2M1FN": torch.float4_e2m1fn_x2,
    }
    return torch, MXTensor, KernelPreference, elems


def _torchao_packs(fmt) -> bool:
    """Whether torchao keeps ``fmt``'s codes packed: a packing group of one
    byte (FP4, ``torch.float4_e2m1fn_x2``, in our layout); FP6, whose groups
    span three bytes, one code per byte."""
    codes, nbytes = fmt.group
    return codes > 1 and nbytes == 1


def _numpy_bytes(t) -> np.ndarray:
    """A CPU tensor of 1-byte dtype as a numpy uint8 array sharing its memory."""
    import torch

    return t.view(torch.uint8).numpy()


def to_mxtensor(a: MXArray, orig_dtype=None):
    """The torchao ``MXTensor`` holding the codes and scales of ``a`` (on the CPU).

    ``a`` is blocked along its last axis, or is 2-D and blocked along axis 0 (then
    the result is the ``.t()`` of the row-major MXTensor of ``transpose(a)``, as
    torchao represents a transposed weight; that costs one copy).  ``orig_dtype``
    is the high-precision dtype the tensor reports (default ``torch.float32``).
    Raises ``ValueError`` for ``i8`` and for other blocking axes.
    """
    torch, MXTensor, KernelPreference, elems = torchao_modules()
    if not isinstance(a, MXArray):
        raise MXArgTypeError(f"a: expected an MXArray, got {type(a).__name__}")
    if a.element not in elems or a.global_scale is not None:
        raise MXValueError(f"a: torchao's MXTensor has no {a.format_name} element type")
    if a.axis != a.ndim - 1:
        if a.ndim == 2:
            return to_mxtensor(transpose(a), orig_dtype).t()
        raise MXValueError(
            f"a: torchao blocks along the last dimension (or dim 0 of a transposed 2-D "
            f"tensor); got axis {a.axis} of shape {a.shape}"
        )
    elem = elems[a.element]
    if _torchao_packs(a.format):  # FP4: torchao's packing is ours
        raw = a.packed_codes() if a.is_packed else pack_codes(a.codes, a.element)
    else:  # FP8, and FP6 one code per byte (torchao keeps FP6 unpacked)
        raw = a.codes.view(np.uint8)
    qdata = torch.from_numpy(np.array(raw))  # copies: torch tensors are writeable
    if not a.format.is_sub_byte:
        qdata = qdata.view(elem)
    scale = torch.from_numpy(np.array(a.scales.view(np.uint8)))
    return MXTensor(
        qdata,
        scale.view(torch.float8_e8m0fnu),
        elem,
        a.block_size,
        torch.float32 if orig_dtype is None else orig_dtype,
        KernelPreference.EMULATED,
        None,
        False,
    )


def from_mxtensor(t) -> MXArray:
    """The MXArray of a torchao ``MXTensor`` on the CPU (the inverse of :func:`to_mxtensor`).

    A row-major MXTensor gives an array blocked along its last axis; the ``.t()``
    of a 2-D one gives the transposed array blocked along axis 0 (one copy).
    Swizzled (``is_swizzled_scales``) and non-CPU tensors raise ``ValueError``.
    """
    torch, MXTensor, _, elems = torchao_modules()
    if not isinstance(t, MXTensor):
        raise MXArgTypeError(f"t: expected a torchao MXTensor, got {type(t).__name__}")
    if t.is_swizzled_scales:
        raise MXValueError("t: swizzled (blocked, GEMM-tiled) scales are not supported")
    if t.qdata.device.type != "cpu":
        raise MXValueError(f"t: tensor is on {t.qdata.device}; move it to the CPU first (.cpu())")
    names = {v: k for k, v in elems.items()}
    if t.elem_dtype not in names:
        raise MXValueError(f"t: unsupported torchao element dtype {t.elem_dtype}")
    if not t.qdata.is_contiguous():
        if t.qdata.dim() == 2 and t.qdata.t().is_contiguous():
            return transpose(from_mxtensor(t.t()))
        raise MXValueError(f"t: qdata with strides {t.qdata.stride()} is neither row-major nor .t()")
    fmt = element_format(names[t.elem_dtype])
    raw = _numpy_bytes(t.qdata)
    scales = _numpy_bytes(t.scale.contiguous()).view(SCALE_DTYPE)
    # Both constructors copy torch's (writeable) memory; FP4 bytes are kept packed.
    if _torchao_packs(fmt):
        return MXArray.from_packed(raw, scales, fmt.name, int(t.block_size), axis=-1)
    return MXArray(raw.view(fmt.dtype), scales, fmt.name, int(t.block_size), axis=-1)

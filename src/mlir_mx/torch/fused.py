"""Sibling ``MXLinear`` layers that read one input, fused: one MX weight, one kernel call.

A Llama's ``q_proj``/``k_proj``/``v_proj`` (and ``gate_proj``/``up_proj``)
read the same activations.  :class:`FusedWeight` holds their weights as one
``mlir_mx.Linear`` over the rows concatenated along ``out``; each layer stays
an ``MXLinear`` of its own (its name, bias, ``out_features`` and
``state_dict`` entries unchanged) that reads its rows of the fused result.

The first layer called with an input runs the fused kernel once and keeps the
whole result; a sibling called with **the same input** takes its columns from
it instead of calling a kernel.  "The same" is checked, never assumed: the
same tensor object (alive), data pointer, shape, strides and dtype, and either
the same version counter or, for inference tensors (which have none), equal
contents (a copy of the input's bytes is kept beside the result and compared
with ``memcmp``).  Each part is taken
once; the result is dropped when every part has been taken, or replaced by
the next call.  A layer called on its own, or with another input, runs the
fused kernel itself (the whole ``out``, its columns returned): always correct,
only slower.  Each column of the fused result is bit for bit the separate
layer's (the kernels' blocked order runs along ``in``, per output column).
"""

from __future__ import annotations

import ctypes
import math
import threading
import weakref

import numpy as np
import torch

from mlir_mx.errors import MXValueError
from mlir_mx.linear import Linear
from mlir_mx.numerics import MXArray

from . import custom_ops as ops
from .thread_policy import layer_threads

__all__ = ["FusedWeight", "concat_rows", "eager"]


def concat_rows(weights: list[MXArray]) -> MXArray:
    """The ``(sum out, in)`` MXArray of ``weights`` (each ``(out_i, in)``,
    blocked along ``in``, one format and block size) stacked along ``out``:
    their stored bytes and scales concatenated, bit for bit."""
    first = weights[0]
    for w in weights[1:]:
        if (w.element, w.block_size, w.shape[1]) != (first.element, first.block_size, first.shape[1]):
            raise MXValueError(
                f"weights: expected one element format, block size and in_features to fuse, got "
                f"{[(v.element, v.block_size, v.shape[1]) for v in weights]}"
            )
    gs = {None if w.global_scale is None else w.global_scale.tobytes() for w in weights}
    if len(gs) > 1:  # one Linear divides by one global scale (docs/numerics.md)
        raise MXValueError(
            "weights: NVFP4 weights fuse only with one global scale (as compressed-tensors "
            f"gives fused layers), got {[w.global_scale for w in weights]}"
        )
    codes = np.concatenate([w.packed_codes() for w in weights], axis=0)
    scales = np.concatenate([w.scales for w in weights], axis=0)
    return MXArray.from_packed(
        codes, scales, first.format_name, first.block_size, axis=1, copy=False,
        global_scale=first.global_scale,
    )  # fmt: skip


def eager(x: torch.Tensor) -> bool:
    """True when ``x`` is a plain tensor and nothing traces the call
    (``torch.compile``, ``torch.export``, ``make_fx``, ``jit.trace``, a torch
    function or dispatch mode): the layer then calls its ``mlir_mx.Linear``
    directly; otherwise it calls the custom op ``mlir_mx::linear``, which the
    tracers see."""
    return (
        type(x) is torch.Tensor
        and not torch.compiler.is_compiling()
        and not torch.jit.is_tracing()
        and not torch._C._is_torch_function_mode_enabled()
        and torch._C._len_torch_dispatch_stack() == 0
    )


def _memcmp():
    """libc's ``memcmp`` (None where no C library is found: the bytes are
    then compared in Python)."""
    try:
        f = ctypes.CDLL(None).memcmp
    except (OSError, AttributeError, TypeError):
        return None
    f.argtypes, f.restype = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t], ctypes.c_int
    return f


_MEMCMP = _memcmp()

#: Bytes of an input copy that :class:`_Kept` keeps for the next call (an
#: M = 1 input of up to 16384 f32 features); larger copies go with their result.
_REUSE = 1 << 16


class _Kept:
    """The fused result of the last input, and which parts have taken their
    columns (a bit each); one per :class:`FusedWeight`, reused by every call.

    For an inference tensor (no version counter) a copy of the input's bytes
    is kept, and compared byte for byte with the next input at the same
    address: ``memmove`` and ``memcmp`` through
    ``ctypes``, where numpy's copy and ``array_equal`` (and an object per
    result) cost 30 us a miss inside a model, whose weight streams leave
    Python's data out of cache (a NaN input compares equal to itself here,
    as it should).  The copy's buffer is reused while it holds at most
    :data:`_REUSE` bytes (a decode step's input); a larger one (a prefill's)
    is freed with its result, so a long prompt leaves no copy behind."""

    __slots__ = ("ref", "key", "y", "taken", "buf", "n")

    def __init__(self):
        self.ref = self.key = self.y = self.buf = None
        self.taken = self.n = 0

    def keep(self, x, key, y: torch.Tensor, part: int, address: int, nbytes: int) -> None:
        """Keep ``y``, the result of ``x``, taken by ``part``; ``nbytes`` of the
        input at ``address`` copied (0: ``x`` has a version counter in ``key``)."""
        if nbytes:
            if self.buf is None or not nbytes <= len(self.buf) <= max(nbytes, _REUSE):
                self.buf = ctypes.create_string_buffer(nbytes)
            ctypes.memmove(self.buf, address, nbytes)
        elif self.buf is not None and len(self.buf) > _REUSE:
            self.buf = None
        self.ref, self.key, self.y, self.taken, self.n = weakref.ref(x), key, y, 1 << part, nbytes

    def take(self, x, key, part: int, address: int, parts: int) -> torch.Tensor | None:
        """The kept result if ``x`` (its f32 form at ``address``) is its input
        and ``part`` has not taken it, marked taken (dropped once all
        ``parts`` have); else None."""
        if self.key != key or self.taken >> part & 1 or self.ref() is not x:
            return None
        if self.n and not _same(self.buf, address, self.n):
            return None
        y = self.y
        self.taken |= 1 << part
        if self.taken == (1 << parts) - 1:
            self.ref = self.key = self.y = None
            if len(self.buf or b"") > _REUSE:
                self.buf = None
        return y


def _same(buf, address: int, n: int) -> bool:
    if _MEMCMP is None:
        return ctypes.string_at(address, n) == buf.raw[:n]
    return _MEMCMP(buf, address, n) == 0


def _identity(x: torch.Tensor) -> tuple:
    version = None if x.is_inference() else x._version
    return (x.data_ptr(), tuple(x.shape), x.stride(), x.dtype, version)


def _identity_f32(x: torch.Tensor) -> tuple:
    """:func:`_identity` of an f32 C-contiguous ``x`` (its strides and dtype
    follow from that): four torch calls, not six."""
    return (x.data_ptr(), x.shape, None if x.is_inference() else x._version)


class FusedWeight:
    """One ``mlir_mx.Linear`` over the weights of sibling layers stacked along
    ``out`` (``sizes``: each layer's ``out_features``, in order)."""

    def __init__(self, weight: MXArray, sizes: list[int], activations=None):
        if sum(sizes) != weight.shape[0] or not sizes:
            raise MXValueError(f"sizes: expected parts summing to {weight.shape[0]}, got {sizes}")
        self.sizes = [int(s) for s in sizes]
        self.offsets = [int(o) for o in np.cumsum([0, *self.sizes])]
        self.activations = activations
        self._lock = threading.Lock()
        self._members: dict[int, weakref.ref] = {}
        self._kept = _Kept()
        self._set(weight)

    def _set(self, weight: MXArray) -> None:
        lin = Linear(weight, threads=1, activations=self.activations)
        self.linear = lin
        self.tensors = [torch.from_numpy(a.view(np.uint8)) for a in lin.held]
        names = ("codes", "scales") if lin.holds_stored else ()
        self.names = names + (("records",) if lin.records_unit is not None else ())
        ops.register(lin, self.tensors)
        self._kept = _Kept()

    # -- the parts ------------------------------------------------------------------

    def attach(self, layer, part: int) -> None:
        """Make ``layer`` (an ``MXLinear``) read part ``part`` of this weight."""
        self._members[part] = weakref.ref(layer)
        layer.read_fused(self, part)

    def part_weight(self, part: int) -> MXArray:
        """Part ``part``'s weight ``(sizes[part], in)``, a new MXArray (bit for bit)."""
        w = self.linear.weight()
        a, b = self.offsets[part], self.offsets[part + 1]
        return MXArray.from_packed(
            w.packed_codes()[a:b], w.scales[a:b], w.format_name, w.block_size, axis=1, copy=True,
            global_scale=w.global_scale,
        )  # fmt: skip

    def part_nbytes(self, part: int) -> int:
        """Part ``part``'s share of the bytes held, by rows (the shares sum to the whole)."""
        total, n = self.linear.nbytes, self.offsets[-1]
        a, b = self.offsets[part], self.offsets[part + 1]
        return total * b // n - total * a // n

    def replace(self, part: int, weight: MXArray) -> None:
        """Part ``part`` gets ``weight`` (``load_state_dict``): the fused weight is rebuilt
        and every live part re-reads it."""
        parts = [weight if i == part else self.part_weight(i) for i in range(len(self.sizes))]
        self._set(concat_rows(parts))
        for i, ref in list(self._members.items()):
            layer = ref()
            if layer is not None:
                layer.read_fused(self, i)

    def narrow_parts(self, starts: list[int], sizes: list[int]) -> None:
        """Keep rows ``starts[i] : starts[i] + sizes[i]`` of each part ``i`` (its
        own row numbers; tensor parallel: each part's slice of ``out`` on this
        rank): the fused weight is rebuilt from those rows (stored bytes and
        scales copied, bit for bit) and every live part re-reads it."""
        if len(starts) != len(self.sizes) or len(sizes) != len(self.sizes):
            raise MXValueError(f"starts, sizes: expected {len(self.sizes)} parts each")
        parts, w = [], self.linear.weight()
        codes, scales = w.packed_codes(), w.scales
        for i, (a, n) in enumerate(zip(starts, sizes, strict=True)):
            if not 0 <= a <= a + n <= self.sizes[i] or n < 1:
                raise MXValueError(f"part {i}: rows {a}:{a + n} not within 0:{self.sizes[i]}")
            rows = slice(self.offsets[i] + a, self.offsets[i] + a + n)
            parts.append(MXArray.from_packed(
                codes[rows], scales[rows], w.format_name, w.block_size, axis=1, copy=True,
                global_scale=w.global_scale,
            ))  # fmt: skip
        self.sizes = [int(n) for n in sizes]
        self.offsets = [int(o) for o in np.cumsum([0, *self.sizes])]
        self._set(concat_rows(parts))
        for i, ref in list(self._members.items()):
            layer = ref()
            if layer is not None:
                layer.read_fused(self, i)

    # -- the call -------------------------------------------------------------------

    def output(self, layer, x: torch.Tensor, x2: torch.Tensor) -> torch.Tensor:
        """The f32 result ``(M, layer.out_features)`` of ``layer``, a part of this
        weight, for its input ``x`` (``x2``: ``x`` as f32 ``(M, in)``, C-contiguous)."""
        part, threads = layer.fused_part, layer.threads or 0
        if not eager(x):  # the custom op on the layer's buffers, which tracing sees
            weight = [getattr(layer, name) for name in self.names]
            return self._columns(ops.call_op(x2, weight, self.linear, threads), part)
        key = _identity(x)
        y = self._take(x, key, part, x2)
        if y is not None:
            return self._columns(y, part)
        n = threads if threads > 0 else layer_threads()
        y = torch.zeros(x2.shape[0], self.linear.out_features, dtype=torch.float32)
        bf16 = x.dtype == torch.bfloat16  # a bf16 input: the bf16 kernels, same bits
        if not self.linear.call_into(x2.data_ptr(), x2.shape[0], y.data_ptr(), n, bf16):
            y = torch.from_numpy(self.linear(x2.numpy(), threads=n))
        self._keep(x, key, y, part, x2)
        return self._columns(y, part)

    def output_in_place(self, layer, x: torch.Tensor) -> torch.Tensor | None:
        """:meth:`output` for an f32, C-contiguous ``x`` of shape ``(..., in)``
        in eager mode (checked by the caller, ``MXLinear.forward``): the fused
        result made in ``x``'s leading shape and each part's columns a
        ``narrow`` of it, with no reshape on either side (each torch call costs
        4-11 us inside a model: ``docs/torch.md``).  None where the kernel
        cannot take ``x``'s address (``Linear.call_into``)."""
        y = self._in_shape(layer, x, _identity_f32(x))
        if y is None:
            return None
        cols = y.narrow(-1, self.offsets[layer.fused_part], self.sizes[layer.fused_part])
        return cols if y.dim() == 1 or math.prod(y.shape[:-1]) == 1 else cols.contiguous()

    def output_narrow(self, layer, x: torch.Tensor) -> torch.Tensor | None:
        """For a bf16 or f16, C-contiguous ``x`` of shape ``(..., in)`` in eager
        mode (checked by the caller, ``MXLinear.forward``): ``layer``'s f32
        columns of the fused result, a ``narrow`` (strided, not copied: the
        caller's conversion to ``x``'s dtype is then the one copy of them).
        The fused kernel runs once per input: ``x`` converted to f32 once (not
        once per part), and sameness is checked on ``x``'s own bytes (half an
        f32 copy's, where ``x`` has no version counter).  None where the kernel
        cannot take the f32 input's address (``Linear.call_into``)."""
        key = ("narrow", *_identity(x))  # never a key of output()'s (f32 bytes kept there)
        y = self._in_shape(layer, x, key)
        return None if y is None else y.narrow(-1, self.offsets[layer.fused_part],
                                                 self.sizes[layer.fused_part])  # fmt: skip

    def _in_shape(self, layer, x: torch.Tensor, key: tuple) -> torch.Tensor | None:
        """The fused f32 result in ``x``'s leading shape (kept for the other
        parts, or taken if kept), ``x`` C-contiguous f32 or bf16/f16 (converted
        to f32 once, exactly); None where ``call_into`` declines."""
        part = layer.fused_part
        y = self._take(x, key, part, x)
        if y is not None:
            return y
        xf = x if x.dtype == torch.float32 else x.reshape(-1, x.shape[-1]).float()
        y = torch.zeros(*x.shape[:-1], self.offsets[-1], dtype=torch.float32)
        m, n = math.prod(x.shape[:-1]), layer.threads or layer_threads()
        if not self.linear.call_into(xf.data_ptr(), m, y.data_ptr(), n, x.dtype == torch.bfloat16):
            return None
        self._keep(x, key, y, part, x)
        return y

    def _take(self, x, key, part: int, x2: torch.Tensor) -> torch.Tensor | None:
        """The kept result if ``x`` is its input and ``part`` has not taken it (marked taken)."""
        with self._lock:
            return self._kept.take(x, key, part, x2.data_ptr(), len(self.sizes))

    def _keep(self, x, key, y: torch.Tensor, part: int, x2: torch.Tensor) -> None:
        """Keep ``y``, the fused result of ``x``, for the other parts (with a
        copy of ``x2``'s bytes when ``x`` has no version counter)."""
        nbytes = x2.numel() * x2.element_size() if key[-1] is None else 0
        with self._lock:
            self._kept.keep(x, key, y, part, x2.data_ptr(), nbytes)

    def _columns(self, y: torch.Tensor, part: int) -> torch.Tensor:
        cols = y[:, self.offsets[part] : self.offsets[part + 1]]
        return cols if y.shape[0] == 1 else cols.contiguous()

    # -- copies and pickles -----------------------------------------------------------

    def __deepcopy__(self, memo):
        new = FusedWeight(self.linear.weight(), self.sizes, self.activations)
        memo[id(self)] = new
        return new

    def __getstate__(self):
        w = self.linear.weight()
        return {"sizes": self.sizes, "activations": self.activations, "element": w.format_name,
                "block_size": w.block_size, "codes": np.array(w.packed_codes()),
                "scales": np.array(w.scales.view(np.uint8)),
                "global_scale": w.global_scale}  # fmt: skip

    def __setstate__(self, state):
        w = MXArray.from_packed(
            state["codes"], state["scales"], state["element"], state["block_size"], axis=1,
            global_scale=state.get("global_scale"),  # an NVFP4 weight's (absent: E8M0)
        )  # fmt: skip
        self.__init__(w, state["sizes"], state["activations"])

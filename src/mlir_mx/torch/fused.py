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
contents (a copy of the input is kept beside the result).  Each part is taken
once; the result is dropped when every part has been taken, or replaced by
the next call.  A layer called on its own, or with another input, runs the
fused kernel itself (the whole ``out``, its columns returned): always correct,
only slower.  Each column of the fused result is bit for bit the separate
layer's (the kernels' blocked order runs along ``in``, per output column).
"""

from __future__ import annotations

import threading
import weakref

import numpy as np
import torch

from mlir_mx.errors import MXValueError
from mlir_mx.linear import Linear
from mlir_mx.numerics import MXArray

from . import custom_ops as ops

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
    codes = np.concatenate([w.packed_codes() for w in weights], axis=0)
    scales = np.concatenate([w.scales for w in weights], axis=0)
    return MXArray.from_packed(codes, scales, first.element, first.block_size, axis=1, copy=False)


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


class _Result:
    """The fused result of one input, and which parts have taken their columns."""

    __slots__ = ("ref", "key", "copy", "y", "taken")

    def __init__(self, x, key, copy, y, part):
        self.ref, self.key, self.copy, self.y, self.taken = weakref.ref(x), key, copy, y, {part}


def _identity(x: torch.Tensor) -> tuple:
    version = None if x.is_inference() else x._version
    return (x.data_ptr(), tuple(x.shape), x.stride(), x.dtype, version)


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
        self._set(weight)

    def _set(self, weight: MXArray) -> None:
        lin = Linear(weight, threads=1, activations=self.activations)
        self.linear = lin
        self.tensors = [torch.from_numpy(a.view(np.uint8)) for a in lin.held]
        names = ("codes", "scales") if lin.holds_stored else ()
        self.names = names + (("records",) if lin.records_unit is not None else ())
        ops.register(lin, self.tensors)
        self._result = None

    # -- the parts ------------------------------------------------------------------

    def attach(self, layer, part: int) -> None:
        """Make ``layer`` (an ``MXLinear``) read part ``part`` of this weight."""
        self._members[part] = weakref.ref(layer)
        layer._adopt(self.linear, (self, part))

    def part_weight(self, part: int) -> MXArray:
        """Part ``part``'s weight ``(sizes[part], in)``, a new MXArray (bit for bit)."""
        w = self.linear.weight()
        a, b = self.offsets[part], self.offsets[part + 1]
        return MXArray.from_packed(
            w.packed_codes()[a:b], w.scales[a:b], w.element, w.block_size, axis=1, copy=True
        )

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
                layer._adopt(self.linear, (self, i))

    # -- the call -------------------------------------------------------------------

    def output(self, layer, x: torch.Tensor, x2: torch.Tensor) -> torch.Tensor:
        """The f32 result ``(M, layer.out_features)`` of ``layer``, a part of this
        weight, for its input ``x`` (``x2``: ``x`` as f32 ``(M, in)``, C-contiguous)."""
        part, threads = layer._part, layer._threads or 0
        if not eager(x):  # the custom op on the layer's buffers, which tracing sees
            lin = self.linear
            y = torch.ops.mlir_mx.linear(
                x2, [getattr(layer, name) for name in self.names], lin.element, lin.block_size, lin.in_features, lin.out_features,
                threads, self.activations or "", lin.records_unit or "",
            )  # fmt: skip
            return self._columns(y, part)
        key = _identity(x)
        hit = None
        with self._lock:
            r = self._result
            if (r is not None and part not in r.taken and r.key == key and r.ref() is x
                    and (r.copy is None or np.array_equal(r.copy, x2.numpy()))):  # fmt: skip
                r.taken.add(part)
                if len(r.taken) == len(self.sizes):
                    self._result = None
                hit = r.y
        if hit is not None:
            return self._columns(hit, part)
        n = threads if threads > 0 else torch.get_num_threads()
        y = torch.zeros(x2.shape[0], self.linear.out_features, dtype=torch.float32)
        if not self.linear._call_raw(x2.data_ptr(), x2.shape[0], y.data_ptr(), n):  # see MXLinear
            y = torch.from_numpy(self.linear(x2.numpy(), threads=n))
        copy = x2.numpy().copy() if key[-1] is None else None
        with self._lock:
            self._result = _Result(x, key, copy, y, part)
        return self._columns(y, part)

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
        return {"sizes": self.sizes, "activations": self.activations, "element": w.element,
                "block_size": w.block_size, "codes": np.array(w.packed_codes()),
                "scales": np.array(w.scales.view(np.uint8))}  # fmt: skip

    def __setstate__(self, state):
        w = MXArray.from_packed(
            state["codes"], state["scales"], state["element"], state["block_size"], axis=1
        )
        self.__init__(w, state["sizes"], state["activations"])

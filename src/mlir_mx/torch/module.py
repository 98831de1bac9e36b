"""``MXLinear``: a drop-in ``torch.nn.Module`` for ``nn.Linear`` with an MX weight."""

from __future__ import annotations

import copy
import math

import numpy as np
import torch

from mlir_mx import oracle
from mlir_mx.errors import InferenceOnlyError, MXArgTypeError, MXValueError
from mlir_mx.host import check_threads
from mlir_mx.interop.orientation import check_linear_weight
from mlir_mx.linear import Linear, activations_format
from mlir_mx.numerics import ElementFormat, MXArray

from . import custom_ops as ops
from .fused import eager
from .quantizer import quantize_weight
from .thread_policy import layer_threads

__all__ = ["InferenceOnlyError", "MXLinear", "is_conv1d"]


_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


class MXLinear(torch.nn.Module):
    """``y = x @ W.T + bias`` with an MX weight, computed by ``mlir_mx.Linear``'s kernels.

    Build it from an ``nn.Linear`` (:meth:`from_linear`) or from an
    :class:`~mlir_mx.numerics.MXArray` weight of ``nn.Linear``'s layout
    ``(out_features, in_features)``, blocked along ``in_features``, plus an
    optional bias.  Inference only.

    * ``x``: any leading shape ``(..., in_features)``, f32, bf16 or f16, on the
      CPU.  It enters the products exactly (bf16/f16 widen to f32 exactly); the
      result is the kernel's f32 (the blocked order of ``mx.block_matmul``), plus
      the bias in f32, rounded once to ``x``'s dtype.
    * ``threads``: ``None`` (default) follows ``torch.get_num_threads()`` at
      each call; an int fixes it.
    * ``activations``: ``None`` (default; ``x`` enters exactly) or an MX
      element format ``x`` is quantized to per call (``"i8"``: the W4A8 path
      of the CPU's integer dot units), as ``mlir_mx.Linear(w, activations=)``.
    * The module keeps the weight once, in the form its ``mlir_mx.Linear``
      holds (``Linear.held``: the ``uint8`` buffers ``codes``/``scales`` of the
      stored form, or ``records``, the dot kernels' records, when
      ``activations`` runs on the dot units; not saved); ``state_dict`` holds
      it in ``nn.Linear``'s layout instead: ``weight_codes`` (the ``MXArray``'s
      stored bytes: FP4 two codes per byte) and ``weight_scales`` (E8M0
      bytes), both ``uint8`` (``docs/torch.md``, "Saved form").
    """

    def __init__(self, weight: MXArray, bias=None, *, threads: int | None = None, activations=None):
        super().__init__()
        activations = activations_format(activations)  # an ElementFormat: Linear takes it as it is
        check_linear_weight(weight, "weight", ("out_features", "in_features"))
        self.activations = None if activations is None else activations.name
        self.threads = threads
        self._adopt(Linear(weight, threads=1, activations=activations))
        self._set_bias(bias)

    @classmethod
    def from_mx_linear(cls, lin: Linear, bias=None, *, threads: int | None = None) -> MXLinear:
        """The layer over ``lin``, an ``mlir_mx.Linear`` (held as it is: its
        arrays not copied), with ``lin``'s activations; ``bias`` and ``threads``
        as for the constructor."""
        if not isinstance(lin, Linear):
            raise MXArgTypeError(f"lin: expected an mlir_mx.Linear, got {type(lin).__name__}")
        new = cls.__new__(cls)
        torch.nn.Module.__init__(new)
        new.activations, new.threads = lin.activations, threads
        new._adopt(lin)
        new._set_bias(bias)
        return new

    def _set_bias(self, bias) -> None:
        if bias is not None:
            bias = torch.as_tensor(bias).detach()
            if bias.shape != (self.out_features,):
                raise MXValueError(
                    f"bias: expected shape ({self.out_features},), got {tuple(bias.shape)}"
                )
            bias = torch.nn.Parameter(bias.clone(), requires_grad=False)
        self.bias = bias

    @classmethod
    def from_linear(
        cls, linear: torch.nn.Linear, element: str | ElementFormat = "f4E2M1FN",
        block_size: int = 32, *, threads: int | None = None, activations=None,
    ) -> MXLinear:  # fmt: skip
        """Quantize ``linear``'s weight to ``element`` (MX, blocks of ``block_size``
        along ``in_features``; on ``threads`` threads, None: torch's) and keep its bias."""
        if not isinstance(linear, torch.nn.Linear):
            raise MXArgTypeError(f"linear: expected a torch.nn.Linear, got {type(linear).__name__}")
        activations = activations_format(activations)
        w = quantize_weight(linear.weight, element, block_size, threads=threads)
        return cls(w, linear.bias, threads=threads, activations=activations)

    @classmethod
    def from_conv1d(
        cls, conv, element: str | ElementFormat = "f4E2M1FN", block_size: int = 32,
        *, threads: int | None = None, activations=None,
    ) -> MXLinear:  # fmt: skip
        """The same from ``transformers``' ``Conv1D`` (GPT-2's projections:
        ``y = x @ W + b``, ``W`` of shape ``(in, out)``): ``W.T`` is quantized,
        blocked along ``in``, so the layer computes what the Conv1D does with
        the dequantized weight."""
        if not is_conv1d(conv):
            raise MXArgTypeError(
                f"conv: expected a transformers Conv1D, got {type(conv).__name__}"
            )
        activations = activations_format(activations)
        w = quantize_weight(conv.weight.t(), element, block_size, threads=threads)
        return cls(w, conv.bias, threads=threads, activations=activations)

    def _adopt(self, lin: Linear, fused: tuple | None = None) -> None:
        """Hold ``lin`` and expose the arrays it holds (``Linear.held``) as
        buffers sharing their memory: ``codes``/``scales``, or ``records``.
        ``fused``: ``(FusedWeight, part)`` when ``lin`` is the fused weight of
        sibling layers (``quantize_(fuse=...)``) and this layer reads its part."""
        self._linear = lin
        self.element, self.block_size = lin.element, lin.block_size
        self.in_features, self.out_features = lin.in_features, lin.out_features
        self._fused, self._part = fused or (None, 0)
        for name in ("codes", "scales", "records"):
            self._buffers.pop(name, None)
        if fused is not None:  # the fused weight's tensors, shared by its parts
            names, tensors = self._fused.names, self._fused.tensors
            self.out_features = self._fused.sizes[self._part]
        else:
            names = ("codes", "scales") if lin.holds_stored else ()
            names += ("records",) if lin.records_unit is not None else ()
            tensors = [torch.from_numpy(a.view(np.uint8)) for a in lin.held]
            ops.register(lin, tensors)
        for name, t in zip(names, tensors, strict=True):
            self.register_buffer(name, t, persistent=False)
        self._held_names = names

    def replace_weight(self, weight: MXArray, bias=None) -> None:
        """Hold ``weight`` (an ``MXArray`` ``(out, in)`` blocked along ``in``, of
        this layer's format and block size) and ``bias`` instead of the weight
        and bias held; ``in_features`` / ``out_features`` follow ``weight``
        (tensor parallel: a rank's shard, :mod:`mlir_mx.torch.distributed`).
        A part of a fused weight is narrowed through its ``FusedWeight`` instead."""
        if self._fused is not None:
            raise MXValueError("weight: this layer reads a fused weight; narrow the FusedWeight")
        check_linear_weight(weight, "weight", ("out_features", "in_features"))
        if (weight.element, weight.block_size) != (self.element, self.block_size):
            raise MXValueError(
                f"weight: expected {self.element} in blocks of {self.block_size}, got "
                f"{weight.element} in blocks of {weight.block_size}"
            )
        self._adopt(Linear(weight, threads=1, activations=self.activations))
        self._set_bias(bias)

    def read_fused(self, fused, part: int) -> None:
        """Read part ``part`` of ``fused``, a :class:`~mlir_mx.torch.fused.FusedWeight`
        (its ``attach`` and ``replace`` call this): hold its Linear and expose
        its tensors as this layer's buffers; ``out_features`` is the part's."""
        self._adopt(fused.linear, (fused, part))

    # -- what it holds ---------------------------------------------------------------

    @property
    def linear(self) -> Linear:
        """The ``mlir_mx.Linear`` this layer runs (``Linear.held`` are its
        buffers' memory); a fused layer's is the fused weight's, over every
        part's rows (:attr:`fused`)."""
        return self._linear

    @property
    def fused(self):
        """The :class:`~mlir_mx.torch.fused.FusedWeight` this layer reads a part
        of (``quantize_(fuse=...)``), or None."""
        return self._fused

    @property
    def fused_part(self) -> int:
        """Which part of :attr:`fused` this layer reads (0 when not fused)."""
        return self._part

    @property
    def threads(self) -> int | None:
        return self._threads

    @threads.setter
    def threads(self, value: int | None) -> None:
        self._threads = None if value is None else check_threads(value)

    @property
    def nbytes(self) -> int:
        """Bytes of the weight held (codes and scales; the bias not included); a
        fused layer's: its rows' share of the fused weight."""
        if self._fused is not None:
            return self._fused.part_nbytes(self._part)
        return self._linear.nbytes

    def weight(self) -> MXArray:
        """The weight as an ``MXArray`` ``(out_features, in_features)``, derived
        from the form held (``Linear.weight``: a new array, bit for bit the weight
        given; the module does not keep it)."""
        if self._fused is not None:
            return self._fused.part_weight(self._part)
        return self._linear.weight()

    def dequantized_weight(self) -> torch.Tensor:
        """The f32 values of the weight, ``(out_features, in_features)``."""
        return torch.from_numpy(oracle.dequantize(self.weight()))

    def extra_repr(self) -> str:
        bits = 8 * self.nbytes / (self.in_features * self.out_features)
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"bias={self.bias is not None}, weights={self.element}, block_size={self.block_size}, "
            f"nbytes={self.nbytes} ({bits:.2f} bits/weight), threads={self.threads}"
            + (f", activations={self.activations!r}" if self.activations else "")
            + (f", fused=part {self._part + 1} of {len(self._fused.sizes)}" if self._fused else "")
        )

    def __deepcopy__(self, memo):
        # A new module over new arrays (the Linear's compiled kernels and locks
        # are not copied; its kernels come back from the compile caches); the
        # parts of a fused weight share one copy of it (memo).
        bias = None if self.bias is None else self.bias.detach().clone()
        if self._fused is None:
            new = MXLinear(self.weight(), bias, threads=self.threads, activations=self.activations)
        else:
            new = MXLinear.__new__(MXLinear)
            torch.nn.Module.__init__(new)
            new.activations, new.threads = self.activations, self.threads
            copy.deepcopy(self._fused, memo).attach(new, self._part)
            new.bias = None if bias is None else torch.nn.Parameter(bias, requires_grad=False)
        memo[id(self)] = new
        return new

    def precompile(self, m=None, *, bf16: bool = False) -> None:
        """Compile now the kernels of calls with ``m`` rows (``Linear.precompile``),
        on this layer's thread count (None: ``torch.get_num_threads()``); ``bf16``:
        of bf16 inputs too (a bf16 model's: the AMX path's where it is taken)."""
        self._linear.precompile(m, threads=self._threads or layer_threads(), bf16=bf16)

    # -- the call ----------------------------------------------------------------------

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x @ W.T + bias`` for ``x`` of shape ``(..., in_features)``."""
        if not isinstance(x, torch.Tensor):
            raise MXArgTypeError(f"x: expected a torch.Tensor, got {type(x).__name__}")
        if x.requires_grad and torch.is_grad_enabled():
            raise InferenceOnlyError(
                "x: requires grad, but MXLinear is inference only (it has no backward); run "
                "the model under torch.no_grad() or torch.inference_mode(), or pass x.detach()"
            )
        if x.dtype not in _DTYPES:
            raise MXArgTypeError(f"x: expected dtype float32, bfloat16 or float16, got {x.dtype}")
        if not x.is_cpu:
            raise MXValueError(f"x: mlir_mx runs on the CPU, got a tensor on {x.device}")
        if x.layout != torch.strided:  # sparse, mkldnn: no dense storage to pass
            raise MXArgTypeError(f"x: expected a dense (strided) tensor, got layout {x.layout}")
        if x.dim() == 0 or x.shape[-1] != self.in_features:
            raise MXValueError(f"x: expected shape (..., {self.in_features}), got {tuple(x.shape)}")
        if x.is_contiguous() and eager(x):
            y = self._by_address(x)
            if y is not None:
                return y
        x2 = x if x.dim() == 2 else x.reshape(-1, self.in_features)
        if x2.dtype != torch.float32:
            x2 = x2.float()  # exact: every bf16 / f16 value is an f32 value
        x2 = x2.contiguous()
        if self._fused is not None:
            y = self._fused.output(self, x, x2)
        elif eager(x):  # no tracer to see the op: the Linear itself, without the dispatcher
            # x2 is checked above (f32, C-contiguous, (M, in)): the kernel takes
            # its address, else the Linear's own call (activations quantized
            # per call, ...).
            y = self._call_in_place(x2, bf16=x.dtype == torch.bfloat16)  # bf16: its kernels
            if y is None:
                n = self._threads or layer_threads()
                y = torch.from_numpy(self._linear(x2.numpy(), threads=n))
        else:
            weight = [getattr(self, name) for name in self._held_names]
            y = ops.call_op(x2, weight, self._linear, self._threads)
        if self.bias is not None:
            y = y + self.bias.to(torch.float32)
        if x.dtype != torch.float32:
            y = y.to(x.dtype)
        return y if x.dim() == 2 else y.reshape(*x.shape[:-1], self.out_features)

    def _by_address(self, x: torch.Tensor) -> torch.Tensor | None:
        """``forward`` for a C-contiguous ``x`` in eager mode (checked by the
        caller): the kernel by address, the result made in ``x``'s leading
        shape (no reshape on either side); a bf16 / f16 ``x`` converted to f32
        once (exact), the result rounded once to its dtype after the bias (a
        fused part: its columns of the fused result, converted straight from a
        ``narrow``).  None where ``Linear.call_into`` declines."""
        fused, half = self._fused, x.dtype != torch.float32
        if not half:
            y = self._call_in_place(x) if fused is None else fused.output_in_place(self, x)
        elif fused is not None:
            y = fused.output_narrow(self, x)  # the siblings' one f32 copy and kernel call
        else:
            y = self._call_in_place(x.float(), bf16=x.dtype == torch.bfloat16)
        if y is None:
            return None
        y = y if self.bias is None else y + self.bias.to(torch.float32)
        return y.to(x.dtype) if half else y

    def _call_in_place(self, x: torch.Tensor, bf16: bool = False) -> torch.Tensor | None:
        """The kernel on ``x`` itself (checked: f32, C-contiguous, ``(..., in)``)
        into a new output of ``x``'s leading shape: no reshape or copy on either
        side.  In a model each torch call here costs 4-11 us, not 1-3 as in a
        loop over one layer (the weights' stream leaves torch's code and data
        out of cache), and the two reshapes were about 40 % of the layer's
        own time around the kernel (bench/results/decode-streams-2026-12-03.md,
        session 40).  None where ``Linear.call_into`` does not apply.  ``bf16``:
        ``x`` holds bf16 values (a bf16 input): the bf16 kernels, same bits."""
        y = torch.zeros(*x.shape[:-1], self.out_features, dtype=torch.float32)
        m = math.prod(x.shape[:-1])
        n = self._threads or layer_threads()
        return y if self._linear.call_into(x.data_ptr(), m, y.data_ptr(), n, bf16) else None

    # -- the saved form: nn.Linear's layout ------------------------------------------------

    def _saved_weight(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(weight_codes, weight_scales)``: the weight's stored bytes, ``uint8``."""
        w = self.weight()
        codes = torch.from_numpy(np.array(w.packed_codes()))
        return codes, torch.from_numpy(np.array(w.scales.view(np.uint8)))

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        super()._save_to_state_dict(destination, prefix, keep_vars)
        codes, scales = self._saved_weight()
        destination[prefix + "weight_codes"] = codes
        destination[prefix + "weight_scales"] = scales
        if self._linear.global_scale is not None:  # NVFP4: E4M3 scales and this divisor
            destination[prefix + _GLOBAL] = torch.tensor(self._linear.global_scale)
        # What the bytes mean, checked on load (uint8 ASCII: tensors only, so
        # safetensors can hold a state_dict too).
        destination[prefix + "weight_format"] = torch.tensor(
            list(self.element.encode("ascii")), dtype=torch.uint8
        )
        destination[prefix + "weight_block_size"] = torch.tensor(self.block_size)
        destination[prefix + "weight_shape"] = torch.tensor([self.out_features, self.in_features])

    def _load_from_state_dict(
        self, state_dict, prefix, local_metadata, strict, missing, unexpected, errors
    ):
        keys = (prefix + "weight_codes", prefix + "weight_scales")
        problems = self._meaning_problems(state_dict, prefix)
        if problems:
            errors.extend(problems)
        elif all(k in state_dict for k in keys):
            codes, scales = (state_dict[k] for k in keys)
            try:
                gs = state_dict.get(prefix + _GLOBAL)
                w = self._from_saved(
                    codes.detach().cpu().numpy(), scales.detach().cpu().numpy(),
                    None if gs is None else gs.detach().cpu().numpy(),
                )  # fmt: skip
                if w.shape != (self.out_features, self.in_features):
                    raise MXValueError(f"holds a weight of shape {w.shape}")
                if self._fused is not None:  # the fused weight rebuilt with these rows
                    self._fused.replace(self._part, w)
                else:
                    self._adopt(Linear(w, threads=1, activations=self.activations))
            except (TypeError, ValueError) as e:
                errors.append(f"{prefix}weight_codes/weight_scales: {e}")
        else:
            missing.extend(k for k in keys if k not in state_dict)
        skip = set(keys) | {prefix + name for name in (*_MEANING, _GLOBAL)}
        rest = {k: v for k, v in state_dict.items() if k not in skip}
        super()._load_from_state_dict(
            rest, prefix, local_metadata, strict, missing, unexpected, errors
        )

    def _meaning_problems(self, state_dict, prefix: str) -> list[str]:
        """The saved format, block size and shape against this layer's: one
        message per mismatch, naming its key.  A state_dict saved without
        them (before they were saved) is checked by its byte shapes alone."""
        want = {"weight_format": self.element, "weight_block_size": self.block_size,
                "weight_shape": (self.out_features, self.in_features)}  # fmt: skip
        problems = []
        for name, read in _MEANING.items():
            key = prefix + name
            if key not in state_dict:
                continue
            try:
                saved = read(state_dict[key])
            except (TypeError, ValueError, RuntimeError, UnicodeDecodeError) as e:
                problems.append(f"{key}: cannot read it ({e})")
                continue
            if saved != want[name]:
                problems.append(
                    f"{key}: saved {saved!r}, but this layer holds {want[name]!r} (build the "
                    "layer with the saved format, block size and shape to load it)"
                )
        return problems

    # -- pickle / torch.save(model): rebuilt from the saved form ---------------------------

    def __getstate__(self):
        # The Linear (compiled kernels, locks) is not pickled: the weight's
        # saved form is, and __setstate__ builds a new Linear from it.
        # A fused layer pickles its FusedWeight (shared by its parts; pickle's
        # memo keeps it one object), which pickles the fused weight's saved form.
        state = self.__dict__.copy()
        state.pop("_linear", None)
        state["_buffers"] = {
            k: v for k, v in self._buffers.items() if k not in self._held_names
        }
        if self._fused is None:
            state["_mx_saved_weight"] = (*self._saved_weight(), self._linear.global_scale)
        return state

    def __setstate__(self, state):
        state.setdefault("_fused", None)  # pickled before fusion existed
        if state["_fused"] is not None:
            super().__setstate__(state)
            self._fused.attach(self, self._part)
            return
        codes, scales, *gs = state.pop("_mx_saved_weight")  # gs: an NVFP4 weight's
        super().__setstate__(state)
        w = self._from_saved(codes.numpy(), scales.numpy(), gs[0] if gs else None)
        self._adopt(Linear(w, threads=1, activations=self.activations))

    def _from_saved(self, codes, scales, global_scale) -> MXArray:
        """The weight from its saved bytes (an NVFP4 one with its global scale)."""
        element = self.element if global_scale is None else "nvfp4"
        return MXArray.from_packed(
            codes, scales, element, self.block_size, axis=1, global_scale=global_scale
        )


def _saved_format(t) -> str:
    t = torch.as_tensor(t)
    if t.dtype != torch.uint8 or t.dim() != 1:
        raise ValueError(f"expected 1-D uint8 ASCII bytes, got {t.dtype} of shape {tuple(t.shape)}")
    return bytes(t.tolist()).decode("ascii")


def _saved_ints(t, dims: int):
    t = torch.as_tensor(t)
    if t.dtype.is_floating_point or t.dtype.is_complex or t.dtype == torch.bool or t.dim() != dims:
        raise ValueError(f"expected a {dims}-D integer tensor, got {t.dtype} of shape {tuple(t.shape)}")
    return int(t) if dims == 0 else tuple(int(v) for v in t.tolist())


#: An NVFP4 weight's global scale (f32, 0-D) in the saved form; absent for E8M0 weights.
_GLOBAL = "weight_global_scale"

#: The entries that say what ``weight_codes``/``weight_scales`` mean, and how each is read.
_MEANING = {
    "weight_format": _saved_format,
    "weight_block_size": lambda t: _saved_ints(t, 0),
    "weight_shape": lambda t: _saved_ints(t, 1),
}


def is_conv1d(module) -> bool:
    """``transformers.pytorch_utils.Conv1D`` (GPT-2's linear layers: ``y = x @ W
    + b`` with ``W`` of shape ``(in, out)``), without importing transformers."""
    t = type(module)
    return t.__name__ == "Conv1D" and t.__module__ == "transformers.pytorch_utils"

"""``MXExperts``: a mixture-of-experts block whose experts hold MX weights.

It replaces a ``transformers`` stacked-experts module (gpt-oss's
``GptOssExperts``: ``gate_up_proj`` ``(E, H, 2I)``, ``down_proj`` ``(E, I, H)``,
stored transposed, with biases) in place, so the model's router stays: the
model calls ``experts(hidden_states, router_indices, routing_weights)`` as it
called the original (transformers 5.24's signature: ``hidden_states`` ``(T, H)``,
``router_indices`` ``(T, k)`` int, ``routing_weights`` ``(T, k)``).  Each expert's two projections are ``MXLinear`` layers (one
``mlir_mx.Linear`` each: 4.25 bits per weight for MXFP4), so ``state_dict``
(with each layer's ``weight_format`` / ``weight_block_size`` / ``weight_shape``
checks), pickling and ``copy.deepcopy`` are ``MXLinear``'s.

The call groups the tokens per expert (one call of each active expert's two
projections on its tokens: a decode step runs the top-k experts of its one
token, a prefill each expert once on all the tokens routed to it), applies the
gate (:class:`Gate`) in f32 and adds each expert's output times its routing
weight, in f32, rounded once to the input's dtype.

Another stacked-experts MoE plugs in through :class:`Gate` (``interleaved``:
gpt-oss; ``concatenated``: Mixtral / Qwen-MoE in transformers 5): :func:`experts_gate`.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import torch

from mlir_mx.errors import MXArgTypeError, MXValueError, expect_type
from mlir_mx.host import check_threads
from mlir_mx.interop.orientation import check_linear_weight
from mlir_mx.linear import Linear, activations_format
from mlir_mx.numerics import ElementFormat, MXArray, element_format

from .experts_amx import amx_projection
from .experts_rows import project_rows
from .fused import eager
from .module import MXLinear
from .quantizer import quantize_weight
from .thread_policy import layer_threads

__all__ = ["Gate", "MXExperts", "experts_gate", "is_stacked_experts"]

#: The dtypes of ``hidden_states`` the call takes (the result is in the same).
_FLOATS = (torch.float32, torch.bfloat16, torch.float16)
#: The most elements of the gate's input per torch call (:meth:`Gate.rows`).
_GATE_CHUNK = 16384
#: The activations a ``concatenated`` gate may apply to its gate half.
_ACTS = {"silu": torch.nn.functional.silu, "gelu": torch.nn.functional.gelu}


@dataclass(frozen=True)
class Gate:
    """How an expert's ``gate_up`` output becomes the ``down`` projection's input.

    ``kind``: ``"interleaved"`` (gpt-oss: gate rows ``0::2``, up rows
    ``1::2``; ``gate.clamp(max=limit)``, ``up.clamp(-limit, limit)``, ``(up +
    1) * (gate * sigmoid(gate * alpha))``, transformers' ``GptOssExperts``
    order of operations) or ``"concatenated"`` (``act(gate) * up``, gate the
    first half: Mixtral / Qwen-MoE; ``act`` one of ``silu``, ``gelu``)."""

    kind: str = "interleaved"
    alpha: float = 1.702
    limit: float = 7.0
    act: str = "silu"

    def __post_init__(self):
        for name, kinds, what in (("kind", str, "a str"), ("act", str, "a str"),
                                  ("alpha", (int, float), "a number"), ("limit", (int, float), "a number")):
            expect_type(getattr(self, name), kinds, f"gate: {name}", what)  # fmt: skip
        if self.kind not in ("interleaved", "concatenated"):
            raise MXValueError(f"gate: kind must be 'interleaved' or 'concatenated', got {self.kind!r}")
        if self.kind == "concatenated" and self.act not in _ACTS:
            raise MXValueError(f"gate: act must be one of {', '.join(_ACTS)}, got {self.act!r}")

    def __call__(self, gate_up: torch.Tensor) -> torch.Tensor:
        if self.kind == "concatenated":
            gate, up = gate_up.chunk(2, dim=-1)
            return _ACTS[self.act](gate) * up
        gate, up = gate_up[..., ::2], gate_up[..., 1::2]
        gate = gate.clamp(min=None, max=self.limit)
        up = up.clamp(min=-self.limit, max=self.limit)
        glu = gate * torch.sigmoid(gate * self.alpha)
        return (up + 1) * glu

    def rows(self, gate_up: torch.Tensor) -> torch.Tensor:
        """The gate of each row of ``gate_up`` ``(R, 2I)`` (f32, contiguous),
        bit for bit as of that row alone, whatever ``R``: torch's vector and
        scalar ``exp`` (``sigmoid``, ``silu``) may differ in the last bit, so
        every element is made to take the vector body.  Each half is padded
        to a multiple of 32 elements (the 2 x 16-lane step; lanes do not mix),
        and the rows go in chunks below 16384 elements, under torch's grain
        (32768), so no chunk is split between threads at another boundary.
        The one-token and the grouped call both take it (round 4, ``07``)."""
        r, inter = gate_up.shape[0], gate_up.shape[1] // 2
        pad = -inter % 32
        if pad:
            padded = gate_up.new_zeros(r, 2 * (inter + pad))
            if self.kind == "concatenated":
                padded[:, :inter] = gate_up[:, :inter]
                padded[:, inter + pad : 2 * inter + pad] = gate_up[:, inter:]
            else:
                padded[:, : 2 * inter] = gate_up
            gate_up = padded
        step = max(1, _GATE_CHUNK // (inter + pad))
        if r <= step:
            out = self(gate_up)
        else:
            out = torch.cat([self(gate_up[s : s + step]) for s in range(0, r, step)])
        return (out[:, :inter] if pad else out).contiguous()


class MXExperts(torch.nn.Module):
    """``E`` experts, each ``down(gate(gate_up(x)))`` with MX weights.

    ``gate_up``: ``E`` MXArrays ``(2I, H)`` blocked along ``H`` (``nn.Linear``'s
    layout); ``down``: ``E`` MXArrays ``(H, I)``; ``gate_up_bias`` ``(E, 2I)``
    and ``down_bias`` ``(E, H)`` (optional); ``gate``: a :class:`Gate`.
    ``threads`` / ``activations``: as for :class:`MXLinear`, every projection.
    """

    def __init__(
        self, gate_up: Sequence[MXArray], down: Sequence[MXArray], gate_up_bias=None,
        down_bias=None, *, gate: Gate | None = None, threads: int | None = None,
        activations=None,
    ):  # fmt: skip
        super().__init__()
        for name, value in (("gate_up", gate_up), ("down", down)):
            if isinstance(value, (str, bytes, MXArray)) or not hasattr(value, "__iter__"):
                what = type(value).__name__
                raise MXArgTypeError(f"{name}: expected a sequence of MXArrays, got {what}")
        gate_up, down = list(gate_up), list(down)
        if not gate_up or len(gate_up) != len(down):
            raise MXValueError(
                f"gate_up, down: expected one weight per expert in each, got {len(gate_up)} "
                f"and {len(down)}"
            )
        self.gate = Gate() if gate is None else gate
        if not isinstance(self.gate, Gate):
            raise MXArgTypeError(f"gate: expected a Gate, got {type(self.gate).__name__}")
        e = len(gate_up)
        gu_b = _biases(gate_up_bias, "gate_up_bias", e)
        dn_b = _biases(down_bias, "down_bias", e)
        acts = activations_format(activations)
        lins = _linears({"gate_up": gate_up, "down": down}, acts, threads)
        self.gate_up = torch.nn.ModuleList(
            MXLinear.from_mx_linear(lin, gu_b[i], threads=threads) for i, lin in enumerate(lins[:e])
        )
        self.down = torch.nn.ModuleList(
            MXLinear.from_mx_linear(lin, dn_b[i], threads=threads) for i, lin in enumerate(lins[e:])
        )
        self._check_shapes()

    def _check_shapes(self) -> None:
        first = self.gate_up[0]
        hidden, inter2 = first.in_features, first.out_features
        inter = inter2 // 2
        for i, (gu, dn) in enumerate(zip(self.gate_up, self.down, strict=True)):
            if (gu.out_features, gu.in_features) != (inter2, hidden) or inter2 % 2:
                raise MXValueError(
                    f"gate_up[{i}]: expected shape ({inter2}, {hidden}) (even rows), got "
                    f"({gu.out_features}, {gu.in_features})"
                )
            if (dn.out_features, dn.in_features) != (hidden, inter):
                raise MXValueError(
                    f"down[{i}]: expected shape ({hidden}, {inter}), got "
                    f"({dn.out_features}, {dn.in_features})"
                )
        self.num_experts, self.hidden_size, self.intermediate_size = len(self.gate_up), hidden, inter

    # -- building ---------------------------------------------------------------------

    @classmethod
    def from_experts(
        cls, experts: torch.nn.Module, element: str | ElementFormat = "f4E2M1FN",
        block_size: int = 32,
        *, threads: int | None = None, activations=None,
    ) -> MXExperts:  # fmt: skip
        """Quantize a ``transformers`` stacked-experts module (:func:`is_stacked_experts`:
        gpt-oss's ``GptOssExperts``, ``gate_up_proj`` ``(E, H, 2I)`` transposed;
        Mixtral's ``(E, 2I, H)``), each expert's matrices one at a time, with
        :func:`quantize_weight`; the biases are kept."""
        if not is_stacked_experts(experts):
            raise MXArgTypeError(
                f"experts: expected a transformers stacked-experts module (gate_up_proj and "
                f"down_proj of 3 dims), got {type(experts).__name__}"
            )
        fmt, activations = element_format(element), activations_format(activations)
        gate = experts_gate(experts)
        tr = bool(getattr(experts, "is_transposed", False))

        def mx(p, e):
            w = p[e].t() if tr else p[e]  # (out, in)
            return quantize_weight(w, fmt, block_size, threads=threads)

        gu, dn = experts.gate_up_proj, experts.down_proj
        n = gu.shape[0]
        biases = [getattr(experts, name, None) for name in ("gate_up_proj_bias", "down_proj_bias")]
        if not getattr(experts, "has_bias", biases[0] is not None):
            biases = [None, None]
        return cls(
            [mx(gu, e) for e in range(n)], [mx(dn, e) for e in range(n)], *biases,
            gate=gate, threads=threads, activations=activations,
        )  # fmt: skip

    # -- what it holds ----------------------------------------------------------------

    @property
    def nbytes(self) -> int:
        """Bytes of the expert weights held (codes and scales; biases not included)."""
        return sum(m.nbytes for m in (*self.gate_up, *self.down))

    @property
    def threads(self) -> int | None:
        return self.gate_up[0].threads

    @threads.setter
    def threads(self, value: int | None) -> None:
        for m in (*self.gate_up, *self.down):
            m.threads = value
        self.__dict__.pop("_decode_bound", None)

    def extra_repr(self) -> str:
        n = self.num_experts * 3 * self.hidden_size * self.intermediate_size
        return (
            f"num_experts={self.num_experts}, hidden_size={self.hidden_size}, "
            f"intermediate_size={self.intermediate_size}, gate={self.gate}, "
            f"nbytes={self.nbytes} ({8 * self.nbytes / n:.2f} bits/weight)"
        )

    # -- the call ---------------------------------------------------------------------

    def expert(self, e: int, x: torch.Tensor, bf16: bool = False) -> torch.Tensor:
        """Expert ``e`` on ``x`` ``(T, H)`` f32: ``(T, H)`` f32, its bias included.
        ``bf16``: ``x`` holds bf16 values (a bf16 model's hidden states, C-contiguous):
        ``gate_up`` runs the bf16 kernels on them, the same bits.  A projection
        of enough rows of bf16 inputs runs on AMX-BF16 where the guard lets it
        (:mod:`mlir_mx.torch.experts_amx`), the same bits."""
        up = self.gate_up[e]
        h = amx_projection(up, x, bf16)  # AMX-BF16 where it gives the same bits
        if h is None and bf16 and up.fused is None and eager(x):
            h = torch.zeros(x.shape[0], up.out_features, dtype=torch.float32)
            n = up.threads or layer_threads()
            if not up.linear.call_into(x.data_ptr(), x.shape[0], h.data_ptr(), n, True):
                h = None
            elif up.bias is not None:
                h = h + up.bias.to(torch.float32)
        g = self.gate.rows(up(x) if h is None else h)
        y = amx_projection(self.down[e], g)
        return self.down[e](g) if y is None else y

    def forward(self, hidden_states, router_indices=None, routing_weights=None):
        """``sum_j routing_weights[t, j] * expert(router_indices[t, j])(x_t)`` per token."""
        x, idx, w = self._check_call(hidden_states, router_indices, routing_weights)
        t, k = idx.shape
        xf = x.to(torch.float32)
        out = torch.zeros(t, self.hidden_size, dtype=torch.float32)
        if k == 0:  # no expert routed: zeros, at every token count (round 4, 05)
            return out.to(x.dtype)
        bf16 = x.dtype == torch.bfloat16  # gate_up on the bf16 kernels: the same bits
        if t == 1:
            return self._decode(xf, idx, w, out, bf16).to(x.dtype)
        flat = idx.reshape(-1)
        order = torch.argsort(flat, stable=True)  # (token, slot) pairs grouped per expert
        counts = torch.bincount(flat, minlength=self.num_experts).tolist()
        if eager(xf) and not (xf.requires_grad and torch.is_grad_enabled()):
            return self._grouped(xf, order // k, counts, w.reshape(-1)[order], out, bf16).to(x.dtype)
        start = 0
        for e, count in enumerate(counts):
            if not count:
                continue
            pairs = order[start : start + count]
            start += count
            tokens = pairs // k
            y = self.expert(e, xf[tokens], bf16)
            scale = w.reshape(-1)[pairs].to(torch.float32)
            out.index_add_(0, tokens, y * scale[:, None])
        return out.to(x.dtype)

    def _grouped(self, xf, tokens, counts, scales, out, bf16=False):
        """Several tokens, eager: the per-expert loop's products and sums
        (ascending expert, then the pairs' order; :meth:`expert`'s operations
        on every element), each step once for all the experts' rows: one
        gather of the rows, each projection's kernels into one output in one
        parallel region (:func:`~.experts_rows.project_rows`), one gate (:meth:`Gate.rows`: bit for
        bit as per expert), one scaling and one ``index_add_`` (rows in the
        loop's order: per element the same additions in the same order).  A
        128-token gpt-oss prefill (32 experts) made about 15 torch calls and
        two joins per expert; here about 8 calls in all and two joins."""
        experts = [e for e, c in enumerate(counts) if c]
        rows = [c for c in counts if c]
        xs = xf[tokens]  # (pairs, H), C-contiguous
        mid = project_rows(self.gate_up, experts, xs, bf16=bf16, counts=rows)
        y = project_rows(self.down, experts, self.gate.rows(mid), counts=rows)
        out.index_add_(0, tokens, y * scales.to(torch.float32)[:, None])
        return out

    def _decode(self, xf, idx, w, out, bf16=False):
        """One token: the same experts, products and sums in the same order as
        the grouped path (ascending expert, then slot; ``index_add_`` of one
        row is ``out += y * scale``), without its sort, count and gathers.

        Eager, the ``k`` experts' rows go through each step together
        (:func:`~.experts_rows.project_rows`: the kernels write the rows of one output, in one
        parallel region per projection; one bias add, one gate, one scaling
        for all): about 25 torch ops a token where
        the per-expert loop made about 80, each 5-15 us in a model (its data and code
        out of cache after the other layers).  Every element sees the same
        operations as in :meth:`expert`, so the bits are the loop's
        (:meth:`Gate.rows` for the gate's transcendental functions)."""
        order = sorted((e, j) for j, e in enumerate(idx[0].tolist()))
        scales = w.reshape(-1).to(torch.float32)
        if not eager(xf) or (xf.requires_grad and torch.is_grad_enabled()):
            # Traced: the layers' custom op, one expert at a time; with grad:
            # the layers refuse it (InferenceOnlyError), the rows would drop it.
            for e, j in order:
                out += self.expert(e, xf) * scales[j]
            return out
        y = self.rows([e for e, _ in order], xf.contiguous(), bf16)
        y *= scales[[j for _, j in order]][:, None]
        for r in range(len(order)):
            out += y[r]
        return out

    def rows(self, experts: list[int], x: torch.Tensor, bf16: bool = False) -> torch.Tensor:
        """``(len(experts), H)`` f32: row ``r`` is expert ``experts[r]`` on the one
        row of ``x`` ``(1, H)`` (f32, C-contiguous; eager), its bias included:
        the one-token path's products, bit for bit :meth:`expert`'s, each
        projection of the ``k`` experts in one parallel region.  ``bf16``: as
        for :meth:`expert`.  Expert parallel's one-token call runs its rank's
        experts through it (:mod:`mlir_mx.torch.distributed`)."""
        self._bind_decode()
        mid = project_rows(self.gate_up, experts, x, shared=True, bf16=bf16)
        return project_rows(self.down, experts, self.gate.rows(mid))

    def select(self, first: int, count: int) -> MXExperts:
        """Experts ``first .. first + count - 1`` as a new ``MXExperts`` over the
        same layers: each expert's ``MXLinear`` (its packed codes and scales,
        its biases) shared, not a byte copied or dequantized; the others are
        not referenced, so they are freed with this module.  Expert parallel
        holds a rank's experts this way (:mod:`mlir_mx.torch.distributed`)."""
        for name, v in (("first", first), ("count", count)):
            if isinstance(v, bool) or not isinstance(v, int):
                raise MXArgTypeError(f"{name}: expected an int, got {type(v).__name__}")
        if not (0 <= first and 0 < count and first + count <= self.num_experts):
            raise MXValueError(
                f"first, count: experts {first}..{first + count - 1} are not in "
                f"[0, {self.num_experts})"
            )
        new = MXExperts.__new__(MXExperts)
        torch.nn.Module.__init__(new)
        new.gate = self.gate
        new.gate_up = torch.nn.ModuleList(self.gate_up[first : first + count])
        new.down = torch.nn.ModuleList(self.down[first : first + count])
        new._check_shapes()
        return new

    def _bind_decode(self) -> None:
        """Bind every expert's one-row kernel at the first one-token call (per
        thread count): the experts share the kernel (compiled once), but each
        layer's first call at a shape class looks it up and binds its weight
        (0.1 ms a layer).  Met one new expert at a time, that was 0.2-0.4 ms
        of most of the first tokens' MoE time (a decode meets a new expert
        per token for dozens of tokens); all at once it is 5-7 ms, once.  The
        mark names the layers' Linears too: a copy, an unpickled module or
        new weights loaded hold new ones, which bind again."""
        ready = (layer_threads(), id(self.gate_up[0].linear), id(self.down[-1].linear))
        if self.__dict__.get("_decode_bound") != ready:
            for layer in (*self.gate_up, *self.down):
                layer.precompile(1)
            self.__dict__["_decode_bound"] = ready

    def _check_call(self, hidden_states, router_indices, routing_weights, experts=None):
        """The call's checks; ``experts``: the routed experts' range (None: this block's)."""
        for name, v in (("hidden_states", hidden_states), ("router_indices", router_indices),
                        ("routing_weights", routing_weights)):  # fmt: skip
            if not isinstance(v, torch.Tensor):
                raise MXArgTypeError(f"{name}: expected a torch.Tensor, got {type(v).__name__}")
        if hidden_states.dim() != 2 or hidden_states.shape[1] != self.hidden_size:
            raise MXValueError(
                f"hidden_states: expected shape (T, {self.hidden_size}), got "
                f"{tuple(hidden_states.shape)}"
            )
        if not hidden_states.is_cpu:  # the rows path passes its address to the kernels
            raise MXValueError(
                f"hidden_states: mlir_mx runs on the CPU, got a tensor on {hidden_states.device}"
            )
        if hidden_states.layout != torch.strided:
            raise MXArgTypeError(
                f"hidden_states: expected a dense (strided) tensor, got layout {hidden_states.layout}"
            )
        if hidden_states.dtype not in _FLOATS:
            raise MXArgTypeError(
                f"hidden_states: expected float32, bfloat16 or float16, got {hidden_states.dtype}"
            )
        for name, v in (("router_indices", router_indices), ("routing_weights", routing_weights)):
            if not v.is_cpu or v.layout != torch.strided:
                raise MXValueError(
                    f"{name}: expected a dense tensor on the CPU, got {v.layout} on {v.device}"
                )
        if not routing_weights.dtype.is_floating_point:
            raise MXArgTypeError(f"routing_weights: expected floats, got {routing_weights.dtype}")
        t = hidden_states.shape[0]
        if router_indices.dim() != 2 or router_indices.shape[0] != t:
            raise MXValueError(
                f"router_indices: expected shape ({t}, k), got {tuple(router_indices.shape)}"
            )
        if router_indices.dtype.is_floating_point or router_indices.dtype == torch.bool:
            raise MXArgTypeError(f"router_indices: expected integers, got {router_indices.dtype}")
        if tuple(routing_weights.shape) != tuple(router_indices.shape):
            raise MXValueError(
                f"routing_weights: expected shape {tuple(router_indices.shape)} like "
                f"router_indices, got {tuple(routing_weights.shape)}"
            )
        idx = router_indices.to(torch.int64)
        if idx.numel():
            if t == 1:  # one token's k experts, as a list: 2 torch ops fewer
                ks = idx.reshape(-1).tolist()
                lo, hi = min(ks), max(ks)
            else:
                lo, hi = int(idx.min()), int(idx.max())
            n = self.num_experts if experts is None else experts
            if lo < 0 or hi >= n:
                raise MXValueError(f"router_indices: expected experts in [0, {n}), got {lo}..{hi}")
        return hidden_states, idx, routing_weights


def _linears(weights: dict[str, list], activations, threads: int | None) -> list[Linear]:
    """One ``mlir_mx.Linear`` per weight (``gate_up`` then ``down``), made on
    up to ``threads`` threads at once (None: torch's): each lays its weight
    out in numpy, whose copies and bit operations release the GIL: a
    gpt-oss-20b layer's 64 W4A8 projections take 2.3-2.9 s on one thread,
    1.3-1.5 s on two (Zen 4)."""
    items = [(f"{name}[{i}]", w) for name, ws in weights.items() for i, w in enumerate(ws)]
    for arg, w in items:
        check_linear_weight(w, arg, ("out_features", "in_features"))
    workers = min(len(items), torch.get_num_threads() if threads is None else check_threads(threads))

    def make(item):
        return Linear(item[1], threads=1, activations=activations)

    if workers <= 1:
        return [make(item) for item in items]
    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(make, items))


def _biases(bias, name: str, experts: int) -> list:
    """``bias`` ``(E, n)`` as ``E`` rows (or ``E`` Nones)."""
    if bias is None:
        return [None] * experts
    bias = torch.as_tensor(bias).detach()
    if bias.dim() != 2 or bias.shape[0] != experts:
        raise MXValueError(f"{name}: expected shape ({experts}, n), got {tuple(bias.shape)}")
    return list(bias)


def is_stacked_experts(module) -> bool:
    """A ``transformers`` experts module holding all experts' weights in two 3-D
    parameters, ``gate_up_proj`` and ``down_proj`` (gpt-oss, and Mixtral /
    Qwen-MoE in transformers 5)."""
    ps = module._parameters if isinstance(module, torch.nn.Module) else {}
    gu, dn = ps.get("gate_up_proj"), ps.get("down_proj")
    return gu is not None and dn is not None and gu.dim() == 3 and dn.dim() == 3


def experts_gate(module) -> Gate:
    """The :class:`Gate` of a ``transformers`` stacked-experts module: gpt-oss's
    interleaved, clamped gate (``alpha``, ``limit``; ``is_concatenated`` False, as
    transformers' ``use_experts_implementation`` records it) or a concatenated
    one with the module's ``config.hidden_act``."""
    if not getattr(module, "is_concatenated", True):
        return Gate("interleaved", float(module.alpha), float(module.limit))
    act = getattr(getattr(module, "config", None), "hidden_act", None)
    if act not in _ACTS:
        raise MXValueError(
            f"experts: a concatenated gate with activation {act!r} (supported: {', '.join(_ACTS)})"
        )
    return Gate("concatenated", act=act)

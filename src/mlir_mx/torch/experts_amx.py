"""``MXExperts``' prefill on AMX-BF16 where it gives the exact path's bits
(issue 51; ``docs/numerics.md``, "AMX-BF16"; ``docs/torch.md``, "``MXExperts`` on
AMX-BF16").

:func:`amx_projection` runs one expert projection (an ``MXLinear`` of an
:class:`~mlir_mx.torch.experts.MXExperts`) on the rows routed to that expert
through the guarded AMX matmul that ``Linear``'s hook uses
(:func:`mlir_mx.linear.amx_linear.amx_matmul_of`: the same prepared weight,
made once per expert projection at its first AMX call, shared with the hook),
or returns None and the caller makes the projection's own call.  It applies
when all of these hold:

- :data:`~mlir_mx.linear.amx_linear.ENV` (``MLIR_MX_AMX``) is not ``0``;
- the rows are at least :data:`EXPERT_MIN_ROWS` (12), AMX would pay on them
  with no failing block (else no guard is looked at), and the call's share
  of failing (row, block)s is low enough for AMX to pay at that many rows
  (:func:`amx_pays`, a cost model fitted per (row count, failing share, N):
  with K/32 = 90 blocks it takes up to 6.4 % at 12 rows and, from 16 rows,
  any share (the guard's 30 % then decides) for N = 5760; 3.4 % at 12 rows,
  15.0 % at 16, 12.3 % at 24 (two row tiles, one of 8 rows) and any share from
  32 for N = 2880);
- the projection's input is bf16 values the exact path takes as they are:
  ``activations="bf16"`` (f32 rounded to bf16 in the prepare kernel, as the
  exact path rounds them), or a bf16 model's hidden states into ``gate_up``
  (no ``activations=``; ``down``'s input is the gate's f32 output, which stays on
  the exact path unless ``activations="bf16"``);
- the layer is not fused, the call is eager (no tracer), no grad is asked for;
- the weight can take the AMX path (E8M0 scales, blocks of 32, a format whose
  guard bound passes: FP4/FP6/INT8) and this CPU has usable AMX-BF16;
- the per-call guard passes (the compiled prepare kernel: no (row, block)
  breaks the per-call condition, at most ``MAX_FALLBACK_SHARE`` of them fail)
  and :func:`amx_pays` on its count of failing (row, block)s;
- before the projection's weight is prepared for the tiles, the guard on the
  activations alone (:func:`mlir_mx.numerics.amx_guard.amx_guard`) says the call
  would pass and pay (:func:`amx_pays`): a projection whose inputs fail (the gate's output into ``down``
  often does: 88 % of its (row, block)s on ``mx-bench --model gpt-oss``'s
  random weights) prepares nothing;
- the projection's last ``RETRY_EVERY - 1`` calls (7) did not follow one
  that declined with at least as many rows: after a declined call of ``m``
  rows the next 7 of at most ``m`` rows go to the exact path without the
  guard's work (a call of more rows tries: AMX pays more there).

The bits are the exact path's in every case (the guard; the bias is added in
f32 after the product, as the layer does).  The kernel runs on the layer's
team (``threads`` or :func:`~mlir_mx.torch.thread_policy.layer_threads`, one
thread on an oversubscribed machine, as every layer call).

Memory: each expert projection that takes the AMX path holds its prepared
weight beside its own (:attr:`mlir_mx.linear.amx_matmul.AMXMatmul.held_bytes`:
the codes in the kernel's pair order, N padded to 16, scale bytes, flags and
bounds); about 1.06x the projection's MX bytes (gpt-oss-20b's expert: about
14 MB beside its 13.2 MB, 9.3 MB of it ``gate_up``'s).  It is made lazily,
only for the projections that receive a call whose activations pass the
guard and :func:`amx_pays`, and freed with the layer.
:func:`prepared_bytes` says how much an ``MXExperts`` holds.
"""

from __future__ import annotations

import threading
import weakref

import numpy as np
import torch

from mlir_mx.linear.activations import BF16

from .fused import eager

__all__ = [
    "AMX_COST",
    "EXPERT_MIN_ROWS",
    "RETRY_EVERY",
    "amx_pays",
    "amx_projection",
    "last_paths",
    "prepared_bytes",
]

#: The fewest rows an expert projection tries the AMX path with: below 12 it
#: does not pay on N(0, 1) hidden states (8 rows, about 6 % failing: 0.85x
#: the exact path; with no failing block 1.25x, inside the margin's noise),
#: from 12 the call's failing share decides (:func:`amx_pays`).
EXPERT_MIN_ROWS = 12

#: :func:`amx_pays`' cost model, per block of 32 along K, in units of the
#: exact path's cost of one (row, block) at N = ``"n"`` outputs (about 2.6 us,
#: 1 thread): a call's fixed part (B widened once per call, the prepare
#: kernel), each tile of 16 rows, each (tile, block) with a failing row (the C
#: tile stored, the block's in-order fallback, C reloaded) and each failing
#: (row, block).  A narrower projection pays more per output (the A side's
#: work does not shrink with N): the costs grow by ``"narrow"`` x (n / N - 1).
#: AMX is taken where it is expected ``"margin"`` (1.1) times as fast: a gain
#: below that is within the loaded measurements' noise and not worth the
#: prepared weight (1.06x the projection's bytes) it makes the layer hold.
#: Refitted (least squares) to session 57's kernel (B widened into a ring
#: inside the K loop at M of one row group: ``kernels/amx/order.py``) with
#: ``bench/probes/amx_experts_rows.py`` (gpt-oss-20b's ``gate_up``, 2880 ->
#: 5760, and ``down``, 2880 -> 2880; E2M1, 16 experts in turn, 1 thread,
#: loaded: load 2.0-2.5; ``bench/results/amx-experts-rows-2026-12-06-s57-loaded.txt``):
#: 67 points (8-48 rows, 0-15 % failing); the fitted per-row term was -0.03
#: (nothing beyond the failing tiles: a block's chains run four rows at a
#: time), so 0.  Without the margin it takes the slower side at 4 points,
#: each within 12 % of even (8 rows 1.02x, 1.12x; 12 rows 0.90x; 16 rows
#: 0.97x); with it, it also declines 8 rows at 1.25x and 24 at 1.09x.
AMX_COST = {
    "call": 4.7, "tile": 3.2, "failing_tile": 5.5, "failing_row": 0.0, "n": 5760, "narrow": 0.12,
    "margin": 1.1,
}  # fmt: skip


def amx_pays(m: int, failing: int, blocks: int, n: int) -> bool:
    """Whether the AMX path is expected to beat the exact path on a call of
    ``m`` rows, ``blocks`` blocks (K / 32) and ``n`` outputs, ``failing`` of
    whose (row, block)s fail the guard (each takes the in-order fallback
    inside the kernel): :data:`AMX_COST`'s cost per block, times its margin,
    below ``m`` (the exact path's), the failing (row, block)s taken as spread at random over
    the rows (where they cluster in fewer tiles, AMX costs less than
    modelled).  Never below :data:`EXPERT_MIN_ROWS`.  Measured (the probe
    above; ``gate_up`` / ``down`` at 16 rows, 24, 32):

    ========  =====================  =====================
    failing   ``gate_up`` 16/24/32   ``down`` 16/24/32
    ========  =====================  =====================
    0 %       2.37x / 2.39x / 3.16x  1.87x / 2.20x / 2.65x
    3 %       1.48x / 1.64x / 1.98x  1.33x / 1.52x / 1.87x
    6 %       1.23x / 1.41x / 1.79x  1.10x / 1.37x / 1.65x
    10 %      1.12x / 1.31x / 1.63x  1.04x / 1.22x / 1.51x
    ========  =====================  =====================

    (Session 56's kernel, which widened a column group's whole K panel
    first: ``gate_up`` at 0 % 1.45x / 1.61x / 2.22x, at 6 % 1.05x / 1.13x /
    1.34x.)
    """
    if m < EXPERT_MIN_ROWS or blocks <= 0 or n <= 0:
        return False
    c = AMX_COST
    share = failing / (m * blocks)
    tiles = [16] * (m // 16) + ([m % 16] if m % 16 else [])
    hit = sum(1.0 - (1.0 - share) ** rows for rows in tiles)  # tiles with a failing row
    cost = c["call"] + c["tile"] * len(tiles) + c["failing_tile"] * hit
    cost += c["failing_row"] * failing / blocks
    return c["margin"] * cost * (1.0 + c["narrow"] * (c["n"] / n - 1.0)) < m


#: After a call of ``m`` rows of a projection that did not take the AMX path
#: (its inputs failed the guard or :func:`amx_pays`), its next ``RETRY_EVERY -
#: 1`` calls of at most ``m`` rows make the exact call without trying (the guard's work is not repeated on inputs like those:
#: the gate's output into ``down``); the bits do not depend on it.
RETRY_EVERY = 8

#: Linear -> [prepared, calls left to skip, the declined call's rows] (:data:`RETRY_EVERY`).
_STATE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
#: Per thread: the prepare kernel's output arrays, reused from call to call.
_BUFFERS = threading.local()
#: Linear -> ``"amx"`` / ``"exact"``: the path its last call here took.
_LAST: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def last_paths(layers) -> list[str | None]:
    """The path (``"amx"``, ``"exact"`` or None: no call came here) each of
    ``layers`` (``MXLinear``) took at its last call through :func:`amx_projection`."""
    return [_LAST.get(layer.linear) for layer in layers]


def prepared_bytes(experts) -> int:
    """Bytes of the AMX-prepared weights an ``MXExperts`` holds now (its
    projections that have taken the AMX path; 0 before any)."""
    from mlir_mx.linear.amx_linear import amx_matmul_of

    total = 0
    for layer in (*experts.gate_up, *experts.down):
        lin = layer.linear
        if _STATE.get(lin, [False])[0]:
            found = amx_matmul_of(lin)
            total += found[0].held_bytes if found is not None else 0
    return total


def _rounded(layer, x: torch.Tensor, bf16: bool) -> bool:
    """Whether the exact path multiplies bf16 values of ``x`` as they are:
    ``activations="bf16"`` (rounded per call), or a bf16 input (``bf16``) with no
    ``activations=``."""
    acts = layer.linear.activations
    return acts == BF16 or (bf16 and acts is None)


def amx_projection(layer, x: torch.Tensor, bf16: bool = False) -> torch.Tensor | None:
    """``layer(x)`` (f32 ``(m, out)``, its bias added in f32) on AMX-BF16, or
    None where the module doc's conditions do not hold (the caller makes the
    layer's own call: the same bits).  ``layer``: an expert's ``MXLinear``;
    ``x``: f32 ``(m, in)``, C-contiguous; ``bf16``: ``x`` holds bf16 values
    (a bf16 model's hidden states)."""
    if x.dtype != torch.float32 or x.dim() != 2 or x.device.type != "cpu":
        return None
    m = x.shape[0]
    if m < EXPERT_MIN_ROWS or layer.fused is not None or not _rounded(layer, x, bf16):
        return None
    if not eager(x) or (x.requires_grad and torch.is_grad_enabled()):
        return None  # the layer's own call: the custom op, or InferenceOnlyError
    from mlir_mx.linear.amx_linear import amx_enabled, amx_matmul_of

    if not amx_enabled():
        return None
    lin = layer.linear
    if not _format_can(lin) or not amx_pays(m, 0, x.shape[1] // 32, layer.out_features):
        return None  # not even with no failing block: no guard looked at
    state = _STATE.setdefault(lin, [False, 0, 0])  # [prepared, calls left to skip, their rows]
    if state[1] and m <= state[2]:  # a call of as many rows declined: skip the guard
        state[1] -= 1
        _LAST[lin] = "exact"
        return None
    if not state[0] and not _would_pass(x, lin):  # not prepared: no weight made for nothing
        state[1:] = [RETRY_EVERY - 1, m]
        _LAST[lin] = "exact"
        return None
    found = amx_matmul_of(lin)
    state[0] = True
    y = None if found is None else _run(found, x, layer)
    _LAST[lin] = "exact" if y is None else "amx"
    if y is None:
        state[1:] = [0, 0] if found is None else [RETRY_EVERY - 1, m]
        return None
    state[1] = 0
    return y if layer.bias is None else y + layer.bias.to(torch.float32)


def _format_can(lin) -> bool:
    """The weight's side of ``Linear``'s hook (E8M0 scales, blocks of 32, a guard
    bound of at least ``MIN_T``) and AMX-BF16 usable here, without preparing
    anything."""
    from mlir_mx.linear.amx import amx_bf16_usable
    from mlir_mx.linear.amx_linear import MIN_T
    from mlir_mx.numerics.amx_guard import amx_bounds

    if lin.block_size != 32 or lin.global_scale is not None or not amx_bf16_usable():
        return False  # no guard looked at where AMX cannot run
    q, bmax = amx_bounds(lin.element)
    return 2.0**24 * q / bmax >= MIN_T


def _would_pass(x: torch.Tensor, lin) -> bool:
    """Whether a call on ``x`` would pass the guard (at most the fallback share
    of its (row, block)s failing) and pay (:func:`amx_pays` on that count):
    :func:`mlir_mx.numerics.amx_guard.amx_guard` on ``x`` rounded to bf16,
    weight-free (about 0.35 ms at 16 x 2880).  Asked
    before a projection's weight is prepared, so that one whose inputs fail
    (the gate's output into ``down`` often does) holds no prepared weight."""
    import ml_dtypes

    from mlir_mx.linear.amx_matmul import MAX_FALLBACK_SHARE
    from mlir_mx.numerics.amx_guard import amx_guard

    a = x.detach().numpy().astype(ml_dtypes.bfloat16).astype(np.float32)
    with np.errstate(all="ignore"):
        ok = amx_guard(a, lin.element)
    failing = int(ok.size - np.count_nonzero(ok))
    m, blocks = ok.shape
    n = lin.out_features
    return failing <= MAX_FALLBACK_SHARE * ok.size and amx_pays(m, failing, blocks, n)


def _run(found, x: torch.Tensor, layer) -> torch.Tensor | None:
    """The prepared call on ``x``'s rows, or None where the guard declines."""
    from mlir_mx.execution.threads import call_threads
    from mlir_mx.linear.amx import amx_bf16_usable
    from mlir_mx.linear.amx_prepare import prepare_activations

    from .thread_policy import layer_threads

    if not amx_bf16_usable():  # masked since the weight was prepared
        return None
    mm, params = found
    buffers = _BUFFERS.__dict__.setdefault("by_shape", {})  # this thread's, reused
    a = np.ascontiguousarray(x.detach().numpy())  # a view where x is C-contiguous
    prepared = prepare_activations(a, params, mm.max_fallback_share, buffers)
    m, blocks = a.shape[0], a.shape[1] // layer.linear.block_size
    if prepared.args is None or not amx_pays(m, prepared.failing, blocks, layer.out_features):
        return None
    team = call_threads(layer.threads or layer_threads())
    return torch.from_numpy(np.asarray(mm.run(prepared.args, a.shape[0], team)))

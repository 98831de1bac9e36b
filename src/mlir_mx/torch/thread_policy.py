"""The decode thread policy: torch's own ops on 1 thread, the MX layers on ``n``.

A decode step (one token, or a few) of a model converted by ``quantize_``
spends most of its time in the MX layers' kernels; torch's own operations
between them (norms, rotary embedding, attention over the cache, the
residual adds) are small, and on more than one thread each is an OpenMP
region with a barrier, after which torch's worker threads spin on the cores
that our kernels' threads need. Measured on a loaded 2-vCPU machine
(``docs/library.md``, "Threads", session 51), running those on one thread
and only our kernels on ``n`` avoided most of the 2-thread collapse; on the
quiet machine (the same page's session-51 table) 2 threads keep 0.97x of the
old default's speed and, beside one CPU-bound process, run at 0.95x of 1
thread where the old default ran at 0.18x (with the load check,
:mod:`mlir_mx.execution.pool_load`).

* :func:`decode_threads` (a context manager): inside it, torch runs on 1
  thread (``torch.set_num_threads(1)``) and every MX layer whose own
  ``threads`` is None runs on ``n`` (default: ``torch.get_num_threads()`` on
  entry); on exit torch's thread count is restored, also after an exception.
* :func:`layer_threads`: the thread count an MX layer with ``threads=None``
  uses now (the innermost :func:`decode_threads` block's, else torch's).
* The policy by default: ``quantize_`` puts a forward pre-hook and hook on
  the model it converts (:func:`install`), which run each forward call of at
  most :data:`DECODE_TOKENS` tokens inside :func:`decode_threads`; a longer
  call (a prefill) runs as before, unless the load check finds the machine
  oversubscribed for torch's thread count when it starts: then it too runs
  inside :func:`decode_threads` (torch's ops on 1 thread; our layers run
  alone anyway on a busy machine). Beside one CPU-bound process on 2 cores
  an 8-layer bf16 Llama's 2-thread prefill took 974-1546 ms against 309-327
  on 1 thread, most of it torch's own ops on its OpenMP team (session 56,
  ``bench/results/bf16-llama-busy-2026-12-06-s56.txt``). :func:`set_decode_policy` turns it off
  (``"torch"``: torch's thread count for everything) or on (``"layers"``);
  ``MLIR_MX_DECODE_POLICY=torch|layers`` sets it for a process.
  Nothing changes outside the model's forward call; under a tracer
  (``torch.compile``, ``torch.export``) the hooks do nothing.
* One exception inside a decode step: a torch ``nn.Linear`` the conversion
  left as it was whose weight holds at least :data:`WIDE_LINEAR_BYTES` (a
  bf16 ``lm_head`` the checkpoint keeps: gpt-oss's reads 1.16 GB a token)
  runs on the block's thread count, as the MX layers do, unless the load
  check finds the machine oversubscribed for it.  On 1 thread it held a
  2-thread gpt-oss decode to its 1-thread speed (12.0 against 12.3 tokens/s,
  transformers bf16 17.6; ``bench/results/zen5-s68-2026-12-07.md``).

``torch.set_num_threads`` is process-wide: another Python thread running
torch ops while a decode step runs here gets 1 thread for that while.
"""

from __future__ import annotations

import os
import threading
from contextlib import contextmanager

import torch

from mlir_mx.errors import MXValueError

__all__ = [
    "DECODE_TOKENS",
    "WIDE_LINEAR_BYTES",
    "decode_policy",
    "decode_threads",
    "install",
    "layer_threads",
    "set_decode_policy",
    "wide_linears",
]

#: A forward call of at most this many tokens (batch x sequence) is a decode
#: step for the default policy.
DECODE_TOKENS = 8


def _wide_bytes() -> int:
    text = os.environ.get("MLIR_MX_WIDE_LINEAR_BYTES", "").strip()
    try:
        return int(text) if text else 64 << 20
    except ValueError:
        raise MXValueError(f"MLIR_MX_WIDE_LINEAR_BYTES: expected an integer, got {text!r}") from None


#: A torch ``nn.Linear`` of a converted model whose weight holds at least this
#: many bytes runs on the decode block's thread count (:func:`install`);
#: ``MLIR_MX_WIDE_LINEAR_BYTES`` sets it for a process (0: every one on 1
#: thread, as before; ``mx-bench --env-row``).  64 MiB: a step's memory time
#: of milliseconds, against the 10-50 us a parallel region costs.
WIDE_LINEAR_BYTES = _wide_bytes()

_POLICIES = ("layers", "torch")


def _initial_policy() -> str:
    """``"layers"``, or ``MLIR_MX_DECODE_POLICY``'s (``layers`` / ``torch``) for a
    process (``mx-bench --env-row``)."""
    policy = os.environ.get("MLIR_MX_DECODE_POLICY", "").strip().lower() or "layers"
    if policy not in _POLICIES:
        raise MXValueError(
            f"MLIR_MX_DECODE_POLICY: expected one of {', '.join(_POLICIES)}, got {policy!r}"
        )
    return policy


_policy = [_initial_policy()]
_scope = threading.local()


def set_decode_policy(policy: str) -> str:
    """``"layers"`` (default): a converted model's decode steps run torch's own
    ops on 1 thread and the MX layers on torch's thread count
    (:func:`decode_threads`); ``"torch"``: everything on torch's thread count.
    Returns the previous setting."""
    if not isinstance(policy, str) or policy not in _POLICIES:
        raise MXValueError(f"policy: expected one of {', '.join(_POLICIES)}, got {policy!r}")
    previous, _policy[0] = _policy[0], policy
    return previous


def decode_policy() -> str:
    """The current :func:`set_decode_policy` setting."""
    return _policy[0]


def layer_threads() -> int:
    """How many threads an MX layer whose ``threads`` is None runs on now: the
    innermost :func:`decode_threads` block's count, else ``torch.get_num_threads()``.
    (While the machine has more runnable threads than CPUs the calls run on
    the caller alone, on the 1-thread kernels, ``execution.threads.call_threads``;
    ``precompile`` compiles those too, so nothing is compiled mid-decode.)"""
    stack = getattr(_scope, "stack", None)
    return stack[-1][0] if stack else torch.get_num_threads()


@contextmanager
def decode_threads(threads: int | None = None):
    """Inside the block torch runs on 1 thread and the MX layers (``threads=None``)
    on ``threads`` (None: ``torch.get_num_threads()`` on entry, or the enclosing
    block's); torch's count is restored on exit.  Yields the layers' count."""
    _enter(threads)
    try:
        yield _scope.stack[-1][0]
    finally:
        _leave()


def _enter(threads: int | None) -> None:
    if threads is not None and (not isinstance(threads, int) or threads < 1):
        raise MXValueError(f"threads: expected a positive int or None, got {threads!r}")
    stack = _scope.__dict__.setdefault("stack", [])
    n = threads if threads is not None else stack[-1][0] if stack else torch.get_num_threads()
    stack.append((n, torch.get_num_threads()))
    if torch.get_num_threads() != 1:
        torch.set_num_threads(1)


def _leave() -> None:
    _n, torch_threads = _scope.stack.pop()
    if torch.get_num_threads() != torch_threads:
        torch.set_num_threads(torch_threads)


def _tokens(args: tuple, kwargs: dict) -> int | None:
    """The token count of a forward call: its ``input_ids`` (or first tensor
    argument) without the last dimension of ``inputs_embeds``."""
    x = kwargs.get("input_ids")
    if x is None and kwargs.get("inputs_embeds") is not None:
        e = kwargs["inputs_embeds"]
        return e.numel() // max(1, e.shape[-1])
    if x is None:
        x = next((a for a in args if isinstance(a, torch.Tensor)), None)
    if not isinstance(x, torch.Tensor) or x.dtype.is_floating_point:
        return None  # not token ids: a module, not a whole model
    return x.numel()


def _busy() -> bool:
    """Whether torch's team would oversubscribe the machine now (the load
    check's verdict, :func:`mlir_mx.execution.threads.oversubscribed`)."""
    from mlir_mx.execution.threads import oversubscribed

    return oversubscribed(torch.get_num_threads())


def _pre_hook(module, args, kwargs):
    entered = False
    if _policy[0] == "layers" and not torch.compiler.is_compiling():
        tokens = _tokens(args, kwargs)
        if tokens is not None and (tokens <= DECODE_TOKENS or _busy()):
            _enter(None)
            entered = True
    _scope.__dict__.setdefault("marks", []).append(entered)


def _post_hook(module, args, kwargs, output):
    marks = getattr(_scope, "marks", None)
    if marks and marks.pop():
        _leave()


def _wide_pre_hook(module, args):
    """A wide torch layer inside a decode step: torch on the block's count."""
    stack = getattr(_scope, "stack", None)
    n = stack[-1][0] if stack else 1
    wide = n > 1 and torch.get_num_threads() == 1 and not torch.compiler.is_compiling()
    if wide:
        from mlir_mx.execution.threads import oversubscribed

        wide = not oversubscribed(n)
    if wide:
        torch.set_num_threads(n)
    _scope.__dict__.setdefault("wide", []).append(wide)


def _wide_post_hook(module, args, output):
    marks = getattr(_scope, "wide", None)
    if marks and marks.pop():
        torch.set_num_threads(1)


def wide_linears(model: torch.nn.Module) -> list[torch.nn.Linear]:
    """The torch ``nn.Linear`` modules of ``model`` whose weight holds at least
    :data:`WIDE_LINEAR_BYTES` (none when it is 0)."""
    if WIDE_LINEAR_BYTES <= 0:
        return []
    return [
        m
        for m in model.modules()
        if isinstance(m, torch.nn.Linear)
        and m.weight.numel() * m.weight.element_size() >= WIDE_LINEAR_BYTES
    ]


def install(model: torch.nn.Module) -> None:
    """Put the default policy's hooks on ``model`` (once; ``quantize_`` calls it),
    and on its :func:`wide_linears`."""
    if _pre_hook in model._forward_pre_hooks.values():
        return
    model.register_forward_pre_hook(_pre_hook, with_kwargs=True)
    model.register_forward_hook(_post_hook, with_kwargs=True, always_call=True)
    for m in wide_linears(model):
        m.register_forward_pre_hook(_wide_pre_hook)
        m.register_forward_hook(_wide_post_hook, always_call=True)

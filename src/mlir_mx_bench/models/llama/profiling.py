"""``mx-bench --model --profile``: where a decode token's time goes.

After a row's timed decode, :func:`profile_decode` runs more greedy decode
steps twice, on the same model and cache state:

1. **Hooks** (no profiler): a forward pre-hook and a forward hook with
   ``time.perf_counter`` on every linear layer (``MXLinear`` for our rows,
   ``nn.Linear`` for torch's; ``lm_head`` included) give the time inside the
   linear modules per token (the module's whole call: its Python, its input
   conversion and the kernel). The weight bytes those layers reference
   (``linear_weight_bytes``) over that time give the linears' GB/s. The same
   time and bytes per projection (the layers of one name, the last part of
   their module path: ``q_proj`` of every decoder layer, ``lm_head``...) show
   which shapes stream slowly; a block of memory that fused siblings share
   counts once, with the projection called first (the one whose call runs
   the fused kernel).
2. **torch.profiler** (CPU activities), with the same hooks, which also open a
   ``record_function`` range around each linear call: per token, the step's
   wall time splits into the linears (the hooks), torch's other ops (the
   top-level profiler events outside those ranges: attention, norms, rotary
   embeddings, the KV cache, the argmax...; their count is reported too) and
   "Python and the rest" (the remainder: the ``transformers`` modules' Python
   between ops, module-call overhead, the hooks and the profiler's own events).

The profiler slows each op a little, so the second pass's step is longer than
the row's timed (unprofiled) decode step, which is reported beside it.
"""

from __future__ import annotations

import statistics
import time

import torch

__all__ = ["METHOD", "profile_decode"]

#: The method, as the report prints it (this docstring's, without its markup).
METHOD = __doc__.split("\n\n", 1)[1].strip().replace(":func:", "").replace("``", "`")

_RANGE = "mx-bench: linear"


def _linears(model) -> list:
    from mlir_mx.torch import MXLinear

    return [m for m in model.modules() if isinstance(m, (MXLinear, torch.nn.Linear))]


class _Hooks:
    """perf_counter around every linear call (and optionally a profiler range)."""

    def __init__(self, layers, ranges: bool, names: dict[int, str] | None = None):
        self.total, self.calls, self._open, self._ranges = 0.0, 0, [], ranges
        self._names = names or {}
        self.by_name: dict[str, list] = {}  # name -> [seconds, calls]
        self._handles = [
            h
            for m in layers
            for h in (m.register_forward_pre_hook(self._pre), m.register_forward_hook(self._post))
        ]

    def _pre(self, _module, _args):
        rng = None
        if self._ranges:
            rng = torch.profiler.record_function(_RANGE)
            rng.__enter__()
        self._open.append((rng, time.perf_counter()))

    def _post(self, module, _args, _out):
        rng, t0 = self._open.pop()
        dt = time.perf_counter() - t0
        self.total += dt
        self.calls += 1
        if self._names:
            part = self.by_name.setdefault(self._names[id(module)], [0.0, 0])
            part[0] += dt
            part[1] += 1
        if rng is not None:
            rng.__exit__(None, None, None)

    def remove(self):
        for h in self._handles:
            h.remove()


def _steps(model, ids, steps: int, hooks: _Hooks) -> list[float]:
    """A prefill (untimed), then ``steps`` greedy decode steps; each step's wall seconds."""
    walls = []
    with torch.inference_mode():
        out = model(ids, use_cache=True, logits_to_keep=1)
        hooks.total, hooks.calls, hooks.by_name = 0.0, 0, {}
        for _ in range(steps):
            nxt = out.logits[:, -1].argmax(-1, keepdim=True)
            t0 = time.perf_counter()
            out = model(nxt, cache=out.cache, use_cache=True, logits_to_keep=1)
            walls.append(time.perf_counter() - t0)
    return walls


def _projection(path: str) -> str:
    """A linear layer's projection name: the last part of its module path."""
    return path.rsplit(".", 1)[-1]


def profile_decode(model, ids, steps: int, linear_bytes: int, module_blocks=None) -> dict:
    """The per-token breakdown of ``steps`` decode steps after the prompt ``ids``
    (see the module docstring); times in ms per token.  ``module_blocks``: the
    memory blocks of one linear layer's weights
    (:func:`mlir_mx_bench.models.llama.worker.module_weight_blocks`), for the per-projection rows (none
    without it)."""
    layers = _linears(model)
    layer_ids = {id(m) for m in layers}
    paths = {id(m): _projection(p) for p, m in model.named_modules() if id(m) in layer_ids}
    hooks = _Hooks(layers, ranges=False, names=paths)
    try:
        walls = _steps(model, ids, steps, hooks)
    finally:
        hooks.remove()
    linear_s = hooks.total / steps
    wall_s = statistics.mean(walls)
    calls = hooks.calls // steps
    projections = []
    if module_blocks is not None:
        nbytes, seen = dict.fromkeys(hooks.by_name, 0), set()
        for name in hooks.by_name:  # in the order of their first call
            for m in layers:
                if paths[id(m)] != name:
                    continue
                for addr, size in module_blocks(m).items():
                    if addr not in seen:
                        seen.add(addr)
                        nbytes[name] += size
        for name, (sec, n) in hooks.by_name.items():
            ms = 1e3 * sec / steps
            projections.append(
                {
                    "name": name,
                    "calls": n // steps,
                    "ms": ms,
                    "bytes": nbytes[name],
                    "gb_per_s": nbytes[name] / (ms * 1e6) if ms and nbytes[name] else None,
                }
            )
    hooks = _Hooks(layers, ranges=True)
    try:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            prof_walls = _steps(model, ids, steps, hooks)
    finally:
        hooks.remove()
    prof_linear_s = hooks.total / steps
    top = [e for e in prof.events() if e.cpu_parent is None]
    # the prefill's events come first: keep the last `steps` steps' share
    other = [e for e in top if e.name != _RANGE]
    ranges = [e for e in top if e.name == _RANGE]
    first = ranges[-calls * steps].time_range.start if ranges and calls else 0
    other = [e for e in other if e.time_range.start >= first]
    other_s = sum(e.time_range.elapsed_us() for e in other) * 1e-6 / steps
    prof_s = statistics.mean(prof_walls)
    return {
        "steps": steps,
        "step_ms": 1e3 * wall_s,  # pass 1: hooks only
        "linear_ms": 1e3 * linear_s,
        "linear_calls": calls,
        "linear_bytes": linear_bytes,
        "linear_gb_per_s": linear_bytes / linear_s / 1e9 if linear_s else None,
        # pass 2 (profiled): its step = linears + other ops + Python and the rest
        "profiled_step_ms": 1e3 * prof_s,
        "profiled_linear_ms": 1e3 * prof_linear_s,
        "other_ops_ms": 1e3 * other_s,
        "other_ops": len(other) // steps,
        "python_ms": 1e3 * (prof_s - prof_linear_s - other_s),
        "projections": projections,  # pass 1, in the order of their first call
        "method": METHOD,
    }

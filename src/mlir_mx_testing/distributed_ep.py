"""Expert parallel in real processes: the ranks' work
(``tests/torch_mx/test_expert_parallel.py``, ``bench/probes/ep_decode.py``),
run by :func:`mlir_mx_testing.distributed.run_ranks` (gloo over loopback, a
free port, every rank killed past a timeout).
The ranks' work (:func:`ep_ranks`, :func:`refuse_rank`) writes its results
with ``torch.save`` to ``out/rank{N}.pt``.
"""

from __future__ import annotations

import gc
import weakref
from contextlib import contextmanager
from pathlib import Path

import torch

__all__ = ["counted_collectives", "ep_ranks", "loaded_shard", "refuse_rank", "trace"]


def trace(model, ids: torch.Tensor, new_tokens: int) -> dict:
    """The prompt's logits (the grouped path), then ``new_tokens`` greedy steps
    with the KV cache: each step's logits (the one-token path) and the tokens."""
    with torch.inference_mode():
        out = model(ids, use_cache=True)
        prefill, steps, tokens = out.logits.clone(), [], []
        for _ in range(new_tokens):
            nxt = out.logits[:, -1].argmax(-1, keepdim=True)
            tokens.append(int(nxt))
            out = model(nxt, cache=out.cache, use_cache=True)
            steps.append(out.logits[0, -1].clone())
    return {"prompt": prefill, "steps": torch.stack(steps), "tokens": tokens}


def _held(model) -> int:
    from mlir_mx.torch import MXExperts

    return sum(m.nbytes for m in model.modules() if isinstance(m, MXExperts))


def ep_ranks(
    rank: int, ranks: int, folder: str, out: str, ids, new_tokens: int, combines, bad=None,
    load: bool = False,
) -> None:  # fmt: skip
    """One rank: first, on rank 0 only, :func:`refuse_rank`'s bad plan on the
    checkpoint at ``bad`` (if given: a refusal that entered a collective would
    meet the other ranks' first one), by ``shard_experts`` and by
    ``from_pretrained(device_mesh=)``; then the checkpoint at ``folder``
    loaded whole (``from_pretrained``) and traced unsharded (no collective),
    then, per combine of ``combines``, loaded again, sharded
    (:func:`~mlir_mx.torch.distributed.shard_experts`) and traced twice; the
    held expert bytes before and after, whether the layers of the experts the
    rank gave away were freed, the collectives the two traces called, a third
    trace with ``set_decode_collective("torch")`` (:func:`_torch_collectives`),
    and ``save_pretrained``'s refusal.  ``load``:
    last, the checkpoint loaded as this rank's shard (:func:`loaded_shard`)."""
    from torch.distributed.device_mesh import init_device_mesh

    from mlir_mx.torch import MXExperts, from_pretrained
    from mlir_mx.torch.distributed import shard_experts

    mesh = init_device_mesh("cpu", (ranks,))  # on every rank, before anything else
    result = {"refused": _refuse(bad, mesh) if bad is not None and rank == 0 else None}
    whole = from_pretrained(folder)
    result |= {"whole": trace(whole, ids, new_tokens), "held_whole": _held(whole)}
    del whole
    for combine in combines:
        model = from_pretrained(folder)
        blocks = [m for m in model.modules() if isinstance(m, MXExperts)]
        mine = set(range(rank * len(blocks[0].gate_up) // ranks,
                         (rank + 1) * len(blocks[0].gate_up) // ranks))  # fmt: skip
        given = [weakref.ref(m) for b in blocks for e, m in enumerate(b.gate_up) if e not in mine]
        del blocks
        names = shard_experts(model, combine=combine)
        gc.collect()
        with counted_collectives() as calls:
            runs = [trace(model, ids, new_tokens) for _ in range(2)]
        result[combine] = {
            "names": names,
            "held": _held(model),
            "given_away_alive": sum(r() is not None for r in given),
            "given_away": len(given),
            "runs": runs,
            "calls": calls,
            "torch": _torch_collectives(model, ids, new_tokens),
            "save": _save_refused(model, Path(out) / f"save{rank}"),
        }
        del model
    if load:
        result["load"] = loaded_shard(mesh, folder, ids, new_tokens)
    torch.save(result, Path(out) / f"rank{rank}.pt")


@contextmanager
def counted_collectives():
    """The all-to-alls and all-reduces made inside (the real collectives,
    counted), by name: ``all_to_all_single`` counts every
    ``ProcessGroup.alltoall_base`` called from Python (the decode exchange
    calls it directly, ``decode_collectives``), ``all_reduce`` every
    ``torch.distributed.all_reduce``."""
    import torch.distributed as dist

    calls = {"all_to_all_single": 0, "all_reduce": 0}
    owners = {"all_to_all_single": (dist.ProcessGroup, "alltoall_base"),
              "all_reduce": (dist, "all_reduce")}  # fmt: skip
    real = {name: getattr(*owner) for name, owner in owners.items()}
    # restored from the owner's own dict: a pybind class's method read by
    # getattr is its bare function, which would no longer bind to the group
    saved = {name: vars(owner)[attr] for name, (owner, attr) in owners.items()}

    def counting(name):
        def call(*args, **kwargs):
            calls[name] += 1
            return real[name](*args, **kwargs)

        return call

    for name, owner in owners.items():
        setattr(*owner, counting(name))
    try:
        yield calls
    finally:
        for name, owner in owners.items():
            setattr(*owner, saved[name])


def _torch_collectives(model, ids, new_tokens: int) -> dict:
    """:func:`trace` once more with ``set_decode_collective("torch")`` (the
    collectives counted), the setting restored after."""
    from mlir_mx.torch.distributed.decode_collectives import set_decode_collective

    previous = set_decode_collective("torch")
    try:
        with counted_collectives() as calls:
            run = trace(model, ids, new_tokens)
    finally:
        set_decode_collective(previous)
    return {"run": run, "calls": calls}


def loaded_shard(mesh, folder: str, ids, new_tokens: int) -> dict:
    """The checkpoint at ``folder`` loaded as this rank's shard
    (``from_pretrained(device_mesh=, tp_plan="auto")``: its experts only, the
    attention split by heads) and traced twice: the traces, the expert bytes
    held, each block's (kind, first, count, total), the first attention's
    local weight shapes and sinks."""
    from mlir_mx.torch import from_pretrained

    model = from_pretrained(folder, device_mesh=mesh, tp_plan="auto")
    blocks = [m for n, m in model.named_modules() if n.endswith("mlp.experts")]
    attn = model.model.layers[0].self_attn
    return {
        "held": _held(model),
        "experts": [(type(b).__name__, b.first, b.num_experts, b.total_experts) for b in blocks],
        "attention": {p: tuple(getattr(attn, p).weight.to_local().shape)
                      for p in ("q_proj", "k_proj", "v_proj", "o_proj")},
        "sinks": tuple(attn.sinks.shape),
        "runs": [trace(model, ids, new_tokens) for _ in range(2)],
    }  # fmt: skip


def _save_refused(model, folder: Path) -> str | None:
    from mlir_mx.errors import MXValueError
    from mlir_mx.torch import save_pretrained

    try:
        save_pretrained(model, folder)
    except MXValueError as e:
        return str(e)
    return None


def refuse_rank(rank: int, ranks: int, folder: str, out: str) -> None:
    """Rank 0 alone asks to shard the checkpoint at ``folder`` (experts not a
    multiple of ``ranks``); the other ranks do nothing and leave.  Had the
    refusal come after a collective, rank 0 would wait there for the others
    until the group's timeout."""
    if not rank:
        torch.save(_refuse(folder), Path(out) / f"rank{rank}.pt")


def _refuse(folder: str, mesh=None) -> dict:
    """``shard_experts`` on the checkpoint at ``folder`` loaded whole, and (with
    ``mesh``) ``from_pretrained(folder, device_mesh=mesh)``: their messages."""
    from mlir_mx.errors import MXValueError
    from mlir_mx.torch import from_pretrained
    from mlir_mx.torch.distributed import ExpertShard, shard_experts

    model = from_pretrained(folder)
    try:
        shard_experts(model)
    except MXValueError as e:
        message = str(e)
    else:
        message = None
    got = {"message": message, "sharded": sum(isinstance(m, ExpertShard) for m in model.modules())}
    if mesh is not None:
        try:
            from_pretrained(folder, device_mesh=mesh, tp_plan="auto")
        except MXValueError as e:
            got["load"] = str(e)
        else:
            got["load"] = None
    return got

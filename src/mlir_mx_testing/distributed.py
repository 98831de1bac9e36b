"""Run a function on N ranks of a gloo process group over loopback, bounded in time.

    results = run_ranks(fn, world=2, args=(...,), timeout=120)

``fn(rank, world, *args)`` (a module-level function: the ranks are
``torch.multiprocessing`` *spawned* processes, which import it by name) runs in
each rank after ``torch.distributed.init_process_group("gloo")`` over a TCP
store on ``127.0.0.1`` at a free port (``GLOO_SOCKET_IFNAME=lo`` unless set),
with ``torch.set_num_threads(threads)``; what it returns is pickled to a file
and handed back, one per rank, in rank order.  A rank that raises fails the run
with its traceback (:class:`RanksFailed`).  A run past ``timeout`` seconds (a
collective that hangs: a rank that died, a plan that disagrees) has every rank
process killed, by its own id, and raises :class:`RanksTimedOut`; no process
is left behind either way.
"""

from __future__ import annotations

import os
import pickle
import socket
import tempfile
import time
import traceback
from datetime import timedelta
from pathlib import Path

__all__ = ["RanksFailed", "RanksTimedOut", "free_port", "hang_in_a_collective", "run_ranks"]


class RanksFailed(RuntimeError):
    """A rank raised (its traceback in the message)."""


class RanksTimedOut(RuntimeError):
    """The ranks ran past the timeout and were killed."""


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_main(rank, fn, world, args, port, folder, threads, timeout):
    import torch
    import torch.distributed as dist

    from mlir_mx.torch.distributed.exit_guard import guard_exit

    out = Path(folder) / f"rank{rank}.pkl"
    try:
        torch.set_num_threads(threads)
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
        dist.init_process_group(
            "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
            timeout=timedelta(seconds=timeout),
        )  # fmt: skip
        guard_exit()  # gloo's workers done before the rank's interpreter finalizes
        try:
            result = ("ok", fn(rank, world, *args))
        finally:
            dist.destroy_process_group()
    except BaseException:  # noqa: BLE001 - handed back to the parent, named
        result = ("error", traceback.format_exc())
    tmp = out.with_suffix(".tmp")
    tmp.write_bytes(pickle.dumps(result))
    tmp.rename(out)


def run_ranks(fn, world: int = 2, args: tuple = (), *, timeout: float = 120.0, threads: int = 1):
    """``[fn(0, world, *args), ..., fn(world - 1, world, *args)]``, each run in its
    own spawned rank process (the module docstring)."""
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory(prefix="mx-ranks-") as folder:
        ctx = mp.start_processes(
            _rank_main, args=(fn, world, args, free_port(), folder, threads, timeout),
            nprocs=world, join=False, start_method="spawn",
        )  # fmt: skip
        deadline = time.monotonic() + timeout
        try:
            while not ctx.join(timeout=max(0.0, min(0.5, deadline - time.monotonic()))):
                failed = _failures(folder, world)
                if failed:  # its peers may wait in a collective for it: not for them
                    raise RanksFailed(failed)
                if time.monotonic() >= deadline:
                    raise RanksTimedOut(f"{world} ranks still running after {timeout:g} s: killed")
        except Exception as e:
            if isinstance(e, (RanksTimedOut, RanksFailed)):
                raise
            raise RanksFailed(_failures(folder, world) or str(e)) from None
        finally:
            for p in ctx.processes:
                if p.is_alive():
                    p.kill()
                p.join(5)
        results = []
        for rank in range(world):
            path = Path(folder) / f"rank{rank}.pkl"
            if not path.exists():
                raise RanksFailed(f"rank {rank} returned nothing")
            status, value = pickle.loads(path.read_bytes())
            if status != "ok":
                raise RanksFailed(f"rank {rank} raised:\n{value}")
            results.append(value)
        return results


def _failures(folder: str, world: int) -> str:
    lines = []
    for rank in range(world):
        path = Path(folder) / f"rank{rank}.pkl"
        if path.exists():
            status, value = pickle.loads(path.read_bytes())
            if status != "ok":
                lines.append(f"rank {rank} raised:\n{value}")
    return "\n".join(lines)


def hang_in_a_collective(rank: int, world: int, folder: str) -> None:
    """A rank function that hangs (the harness's own check): each rank writes
    its process id to ``folder/pid{rank}``; rank 0 then waits in an all-reduce
    that rank 1, asleep, never joins.  Defined here, not in a test module, so
    the spawned ranks import nothing heavier than torch before they hang."""
    import torch
    import torch.distributed as dist

    Path(folder, f"pid{rank}").write_text(str(os.getpid()))
    if rank == 0:
        dist.all_reduce(torch.ones(1))
    else:
        time.sleep(3600)

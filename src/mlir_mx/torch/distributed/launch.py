"""Processes for ``mx-generate --tp N`` / ``torchrun ... -m mlir_mx.torch.generate``.

Under ``torchrun`` (``WORLD_SIZE``, ``RANK``, ``MASTER_ADDR``/``MASTER_PORT``
in the environment) :func:`tensor_mesh` joins the gloo process group and
returns the 1-D CPU ``DeviceMesh`` of all ranks, each rank's threads pinned to
its share of the machine's CPUs (:func:`pin_local_rank`); ``mx-generate --tp N`` run by
hand starts ``torchrun --standalone --nproc-per-node N`` on itself
(:func:`relaunch`: torch's own launcher, in this process, so the ranks are its
children and end with it).  ``docs/distributed.md`` has the multi-machine form.
"""

from __future__ import annotations

import os
from datetime import timedelta

from mlir_mx.errors import ToolError, UsageError

__all__ = [
    "is_rank_zero",
    "pin_local_rank",
    "rank_threads",
    "relaunch",
    "tensor_mesh",
    "under_launcher",
]

#: How long a collective may wait for a peer before it fails (a rank that died).
COLLECTIVE_TIMEOUT = timedelta(minutes=10)


def under_launcher() -> int:
    """The world size torchrun gave this process (0: not started by a launcher)."""
    try:
        return int(os.environ.get("WORLD_SIZE", "0")) if "RANK" in os.environ else 0
    except ValueError:
        raise UsageError(f"WORLD_SIZE: expected an integer, got {os.environ['WORLD_SIZE']!r}") from None


def tensor_mesh():
    """The 1-D CPU ``DeviceMesh`` over torchrun's ranks (the gloo group joined
    first), or None outside a launcher or with one rank."""
    world = under_launcher()
    if world <= 1:
        return None
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    from .exit_guard import guard_exit

    if not dist.is_initialized():
        dist.init_process_group("gloo", timeout=COLLECTIVE_TIMEOUT)
    guard_exit()  # gloo's workers done before the interpreter finalizes (exit_guard)
    pin_local_rank()
    return init_device_mesh("cpu", (world,))


def pin_local_rank() -> set[int] | None:
    """Under torchrun, with several ranks on this machine (``LOCAL_WORLD_SIZE``
    > 1): every thread of this rank on its share of the CPUs
    (:func:`.affinity.pin_rank`; ``MLIR_MX_PIN_RANKS=0``: never; nor when
    torch's threads, ``--threads``, outnumber the share: they would share
    its CPUs).  The CPUs pinned to, or None."""
    if os.environ.get("MLIR_MX_PIN_RANKS", "1").strip() == "0":
        return None
    try:
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    except ValueError:
        raise UsageError(
            "LOCAL_RANK / LOCAL_WORLD_SIZE: expected integers, got "
            f"{os.environ.get('LOCAL_RANK')!r} / {os.environ.get('LOCAL_WORLD_SIZE')!r}"
        ) from None
    if local_world <= 1:
        return None
    import torch

    from .affinity import pin_rank, rank_cpus

    share = rank_cpus(local_rank, local_world)
    if share is None or torch.get_num_threads() > len(share):
        return None
    return pin_rank(local_rank, local_world)


def is_rank_zero() -> bool:
    """True in rank 0, or outside a process group (the one that prints)."""
    import torch.distributed as dist

    return not dist.is_initialized() or dist.get_rank() == 0


def rank_threads(n: int) -> int:
    """Threads for each of ``n`` ranks on this machine: its CPUs (those this
    process may run on) shared out, at least 1."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return max(1, cpus // n)


def relaunch(n: int, argv: list[str], module: str) -> int:
    """``torchrun --standalone --nproc-per-node n -m module argv...`` (torch's
    launcher, run in this process); the exit status (1 when a rank failed).
    Each rank's torch threads (and so its MX layers'): ``OMP_NUM_THREADS`` if
    set, else :func:`rank_threads` (torchrun's own default is 1 whatever the
    CPUs); ``--threads`` in ``argv`` sets them in each rank after that."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import main as torchrun

    os.environ.setdefault("OMP_NUM_THREADS", str(rank_threads(n)))

    try:
        torchrun(["--standalone", "--nproc-per-node", str(n), "-m", module, *argv])
    except ChildFailedError as e:
        raise ToolError(f"--tp {n}: a rank failed ({e.get_first_failure()[1].message})") from None
    return 0

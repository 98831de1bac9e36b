"""Launch 2 ranks (start-up, a few tokens, exit) again and again, to catch a rare abort (issue 56).

Sessions 53-54 saw 4 times a rank die with ``terminate called without an
active exception`` (SIGABRT, about 1.6 s after the ranks started) in 2-rank
runs.  This probe launches a tiny tensor-parallel model (a random 2-layer
Llama, hidden 256, MXFP4, saved once as a checkpoint in ``--folder``) on 2
ranks, ``--launches`` times, each rank doing what ``mx-generate --tp 2`` does
at start-up: ``init_process_group("gloo")``, pinning (``pin_local_rank``),
``init_device_mesh``, ``from_pretrained(device_mesh=, tp_plan="auto")``,
``precompile``, a few greedy tokens on the KV cache (the polled decode
collectives, gloo's I/O thread ``SCHED_IDLE`` when pinned), ``--end-allreduces``
all-reduces waited for as torch waits (as ``tp_decode.py``'s timing of one
ends its ranks), then exit (``--destroy``: ``destroy_process_group`` first, as
the test harness does).

Each launch runs in its own folder under ``--out`` (the ranks' working
directory, so a core file lands there with ``ulimit -c unlimited`` and
``kernel.core_pattern`` = ``core``); each rank writes its phases with times
since its start and, on a fatal signal, every thread's Python stack
(``faulthandler``) to ``rank{R}.log`` there.  A launch whose ranks all exit
0 has its folder removed; a failed one keeps it and is printed.

``--launcher``: ``spawn`` (``torch.multiprocessing``, as
``mlir_mx_testing.distributed.run_ranks`` and the tests), ``torchrun``
(``python -m torch.distributed.run --standalone --nproc-per-node 2``, as
``mx-generate --tp 2``) or ``direct`` (two plain processes with torchrun's
environment; rank 0 hosts the store).  ``--spin N``: N busy loops
(``while True: pass``) beside the ranks for the whole run, killed at the end.
``--no-pin``: ``MLIR_MX_PIN_RANKS=0``; ``--idle-io 0``: ``MLIR_MX_TP_IDLE_IO=0``.

    ulimit -c unlimited
    PYTHONPATH=src python bench/probes/tp_startup_loop.py --launches 100 \\
        [--launcher spawn|torchrun|direct] [--spin 1] [--no-pin] [--idle-io 0] \\
        [--destroy] [--tokens 4] [--out /tmp/mx-abort]

``--no-guard``: ``exit_guard.guard_exit`` not registered (the exit as before
session 55, when nothing waited for gloo's workers).  ``--stage pg``: the
process group, a barrier and ``--tokens`` all-reduces only (no model).

Not a test: a campaign of minutes to hours.  What it found (session 55,
``docs/distributed.md``, "The abort at exit"): the abort is at the rank's
exit, a gloo worker taking the GIL while the interpreter finalizes; with
``--stage pg --no-guard`` most launches abort, guarded none.
"""

from __future__ import annotations

import argparse
import faulthandler
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

T0 = time.perf_counter()
WIDTHS = dict(hidden_size=256, intermediate_size=512, num_attention_heads=4,
              num_key_value_heads=2, vocab_size=1024, max_position_embeddings=64)  # fmt: skip


def build(folder: Path, layers: int = 2) -> None:
    import torch
    import transformers

    from mlir_mx.torch import quantize_, save_pretrained

    torch.manual_seed(0)
    config = transformers.LlamaConfig(num_hidden_layers=layers, **WIDTHS)
    model = transformers.LlamaForCausalLM(config).to(torch.bfloat16).eval()
    quantize_(model, element="mxfp4")
    save_pretrained(model, folder)


def _stamp(what: str) -> None:
    sys.stderr.write(f"[{os.getpid()}] {time.perf_counter() - T0:7.3f} s {what}\n")
    sys.stderr.flush()


def rank_main(folder: str, tokens: int, destroy: bool, stage: str = "full") -> None:
    """One rank, with torchrun's environment (RANK, WORLD_SIZE, MASTER_*)."""
    log = open(f"rank{os.environ['RANK']}.log", "a")  # noqa: SIM115 - kept open to the end
    os.dup2(log.fileno(), 2)
    os.dup2(log.fileno(), 1)
    faulthandler.enable(file=log, all_threads=True)
    _stamp("rank start")
    import torch
    import torch.distributed as dist

    _stamp("torch imported")
    torch.set_num_threads(1)
    from torch.distributed.device_mesh import init_device_mesh

    late = os.environ.get("MX_PROBE_LATE_IMPORT") == "1"  # spawn: as run_ranks, mlir_mx after
    if late:
        dist.init_process_group("gloo", timeout=timedelta(minutes=10))
        _stamp("process group")
    from mlir_mx.torch import from_pretrained, precompile
    from mlir_mx.torch.distributed.launch import COLLECTIVE_TIMEOUT, pin_local_rank

    _stamp("mlir_mx imported")
    if not late:  # as mx-generate --tp: mlir_mx imported first
        dist.init_process_group("gloo", timeout=COLLECTIVE_TIMEOUT)
        _stamp("process group")
    from mlir_mx.torch.distributed import exit_guard

    if os.environ.get("MX_PROBE_GUARD", "1") == "1":
        exit_guard.guard_exit()  # as tensor_mesh / parallelize / run_ranks do
    else:  # the exit unguarded, as before session 55 (parallelize registers nothing)
        exit_guard._guarded[0] = os.getpid()
    _stamp(f"pinned {pin_local_rank()}")
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    _stamp("mesh")
    if stage == "pg":  # the process group alone: a barrier and a few all-reduces
        dist.barrier()
        for _ in range(tokens):
            dist.all_reduce(torch.ones(256))
        _stamp(f"{tokens} all-reduces")
        return _end(dist, destroy)
    model = from_pretrained(folder, device_mesh=mesh, tp_plan="auto")
    _stamp("loaded")
    precompile(model)
    _stamp("precompiled")
    ids = torch.arange(1, 9).view(1, -1)
    with torch.inference_mode():
        out = model(ids, use_cache=True)
        for _ in range(tokens):
            nxt = out.logits[:, -1].argmax(-1, keepdim=True)
            out = model(nxt, cache=out.cache, use_cache=True)
    _stamp(f"decoded {tokens}")
    for _ in range(int(os.environ.get("MX_PROBE_END_ALLREDUCES", "0"))):
        dist.all_reduce(torch.ones(256))  # as tp_decode.py's timing ends: torch's sleeping wait
    _end(dist, destroy)


def _thread_names() -> list[str]:
    names = []
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                names.append(f.read().strip())
        except OSError:  # a thread that ended meanwhile
            pass
    return sorted(names)


def _end(dist, destroy: bool) -> None:
    if destroy:
        dist.destroy_process_group()
        _stamp(f"destroyed; threads left: {_thread_names()}")
    _stamp("exit")


def _spawned(local_rank: int, port: int, folder: str, tokens: int, destroy: bool, stage: str) -> None:
    os.environ.update(MX_PROBE_LATE_IMPORT="1", RANK=str(local_rank), LOCAL_RANK=str(local_rank), WORLD_SIZE="2",
                      LOCAL_WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))  # fmt: skip
    rank_main(folder, tokens, destroy, stage)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_cmd(ns) -> list[str]:
    return [str(Path(__file__).resolve()), "--rank", "--folder", str(ns.folder),
            "--tokens", str(ns.tokens), "--stage", ns.stage, *(["--destroy"] if ns.destroy else [])]  # fmt: skip


def _kill(procs) -> None:
    for p in procs:
        if p.poll() is None:
            os.kill(p.pid, signal.SIGKILL)
        p.wait()


def launch(ns, where: Path) -> list:
    """One 2-rank launch in ``where``; the ranks' exit codes (negative: the
    signal), or the launcher's with ``torchrun``; None where one was killed
    past ``--timeout``."""
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1"}
    env["MLIR_MX_PIN_RANKS"] = "0" if ns.no_pin else "1"
    env["MLIR_MX_TP_IDLE_IO"] = ns.idle_io
    env["MX_PROBE_GUARD"] = "0" if ns.no_guard else "1"
    env["MX_PROBE_END_ALLREDUCES"] = str(ns.end_allreduces)
    if ns.launcher == "spawn":
        import torch.multiprocessing as mp

        os.environ.update({k: env[k] for k in ("GLOO_SOCKET_IFNAME", "OMP_NUM_THREADS",
                                                "MLIR_MX_PIN_RANKS", "MLIR_MX_TP_IDLE_IO",
                                                "MX_PROBE_GUARD", "MX_PROBE_END_ALLREDUCES")})  # fmt: skip
        here = os.getcwd()
        os.chdir(where)
        try:
            ctx = mp.start_processes(_spawned, args=(_free_port(), str(ns.folder), ns.tokens,
                                                     ns.destroy, ns.stage), nprocs=2, join=False,
                                     start_method="spawn")  # fmt: skip
        finally:
            os.chdir(here)
        deadline = time.monotonic() + ns.timeout
        for p in ctx.processes:
            p.join(max(0.0, deadline - time.monotonic()))
        codes = [p.exitcode for p in ctx.processes]
        for p in ctx.processes:
            if p.is_alive():
                p.kill()
                p.join()
        return codes
    if ns.launcher == "torchrun":
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               "--nproc-per-node", "2", *_rank_cmd(ns)]  # fmt: skip
        procs = [subprocess.Popen(cmd, cwd=where, env=env, stdout=open(where / "torchrun.log", "w"),
                                  stderr=subprocess.STDOUT, start_new_session=True)]  # fmt: skip
    else:
        port = _free_port()
        procs = []
        for r in range(2):
            e = {**env, "RANK": str(r), "LOCAL_RANK": str(r), "WORLD_SIZE": "2",
                 "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}  # fmt: skip
            procs.append(subprocess.Popen([sys.executable, *_rank_cmd(ns)], cwd=where, env=e))
    deadline = time.monotonic() + ns.timeout
    codes = []
    for p in procs:
        try:
            codes.append(p.wait(max(0.1, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            codes.append(None)
    if ns.launcher == "torchrun" and None in codes:  # the agent and its ranks: one group
        os.killpg(procs[0].pid, signal.SIGKILL)
    _kill(procs)
    return codes


def _spinners(n: int) -> list:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rank", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--launches", type=int, default=20)
    ap.add_argument("--launcher", choices=("spawn", "torchrun", "direct"), default="direct")
    ap.add_argument("--spin", type=int, default=0, help="busy loops beside the ranks")
    ap.add_argument("--no-pin", action="store_true", help="MLIR_MX_PIN_RANKS=0")
    ap.add_argument("--idle-io", default="1", help="MLIR_MX_TP_IDLE_IO (1)")
    ap.add_argument("--no-guard", action="store_true",
                    help="exit_guard not registered (the exit as before session 55)")
    ap.add_argument("--end-allreduces", type=int, default=0,
                    help="full stage: this many all-reduces after the decode (torch's wait)")
    ap.add_argument("--destroy", action="store_true", help="destroy_process_group before exit")
    ap.add_argument("--tokens", type=int, default=4)
    ap.add_argument("--stage", choices=("full", "pg"), default="full",
                    help="pg: the process group alone (a barrier, --tokens all-reduces)")
    ap.add_argument("--keep", action="store_true", help="keep the folders of good launches too")
    ap.add_argument("--timeout", type=float, default=180.0, help="seconds a launch may take")
    ap.add_argument("--folder", type=Path, default=Path("/tmp/mx-abort-model"))
    ap.add_argument("--out", type=Path, default=Path("/tmp/mx-abort"))
    ns = ap.parse_args()
    if ns.rank:
        rank_main(str(ns.folder), ns.tokens, ns.destroy, ns.stage)
        return
    if not (ns.folder / "config.json").exists():
        build(ns.folder)
    ns.out.mkdir(parents=True, exist_ok=True)
    spin = _spinners(ns.spin)
    tag = (f"{ns.launcher} spin={ns.spin} pin={0 if ns.no_pin else 1} idle_io={ns.idle_io} "
           f"destroy={int(ns.destroy)} tokens={ns.tokens} stage={ns.stage} "
           f"guard={0 if ns.no_guard else 1} end_allreduces={ns.end_allreduces}")  # fmt: skip
    bad = 0
    try:
        for i in range(ns.launches):
            where = ns.out / f"{time.strftime('%H%M%S')}-{os.getpid()}-{i}"
            where.mkdir()
            t0 = time.monotonic()
            codes = launch(ns, where)
            ok = all(c == 0 for c in codes)
            bad += not ok
            if ok and not ns.keep:
                shutil.rmtree(where)
            print(f"{tag} launch {i + 1}: {'ok' if ok else 'FAILED'} {codes} "
                  f"{time.monotonic() - t0:.1f} s{'' if ok else ' ' + str(where)}", flush=True)  # fmt: skip
    finally:
        _kill(spin)
    print(f"{tag}: {ns.launches} launches, {bad} failed", flush=True)


if __name__ == "__main__":
    main()

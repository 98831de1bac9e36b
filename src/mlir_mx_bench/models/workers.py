"""The row processes of ``mx-bench --model`` (the Llama's and gpt-oss's): one
launcher, one worker entry point, and the record of the environment a row ran in;
what every row does alike (its prompt, the prefill's timing, the greedy decode,
a reference's logits and bound); the start of a run's record (:func:`run_record`).

Each row runs in a process of its own (``python -m <worker module> SPEC.json``),
so that its RSS is its own.  The process inherits this environment as it is:
no variable is set for it unless the caller passes ``env`` (``mx-bench --model
--env-row VAR=VALUE``: a separate, labelled row).  The worker records what it
ran in (:func:`run_environment`) in its result.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

__all__ = [
    "ENV_PREFIXES",
    "greedy_decode",
    "host_gflops",
    "host_column",
    "parse_env_setting",
    "prefill_seconds",
    "prompt_ids",
    "run_environment",
    "run_record",
    "run_worker",
    "worker_main",
    "write_logit_bound",
]

#: The environment variables that change how the threads of torch, OpenMP and
#: MKL behave (recorded in every row's result), and PYTHONDONTWRITEBYTECODE:
#: set (as on the developers' machines), every process compiles the modules
#: it imports from source, 3.5 s of transformers' and torch's in a gpt-oss
#: load (``from_pretrained`` imports the model's module), where a user's
#: Python reads the cached bytecode.
ENV_PREFIXES = ("OMP_", "GOMP_", "KMP_", "MKL_", "PYTHONDONTWRITEBYTECODE",
                "MLIR_MX_TEAM", "MLIR_MX_DECODE_POLICY", "MLIR_MX_LOAD_")  # fmt: skip


def run_record(tool: str, opts, **more) -> dict:
    """The start of a model run's record: ``tool``, the date, ``opts``' tag,
    command and options (``as_dict``), the machine, the load average, ``more``
    and the thread-related variables of this environment (:data:`ENV_PREFIXES`)."""
    from mlir_mx_bench.machine import loadavg, machine_info  # not in the row processes

    return {
        "tool": tool,
        "date": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "tag": opts.tag,
        "command": opts.command,
        "options": opts.as_dict(),
        "machine": machine_info(),
        "loadavg_start": loadavg(),
        **more,
        "env": {k: v for k, v in os.environ.items() if k.startswith(ENV_PREFIXES)},
    }


def run_worker(module: str, spec: dict, tmp: Path, env: dict[str, str] | None = None) -> dict:
    """Run ``python -m module SPEC.json`` for one row and return its record
    (``<tmp>/<name>.json``, plus ``wall_s``), or ``{"spec", "error"}`` with the
    last lines of its output when it fails.  ``env``: variables set for this
    process only, over this one's environment (None: the environment as is)."""
    path = tmp / f"{spec['name']}-spec.json"
    path.write_text(json.dumps(spec))
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", module, str(path)],
        capture_output=True,
        text=True,
        env={**os.environ, **env} if env else None,
    )
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-8:])
        return {"spec": spec, "error": f"exit {proc.returncode}: {tail}"}
    rec = json.loads((tmp / f"{spec['name']}.json").read_text())
    rec["wall_s"] = time.perf_counter() - t0
    return rec


def worker_main(run_row: Callable[[dict], dict], argv: list[str]) -> int:
    """A row process's ``main``: read the spec, run the row, add the
    environment it ran in, write ``<out>/<name>.json``."""
    spec = json.loads(Path(argv[0]).read_text())
    warnings.filterwarnings("ignore")  # in the process, not through PYTHONWARNINGS
    rec = run_row(spec)
    rec["environment"] = run_environment()
    (Path(spec["out"]) / f"{spec['name']}.json").write_text(json.dumps(rec, indent=1))
    return 0


def greedy_decode(model, ids, new_tokens: int) -> tuple[list[int], list[float]]:
    """Greedy tokens after the prompt ``ids`` (a ``transformers`` causal LM with
    its KV cache) and the wall seconds of each decode step after the prefill."""
    import torch

    tokens, steps = [], []
    with torch.inference_mode():
        out = model(ids, use_cache=True, logits_to_keep=1)
        while True:
            nxt = out.logits[:, -1].argmax(-1, keepdim=True)
            tokens.append(int(nxt))
            if len(tokens) == new_tokens:
                return tokens, steps
            t0 = time.perf_counter()
            out = model(nxt, cache=out.cache, use_cache=True, logits_to_keep=1)
            steps.append(time.perf_counter() - t0)


def host_gflops(threads: int) -> Callable[[], float]:
    """mx-bench's host probe (:class:`~mlir_mx.roofline.measure.FmaProbe`, about
    5 ms of FMAs on ``threads`` tasks) for a row process: a function giving
    the GFLOP/s the cores deliver now. A row runs it before and after its
    timings (``host_gflops``: [before, after]); the report divides the lower
    by the best of the run at that thread count (the 'host' column). Each
    probe waits 0.3 s first: right after a parallel call the process's own
    OpenMP workers still spin (``docs/bench.md``, the host probe)."""
    from mlir_mx.roofline.measure import FmaProbe

    probe = FmaProbe(threads)

    def gflops() -> float:
        time.sleep(0.3)
        return probe.rate() / 1e9

    return gflops


def host_column(row: dict, rows: list[dict]) -> str:
    """A model row's 'host' column: the lower of its two probes
    (:func:`host_gflops`) over the best probe of ``rows`` at its thread count
    (each row is a fresh process, so the best is the quietest moment of the
    run); '-' for a row without probes (a reference, or an older record)."""
    got = row.get("host_gflops")
    if not got:
        return "-"
    t = row["spec"]["threads"]
    best = max(max(x["host_gflops"]) for x in rows
               if x.get("host_gflops") and x["spec"]["threads"] == t)  # fmt: skip
    return f"{min(got) / best:.0%}"


def prompt_ids(model, spec: dict):
    """The row's prompt: ``spec["prompt"]`` random token ids (``(1, prompt)``) of
    the model's vocabulary, drawn from seed ``spec["seed"] + 1``: the same in
    every row of a run."""
    import torch

    return torch.randint(
        0,
        model.config.vocab_size,
        (1, spec["prompt"]),
        generator=torch.Generator().manual_seed(spec["seed"] + 1),
    )


def prefill_seconds(model, ids, samples: int) -> list[float]:
    """The wall seconds of ``samples`` prefills of ``ids`` (the last position's
    logits only, as :func:`greedy_decode`'s first call)."""
    import torch

    times = []
    with torch.inference_mode():
        for _ in range(samples):
            t0 = time.perf_counter()
            model(ids, use_cache=True, logits_to_keep=1)
            times.append(time.perf_counter() - t0)
    return times


def write_logit_bound(model, ids, spec: dict) -> None:
    """A reference row's files, what the run checks the other rows against:
    ``<out>/<name>-logits.npy`` and ``<name>-bound.npy``, the prefill's logits
    of ``ids`` (every position) and their bound (:func:`mlir_mx.torch.logit_bound`,
    ``spec["probes"]`` probes)."""
    import numpy as np

    from mlir_mx.torch import logit_bound

    out_dir, name = Path(spec["out"]), spec["name"]
    lb = logit_bound(model, ids, probes=spec["probes"])
    np.save(out_dir / f"{name}-logits.npy", lb.logits[0].numpy())
    np.save(out_dir / f"{name}-bound.npy", lb.bound[0].numpy())


def run_environment() -> dict:
    """What this process runs in: the thread-related variables set
    (:data:`ENV_PREFIXES`; empty: the default environment), the CPUs it may
    use, and torch's thread counts and parallel backend where torch is loaded."""
    env: dict = {
        "variables": {k: v for k, v in sorted(os.environ.items()) if k.startswith(ENV_PREFIXES)},
        "cpus": os.cpu_count(),
    }
    if hasattr(os, "sched_getaffinity"):
        env["cpus_allowed"] = len(os.sched_getaffinity(0))
    torch = sys.modules.get("torch")
    if torch is not None:
        env["torch_threads"] = torch.get_num_threads()
        env["torch_interop_threads"] = torch.get_num_interop_threads()
        info = torch.__config__.parallel_info().splitlines()
        env["torch_parallel"] = [line.strip() for line in info if line.strip()]
    return env


def parse_env_setting(text: str) -> dict[str, str]:
    """``VAR=VALUE`` -> ``{VAR: VALUE}``; ValueError naming the text otherwise."""
    name, sep, value = text.partition("=")
    if not sep or not name or not name.replace("_", "").isalnum() or name[0].isdigit():
        raise ValueError(f"expected VAR=VALUE (e.g. OMP_WAIT_POLICY=PASSIVE), got '{text}'")
    return {name: value}


if __name__ == "__main__":  # a row that only records the environment it ran in (tests)
    sys.exit(worker_main(lambda spec: {"spec": spec}, sys.argv[1:]))

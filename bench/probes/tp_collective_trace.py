"""Where one decode collective's time goes: per-collective stamps on both ranks,
and (as root) the scheduler's own record of every thread hand-off.

2 ranks x 1 thread (gloo, loopback) load ``tp_decode.py``'s random Llama
(``--layers``, its checkpoint under ``/tmp/mx-tp-probe``) and decode
``--tokens`` greedy tokens.  Every decode collective
(``decode_collectives._polled``) is stamped: entry, the call's return
(``async_op``), completion seen by the poll, exit; and its number of
``sched_yield`` looks.  Printed per collective of a token (0: the
embedding's, 2l+1 / 2l+2: layer l's ``o_proj`` / ``down_proj``, the last:
the head's gather): the ranks' arrival skew, the time both were inside
(median / mean / max over the tokens), and per thread (the rank's own, gloo's
I/O ``gloo_tcp_loop`` and workers ``pt_gloo_runloop``) its run-queue wait
and switches a token (``/proc/self/task/*/schedstat``).

With ``--ftrace`` (root, ``/sys/kernel/tracing``) a trace instance records
``sched_switch`` / ``sched_wakeup`` with a ``trace_marker`` line at each
collective's entry and completion; printed from it: the time from a rank's
entry to gloo's worker being woken (the call's own cost), how long each
woken gloo thread waited for its CPU and after whom, and gloo's I/O thread's
runs of over 500 us (``docs/distributed.md``, "Where the time goes (session
54)": it spins on its pair's lock).

``--flags pin,pin+wrapper,...`` runs one configuration per entry,
``--rounds`` times each, interleaved: ``pin`` every thread of rank r on its
CPU share (``affinity.pin_rank``); ``wrapper`` the exchange through
``dist.all_to_all_single`` instead of ``ProcessGroup.alltoall_base``;
``batch`` gloo's threads ``SCHED_BATCH``; ``ioswap`` / ``iofree`` gloo's I/O
thread on the other rank's CPU / on both; ``tick`` / ``tickN`` a
thread waking every N us (default 100) while a collective is in flight
(``tp_ticker.py``), ``fifo`` it ``SCHED_FIFO`` (root); ``noidle`` gloo's I/O
thread left ``SCHED_OTHER`` (a pinned rank makes it ``SCHED_IDLE``:
``affinity.idle_gloo_io``); ``ioidle`` it ``SCHED_IDLE`` at start-up; ``sleep`` the collectives waited for as torch
waits (not polled).

    python bench/probes/tp_collective_trace.py [--layers 8] [--tokens 16]
        [--flags pin,pin+wrapper] [--rounds 1] [--ftrace]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import time
from collections import defaultdict
from pathlib import Path

import torch

from mlir_mx_testing.distributed import run_ranks

TRACE = Path("/sys/kernel/tracing/instances/mx-tp-trace")
GLOO = ("gloo_tcp_loop", "pt_gloo_runloop")


def _threads() -> dict[int, str]:
    out = {}
    for t in os.listdir("/proc/self/task"):
        try:
            out[int(t)] = Path(f"/proc/self/task/{t}/comm").read_text().strip()
        except OSError:
            pass
    return out


def _schedstat() -> dict[int, tuple]:
    out = {}
    for tid, name in _threads().items():
        try:
            run, wait, n = map(int, Path(f"/proc/self/task/{tid}/schedstat").read_text().split())
        except OSError:
            continue
        out[tid] = (name, run, wait, n)
    return out


def _apply(flags: set, rank: int) -> None:
    me = __import__("threading").get_native_id()
    for tid, name in _threads().items():
        if tid == me or name not in GLOO:
            continue
        if "batch" in flags:
            os.sched_setscheduler(tid, os.SCHED_BATCH, os.sched_param(0))
        if name == "gloo_tcp_loop" and "ioidle" in flags:
            os.sched_setscheduler(tid, os.SCHED_IDLE, os.sched_param(0))
        if name == "gloo_tcp_loop" and flags & {"ioswap", "iofree"}:
            os.sched_setaffinity(tid, {1 - rank} if "ioswap" in flags else {0, 1})


def measure(rank, world, folder, tokens, flags):
    import torch.distributed as dist
    import tp_ticker as ticker  # bench/probes/tp_ticker.py
    from torch.distributed.device_mesh import init_device_mesh

    from mlir_mx.torch import from_pretrained, precompile
    from mlir_mx.torch.distributed import affinity
    from mlir_mx.torch.distributed import decode_collectives as dc
    from mlir_mx.torch.distributed.affinity import pin_rank

    flags = set(flags.split("+"))
    if "noidle" in flags:  # gloo's I/O thread left SCHED_OTHER
        affinity.IDLE_GLOO_IO = False
    if "pin" in flags:
        pin_rank(rank, world)
    mesh = init_device_mesh("cpu", (world,))
    _apply(flags, rank)
    for f in flags:  # tick / tickN: a ticker (period N us) on this rank's CPU
        if f.startswith("tick"):
            ticker.start(int(f[4:] or 100))
    if "fifo" in flags and ticker.thread_id():  # the ticker SCHED_FIFO (root): its wake-ups preempt
        os.sched_setscheduler(ticker.thread_id(), os.SCHED_FIFO, os.sched_param(1))
    if "sleep" in flags:  # never polled: waited for as torch waits
        dc.POLL_S = 0.0
    model = from_pretrained(folder, device_mesh=mesh, tp_plan="auto")
    precompile(model)
    marker = (
        (TRACE / "trace_marker").open("w", buffering=1)
        if (TRACE / "trace_marker").exists()
        else None
    )
    recs, backoffs = [], []

    def traced(collective, *args, group):
        if marker:
            marker.write(f"r{rank} c{len(recs)} enter\n")
        t0 = time.perf_counter()
        idle = affinity.idle_gloo_io(t0)  # as decode_collectives._polled does
        ticker.on()
        if "wrapper" in flags and collective is dc._all_to_all:
            work = dist.all_to_all_single(args[0], args[1], group=group, async_op=True)
        else:
            work = collective(*args, group=group, async_op=True)
        t1, looks, end = time.perf_counter(), 0, t0 + dc.POLL_S
        while not work.is_completed() and (now := time.perf_counter()) < end:
            if idle and now > t0 + dc.IDLE_LATE_S:
                affinity.normal_gloo_io(now)
                idle = False
                backoffs.append(len(recs))
            os.sched_yield()
            looks += 1
        if idle and not work.is_completed():
            affinity.normal_gloo_io(time.perf_counter())
            backoffs.append(len(recs))
        t2 = time.perf_counter()
        if marker:
            marker.write(f"r{rank} c{len(recs)} done\n")
        work.wait()
        ticker.off()
        recs.append(
            (t0, t1, t2, time.perf_counter(), looks, args[0].numel() * args[0].element_size())
        )

    ids = torch.randint(0, 32000, (1, 16), generator=torch.Generator().manual_seed(1))
    steps, toks, before = [], [], {}
    with torch.inference_mode():
        out = model(ids, use_cache=True)
        for i in range(tokens + 2):
            nxt = out.logits[:, -1].argmax(-1, keepdim=True)
            toks.append(int(nxt))
            dist.barrier()
            if i == 2:
                dc._polled = traced
                before = _schedstat()
            recs.clear()
            t0 = time.perf_counter()
            out = model(nxt, cache=out.cache, use_cache=True)
            if i >= 2:
                steps.append((t0, time.perf_counter(), list(recs)))
    after = _schedstat()
    sched = {
        t: (v[0], v[2] - before[t][2], v[3] - before[t][3]) for t, v in after.items() if t in before
    }
    return dict(steps=steps, toks=toks, sched=sched, ticks=ticker.ticks(), backoffs=len(backoffs))


def _f(xs) -> str:
    return f"{statistics.median(xs):6.0f} /{statistics.mean(xs):6.0f} /{max(xs):7.0f}"


def report(name: str, res: list) -> None:
    n = len(res[0]["steps"])
    cols = len(res[0]["steps"][0][2])
    step = statistics.median(1e3 * (s[1] - s[0]) for s in res[0]["steps"])
    print(f"{name}: {n} tokens, {cols} collectives a token, step median {step:.2f} ms; "
          f"ticker ticks {res[0]['ticks']}, {res[1]['ticks']}; idle I/O backed off "
          f"{res[0]['backoffs']}, {res[1]['backoffs']} times; tokens equal on both ranks: {res[0]['toks'] == res[1]['toks']}")  # fmt: skip
    print("  #   bytes  skew r0-r1 us  inside us r0 med/mean/max      r1 med/mean/max   looks")
    every = []
    for j in range(cols):
        at = [(res[0]["steps"][i][2][j], res[1]["steps"][i][2][j]) for i in range(n)]
        skew = [1e6 * (a[0] - b[0]) for a, b in at]
        inside = [[1e6 * (c[r][3] - max(c[0][0], c[1][0])) for c in at] for r in (0, 1)]
        every += inside[0] + inside[1]
        print(f"  {j:2d} {at[0][0][5]:7d} {statistics.median(skew):12.0f}  {_f(inside[0])}  "
              f"{_f(inside[1])}  {statistics.median(c[0][4] for c in at):5.0f}")  # fmt: skip
    every.sort()
    q = lambda p: every[min(len(every) - 1, int(p * len(every)))]  # noqa: E731
    print(f"  all: inside p10 {q(0.1):.0f} p50 {q(0.5):.0f} p90 {q(0.9):.0f} p99 {q(0.99):.0f} "
          f"mean {statistics.mean(every):.0f} us; {sum(every) / 2 / n / 1e3:.2f} ms a token")  # fmt: skip
    for r in (0, 1):
        for _t, (comm, wait, k) in sorted(res[r]["sched"].items(), key=lambda kv: -kv[1][1]):
            if k:
                print(f"  rank {r} {comm:16s} run-queue wait {wait / 1e6 / n:6.2f} ms, "
                      f"{k / n:5.1f} switches a token")  # fmt: skip


_LINE = re.compile(r"^\s*(.+?)-(\d+)\s+\[(\d+)\]\s+\S+\s+([\d.]+): (\S+): (.*)$")
_SWITCH = re.compile(r"prev_comm=(.+?) prev_pid=(\d+) prev_prio=\d+ prev_state=(\S+) ==> "
                     r"next_comm=(.+?) next_pid=(\d+)")  # fmt: skip


def ftrace_report(text: str) -> None:
    """From a ``sched_switch`` / ``sched_wakeup`` trace with the probe's
    markers: entry to worker woken, woken gloo threads' waits, long I/O runs."""
    ev = [(c, int(p), int(cpu), float(t), k, r) for c, p, cpu, t, k, r in
          (m.groups() for m in map(_LINE.match, text.splitlines()) if m)]  # fmt: skip
    marks = [i for i, e in enumerate(ev) if e[4] == "tracing_mark_write"]
    if not marks:
        print("  ftrace: no markers")
        return
    ev = ev[marks[0] : marks[-1] + 1]
    issue, waits, runs, pending, cur, inside = defaultdict(list), defaultdict(list), [], {}, {}, {}
    for i, (_comm, pid, cpu, t, kind, rest) in enumerate(ev):
        if kind == "tracing_mark_write":
            inside[pid] = "enter" in rest
            if "enter" in rest:
                woke = next((f for f in ev[i + 1 : i + 200] if f[1] == pid and f[4] == "sched_waking"
                             and "pt_gloo_runloop" in f[5]), None)  # fmt: skip
                if woke:
                    issue[rest[:2]].append(1e6 * (woke[3] - t))
        elif kind == "sched_wakeup":
            m = re.search(r"comm=(\S+) pid=(\d+)", rest)
            pending[int(m.group(2))] = (t, m.group(1))
        elif kind == "sched_switch":
            m = _SWITCH.match(rest)
            if cpu in cur and cur[cpu][0] == "gloo_tcp_loop" and t - cur[cpu][1] > 500e-6:
                runs.append((1e6 * (t - cur[cpu][1]), cur[cpu][2]))
            cur[cpu] = (m.group(4), t, (m.group(1), m.group(3)))
            if int(m.group(5)) in pending:
                t0, name = pending.pop(int(m.group(5)))
                prev = m.group(1)
                if prev == "python":
                    prev += " polling" if inside.get(int(m.group(2))) else " computing"
                if name in GLOO:
                    waits[(name, prev)].append(1e6 * (t - t0))
    for r, xs in sorted(issue.items()):
        xs.sort()
        print(f"  {r}: entry to gloo's worker woken p50 {xs[len(xs) // 2]:.0f} us, "
              f"p90 {xs[9 * len(xs) // 10]:.0f}")  # fmt: skip
    for (name, prev), xs in sorted(waits.items(), key=lambda kv: -len(kv[1]))[:6]:
        xs.sort()
        print(f"  {name} woken while {prev} ran: {len(xs)}, waited p50 {xs[len(xs) // 2]:.0f} us, "
              f"p90 {xs[9 * len(xs) // 10]:.0f}, max {xs[-1]:.0f}")  # fmt: skip
    after = defaultdict(int)
    for _us, prev in runs:
        after[prev] += 1
    print(f"  gloo_tcp_loop runs over 500 us: {len(runs)} ({sum(u for u, _ in runs) / 1e3:.1f} ms), "
          f"after {dict(after)}")  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--tokens", type=int, default=16)
    p.add_argument("--flags", default="pin")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--ftrace", action="store_true")
    p.add_argument("--keep", help="with --ftrace: a folder to write each run's raw trace to")
    a = p.parse_args()
    folder = f"/tmp/mx-tp-probe/llama-{a.layers}"
    if not Path(folder, "config.json").exists():
        raise SystemExit(f"{folder}: run bench/probes/tp_decode.py --layers {a.layers} first")
    if a.ftrace:
        TRACE.mkdir(exist_ok=True)
        for f, v in (("trace_clock", "mono"), ("buffer_size_kb", "16384")):
            (TRACE / f).write_text(v)
        for e in ("sched_switch", "sched_wakeup", "sched_waking"):
            (TRACE / f"events/sched/{e}/enable").write_text("1")
    try:
        for _ in range(a.rounds):
            for flags in a.flags.split(","):
                if a.ftrace:
                    (TRACE / "trace").write_text("")
                    (TRACE / "tracing_on").write_text("1")
                res = run_ranks(measure, 2, (folder, a.tokens, flags), timeout=600, threads=1)
                if a.ftrace:
                    (TRACE / "tracing_on").write_text("0")
                report(flags, res)
                if a.ftrace:
                    text = (TRACE / "trace").read_text()
                    ftrace_report(text)
                    if a.keep:  # the raw trace, for one's own reading
                        Path(a.keep, f"{flags}-{time.time():.0f}.trace").write_text(text)
    finally:
        if a.ftrace:
            (TRACE / "tracing_on").write_text("0")
            TRACE.rmdir()


if __name__ == "__main__":
    main()

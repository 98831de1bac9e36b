"""Where a decode collective's time goes: gloo on loopback, 2 ranks, decode-sized rows.

Each rank runs ``--reps`` rounds of [a gap, one exchange of an ``n``-float f32
row with the other rank] for every combination of:

* **primitive**: ``all_reduce`` (gloo's ring: 2 message rounds for 2 ranks),
  ``all_to_all_single`` (one round; what ``decode_collectives`` used through
  session 52), ``p2p`` (``dist.irecv`` + ``dist.isend`` posted at the call:
  no gloo worker thread, the calling thread writes the socket) and
  ``p2p-early`` (the ``irecv`` posted before the gap, so the peer's ``isend``
  finds it and writes at once: tried for ``decode_collectives`` in session
  53 and dropped, its rounds' tails are long: ``docs/distributed.md``);
* **wait**: ``block`` (the call's own wait: the caller sleeps until gloo wakes
  it) or ``poll`` (collectives: ``async_op=True`` and ``is_completed()`` with
  ``sched_yield`` between looks; ``p2p-early``: a spin on the receive
  buffer's last word, a sequence number the peer sends with the row, then
  ``wait()``; gloo's ``RecvWork`` cannot be polled: its ``is_completed`` is
  torch's base ``Work``'s, false until ``wait()``);
* **gap**: ``none`` (back to back) or ``busy`` (``--gap-us`` of Python spin,
  or with ``--gap-kind stream`` of 1 MiB copies through 32 MiB: the decode
  step's compute between two collectives; the ranks take turns to
  be ``--skew-us`` later, as the ranks' compute differs);
* **pin**: every thread of rank ``r`` (its own, gloo's I/O and worker threads)
  on CPU ``r`` (``os.sched_setaffinity`` per task) or free.

torch's intra-op threads are 1 per rank.  Printed per row: the median over
the rounds of the time **both ranks were inside** the exchange (from the later
rank's entry to this rank's exit: the exchange's own cost), rank 0 / rank 1,
and the mean time a round took past its gap (cost plus waiting, as a decode
step sees it), and rank 0's round times at p50/p90/p99/max (gap included).
``--rounds R`` runs every row R times, interleaved, and prints medians.  ``perf_counter`` is one clock for both processes.

    python bench/probes/gloo_latency.py [--sizes 2048,8192] [--reps 300]
        [--gap-us 1000] [--skew-us 150] [--prims all_reduce,...] [--waits block,poll]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from mlir_mx_testing.distributed import run_ranks

PRIMS = ("all_reduce", "all_to_all_single", "p2p", "p2p-early")


def _pin(cpu: int | None) -> None:
    """Every thread of this process on ``cpu`` (None: on every CPU)."""
    cpus = {cpu} if cpu is not None else set(range(os.cpu_count()))
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), cpus)
        except OSError:  # a thread that ended meanwhile
            pass


_STREAM: list = []


def _spin(seconds: float, kind: str = "spin") -> None:
    """Busy for ``seconds``: a Python spin, or (``stream``) copies of 1 MiB
    chunks through 32 MiB, as the MX layers stream their weights (the
    caches hold none of gloo's state after it)."""
    end = time.perf_counter() + seconds
    if kind == "stream":
        if not _STREAM:
            _STREAM.extend([torch.ones(32, 1 << 18), torch.empty(1 << 18), [0]])
        big, out, at = _STREAM
        while time.perf_counter() < end:
            out.copy_(big[at[0] % 32])
            at[0] += 1
        return
    while time.perf_counter() < end:
        pass


class _Exchange:
    """One primitive's exchange of a row with the other rank (2 ranks)."""

    def __init__(self, prim: str, wait: str, n: int, rank: int):
        self.prim, self.wait, self.n, self.peer, self.seq = prim, wait, n, 1 - rank, 0
        self.recv = torch.empty(n + 1)  # + the sequence number word (p2p-early, poll)
        self.work = None

    def post(self) -> None:
        """``p2p-early``: the next round's receive, posted before the gap."""
        import torch.distributed as dist

        if self.prim == "p2p-early":
            self.recv[-1] = -1.0
            self.work = dist.irecv(self.recv, src=self.peer, tag=7)

    def __call__(self, row: torch.Tensor) -> torch.Tensor:
        import torch.distributed as dist

        poll = self.wait == "poll"
        if self.prim == "all_reduce":
            w = dist.all_reduce(row, async_op=poll)
            _poll(w) if poll else None
            return row
        if self.prim == "all_to_all_single":
            send, parts = row.expand(2, self.n).contiguous(), torch.empty(2, self.n)
            w = dist.all_to_all_single(parts, send, async_op=poll)
            _poll(w) if poll else None
            return parts[0] + parts[1]
        self.seq += 1
        send = torch.cat([row, torch.tensor([float(self.seq)])])
        if self.prim == "p2p":
            r = dist.irecv(self.recv, src=self.peer, tag=7)
        else:
            r, self.work = self.work, None
        s = dist.isend(send, dst=self.peer, tag=7)
        if poll and self.prim == "p2p-early":
            while self.recv[-1].item() != self.seq:
                os.sched_yield()
        r.wait()
        s.wait()
        return self.recv[: self.n] + row


def _poll(work) -> None:
    while not work.is_completed():
        os.sched_yield()
    work.wait()


def _rows(rank: int, a) -> list[dict]:
    import torch.distributed as dist

    out = []
    for pin in [p == "yes" for p in a.pins] * a.rounds:
        _pin(rank if pin else None)
        for n in a.sizes:
            for prim in a.prims:
                for wait in a.waits:
                    if prim == "p2p" and wait == "poll":
                        continue  # nothing to poll: gloo's RecvWork is not pollable
                    for gap in a.gaps:
                        ex, row = _Exchange(prim, wait, n, rank), torch.ones(n)
                        stamps = []
                        dist.barrier()
                        for i in range(a.reps + 10):
                            ex.post()
                            if gap == "busy":
                                late = (i % 2) == rank
                                _spin(1e-6 * (a.gap_us + (a.skew_us if late else 0)), a.gap_kind)
                            t0 = time.perf_counter()
                            ex(row.clone())
                            stamps.append((t0, time.perf_counter()))
                        out.append(dict(pin=pin, n=n, prim=prim, wait=wait, gap=gap,
                                        stamps=stamps[10:]))  # fmt: skip
    _pin(None)
    return out


def measure(rank: int, world: int, a) -> list[dict]:
    return _rows(rank, a)


def report(res: list[list[dict]], a) -> None:
    """Each row's medians over its ``--rounds`` runs (interleaved)."""
    print(f"{'pin':>4} {'n':>5} {'primitive':>18} {'wait':>5} {'gap':>4}  "
          f"both inside us, median (r0 / r1)   round past the gap us, mean (r0 / r1)")  # fmt: skip
    table: dict = {}
    for rows in zip(*res, strict=True):
        r0 = rows[0]
        key = (r0["pin"], r0["n"], r0["prim"], r0["wait"], r0["gap"])
        inside, past = [], []
        for me in rows:
            enter = [max(o["stamps"][i][0] for o in rows) for i in range(len(me["stamps"]))]
            ins = [t1 - e for (_, t1), e in zip(me["stamps"], enter, strict=True)]
            inside.append(1e6 * statistics.median(ins))
            gap = 0.0 if r0["gap"] == "none" else 1e-6 * (a.gap_us + a.skew_us / 2)
            span = me["stamps"][-1][1] - me["stamps"][0][1]
            past.append(1e6 * (span / (len(me["stamps"]) - 1) - gap))
        ends = [t1 for _, t1 in r0["stamps"]]
        steps = sorted(b - e for e, b in zip(ends, ends[1:], strict=False))
        tails = [1e6 * steps[int(q * (len(steps) - 1))] for q in (0.5, 0.9, 0.99, 1.0)]
        table.setdefault(key, []).append(inside + past + tails)
    for (pin, n, prim, wait, gap), runs in table.items():
        m = [statistics.median(r[i] for r in runs) for i in range(8)]
        print(f"{'yes' if pin else 'no':>4} {n:>5} {prim:>18} {wait:>5} {gap:>4}  "
              f"{m[0]:8.0f} / {m[1]:<8.0f}                {m[2]:8.0f} / {m[3]:<8.0f}   "
              f"r0's rounds p50/p90/p99/max {m[4]:.0f}/{m[5]:.0f}/{m[6]:.0f}/{m[7]:.0f}")  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="2048,8192")
    p.add_argument("--reps", type=int, default=300)
    p.add_argument("--gap-us", type=float, default=1000.0)
    p.add_argument("--skew-us", type=float, default=150.0)
    p.add_argument("--prims", default=",".join(PRIMS))
    p.add_argument("--waits", default="block,poll")
    p.add_argument("--gaps", default="none,busy")
    p.add_argument("--gap-kind", default="spin", help="spin (Python) or stream (1 MiB copies)")
    p.add_argument("--pins", default="no,yes")
    p.add_argument("--rounds", type=int, default=1, help="every row this many times, interleaved")
    a = p.parse_args()
    a.sizes = [int(x) for x in a.sizes.split(",")]
    a.prims = a.prims.split(",")
    a.waits = a.waits.split(",")
    a.gaps, a.pins = a.gaps.split(","), a.pins.split(",")
    print(f"gloo over loopback, 2 ranks x 1 intra-op thread, {os.cpu_count()} CPUs, load average "
          f"{os.getloadavg()[0]:.1f}; {a.reps} rounds a row; busy gap {a.gap_us:g} us, the later "
          f"rank {a.skew_us:g} us later, in turn")  # fmt: skip
    res = run_ranks(measure, 2, (a,), timeout=900, threads=1)
    report(res, a)
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()

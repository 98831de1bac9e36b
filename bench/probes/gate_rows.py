"""``Gate.rows`` (reliability round 4, 07: every element in torch's vector body,
rows in chunks) against ``Gate.__call__`` (all rows at once) on gpt-oss-20b's
gate input (I = 2880): a decode step's 4 rows and a 128-token prefill's 512
routed rows; one process, the two interleaved, median of 30 each.

    python bench/probes/gate_rows.py
"""

import statistics
import time

import torch

from mlir_mx.torch import Gate


def main() -> None:
    g = Gate()
    for threads in (1, 2):
        torch.set_num_threads(threads)
        for rows in (4, 512):
            x = torch.randn(rows, 2 * 2880) * 4
            t_old, t_new = [], []
            for _ in range(30):
                t0 = time.perf_counter()
                g(x)
                t1 = time.perf_counter()
                g.rows(x)
                t2 = time.perf_counter()
                t_old.append(t1 - t0)
                t_new.append(t2 - t1)
            o, n = statistics.median(t_old) * 1e3, statistics.median(t_new) * 1e3
            print(f"threads {threads} rows {rows:4d}: all at once {o:.3f} ms, "
                  f"Gate.rows {n:.3f} ms ({n / o:.2f}x)")  # fmt: skip


if __name__ == "__main__":
    main()

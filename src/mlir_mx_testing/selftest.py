"""A suite that misbehaves on purpose, to test :mod:`~mlir_mx_testing.campaign`
itself: case 3 and every case ending in 8 kill the worker (SIGABRT), case 7
hangs, the others return ``ok``.  Only the campaign's own tests use it."""

from __future__ import annotations

import os
import time

from mlir_mx_testing.campaign import Outcome


def case(seed: int, index: int) -> Outcome:
    if index == 3 or index % 10 == 8:
        os.abort()
    if index == 7:
        time.sleep(3600)
    return Outcome(index, "ok", "selftest")

"""A stacked-experts block read from a checkpoint a few experts at a time.

``MXExperts(gate_up, down, ...)`` takes every expert's MXArray at once and lays
each out as its ``mlir_mx.Linear``'s stored form, so the bytes read from the
file and the laid-out copies of the whole block are resident together (at a
gpt-oss-20b layer: 423 MiB read beside 423 MiB laid out).
:func:`experts_in_groups` reads ``group`` experts (the threads that lay them
out at once), builds their block, drops the bytes read, then the next group;
the groups' layers are gathered into one block (:meth:`MXExperts.select` over
them: the shapes checked, no byte copied).  With the file map's pages its
reads touched dropped after each group (``after_group``: the reader's
``CheckpointFiles.release``), a load's peak is one group's bytes above the
layers kept (``docs/distributed.md``, "Peak RSS at
load", 2 layers of gpt-oss-20b's widths: a rank's 1132 MiB became about
945).  A shard's load drops every page of the maps after a group
(``release(whole=True)``); the whole-model load drops, after each group,
the whole pages of the bytes copied so far not yet dropped
(:func:`page_release`), each page once: its peak went from 2141 MiB to 1353
(15 above the 1338 it keeps), where it held every page read until the end.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

import torch

from .experts import Gate, MXExperts

__all__ = ["experts_in_groups", "page_release"]


def experts_in_groups(
    read: Callable[[int], tuple], experts: Sequence[int], gate_up_bias, down_bias, *,
    gate: Gate, kw: dict, group: int | None = None, after_group: Callable | None = None,
) -> MXExperts:  # fmt: skip
    """An :class:`MXExperts` of ``experts`` (file indices, in order; row ``j`` of
    the biases is ``experts[j]``'s), ``read(e)`` giving expert ``e``'s
    ``(gate_up, down)`` MXArrays, ``group`` experts at a time (None: torch's
    thread count).  ``kw``: ``threads`` / ``activations``, as ``MXExperts``.
    ``after_group()``: called once a group is laid out (the reader drops the
    file map's pages its reads touched)."""
    step = max(1, torch.get_num_threads() if group is None else group)
    gate_up, down, whole = [], [], None
    for s in range(0, len(experts), step):
        ids = experts[s : s + step]
        pairs = [read(e) for e in ids]
        rows = slice(s, s + len(ids))
        part = MXExperts(
            [p[0] for p in pairs], [p[1] for p in pairs],
            None if gate_up_bias is None else gate_up_bias[rows],
            None if down_bias is None else down_bias[rows], gate=gate, **kw,
        )  # fmt: skip
        del pairs  # the bytes read: freed before the next group's
        if after_group is not None:
            after_group()
        gate_up.extend(part.gate_up)
        down.extend(part.down)
        whole = part if whole is None else whole
    whole.gate_up, whole.down = torch.nn.ModuleList(gate_up), torch.nn.ModuleList(down)
    whole.num_experts = len(gate_up)
    return whole.select(0, len(gate_up))


def page_release(files) -> int:
    """An ``after_group`` for a load that reads every expert
    (``partial(page_release, files)``): drops from the file maps the whole
    pages of the bytes copied so far (``files.spans``,
    :meth:`CheckpointFiles.release`); the bytes released.  An expert's rows
    rarely end on a page boundary: the page they share with the next rows
    (the next expert's, or the next tensor's) stays noted in ``files.spans``
    and is dropped once those are copied too.  So over a load every whole
    page of the blocks / scales tensors is dropped once, a group after it
    was read."""
    page, runs, whole, edges = os.sysconf("SC_PAGE_SIZE"), [], [], []
    for address, nbytes in sorted(files.spans):
        if runs and address <= runs[-1][1]:
            runs[-1][1] = max(runs[-1][1], address + nbytes)
        else:
            runs.append([address, address + nbytes])
    for lo, hi in runs:  # the whole pages inside each run; its edges wait
        a, b = -(-lo // page) * page, hi // page * page
        if b > a:
            whole.append((a, b - a))
        edges.extend((x, y - x) for x, y in (((lo, a), (b, hi)) if b > a else ((lo, hi),)) if y > x)
    files.spans = whole
    released = files.release()
    files.spans = edges
    return released

"""The checkpoint suite: mutated gpt-oss MXFP4 safetensors checkpoints through
``mlir_mx.torch.from_pretrained`` (needs torch, transformers, safetensors).

Once per worker a tiny gpt-oss checkpoint is written (2 layers, hidden 64, 4
experts; :func:`mlir_mx_bench.models.gpt_oss.worker.write_checkpoint`).  Case ``i`` of
seed ``s`` (``random.Random(f"checkpoint:{s}:{i}")``) draws its kind from
``kinds`` (the campaign's option; default: all of :data:`ALL_KINDS`).  One of
:data:`KINDS` mutates its ``model.safetensors``:

* ``length``: the header's 8-byte length (0, off by one, huge);
* ``header-byte``: a random byte of the JSON header;
* ``header-digit``: a digit of the header (a shape, a data offset);
* ``cut``: the file truncated anywhere;
* ``data-byte``: a byte of the tensor data (a code, a scale, a bf16 value).

The rule: ``from_pretrained`` returns a model (``ok``), or raises an
``MXValueError`` whose message names the file or a tensor (``rejected``);
another exception is a finding (``not-mx-error``, or ``traceback`` for one that
is not a ValueError/TypeError), as is a signal or a hang (the campaign's
worker).  A data byte never changes what the headers say: those cases must
load.  The other kinds, :data:`FOLDER_KINDS` (folders whose files disagree,
malformed index and config fields, saves over an older checkpoint, some
under a file-size limit in a child process), are
:mod:`mlir_mx_testing.checkpoint_folder_fuzz`'s.
"""

from __future__ import annotations

import random
import shutil
import tempfile
from functools import cache
from pathlib import Path

from mlir_mx_testing.campaign import Outcome
from mlir_mx_testing.checkpoint_folder_fuzz import FOLDER_KINDS, folder_case, load_outcome

__all__ = ["ALL_KINDS", "FOLDER_KINDS", "KINDS", "TINY", "case"]

KINDS = ("length", "header-byte", "header-digit", "cut", "data-byte")
ALL_KINDS = KINDS + FOLDER_KINDS
#: The tiny gpt-oss of every case (over gpt-oss-20b's shape).
TINY = dict(
    hidden_size=64,
    intermediate_size=64,
    num_local_experts=4,
    num_experts_per_tok=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    vocab_size=256,
    sliding_window=8,
    max_position_embeddings=256,
)


@cache
def _good() -> tuple[Path, bytes]:
    from mlir_mx_bench.models.gpt_oss.worker import write_checkpoint

    folder = Path(tempfile.mkdtemp(prefix="mlir-mx-checkpoint-fuzz-")) / "good"
    write_checkpoint(folder, 2, 0, TINY)
    return folder, (folder / "model.safetensors").read_bytes()


def _mutate(rng: random.Random, data: bytes, kind: str) -> tuple[bytes, str]:
    b = bytearray(data)
    n = int.from_bytes(data[:8], "little")
    if kind == "length":
        v = rng.choice((0, 1, n - 1, n + 1, n + 8, len(data), 2**32, 2**63, 2**64 - 1))
        b[:8] = v.to_bytes(8, "little")
        return bytes(b), f"header length {v}"
    if kind == "header-byte":
        at, v = rng.randrange(8, 8 + n), rng.randrange(256)
        b[at] = v
        return bytes(b), f"header byte {at} = {v}"
    if kind == "header-digit":
        at = rng.choice([i for i in range(8, 8 + n) if chr(b[i]).isdigit()])
        b[at] = ord(rng.choice("0123456789"))
        return bytes(b), f"header digit {at} = {chr(b[at])}"
    if kind == "cut":
        at = rng.randrange(len(data))
        return bytes(b[:at]), f"cut at {at}"
    at = rng.randrange(8 + n, len(data))
    b[at] = rng.randrange(256)
    return bytes(b), f"data byte {at} = {b[at]}"


def case(seed: int, index: int, kinds=None) -> Outcome:
    from mlir_mx.errors import MXValueError
    from mlir_mx.torch import from_pretrained

    pool = ALL_KINDS if kinds is None else tuple(kinds)
    if not pool or not set(pool) <= set(ALL_KINDS):
        raise MXValueError(f"kinds: expected some of {', '.join(ALL_KINDS)}, got {kinds!r}")
    rng = random.Random(f"checkpoint:{seed}:{index}")
    kind = rng.choice(pool)
    good, data = _good()
    if kind in FOLDER_KINDS:
        return folder_case(rng, index, kind, good)
    mutated, what = _mutate(rng, data, kind)
    folder = good.parent / f"case-{index}"
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(good, folder)
    (folder / "model.safetensors").write_bytes(mutated)
    def refused(e) -> Outcome:
        if kind == "data-byte":
            return Outcome(index, "wrong", kind, f"refused a data byte: {e}", what)
        if "model.safetensors" not in str(e) and "model." not in str(e) and "lm_head" not in str(e):
            return Outcome(index, "wrong", kind, f"the error names no file or tensor: {e}", what)
        return Outcome(index, "rejected", kind)

    try:
        _, finding = load_outcome(lambda: from_pretrained(folder), index, kind, what, refused)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    if finding is not None:
        return finding
    return Outcome(index, "ok", kind)

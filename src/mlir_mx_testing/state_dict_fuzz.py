"""The saved-form suite: ``MXLinear`` state_dicts loaded into layers of the same
or another meaning, tampered with, and pickled (needs torch).

Each case, from ``random.Random(f"state-dict:{seed}:{index}")``, builds a
source layer (any of the 6 element formats, a block size, odd shapes, bias or
not, ``activations`` None or ``"i8"``), takes its ``state_dict`` (under a
prefix half the time) and does one of :data:`KINDS`:

* ``same``: load it into a layer of the same format, block size and shape
  (other weights);
* ``other``: into a layer that differs in format, block size or shape, half
  the time one whose code and scale bytes have the same shapes (the case
  that loaded silently and computed NaN before the format was saved);
* ``legacy``: the state_dict without its meaning entries (as saved before
  they existed), into a layer of the same meaning, or of other byte shapes;
* ``tamper``: one meaning entry replaced (another format's name, bytes that
  are no name, a wrong dtype or rank, another block size or shape);
* ``pickle``: ``pickle`` and ``copy.copy`` of the layer.

The rule: a load whose saved meaning matches the layer's succeeds and the
layer then computes the source's outputs bit for bit; one whose meaning
differs raises the ``RuntimeError`` of ``load_state_dict`` naming the key
(``prefix.weight_format`` ...) and leaves the layer's weight as it was; a
pickled layer computes the original's outputs bit for bit.  Anything else is a
``wrong`` finding, any other exception a ``traceback``.  A legacy state_dict
of another meaning with the same byte shapes loads (documented: only the byte
shapes can be checked); those cases are not drawn.
"""

from __future__ import annotations

import copy
import pickle
import random
import traceback

from mlir_mx.numerics.formats import ELEMENT_FORMATS
from mlir_mx_testing.campaign import Outcome

__all__ = ["KINDS", "MEANING", "case"]

KINDS = ("same", "other", "legacy", "tamper", "pickle")
MEANING = ("weight_format", "weight_block_size", "weight_shape")
ELEMENTS = tuple(ELEMENT_FORMATS)
BLOCKS = (32, 32, 16, 64, 8, 24, 48)
OUTS = (1, 2, 3, 7, 8, 16, 33, 64, 65)


def _layer(cfg: dict, seed: int):
    import torch

    from mlir_mx.torch import MXLinear

    torch.manual_seed(seed)
    lin = torch.nn.Linear(cfg["k"], cfg["n"], bias=cfg["bias"])
    return MXLinear.from_linear(
        lin, cfg["element"], cfg["block"], threads=1, activations=cfg["activations"]
    )


def _config(rng: random.Random) -> dict:
    block = rng.choice(BLOCKS)
    return dict(
        element=rng.choice(ELEMENTS),
        block=block,
        k=block * rng.choice((1, 2, 4)),
        n=rng.choice(OUTS),
        bias=rng.random() < 0.5,
        activations="i8" if rng.random() < 0.2 else None,
    )


def _bytes_per_row(cfg: dict) -> tuple[int, int] | None:
    """``(code bytes, scale bytes)`` of one saved row; None where the codes
    would not be stored packed (then no other layout shares them)."""
    codes, nbytes = ELEMENT_FORMATS[cfg["element"]].group
    if cfg["k"] % codes:
        return None
    return cfg["k"] // codes * nbytes, cfg["k"] // cfg["block"]


def _other(rng: random.Random, src: dict) -> dict:
    """A config of another meaning; half the time with the same byte shapes."""
    if rng.random() < 0.5:
        want = _bytes_per_row(src)
        for _ in range(40):
            element = rng.choice(ELEMENTS)
            codes, nbytes = ELEMENT_FORMATS[element].group
            if want is None or want[0] * codes % nbytes:
                break
            k = want[0] * codes // nbytes
            if k % want[1]:
                continue
            dst = {**src, "element": element, "k": k, "block": k // want[1], "bias": src["bias"]}
            if (dst["element"], dst["block"], dst["k"]) != (src["element"], src["block"], src["k"]):
                return dst
    while True:
        dst = {**_config(rng), "bias": src["bias"]}
        if (dst["element"], dst["block"], dst["k"], dst["n"]) != (
            src["element"],
            src["block"],
            src["k"],
            src["n"],
        ):
            return dst


def _tamper(rng: random.Random, sd: dict, prefix: str, src: dict) -> tuple[str, bool]:
    """Replace one meaning entry; ``(key, still the same meaning)``."""
    import torch

    name = rng.choice(MEANING)
    key = prefix + name
    how = rng.randrange(4)
    if name == "weight_format":
        values = [
            list(rng.choice(ELEMENTS).encode()),
            [rng.randrange(256) for _ in range(rng.randrange(0, 9))],
            list(b"f9E9M9"),
        ]
        value = torch.tensor(values[how % 3], dtype=torch.uint8)
        if how == 3:
            value = value.to(torch.int64).reshape(1, -1)
        same = how == 0 and bytes(values[0]) == src["element"].encode()
    elif name == "weight_block_size":
        choices = [
            torch.tensor(rng.choice(BLOCKS)),
            torch.tensor(float(src["block"])),
            torch.tensor([src["block"]]),
            torch.tensor(0),
        ]
        value = choices[how]
        same = how == 0 and int(value) == src["block"]
    else:
        choices = [
            torch.tensor([src["n"], src["k"] * 2]),
            torch.tensor([src["n"] + 1, src["k"]]),
            torch.tensor(src["n"]),
            torch.tensor([-1, -1]),
        ]
        value, same = choices[how], False
    sd[key] = value
    return key, same


def _output(layer, k: int):
    import torch

    x = torch.randn(3, k, generator=torch.Generator().manual_seed(11))
    with torch.no_grad():
        return layer(x)


def case(seed: int, index: int) -> Outcome:
    """One case; see the module docstring for the rule."""
    rng = random.Random(f"state-dict:{seed}:{index}")
    kind = KINDS[index % len(KINDS)]
    src = _config(rng)
    config = f"{kind}"
    try:
        return _run(rng, index, kind, src, config)
    except Exception:  # noqa: BLE001 - anything unexpected is the finding
        return Outcome(index, "traceback", config, traceback.format_exc()[-1500:], repr(src))


def _run(rng, index: int, kind: str, src: dict, config: str) -> Outcome:
    import torch

    source = _layer(src, seed=index)
    if kind == "pickle":
        for copied in (pickle.loads(pickle.dumps(source)), copy.copy(source)):
            if not (
                copied.weight().bitwise_equal(source.weight())
                and torch.equal(_output(copied, src["k"]), _output(source, src["k"]))
            ):
                return Outcome(index, "wrong", config, "a pickled layer differs", repr(src))
        return Outcome(index, "ok", config)
    prefix = "layer." if rng.random() < 0.5 else ""
    sd = {prefix + k: v for k, v in source.state_dict().items()}
    dst_cfg, expect_key = dict(src), None
    if kind == "other":
        dst_cfg = _other(rng, src)
        differs = [
            ("weight_format", "element"),
            ("weight_block_size", "block"),
            ("weight_shape", "k"),
            ("weight_shape", "n"),
        ]
        expect_key = next(prefix + m for m, c in differs if dst_cfg[c] != src[c])
        if _bytes_per_row(dst_cfg) == _bytes_per_row(src) and dst_cfg["n"] == src["n"]:
            config = "other-same-bytes"  # only the saved meaning tells them apart
    elif kind == "legacy":
        for m in MEANING:
            del sd[prefix + m]
        if rng.random() < 0.5:
            dst_cfg = {**src, "n": src["n"] + 1}  # other byte shapes: refused by them
            expect_key = prefix + "weight_codes/weight_scales"
    elif kind == "tamper":
        key, same = _tamper(rng, sd, prefix, src)
        expect_key = None if same else key
    dst = _layer(dst_cfg, seed=index + 1)
    return _check_load(index, config, dst, sd, prefix, expect_key, source, src, dst_cfg)


def _check_load(index, config, dst, sd, prefix, expect_key, source, src, dst_cfg) -> Outcome:
    import torch

    target = torch.nn.Sequential()
    if prefix:
        target.add_module("layer", dst)
    else:
        target = dst
    before = dst.weight()
    what = f"{src} -> {dst_cfg}, keys {sorted(sd)}"
    try:
        target.load_state_dict(sd)
    except RuntimeError as e:
        if expect_key is None:
            return Outcome(index, "wrong", config, f"refused a matching state_dict: {e}", what)
        if f"{expect_key}" not in str(e):
            return Outcome(index, "wrong", config, f"the error does not name {expect_key}: {e}", what)
        if not dst.weight().bitwise_equal(before):
            return Outcome(index, "wrong", config, "a refused load changed the weight", what)
        return Outcome(index, "rejected", config)
    if expect_key is not None:
        return Outcome(index, "wrong", config, f"loaded; expected an error naming {expect_key}", what)
    if not torch.equal(_output(dst, src["k"]), _output(source, src["k"])):
        return Outcome(index, "wrong", config, "loaded, but computes other outputs", what)
    return Outcome(index, "ok", config)

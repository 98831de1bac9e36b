"""The public-API sweep's parts (``tests/test_api_arguments_core.py`` for the
modules that need no torch, ``tests/torch_mx/test_api_arguments.py`` for
``mlir_mx.torch``): the junk values, the public callables of a module, and
one call of a callable with junk in each position.

Found in session 60 by calling every public function with junk in each
required position; each refusal must be an ``MXError`` naming the argument
(or what :data:`ALLOWED` names), never an ``AttributeError`` or another
library's error from inside.
"""

from __future__ import annotations

import importlib.util
import inspect
import warnings

import numpy as np
import pytest

from mlir_mx.errors import MXError

__all__ = ["ALLOWED", "junk", "public_functions", "refuses_junk"]


def junk() -> list:
    """The junk values: Python's, numpy's, and a torch tensor where torch is installed."""
    values = [None, 3, -1, 2.5, "x", "", [], {}, b"ab", np.zeros(3, np.float32)]
    try:
        import torch
    except ImportError:
        return values
    return [*values, torch.zeros(3)]


def _positions(f) -> int:
    """The positions to fill with junk: every required positional parameter,
    else the first optional one (``Gate(kind)``, ``MXConfig(element)``)."""
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    ps = [p for p in inspect.signature(f).parameters.values() if p.kind in kinds]
    return sum(p.default is inspect.Parameter.empty for p in ps) or min(len(ps), 1)


def public_functions(*modules):
    """(``module.name``, callable) for each callable of each module's
    ``__all__`` with a positional parameter (``gguf_package`` has none),
    exception classes left out."""
    for module in modules:
        for name in module.__all__:
            f = getattr(module, name)
            if callable(f) and not (inspect.isclass(f) and issubclass(f, BaseException)):
                if _positions(f):
                    yield f"{module.__name__}.{name}", f


#: What a junk argument may raise other than an MXError, and why it is right:
#: a missing file is the documented FileNotFoundError; where torch or torchao
#: is not installed, the torchao interop's ImportError saying what to install.
ALLOWED = {
    "mlir_mx.interop.gguf.read_gguf": FileNotFoundError,
    "mlir_mx.interop.gguf.open_gguf": FileNotFoundError,
}
if not all(importlib.util.find_spec(m) for m in ("torch", "torchao")):
    ALLOWED["mlir_mx.interop.torchao.to_mxtensor"] = ImportError
    ALLOWED["mlir_mx.interop.torchao.from_mxtensor"] = ImportError


def refuses_junk(name: str, f, first=lambda: "f4E2M1FN") -> int:
    """Call ``f`` with each junk value in each required position, a new
    ``first()`` in the first of the others (a format name unless given) and a
    format name in the rest; fail the test
    on anything but an ``MXError`` (or :data:`ALLOWED`). Returns the calls made."""
    n = _positions(f)
    values = junk()
    calls = 0
    for pos in range(n):
        for bad in values:
            filler = [first()] + ["f4E2M1FN"] * n
            args = [bad if i == pos else filler[i] for i in range(n)]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                try:
                    f(*args)
                except MXError:
                    pass
                except Exception as e:  # noqa: BLE001 - the point of the test
                    allowed = ALLOWED.get(name)
                    if allowed is None or not isinstance(e, allowed):
                        pytest.fail(f"{name}(arg {pos} = {bad!r}): {type(e).__name__}: {e}")
            calls += 1
    assert calls == n * len(values)
    return calls

"""Where a process's RSS goes before it loads a model (issue 56: the fixed
part of every rank's peak at load).

    python bench/probes/import_rss.py [--cache-dir DIR] [--hide triton,torchao]

Runs, in this fresh process, the steps a rank takes before and around a
sharded load: import numpy, torch, ml_dtypes, the MLIR Python bindings
(``mlir.ir``: their shared libraries), ``mlir_mx.torch`` (our own Python),
torch's tensor parallel (``torch.distributed.tensor.parallel``),
transformers' Llama and gpt-oss modules; then a random 4096 x 4096
``MXLinear`` (``quantize_``, MXFP4) and its first forward (its kernel compiled,
or loaded from the persistent compile cache ``--cache-dir``:
``MLIR_MX_CACHE_DIR``; run twice for a cold and a warm cache), and a second
forward.  After each step, from ``/proc/self/status`` and
``/proc/self/smaps``: the RSS, its growth split into anonymous and
file-backed pages, and the mappings that grew most (a shared library's
pages are file-backed: on one machine the ranks share them, yet each
process's RSS counts them).

``--hide``: packages made unimportable for this run (as if not installed),
to measure what they cost (triton is imported by ``torch._dynamo``, which
transformers imports; torchao by transformers' quantizers when installed).
"""

from __future__ import annotations

import argparse
import collections
import importlib.abc
import importlib.util
import os
import sys
import tempfile
import time


def _status(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


def _mappings() -> collections.Counter:
    """RSS bytes per mapped object (a file's base name, or ``[heap]``,
    ``[anon]``...)."""
    out, name = collections.Counter(), None
    with open("/proc/self/smaps") as f:
        for line in f:
            p = line.split()
            if len(p) >= 5 and "-" in p[0] and ":" in p[3]:
                name = os.path.basename(p[5]) if len(p) > 5 else "[anon]"
            elif p[0] == "Rss:":
                out[name] += int(p[1]) * 1024
    return out


class Steps:
    """Prints each step's RSS and what grew."""

    def __init__(self):
        self.maps, self.anon, self.file = _mappings(), _status("RssAnon"), _status("RssFile")
        self.rows = []

    def step(self, label: str, seconds: float = 0.0) -> None:
        maps, anon, file = _mappings(), _status("RssAnon"), _status("RssFile")
        grown = sorted(((v - self.maps.get(k, 0), k) for k, v in maps.items()), reverse=True)
        mib = 2**20
        top = ", ".join(f"{k} {d / mib:.0f}" for d, k in grown[:4] if d >= 2 * mib)
        print(f"{label:44s} RSS {_status('VmRSS') / mib:5.0f} MiB: +{(anon - self.anon) / mib:4.0f}"
              f" anonymous, +{(file - self.file) / mib:4.0f} file-backed ({seconds:.2f} s)"
              f"{'; ' + top if top else ''}", flush=True)  # fmt: skip
        self.rows.append((label, anon - self.anon, file - self.file))
        self.maps, self.anon, self.file = maps, anon, file


class _Hide(importlib.abc.MetaPathFinder):
    def __init__(self, names):
        self.names = names

    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in self.names:
            raise ModuleNotFoundError(f"No module named {name!r} (hidden by --hide)", name=name)
        return None


def hide(names: set) -> None:
    """``names`` unimportable, and not found by ``importlib.util.find_spec``
    (transformers' and torch's availability checks)."""
    sys.meta_path.insert(0, _Hide(names))
    find = importlib.util.find_spec
    importlib.util.find_spec = lambda n, *a, **k: (  # noqa: E731
        None if n.split(".")[0] in names else find(n, *a, **k)
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cache-dir", help="MLIR_MX_CACHE_DIR (default: a fresh one: cold)")
    p.add_argument("--hide", default="", help="packages hidden: triton,torchao")
    args = p.parse_args()
    if args.hide:
        hide(set(args.hide.split(",")))
    os.environ["MLIR_MX_CACHE_DIR"] = args.cache_dir or tempfile.mkdtemp(prefix="mx-cache-")
    steps = Steps()
    print(f"python {sys.version.split()[0]}: RSS {_status('VmRSS') / 2**20:.0f} MiB; compile "
          f"cache {os.environ['MLIR_MX_CACHE_DIR']}; hidden: {args.hide or 'none'}")  # fmt: skip

    def timed(label, fn):
        t0 = time.perf_counter()
        out = fn()
        steps.step(label, time.perf_counter() - t0)
        return out

    timed("import numpy", lambda: __import__("numpy"))
    torch = timed("import torch", lambda: __import__("torch"))
    timed("import ml_dtypes", lambda: __import__("ml_dtypes"))
    timed("import mlir.ir (MLIR/LLVM libraries)", lambda: __import__("mlir.ir"))
    timed("import mlir_mx.torch (our Python)", lambda: __import__("mlir_mx.torch"))
    timed("import torch.distributed.tensor.parallel",
          lambda: __import__("torch.distributed.tensor.parallel"))  # fmt: skip
    timed("import transformers' llama + gpt-oss", lambda: (
        __import__("transformers.models.llama.modeling_llama"),
        __import__("transformers.models.gpt_oss.modeling_gpt_oss")))  # fmt: skip
    print(f"    (triton imported: {'triton' in sys.modules}, torchao: {'torchao' in sys.modules})")
    from mlir_mx.torch import quantize_

    torch.manual_seed(0)
    lin = torch.nn.Sequential(torch.nn.Linear(4096, 4096, bias=False))
    timed("MXLinear 4096x4096 (quantize_, MXFP4)", lambda: quantize_(lin, element="mxfp4"))
    x = torch.randn(1, 4096)
    with torch.inference_mode():
        timed("first forward (kernel compiled or cached)", lambda: lin(x))
        timed("second forward", lambda: lin(x))
    print(f"VmHWM {_status('VmHWM') / 2**20:.0f} MiB")


if __name__ == "__main__":
    main()

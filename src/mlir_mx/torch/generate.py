"""``mx-generate``: run a causal LM with MX weights from its folder, the tokens streamed.

    mx-generate PATH --prompt "..." [--max-new-tokens N] [--threads T]
                [--activations i8] [--element mxfp4] [--no-chat-template]
    python -m mlir_mx.torch.generate PATH --prompt "..."   (the same)
    mx-generate --tp N PATH ...       (tensor parallel over N processes on this machine)
    torchrun --nproc-per-node N -m mlir_mx.torch.generate PATH ...   (the same, or across machines)

``PATH`` is a checkpoint folder with MX weights as stored (gpt-oss's MXFP4
layout, compressed-tensors ``mxfp4-pack-quantized``, what
:func:`mlir_mx.torch.save_pretrained` writes: loaded by
:func:`mlir_mx.torch.from_pretrained`), any other ``transformers`` causal-LM
folder (loaded by ``transformers``, then every ``nn.Linear`` converted by
:func:`mlir_mx.torch.quantize_` to ``--element``), or a file, handed to
:func:`mlir_mx.torch.from_pretrained` as it is.  The folder's tokenizer
applies its chat template where it has one (``--no-chat-template``: the prompt
as it is).  The kernels are compiled before the prompt runs
(:func:`mlir_mx.torch.precompile`), so that the figures printed at the end
(load, compile, prefill tokens/s, decode tokens/s, on standard error) time
the model alone.  With ``--tp N`` (or under ``torchrun``) the model is split
over the ranks (``docs/distributed.md``): each loads only its shard
(:func:`mlir_mx.torch.distributed.from_pretrained`, transformers' plan of the
model), every rank computes the same tokens, and rank 0 prints.  Greedy unless ``--temperature`` is given: the text is
``model.generate(ids, max_new_tokens=N, do_sample=False)``'s, streamed to
standard output as it comes (``transformers.TextStreamer``).

A bad command line, a missing path or a folder without a tokenizer is one
``mx-generate: error: ...`` line and exit status 2; a checkpoint that does not
load is one line and exit status 1.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import torch

from mlir_mx.errors import MXError, ToolError, UsageError
from mlir_mx.host import check_threads
from mlir_mx.linear import activations_format
from mlir_mx.numerics import element_format
from mlir_mx.tools.driver import ArgParser, tool_main

from .checkpoint import from_pretrained
from .distributed.launch import is_rank_zero, relaunch, tensor_mesh, under_launcher
from .gguf_model import gguf_tokenizer
from .precompile import precompile
from .quantize_model import quantize_

__all__ = ["GenerationClock", "load_model", "load_tokenizer", "main", "prompt_ids"]

PROG = "mx-generate"
#: The quantization methods of the checkpoints :func:`from_pretrained` reads.
MX_METHODS = ("mxfp4", "compressed-tensors")
#: The weight files a folder's size is counted from (the loading bar's 100 %).
WEIGHT_FILES = ("*.safetensors", "*.bin", "*.pt", "*.gguf")


def _parser() -> ArgParser:
    ap = ArgParser(prog=PROG, description=__doc__.splitlines()[0])
    ap.add_argument("path", metavar="PATH", help="a checkpoint or transformers model folder")
    ap.add_argument("--prompt", required=True, help="the prompt (a user message where "
                    "the tokenizer has a chat template)")  # fmt: skip
    ap.add_argument("--max-new-tokens", type=int, default=64, help="tokens to generate (64)")
    ap.add_argument("--threads", type=int, help="torch.set_num_threads (the MX layers follow it)")
    ap.add_argument("--activations", help="MX format the activations are quantized to per "
                    "call (i8: W4A8); default: exact")  # fmt: skip
    ap.add_argument("--element", help="MX element format of a model converted on load (mxfp4)")
    ap.add_argument("--no-chat-template", action="store_true", help="the prompt as it is")
    ap.add_argument("--temperature", type=float, default=0.0, help="0: greedy (default)")
    ap.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling (with --temperature)")
    ap.add_argument("--seed", type=int, default=0, help="torch's seed (with --temperature)")
    ap.add_argument("--ignore-eos", action="store_true", help="generate --max-new-tokens tokens")
    ap.add_argument("--tp", type=int, help="tensor parallel over N processes (torchrun on itself)")
    return ap


def _check_options(ns) -> None:
    """Every option checked before any work: a :class:`UsageError` naming it."""
    if ns.max_new_tokens < 1:
        raise UsageError(f"--max-new-tokens: expected 1 or more, got {ns.max_new_tokens}")
    if not ns.prompt:
        raise UsageError("--prompt: expected some text, got an empty prompt")
    if not ns.temperature >= 0.0:  # NaN too
        raise UsageError(f"--temperature: expected 0 or more, got {ns.temperature}")
    if not 0.0 < ns.top_p <= 1.0:
        raise UsageError(f"--top-p: expected a number in (0, 1], got {ns.top_p}")
    if ns.tp is not None and ns.tp < 1:
        raise UsageError(f"--tp: expected 1 or more processes, got {ns.tp}")
    if ns.tp is not None and under_launcher() and ns.tp != under_launcher():
        raise UsageError(f"--tp: {ns.tp} given, but the launcher started {under_launcher()} ranks")
    if not 0 <= ns.seed < 2**63 - 1:
        raise UsageError(f"--seed: expected an integer in [0, 2**63 - 1), got {ns.seed}")
    checks = (
        ("--threads", lambda: ns.threads is None or check_threads(ns.threads, "")),
        ("--activations", lambda: activations_format(ns.activations)),
        ("--element", lambda: ns.element is None or element_format(ns.element)),
    )
    for flag, check in checks:
        try:
            check()
        except (MXError, ValueError, TypeError) as err:  # named by the flag instead
            why = str(err).removeprefix("activations: ").removeprefix("element: ").lstrip(": ")
            raise UsageError(f"{flag}: {why}") from None


def _parse(argv):
    ns = _parser().parse(argv)
    if isinstance(ns, str):
        return ns
    ns.argv = list(sys.argv[1:] if argv is None else argv)
    _check_options(ns)
    path = Path(ns.path)
    if not path.exists():
        raise UsageError(f"PATH: no such file or folder: '{ns.path}'")
    if path.is_dir() and not (path / "config.json").is_file():
        raise UsageError(f"PATH: '{ns.path}' has no config.json: expected a model folder")
    ns.mx_checkpoint = _is_mx_checkpoint(path)
    if ns.mx_checkpoint and ns.element is not None and element_format(ns.element).name != "f4E2M1FN":
        raise UsageError(
            f"--element: '{ns.path}' holds MXFP4 weights as stored; --element applies to a "
            "model converted on load"
        )
    return ns


def _is_mx_checkpoint(path: Path) -> bool:
    """A file (for :func:`from_pretrained`), or a folder whose config's
    ``quantization_config.quant_method`` is one of :data:`MX_METHODS`."""
    if not path.is_dir():
        return True
    try:
        config = json.loads((path / "config.json").read_text())
    except (OSError, ValueError) as e:
        raise UsageError(f"PATH: cannot read {path / 'config.json'} ({e})") from None
    q = config.get("quantization_config") if isinstance(config, dict) else None
    return isinstance(q, dict) and q.get("quant_method") in MX_METHODS


def load_tokenizer(path):
    """The tokenizer of the model folder ``path`` (``AutoTokenizer``; a GGUF
    file: the one its metadata describes, :func:`gguf_tokenizer`);
    :class:`UsageError` saying what is missing otherwise."""
    from transformers import AutoTokenizer

    path = Path(path)
    if not path.is_dir():
        try:
            return gguf_tokenizer(path)
        except MXError as e:
            raise UsageError(f"PATH: {e}") from None
    folder = path
    try:
        tok = AutoTokenizer.from_pretrained(str(folder))
    except Exception as e:  # noqa: BLE001 - transformers raises OSError, ValueError, ...
        why = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise UsageError(
            f"PATH: no tokenizer in '{folder}': expected tokenizer.json (or the files of a "
            f"slow tokenizer, e.g. tokenizer.model) and tokenizer_config.json ({why})"
        ) from None
    return tok


def load_model(path, *, mx_checkpoint: bool, element=None, activations=None, device_mesh=None):
    """The model: :func:`from_pretrained` for an MX checkpoint (or a file),
    else ``transformers``' ``AutoModelForCausalLM`` (dtype as stored) converted
    by :func:`quantize_` to ``element`` (None: MXFP4).  With ``device_mesh``:
    tensor parallel over it (the model's own plan), an MX checkpoint read as
    this rank's shard.  Returns ``(model, what)``, ``what`` a few words on how
    it was loaded."""
    if mx_checkpoint and device_mesh is not None:
        model = from_pretrained(path, device_mesh=device_mesh, tp_plan="auto",
                                activations=activations)  # fmt: skip
        return model, f"this rank's shard of {device_mesh.size()} (MX weights as stored)"
    if mx_checkpoint:
        model = from_pretrained(path, activations=activations)
        return model, "MX weights as stored (mlir_mx.torch.from_pretrained)"
    from transformers import AutoModelForCausalLM

    try:
        model = AutoModelForCausalLM.from_pretrained(str(path), dtype="auto").eval()
    except (OSError, ValueError, KeyError, RuntimeError) as e:
        why = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ToolError(f"PATH: transformers loads no causal LM from '{path}' ({why})") from None
    summary = quantize_(model, element=element or "mxfp4", activations=activations)
    if device_mesh is not None:  # torch.distributed.tensor: imported only here
        from .distributed.plans import resolve_plan
        from .distributed.tensor_parallel import parallelize

        parallelize(model, device_mesh, resolve_plan(model, "auto"))
    return model, f"converted on load: {summary}".splitlines()[0]


def prompt_ids(tokenizer, prompt: str, chat_template: bool = True) -> torch.Tensor:
    """``(1, n)`` token ids of ``prompt``: a user message through the tokenizer's
    chat template where it has one (and ``chat_template``), else the text
    with the tokenizer's special tokens."""
    if chat_template and getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
        )
        return tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
    return tokenizer(prompt, return_tensors="pt")["input_ids"]


class GenerationClock:
    """A ``transformers`` streamer that notes the time of each ``put`` before
    passing it on to ``inner`` (a ``TextStreamer``, or None): ``generate`` puts the
    prompt first, then each new token as it is chosen, so the time from
    :meth:`start` to the second ``put`` is the prefill (and the first token's
    choice) and the gaps after it are the decode steps."""

    def __init__(self, inner):
        self.inner, self.times, self.t0 = inner, [], 0.0

    def start(self) -> None:
        self.times, self.t0 = [], time.perf_counter()

    def put(self, value) -> None:
        self.times.append(time.perf_counter())
        if self.inner is not None:
            self.inner.put(value)

    def end(self) -> None:
        if self.inner is not None:
            self.inner.end()

    def figures(self, prompt_tokens: int) -> list[str]:
        """The prefill and decode lines (tokens/s)."""
        tokens = self.times[1:]  # times[0]: the prompt's put
        if not tokens:
            return ["prefill: no token generated"]
        prefill = tokens[0] - self.t0
        lines = [f"prefill: {prompt_tokens} tokens in {prefill:.3f} s: "
                 f"{prompt_tokens / prefill:.2f} tokens/s"]  # fmt: skip
        steps = [b - a for a, b in zip(tokens[:-1], tokens[1:], strict=True)]
        if steps:
            total = tokens[-1] - tokens[0]
            lines.append(
                f"decode: {len(steps)} tokens in {total:.3f} s: {len(steps) / total:.2f} tokens/s "
                f"(median step {1e3 * statistics.median(steps):.1f} ms: "
                f"{1 / statistics.median(steps):.2f} tokens/s)"
            )
        else:
            lines.append("decode: no token after the first (--max-new-tokens 1, or end of text)")
        return lines


class LoadingBar:
    """A loading bar on standard error (only where it is a terminal): the
    process's resident memory grown since the start over the weight files'
    size, redrawn every 0.2 s from a thread (the loaders report no progress)."""

    def __init__(self, path: Path, show: bool | None = None):
        self.show = sys.stderr.isatty() if show is None else show
        files = [path] if path.is_file() else [f for g in WEIGHT_FILES for f in path.glob(g)]
        self.total = max(1, sum(f.stat().st_size for f in files))
        self._stop, self._thread = threading.Event(), None

    def __enter__(self):
        if self.show:
            self.t0, self.rss0 = time.perf_counter(), _rss()
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()
        return self

    def _draw(self, frac: float) -> None:
        bar = "#" * int(30 * frac)
        size = f"{self.total / 2**30:.2f} GiB" if self.total >= 2**30 else f"{self.total / 2**20:.1f} MiB"
        sys.stderr.write(f"\r{PROG}: loading [{bar:<30}] {100 * frac:3.0f} % of {size}, "
                         f"{time.perf_counter() - self.t0:.1f} s")  # fmt: skip
        sys.stderr.flush()

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            self._draw(min(0.99, max(0, _rss() - self.rss0) / self.total))

    def __exit__(self, *exc):
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._draw(1.0 if exc[0] is None else 0.0)
            sys.stderr.write("\n")
        return False


def _rss() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


@contextmanager
def _quiet_transformers():
    """No progress bars or advice from transformers while it runs (ours only,
    on a terminal); its settings as they were afterwards (``main`` in a process
    that goes on)."""
    from transformers.utils import logging

    level, bars = logging.get_verbosity(), logging.is_progress_bar_enabled()
    logging.set_verbosity_error()
    logging.disable_progress_bar()
    try:
        yield
    finally:
        logging.set_verbosity(level)
        if bars:
            logging.enable_progress_bar()


def _generate_kwargs(ns, tokenizer, model) -> dict:
    kw = dict(max_new_tokens=ns.max_new_tokens, do_sample=ns.temperature > 0)
    if ns.temperature > 0:
        kw.update(temperature=ns.temperature, top_p=ns.top_p)
    else:  # greedy: the model's own sampling settings do not apply
        kw.update(temperature=None, top_p=None, top_k=None)
    if ns.ignore_eos:
        kw["min_new_tokens"] = ns.max_new_tokens
    if model.generation_config.pad_token_id is None:
        pad = tokenizer.pad_token_id
        kw["pad_token_id"] = pad if pad is not None else tokenizer.eos_token_id
    return kw


def _warm_up(model, ids: torch.Tensor, kw: dict) -> float:
    """Two greedy tokens after the prompt's first few, untimed in the figures
    (as llama.cpp's warm-up run): torch's and ``generate``'s first-call work
    (its setup, each op's first dispatch) is not the model's speed.  The seconds."""
    t0 = time.perf_counter()
    warm = ids[:, : min(ids.shape[1], 4)]
    greedy = {**kw, "max_new_tokens": 2, "min_new_tokens": None, "do_sample": False,
              "temperature": None, "top_p": None, "top_k": None}  # fmt: skip
    with torch.inference_mode():
        model.generate(warm, attention_mask=torch.ones_like(warm), **greedy)
    return time.perf_counter() - t0


def _run(ns) -> int:
    if ns.tp is not None and ns.tp > 1 and not under_launcher():
        argv, skip = [], False
        for a in ns.argv:  # every option but --tp, for each rank
            if skip or a == "--tp" or a.startswith("--tp="):
                skip = a == "--tp"
                continue
            argv.append(a)
        return relaunch(ns.tp, argv, "mlir_mx.torch.generate")
    with _quiet_transformers():
        return _generate(ns)


def _generate(ns) -> int:
    from transformers import TextStreamer

    if ns.threads:
        torch.set_num_threads(ns.threads)
    mesh = tensor_mesh()  # None: one process
    main_rank = is_rank_zero()
    tokenizer = load_tokenizer(ns.path)
    t0 = time.perf_counter()
    with LoadingBar(Path(ns.path), None if main_rank else False):
        model, what = load_model(ns.path, mx_checkpoint=ns.mx_checkpoint, element=ns.element,
                                 activations=ns.activations, device_mesh=mesh)  # fmt: skip
    load_s = time.perf_counter() - t0
    ids = prompt_ids(tokenizer, ns.prompt, not ns.no_chat_template)
    kw = _generate_kwargs(ns, tokenizer, model)
    t0 = time.perf_counter()
    layers = precompile(model)
    compile_s = time.perf_counter() - t0
    warmup_s = _warm_up(model, ids, kw)
    text = TextStreamer(tokenizer, skip_prompt=True, skip_special_tokens=True) if main_rank else None
    clock = GenerationClock(text)
    torch.manual_seed(ns.seed)
    with torch.inference_mode():
        clock.start()
        model.generate(ids, attention_mask=torch.ones_like(ids), streamer=clock, **kw)
    sys.stdout.flush()
    lines = [
        f"load: {load_s:.2f} s ({what}; {torch.get_num_threads()} threads"
        + (f" in each of {mesh.size()} ranks)" if mesh is not None else ")"),
        f"compile: {compile_s:.2f} s ({layers} MX layers' kernels, before the prompt); "
        f"warm-up {warmup_s:.2f} s",
        *clock.figures(ids.shape[1]),
    ]
    if main_rank:
        print("\n".join(lines), file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    """``mx-generate``'s entry point (the module docstring); the exit status."""
    return tool_main(PROG, _parse, _run, argv)


if __name__ == "__main__":
    sys.exit(main())

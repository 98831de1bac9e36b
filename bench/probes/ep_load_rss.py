"""Peak RSS at load: a gpt-oss-shaped checkpoint loaded whole in one process
against each of 2 ranks loading its shard (expert parallel + attention TP,
``from_pretrained(path, device_mesh=, tp_plan="auto")``; issue 56, target:
peak RSS per rank at load <= 0.6x the single process's).

    python bench/probes/ep_load_rss.py [--layers 2] [--vocab 32000] [--folder /tmp/mx-ep-rss]

The checkpoint (gpt-oss-20b's widths, ``--layers`` layers, vocabulary
``--vocab``; random MXFP4 experts, the rest bf16: ``mx-bench --model
gpt-oss``'s writer) is written once to ``--folder``.  Each configuration runs
in fresh processes (``mlir_mx_testing.distributed.run_ranks``, gloo over
loopback), which import everything the load needs first (torch.distributed's
tensor parallel, transformers' gpt-oss), then load.  Printed per process:

* the RSS before the load (``VmRSS``), the peak during it (``VmHWM`` after
  it: this process's peak since its exec) and the RSS after it;
* the bytes of tensors the model holds (parameters, buffers, MX layers' stored
  weights; local shards);
* the RSS and the peak after one 4-token forward (every weight touched: a
  tensor still backed by the file's map is resident again);
* where the peak came from: a thread samples ``VmRSS`` every millisecond and,
  at each new maximum, records the load's innermost frames in ``mlir_mx`` /
  ``transformers`` / ``safetensors`` (the call the main thread was in).

Then the ratios: peak per rank over the single process's peak, and the load's
own growth (peak minus the RSS before) over the single process's.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

import torch

from mlir_mx_testing.distributed import run_ranks


def _status(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


def _where(frame, depth: int = 3) -> str:
    """The load's phase: the first ``depth`` calls below ``from_pretrained``
    (outermost first) in ``mlir_mx``, transformers or safetensors."""
    names = []
    while frame is not None:
        path = frame.f_code.co_filename
        if frame.f_code.co_name == "from_pretrained" and "mlir_mx" in path:
            break
        if any(k in path for k in ("mlir_mx", "transformers", "safetensors")):
            names.append(f"{Path(path).stem}.{frame.f_code.co_name}")
        frame = frame.f_back
    return " > ".join(names[::-1][:depth]) or "?"


class Sampler(threading.Thread):
    """``VmRSS`` every millisecond: the highest seen in each phase of the load
    (:func:`_where`), in the order the phases came."""

    def __init__(self):
        super().__init__(daemon=True)
        self.main, self.stop, self.phases = threading.main_thread().ident, False, {}

    def run(self):
        while not self.stop:
            rss = _status("VmRSS")
            at = _where(sys._current_frames().get(self.main))
            self.phases[at] = max(self.phases.get(at, 0), rss)
            time.sleep(0.001)


def _held(model) -> int:
    """Bytes of the parameters and buffers (local shards; an ``MXLinear``'s
    stored codes and scales are its buffers)."""
    total = 0
    for t in (*model.parameters(), *model.buffers()):
        t = t.to_local() if hasattr(t, "to_local") else t
        total += t.numel() * t.element_size()
    return total


def measure(rank, world, folder):
    import torch.distributed.tensor.parallel  # noqa: F401 - imported before the RSS is read
    import transformers.models.gpt_oss.modeling_gpt_oss  # noqa: F401
    import transformers.models.llama.modeling_llama  # noqa: F401
    from torch.distributed.device_mesh import init_device_mesh

    from mlir_mx.torch import from_pretrained
    from mlir_mx.torch.distributed import shard_load  # noqa: F401

    mesh = init_device_mesh("cpu", (world,)) if world > 1 else None
    rss0 = _status("VmRSS")
    sampler = Sampler()
    sampler.start()
    t0 = time.perf_counter()
    model = from_pretrained(folder, device_mesh=mesh, tp_plan="auto" if mesh else None)
    load_s = time.perf_counter() - t0
    sampler.stop = True
    sampler.join()
    got = dict(rss0=rss0, peak=_status("VmHWM"), after=_status("VmRSS"), held=_held(model),
               load_s=load_s, phases=sampler.phases)  # fmt: skip
    with torch.inference_mode():  # every weight touched once: its pages resident
        model(torch.zeros(1, 4, dtype=torch.long))
    return got | {"step": _status("VmRSS"), "step_peak": _status("VmHWM")}


def _write(model: str, folder: Path, layers: int, vocab: int) -> None:
    if model == "gpt-oss":
        from mlir_mx_bench.models.gpt_oss.worker import write_checkpoint

        write_checkpoint(folder, layers, 0, {"vocab_size": vocab})
        return
    import transformers

    from mlir_mx.torch import quantize_, save_pretrained

    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        num_hidden_layers=layers, hidden_size=2048, intermediate_size=5632,
        num_attention_heads=32, num_key_value_heads=4, vocab_size=vocab,
        max_position_embeddings=256,
    )  # fmt: skip
    m = transformers.LlamaForCausalLM(config).to(torch.bfloat16).eval()
    quantize_(m, element="mxfp4")
    save_pretrained(m, folder)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--folder", type=Path, default=Path("/tmp/mx-ep-rss"))
    p.add_argument("--model", choices=("gpt-oss", "llama"), default="gpt-oss",
                   help="llama: bench/probes/tp_decode.py's TinyLlama-wide MXFP4 checkpoint "
                        "(tensor parallel only)")  # fmt: skip
    args = p.parse_args()
    folder = args.folder / f"{args.model}-l{args.layers}-v{args.vocab}"
    if not (folder / "config.json").exists():
        _write(args.model, folder, args.layers, args.vocab)
    size = sum(f.stat().st_size for f in folder.glob("*.safetensors"))
    mib = 2**20
    widths = "gpt-oss-20b" if args.model == "gpt-oss" else "TinyLlama"
    print(f"{widths} widths, {args.layers} layers, vocab {args.vocab}: checkpoint "
          f"{size / mib:.0f} MiB")  # fmt: skip
    rows = {}
    for world in (1, 2):
        rows[world] = run_ranks(measure, world, (str(folder),), timeout=900)
        for r, x in enumerate(rows[world]):
            print(f"{world} process{'es' if world > 1 else ''}, rank {r}: RSS before "
                  f"{x['rss0'] / mib:.0f} MiB, peak {x['peak'] / mib:.0f}, after "
                  f"{x['after'] / mib:.0f}; tensors held {x['held'] / mib:.0f} MiB; load "
                  f"{x['load_s']:.1f} s; after a 4-token forward: RSS {x['step'] / mib:.0f}, "
                  f"peak {x['step_peak'] / mib:.0f}; the highest RSS sampled in each phase of "
                  "the load:")  # fmt: skip
            for at, rss in x["phases"].items():
                print(f"    {rss / mib:6.0f} MiB  {at}")
    one = rows[1][0]
    worst = max(rows[2], key=lambda x: x["peak"])
    print(f"peak RSS per rank / single process: {worst['peak'] / one['peak']:.2f}x; the load's "
          f"growth: {(worst['peak'] - worst['rss0']) / (one['peak'] - one['rss0']):.2f}x; "
          f"tensors held: {worst['held'] / one['held']:.2f}x")  # fmt: skip


if __name__ == "__main__":
    main()

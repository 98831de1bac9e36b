"""Peak RSS at load: a gpt-oss-shaped checkpoint loaded whole in one process
against each of 2 ranks loading its shard (expert parallel + attention TP,
``from_pretrained(path, device_mesh=, tp_plan="auto")``; issue 56, target:
peak RSS per rank at load <= 0.6x the single process's).

    python bench/probes/ep_load_rss.py [--model gpt-oss|llama|llama3-8b]
        [--layers 2[,4,8...]] [--vocab V] [--folder /tmp/mx-ep-rss]

``--model llama3-8b``: Llama-3-8B's widths (hidden 4096, intermediate 14336,
32 heads, 8 KV heads; vocabulary 128256 unless ``--vocab``), tensor parallel
only, written directly as a compressed-tensors MXFP4 checkpoint from random
codes and scales (no bf16 model is built: 8 layers are 1 GiB of MXFP4);
``llama``: TinyLlama's widths, quantized by ``quantize_``.  ``--layers`` takes
a list: one row per size in the closing table (held weights and peak RSS at
load, per rank over the single process; the load average printed per size,
since other jobs share the machine).

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
import os
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
        self.anon = 0  # the highest RssAnon seen (the peak's private part)

    def run(self):
        while not self.stop:
            rss = _status("VmRSS")
            self.anon = max(self.anon, _status("RssAnon"))
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
    rss0, anon0 = _status("VmRSS"), _status("RssAnon")
    sampler = Sampler()
    sampler.start()
    t0 = time.perf_counter()
    model = from_pretrained(folder, device_mesh=mesh, tp_plan="auto" if mesh else None)
    load_s = time.perf_counter() - t0
    sampler.stop = True
    sampler.join()
    got = dict(rss0=rss0, peak=_status("VmHWM"), after=_status("VmRSS"), held=_held(model),
               load_s=load_s, phases=sampler.phases, anon0=anon0,
               peak_anon=sampler.anon)  # fmt: skip
    with torch.inference_mode():  # every weight touched once: its pages resident
        model(torch.zeros(1, 4, dtype=torch.long))
    return got | {"step": _status("VmRSS"), "step_peak": _status("VmHWM")}


LLAMA3_8B = dict(hidden_size=4096, intermediate_size=14336, num_attention_heads=32,
                 num_key_value_heads=8, rope_theta=500000.0)  # fmt: skip


def _write_llama3(folder: Path, layers: int, vocab: int) -> None:
    """Llama-3-8B's widths as ``save_pretrained`` writes an MXFP4 model
    (compressed-tensors ``mxfp4-pack-quantized``: every linear, ``lm_head``
    included, as ``weight_packed`` / ``weight_scale``; the embedding and norms
    bf16), from random codes (uniform) and scales (2^-9..2^-5)."""
    import transformers
    from safetensors.torch import save_file

    config = transformers.LlamaConfig(num_hidden_layers=layers, vocab_size=vocab,
                                      max_position_embeddings=256, **LLAMA3_8B)  # fmt: skip
    with torch.device("meta"):
        meta = transformers.LlamaForCausalLM(config)
    gen, tensors = torch.Generator().manual_seed(0), {}
    for key, t in meta.state_dict().items():
        if key.endswith("norm.weight"):
            tensors[key] = torch.ones(t.shape, dtype=torch.bfloat16)
        elif key == "model.embed_tokens.weight":
            tensors[key] = (torch.randn(t.shape, generator=gen) * 0.02).to(torch.bfloat16)
        else:  # a linear's (out, in) weight
            out, inner = t.shape
            stem = key.removesuffix(".weight")
            tensors[stem + ".weight_packed"] = torch.randint(
                0, 256, (out, inner // 2), dtype=torch.uint8, generator=gen)  # fmt: skip
            tensors[stem + ".weight_scale"] = torch.randint(
                118, 123, (out, inner // 32), dtype=torch.uint8, generator=gen)  # fmt: skip
    folder.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    weights = {"group_size": 32, "num_bits": 4, "scale_dtype": "torch.uint8",
               "strategy": "group", "symmetric": True, "type": "float"}  # fmt: skip
    config.dtype = torch.bfloat16
    config.quantization_config = {
        "config_groups": {"group_0": {"format": "mxfp4-pack-quantized",
                                      "targets": ["Linear"], "weights": weights}},
        "format": "mxfp4-pack-quantized", "ignore": [], "quant_method": "compressed-tensors",
    }  # fmt: skip
    config.save_pretrained(folder)


def _write(model: str, folder: Path, layers: int, vocab: int) -> None:
    if model == "gpt-oss":
        from mlir_mx_bench.models.gpt_oss.worker import write_checkpoint

        write_checkpoint(folder, layers, 0, {"vocab_size": vocab})
        return
    if model == "llama3-8b":
        _write_llama3(folder, layers, vocab)
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


WIDTHS = {"gpt-oss": "gpt-oss-20b", "llama": "TinyLlama", "llama3-8b": "Llama-3-8B"}


def one_size(args, layers: int) -> dict:
    """Both configurations at ``layers`` layers, printed; returns the row of
    the closing table."""
    folder = args.folder / f"{args.model}-l{layers}-v{args.vocab}"
    if not (folder / "config.json").exists():
        _write(args.model, folder, layers, args.vocab)
    size = sum(f.stat().st_size for f in folder.glob("*.safetensors"))
    mib = 2**20
    print(f"{WIDTHS[args.model]} widths, {layers} layers, vocab {args.vocab}: checkpoint "
          f"{size / mib:.0f} MiB; load average {os.getloadavg()[0]:.1f}", flush=True)  # fmt: skip
    rows = {}
    for world in (1, 2):
        rows[world] = run_ranks(measure, world, (str(folder),), timeout=1800)
        for r, x in enumerate(rows[world]):
            print(f"{world} process{'es' if world > 1 else ''}, rank {r}: RSS before "
                  f"{x['rss0'] / mib:.0f} MiB (anonymous {x['anon0'] / mib:.0f}), peak "
                  f"{x['peak'] / mib:.0f} (anonymous {x['peak_anon'] / mib:.0f}), after "
                  f"{x['after'] / mib:.0f}; tensors held {x['held'] / mib:.0f} MiB; load "
                  f"{x['load_s']:.1f} s; after a 4-token forward: RSS {x['step'] / mib:.0f}, "
                  f"peak {x['step_peak'] / mib:.0f}; the highest RSS sampled in each phase of "
                  "the load:")  # fmt: skip
            for at, rss in x["phases"].items():
                print(f"    {rss / mib:6.0f} MiB  {at}")
    one = rows[1][0]
    worst = max(rows[2], key=lambda x: x["peak"])
    row = dict(layers=layers, size=size, held1=one["held"], held2=worst["held"],
               before1=one["rss0"], before2=worst["rss0"], peak1=one["peak"], peak2=worst["peak"],
               growth=(worst["peak"] - worst["rss0"]) / (one["peak"] - one["rss0"]),
               load=os.getloadavg()[0])  # fmt: skip
    print(f"peak RSS per rank / single process: {worst['peak'] / one['peak']:.2f}x; the load's "
          f"growth: {row['growth']:.2f}x; tensors held: {worst['held'] / one['held']:.2f}x; "
          f"load average {row['load']:.1f}", flush=True)  # fmt: skip
    return row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--layers", default="2", help="a size or a list: 2,4,8")
    p.add_argument("--vocab", type=int, default=None,
                   help="default 128256 for llama3-8b, else 32000")  # fmt: skip
    p.add_argument("--folder", type=Path, default=Path("/tmp/mx-ep-rss"))
    p.add_argument("--model", choices=tuple(WIDTHS), default="gpt-oss",
                   help="llama: bench/probes/tp_decode.py's TinyLlama-wide MXFP4 checkpoint; "
                        "llama3-8b: Llama-3-8B's widths (both tensor parallel only)")  # fmt: skip
    args = p.parse_args()
    if args.vocab is None:
        args.vocab = 128256 if args.model == "llama3-8b" else 32000
    table = [one_size(args, int(n)) for n in args.layers.split(",")]
    mib = 2**20
    print(f"\n{WIDTHS[args.model]} widths, vocab {args.vocab}; per rank (the larger of the 2) "
          "over 1 process:")  # fmt: skip
    print(
        "| layers | checkpoint MiB | held 1 process / rank MiB | held ratio | RSS before "
        "1 / rank MiB | peak at load 1 / rank MiB | peak ratio | growth ratio | load avg |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in table:
        print(f"| {r['layers']} | {r['size'] / mib:.0f} | {r['held1'] / mib:.0f} / "
              f"{r['held2'] / mib:.0f} | {r['held2'] / r['held1']:.2f}x | "
              f"{r['before1'] / mib:.0f} / {r['before2'] / mib:.0f} | {r['peak1'] / mib:.0f} / "
              f"{r['peak2'] / mib:.0f} | **{r['peak2'] / r['peak1']:.2f}x** | "
              f"{r['growth']:.2f}x | {r['load']:.1f} |")  # fmt: skip


if __name__ == "__main__":
    main()

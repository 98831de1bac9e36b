"""On paper, past one machine: bytes each rank sends per token per layer for
tensor parallel (TP) and expert parallel (EP), and the decode time per token
they imply over Ethernet against the memory-bound compute time per rank
(docs/scaling-out.md; issue 56, item 5).

    python bench/probes/scaling_out.py [--mem-gbs 100] [--latency-us 25] [--act-bytes 4]

Prints the page's tables (Markdown).  Every number is arithmetic on the
stated model configs and assumptions (:data:`MODELS`, the options); nothing
is measured here.

Assumptions (each an option or a field below):

* decode is memory-bound: a rank's time for a token is the weight bytes it
  reads for that token over the machine's memory bandwidth (``--mem-gbs``,
  sustained, per machine; one rank per machine); the KV cache's reads (short
  context) and the arithmetic are left out;
* an all-reduce of ``S`` bytes over ``N`` ranks is the ring: each rank sends
  ``2 (N - 1) / N * S`` bytes in ``2 (N - 1)`` messages one after another,
  each paying the per-message latency (``--latency-us``, TCP over Ethernet
  through gloo: 10-50 us), plus the bytes over the link's bandwidth; an
  all-gather of ``S`` bytes in all sends ``(N - 1) / N * S`` bytes in
  ``N - 1`` messages;
* activations travel as ``--act-bytes`` per element (4: f32, what the
  models here run; 2: bf16);
* TP (Megatron): attention by heads, each expert's intermediate rows split,
  ``lm_head`` by vocabulary rows; two all-reduces of ``H`` per layer (after
  attention and after the MoE) and one all-gather of the logits per token;
  each rank reads ``1 / N`` of every weight;
* EP (as ``mlir_mx.torch.distributed.shard_experts`` builds it): attention,
  router, shared experts and ``lm_head`` replicated (every rank reads them
  all), routed experts split into ``N`` contiguous ranges; one all-reduce
  per layer: ``(k, H)`` per token with ``combine="exact"`` (bit for bit the
  single process), ``H`` with ``combine="sum"``; a layer waits for its most
  loaded rank: the expected largest number of the token's ``k`` experts
  that fall in one rank's range (uniform routing; :func:`expected_max_load`);
* EP+TP: EP's experts with TP's attention, shared experts and ``lm_head``
  (``H`` all-reduced after attention, the experts' combine, the logits
  gathered).
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from functools import cache

MX4 = 4.25 / 8  # bytes per MXFP4 weight (4-bit codes, one E8M0 scale per 32)


@dataclass(frozen=True)
class Model:
    """What a token reads and sends; params in weights, bytes per weight."""

    name: str
    layers: int
    hidden: int
    experts: int
    top_k: int
    expert_params: int  # one routed expert: gate, up, down
    expert_bytes: float
    attn_params: int  # one layer's attention projections
    attn_bytes: float
    shared_params: int  # one layer's shared experts (0: none)
    shared_bytes: float
    vocab: int
    head_bytes: float  # lm_head's bytes per weight
    source: str

    def total_gb(self) -> float:
        per_layer = (self.experts * self.expert_params * self.expert_bytes
                     + self.attn_params * self.attn_bytes
                     + self.shared_params * self.shared_bytes)  # fmt: skip
        return (self.layers * per_layer + 2 * self.vocab * self.hidden * self.head_bytes) / 1e9


H_OSS, Q_OSS, KV_OSS = 2880, 64 * 64, 8 * 64
GPT_OSS_120B = Model(
    name="gpt-oss-120b", layers=36, hidden=H_OSS, experts=128, top_k=4,
    expert_params=3 * H_OSS * 2880, expert_bytes=MX4,
    attn_params=H_OSS * (2 * Q_OSS + 2 * KV_OSS), attn_bytes=2.0,
    shared_params=0, shared_bytes=0.0, vocab=201088, head_bytes=2.0,
    source="transformers 5.24 GptOssConfig() defaults (the 120b's shape): 36 layers, hidden "
    "2880, intermediate 2880, 128 experts top-4, 64 q / 8 kv heads of 64, vocab 201088; "
    "experts MXFP4, the rest bf16 as the checkpoint stores them",
)  # fmt: skip
H_DS, HEADS_DS, DH_DS, QR_DS, OR_DS, OG_DS = 4096, 64, 512, 1024, 1024, 8
DEEPSEEK_V4_FLASH = Model(
    name="DeepSeek-V4-Flash", layers=43, hidden=H_DS, experts=256, top_k=6,
    expert_params=3 * H_DS * 2048, expert_bytes=MX4,
    # q: d -> q_lora -> heads x head_dim; kv: d -> head_dim (1 kv head);
    # o: heads x head_dim -> o_groups x o_lora (grouped) -> d
    attn_params=(H_DS * QR_DS + QR_DS * HEADS_DS * DH_DS + H_DS * DH_DS
                 + HEADS_DS * DH_DS * OR_DS + OG_DS * OR_DS * H_DS),
    attn_bytes=1.0, shared_params=3 * H_DS * 2048, shared_bytes=1.0,
    vocab=129280, head_bytes=2.0,
    source="NVIDIA NeMo AutoModel's DeepseekV4Config defaults (DeepSeek-V4-Flash): 43 layers, "
    "hidden 4096, moe_intermediate 2048, 256 routed experts top-6 + 1 shared, 64 heads of "
    "512, 1 kv head, q_lora 1024, o_lora 1024 in 8 groups, vocab 129280; routed experts "
    "MXFP4, attention and the shared expert FP8 (1 byte), lm_head bf16; the indexer, "
    "compressor and hyper-connections left out (about 5 % of the active weights)",
)  # fmt: skip
MODELS = (GPT_OSS_120B, DEEPSEEK_V4_FLASH)
SCHEMES = ("TP", "EP", "EP+TP")
RANKS = (2, 4, 8, 16)
LINKS_GBIT = (25, 100)


@cache
def expected_max_load(experts: int, top_k: int, ranks: int) -> float:
    """The expected largest number of a token's ``top_k`` distinct experts
    (chosen uniformly) that fall in one of ``ranks`` equal contiguous ranges:
    the multivariate hypergeometric distribution, summed rank by rank."""
    per = experts // ranks
    total = math.comb(experts, top_k)

    @cache  # (ranks left, experts left, the most so far): a few hundred states
    def walk(rank: int, left: int, worst: int) -> float:
        if rank == ranks:
            return worst if left == 0 else 0.0
        return sum(math.comb(per, c) * walk(rank + 1, left - c, max(worst, c))
                   for c in range(min(per, left) + 1))  # fmt: skip

    return walk(0, top_k, 0) / total


#: The all-reduce's message count: "ring" (``2 (N - 1)``), "tree" (recursive
#: halving and doubling, ``2 log2 N``: the same bytes in fewer, larger steps)
#: or "exchange" (one ``all_to_all``: every rank sends its whole ``S`` to
#: each other rank at once, ``(N - 1) S`` bytes in one round, and sums what
#: it gets: what ``mlir_mx.torch.distributed`` runs by default,
#: ``set_decode_collective``).
ALGORITHM = ["ring"]


def allreduce(size: float, ranks: int) -> tuple[float, int]:
    """(bytes each rank sends, messages in sequence) for an all-reduce of ``size``."""
    if ALGORITHM[0] == "exchange":
        return (ranks - 1) * size, 1
    steps = 2 * (ranks - 1) if ALGORITHM[0] == "ring" else 2 * math.ceil(math.log2(ranks))
    return 2 * (ranks - 1) / ranks * size, steps


def allgather(size: float, ranks: int) -> tuple[float, int]:
    """(bytes each rank sends, messages in sequence) for an all-gather of
    ``size`` in all: the ring's ``N - 1`` steps, the exchange's one."""
    return (ranks - 1) / ranks * size, 1 if ALGORITHM[0] == "exchange" else ranks - 1


def layer_collectives(model: Model, scheme: str, ranks: int, tokens: int, act: int,
                      combine: str = "exact") -> list[tuple[float, int]]:  # fmt: skip
    """The collectives of one layer for ``tokens`` tokens: (bytes sent, messages) each."""
    h = tokens * model.hidden * act
    experts = allreduce(model.top_k * h if combine == "exact" else h, ranks)
    if scheme == "TP":
        return [allreduce(h, ranks), allreduce(h, ranks)]
    if scheme == "EP":
        return [experts]
    return [allreduce(h, ranks), experts]


def sent_per_token_layer(model, scheme, ranks, tokens=1, act=4, combine="exact") -> float:
    """Bytes each rank sends per token per layer."""
    return sum(b for b, _ in layer_collectives(model, scheme, ranks, tokens, act, combine)) / tokens


def compute_ms(model: Model, scheme: str, ranks: int, mem_gbs: float) -> float:
    """Memory-bound decode time per token of the slowest rank, ms."""
    attn = model.attn_params * model.attn_bytes
    shared = model.shared_params * model.shared_bytes
    head = model.vocab * model.hidden * model.head_bytes
    expert = model.expert_params * model.expert_bytes
    if scheme == "TP":
        per_layer = (attn + shared + model.top_k * expert) / ranks
        head /= ranks
    else:
        load = expected_max_load(model.experts, model.top_k, ranks)
        split = ranks if scheme == "EP+TP" else 1
        per_layer = (attn + shared) / split + load * expert
        head /= split
    return (model.layers * per_layer + head) / (mem_gbs * 1e9) * 1e3


def comm_ms(model, scheme, ranks, gbit, latency_us, act=4, tokens=1, combine="exact") -> float:
    """Communication time per token, ms: every layer's collectives plus the
    logits' all-gather (TP, EP+TP), each message paying the latency."""
    if ranks == 1:
        return 0.0
    calls = model.layers * layer_collectives(model, scheme, ranks, tokens, act, combine)
    if scheme != "EP":
        calls = [*calls, allgather(tokens * model.vocab * act, ranks)]
    link = gbit * 1e9 / 8
    seconds = sum(b / link + m * latency_us * 1e-6 for b, m in calls)
    return seconds / tokens * 1e3


def decode_ms(model, scheme, ranks, gbit, mem_gbs, latency_us, act=4) -> float:
    return compute_ms(model, scheme, ranks, mem_gbs) + comm_ms(
        model, scheme, ranks, gbit, latency_us, act
    )


def _bytes_table(model: Model, act: int, prompt: int) -> list[str]:
    rows = [f"| bytes sent per rank per token per layer ({model.name}) | " +
            " | ".join(f"N={n}" for n in RANKS) + " |",
            "|---|" + "---|" * len(RANKS)]  # fmt: skip
    for scheme in SCHEMES:
        for combine in ("exact", "sum") if scheme != "TP" else ("exact",):
            label = scheme if scheme == "TP" else f"{scheme} ({combine})"
            cells = [f"{sent_per_token_layer(model, scheme, n, 1, act, combine):,.0f}"
                     for n in RANKS]  # fmt: skip
            rows.append(f"| {label} | " + " | ".join(cells) + " |")
    rows.append(f"| (prefill: the same per token for a {prompt}-token prompt; "
                "the latency is paid once per prompt, not per token) |" + " |" * len(RANKS))
    return rows


def _time_table(model: Model, mem_gbs: float, latency_us: float, act: int) -> list[str]:
    one = compute_ms(model, "TP", 1, mem_gbs)
    rows = [f"| {model.name}, decode ms/token (1 machine: {one:.1f} ms; "
            f"{model.total_gb():.0f} GB of weights) | link | " +
            " | ".join(f"N={n}" for n in RANKS) + " |",
            "|---|---|" + "---|" * len(RANKS)]  # fmt: skip
    for scheme in SCHEMES:
        cells = [f"{compute_ms(model, scheme, n, mem_gbs):.1f}" for n in RANKS]
        rows.append(f"| {scheme}: compute per rank | | " + " | ".join(cells) + " |")
        for gbit in LINKS_GBIT:
            cells = []
            for n in RANKS:
                c = comm_ms(model, scheme, n, gbit, latency_us, act)
                t = compute_ms(model, scheme, n, mem_gbs) + c
                cells.append(f"{t:.1f} ({c:.1f} comm, {one / t:.2f}x)")
            rows.append(f"| {scheme}: total | {gbit} Gb/s | " + " | ".join(cells) + " |")
    return rows


def _prefill_table(model: Model, latency_us: float, act: int, prompt: int) -> list[str]:
    rows = [f"| {model.name}, prefill of {prompt} tokens: comm ms per token | link | " +
            " | ".join(f"N={n}" for n in RANKS) + " |",
            "|---|---|" + "---|" * len(RANKS)]  # fmt: skip
    for scheme in SCHEMES:
        for gbit in LINKS_GBIT:
            cells = [f"{comm_ms(model, scheme, n, gbit, latency_us, act, prompt):.2f}"
                     for n in RANKS]  # fmt: skip
            rows.append(f"| {scheme} (exact) | {gbit} Gb/s | " + " | ".join(cells) + " |")
    return rows


def crossover(model: Model, scheme: str, gbit: float, mem_gbs: float, latency_us: float,
              act: int = 4) -> int:  # fmt: skip
    """The rank count of :data:`RANKS` (or 1) with the least decode time."""
    times = {1: compute_ms(model, scheme, 1, mem_gbs)}
    times |= {n: decode_ms(model, scheme, n, gbit, mem_gbs, latency_us, act) for n in RANKS}
    return min(times, key=times.get)


def tables(mem_gbs=100.0, latency_us=25.0, act=4, prompt=128) -> str:
    out = [f"Assumed: {mem_gbs:g} GB/s memory per machine, {latency_us:g} us per message, "
           f"{act}-byte activations, {ALGORITHM[0]} all-reduce.", ""]  # fmt: skip
    for model in MODELS:
        out += [f"{model.name}: {model.source}.", ""]
        out += _bytes_table(model, act, prompt) + [""]
        out += _time_table(model, mem_gbs, latency_us, act) + [""]
        out += _prefill_table(model, latency_us, act, prompt) + [""]
        best = {s: crossover(model, s, LINKS_GBIT[0], mem_gbs, latency_us, act) for s in SCHEMES}
        out += [f"Fastest decode at {LINKS_GBIT[0]} Gb/s ({model.name}): " +
                ", ".join(f"{s} on {n} machine{'s' * (n > 1)}" for s, n in best.items()), ""]
    return "\n".join(out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mem-gbs", type=float, default=100.0, help="memory GB/s per machine")
    p.add_argument("--latency-us", type=float, default=25.0, help="latency per message, us")
    p.add_argument("--act-bytes", type=int, default=4, choices=(2, 4), help="bytes/activation")
    p.add_argument("--algorithm", default="ring", choices=("ring", "tree", "exchange"),
                   help="the all-reduce's messages: ring 2(N-1), tree 2 log2 N, exchange 1")  # fmt: skip
    args = p.parse_args(argv)
    ALGORITHM[0] = args.algorithm
    print(tables(args.mem_gbs, args.latency_us, args.act_bytes))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

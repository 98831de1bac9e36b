"""``mx-bench``: our MX matmul kernels side by side with numpy f32 (BLAS), the
ml_dtypes emulation, torch f32/bf16, ggml Q8_0/MXFP4 and OpenVINO's MXFP4
MatMul, in one process and one run, at each thread count.

Examples::

    mx-bench --quick                           # tiny shapes, seconds; a summary line at the end
    mx-bench                                   # the default shapes at 1 thread and all cores
    mx-bench --shapes 1x4096x4096 --threads 2 --formats f8E4M3FN,f4E2M1FN
    mx-bench --quick --out /tmp/r              # tiny shapes, seconds (the test suite runs this)
    mx-bench --mlp                             # the 4096 -> 14336 -> 4096 MXFP4 MLP (GGUF weights)
    mx-bench --quantize                        # f32 8192 x 8192 -> MX (every format) and back
    mx-bench --model --layers 8                # a Llama of TinyLlama-1.1B's shape, end to end
    mx-bench --emulate avx2 --shapes 1x8192x8192   # every row as on an AVX2-only CPU

Every result is checked against the oracle before it is timed; a wrong result
prints ``mx-bench: error: WRONG RESULT: ...`` and exits 1 (no results file).
One benchmark a run (the matmul shapes, ``--mlp``, ``--quantize`` or
``--model``).  A bad command line (a bad value, two benchmarks, an option the
chosen one ignores, a size larger than the memory this process may use) is
one ``mx-bench: error: ...`` line and exit status 2, before any work.
Writes ``mx-bench-<date>-<tag>.json`` and ``.md`` under ``--out`` (default: a
user folder, :func:`mlir_mx_bench.console.default_out_dir`).  torch, ggml-python
and openvino/nncf are optional (extras ``torch`` and ``bench``, docs/bench.md);
each is skipped with a note when absent.
"""

from __future__ import annotations

import json
import re
import shlex
import sys

from mlir_mx.tools.driver import (
    ArgParser,
    ToolError,
    UsageError,
    check_fits,
    check_out_dir,
    tool_main,
)
from mlir_mx_bench.models import busy
from mlir_mx_bench.options import element_spec, positive_ints, thread_counts

PROG = "mx-bench"
DEFAULT_SHAPES = "1x8192x8192,8x4096x4096,256x4096x4096"
QUICK_SHAPES = "1x64x128,5x40x96"
BLOCK_SIZE = 32


def _add_min_host(p: ArgParser) -> None:
    p.add_argument(
        "--min-host",
        type=float,
        metavar="SHARE",
        help="time again (up to 3 times) a timing around which the cores gave less than SHARE "
        "of their FMA peak: a 5 ms probe before and after each timing catches a busy neighbour "
        "on the host, which /proc/stat does not show (default 0.85; 0: no probes)",
    )


def _parser() -> ArgParser:
    p = ArgParser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--shapes",
        help=f"comma-separated MxNxK (default {DEFAULT_SHAPES}; --quick: {QUICK_SHAPES})",
    )
    p.add_argument(
        "--formats",
        help="comma-separated MX element formats (f8E4M3FN; --quantize: all six; or aliases "
        "such as mxfp4), or A:B pairs (A the activations' format, B the weights', e.g. "
        "i8:f4E2M1FN for W4A8)",
    )
    p.add_argument("--threads", help="comma-separated thread counts (default: 1 and all cores)")
    p.add_argument("--quick", action="store_true", help="tiny shapes, few samples (seconds)")
    p.add_argument("--samples", type=int, help="timed samples per method (9; --quick: 3)")
    p.add_argument("--out", help="results directory (default $XDG_DATA_HOME/mlir-mx/bench-results, "
                   "else ~/.local/share/mlir-mx/bench-results; the repository's: --out bench/results)")
    p.add_argument("--tag", help="results file tag (default: 'default', or 'quick')")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    _add_min_host(p)
    _sized(
        p,
        "mlp",
        "run the MXFP4 MLP benchmark (d -> f -> d; default {}; --quick: {}) "
        "instead of the matmul shapes",
    )
    p.add_argument("--mlp-tokens", help="--mlp: the MLP's batch sizes (1,128)")
    _sized(
        p,
        "quantize",
        "run the conversion benchmark on an R x C f32 matrix (default {}; "
        "--quick: {}): ours at each thread count, the oracle, ggml, torchao",
    )
    p.add_argument(
        "--model",
        nargs="?",
        const="llama",
        choices=("llama", "gpt-oss"),
        help="run the end-to-end Llama benchmark (mlir_mx.torch: torch f32/bf16, torchao, "
        "ours MXFP8/MXFP4; needs torch and transformers) instead of the matmul shapes; "
        "--model gpt-oss: a gpt-oss of gpt-oss-20b's shape loaded from an MXFP4 checkpoint "
        "file (transformers f32/bf16 vs ours; needs accelerate too)",
    )
    p.add_argument(
        "--layers", type=int,
        help="--model: decoder layers of TinyLlama-1.1B's shape (22); gpt-oss: of gpt-oss-20b's (4)",
    )
    p.add_argument(
        "--rows",
        help="--model: comma-separated rows to run, of f32,bf16,torchao,mxfp8,mxfp4,mxfp4-i8,"
        "mxfp4-fused,mxfp4-i8-fused,mxfp4-bf16,mxfp4-bf16-fused (all)",
    )
    p.add_argument(
        "--profile",
        nargs="?",
        type=int,
        const=8,
        metavar="STEPS",
        help="--model: a per-token breakdown of each row's decode (time in the linear layers, "
        "their bytes and GB/s, torch's other ops, Python) over STEPS more decode steps (8)",
    )
    p.add_argument(
        "--env-row",
        action="append",
        metavar="VAR=VALUE",
        help="--model: run the rows again with VAR=VALUE set for their processes, as separate "
        "rows labelled [VAR=VALUE] (every other row runs in the environment as it is); repeatable",
    )
    busy.add_busy_argument(p)
    p.add_argument(
        "--emulate",
        choices=("avx2",),
        help="run every row as on an AVX2-only CPU: our kernels masked, numpy's OpenBLAS, "
        "torch's ATen, MKL and oneDNN capped at AVX2 by their own variables (mx-bench runs "
        "again with them set; ggml rows need an AVX2 build of ggml-python)",
    )
    return p


#: The flags with an optional size: (metavar, separator, size, --quick size,
#: the dimensions that are multiples of the block size, what the value must be).
_SIZES = {
    "mlp": ("D,F", ",", "4096,14336", "128,256", (0, 1), "D,F, multiples of"),
    "quantize": ("RxC", "x", "8192x8192", "128x256", (1,), "RxC with C a multiple of"),
}


def _sized(p: ArgParser, name: str, help: str) -> None:
    """``--name [SIZE]``: a benchmark run with a default size when SIZE is left out."""
    metavar, _sep, size, quick, _blocked, _what = _SIZES[name]
    help = help.format(size, quick)
    p.add_argument(f"--{name}", nargs="?", const=size, metavar=metavar, help=help)


def _size(ns, name: str) -> tuple[int, int] | None:
    """The two integers of ``--name`` (its --quick size for the default one
    under --quick); None without the flag."""
    value = getattr(ns, name)
    if value is None:
        return None
    _metavar, sep, size, quick, blocked, what = _SIZES[name]
    text = quick if ns.quick and value == size else value
    vals = tuple(positive_ints(text.replace(sep, ","), f"--{name}", typed=text))
    if len(vals) != 2 or any(vals[i] % BLOCK_SIZE for i in blocked):
        raise UsageError(f"--{name}: expected {what} {BLOCK_SIZE}, got '{value}'")
    return vals


def _check_tag(tag: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9._-]+", tag):
        raise UsageError(f"--tag: use letters, digits, '.', '_' or '-', got '{tag}'")
    return tag


def _model_options(ns, argv: list[str]):
    from importlib.util import find_spec

    from mlir_mx_bench.models.llama.run import ModelOptions
    from mlir_mx_bench.models.workers import parse_env_setting

    missing = [m for m in ("torch", "transformers") if find_spec(m) is None]
    if missing:
        raise ToolError(
            f"--model needs {' and '.join(missing)}: pip install 'mlir-mx[torch]'"
        )
    if ns.model == "gpt-oss":
        return _gpt_oss_options(ns, argv)
    layers = ns.layers if ns.layers is not None else (2 if ns.quick else 22)
    if layers < 1:
        raise UsageError(f"--layers: must be positive, got {layers}")
    tag = _check_tag(ns.tag or ("quick-model" if ns.quick else f"model-{layers}l"))
    quick = dict(prompt=16, new_tokens=8, prefill_samples=1, probes=2, torchao_tokens=2,
                 config=dict(hidden_size=128, intermediate_size=256, num_attention_heads=4,
                             num_key_value_heads=2, vocab_size=512)) if ns.quick else {}  # fmt: skip
    names = {
        "f32": "torch f32",
        "bf16": "torch bf16",
        "torchao": "torchao MXFP4 (W+A, emulated)",
        "mxfp8": "ours MXFP8",
        "mxfp4": "ours MXFP4",
        "mxfp4-i8": "ours MXFP4, activations=i8",
        "mxfp4-fused": "ours MXFP4, fused",
        "mxfp4-i8-fused": "ours MXFP4, activations=i8, fused",
        "mxfp4-bf16": "ours MXFP4, bf16 model",
        "mxfp4-bf16-fused": "ours MXFP4, bf16 model, fused",
    }
    rows = None
    if ns.rows is not None:
        keys = [k.strip() for k in ns.rows.split(",")]
        bad = [k for k in keys if k not in names]
        if bad or not keys:
            raise UsageError(f"--rows: expected some of {','.join(names)}, got '{ns.rows}'")
        rows = [names[k] for k in keys]
    threads = thread_counts(ns.threads)
    check_fits(f"--layers {layers}", _model_bytes(layers, quick.get("config", {})))
    if ns.profile is not None and ns.profile < 1:
        raise UsageError(f"--profile: expected a positive number of steps, got {ns.profile}")
    try:
        env_rows = [parse_env_setting(e) for e in ns.env_row or ()]
    except ValueError as err:
        raise UsageError(f"--env-row: {err}") from None
    return ModelOptions(
        layers=layers,
        threads=threads,
        tag=tag,
        out=check_out_dir(ns.out),
        rows=rows,
        profile=ns.profile or 0,
        env_rows=env_rows,
        busy=busy.parse_busy(ns.busy),
        command=" ".join([PROG, *(shlex.quote(a) for a in argv)]),
        **quick,
    )


def _gpt_oss_options(ns, argv: list[str]):
    from importlib.util import find_spec

    from mlir_mx_bench.models.gpt_oss.run import GptOssOptions

    if find_spec("accelerate") is None:
        raise ToolError("--model gpt-oss needs accelerate (transformers' rows): pip install accelerate")
    for flag in ("rows", "profile", "env_row"):
        if getattr(ns, flag) is not None:
            raise UsageError(f"--{flag.replace('_', '-')} is not used by --model gpt-oss")
    layers = ns.layers if ns.layers is not None else (1 if ns.quick else 4)
    if layers < 1:
        raise UsageError(f"--layers: must be positive, got {layers}")
    tag = _check_tag(ns.tag or ("quick-gpt-oss" if ns.quick else f"gpt-oss-{layers}l"))
    quick = dict(prompt=16, new_tokens=4, prefill_samples=1, probes=2,
                 config=dict(hidden_size=128, intermediate_size=128, num_local_experts=4,
                             num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                             vocab_size=512)) if ns.quick else {}  # fmt: skip
    # f32 experts (the f32 row) and the f32 embedding and lm_head: what a row holds at least.
    h, i, e, v = 2880, 2880, 32, 201088
    check_fits(f"--layers {layers}", 4 * (layers * e * 3 * h * i + 2 * v * h) if not quick else 0)
    return GptOssOptions(
        layers=layers,
        threads=thread_counts(ns.threads),
        tag=tag,
        out=check_out_dir(ns.out),
        command=" ".join([PROG, *(shlex.quote(a) for a in argv)]),
        busy=busy.parse_busy(ns.busy),
        **quick,
    )


def _model_bytes(layers: int, config: dict) -> int:
    """The f32 weights of the model a row process builds (TinyLlama's shape
    with ``config`` over it): what each row holds at least."""
    from mlir_mx_bench.models.llama.worker import TINYLLAMA

    c = {**TINYLLAMA, **config}
    h, i, v = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    kv = h * c["num_key_value_heads"] // c["num_attention_heads"]
    return 4 * (layers * (2 * h * h + 2 * h * kv + 3 * h * i) + 2 * v * h)


#: The benchmarks, one a run, and the options each one uses (beside --threads,
#: --quick, --out, --tag and --quiet, which all do).
_MODES = {
    "--shapes": ("the matmul benchmark", ("--formats", "--samples", "--min-host")),
    "--mlp": ("the MLP benchmark", ("--samples", "--mlp-tokens")),
    "--quantize": ("the conversion benchmark", ("--formats", "--samples")),
    "--model": ("the model benchmark", ("--layers", "--rows", "--profile", "--env-row", "--busy")),
}


def _mode(ns) -> str:
    """The one benchmark asked for (``--shapes``, the default, ``--mlp``,
    ``--quantize`` or ``--model``); two of them, or an option the chosen
    one does not use, is a usage error (it would be ignored)."""
    given = [f for f in _MODES if getattr(ns, f[2:]) not in (None, False)]
    if len(given) > 1:
        raise UsageError(f"{given[0]} and {given[1]} are two benchmarks: choose one a run")
    mode = given[0] if given else "--shapes"
    what, uses = _MODES[mode]
    for flag in dict.fromkeys(f for _what, uses in _MODES.values() for f in uses):
        if getattr(ns, flag[2:].replace("-", "_")) is not None and flag not in uses:
            users = " or ".join(m for m, (_, u) in _MODES.items() if flag in u)
            raise UsageError(f"{flag} is not used by {what} ({mode}), only with {users}")
    return mode


def _check_memory(ns, shapes, mlp, quantize, tokens) -> None:
    """Refuse sizes this machine cannot hold, before allocating (a lower bound
    of what each benchmark keeps: f32 operands, dequantized copies, the f64
    oracle)."""
    texts = (ns.shapes or "").split(",")
    for text, sh in zip(texts, shapes, strict=False):
        check_fits(f"--shapes {text.strip()}", 8 * (sh.M * sh.K + sh.K * sh.N) + 12 * sh.M * sh.N)
    if mlp:
        d, f = mlp
        check_fits(f"--mlp {ns.mlp}", 48 * d * f + 32 * max(tokens) * (d + f))
    if quantize:
        check_fits(f"--quantize {ns.quantize}", 12 * quantize[0] * quantize[1])


def _parse(argv: list[str]):
    """Options, a ``--help`` text, or (``--emulate`` not yet applied) the run
    again in a child process with its variables: every check is made here first."""
    from mlir_mx_bench.emulate import Reexec, active

    parsed = _parse_options(argv)
    if isinstance(parsed, str):
        return parsed
    level = _parser().parse(argv).emulate
    if level is not None and active() != level:
        return Reexec(level, argv)
    return parsed


def _parse_options(argv: list[str]):
    from mlir_mx.numerics import ELEMENT_FORMATS
    from mlir_mx.roofline.variants import parse_shape
    from mlir_mx_bench.console import default_out_dir
    from mlir_mx_bench.loop import Options

    ns = _parser().parse(argv)
    if isinstance(ns, str):  # --help
        return ns
    ns.out = ns.out or default_out_dir()
    mode = _mode(ns)
    if mode == "--model":
        return _model_options(ns, argv), ns.quiet
    try:
        shapes = (
            []
            if mode != "--shapes"
            else [
                parse_shape(s, BLOCK_SIZE)
                for s in (ns.shapes or (QUICK_SHAPES if ns.quick else DEFAULT_SHAPES)).split(",")
            ]
        )
        default_formats = ",".join(ELEMENT_FORMATS) if ns.quantize else "f8E4M3FN"
        formats = [element_spec(f.strip()) for f in (ns.formats or default_formats).split(",")]
    except (ValueError, TypeError) as err:
        raise UsageError(f"{err}") from None
    mlp, quantize = _size(ns, "mlp"), _size(ns, "quantize")
    tokens = tuple(positive_ints(ns.mlp_tokens or "1,128", "--mlp-tokens"))
    tag = _check_tag(
        ns.tag
        or ("quick" if ns.quick else "default")
        + {"--shapes": "", "--model": ""}.get(mode, "-" + mode[2:])
    )
    samples = ns.samples if ns.samples is not None else (3 if ns.quick else 9)
    if samples < 3:
        raise UsageError(f"--samples: at least 3, got {samples}")
    threads = thread_counts(ns.threads)
    min_host = 0.85 if ns.min_host is None else ns.min_host
    if not 0.0 <= min_host <= 1.0:
        raise UsageError(f"--min-host: a share from 0 to 1, got {ns.min_host:g}")
    _check_memory(ns, shapes, mlp, quantize, tokens)
    opts = Options(
        shapes=shapes,
        formats=formats,
        threads=threads,
        command=" ".join([PROG, *(shlex.quote(a) for a in argv)]),
        tag=tag,
        out=check_out_dir(ns.out),  # before the run: a bad --out costs no benchmark time
        quick=ns.quick,
        block_size=BLOCK_SIZE,
        samples=samples,
        mlp=mlp,
        mlp_tokens=tokens,
        quantize=quantize,
        min_host=min_host,
    )
    if ns.quick:
        opts.target_s, opts.budget_s, opts.settle_s, opts.retries = 0.002, 0.2, 0.0, 0
    return opts, ns.quiet


def run(parsed) -> int:
    """Run the benchmark with parsed options; exit code."""
    from mlir_mx_bench.cases import BenchFailure
    from mlir_mx_bench.emulate import Reexec

    if isinstance(parsed, Reexec):
        return parsed.run()
    from mlir_mx_bench.console import report
    from mlir_mx_bench.loop import run_bench
    from mlir_mx_bench.results import write_results

    opts, quiet = parsed
    from mlir_mx.host import default_threads

    cpus = default_threads()
    say = (lambda s: None) if quiet else (lambda s: print(s, flush=True))
    if type(opts).__name__ == "ModelOptions":
        return _run_model(opts, say)
    if type(opts).__name__ == "GptOssOptions":
        return _run_gpt_oss(opts, say)
    if max(opts.threads) > cpus:
        say(f"note: {max(opts.threads)} threads on {cpus} CPUs: oversubscribed")
    try:
        record = run_bench(opts, say)
    except BenchFailure as err:
        raise ToolError(f"{err}") from None
    js, md = _written(lambda: write_results(record, opts.out), opts.out)
    report(record, f"wrote {js} and {md}", opts.quick, say)
    return 0


def _written(write, out):
    """``write()``; an ``OSError`` (a full disk, a folder that is a file)
    becomes the tool's one-line error.  The files are written atomically,
    so none is left half written."""
    try:
        return write()
    except OSError as err:
        raise ToolError(f"cannot write the results to '{out}': {err.strerror or err}") from None


def _run_model(opts, say) -> int:
    from mlir_mx_bench.models.llama.report import write_model_results
    from mlir_mx_bench.models.llama.run import run_model

    record = run_model(opts, say)
    js, md = _written(lambda: write_model_results(record, opts.out), opts.out)
    print(f"wrote {js} and {md}")
    failed = [
        r["spec"]["row"]
        for r in (*record["references"], *record["rows"])
        if "error" in r or r.get("correct") is False
    ]
    if failed:
        raise ToolError(f"WRONG RESULT or failed row(s): {', '.join(failed)} (see {md})")
    return 0


def _run_gpt_oss(opts, say) -> int:
    from mlir_mx.files import write_text
    from mlir_mx_bench.models.gpt_oss.run import gpt_oss_markdown, run_gpt_oss

    record = run_gpt_oss(opts, say)
    stem = opts.out / f"mx-bench-{record['date'][:10]}-{record['tag']}"

    def write() -> None:
        opts.out.mkdir(parents=True, exist_ok=True)
        text = gpt_oss_markdown(record)
        write_text(f"{stem}.json", json.dumps(record, indent=1) + "\n")
        write_text(f"{stem}.md", text)

    _written(write, opts.out)
    print(f"wrote {stem}.json and {stem}.md")
    failed = [r["spec"]["row"] for r in record["rows"] if "error" in r or r.get("correct") is False]
    if failed:
        raise ToolError(f"WRONG RESULT or failed row(s): {', '.join(failed)} (see {stem}.md)")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``mx-bench`` console script."""
    return tool_main(PROG, _parse, run, argv)


if __name__ == "__main__":
    sys.exit(main())

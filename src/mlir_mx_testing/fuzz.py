"""The mutation fuzzer of ``mx-opt``: seeded IR mutants through every configuration.

(Its command line also runs the other campaigns: the Runner misuse sweep, the
GGUF file fuzzer and its writer mode, the compile-cache fuzzer and the Linear
API suite.)

Case ``i`` of seed ``s`` takes a seed program of the corpus (the repo's lit
tests and examples, or the built-in seeds below), applies one to three
mutations drawn from ``random.Random(f"{s}:{i}")`` (token and line edits,
interesting numbers and types, splices of other programs, truncation) and
runs ``mx-opt`` in-process on it with one configuration of :data:`CONFIGS`
(the case index picks it, round robin).  The rule every input must obey
(``docs/testing.md``): exit 0 with output, or exit 1 with a located
``<stdin>:line:col: error:`` diagnostic; never a traceback, a signal, a hang,
or exit 1 without saying why (a bad flag is exit 2, but the configurations'
flags are all valid).

Run it::

    python -m mlir_mx_testing.fuzz --cases 10000 --api-calls 2000 --seed 1 \\
        --gguf-files 5000 --gguf-writes 1000 --cache-entries 200 --linear-calls 2000
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import random
import re
import sys
import traceback
from functools import cache
from pathlib import Path

from mlir_mx.numerics.formats import ELEMENT_FORMATS, SCALE_TYPE
from mlir_mx_testing.campaign import FINDINGS, Outcome, run_campaign

__all__ = ["CONFIGS", "corpus", "mutate", "case", "main"]

#: mx-opt flags of each configuration (the mutant is read from standard input).
CONFIGS: dict[str, list[str]] = {
    "canonicalize": ["--canonicalize"],
    "mx-to-linalg{blocked}": ["--mx-to-linalg=matmul-lowering=blocked"],
    "mx-to-linalg{fused}": ["--mx-to-linalg=matmul-lowering=fused"],
    "bufferize": [
        "--mx-to-linalg",
        "--convert-elementwise-to-linalg",
        "--one-shot-bufferize=bufferize-function-boundaries=1",
    ],
    "mx-pin-map-constants": ["--mx-to-linalg=matmul-lowering=fused", "--mx-pin-map-constants"],
    "verify-diagnostics": ["--verify-diagnostics", "--split-input-file"],
}

_T = "!mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>"
#: Seeds used when the repository's lit tests are not at hand (an installed package).
BUILTIN_SEEDS = (
    f"""func.func @mm(%a: {_T}, %b: tensor<64x16xf32>, %c: tensor<32x16xf32>) -> tensor<32x16xf32> {{
  %0 = mx.block_matmul %a, %b, %c : {_T}, tensor<64x16xf32>, tensor<32x16xf32> -> tensor<32x16xf32>
  return %0 : tensor<32x16xf32>
}}
""",
    f"""!t = {_T}
func.func @qdq(%x: tensor<32x64xf32>, %a: f32) -> tensor<32x64xf32> {{
  %q = mx.quantize_block %x : tensor<32x64xf32> -> !t
  %s = mx.fold_scale %q, %a : !t, f32 -> !t
  %d = mx.dequantize_block %s : !t -> tensor<32x64xf32>
  return %d : tensor<32x64xf32>
}}
""",
)

_TOKENS = (
    "%0", "%arg0", "%t", ",", ":", "->", "<", ">", "(", ")", "{", "}", "[", "]", "=", "x",
    "?", "0", "-1", "1", "32", "4294967296", "99999999999999999999999", "0x7FC00000",
    "f32", "i8", "i1", "index", "f8E4M3FN", "f4E2M1FN", "f8E8M0FNU", "tensor<4xf32>",
    "!mx.tensor<", _T, "block_size = 0", "block_size = 7", "axis = 9", "axis = -1",
    "scale_type = f32", "mx.fold_scale", "mx.quantize_block", "mx.block_matmul",
    "mx.dequantize_block", "mx.foo", '"', '"mx.fold_scale"(', "//", "// -----", "\n", "\r\n",
    "#map", "loc(", 'loc("x.mlir":1:1)', "affine_set<(d0) : (d0 >= 0)>", "^bb1",
    "tensor<2x" + _T + ">", "{-#", "#-}", "dense<1.0>", "arith.constant", "scf.yield",
    "func.func @g() {", "return", "// expected-error {{x}}", "\t", "\x00", "\u00e9",
)  # fmt: skip
_NUMBERS = ("0", "1", "-1", "2", "3", "31", "33", "64", "65536", "2147483648", "-9223372036854775809", "1e39", "nan")
_TYPES = (
    "f32",
    "f16",
    "bf16",
    "i8",
    "i32",
    "i64",
    "index",
    *(f.name for f in ELEMENT_FORMATS.values() if not f.is_int),
    SCALE_TYPE,
    "i1",
    "none",
    "complex<f32>",
    "vector<4xf32>",
)


@cache
def corpus(root: str | None = None) -> tuple[str, ...]:
    """Seed programs: the repository's ``tests/lit/**/*.mlir`` and ``examples/*.mlir``
    (each up to 20 kB), else :data:`BUILTIN_SEEDS`."""
    base = Path(root) if root else Path(__file__).resolve().parents[2]
    files = sorted(base.glob("tests/lit/**/*.mlir")) + sorted(base.glob("examples/*.mlir"))
    texts = [f.read_text(errors="replace") for f in files if f.stat().st_size <= 20_000]
    return tuple(texts) or BUILTIN_SEEDS


def _token_spans(text: str) -> list[tuple[int, int]]:
    return [m.span() for m in re.finditer(r"[%@!#^]?[\w.$-]+|[^\s\w]", text)]


def _mutate_once(text: str, rng: random.Random, seeds) -> str:
    n = len(text)
    op = rng.randrange(10)
    lines = text.splitlines(keepends=True)
    if op == 0 and n:  # delete a span
        a = rng.randrange(n)
        return text[:a] + text[a + rng.randint(1, 20) :]
    if op == 1:  # insert a token
        a = rng.randint(0, n)
        return text[:a] + rng.choice(_TOKENS) + text[a:]
    if op in (2, 3, 4) and lines:  # duplicate / delete / swap lines
        i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
        if op == 2:
            lines.insert(j, lines[i])
        elif op == 3:
            del lines[i]
        else:
            lines[i], lines[j] = lines[j], lines[i]
        return "".join(lines)
    spans = _token_spans(text)
    if op == 5:  # replace a number
        nums = [s for s in spans if text[s[0] : s[1]].lstrip("-").isdigit()]
        if nums:
            a, b = rng.choice(nums)
            return text[:a] + rng.choice(_NUMBERS) + text[b:]
    if op == 6 and spans:  # replace a token by another token of the text
        (a, b), (c, d) = rng.choice(spans), rng.choice(spans)
        return text[:a] + text[c:d] + text[b:]
    if op == 7:  # replace a type
        found = [m.span() for m in re.finditer("|".join(map(re.escape, _TYPES)), text)]
        if found:
            a, b = rng.choice(found)
            return text[:a] + rng.choice(_TYPES) + text[b:]
    if op == 8:  # splice a line of another seed
        other = rng.choice(seeds).splitlines(keepends=True)
        if other:
            a = rng.randint(0, len(lines))
            return "".join(lines[:a] + [rng.choice(other)] + lines[a:])
    if n:  # truncate
        return text[: rng.randrange(n)]
    return rng.choice(_TOKENS)


def mutate(text: str, rng: random.Random, seeds=BUILTIN_SEEDS) -> str:
    """One to three random mutations of ``text``."""
    for _ in range(rng.randint(1, 3)):
        text = _mutate_once(text, rng, seeds)
    return text


def mutant(seed: int, index: int) -> tuple[str, str]:
    """(configuration name, IR text) of case ``index``."""
    seeds = corpus()
    rng = random.Random(f"{seed}:{index}")
    text = mutate(rng.choice(seeds), rng, seeds)
    names = list(CONFIGS)
    return names[index % len(names)], text


_LOCATED = re.compile(r"^<stdin>:\d+:\d+: error: ", re.M)


def case(seed: int, index: int) -> Outcome:
    """Run mutant ``index`` through ``mx-opt`` in-process and classify the result."""
    from mlir_mx.tools import mx_opt

    config, text = mutant(seed, index)
    out, err = io.StringIO(), io.StringIO()
    old_stdin = sys.stdin
    sys.stdin = io.StringIO(text)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = mx_opt.main(["-", *CONFIGS[config]])
    except BaseException as e:  # noqa: BLE001 - a traceback is the finding
        tb = "".join(traceback.format_exception(e))[-1500:]
        return Outcome(index, "traceback", config, tb, text)
    finally:
        sys.stdin = old_stdin
    stdout, stderr = out.getvalue(), err.getvalue()
    if "Traceback (most recent call last)" in stderr:
        return Outcome(index, "traceback", config, stderr[-1500:], text)
    if rc == 0:
        # --verify-diagnostics prints nothing when every piece failed as expected
        quiet_ok = bool(stdout.strip()) or config == "verify-diagnostics"
        return Outcome(index, "ok" if quiet_ok else "silent", config, "" if quiet_ok else "exit 0, no output", "" if quiet_ok else text)
    if rc != 1:
        return Outcome(index, "silent", config, f"exit code {rc}: {stderr[:300]}", text)
    if _LOCATED.search(stderr) or stderr.startswith("mx-opt: error: "):
        return Outcome(index, "rejected", config)
    if "loc(" in text and re.search(r"^<unknown>: error: ", stderr, re.M):
        # the input located the op itself, outside any file (loc("name"),
        # loc(unknown)): the diagnostic is where the input says, as in mlir-opt
        return Outcome(index, "rejected", config)
    return Outcome(index, "unlocated" if "error" in stderr else "silent", config, stderr[:500], text)


def main(argv=None) -> int:
    """``python -m mlir_mx_testing.fuzz``: every campaign (a count of 0 skips one)."""
    p = argparse.ArgumentParser(prog="python -m mlir_mx_testing.fuzz", description=__doc__.split("\n\n")[0])
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--cases", type=int, default=300, help="IR mutants (default 300)")
    p.add_argument("--api-calls", type=int, default=200, help="Runner calls (default 200)")
    p.add_argument("--gguf-files", type=int, default=300, help="mutated GGUF files (default 300)")
    p.add_argument(
        "--gguf-writes",
        type=int,
        default=100,
        help="write_gguf calls over a good file, often invalid (default 100)",
    )
    p.add_argument("--cache-entries", type=int, default=20, help="corrupted cache entries (default 20)")
    p.add_argument("--linear-calls", type=int, default=100, help="Linear/matmul calls (default 100)")
    p.add_argument(
        "--convert-calls",
        type=int,
        default=100,
        help="quantize/dequantize calls on random array layouts (default 100)",
    )
    p.add_argument(
        "--linear-options",
        default="{}",
        help='JSON keyword options of the Linear suite, e.g. \'{"value_range": "normal"}\'',
    )
    p.add_argument(
        "--state-dict-cases",
        type=int,
        default=0,
        help="MXLinear state_dict loads and pickles (needs torch; default 0)",
    )
    p.add_argument(
        "--checkpoint-cases",
        type=int,
        default=0,
        help="mutated gpt-oss MXFP4 checkpoints through from_pretrained (needs torch; default 0)",
    )
    p.add_argument("--timeout", type=float, default=120.0, help="seconds before a case is a hang")
    p.add_argument("--findings", help="directory to write the reproducer of each finding to")
    args = p.parse_args(argv)
    clean = True
    suites = (
        ("fuzz", args.cases),
        ("misuse", args.api_calls),
        ("gguf", args.gguf_files),
        ("gguf-write", args.gguf_writes),
        ("cache", args.cache_entries),
        ("linear", args.linear_calls),
        ("state-dict", args.state_dict_cases),
        ("convert", args.convert_calls),
        ("checkpoint", args.checkpoint_cases),
    )
    for suite, n in suites:
        if n <= 0:
            continue
        if suite in ("state-dict", "checkpoint") and importlib.util.find_spec("torch") is None:
            print(f"{suite}: skipped (needs torch: pip install 'mlir-mx[torch]')", flush=True)
            continue
        options = json.loads(args.linear_options) if suite == "linear" else None
        report = run_campaign(suite, args.seed, n, timeout=args.timeout, options=options)
        print(report.summary(), flush=True)
        clean &= report.clean
        if args.findings:
            out = Path(args.findings)
            out.mkdir(parents=True, exist_ok=True)
            for o in report.findings:
                (out / f"{suite}-{args.seed}-{o.index}.txt").write_text(
                    f"// {o.kind} [{o.config}]: {o.detail}\n{o.reproducer}"
                )
    print("findings: none" if clean else f"findings: yes ({', '.join(FINDINGS)} above)")
    return 0 if clean else 1


if __name__ == "__main__":
    sys.exit(main())

"""``mx-generate`` (``mlir_mx.torch.generate``) in a process of its own, on small
random checkpoints written here (a Llama converted on load, a gpt-oss-shaped
MXFP4 checkpoint; tokenizers built in-process, nothing downloaded): its
streamed text is ``model.generate``'s, it prints its figures, and a bad path or
option is one line and exit status 2."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="torch not installed (pip install 'mlir-mx[test]')")
pytest.importorskip("transformers", reason="transformers not installed (pip install 'mlir-mx[test]')")
pytest.importorskip("tokenizers", reason="tokenizers not installed (comes with transformers)")

import torch  # noqa: E402
from gpt_oss_cases import tiny_gpt_oss, write_gpt_oss_checkpoint  # noqa: E402

from mlir_mx.torch import from_pretrained, quantize_  # noqa: E402
from mlir_mx.torch.generate import main, prompt_ids  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
VOCAB = 256
#: A chat template of the tokenizer's words: the prompt between <s> and </s>,
#: then w5 as the assistant's turn.
CHAT = (
    "{% for m in messages %}<s> {{ m['content'] }} </s> {% endfor %}"
    "{% if add_generation_prompt %}w5{% endif %}"
)
PROMPT = "w7 w8 w9 w10"
FIGURES = {
    "load": r"^load: ([0-9.]+) s \(",
    "compile": r"^compile: ([0-9.]+) s \(.*warm-up ([0-9.]+) s$",
    "prefill": r"^prefill: (\d+) tokens in ([0-9.]+) s: ([0-9.]+) tokens/s$",
    "decode": r"^decode: (\d+) tokens in ([0-9.]+) s: ([0-9.]+) tokens/s \(median step",
}


def word_tokenizer(chat_template: str | None = None):
    """A word-level tokenizer of ``VOCAB`` words (``<unk> <s> </s> w3 ... w255``):
    every id decodes, words joined by spaces."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2} | {f"w{i}": i for i in range(3, VOCAB)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>"
    )
    if chat_template:
        fast.chat_template = chat_template
    return fast


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """``{"llama": a transformers Llama folder (f32, no chat template),
    "gpt-oss": a gpt-oss MXFP4 checkpoint with a chat template,
    "no-tokenizer": the Llama's folder without its tokenizer}``."""
    from transformers import LlamaConfig, LlamaForCausalLM

    root = tmp_path_factory.mktemp("generate")
    torch.manual_seed(0)
    config = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, vocab_size=VOCAB,
                         bos_token_id=1, eos_token_id=2)  # fmt: skip
    LlamaForCausalLM(config).eval().save_pretrained(root / "llama")
    LlamaForCausalLM(config).eval().save_pretrained(root / "no-tokenizer")
    word_tokenizer().save_pretrained(root / "llama")
    write_gpt_oss_checkpoint(tiny_gpt_oss(), root / "gpt-oss")
    word_tokenizer(CHAT).save_pretrained(root / "gpt-oss")
    return {name: root / name for name in ("llama", "gpt-oss", "no-tokenizer")}


def mx_generate(*args) -> subprocess.CompletedProcess:
    """``mx-generate ARGS`` (the module the script runs) with this tree's ``src``."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, "-m", "mlir_mx.torch.generate", *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)


def mx_generate_in_process(capsys, *args) -> subprocess.CompletedProcess:
    """``mx-generate ARGS`` as :func:`main` in this process, its status and
    output as :func:`mx_generate` gives them (torch's thread count restored
    after it: ``--threads`` sets it).  A process of its own costs an import of
    torch and transformers and the model's kernels loaded again: the
    converted Llama's run and ``test_bad_option_in_a_process`` keep one in
    the default suite, the in-process runs have a process twin (``slow``)."""
    threads = torch.get_num_threads()
    capsys.readouterr()
    try:
        rc = main([str(a) for a in args])
    finally:
        torch.set_num_threads(threads)
    out = capsys.readouterr()
    return subprocess.CompletedProcess(["mx-generate", *map(str, args)], rc, out.out, out.err)


#: Where a run goes: in this process by default, in a process of its own with
#: ``-m slow`` (the process itself is tested in the default suite by the runs
#: that take ``mx_generate`` alone).
WHERE = [pytest.param("process", marks=pytest.mark.slow), "in-process"]


def run_generate(where, capsys, *args) -> subprocess.CompletedProcess:
    return mx_generate(*args) if where == "process" else mx_generate_in_process(capsys, *args)


def figures(stderr: str) -> dict:
    found = {}
    for name, pattern in FIGURES.items():
        m = re.search(pattern, stderr, re.MULTILINE)
        assert m, f"no {name} line in:\n{stderr}"
        found[name] = [float(x) for x in m.groups()]
    return found


def expected_text(model, tokenizer, *, new_tokens: int, chat_template: bool) -> tuple[str, int]:
    """``model.generate``'s greedy text after the prompt (1 thread, as the
    command is run), and the prompt's token count."""
    ids = prompt_ids(tokenizer, PROMPT, chat_template)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.inference_mode():
            out = model.generate(ids, attention_mask=torch.ones_like(ids),
                                 max_new_tokens=new_tokens, do_sample=False)  # fmt: skip
    finally:
        torch.set_num_threads(threads)
    text = tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True)
    return text, ids.shape[1]


def check_run(proc, text: str, prompt_tokens: int) -> None:
    assert proc.returncode == 0, proc.stderr
    assert text.strip(), "the model generated no text to compare"
    assert proc.stdout == text + "\n"  # streamed, then the streamer's closing newline
    f = figures(proc.stderr)
    assert f["load"][0] > 0 and f["compile"][0] >= 0 and f["compile"][1] >= 0
    # a process of its own compiles (or loads from the run's disk cache) its
    # layers' kernels before the prompt: 0.24 s on a Zen 5 with them cached;
    # in this process (mx_generate_in_process) an earlier test may have left
    # them in memory.  (The warm-up's two tokens of a tiny model can print
    # 0.00 s even in a process of its own: session 63's Zen 5, kernels cached.)
    assert f["compile"][0] > 0 or proc.args[0] == "mx-generate", proc.stderr
    n, seconds, rate = f["prefill"]
    assert n == prompt_tokens and seconds > 0 and rate > 0
    steps, seconds, rate = f["decode"]
    assert steps >= 1 and seconds > 0 and rate > 0
    assert "Traceback" not in proc.stderr
    assert "loading [" not in proc.stderr and "precompiling [" not in proc.stderr  # not a terminal


def test_loading_bar_on_a_terminal(folders, capsys):
    """Where standard error is a terminal (show=True here), the bar is redrawn
    while the load runs and ends at 100 % on its own line."""
    import time

    from mlir_mx.torch.generate import LoadingBar

    with LoadingBar(folders["gpt-oss"], show=True) as bar:
        time.sleep(0.5)
    err = capsys.readouterr().err
    draws = err.split("\r")
    assert bar.total == (folders["gpt-oss"] / "model.safetensors").stat().st_size
    assert len(draws) >= 3 and all(d.startswith("mx-generate: loading [") for d in draws[1:])
    assert draws[-1].startswith("mx-generate: loading [" + "#" * 30 + "] 100 %") and err.endswith("\n")


def test_llama_converted_on_load_streams_generates_text(folders):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    proc = mx_generate(folders["llama"], "--prompt", PROMPT, "--max-new-tokens", 12,
                       "--threads", 1)  # fmt: skip
    model = AutoModelForCausalLM.from_pretrained(folders["llama"]).eval()
    quantize_(model, element="mxfp4")
    tok = AutoTokenizer.from_pretrained(folders["llama"])
    assert not tok.chat_template  # the prompt as it is
    text, n = expected_text(model, tok, new_tokens=12, chat_template=False)
    check_run(proc, text, n)
    assert "converted on load: quantize_: 15 nn.Linear layers" in proc.stderr


@pytest.mark.parametrize("where", WHERE)
def test_gpt_oss_checkpoint_with_chat_template(folders, capsys, where):
    from transformers import AutoTokenizer

    proc = run_generate(where, capsys, folders["gpt-oss"], "--prompt", PROMPT, "--max-new-tokens",
                        10, "--threads", 1)  # fmt: skip
    model = from_pretrained(folders["gpt-oss"])
    tok = AutoTokenizer.from_pretrained(folders["gpt-oss"])
    text, n = expected_text(model, tok, new_tokens=10, chat_template=True)
    assert n == len(PROMPT.split()) + 3  # <s> ... </s> w5: the template was applied
    check_run(proc, text, n)
    assert "MX weights as stored" in proc.stderr


@pytest.mark.parametrize("where", WHERE)
def test_gguf_file_runs_with_its_own_tokenizer(tmp_path, capsys, where):
    """A ``.gguf`` file (MXFP4 experts beside Q8_0/F16/F32 tensors) runs as
    ``from_pretrained`` loads it, with the tokenizer its metadata describes."""
    import warnings

    from gguf_cases import write_model_gguf
    from test_gguf_model import YARN, mixed_types

    from mlir_mx.torch import gguf_tokenizer

    path = tmp_path / "gpt-oss.gguf"
    write_model_gguf(tiny_gpt_oss(vocab_size=264, rope_parameters=YARN), path, mixed_types)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the Q8_0 tensors' dequantization warning
        proc = run_generate(where, capsys, path, "--prompt", PROMPT, "--max-new-tokens", 6,
                            "--threads", 1)  # fmt: skip
        model = from_pretrained(path)
    tok = gguf_tokenizer(path)
    text, n = expected_text(model, tok, new_tokens=6, chat_template=True)
    check_run(proc, text, n)
    assert "MX weights as stored" in proc.stderr


@pytest.mark.parametrize("where", WHERE)
def test_gpt_oss_w4a8_without_chat_template(folders, capsys, where):
    from transformers import AutoTokenizer

    proc = run_generate(where, capsys, folders["gpt-oss"], "--prompt", PROMPT, "--max-new-tokens",
                        8, "--threads", 1, "--activations", "i8", "--no-chat-template")  # fmt: skip
    model = from_pretrained(folders["gpt-oss"], activations="i8")
    tok = AutoTokenizer.from_pretrained(folders["gpt-oss"])
    text, n = expected_text(model, tok, new_tokens=8, chat_template=False)
    assert n == len(PROMPT.split())
    check_run(proc, text, n)


@pytest.mark.parametrize("where", WHERE)
def test_sampling_follows_the_seed(folders, capsys, where):
    """--temperature: sampled, from torch's seed --seed (set after the warm-up),
    as model.generate(do_sample=True) after torch.manual_seed."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    proc = run_generate(where, capsys, folders["llama"], "--prompt", PROMPT, "--max-new-tokens", 8,
                        "--threads", 1, "--temperature", 0.8, "--seed", 3)  # fmt: skip
    model = AutoModelForCausalLM.from_pretrained(folders["llama"]).eval()
    quantize_(model, element="mxfp4")
    tok = AutoTokenizer.from_pretrained(folders["llama"])
    ids = prompt_ids(tok, PROMPT, False)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        torch.manual_seed(3)
        with torch.inference_mode():
            out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=8,
                                 do_sample=True, temperature=0.8, top_p=1.0)  # fmt: skip
    finally:
        torch.set_num_threads(threads)
    check_run(proc, tok.decode(out[0, ids.shape[1]:], skip_special_tokens=True), ids.shape[1])


def test_checkpoint_that_does_not_load_is_one_line_exit_1(folders, tmp_path, capsys):
    """An MX checkpoint whose weights file is not safetensors: from_pretrained's
    one-line message, exit status 1 (the command line was right)."""
    import shutil

    bad = tmp_path / "bad"
    shutil.copytree(folders["gpt-oss"], bad)
    (bad / "model.safetensors").write_bytes(b"not a safetensors file")
    assert main([str(bad), "--prompt", "hi", "--max-new-tokens", "2"]) == 1
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("mx-generate:")]
    assert len(lines) == 1 and "model.safetensors" in lines[0], err
    assert "Traceback" not in err


def one_error_line(proc, *words) -> str:
    """The command failed with exit status 2 and one ``mx-generate: error:``
    line (other lines: only the environment's import noise), naming ``words``."""
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("mx-generate:")]
    assert len(lines) == 1 and lines[0].startswith("mx-generate: error: "), proc.stderr
    for w in words:
        assert w in lines[0]
    assert proc.stdout == ""
    return lines[0]


def one_error_line_in_process(capsys, argv, *words) -> str:
    """``main(argv)`` in this process: what :func:`one_error_line` checks of a
    process (status 2, one ``mx-generate: error:`` line naming ``words``, no
    output). A process of its own costs an import of torch and transformers
    (3-4 s of the default suite each); ``test_bad_option_in_a_process`` keeps
    one in the default suite, the two below run in a process too (``slow``)."""
    assert main([str(a) for a in argv]) == 2
    out = capsys.readouterr()
    assert "Traceback" not in out.err
    lines = [ln for ln in out.err.splitlines() if ln.startswith("mx-generate:")]
    assert len(lines) == 1 and lines[0].startswith("mx-generate: error: "), out.err
    for w in words:
        assert w in lines[0]
    assert out.out == ""
    return lines[0]


def test_missing_path_is_one_line(tmp_path, capsys):
    one_error_line_in_process(capsys, [tmp_path / "nowhere", "--prompt", "hi"], "no such file",
                              "nowhere")  # fmt: skip


def test_folder_without_tokenizer_says_what_is_missing(folders, capsys):
    one_error_line_in_process(capsys, [folders["no-tokenizer"], "--prompt", "hi"], "no tokenizer",
                              "tokenizer.json", str(folders["no-tokenizer"]))  # fmt: skip


@pytest.mark.slow
def test_missing_path_is_one_line_in_a_process(tmp_path):
    one_error_line(mx_generate(tmp_path / "nowhere", "--prompt", "hi"), "no such file", "nowhere")


@pytest.mark.slow
def test_folder_without_tokenizer_in_a_process(folders):
    proc = mx_generate(folders["no-tokenizer"], "--prompt", "hi")
    one_error_line(proc, "no tokenizer", "tokenizer.json", str(folders["no-tokenizer"]))


def test_bad_option_in_a_process(folders):
    proc = mx_generate(folders["llama"], "--prompt", "hi", "--activations", "i9")
    one_error_line(proc, "--activations", "i9")


@pytest.mark.parametrize(
    "args, words",
    [
        (["--max-new-tokens", "0"], ["--max-new-tokens", "1 or more"]),
        (["--max-new-tokens", "many"], ["--max-new-tokens", "many"]),
        (["--threads", "0"], ["--threads"]),
        (["--element", "fp5"], ["--element", "fp5"]),
        (["--temperature", "-1"], ["--temperature"]),
        (["--top-p", "0"], ["--top-p"]),
        (["--prompt", ""], ["--prompt"]),
        (["--element", "mxfp8"], ["--element", "as stored"]),  # an MX checkpoint: no conversion
    ],
)
def test_bad_options_are_one_line(folders, capsys, args, words):
    argv = [str(folders["gpt-oss"]), "--prompt", "hi", *args]
    assert main(argv) == 2
    out = capsys.readouterr()
    assert out.out == ""
    lines = out.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("mx-generate: error: "), out.err
    for w in words:
        assert w in lines[0]


def test_no_prompt_is_a_usage_error(folders, capsys):
    assert main([str(folders["llama"])]) == 2
    assert "--prompt" in capsys.readouterr().err


def test_console_script_is_declared():
    """``mx-generate`` runs this module's ``main`` (``[project.scripts]``; read
    as text: tomllib is Python 3.11's, and we support 3.10)."""
    text = (ROOT / "pyproject.toml").read_text()
    scripts = text.split("[project.scripts]", 1)[1].split("\n[", 1)[0]
    assert 'mx-generate = "mlir_mx.torch.generate:main"' in scripts.splitlines()

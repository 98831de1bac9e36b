"""Machine code in the compile cache (``execution.disk_cache``, ``execution.objects``).

A later process loads a kernel's object code instead of running LLVM; the
entry's key holds everything that changes the code (a cached object from
another CPU is never loaded); the loader refuses what it does not take with
``ObjectError`` (the entry is then dropped and rebuilt), never a crash.
Corrupted entries: ``test_disk_cache.py`` and the cache fuzzer.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import mlir_mx
from mlir_mx.errors import ObjectError
from mlir_mx.execution import Runner, clear_cache, disk_cache
from mlir_mx.execution.disk_cache import ObjectCache, entry_key, tree_hash
from mlir_mx.execution.objects import load_object, machine_code_supported
from mlir_mx.host import has_features
from mlir_mx.pipelines import load_pipeline

pytestmark = pytest.mark.skipif(
    not machine_code_supported(), reason="machine-code entries load on x86-64 Linux only"
)

ADD = """func.func @add(%a: tensor<4x4xf32>, %b: tensor<4x4xf32>) -> tensor<4x4xf32> {
  %r = arith.addf %a, %b : tensor<4x4xf32>
  return %r : tensor<4x4xf32>
}"""


def _run(cache_dir, text=ADD, **fields):
    clear_cache()
    r = Runner(text, cache_dir=cache_dir, **fields)
    a = np.arange(16, dtype=np.float32).reshape(4, 4)
    np.testing.assert_array_equal(r.add(a.copy(), a.copy()), 2 * a)
    return r._compiled


#: One change of each input of the key, made by a monkeypatch.
CHANGES = {
    "cpu features (MLIR_MX_CPU_FEATURES)": lambda mp: mp.setenv("MLIR_MX_CPU_FEATURES", "-avx2"),
    "the CPU itself": lambda mp: mp.setattr(disk_cache, "machine_identity", lambda: "other"),
    "toolchain versions": lambda mp: mp.setattr(disk_cache, "toolchain_versions", lambda: "x"),
    "mlir-mx version": lambda mp: mp.setattr(mlir_mx, "__version__", "0.0.0-other"),
    "mlir-mx source": lambda mp: mp.setattr(disk_cache, "source_hash", lambda: "edited"),
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_key_covers_what_changes_the_code(change, monkeypatch):
    before = entry_key(ObjectCache.MAGIC, ADD, "opts")
    CHANGES[change](monkeypatch)
    assert entry_key(ObjectCache.MAGIC, ADD, "opts") != before


def test_key_covers_the_module_and_the_options(tmp_path):
    """Module text, opt level, threads and pipeline each select another entry."""
    _run(tmp_path)
    _run(tmp_path, ADD + "\n")
    _run(tmp_path, opt_level=2)
    _run(tmp_path, threads=1)
    _run(tmp_path, pipeline=load_pipeline("lower-to-llvm"))  # the default, given
    assert len(list(tmp_path.glob("*.mxo"))) == 5
    assert _run(tmp_path, opt_level=2).machine_code


def test_object_of_another_cpu_is_never_loaded(tmp_path, monkeypatch, caplog):
    """Another CPU (or feature set): another key, so another file; this CPU's
    entry put in its place is refused (the header's key) and rebuilt."""
    assert not _run(tmp_path).from_disk
    (mine,) = tmp_path.glob("*.mxo")
    monkeypatch.setattr(disk_cache, "machine_identity", lambda: "vendor_id=Other; flags=sse2")
    assert not _run(tmp_path).from_disk  # not this CPU's entry
    (other,) = set(tmp_path.glob("*.mxo")) - {mine}
    other.write_bytes(mine.read_bytes())
    assert not _run(tmp_path).from_disk
    assert "the header's key is not this entry's" in caplog.text
    monkeypatch.undo()
    # A feature this host has (AVX-512 where present, else BMI2): masking it
    # generates code for another feature set.
    masked = "-avx512f -avx512bw -avx512vl" if has_features("avx512f") else "-bmi2"
    assert has_features(masked.split()[0][1:])
    monkeypatch.setenv("MLIR_MX_CPU_FEATURES", masked)
    assert not _run(tmp_path).from_disk
    assert len(list(tmp_path.glob("*.mxo"))) == 3


def test_source_hash_follows_every_file(tmp_path):
    (tmp_path / "a.py").write_text("x = 1\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.py").write_text("y = 2\n")
    h = tree_hash(tmp_path)
    (tmp_path / "sub" / "b.py").write_text("y = 3\n")
    assert tree_hash(tmp_path) != h
    (tmp_path / "sub" / "b.py").write_text("y = 2\n")
    assert tree_hash(tmp_path) == h
    (tmp_path / "c.py").write_text("")
    assert tree_hash(tmp_path) != h


def test_source_hash_follows_the_pipeline_files(tmp_path):
    """A lowering is read from ``pipelines/*.txt`` (and schedules from
    ``*.mlir``): editing one changes the code, so the key; other files not."""
    (tmp_path / "pipelines").mkdir()
    txt = tmp_path / "pipelines" / "memref-to-llvm.txt"
    txt.write_text("convert-linalg-to-loops\n")
    (tmp_path / "pipelines" / "s.mlir").write_text("module {}\n")
    h = tree_hash(tmp_path)
    txt.write_text("convert-linalg-to-loops\nmx-legalize-masked-stores\n")
    assert tree_hash(tmp_path) != h
    txt.write_text("convert-linalg-to-loops\n")
    assert tree_hash(tmp_path) == h
    (tmp_path / "pipelines" / "s.mlir").write_text("module {}\n// edited\n")
    assert tree_hash(tmp_path) != h
    (tmp_path / "pipelines" / "s.mlir").write_text("module {}\n")
    (tmp_path / "notes.md").write_text("not code\n")
    (tmp_path / "x.pyc").write_bytes(b"\0")
    assert tree_hash(tmp_path) == h


def test_machine_code_hit_keeps_what_the_runner_needs(tmp_path):
    """Signatures, written parameters, the pipeline, result ownership and the
    functions the caller's threads run come back from the entry as the
    compilation had them (the Runner is made without lowering the module
    again); the lowered module is lowered again on demand."""
    first = _run(tmp_path)
    hit = _run(tmp_path)
    assert hit.machine_code and not first.machine_code
    assert hit._module is None  # not lowered again to make the Runner
    assert hit.tasks == first.tasks
    assert hit.signatures == first.signatures
    assert hit.writes("add") == first.writes("add")
    assert str(hit.pipeline) == str(first.pipeline)
    assert hit.owns_results == first.owns_results
    assert str(hit.module) == str(first.module)


def test_new_process_runs_a_model_without_llvm(tmp_path):
    """The issue's promise: with a warm cache, a new process runs Linear
    kernels (parallel code: the async runtime) and the conversion kernels
    without creating an ExecutionEngine or running a lowering (both made to
    fail here)."""
    child = textwrap.dedent(
        """
        import sys, numpy as np, mlir_mx
        from mlir_mx.execution import compiled
        if sys.argv[1] == "warm":
            def refuse(*a, **k):
                raise AssertionError("LLVM code generation or a lowering in a warm process")
            compiled.ExecutionEngine = refuse
            compiled.run_pipeline = refuse
        w = np.random.default_rng(0).standard_normal((64, 128)).astype(np.float32)
        lin = mlir_mx.Linear(w, element="f4E2M1FN", threads=2)
        lin.precompile()
        x = np.random.default_rng(1).standard_normal((3, 128)).astype(np.float32)
        print(lin(x).tobytes().hex(), lin(x[:1]).tobytes().hex())
        """
    )
    env = dict(os.environ, MLIR_MX_CACHE_DIR=str(tmp_path))

    def run(mode):
        return subprocess.run([sys.executable, "-c", child, mode], env=env, capture_output=True,
                              text=True, timeout=600)  # fmt: skip

    cold = run("cold")
    assert cold.returncode == 0, cold.stderr[-2000:]
    warm = run("warm")
    assert warm.returncode == 0, warm.stderr[-2000:]
    assert warm.stdout == cold.stdout
    assert "dropped" not in warm.stderr


def test_loader_refuses_malformed_objects(tmp_path):
    """Random changes to an object file: the loader maps it or raises
    ObjectError, never another exception (the checksum stops such entries
    first; this is the loader's own guard)."""
    compiled_ = _run(tmp_path)
    assert compiled_.engine is not None
    path = tmp_path / "k.o"
    compiled_.engine.dump_to_object_file(str(path))
    good = path.read_bytes()
    assert load_object(good).raw_lookup("_mlir_ciface_add")
    rng = random.Random(0)
    for _ in range(300):
        b = bytearray(good)
        for _ in range(rng.choice((1, 4, 32))):
            b[rng.randrange(len(b))] = rng.randrange(256)
        if rng.random() < 0.2:
            b = b[: rng.randrange(len(b))]
        try:
            load_object(bytes(b))
        except ObjectError:
            pass
    with pytest.raises(ObjectError, match="not an ELF"):
        load_object(b"MZ" + good[2:])
    with pytest.raises(ObjectError, match="x86-64"):
        load_object(good[:18] + (183).to_bytes(2, "little") + good[20:])

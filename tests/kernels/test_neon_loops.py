"""The NEON dot kernels' prefill inner loop, counted from the machine code
(issue 55: "a prefill inner loop whose multiply instructions are at least
50 % of the loop"; docs/portability.md has the table).

``bench/probes/neon_counts.py`` generates the ``int-prefill`` kernel as
``mlir_mx`` chooses it on qemu's Neoverse N1 (``asimddp``) and V1
(``asimddp i8mm``) guests, compiles it with the wheel's ``opt`` / ``llc``
for that core and takes the innermost loop with dot instructions.  Here on
a small problem (the loop is the same at every K and N: one block step of
the register tile).  The records hold B as ``b + 128``; the expanding
kernels store B's chunk signed once (``isa.DotOps.signed_scratch``), so
the loop has no ``eor`` and no compensation of A: with ``sdot`` (N1; 3 x 16
tile, 96 ``sdot``) its multiplies are over half of it for every B; with
``smmla`` (V1; 2 x 16 tile, 32 ``smmla`` of twice ``sdot``'s products,
``kernels/dot/neon_mmla.py``) fewer instructions are multiplies, but
``llvm-mca``'s Neoverse V1 model gives it fewer cycles per column-block
than the ``sdot`` loop on the same core model (which is why it is chosen).
Per 2 x 2 tile and block an ``smmla`` loop has 4 ``smmla`` and, for the
f32 block step the bits need (docs/numerics.md), one ``movi`` (the
destructive accumulator's zero), ``scvtf``, ``fmul`` and ``fmla`` each: as
many instructions as multiplies before any load, so its share stays below
half at every tile shape (docs/portability.md counts 2 x 16 to 8 x 8).
LLVM puts ``prfm`` in loops only on the Apple cores (a load stepping at
least 2048 bytes an iteration); the scratch is sub-tile major
(``kernels/dot/neon_scratch.py``), so the prefill loops have none there
and the ``apple-m1`` model's ``sdot`` loop no stack access either.
No aarch64 machine runs it here; the bits are checked under qemu
(``tests/kernels/test_dot_kernels.py`` in the aarch64 job).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from format_cases import INTEGRAL

from mlir_mx.kernels import Problem
from mlir_mx.kernels.dot.units import int_max
from mlir_mx.numerics import ELEMENT_FORMATS

#: The i8 unit's B formats (values within a signed byte): INT8 and FP6 E2M3
#: (records hold b + 128), FP4 (a signed tbl table); A is INT8.
NARROW = [e for e in INTEGRAL if int_max(e) <= 128]
INT8 = next(e for e in NARROW if ELEMENT_FORMATS[e].is_int)
PAIRS = [(INT8, b) for b in NARROW]

PATH = Path(__file__).resolve().parents[2] / "bench" / "probes" / "neon_counts.py"


def _probe():
    spec = importlib.util.spec_from_file_location("neon_counts", PATH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _loop(nc, tmp_path, sample, cpu, features, ea, eb):
    prob = Problem(64, 256, 128, 32, ea, eb, b_dot="i8")
    with nc.as_aarch64(sample):
        text, _desc = nc.lowered(prob, "int-prefill", "aarch64", features)
    asm = nc.assemble(text, "aarch64-linux-gnu", cpu, tmp_path / f"{sample}-{cpu}.s")
    body = nc.hot_loop(asm)
    return body, nc.count(body, 64, 16)


@pytest.mark.parametrize("ea, eb", PAIRS)
def test_sdot_prefill_loop_is_half_multiplies_without_eor(tmp_path, ea, eb):
    nc = _probe()
    body, counts = _loop(nc, tmp_path, "neoverse-n1", "neoverse-n1", "asimddp", ea, eb)
    ops = [x.split()[0] for x in body]
    assert counts["dots"] == 96 and counts["kind"] == "sdot", ops
    assert "eor" not in ops, body  # B's chunk was made signed once, at expansion
    assert counts["mult_share"] >= 0.5 and counts["spills"] == 0, (counts, body)


@pytest.mark.parametrize("ea, eb", PAIRS)
def test_smmla_prefill_loop_beats_sdot_on_the_v1_model(tmp_path, ea, eb):
    nc = _probe()
    body, counts = _loop(nc, tmp_path, "neoverse-v1", "neoverse-v1", "asimddp,i8mm", ea, eb)
    ops = [x.split()[0] for x in body]
    assert counts["dots"] == 32 and counts["kind"] == "smmla", ops
    assert "eor" not in ops and counts["spills"] == 0, body
    assert counts["col_blocks"] == 32  # 2 rows x 16 columns x 32 K
    # the block step of each 2 x 2 tile (8 per block): zero, convert, * sb, fma sa
    assert [ops.count(o) for o in ("movi", "scvtf", "fmul", "fmla")] == [8] * 4, ops
    sdot_body, sdot = _loop(nc, tmp_path, "neoverse-n1", "neoverse-v1", "asimddp", ea, eb)
    assert sdot["kind"] == "sdot"
    cycles = nc.mca(body, "aarch64-linux-gnu", "neoverse-v1") / counts["col_blocks"]
    sdot_cycles = nc.mca(sdot_body, "aarch64-linux-gnu", "neoverse-v1") / sdot["col_blocks"]
    assert cycles < 0.9 * sdot_cycles, (cycles, sdot_cycles)
    assert counts["per_col_block"] < sdot["per_col_block"], (counts, sdot)


#: (qemu sample, llc CPU, features, dot instruction, least share): Apple M1
#: (asimddp, the N1 sample's kernels) and M2 (i8mm: smmla, the V1 sample's).
APPLE = [
    ("neoverse-n1", "apple-m1", "asimddp", "sdot", 0.5),
    ("neoverse-v1", "apple-m2", "asimddp,i8mm", "smmla", 0.25),
]


@pytest.mark.parametrize("sample, cpu, features, kind, share", APPLE, ids=[a[1] for a in APPLE])
def test_prefill_loop_on_apple_models_has_no_prfm_or_spills(
    tmp_path, sample, cpu, features, kind, share
):
    """FP4 B (the loop is the same for every B, bench/probes/neon_counts.py)."""
    nc = _probe()
    fp4 = next(b for _a, b in PAIRS if not ELEMENT_FORMATS[b].is_int and int_max(b) < 16)
    body, counts = _loop(nc, tmp_path, sample, cpu, features, INT8, fp4)
    assert counts["kind"] == kind and counts["dots"] == (96 if kind == "sdot" else 32), body
    assert counts["prfm"] == 0 and counts["spills"] == 0, (counts, body)
    assert counts["mult_share"] >= share, counts

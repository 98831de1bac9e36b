"""The NEON dot kernels' prefill inner loop, counted from the machine code
(issue 55: "a prefill inner loop whose multiply instructions are at least
50 % of the loop").

``bench/probes/neon_counts.py`` generates the ``int-prefill`` kernel as
``mlir_mx`` chooses it on qemu's Neoverse N1 (``asimddp``) and V1
(``asimddp i8mm``) guests, compiles it with the wheel's ``opt`` / ``llc``
for that core and takes the innermost loop with dot instructions.  Here on
a small problem (the loop is the same at every K and N: one block step of
the 3 x 16 register tile, 96 ``sdot``), for INT8 B, whose records hold
``b + 128``: the expanding kernel stores B's chunk signed once, so the
loop has no ``eor`` and needs no compensation of A (``isa.DotOps.
signed_scratch``), and FP4 B (the signed ``tbl`` table) for comparison.
No aarch64 machine runs it here; the bits are checked under qemu
(``tests/kernels/test_dot_kernels.py`` in the aarch64 job).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from format_cases import INTEGRAL

from mlir_mx.kernels import Problem
from mlir_mx.kernels.dot.units import int_max, value_table
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


@pytest.mark.parametrize(
    "cpu, features", [("neoverse-n1", "asimddp"), ("neoverse-v1", "asimddp,i8mm")]
)
@pytest.mark.parametrize("ea, eb", PAIRS)
def test_prefill_loop_is_half_multiplies_without_eor(tmp_path, cpu, features, ea, eb):
    nc = _probe()
    prob = Problem(256, 256, 128, 32, ea, eb, b_dot="i8")
    with nc.as_aarch64(cpu):
        text, _desc = nc.lowered(prob, "int-prefill", "aarch64", features)
    body = nc.hot_loop(nc.assemble(text, "aarch64-linux-gnu", cpu, tmp_path / "k.s"))
    ops = [x.split()[0] for x in body]
    counts = nc.count(body, 256, 16)
    assert counts["dots"] == 96 and set(o for o in ops if "dot" in o) == {"sdot"}, ops
    assert "eor" not in ops, body  # B's chunk was made signed once, at expansion
    assert counts["mult_share"] >= 0.5, (counts, body)

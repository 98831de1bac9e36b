"""The ``aarch64`` marker: the subset of the suite that ``scripts/run-tests-aarch64``
runs on an emulated arm64 userland (qemu-user, ``pytest -m aarch64``), picked
to finish in about 10 minutes per emulated CPU (docs/testing.md gives the
times).  The marker only selects: every test here runs in the default suite
on x86 as before, and checks the same bits on both (against the numpy oracle
or its exact model, computed in the same process: CPU-independent numpy).

One place, not a decorator per test, so the list reads as the job's contents;
:func:`mark` (called from ``tests/conftest.py``) marks what it names, and
``tests/test_aarch64_subset.py`` checks that every entry names a collected
test (a renamed test or parameter must not drop out of the job unseen).

Each entry: ``"file::function"`` mapped to ``None`` (every parameter set) or
to the parameter ids to run.
"""

from __future__ import annotations

import pytest

from mlir_mx.numerics import ELEMENT_FORMATS

FORMATS = tuple(ELEMENT_FORMATS)

SUBSET: dict[str, tuple[str, ...] | None] = {
    # one quantize / dequantize round trip per format (the first layout)
    "tests/execution/test_mx_e2e.py::test_quantize_bit_exact": tuple(f"{e}-0" for e in FORMATS),
    "tests/execution/test_mx_e2e.py::test_dequantize_bit_exact": tuple(f"{e}-0" for e in FORMATS),
    # Linear on each dot kind's pairs (the f32 kernels where the CPU has no
    # dot unit for the pair): int (FP4 x INT8, FP4 x FP4, INT8 x INT8, FP6 x
    # INT8), bf16 (FP8 activations), and f32 activations
    "tests/test_linear_dot.py::test_every_weight_and_activation_pair": (
        "f4E2M1FN-i8-1",
        "f4E2M1FN-f4E2M1FN-70",
        "i8-i8-1",
        "f6E2M3FN-i8-1",
        "f8E4M3FN-f8E4M3FN-5",
        "i8-f8E4M3FN-5",
    ),
    "tests/test_linear.py::test_every_batch_size_one_weight": ("f4E2M1FN", "f8E4M3FN"),
    # the dot kernels against the f32 kernels' bits (the oracle's blocked
    # order) and the exact model of special values; they skip, saying why,
    # on a CPU without the kind's unit (on aarch64: the NEON sdot / usdot / smmla
    # kernels at neoverse-n1 / -v1, E3M2 and FP8 pairs skip; everything at
    # cortex-a72); each runs a kernel compilation under qemu (1-6 min loaded)
    "tests/kernels/test_dot_kernels.py::test_integer_pairs_equal_f32_kernels": (
        "f4E2M1FN-i8-small-t2-codes",
        "f4E2M1FN-f4E2M1FN-small-t2-codes",
        "i8-i8-decode-t2-codes",
        "i8-f4E2M1FN-small-t1-codes",
        "f4E2M1FN-f6E2M3FN-small-t1-records",  # B's chunk expanded signed (sdot, no eor)
        "f6E2M3FN-i8-decode-t2-codes",
        "f4E2M1FN-f6E3M2FN-decode-t2-records",
    ),
    "tests/kernels/test_dot_kernels.py::test_bf16_pairs_equal_f32_kernels": (
        "f8E4M3FN-f8E4M3FN-decode-t1-records",
        "f8E5M2-f6E3M2FN-decode-t2-codes",
    ),
    "tests/kernels/test_dot_kernels.py::test_special_values_follow_the_blocked_order": (
        "decode-records-f4E2M1FN-i8-int",
        "prefill-codes-i8-i8-int",
    ),
    "tests/kernels/test_dot_quantize.py::test_quantized_activations_equal_the_oracle_quantized_mx": (
        "i8-f4E2M1FN-int-decode",
        "f8E4M3FN-f4E2M1FN-bf16-small",
    ),
    # the widening of every code, per format (the generic path), and unpacking
    "tests/kernels/test_widen.py::test_every_code_widens_exactly": tuple(
        f"{e}-False-False" for e in FORMATS
    ),
    "tests/kernels/test_widen.py::test_packed_codes_unpack_exactly": (
        "f6E2M3FN-generic",
        "f4E2M1FN-generic",
    ),
    "tests/kernels/test_widen.py::test_every_scale_code_decodes_exactly": None,
    # the tiled-B and decode schedules
    "tests/kernels/test_tiled_b.py::test_tiled_b_gives_the_same_bits": (
        "f8E4M3FN-decode-1-1",
        "f4E2M1FN-small-5-2",
        "f4E2M1FN-int-decode-1-2",
        "i8-int-small-37-1",
        "f6E2M3FN-bf16-small-5-2",
    ),
    "tests/execution/test_decode_gemv.py::test_blocked_vectorized_decode": (
        "mx-ab-1x64x96",
        "mx-a-3x40x64",
    ),
    "tests/kernels/test_dot_kernels.py::test_decode_reads_panels_side_by_side_with_the_same_bits": (
        "2-f4E2M1FN-f4E2M1FN",
    ),
    # what NEON bfdot computes (Arm's BFDotAdd: round-to-odd, flushing), and
    # that it differs from the f32 kernels' fma chain (the bf16 kind stays off)
    "tests/kernels/test_neon_bfdot.py::test_bfdot_bits_are_arm_bfdotadd_not_the_f32_kernels": None,
    # the same bits at every thread count
    "tests/execution/test_threads.py::test_results_identical_for_every_thread_count": None,
    # a cut-down demo (mx-demo --quick)
    "tests/tools/test_mx_demo.py::test_quick_demo_passes_every_check": None,
}


def files() -> list[str]:
    """The test files of the subset: what the job passes to pytest, so that
    only they are collected (collecting the whole suite takes most of an
    hour under emulation)."""
    return sorted({base.partition("::")[0] for base in SUBSET})


def named(nodeid: str) -> bool:
    """Whether :data:`SUBSET` names the test ``nodeid``."""
    base, _, param = nodeid.partition("[")
    wanted = SUBSET.get(base, ())
    return wanted is None or param[:-1] in wanted


def missing(nodeids) -> list[str]:
    """The entries of :data:`SUBSET` (``file::function`` or
    ``file::function[id]``) that name none of ``nodeids``
    (``tests/test_aarch64_subset.py``: none, among the collected tests)."""
    ids = set(nodeids)
    bases = {n.partition("[")[0] for n in ids}
    out = []
    for base, wanted in SUBSET.items():
        if wanted is None:
            out += [] if base in bases else [base]
        else:
            out += [f"{base}[{p}]" for p in wanted if f"{base}[{p}]" not in ids]
    return out


def mark(items) -> None:
    """Add the ``aarch64`` marker to the collected items :data:`SUBSET` names."""
    for item in items:
        if named(item.nodeid):
            item.add_marker(pytest.mark.aarch64)

"""The Runner API misuse sweep: seeded calls with wrong, odd and hostile arguments.

Case ``i`` of seed ``s`` picks a compiled function (compiled once per worker)
and builds valid arguments for it, then, three times in four, breaks one or
two of them: wrong objects, dtypes, shapes, layouts (non-contiguous,
misaligned), read-only arrays, read-only memmaps, arrays over ``bytes``,
masked arrays, ``np.matrix``, out-of-range scalars, wrong argument counts,
wrong MX encodings, unknown functions; a few cases misuse the constructor.
The rule (``docs/testing.md``): a call returns, or raises an ``MXError``
(which is also the ``TypeError`` / ``ValueError`` / ``AttributeError`` a
Python user expects) before native code runs; a bare builtin exception is a
``not-mx-error`` finding, anything else or a signal a ``traceback``.  Untouched calls must also compute the
right result (the oracle), so a check that refuses too much shows up too.
"""

from __future__ import annotations

import random
import tempfile
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import ml_dtypes
import numpy as np

from mlir_mx.diagnostics import MXError
from mlir_mx_testing.campaign import Outcome

__all__ = ["case", "FUNCTIONS"]

_T = "!mx.tensor<{m}x{k}xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU{ax}>"
TA = _T.format(m=8, k=64, ax="")
TB = "!mx.tensor<64x16xf4E2M1FN, block_size = 32, scale_type = f8E8M0FNU, axis = 0>"
MX_MODULE = f"""
func.func @mm(%a: {TA}, %b: tensor<64x16xf32>, %acc: tensor<8x16xf32>) -> tensor<8x16xf32> {{
  %0 = mx.block_matmul %a, %b, %acc : {TA}, tensor<64x16xf32>, tensor<8x16xf32> -> tensor<8x16xf32>
  return %0 : tensor<8x16xf32>
}}
func.func @mmx(%a: {TA}, %b: {TB}, %acc: tensor<8x16xf32>) -> tensor<8x16xf32> {{
  %0 = mx.block_matmul %a, %b, %acc : {TA}, {TB}, tensor<8x16xf32> -> tensor<8x16xf32>
  return %0 : tensor<8x16xf32>
}}
func.func @q(%x: tensor<8x64xf32>) -> {TA} {{
  %0 = mx.quantize_block %x : tensor<8x64xf32> -> {TA}
  return %0 : {TA}
}}
func.func @fold(%t: {TA}, %alpha: f32) -> tensor<8x64xf32> {{
  %0 = mx.fold_scale %t, %alpha : {TA}, f32 -> {TA}
  %1 = mx.dequantize_block %0 : {TA} -> tensor<8x64xf32>
  return %1 : tensor<8x64xf32>
}}
"""
PLAIN_MODULE = """
func.func @add(%a: tensor<4x4xf32>, %b: tensor<4x4xf32>) -> tensor<4x4xf32> {
  %r = arith.addf %a, %b : tensor<4x4xf32>
  return %r : tensor<4x4xf32>
}
func.func @scalars(%x: f32, %n: i64, %i: index, %flag: i1) -> f32 {
  %ii = arith.index_cast %i : index to i64
  %sum = arith.addi %n, %ii : i64
  %f = arith.sitofp %sum : i64 to f32
  %t = arith.addf %x, %f : f32
  %r = arith.select %flag, %t, %x : f32
  return %r : f32
}
func.func @store(%m: memref<5xi32>, %v: i32) {
  %c0 = arith.constant 0 : index
  memref.store %v, %m[%c0] : memref<5xi32>
  return
}
func.func @dyn(%a: tensor<?xf64>) -> tensor<?xf64> {
  %r = arith.mulf %a, %a : tensor<?xf64>
  return %r : tensor<?xf64>
}
"""

#: (module, function) of the sweep.
FUNCTIONS = (
    ("mx", "mm"),
    ("mx", "mmx"),
    ("mx", "q"),
    ("mx", "fold"),
    ("plain", "add"),
    ("plain", "scalars"),
    ("plain", "store"),
    ("plain", "dyn"),
)


@cache
def _runner(which: str):
    from mlir_mx.execution import Runner

    return Runner(MX_MODULE if which == "mx" else PLAIN_MODULE, opt_level=1)


@cache
def _tmp() -> Path:
    return Path(tempfile.mkdtemp(prefix="mlir-mx-misuse-"))


def _valid(fn: str, rng: np.random.Generator) -> list:
    from mlir_mx import oracle

    def mxa(shape, elem, axis):
        x = rng.standard_normal(shape).astype(np.float32) * 4
        return oracle.quantize(x, elem, 32, axis=axis)

    if fn in ("mm", "mmx"):
        b = (
            rng.standard_normal((64, 16)).astype(np.float32)
            if fn == "mm"
            else mxa((64, 16), "f4E2M1FN", 0)
        )
        return [mxa((8, 64), "f8E4M3FN", 1), b, rng.standard_normal((8, 16)).astype(np.float32)]
    if fn == "q":
        return [rng.standard_normal((8, 64)).astype(np.float32)]
    if fn == "fold":
        return [mxa((8, 64), "f8E4M3FN", 1), float(rng.choice([0.5, 2.0, 3.0, -1.5]))]
    if fn == "add":
        return [rng.standard_normal((4, 4)).astype(np.float32) for _ in range(2)]
    if fn == "scalars":
        return [1.5, int(rng.integers(-100, 100)), int(rng.integers(0, 100)), bool(rng.integers(2))]
    if fn == "store":
        return [np.zeros(5, np.int32), int(rng.integers(-1000, 1000))]
    return [rng.standard_normal(int(rng.integers(0, 9)))]  # dyn


def _reference(fn: str, args: list):
    """The expected result (and the expected in-place update) of a valid call."""
    from mlir_mx import oracle
    from mlir_mx.numerics import MXArray

    def val(a):
        return (oracle.dequantize(a) if isinstance(a, MXArray) else a).astype(np.float64)

    if fn in ("mm", "mmx"):
        return args[2].astype(np.float64) + val(args[0]) @ val(args[1])
    if fn == "q":
        return oracle.quantize(args[0], "f8E4M3FN", 32)
    if fn == "fold":
        return oracle.dequantize(oracle.fold_scale(args[0], args[1]))
    if fn == "add":
        return args[0] + args[1]
    if fn == "scalars":
        return (
            np.float32(args[0] + np.float32(args[1] + args[2])) if args[3] else np.float32(args[0])
        )
    if fn == "store":
        return None
    return args[0] * args[0]


def _check_result(fn: str, args: list, ref, got) -> str | None:
    from mlir_mx.numerics import MXArray

    if fn in ("mm", "mmx"):
        bound = 1e-5 * (np.abs(ref).max() + 1)
        return None if np.all(np.abs(got - ref) <= bound) else "matmul differs from the oracle"
    if isinstance(ref, MXArray):
        return None if ref.bitwise_equal(got) else "quantize differs from the oracle"
    if fn == "store":
        return None if args[0][0] == args[1] else "memref store not visible to the caller"
    same = np.array_equal(np.asarray(got), np.asarray(ref), equal_nan=True)
    return None if same else f"{fn}: result differs from the reference"


_JUNK = (None, "x", [1.0, 2.0], {}, 1j, object(), b"ab", np.float32(1), np.zeros(()), (1, 2, 3))


def _break_array(a: np.ndarray, rng: random.Random):
    k = rng.randrange(12)
    try:
        return _broken_array(a, k, rng)
    except (
        ValueError,
        TypeError,
        NotImplementedError,
        AttributeError,
    ):  # e.g. no memmap of [] or object data
        return rng.choice(_JUNK)


def _broken_array(a: np.ndarray, k: int, rng: random.Random):
    if k == 0:
        return a.astype(
            rng.choice(
                [
                    np.float64,
                    np.float16,
                    np.int32,
                    np.int8,
                    np.bool_,
                    np.complex64,
                    object,
                    ml_dtypes.bfloat16,
                ]
            )
        )
    if k == 1:
        return a.reshape(-1) if a.ndim > 1 else a.reshape(1, -1)
    if k == 2 and a.ndim and a.dtype.kind == "f":
        from mlir_mx_testing.convert_fuzz import field_of

        f = field_of(a.shape, a.dtype, 1, 1)  # a structured array's field: byte strides
        f[...] = a
        return f
    if k == 2:
        return np.repeat(a, 2, axis=0)[::2] if a.ndim else a  # non-contiguous, same shape
    if k == 3:
        buf = bytearray(a.nbytes + 1)
        return np.frombuffer(buf, dtype=a.dtype, offset=1, count=a.size).reshape(
            a.shape
        )  # misaligned
    if k == 4:
        b = a.copy()
        b.setflags(write=False)
        return b
    if k == 5:
        path = _tmp() / f"m{rng.randrange(10**9)}.bin"
        a.tofile(path)
        return np.memmap(path, dtype=a.dtype, mode="r", shape=a.shape)
    if k == 6:
        return np.frombuffer(a.tobytes(), dtype=a.dtype).reshape(a.shape)  # over bytes: read-only
    if k == 7:
        return np.ma.masked_array(a, mask=np.zeros(a.shape, bool))
    if k == 8 and a.ndim == 2:
        return a.view(np.matrix)
    if k == 9:
        return np.empty((0,) * max(a.ndim, 1), a.dtype)
    if k == 10:
        return a.T if a.ndim == 2 else a[None]
    return rng.choice(_JUNK)


def _break_scalar(x, rng: random.Random):
    return rng.choice(
        [1e39, -1e39, 10**400, -(2**70), 2**63, float("inf"), float("nan"), True, "1", None,
         np.float64(1e300), np.int64(-(2**63)), 2, -1, 1.5, np.float16(2.0), np.zeros((2,)), 1j]
    )  # fmt: skip


def _break(args: list, rng: random.Random) -> tuple[list, str]:
    from mlir_mx.numerics import MXArray

    args = list(args)
    k = rng.randrange(10)
    if k == 0 and args:
        return args[:-1], "one argument too few"
    if k == 1 or not args:
        return args + [np.zeros(3, np.float32)], "one argument too many"
    i = rng.randrange(len(args))
    a = args[i]
    if isinstance(a, MXArray):
        r = rng.randrange(4)
        if r == 0:
            return args[:i] + [(_break_array(a.codes, rng), a.scales)] + args[
                i + 1 :
            ], f"arg {i}: bad codes"
        if r == 1:
            return args[:i] + [(a.codes, _break_array(a.scales, rng))] + args[
                i + 1 :
            ], f"arg {i}: bad scales"
        if r == 2:
            from mlir_mx import oracle

            other = oracle.quantize(
                np.ones(a.shape, np.float32),
                rng.choice(["i8", "f4E2M1FN", "f8E5M2"]),
                rng.choice([8, 16, 32]),
                axis=a.axis,
            )
            return args[:i] + [other] + args[i + 1 :], f"arg {i}: another MX encoding"
        return args[:i] + [rng.choice(_JUNK)] + args[i + 1 :], f"arg {i}: junk for an MXArray"
    if isinstance(a, np.ndarray):
        return args[:i] + [_break_array(a, rng)] + args[i + 1 :], f"arg {i}: broken array"
    return args[:i] + [_break_scalar(a, rng)] + args[i + 1 :], f"arg {i}: broken scalar"


def _constructor_misuse(rng: random.Random):
    from mlir_mx.execution import Runner

    good = "func.func @f(%x: f32) -> f32 {\n  return %x : f32\n}\n"
    k = rng.randrange(8)
    kw = [
        dict(module=123),
        dict(module=b"func.func @f() { return }"),
        dict(module="func.func @f( {"),
        dict(module=good, pipeline=5),
        dict(module=good, pipeline="no-such-pass"),
        dict(module=good, opt_level=rng.choice([7, -1, "3", 1.5, True])),
        dict(module=good, shared_libs=["/no/such/lib.so"]),
        dict(module=good, shared_libs="lib.so"),
    ][k]
    return lambda: Runner(**kw), f"Runner({', '.join(f'{a}={v!r}' for a, v in kw.items())})"


@dataclass(frozen=True)
class Call:
    """One seeded call of the sweep, not yet made: ``call()`` makes it;
    ``valid``: the arguments are untouched (it must compute ``ref``)."""

    call: Callable[[], object]
    valid: bool
    config: str
    what: str
    fn: str | None = None
    args: list | None = None
    ref: object = None


def case(seed: int, index: int) -> Outcome:
    """One Runner call (or constructor call) with seeded, possibly broken, arguments."""
    c = build(seed, index)
    return _outcome(index, c)


def build(seed: int, index: int) -> Call:
    """The call :func:`case` makes for ``(seed, index)``."""
    rng = random.Random(f"misuse:{seed}:{index}")
    nrng = np.random.default_rng(rng.randrange(2**32))
    if rng.randrange(25) == 0:
        call, what = _constructor_misuse(rng)
        config, valid, fn, args = "constructor", False, None, None
    else:
        which, fn = rng.choice(FUNCTIONS)
        args = _valid(fn, nrng)
        valid = rng.randrange(4) == 0
        what = "valid arguments"
        if not valid:
            args, what = _break(args, rng)
            if rng.randrange(3) == 0:
                args, more = _break(args, rng)
                what += "; " + more
        name = fn if rng.randrange(30) else "no_such_function"
        valid = valid and name == fn
        runner = _runner(which)
        call = lambda: runner.invoke(name, *args)  # noqa: E731
        config = fn
        what = f"{name}: {what}"
        ref = _reference(fn, args) if valid else None
        return Call(call, valid, config, what, fn, args, ref)
    return Call(call, valid, config, what, fn, args)


def _outcome(index: int, c: Call) -> Outcome:
    call, valid, config, what, fn, args, ref = (
        c.call,
        c.valid,
        c.config,
        c.what,
        c.fn,
        c.args,
        c.ref,
    )
    try:
        got = call()
    except (TypeError, ValueError, AttributeError, MXError) as e:
        if valid:
            return Outcome(
                index, "wrong", config, f"valid call refused: {type(e).__name__}: {e}", what
            )
        if not isinstance(e, MXError):
            return Outcome(index, "not-mx-error", config, f"{type(e).__name__}: {e}", what)
        return Outcome(index, "rejected", config)
    except BaseException as e:  # noqa: BLE001 - anything else is the finding
        return Outcome(
            index, "traceback", config, "".join(traceback.format_exception(e))[-1500:], what
        )
    if valid:
        bad = _check_result(fn, args, ref, got)
        if bad:
            return Outcome(index, "wrong", config, bad, what)
    return Outcome(index, "ok", config)

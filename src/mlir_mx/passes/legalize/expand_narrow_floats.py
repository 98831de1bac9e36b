"""``mx-expand-narrow-floats``: software conversions for f8/f6/f4/E8M0.

Rewrites ``arith.extf`` / ``arith.truncf`` from and to ``f8E4M3FN``,
``f8E5M2``, ``f6E2M3FN``, ``f6E3M2FN``, ``f4E2M1FN`` and ``f8E8M0FNU`` (scalar,
vector or static tensor; every op is elementwise) and ``arith.scaling_extf`` /
``arith.scaling_truncf`` into ``arith.bitcast`` to the same-width integer
(f8 -> i8, f6 -> i6, f4 -> i4), a handful of branch-free integer / f32 ops
(``arith.select``, no control flow, vectorizable) and ``arith.bitcast`` i32 <->
f32.  Everything it emits is handled by ``convert-arith-to-llvm``, which maps
the narrow float types to i8/i6/i4 itself.

Semantics are bit-exact with ml_dtypes (0.7), which tests check on every
code and on an f32 sweep:

* extf: exact for every code.  E4M3FN ``S.1111.111`` -> NaN; E5M2 Inf/NaN;
  E8M0 code 0 -> 2^-127 (the f32 subnormal 0x00400000), code 255 -> NaN.
* truncf f32 -> element formats: round to nearest, ties to even, narrow
  subnormals exact.  Overflow: ``|x| > 464`` -> NaN for E4M3FN (464 is the tie
  between 448 and the NaN code and rounds to even, 448); ``|x| >= 61440`` ->
  Inf for E5M2; FP6/FP4 saturate to +-max (Inf included).  NaN -> NaN for
  E4M3FN/E5M2 (sign kept); for FP6/FP4, which have no NaN, NaN -> a zero whose
  sign is the INVERSE of the NaN's sign (+NaN -> -0.0), exactly as ml_dtypes.
* truncf f32 -> E8M0: the nearest power of two, ties away from zero (a
  normal f32's exponent is rounded up when its mantissa is >= 1.5: 1.5 -> 2,
  3 -> 4); a positive f32 subnormal gives 2^-127 below 1.5 * 2^-127 and 2^-126
  from there; 0, negatives, Inf, NaN and results above 2^127 give NaN (code
  255).  ml_dtypes >= 0.7 does the same; 0.5/0.6 rounded every subnormal above
  2^-127 up to 2^-126.

Wide sides other than f32: extf to f16/bf16/f64 goes through an exact extf to
f32 and one (correctly rounded) upstream extf/truncf; truncf from f16/bf16
goes through an exact extf to f32.  truncf from f64 is REJECTED (PassError):
f64 -> f32 -> narrow would round twice (ml_dtypes does exactly that, APFloat
does not), so there is no single defensible answer.

FIXME(upstream): ``arith-expand`` has no f8E4M3FN/f8E5M2/f6 conversions at
22.1.x (added by llvm-project PR #216653), and ``convert-arith-to-llvm``
silently leaves them in place (#221950).  Its E8M0 extf maps code 0 to +0.0
(no upstream issue found, searched 2026-12-01; the expansion came with
llvm-project#140332), its f32 -> E8M0 truncf floors instead of rounding
(#215295), and its f4E2M1 truncf rounds ties up (no upstream issue found,
searched 2026-12-01; the expansion came with #144157).  Once upstream is fixed this pass can shrink to the
fast paths (the f16 widening trick).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from mlir import ir

from mlir_mx.ir_utils import collect
from mlir_mx.kernels.common.builder import ArithBuilder
from mlir_mx.kernels.common.codec import (
    F32_ABS_MASK,
    F32_INF,
    F32_QNAN,
    e8m0_to_f32,
    f32_bits,
    round_magnitude,
    widen,
)
from mlir_mx.numerics.formats import (
    ELEMENT_FORMATS,
    SCALE_BIAS,
    SCALE_BITS,
    SCALE_NAN_CODE,
    SCALE_TYPE,
    ElementFormat,
)
from mlir_mx.passes.registry import Option, PassError, register_pass

__all__ = ["expand_narrow_floats", "NarrowFormat", "narrow_format"]


@dataclass(frozen=True)
class NarrowFormat:
    """An OCP narrow float as this pass needs it: ``ebits`` exponent and
    ``mbits`` mantissa bits, ``width`` bits in all, and how it overflows."""

    name: str
    ebits: int
    mbits: int
    bias: int
    # 'nan': E4M3FN (S.1111.111 NaN, overflow -> NaN); 'ieee': E5M2 (Inf/NaN);
    # 'sat': FP6/FP4 (no Inf/NaN, saturate); 'e8m0': unsigned exponent only.
    kind: str
    width: int
    max_finite: float


def _element(f: ElementFormat) -> NarrowFormat:
    kind = "ieee" if f.has_inf else "nan" if f.has_nan else "sat"
    return NarrowFormat(f.name, f.ebits, f.mbits, f.bias, kind, f.bits, f.max_normal)


#: Every float element format of the one format table, and the E8M0 scale
#: (largest value: code 254, 2^127).
_FORMATS = {f.name: _element(f) for f in ELEMENT_FORMATS.values() if not f.is_int}
_FORMATS[SCALE_TYPE] = NarrowFormat(
    SCALE_TYPE,
    SCALE_BITS,
    0,
    SCALE_BIAS,
    "e8m0",
    SCALE_BITS,
    2.0 ** (SCALE_NAN_CODE - 1 - SCALE_BIAS),
)


def narrow_format(t: ir.Type) -> NarrowFormat | None:
    """The narrow format of scalar float type ``t``, or None."""
    return _FORMATS.get(str(t))


def _element_type(t: ir.Type) -> ir.Type:
    return t.element_type if isinstance(t, ir.ShapedType) else t


def _builder(like: ir.Type, loc: ir.Location) -> ArithBuilder:
    """The builder of one op's elementwise expansion (its operand's shape)."""
    if isinstance(like, ir.ShapedType) and not like.has_static_shape:
        raise PassError(
            "mx-expand-narrow-floats: dynamically shaped operands are not supported", loc
        )
    return ArithBuilder(like, loc)


# --------------------------------------------------------------------------
# extf: narrow -> f32


def _ext_to_f32(b: ArithBuilder, x: ir.Value, fmt: NarrowFormat, f16_widening: bool) -> ir.Value:
    """Exact narrow -> f32 conversion of ``x`` (narrow float typed)."""
    code = b.bitcast(x, ir.IntegerType.get_signless(fmt.width))
    if fmt.kind == "e8m0":  # the kernels' E8M0 decoding (mlir_mx.kernels.common.codec)
        return e8m0_to_f32(b, code)
    if f16_widening:
        # The format table's widening recipe, as the kernels emit it
        # (mlir_mx.kernels.common.codec.widen: f16 for E4M3, E5M2, FP6 and FP4): the
        # code byte placed into an f16 and widened by the hardware conversion
        # (vcvtph2ps): no f32 subnormal operands, hence no microcode assists.
        ef = ELEMENT_FORMATS[fmt.name]
        return widen(b, b.extui(code, b.i8) if ef.is_sub_byte else code, ef)
    return _ext_bits(b, code, fmt)


def _ext_bits(b: ArithBuilder, code: ir.Value, fmt: NarrowFormat) -> ir.Value:
    """The f32 of float ``code`` (``i<width>``) built in integer arithmetic."""
    c = lambda v: b.const(v, b.i32)  # noqa: E731
    n = fmt.ebits + fmt.mbits
    ci = b.extui(code, b.i32)
    sign = b.shli(b.andi(ci, c(1 << n)), c(31 - n))
    mag = b.andi(ci, c((1 << n) - 1))
    # Normal codes: move exponent/mantissa into place and rebias.
    norm = b.addi(b.shli(mag, c(23 - fmt.mbits)), c((127 - fmt.bias) << 23))
    # Subnormal codes (exponent field 0): mantissa * 2^(1 - bias - mbits), exact.
    sub = b.fmul(b.uitofp(mag, b.f32), b.const(2.0 ** (1 - fmt.bias - fmt.mbits), b.f32))
    bits = b.select(b.cmpi("ult", mag, c(1 << fmt.mbits)), b.bitcast(sub, b.i32), norm)
    if fmt.kind == "nan":
        bits = b.select(b.cmpi("eq", mag, c((1 << n) - 1)), c(F32_QNAN), bits)
    elif fmt.kind == "ieee":
        inf_code = ((1 << fmt.ebits) - 1) << fmt.mbits
        bits = b.select(b.cmpi("eq", mag, c(inf_code)), c(F32_INF), bits)
        bits = b.select(b.cmpi("ugt", mag, c(inf_code)), c(F32_QNAN), bits)
    return b.bitcast(b.ori(bits, sign), b.f32)


# --------------------------------------------------------------------------
# truncf: f32 -> narrow


def _trunc_from_f32(b: ArithBuilder, x: ir.Value, fmt: NarrowFormat, out_elem: ir.Type) -> ir.Value:
    """f32 -> narrow, bit-exact with ml_dtypes (RNE; see the module docstring)."""
    c = lambda v: b.const(v, b.i32)  # noqa: E731
    iw = ir.IntegerType.get_signless(fmt.width)
    bits = b.bitcast(x, b.i32)
    if fmt.kind == "e8m0":
        return b.bitcast(b.trunci(_e8m0_nearest(b, bits), iw), out_elem)
    n = fmt.ebits + fmt.mbits
    absb = b.andi(bits, c(F32_ABS_MASK))
    sign = b.shli(b.shrui(bits, c(31)), c(n))
    # In range: the kernels' rounding (mlir_mx.kernels.common.codec.round_magnitude).
    code = round_magnitude(b, absb, ELEMENT_FORMATS[fmt.name])
    # Overflow.
    if fmt.kind == "nan":
        # 464 (tie between 448 and the NaN code) rounds to even: 448.
        thr = f32_bits(fmt.max_finite + _half_ulp(fmt))
        code = b.select(b.cmpi("ugt", absb, c(thr)), c((1 << n) - 1), code)
    elif fmt.kind == "ieee":
        thr = f32_bits(fmt.max_finite + _half_ulp(fmt))  # the tie rounds to Inf
        inf_code = ((1 << fmt.ebits) - 1) << fmt.mbits
        code = b.select(b.cmpi("uge", absb, c(thr)), c(inf_code), code)
        nan = b.cmpi("ugt", absb, c(F32_INF))
        code = b.select(nan, c(inf_code | (1 << (fmt.mbits - 1))), code)
    else:  # saturate; NaN -> zero with the inverse sign (ml_dtypes)
        max_code = (1 << n) - 1
        code = b.select(b.cmpi("ugt", absb, c(f32_bits(fmt.max_finite))), c(max_code), code)
        nan = b.cmpi("ugt", absb, c(F32_INF))
        code = b.select(nan, c(0), code)
        sign = b.select(nan, b.xori(sign, c(1 << n)), sign)
    code = b.ori(code, sign)
    return b.bitcast(b.trunci(code, iw), out_elem)


def _e8m0_nearest(b: ArithBuilder, bits: ir.Value) -> ir.Value:
    """The E8M0 code (``i32``) nearest the f32 with ``bits`` (module docstring)."""
    c = lambda v: b.const(v, b.i32)  # noqa: E731
    # Normal f32: exponent + (mantissa >= 1.5); the carry does it.
    code = b.shrui(b.addi(bits, c(0x00400000)), c(23))
    # Positive f32 subnormal: the nearest of 2^-127 and 2^-126, ties (1.5 *
    # 2^-127) away from zero, as for normals; below 2^-127 the result is
    # 2^-127, the smallest code.
    sub = b.extui(b.cmpi("uge", bits, c(0x00600000)), b.i32)
    code = b.select(b.cmpi("ult", bits, c(0x00800000)), sub, code)
    # 0, negatives, Inf, NaN: (bits - 1) >= 0x7f7fffff unsigned.
    bad = b.cmpi("uge", b.subi(bits, c(1)), c(0x7F7FFFFF))
    return b.select(bad, c(SCALE_NAN_CODE), code)


def _half_ulp(fmt: NarrowFormat) -> float:
    """Half the spacing of the narrow format just below its largest finite."""
    e = math.floor(math.log2(fmt.max_finite))
    return 2.0 ** (e - fmt.mbits - 1)


# --------------------------------------------------------------------------
# The rewrites


def _is_std_float(t: ir.Type) -> bool:
    return str(t) in ("f16", "bf16", "f32", "f64")


def _to_f32(b: ArithBuilder, v: ir.Value, elem: ir.Type, loc) -> ir.Value:
    """Exact widening of a standard float (f16/bf16/f32) value to f32."""
    s = str(elem)
    if s == "f32":
        return v
    if s in ("f16", "bf16"):
        return b.extf(v, b.f32)
    raise PassError(
        f"mx-expand-narrow-floats: truncation from {elem} to a narrow float is not "
        "supported (f64 -> f32 -> narrow would round twice); truncate to f32 first",
        loc,
    )


def _from_f32(b: ArithBuilder, v: ir.Value, elem: ir.Type) -> ir.Value:
    """f32 -> standard float ``elem`` with one upstream (RNE) conversion."""
    s = str(elem)
    if s == "f32":
        return v
    if s == "f64":
        return b.extf(v, elem)
    return b.truncf(v, elem)


def _rewrite(op: ir.Operation, f16_widening: bool) -> bool:
    """Rewrite one op in place; return False when it is not ours to touch."""
    name = op.name
    loc = op.location
    if name in ("arith.extf", "arith.truncf"):
        src, res = op.operands[0], op.results[0]
        se, re = _element_type(src.type), _element_type(res.type)
        sf, rf = narrow_format(se), narrow_format(re)
        if sf is None and rf is None:
            return False
        with ir.InsertionPoint(op), loc:
            b = _builder(src.type, loc)
            if sf is not None and rf is not None:  # narrow -> narrow: exact ext, one rounding
                w = _ext_to_f32(b, src, sf, f16_widening)
                new = _trunc_from_f32(b, w, rf, re)
            elif sf is not None:
                if not _is_std_float(re):
                    raise PassError(f"mx-expand-narrow-floats: unsupported target type {re}", loc)
                new = _from_f32(b, _ext_to_f32(b, src, sf, f16_widening), re)
            else:
                if not _is_std_float(se):
                    raise PassError(f"mx-expand-narrow-floats: unsupported source type {se}", loc)
                new = _trunc_from_f32(b, _to_f32(b, src, se, loc), rf, re)
        res.replace_all_uses_with(new)
        return True
    if name in ("arith.scaling_extf", "arith.scaling_truncf"):
        src, scale, res = op.operands[0], op.operands[1], op.results[0]
        se, ce, re = (_element_type(v.type) for v in (src, scale, res))
        if not any(narrow_format(t) for t in (se, ce, re)):
            return False
        with ir.InsertionPoint(op), loc:
            b = _builder(src.type, loc)
            if narrow_format(ce) is not None:
                s32 = _ext_to_f32(b, scale, narrow_format(ce), f16_widening)
            else:
                s32 = _to_f32(b, scale, ce, loc)
            x = (
                _ext_to_f32(b, src, narrow_format(se), f16_widening)
                if narrow_format(se)
                else _to_f32(b, src, se, loc)
            )
            # scaling_extf multiplies by the scale, scaling_truncf divides.
            y = b.fmul(x, s32) if name == "arith.scaling_extf" else b.fdiv(x, s32)
            if narrow_format(re) is not None:
                new = _trunc_from_f32(b, y, narrow_format(re), re)
            else:
                new = _from_f32(b, y, re)
        res.replace_all_uses_with(new)
        return True
    return False


_OPS = ("arith.extf", "arith.truncf", "arith.scaling_extf", "arith.scaling_truncf")


@register_pass(
    "mx-expand-narrow-floats",
    "Expand arith conversions from/to f8/f6/f4/E8M0 into integer and f32 arithmetic "
    "that convert-arith-to-llvm handles",
    options=[
        Option(
            "f16-widening",
            bool,
            True,
            "Widen element codes by the format table's recipe, as the kernels do "
            "(f8/f6/f4 through f16 and the hardware f16->f32 conversion) instead of "
            "pure integer arithmetic.",
        )
    ],
)
def expand_narrow_floats(op: ir.Operation, *, f16_widening: bool = True) -> None:
    """Run the expansion on every nested op of ``op`` (normally a module)."""
    dead = []
    for o in collect(op, lambda o: o.name in _OPS):
        if _rewrite(o, f16_widening):
            dead.append(o)
    for o in dead:
        o.erase()

"""Random mx programs and inputs for the differential tester.

:func:`random_program` builds a function of one to five mx ops (random
shapes, element formats, block sizes and axes; constant and runtime
``fold_scale`` alphas; the ``quantize(dequantize(t))`` pattern); every value
it computes is returned or used, and ``block_matmul`` results are returned,
never consumed, so that every other result is exact and comparable with the
oracle bit for bit.  :func:`random_inputs` feeds it NaN, +-Inf, +-0, f32
subnormals, saturating magnitudes, huge values, and MX operands with any
element code and scale codes 0, 1, 253, 254 and 255.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import numpy as np

from mlir_mx import numerics as N
from mlir_mx.numerics.formats import ELEMENT_FORMATS

__all__ = ["Program", "random_program", "random_inputs", "ALPHAS"]



def _mx_str(shape, elem, bs, axis) -> str:
    dims = "x".join(map(str, shape))
    ax = f", axis = {axis}" if axis != len(shape) - 1 else ""
    return f"!mx.tensor<{dims}x{elem}, block_size = {bs}, scale_type = f8E8M0FNU{ax}>"


def _f32_str(shape) -> str:
    return "tensor<" + "".join(f"{d}x" for d in shape) + "f32>"


@dataclass
class _Val:
    name: str
    shape: tuple[int, ...]
    mx: tuple[str, int, int] | None = None  # (element, block size, axis)
    used: bool = False

    @property
    def type(self) -> str:
        return _mx_str(self.shape, *self.mx) if self.mx else _f32_str(self.shape)


@dataclass
class _MatMul:
    m: int
    n: int
    block_size: int


@dataclass
class Program:
    """A random mx function: its arguments, ops (SSA, in order) and text."""

    name: str
    args: list = field(default_factory=list)  # _Val, or ("alpha", name)
    ops: list = field(default_factory=list)  # (kind, out, operands...)
    results: list = field(default_factory=list)
    matmuls: list = field(default_factory=list)
    matmul_operands: set = field(default_factory=set)

    def text(self) -> str:
        params = ", ".join(
            f"%{a[1]}: f32" if isinstance(a, tuple) else f"%{a.name}: {a.type}" for a in self.args
        )
        lines = [f"func.func @{self.name}({params}) -> ({', '.join(r.type for r in self.results)}) {{"]
        for kind, out, *ins in self.ops:
            lines.append("  " + _op_text(kind, out, ins))
        names = ", ".join(f"%{r.name}" for r in self.results)
        lines.append(f"  return {names} : {', '.join(r.type for r in self.results)}\n}}")
        return "\n".join(lines)


def _op_text(kind, out, ins) -> str:
    if kind == "quantize":
        return f"%{out.name} = mx.quantize_block %{ins[0].name} : {ins[0].type} -> {out.type}"
    if kind == "dequantize":
        return f"%{out.name} = mx.dequantize_block %{ins[0].name} : {ins[0].type} -> {out.type}"
    if kind == "fold":
        t, alpha = ins
        if alpha[0] == "const":
            bits = int(np.float32(alpha[1]).view(np.uint32))
            c = f"%{out.name}_c = arith.constant 0x{bits:08X} : f32\n  "
            return c + f"%{out.name} = mx.fold_scale %{t.name}, %{out.name}_c : {t.type}, f32 -> {t.type}"
        return f"%{out.name} = mx.fold_scale %{t.name}, %{alpha[1]} : {t.type}, f32 -> {t.type}"
    a, b, acc = ins
    return f"%{out.name} = mx.block_matmul %{a.name}, %{b.name}, %{acc.name} : {a.type}, {b.type}, {acc.type} -> {out.type}"


_ELEMS = tuple(ELEMENT_FORMATS)
ALPHAS = (1.0, 2.0, 0.5, 2.0**-20, 2.0**100, 2.0**-149, 3.0, -2.0, 0.0, 1.5, 2.0**127)


def _new_arg(p: Program, rng: random.Random, shape, mx=None) -> _Val:
    v = _Val(f"a{len(p.args)}", tuple(shape), mx)
    p.args.append(v)
    return v


def _blocked_shape(rng: random.Random, rank: int | None = None):
    rank = rank or rng.randint(1, 3)
    bs = rng.choice((2, 4, 8, 16, 32, 32))
    axis = rng.randrange(rank)
    shape = [rng.choice((1, 2, 3, 4)) for _ in range(rank)]
    shape[axis] = bs * rng.choice((1, 2))
    return tuple(shape), bs, axis


def random_program(rng: random.Random, name: str) -> Program:
    """A function of one to five mx ops (every value it computes is returned
    or used; block_matmul results are returned, never consumed)."""
    p, vals, n = Program(name), [], 0

    def fresh(shape, mx=None) -> _Val:
        nonlocal n
        n += 1
        v = _Val(f"v{n}", tuple(shape), mx)
        vals.append(v)
        return v

    def an_mx(rank=None) -> _Val:
        pool = [v for v in vals + [a for a in p.args if isinstance(a, _Val)] if v.mx]
        pool = [v for v in pool if (rank is None or len(v.shape) == rank)]
        if pool and rng.random() < 0.6:
            return rng.choice(pool)
        shape, bs, axis = _blocked_shape(rng, rank)
        if rng.random() < 0.5:
            x = _new_arg(p, rng, shape)
            q = fresh(shape, (rng.choice(_ELEMS), bs, axis))
            p.ops.append(("quantize", q, x))
            x.used = True
            return q
        return _new_arg(p, rng, shape, (rng.choice(_ELEMS), bs, axis))

    for _ in range(rng.randint(1, 5)):
        kind = rng.choice(("quantize", "dequantize", "fold", "fold", "matmul", "qdq"))
        if kind == "matmul":
            bs = rng.choice((8, 16, 32, 32))
            m, k, nn = rng.choice((1, 2, 3, 4, 8)), bs * rng.choice((1, 2)), rng.choice((1, 2, 5, 8, 16))
            a = _new_arg(p, rng, (m, k), (rng.choice(_ELEMS), bs, 1))
            b = (
                _new_arg(p, rng, (k, nn), (rng.choice(_ELEMS), bs, 0))
                if rng.random() < 0.5
                else _new_arg(p, rng, (k, nn))
            )
            acc = _new_arg(p, rng, (m, nn))
            out = fresh((m, nn))
            p.ops.append(("matmul", out, a, b, acc))
            p.matmuls.append(_MatMul(m, nn, bs))
            p.matmul_operands |= {b.name, acc.name}
            for v in (a, b, acc):
                v.used = True
            continue
        t = an_mx()
        t.used = True
        if kind == "dequantize":
            p.ops.append(("dequantize", fresh(t.shape), t))
        elif kind == "fold":
            if rng.random() < 0.4:
                p.args.append(("alpha", f"s{len(p.args)}"))
                alpha = ("arg", p.args[-1][1])
            else:
                alpha = ("const", rng.choice(ALPHAS))
            p.ops.append(("fold", fresh(t.shape, t.mx), t, alpha))
        else:  # quantize (another format of a dequantized t), or the qdq pattern
            d = fresh(t.shape)
            p.ops.append(("dequantize", d, t))
            d.used = True
            mx = t.mx if kind == "qdq" else (rng.choice(_ELEMS),) + t.mx[1:]
            p.ops.append(("quantize", fresh(t.shape, mx), d))
    p.results = [v for v in vals if not v.used]
    return p


# ------------------------------------------------------------------ inputs

_SPECIALS = (np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-40, -3e-42, 1.17549435e-38, 3e38, -3.4e38)


def _f32_input(shape, rng: np.random.Generator, matmul: bool = False) -> np.ndarray:
    """Mostly N(0, 4); then any exponent, saturating magnitudes and specials
    (fewer for a matmul operand).  One matmul operand in four reaches the
    edges of the f32 range: subnormals and magnitudes up to 2^127 (the
    outputs that leave the claim of docs/numerics.md are then not compared,
    those inside it must hold at its edge)."""
    edge = matmul and rng.random() < 0.25
    top = 128 if edge or not matmul else 60
    mag = np.ldexp(rng.uniform(1, 2, shape), rng.integers(-149 if edge else -140, top, shape))
    x = (mag * rng.choice((-1, 1), shape)).astype(np.float32)
    near = rng.standard_normal(shape).astype(np.float32) * 4
    x = np.where(rng.random(shape) < (0.4 if edge else 0.8), near, x)
    # saturating magnitudes: the top binade of every format, above max normal
    sat = np.float32(rng.choice((470.0, 500.0, 60000.0, 7.9, 30.0, 1.99, 7.0, 63000.0)))
    x = np.where(rng.random(shape) < 0.1, sat * rng.choice((-1, 1), shape), x)
    specials = np.array(_SPECIALS[:7] if matmul else _SPECIALS, np.float32)
    odd = rng.choice(specials, shape)
    return np.where(rng.random(shape) < (0.03 if matmul else 0.08), odd, x).astype(np.float32)


def _mx_input(v: _Val, rng: np.random.Generator) -> N.MXArray:
    elem, bs, axis = v.mx
    fmt = N.element_format(elem)
    finite = N.finite_codes(fmt)
    codes = rng.choice(finite, v.shape).view(np.uint8)
    if rng.random() < 0.3:  # any code: element NaN/Inf codes, i8 -128 (never from quantize)
        anyc = rng.integers(0, fmt.num_codes, v.shape).astype(np.uint8)
        codes = np.where(rng.random(v.shape) < 0.1, anyc, codes)
    sshape = N.scale_shape(v.shape, bs, axis)
    scales = rng.integers(110, 140, sshape)
    odd = rng.choice(np.array((0, 1, 254, 253, 255, 127), np.int64), sshape)
    scales = np.where(rng.random(sshape) < 0.25, odd, scales)
    if rng.random() < 0.25:  # the edges of the range: scales near 2^-127 and 2^127
        edge = rng.choice(np.array((0, 1, 2, 3, 4, 248, 250, 252, 253, 254), np.int64), sshape)
        scales = np.where(rng.random(sshape) < 0.6, edge, scales)
    if rng.random() < 0.3:  # a zero block slab (against whatever scales it meets)
        j = int(rng.integers(0, v.shape[axis] // bs))
        slab = [slice(None)] * codes.ndim
        slab[axis] = slice(j * bs, (j + 1) * bs)
        codes = codes.copy()
        codes[tuple(slab)] = 0
    scales = scales.astype(np.uint8)
    return N.MXArray(codes.astype(np.uint8).view(fmt.dtype), scales.view(N.SCALE_DTYPE), elem, bs, axis)


def random_inputs(p: Program, rng: np.random.Generator) -> list:
    """Arguments for ``p``: f32 arrays, MXArrays and alphas, specials included."""
    out = []
    for a in p.args:
        if isinstance(a, tuple):
            out.append(float(rng.choice(np.array(ALPHAS + (np.nan, np.inf, 2.0**-126), np.float64))))
        elif a.mx:
            out.append(_mx_input(a, rng))
        else:
            out.append(_f32_input(a.shape, rng, matmul=a.name in p.matmul_operands))
    return out

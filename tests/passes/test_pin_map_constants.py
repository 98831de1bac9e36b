"""mx-pin-map-constants never changes what a map computes.

Random affine expressions (dims, constants, +, * by constants of either sign,
floordiv / ceildiv / mod by positive constants) over random static loop
ranges are evaluated by brute force on every point of the iteration box and
compared with the rewritten map.  The reference evaluator works on the
Python expression tree, independently of MLIR and of the pass's evaluator.
"""

import itertools
import random

import pytest
from mlir import ir

from mlir_mx.passes.pin_map_constants import is_monotone, loop_ranges, pin_map_results

N_EXPRS = 6000


def gen(rng: random.Random, ndims: int, depth: int):
    """A random expression tree: ('dim', i) | ('const', c) | (op, a, b)."""
    if depth == 0 or rng.random() < 0.25:
        if rng.random() < 0.75:
            return ("dim", rng.randrange(ndims))
        return ("const", rng.randint(-4, 40))
    op = rng.choice(["add", "mul", "floordiv", "ceildiv", "mod", "add", "floordiv"])
    a = gen(rng, ndims, depth - 1)
    if op == "add":
        return ("add", a, gen(rng, ndims, depth - 1))
    if op == "mul":
        return ("mul", a, ("const", rng.choice([-3, -1, 0, 1, 2, 3, 4])))
    return (op, a, ("const", rng.choice([1, 2, 3, 4, 8, 16, 32, 64])))


def ref_eval(t, pt):
    kind = t[0]
    if kind == "dim":
        return pt[t[1]]
    if kind == "const":
        return t[1]
    a, b = ref_eval(t[1], pt), ref_eval(t[2], pt)
    if kind == "add":
        return a + b
    if kind == "mul":
        return a * b
    if kind == "floordiv":
        return a // b
    if kind == "ceildiv":
        return -((-a) // b)
    return a % b  # mod by a positive constant is non-negative


def to_mlir(t):
    kind = t[0]
    if kind == "dim":
        return ir.AffineDimExpr.get(t[1])
    if kind == "const":
        return ir.AffineConstantExpr.get(t[1])
    a, b = to_mlir(t[1]), to_mlir(t[2])
    return {
        "add": ir.AffineAddExpr.get,
        "mul": ir.AffineMulExpr.get,
        "floordiv": ir.AffineFloorDivExpr.get,
        "ceildiv": ir.AffineCeilDivExpr.get,
        "mod": ir.AffineModExpr.get,
    }[kind](a, b)


def test_random_expressions_never_change_meaning():
    rng = random.Random(20261130)
    ctx = ir.Context()
    pinned = unchanged = 0
    with ctx:
        for _ in range(N_EXPRS):
            ndims = rng.randint(1, 3)
            ranges = [rng.choice([1, 2, 3, 4, 8, 16, 31, 32, 33, 40]) for _ in range(ndims)]
            tree = gen(rng, ndims, rng.randint(1, 4))
            expr = to_mlir(tree)
            amap = ir.AffineMap.get(ndims, 0, [expr])
            new = pin_map_results(amap, ranges)
            points = itertools.product(*(range(r) for r in ranges))
            if new is None:
                unchanged += 1
                continue
            pinned += 1
            const = new.results[0].maybe_downcast()
            assert isinstance(const, ir.AffineConstantExpr), str(new)
            for pt in points:
                assert ref_eval(tree, pt) == const.value, (str(amap), ranges, pt, str(new))
    # the generator must exercise both outcomes substantially
    assert pinned > 500 and unchanged > 500, (pinned, unchanged)


def test_monotonicity_rules():
    with ir.Context():
        d0, d1 = ir.AffineDimExpr.get(0), ir.AffineDimExpr.get(1)
        c = ir.AffineConstantExpr.get
        assert is_monotone(ir.AffineFloorDivExpr.get(d0, c(32)))
        assert is_monotone(ir.AffineAddExpr.get(ir.AffineMulExpr.get(d0, c(3)), d1))
        assert not is_monotone(ir.AffineModExpr.get(d0, c(32)))
        assert not is_monotone(ir.AffineMulExpr.get(d0, c(-1)))
        assert not is_monotone(ir.AffineMulExpr.get(d0, ir.AffineSymbolExpr.get(0)))


@pytest.mark.parametrize(
    "k_tile, block, pinned",
    [(32, 32, True), (16, 32, True), (32, 16, False), (64, 32, False), (64, 64, True)],
)
def test_tile_block_combinations(k_tile, block, pinned):
    # (d0, d2 floordiv block) over a K tile starting at a block boundary
    with ir.Context():
        d0, d2 = ir.AffineDimExpr.get(0), ir.AffineDimExpr.get(2)
        amap = ir.AffineMap.get(3, 0, [d0, ir.AffineFloorDivExpr.get(d2, ir.AffineConstantExpr.get(block))])
        new = pin_map_results(amap, [32, 32, k_tile])
        assert (new is not None) == pinned
        if pinned:
            assert str(new) == "(d0, d1, d2) -> (d0, 0)"


def test_loop_ranges_from_bare_dims():
    with ir.Context():
        d = [ir.AffineDimExpr.get(i) for i in range(3)]
        maps = [
            ir.AffineMap.get(3, 0, [d[0], d[2]]),
            ir.AffineMap.get(3, 0, [d[0], ir.AffineFloorDivExpr.get(d[2], ir.AffineConstantExpr.get(32))]),
            ir.AffineMap.get(3, 0, [d[2], d[1]]),
        ]
        assert loop_ranges(maps, [(32, 64), (32, 2), (64, 16)]) == [32, 16, 64]
        # d0 unknown (only unranked/dynamic operands name it); d1, d2 from B
        assert loop_ranges(maps, [None, None, (64, 16)]) == [None, 16, 64]
        assert loop_ranges(maps, [(None, 64), None, None]) == [None, None, 64]
        assert loop_ranges(maps, [None, None, None]) is None

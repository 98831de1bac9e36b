"""NVFP4 weights in ``mlir_mx.torch`` (issue 54 item 3): an ``MXLinear`` takes
an NVFP4 MXArray where an MXFP4 one goes and gives ``Linear``'s bits (eager
and traced); its saved form keeps the global scale (``weight_global_scale``,
state_dict and pickle); sibling layers fuse when they share one global
scale, and are refused by name when they do not."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch not installed (pip install 'mlir-mx[test]')")

from mlir_mx import oracle  # noqa: E402
from mlir_mx.errors import MXValueError  # noqa: E402
from mlir_mx.linear import Linear  # noqa: E402
from mlir_mx.numerics import MXArray  # noqa: E402
from mlir_mx.torch import MXLinear  # noqa: E402
from mlir_mx.torch.fused import FusedWeight, concat_rows  # noqa: E402


def _w(n, k=64, seed=0, g=None):
    rng = np.random.default_rng(seed)
    return oracle.quantize(rng.standard_normal((n, k)).astype(np.float32), "nvfp4", axis=1,
                           global_scale=g)  # fmt: skip


def _same(a, b) -> bool:
    return np.array_equal(np.asarray(a).view(np.uint32), np.asarray(b).view(np.uint32))


def test_mxlinear_takes_nvfp4_and_keeps_its_global_scale():
    w = _w(96)
    layer = MXLinear(w)
    x = torch.randn(3, 64)
    want = Linear(w)(x.numpy())
    assert _same(layer(x).detach(), want)
    from torch.fx.experimental.proxy_tensor import make_fx

    assert _same(make_fx(layer)(x)(x).detach(), want)  # traced: the custom op
    sd = layer.state_dict()
    assert float(sd["weight_global_scale"]) == w.global_scale
    other = MXLinear(_w(96, seed=1))
    other.load_state_dict(sd)
    assert other.weight().bitwise_equal(w) and _same(other(x).detach(), want)
    for again in (pickle.loads(pickle.dumps(layer)), copy.deepcopy(layer)):
        assert again.weight().bitwise_equal(w) and _same(again(x).detach(), want)


def test_siblings_fuse_with_one_global_scale_only():
    g = np.float32(300.0)
    parts = [_w(64, seed=2, g=g), _w(32, seed=3, g=g)]
    fused = FusedWeight(concat_rows(parts), [64, 32])
    layers = [MXLinear(p) for p in parts]
    for i, layer in enumerate(layers):
        fused.attach(layer, i)
    x = torch.randn(2, 64)
    for part, layer in zip(parts, layers, strict=True):
        assert _same(layer(x).detach(), Linear(part)(x.numpy()))
        assert layer.weight().bitwise_equal(part)
    again = pickle.loads(pickle.dumps(layers))
    assert _same(again[1](x).detach(), layers[1](x).detach())
    with pytest.raises(MXValueError, match="one global scale"):
        concat_rows([_w(64, seed=4), _w(32, seed=5)])


def test_a_fused_nvfp4_weight_narrows_to_its_parts_rows():
    """Tensor parallel's narrowing of a fused weight (each part's own rows)
    keeps NVFP4's E4M3 scales and the one global scale: each narrowed part
    computes what a Linear over those rows of its weight computes."""
    g = np.float32(300.0)
    parts = [_w(64, seed=6, g=g), _w(32, seed=7, g=g)]
    fused = FusedWeight(concat_rows(parts), [64, 32])
    layers = [MXLinear(p) for p in parts]
    for i, layer in enumerate(layers):
        fused.attach(layer, i)
    fused.narrow_parts([32, 16], [32, 16])
    x = torch.randn(2, 64)
    for part, layer, a in zip(parts, layers, (32, 16), strict=True):
        rows = oracle.dequantize(part)[a : 2 * a]
        got = layer(x).detach().numpy()
        assert layer.weight().global_scale == g and layer.weight().format_name == "nvfp4"
        assert np.array_equal(oracle.dequantize(layer.weight()).view(np.uint32), rows.view(np.uint32))
        own = MXArray.from_packed(part.packed_codes()[a : 2 * a], part.scales[a : 2 * a],
                                  "nvfp4", 16, axis=1, global_scale=g)  # fmt: skip
        assert _same(got, Linear(own)(x.numpy()))

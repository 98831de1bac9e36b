"""quantize_(fuse=...): sibling MXLinears (q/k/v, gate/up) with one fused MX weight
and one kernel call: the same bits as the separate layers, the same state_dict,
loads both ways, and correct whatever order or input the siblings are called with."""

from __future__ import annotations

import copy
import io
import pickle

import pytest

torch = pytest.importorskip("torch", reason="torch not installed (pip install 'mlir-mx[test]')")

from llama_cases import prompt, tiny_llama  # noqa: E402

from mlir_mx.errors import MXArgTypeError  # noqa: E402
from mlir_mx.linear import Linear  # noqa: E402
from mlir_mx.numerics import ELEMENT_FORMATS  # noqa: E402
from mlir_mx.torch import MXLinear, quantize_  # noqa: E402


class Attention(torch.nn.Module):
    """Three projections of one input, out sizes that are not multiples of 64."""

    def __init__(self, sizes=(96, 40, 24), k=64, bias=False, seed=0):
        super().__init__()
        torch.manual_seed(seed)
        for name, n in zip(("q_proj", "k_proj", "v_proj"), sizes, strict=True):
            setattr(self, name, torch.nn.Linear(k, n, bias=bias))

    def forward(self, x):
        return torch.cat([self.q_proj(x), self.k_proj(x), self.v_proj(x)], -1)


def _pair(fmt="f4E2M1FN", activations=None, **kw):
    a, b = Attention(**kw), Attention(**kw)
    quantize_(a, fmt, activations=activations)
    summary = quantize_(b, fmt, activations=activations, fuse=True)
    assert summary.fused == [["q_proj", "k_proj", "v_proj"]]
    return a, b


class _Calls:
    """Counts the kernel calls (``mlir_mx.Linear.__call__``, and its form from
    addresses, ``Linear.call_into``, where it ran the kernel)."""

    def __init__(self, monkeypatch):
        self.n, real, raw = 0, Linear.__call__, Linear.call_into

        def counted(lin, *args, **kw):
            self.n += 1
            return real(lin, *args, **kw)

        def counted_raw(lin, *args):
            ran = raw(lin, *args)
            self.n += ran
            return ran

        monkeypatch.setattr(Linear, "__call__", counted)
        monkeypatch.setattr(Linear, "call_into", counted_raw)


#: A float format of each code width (4: two codes a byte; 6: four codes in three
#: bytes; 8: one a byte): each stored form packs along ``out`` differently.
BY_BITS = {f.bits: n for n, f in reversed(ELEMENT_FORMATS.items()) if not f.is_int}


@pytest.mark.parametrize(
    "bits,activations,bias",
    [(4, None, False), (4, "i8", True),
     # the other packings of the stored form (they compile more kernels: slow)
     pytest.param(8, None, True, marks=pytest.mark.slow),
     pytest.param(6, None, False, marks=pytest.mark.slow)],
)  # fmt: skip
def test_fused_gives_the_bits_of_the_separate_layers(bits, activations, bias):
    a, b = _pair(BY_BITS[bits], activations, bias=bias)
    for rows, dtype in ((1, torch.float32), (5, torch.float32), (5, torch.bfloat16)):
        x = torch.randn(rows, 64).to(dtype)
        with torch.inference_mode():
            assert torch.equal(a(x), b(x))  # the three in order: one fused call
            for name in ("v_proj", "q_proj", "k_proj"):  # each alone, another order
                assert torch.equal(getattr(a, name)(x), getattr(b, name)(x))
    assert b.k_proj.weight().bitwise_equal(a.k_proj.weight())
    assert sum(getattr(b, n).nbytes for n in ("q_proj", "k_proj", "v_proj")) == b.q_proj.fused.linear.nbytes
    parts = [getattr(b, n) for n in ("q_proj", "k_proj", "v_proj")]
    assert [p.fused_part for p in parts] == [0, 1, 2] and a.q_proj.fused is None
    assert all(p.fused is parts[0].fused and p.linear is p.fused.linear for p in parts)


@pytest.mark.parametrize("mode", ["inference_mode", "no_grad"])
def test_one_kernel_call_per_shared_input_and_never_a_stale_result(monkeypatch, mode):
    a, b = _pair(bias=True)
    calls = _Calls(monkeypatch)
    ctx = torch.inference_mode if mode == "inference_mode" else torch.no_grad
    with ctx():
        x = torch.randn(2, 64)
        want = a(x)
        calls.n = 0
        assert torch.equal(b(x), want) and calls.n == 1
        # a sibling called again, or with another input: its own (fused) call
        assert torch.equal(b.k_proj(x), a.k_proj(x)) and calls.n == 3
        y = torch.randn(2, 64)
        q = b.q_proj(x)
        assert torch.equal(b.k_proj(y), a.k_proj(y))  # not x's columns
        # x changed in place after q_proj read it: k_proj sees the new values
        x.mul_(2)
        assert torch.equal(b.k_proj(x), a.k_proj(x))
        assert torch.equal(q, a.q_proj(x / 2))
        # a new tensor at the same address is not the old one
        z = torch.randn(2, 64)
        b.q_proj(z)
        ptr = z.data_ptr()
        del z
        w = torch.randn(2, 64)
        if w.data_ptr() == ptr:
            assert torch.equal(b.v_proj(w), a.v_proj(w))
        assert torch.equal(b.v_proj(w), a.v_proj(w))


@pytest.mark.parametrize("libc", [True, False], ids=["memcmp", "python-compare"])
def test_inference_inputs_are_compared_by_their_bytes(monkeypatch, libc):
    """An inference tensor has no version counter: a copy of its bytes, kept
    with the result, decides a hit.  Identical bytes hit, NaN included (one
    kernel call for the three layers); one changed element, or a sibling whose
    input grew at the same address, misses.  Without libc's memcmp the bytes
    are compared in Python, with the same outcome."""
    import mlir_mx.torch.fused as fused

    if not libc:
        monkeypatch.setattr(fused, "_MEMCMP", None)
    a, b = _pair(bias=True)
    calls = _Calls(monkeypatch)
    bits = lambda t: t.view(torch.int32)  # noqa: E731  (NaN != NaN for torch.equal)
    with torch.inference_mode():
        x = torch.randn(1, 3, 64)
        x[0, 1, 5] = float("nan")
        want = [bits(getattr(a, n)(x)) for n in ("q_proj", "k_proj", "v_proj")]
        calls.n = 0
        got = [bits(getattr(b, n)(x)) for n in ("q_proj", "k_proj", "v_proj")]
        assert calls.n == 1 and all(torch.equal(g, w) for g, w in zip(got, want, strict=True))
        b.q_proj(x)
        x[0, 2, 63] += 1.0  # the last byte range of the copy
        calls.n = 0
        assert torch.equal(bits(b.k_proj(x)), bits(a.k_proj(x))) and calls.n == 2
        assert b.v_proj(x).shape == (1, 3, 24) and calls.n == 2  # k_proj's call kept for v
        q = b.q_proj(x[:, :2])  # a view at the same address, fewer rows: not a hit
        assert torch.equal(bits(q), bits(a.q_proj(x[:, :2])))
        assert torch.equal(bits(b.k_proj(x)), bits(a.k_proj(x)))
        # a prefill-sized input's copy goes with its result (a small one is reused)
        kept = b.q_proj._fused._kept
        big = torch.randn(fused._REUSE // (4 * 64) + 1, 64)
        b.q_proj(big)
        assert len(kept.buf) == big.numel() * 4
        b.k_proj(big), b.v_proj(big)  # every part taken: result and copy dropped
        assert kept.y is None and kept.buf is None
        b.q_proj(x)
        small = kept.buf
        b.q_proj(x + 1)
        assert kept.buf is small and len(small) == x.numel() * 4


def test_a_fused_llama_decodes_as_the_separate_one(monkeypatch):
    a, b = tiny_llama(), tiny_llama()
    quantize_(a, "f4E2M1FN")
    summary = quantize_(b, "f4E2M1FN", fuse=True)
    assert len(summary.fused) == 4 and "4 groups fused" in str(summary)
    calls = _Calls(monkeypatch)
    ids = prompt(9)
    with torch.inference_mode():
        za, ca = a(ids, use_cache=True), calls.n
        zb, cb = b(ids, use_cache=True), calls.n - ca
        assert torch.equal(za.logits, zb.logits)
        assert (ca, cb) == (15, 15 - 2 * 3)  # per layer: 7 calls -> 4
        nxt = za.logits[:, -1:].argmax(-1)
        assert torch.equal(a(nxt, cache=za.cache).logits, b(nxt, cache=zb.cache).logits)


def test_state_dict_keys_shapes_and_loading_both_ways():
    a, b = tiny_llama(seed=1), tiny_llama(seed=2)
    quantize_(a, "f4E2M1FN")
    quantize_(b, "f4E2M1FN", fuse=True)
    sa, sb = ({k: v.clone() for k, v in m.state_dict().items()} for m in (a, b))
    assert list(sa) == list(sb)
    assert all(sa[k].shape == sb[k].shape and sa[k].dtype == sb[k].dtype for k in sa)
    ids = prompt(7)
    with torch.inference_mode():
        za, zb = a(ids).logits, b(ids).logits
    buf = io.BytesIO()
    torch.save(sb, buf)  # fused -> saved -> into the unfused model
    buf.seek(0)
    a.load_state_dict(torch.load(buf))
    b.load_state_dict(sa)  # unfused -> into the fused model (each part rebuilds the fused weight)
    with torch.inference_mode():
        assert torch.equal(a(ids).logits, zb) and torch.equal(b(ids).logits, za)
    assert b.model.layers[0].self_attn.k_proj._fused is b.model.layers[0].self_attn.q_proj._fused
    c = tiny_llama(seed=1)
    quantize_(c, "f4E2M1FN", fuse=True)
    c.load_state_dict(b.state_dict())  # fused -> fused: a round trip
    with torch.inference_mode():
        assert torch.equal(c(ids).logits, za)


@pytest.mark.parametrize("how", ["deepcopy", "pickle"])
def test_copies_keep_one_fused_weight_per_group(how):
    _, b = _pair(bias=True)
    c = copy.deepcopy(b) if how == "deepcopy" else pickle.loads(pickle.dumps(b))
    assert c.q_proj._fused is c.v_proj._fused is not b.q_proj._fused
    assert isinstance(c.k_proj, MXLinear) and c.k_proj.out_features == 40
    x = torch.randn(3, 64)
    with torch.inference_mode():
        assert torch.equal(c(x), b(x))


def test_fuse_argument_is_checked():
    with pytest.raises(MXArgTypeError, match="fuse: expected"):
        quantize_(Attention(), fuse=["q_proj"])
    # a group whose layers were not all converted here is left as it is
    m = Attention()
    summary = quantize_(m, fuse=True, filter_fn=lambda _m, name: name != "v_proj")
    assert summary.fused == [] and m.q_proj._fused is None
    summary = quantize_(Attention(), fuse=[("q_proj", "k_proj")])
    assert summary.fused == [["q_proj", "k_proj"]]


def test_the_fused_layers_export_with_the_eager_bits():
    _, b = _pair()
    x = torch.randn(2, 64)
    with torch.inference_mode():
        want = b(x)
    ep = torch.export.export(b, (x,))
    assert "mlir_mx.linear" in str(ep.graph)
    with torch.inference_mode():
        assert torch.equal(ep.module()(x), want)

"""How many (row, block)s of a Llama's Linear inputs pass the AMX exactness guard?
(issue 51, session 53; the guard: bench/probes/amx-bf16-guard.c, docs/numerics.md "AMX-BF16")

    PATH=/work/main/.venv/bin:$PATH python bench/probes/amx-bf16-llama.py [--layers 4] [--tokens 128]

Builds a transformers LlamaForCausalLM from a TinyLlama-shaped config with random
weights (transformers' own initialisation, std 0.02), in bf16, runs one prefill of
random token ids, and records the input of every nn.Linear (bf16 values). For each
(row, 32-element block) along K it evaluates the guard

    g = largest power of two dividing every nonzero a[k];  S = sum |a[k]|
    pass <=> all finite, g q >= 2^-126, S bmax <= 2^24 g q

for each weight format (q its smallest positive value, bmax its largest), and prints
the share that passes, per Linear kind and overall; the 16-row AMX tile share is the
share of (16-row group, block)s whose 16 rows all pass. Then, where gcc and AMX are
there, it runs TDPBF16PS (zero tile, E2M1 weights drawn at random) on sampled guarded
blocks of these activations and checks the bits against the in-order FMA chain.

Random weights are not a trained model: a trained Llama's hidden states have
outlier channels and other magnitudes; read the shares as an estimate.

Seen on this host (Intel Xeon, Sapphire Rapids class, KVM), 2026-12-05, --layers 4
--tokens 128, share passing per (row, block) / per (16-row tile, block):

    input of    E2M1         E2M3        E3M2       INT8        E4M3, E5M2
    q/k/v       95.5/47.6    78.0/1.8    11.8/0.0   59.2/0.0    0/0
    o_proj      94.5/42.2    75.3/1.5    11.5/0.0   54.6/0.0    0/0
    gate/up     95.5/47.9    78.0/2.0    11.4/0.0   58.6/0.0    0/0
    down_proj   77.0/1.3     35.6/0.0     0.5/0.0   14.4/0.0    0/0
    all         89.6/32.5    64.4/1.2     8.1/0.0   44.5/0.0    0/0
    N(0,1)      94.0         76.6        11.2       58.0        0

and TDPBF16PS on 4000 guarded 16-row tiles of these inputs against random E2M1
weights: 1,024,000 of 1,024,000 elements equal to the in-order chain.
"""

import argparse
import ctypes
import os
import subprocess
import tempfile

import numpy as np
import torch

FORMATS = {  # name: (q, bmax)
    "E2M1": (0.5, 6.0),
    "E2M3": (0.125, 7.5),
    "E3M2": (0.0625, 28.0),
    "INT8": (1 / 64, 2.0),
    "E4M3": (2.0**-9, 448.0),
    "E5M2": (2.0**-16, 57344.0),
}


def guard_inputs(a: np.ndarray):
    """a: (rows, K) float32 holding bf16 values, K % 32 == 0 -> (S, g, finite) per (row, block)."""
    rows, k = a.shape
    blocks = a.reshape(rows, k // 32, 32)
    u = blocks.view(np.uint32)
    e = (u >> 23) & 0xFF
    man = (u >> 16) & 0x7F
    sig = np.where(e == 0, man, man | 0x80).astype(np.int64)  # bf16 significand
    exp = np.where(e == 0, 1, e).astype(np.int64) - 127 - 7  # value = sig * 2^exp
    nz = sig != 0
    low = np.where(nz, sig & -sig, 1)
    lowexp = exp + np.log2(low).astype(np.int64)  # log2 of the largest power of two dividing a
    glog = np.where(nz, lowexp, 10**6).min(axis=2)
    ulplog = np.where(nz, exp, 10**6).min(axis=2)
    absb = np.abs(blocks.astype(np.float64))
    finite = np.isfinite(absb).all(axis=2)
    S = np.where(np.isfinite(absb), absb, 0).sum(axis=2)
    return S, glog, ulplog, finite


def passes(S, glog, finite, q, bmax):
    empty = S == 0
    g = np.exp2(np.minimum(glog, 200).astype(np.float64))
    ok = finite & (g * q >= 2.0**-126) & (S * bmax <= 2.0**24 * g * q) & (S * bmax < 2.0**127)
    return ok | (empty & finite)


AMX_C = r"""
#include <immintrin.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>
#include <sys/syscall.h>
typedef struct { uint8_t p, s, r[14]; uint16_t c[16]; uint8_t n[16]; } __attribute__((packed)) cfg_t;
static volatile cfg_t cfg;
int amx_init(void) {
  if (syscall(SYS_arch_prctl, 0x1023, 18)) return -1;
  memset((void *)&cfg, 0, sizeof cfg); cfg.p = 1;
  for (int t = 0; t < 3; t++) { cfg.n[t] = 16; cfg.c[t] = 64; }
  _tile_loadconfig((const void *)&cfg);
  return 0;
}
void amx_tiles(long n, const uint16_t *A, const uint16_t *B, float *C) {
  for (long t = 0; t < n; t++) {
    _tile_zero(0); _tile_loadd(1, A + t * 512, 64); _tile_loadd(2, B + t * 512, 64);
    _tile_dpbf16ps(0, 1, 2); _tile_stored(0, C + t * 256, 64);
  }
}
"""


def amx_lib():
    try:
        d = tempfile.mkdtemp()
        src, so = os.path.join(d, "amx.c"), os.path.join(d, "amx.so")
        open(src, "w").write(AMX_C)
        subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-mamx-tile", "-mamx-bf16", src, "-o", so],
                       check=True, capture_output=True)
        lib = ctypes.CDLL(so)
        return lib if lib.amx_init() == 0 else None
    except (OSError, subprocess.CalledProcessError):
        return None


def chain(a, b):
    """in-order f32 FMA chain over k, from +0, for a (T,16,32) x b (T,32,16), exact per step."""
    p = np.zeros((a.shape[0], 16, 16), np.float32)
    for k in range(32):
        prod = a[:, :, k, None].astype(np.float64) * b[:, None, k, :].astype(np.float64)  # exact
        # under the guard every partial sum is exact in f32, so this f64 sum then f32 is the
        # chain (outside it it could round twice: only guarded tiles come here)
        p = (p.astype(np.float64) + prod).astype(np.float32)
    return p


def check_on_amx(lib, samples, rng):
    """samples: (T,16,32) bf16-valued float32 row groups whose 16 rows all pass the E2M1 guard."""
    t = samples.shape[0]
    e2m1 = np.array([0, .5, 1, 1.5, 2, 3, 4, 6, -0., -.5, -1, -1.5, -2, -3, -4, -6], np.float32)
    b = e2m1[rng.integers(0, 16, size=(t, 32, 16))]
    A = np.ascontiguousarray((samples.view(np.uint32) >> 16).astype(np.uint16))
    bb = (b.view(np.uint32) >> 16).astype(np.uint16)
    B = np.zeros((t, 16, 32), np.uint16)
    B[:, :, 0::2] = bb[:, 0::2, :]
    B[:, :, 1::2] = bb[:, 1::2, :]
    C = np.zeros((t, 16, 16), np.float32)
    P = ctypes.c_void_p
    lib.amx_tiles(ctypes.c_long(t), A.ctypes.data_as(P), B.ctypes.data_as(P), C.ctypes.data_as(P))
    # under the guard every partial sum is exact in f32, hence in f64: the f64 sum is the chain
    ref = chain(samples, b)
    return int((C.view(np.uint32) == ref.view(np.uint32)).sum()), C.size


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=128)
    args = ap.parse_args()
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=2048, intermediate_size=5632, num_hidden_layers=args.layers,
                      num_attention_heads=32, num_key_value_heads=4, vocab_size=32000,
                      max_position_embeddings=2048, rms_norm_eps=1e-5)
    model = LlamaForCausalLM(cfg).to(torch.bfloat16).eval()
    inputs = {}

    def hook(name):
        def f(mod, args_):
            inputs.setdefault(name, []).append(args_[0].detach().reshape(-1, args_[0].shape[-1]).float())
        return f

    for name, mod in model.named_modules():
        if isinstance(mod, torch.nn.Linear) and name != "lm_head":
            mod.register_forward_pre_hook(hook(name))
    ids = torch.randint(0, cfg.vocab_size, (1, args.tokens))
    with torch.no_grad():
        model(ids)

    kinds = {}
    for name, xs in inputs.items():
        kinds.setdefault(name.split(".")[-1], []).append(torch.cat(xs).numpy())
    print(f"Llama, {args.layers} layers, hidden 2048, intermediate 5632, random weights, bf16, "
          f"{args.tokens} tokens")
    print(f"{'input of':<10}" + "".join(f"{f:>16}" for f in FORMATS) + "   (row-block / 16-row tile pass %)")
    tot = {f: [0, 0, 0, 0] for f in FORMATS}
    e2m1_tiles = []
    for kind, arrs in kinds.items():
        row = f"{kind:<10}"
        for f, (q, bmax) in FORMATS.items():
            n = p = nt = pt = 0
            for a in arrs:
                S, glog, _, finite = guard_inputs(a)
                ok = passes(S, glog, finite, q, bmax)
                n += ok.size
                p += int(ok.sum())
                r16 = (a.shape[0] // 16) * 16
                okt = ok[:r16].reshape(r16 // 16, 16, -1).all(axis=1)
                nt += okt.size
                pt += int(okt.sum())
                if f == "E2M1":
                    blocks = a[:r16].reshape(r16 // 16, 16, -1, 32).transpose(0, 2, 1, 3)
                    e2m1_tiles.append(blocks[okt])
            tot[f][0] += n
            tot[f][1] += p
            tot[f][2] += nt
            tot[f][3] += pt
            row += f"{100 * p / n:>9.1f}/{100 * pt / nt:<6.1f}"
        print(row)
    print(f"{'all':<10}" + "".join(f"{100 * v[1] / v[0]:>9.1f}/{100 * v[3] / v[2]:<6.1f}" for v in tot.values()))
    # the same on N(0,1) rounded to bf16, for comparison
    a = torch.randn(4096, 4096).to(torch.bfloat16).float().numpy()
    S, glog, ulplog, finite = guard_inputs(a)
    print(f"{'N(0,1)':<10}" + "".join(f"{100 * passes(S, glog, finite, q, b).mean():>9.1f}{'':7}"
                                     for q, b in FORMATS.values()))
    lib = amx_lib()
    if lib is None:
        print("AMX check skipped: no gcc with -mamx-bf16, or the kernel refused AMX")
        return
    rng = np.random.default_rng(1)
    tiles = np.concatenate(e2m1_tiles)
    pick = tiles[rng.choice(len(tiles), size=min(len(tiles), 4000), replace=False)]
    eq, n = check_on_amx(lib, np.ascontiguousarray(pick, np.float32), rng)
    print(f"AMX, E2M1 weights at random, guarded 16-row tiles of these inputs: {eq} of {n} elements equal "
          f"the in-order chain")
    if eq != n:
        raise SystemExit("guard violated")


if __name__ == "__main__":
    main()

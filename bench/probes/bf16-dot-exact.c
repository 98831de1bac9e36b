/* Extends /work/shared/tools/bf16-dot-order.c: is this CPU's vdpbf16ps exactly two
 * sequential f32 FMAs (which product first?), with DAZ on its inputs and FTZ on the
 * output of each FMA, round-to-nearest-even, whatever MXCSR says?  And does the
 * "swapped pair" layout (element k in the odd slot, k+1 in the even slot) make a
 * chain of vdpbf16ps over an MX block equal the in-order f32 FMA chain
 * p = fma(a[k], b[k], p), k = 0..31, for MX element values?
 *
 *   cc -O1 -mavx512f -mavx512bw -mavx512bf16 -mfma bf16-dot-exact.c -lm -o bf16-dot-exact
 *   ./bf16-dot-exact
 *
 * Exit status 0 when every check holds.  Results: bench/results/dot-units-findings-2026-12-01.md */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static uint32_t bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float fbits(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static uint16_t bf(float f) { return (uint16_t)(bits(f) >> 16); } /* callers pass bf16-exact values */
static float daz(float x) { return fabsf(x) < 0x1p-126f && x != 0 ? copysignf(0.0f, x) : x; }
/* one FMA as the SDM describes VDPBF16PS: DAZ in, exact product and sum, one RNE rounding, FTZ out */
static float fma_dazftz(float a, float b, float c) { return daz(fmaf(daz(a), daz(b), daz(c))); }
static int same(float x, float y) { return bits(x) == bits(y) || (isnan(x) && isnan(y)); }

/* lane 0 of vdpbf16ps(acc, [a_even, a_odd], [b_even, b_odd]) */
static float dp1(float acc, float ae, float ao, float be, float bo) {
  uint16_t A[32] = {0}, B[32] = {0};
  float C[16] = {0};
  A[0] = bf(ae); A[1] = bf(ao); B[0] = bf(be); B[1] = bf(bo); C[0] = acc;
  __m512 c = _mm512_dpbf16_ps(_mm512_loadu_ps(C), (__m512bh)_mm512_loadu_si512(A),
                              (__m512bh)_mm512_loadu_si512(B));
  _mm512_storeu_ps(C, c);
  return C[0];
}

static long failures = 0;
static void expect(const char *what, float got, float want) {
  int ok = same(got, want);
  if (!ok) failures++;
  printf("  %-58s got %-14a want %-14a %s\n", what, got, want, ok ? "ok" : "FAIL");
}

static unsigned s = 12345;
static unsigned rnd(void) { s = s * 1103515245u + 12345u; return s >> 8; }

/* ---- MX element values (exact in bf16) ---- */
typedef struct { const char *name; int n; float v[256]; } Fmt;
static void fill_minifloat(Fmt *f, const char *name, int ebits, int mbits, int bias, int kind) {
  /* kind 0: IEEE-like with inf/nan (E5M2), 1: E4M3FN (only S.1111.111 NaN), 2: FN no inf/nan */
  f->name = name; f->n = 0;
  int nc = 1 << (1 + ebits + mbits);
  for (int c = 0; c < nc; c++) {
    int sgn = c >> (ebits + mbits), e = (c >> mbits) & ((1 << ebits) - 1), m = c & ((1 << mbits) - 1);
    float v;
    if (kind == 0 && e == (1 << ebits) - 1) v = m ? NAN : INFINITY;
    else if (kind == 1 && e == (1 << ebits) - 1 && m == (1 << mbits) - 1) v = NAN;
    else if (e == 0) v = ldexpf((float)m, 1 - bias - mbits);
    else v = ldexpf((float)((1 << mbits) + m), e - bias - mbits);
    f->v[f->n++] = sgn ? -v : v;
  }
}
static void fill_int8(Fmt *f) { f->name = "i8"; f->n = 0; for (int c = -128; c < 128; c++) f->v[f->n++] = ldexpf((float)c, -6); }

/* one element value of f: random, or adversarial (largest, smallest, cancelling) */
static float pick(const Fmt *f, int mode, int k, const float *prev) {
  for (;;) {
    float v = f->v[rnd() % f->n];
    if (mode == 1) { /* extremes: largest or smallest magnitudes */
      float big = 0, small = INFINITY;
      for (int i = 0; i < f->n; i++) { float x = fabsf(f->v[i]); if (isfinite(x)) { if (x > big) big = x; if (x > 0 && x < small) small = x; } }
      v = (rnd() & 1 ? big : small) * (rnd() & 1 ? -1 : 1);
    }
    if (mode == 2 && k & 1) v = -prev[k - 1]; /* cancelling pairs */
    if ((isnan(v) || isinf(v)) && !(mode == 3 && (rnd() & 7) == 0)) continue; /* mode 3: some specials */
    return v;
  }
}

int main(void) {
  long trials = 0;
  /* 1. direct facts on one pair */
  printf("single pairs (lane 0: acc, even product a0*b0, odd product a1*b1):\n");
  expect("two roundings: acc=2^24, 1*1 even, 1*1 odd -> 2^24", dp1(0x1p24f, 1, 1, 1, 1), 0x1p24f);
  expect("order: acc=1, even -2^24, odd +2^24 -> odd first gives 0", dp1(1, -0x1p12f, 0x1p12f, 0x1p12f, 0x1p12f), 0.0f);
  expect("order: acc=1, even +2^24, odd -2^24 -> odd first gives 1", dp1(1, 0x1p12f, -0x1p12f, 0x1p12f, 0x1p12f), 1.0f);
  expect("RNE tie: acc=1+2^-23, odd 2^-24, even 0 -> 1+2^-22", dp1(1 + 0x1p-23f, 0, 0x1p-12f, 0, 0x1p-12f), 1 + 0x1p-22f);
  expect("RNE tie down: acc=1, odd 2^-24 -> 1", dp1(1, 0, 0x1p-12f, 0, 0x1p-12f), 1.0f);
  expect("spread: acc=2^100, odd 2^-100 -> 2^100", dp1(0x1p100f, 0, 0x1p-50f, 0, 0x1p-50f), 0x1p100f);
  expect("signed zero: acc=-0, products -0,-0 -> -0", dp1(-0.0f, -0.0f, -0.0f, 1, 1), -0.0f);
  expect("signed zero: acc=+0, products -0,-0 -> +0", dp1(0.0f, -0.0f, -0.0f, 1, 1), 0.0f);
  expect("signed zero: acc=-0, odd +0 -> +0", dp1(-0.0f, 0, 0, 1, 1), 0.0f);
  expect("exact cancel: acc=0, odd 3, even -3 -> +0", dp1(0, -3, 3, 1, 1), 0.0f);
  expect("FTZ out: acc=0, odd 2^-70*2^-70 -> 0", dp1(0, 0, 0x1p-70f, 0, 0x1p-70f), 0.0f);
  expect("FTZ each FMA: acc=2^-126, odd -2^-127, even 2^-126 -> 2^-126",
         dp1(0x1p-126f, 0x1p-63f, -0x1p-64f, 0x1p-63f, 0x1p-63f), 0x1p-126f);
  expect("DAZ acc: acc=2^-130 (denormal), products 0 -> 0", dp1(0x1p-130f, 0, 0, 0, 0), 0.0f);
  expect("DAZ input: a=2^-130 (bf16 denormal) * 2^100, acc 0 -> 0", dp1(0, 0, 0x1p-130f, 0, 0x1p100f), 0.0f);
  expect("overflow: odd 2^100*2^100 -> +Inf", dp1(0, 0, 0x1p100f, 0, 0x1p100f), INFINITY);
  /* FMA semantics: the even product -2^200 is exact inside the second FMA, so Inf + (-2^200) = Inf;
     products rounded on their own would give Inf - Inf = NaN */
  expect("product unrounded: odd 2^200 -> Inf, then even -2^200 -> Inf", dp1(0, -0x1p100f, 0x1p100f, 0x1p100f, 0x1p100f), INFINITY);
  expect("Inf * 0 -> NaN", dp1(1, 0, INFINITY, 0, 0), NAN);
  expect("NaN acc propagates", dp1(NAN, 1, 1, 1, 1), NAN);

  /* 2. random pairs with full 8-bit bf16 significands: exact products, compare with models */
  long odd_first = 0, even_first = 0, model_ok = 0, n2 = 4000000;
  for (long t = 0; t < n2; t++) {
    float v[5];
    for (int i = 0; i < 5; i++) {
      int m = 128 + (rnd() & 127), e = (int)(rnd() % 90) - 45 - 7;
      if (i == 0) e = (int)(rnd() % 120) - 60;       /* accumulator: wide spread */
      if ((rnd() & 15) == 0) e -= 80;                 /* sometimes denormal products */
      v[i] = ldexpf((float)m, e) * ((rnd() & 1) ? -1 : 1);
      v[i] = fbits(bits(v[i]) & 0xFFFF0000u);         /* bf16 */
    }
    float acc = v[0], ae = v[1], ao = v[2], be = v[3], bo = v[4];
    float got = dp1(acc, ae, ao, be, bo);
    float of = fma_dazftz(ae, be, fma_dazftz(ao, bo, acc));
    float ef = fma_dazftz(ao, bo, fma_dazftz(ae, be, acc));
    odd_first += same(got, of); even_first += same(got, ef); model_ok += same(got, of);
    trials++;
  }
  printf("random full-bf16 pairs: %ld, equal to odd-first DAZ/FTZ FMA model %ld, to even-first %ld\n",
         n2, odd_first, even_first);
  if (model_ok != n2) failures++;

  /* 3. MX blocks of 32: swapped-pair vdpbf16ps chain vs the in-order f32 FMA chain */
  Fmt fm[6];
  fill_minifloat(&fm[0], "f8E4M3FN", 4, 3, 7, 1);
  fill_minifloat(&fm[1], "f8E5M2", 5, 2, 15, 0);
  fill_minifloat(&fm[2], "f6E2M3FN", 2, 3, 1, 2);
  fill_minifloat(&fm[3], "f6E3M2FN", 3, 2, 3, 2);
  fill_minifloat(&fm[4], "f4E2M1FN", 2, 1, 1, 2);
  fill_int8(&fm[5]);
  printf("MX blocks (32 elements, 16 lanes per trial; swapped pairs vs in-order FMA chain):\n");
  for (int fa = 0; fa < 6; fa++) for (int fb = 0; fb < 6; fb++) {
    long lanes = 0, eq = 0, inexact = 0, tiny = 0, specials = 0;
    for (int mode = 0; mode < 4; mode++) for (int t = 0; t < 1500; t++) {
      float av[16][32], bv[16][32];
      for (int l = 0; l < 16; l++) for (int k = 0; k < 32; k++) {
        av[l][k] = pick(&fm[fa], mode, k, av[l]);
        bv[l][k] = pick(&fm[fb], mode == 2 ? 0 : mode, k, bv[l]);
        if (mode == 2 && (k & 1)) bv[l][k] = bv[l][k - 1];  /* a[k+1]b[k+1] = -a[k]b[k] */
        if (mode == 2 && (rnd() & 3) == 0) av[l][k] = pick(&fm[fa], 1, k, av[l]);
      }
      __m512 acc = _mm512_setzero_ps();
      for (int j = 0; j < 16; j++) {       /* step j: elements 2j (odd slot), 2j+1 (even slot) */
        uint16_t Aj[32], Bj[32];
        for (int l = 0; l < 16; l++) {
          Aj[2 * l + 1] = bf(av[l][2 * j]); Aj[2 * l] = bf(av[l][2 * j + 1]);
          Bj[2 * l + 1] = bf(bv[l][2 * j]); Bj[2 * l] = bf(bv[l][2 * j + 1]);
        }
        acc = _mm512_dpbf16_ps(acc, (__m512bh)_mm512_loadu_si512(Aj), (__m512bh)_mm512_loadu_si512(Bj));
      }
      float C[16]; _mm512_storeu_ps(C, acc);
      for (int l = 0; l < 16; l++) {
        float p = 0; double exact = 0; float mn = INFINITY;
        for (int k = 0; k < 32; k++) {
          p = fmaf(av[l][k], bv[l][k], p); exact += (double)av[l][k] * bv[l][k];
          float pr = fabsf(av[l][k] * bv[l][k]); if (pr > 0 && pr < mn) mn = pr;
          if (p != 0 && fabsf(p) < 0x1p-126f) tiny++;
        }
        lanes++; eq += same(C[l], p); specials += isnan(p) || isinf(p); inexact += isfinite(p) && (double)p != exact;
        (void)mn;
      }
    }
    if (eq != lanes) failures++;
    printf("  %-9s x %-9s lanes %6ld equal %6ld  (inexact partials %5ld, subnormal partials %ld, NaN/Inf partials %ld)\n",
           fm[fa].name, fm[fb].name, lanes, eq, inexact, tiny, specials);
    trials += lanes;
  }
  printf("%s (%ld failures)\n", failures ? "FAILED" : "ALL CHECKS PASSED", failures);
  return failures != 0;
}

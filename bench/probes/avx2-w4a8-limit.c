// A limit probe, not project code: how fast an MX block-scaled matmul (MXINT8
// activations x MXFP4 weights, block 32 along K, M=256, N=K=4096) can run on a plain
// AVX2 CPU (AVX2 + FMA + F16C; no AVX-512, no AVX-VNNI) when its block dots are EXACT
// integer dots: vpmaddubsw (u8 x s8 -> i16 pair sums) + vpmaddwd (x ones -> i32).
// Models: /work/shared/tools/vnni-w4a8-limit.c (the AVX512-VNNI probe: same problem, same
// checks, same 'cvt' tail) and /work/shared/tools/dot-unit-peaks.c (register-only peaks).
//
// MEASURED (AMD EPYC Zen 3 KVM guest, 2 vCPUs, 2026-12-02, gcc 12.2; best of 5 calls per
// run, 3 runs; spread = min..max of the 3 runs' bests; numpy 2.4.6 / OpenBLAS 0.3.31):
//   Best kernel: 'offset', C=2 (16 columns) x R=3 rows, f32 C tile in registers ('reg'), KCB=64..128.
//   Final 3 runs ('short' list, 12:50-12:51 UTC, load average 1.8-2.2: the lead's pytest ran
//   beside runs 1-2 of 3, see the results file):
//     1 thread   43.1 ms best (run bests 43.6 / 43.1 / 54.1 at KCB=128; 43.4 / 43.7 / 54.5 at KCB=64)
//                = 199 GFLOP/s-equivalent (99.6 GMAC/s);  sgemm 122.8 ms best (179.6 / 130.3 / 122.8)
//     2 threads  26.5 ms best (KCB=64: 27.7 / 47.7 / 26.5) = 324 GFLOP/s-eq; sgemm 57.4 ms (61.3 / 139.0 / 57.4)
//   Over all 6 runs of 12:47-12:51 (3 full-list + 3 short): 1 thread 42.4 ms vs sgemm 105.8 ms,
//   2 threads 26.5 ms vs sgemm 57.4 ms.  CEILING RATIO vs numpy sgemm: 2.5x (1 thread), 2.2x (2 threads)
//   (best vs best; same-run pairs from the least disturbed runs: 2.2x-2.7x).
//   Sign trick, best: 1 thread 62.8 ms (asign 4x2), 2 threads 34.7 ms: 1.3-1.5x slower than 'offset'.
//   Peaks per core (register-only, 1 thread, clock ~2.9 GHz from a scalar add chain; 6 runs, best):
//     vpmaddubsw alone 2.0/cycle, vpmaddwd alone 2.0/cycle, the two interleaved 1:1: 2.0/cycle IN TOTAL
//     -> on Zen 3 vpmaddubsw and vpmaddwd COMPETE for the same two multiply pipes.
//     vpsignb alone 2.0/cycle; vpsignb + vpmaddubsw 1:1: 2.4-3.0/cycle (only partly the same pipes).
//     int8 peak, vpmaddubsw + vpmaddwd(ones) + vpaddd per 32 MACs: 1.0/cycle = 91 GMAC/s per core.
//     f32 FMA peak (vfmadd231ps ymm): 2.0/cycle = 48 GFMA/s = 96 GFLOP/s per core.
//     Kernel step mixes: offset (ubsw + addw) 1.6/cycle = 151 GMAC/s; sign (sign + ubsw + addw) 1.1/cycle
//     = 103 GMAC/s; whole block incl. wd + cvt + mul + fma tail: offset 112, sign 82 GMAC/s per core.
//     The 1-thread kernel (99.6 GMAC/s) runs at ~89% of the offset block mix, above the "pair" peak,
//     because the i16 accumulation needs 9 multiplies per 256 MACs, not 16.
//
//   C[m,n] = sum_b sA[m,b] * sB[b,n] * sum_{k in b} a[m,k] * w[k,n],  block = 32 along K
// a: MXINT8 codes, int8, ASSUMED in -127..127 (OCP MX INT8 is symmetric; -128 never occurs).
//    The 'offset' and 'asign' kernels are exact for -128 too; 'wsign' is not
//    (vpsignb(-128, w<0) = -128, not +128).
// w: E2M1 codes stored as int8 "doubled" values 2*w in {0,±1,±2,±3,±4,±6,±8,±12};
//    the 1/2 is folded into the packed weight scale (0.5*sB, exact: powers of two).
// Scales: powers of two stored as float.
//
// vpmaddubsw multiplies an UNSIGNED first operand by a signed second one. Three kernels:
//
// 'offset' (the fastest here): u = a + 128 = a ^ 0x80 (u8, made once per call, like the
//   AVX-512 probe), s = w. Compensation: the block's i16 accumulator starts at
//   -128 * (sum of the 16 w of that i16 lane), precomputed at pack time per (block, column).
//   No saturation, proof: each i16 lane of vpmaddubsw is u0*w0 + u1*w1 with u <= 255 and
//   |w| <= 12, so |lane| <= 2*255*12 = 6120 < 32767: vpmaddubsw never saturates. The 8
//   vpmaddubsw results of a block (8 steps of 4 K values) are added with vpaddw, which WRAPS
//   (mod 2^16, no saturation); the compensation has |.| <= 128*16*12 = 24576, so it fits i16.
//   So the i16 lane ends congruent mod 2^16 to sum (a+128)*w - 128*sum w = sum a*w over its
//   16 K positions, whose true value has |.| <= 16*127*12 = 24384 < 32768: the wrapped i16
//   IS the exact sum (intermediate sums may wrap; that is harmless mod 2^16).
//   One vpmaddwd with ones per block adds the two i16 lanes of each column (K = 4s+{0,1} and
//   4s+{2,3}, s = 0..7) into the exact i32 block dot (|dot| <= 32*127*12 = 48768).
//   Per (row, 8-column vector) per block: 8 vpmaddubsw + 8 vpaddw + 1 vpmaddwd.
//   (The 'small-problem extreme' check drives lanes to 24384 with a+128 = 255, so the
//   intermediate sums do wrap there.)
// 'wsign' / 'asign' (the SIGN TRICK, no offset, no compensation): put the sign of one
//   operand on the other,
//     'wsign':  u = |w| (u8, packed beside w),  s = vpsignb(a, w) = sign(w)*a   (s8)
//     'asign':  u = |a| (u8, made once per call), s = vpsignb(w, a) = sign(a)*w (s8)
//   u*s = a*w for every pair (u = 0 where the sign source is 0). No saturation: each i16
//   lane is <= 2*12*127 = 3048 < 32767 (3072 with a = -128 for asign), and the i16
//   accumulator of a block (16 products) stays <= 16*12*127 = 24384 (24576), so vpaddw never
//   wraps. Per (row, vector) per block: 8 vpsignb + 8 vpmaddubsw + 8 vpaddw + 1 vpmaddwd.
//   On Zen 3 vpsignb runs at 2/cycle only (like the multiplies), so it costs more than the
//   offset's compensation (one load per accumulator per block): see the peaks.
//
// Then per block the 'cvt' tail of the AVX-512 probe:
//   t = cvtdq2ps(dot) * (0.5*sB),  Cacc = fma(t, sA, Cacc)
// Results are checked bitwise against a scalar f32 loop that does the same per block
// (t = (float)dot * (0.5f*sB); c = fmaf(t, sA, c); blocks in order) and against float64
// (small problems: every entry, random and extreme codes; the big problem: 200 random
// entries per config). Note: with power-of-two scales t*sA is exact, so the bitwise check
// pins the block order and the exact dots, not mul+add vs fma (checked: an unfused tail passes).
//
// Weights packed per panel of P = 8*C columns: [K/4][P][4] bytes (one i32 lane = 4 K values
// of one column); 'wsign' also stores |w| in the same layout after each step's P*4 bytes.
// Register tiles (16 ymm): R rows x C ymm columns; 'mem' keeps the f32 C tile in memory
// (load + fma + store per block, in L1), 'reg' keeps it in R*C more ymm registers across a
// K chunk of KCB blocks. gcc reassociates the vpaddw chain unless pinned (see ACCBAR).
//
// Build:  gcc -O3 -mavx2 -mfma -mf16c -fopenmp bench/probes/avx2-w4a8-limit.c -o /tmp/avx2-w4a8-limit -lm
// Run:
//   ./avx2-w4a8-limit                 : correctness (small problems, every entry) + timing of the
//                                       config list at 1 and 2 threads (M=256, N=K=4096, best of 5)
//   ./avx2-w4a8-limit C R KCB SIDE FM : one config (SIDE 0=wsign 1=asign 2=offset; FM 0=reg 1=mem)
//   ./avx2-w4a8-limit peaks [nthr]    : port/throughput microbenchmarks (register-only, inline asm)
//   ./avx2-w4a8-limit check           : correctness only
//   ./avx2-w4a8-limit short           : as without arguments, for a short list of the best configs
// sgemm for the ratio (same shape, numpy/OpenBLAS, 1 and 2 threads via threadpoolctl), run right
// after the probe: the python3 -c line in bench/results/avx2-w4a8-limit-2026-12-02.md.
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <time.h>
#include <omp.h>
#include <sys/mman.h>

#define BS 32
// GCC reassociates a chain of integer vpaddw into a tree of all the vpmaddubsw results of a
// block (spilling them all: 100+ ymm stack stores per call at R*C = 8). This empty asm pins
// each accumulator after its add, so the adds stay a chain in registers.
#define ACCBAR(x) __asm__("" : "+x"(x))

static double now(void){ struct timespec t; clock_gettime(CLOCK_MONOTONIC,&t); return t.tv_sec + 1e-9*t.tv_nsec; }

static void *big_alloc(size_t n){
  size_t H = 2u<<20; n = (n + H - 1) / H * H;
  void *p = aligned_alloc(H, n);
#ifndef NO_HUGE
  madvise(p, n, MADV_HUGEPAGE);
#endif
  return p;
}

static uint64_t rs = 0x9E3779B97F4A7C15ull;
static inline uint64_t rnd(void){ rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17; return rs; }

typedef struct {
  int M, N, K, nb;
  int8_t *a;    // [M][K]
  float  *sa;   // [M][nb]
  int8_t *w;    // [K][N] doubled E2M1 codes
  float  *sb;   // [nb][N]
} Prob;

typedef struct {
  int C, P, side;   // P = 8*C columns per panel
  int8_t *wp;       // wsign: [N/P][K/4][2][P][4] (w, then |w|);  asign, offset: [N/P][K/4][P][4]
  float  *meta;     // [N/P][nb][MW*P]: 0.5*sB (P floats); offset (MW=2): then the i16 compensation (2P int16)
} Packed;

static void pack_w(const Prob *pr, Packed *pk, int C, int side){
  int N=pr->N, K=pr->K, nb=pr->nb, P=8*C, nw = side ? 1 : 2, mw = side==2 ? 2 : 1;
  pk->C=C; pk->P=P; pk->side=side;
  pk->wp = big_alloc((size_t)N*K*nw);
  pk->meta = big_alloc((size_t)(N/P)*nb*mw*P*4);
  for (int p=0;p<N/P;p++){
    int8_t *wpp = pk->wp + (size_t)p*K*P*nw;
    for (int k4=0;k4<K/4;k4++) for (int j=0;j<P;j++) for (int q=0;q<4;q++){
      int8_t v = pr->w[(size_t)(k4*4+q)*N + p*P + j];
      wpp[((size_t)k4*nw*P + j)*4 + q] = v;
      if (!side) wpp[((size_t)k4*nw*P + P + j)*4 + q] = (int8_t)abs(v);
    }
    float *mp = pk->meta + (size_t)p*nb*mw*P;
    for (int b=0;b<nb;b++) for (int j=0;j<P;j++){
      mp[b*mw*P+j] = 0.5f*pr->sb[(size_t)b*N + p*P + j];
      if (side==2) for (int h=0;h<2;h++){   // i16 lane 2j+h of the block's accumulator: K = b*32 + 4s + 2h + {0,1}, s=0..7
        int sw = 0;
        for (int s4=0;s4<8;s4++) sw += pr->w[(size_t)(b*BS+4*s4+2*h)*N + p*P + j] + pr->w[(size_t)(b*BS+4*s4+2*h+1)*N + p*P + j];
        ((int16_t*)(mp + b*mw*P + P))[2*j+h] = (int16_t)(-128*sw);   // |-128*sw| <= 128*16*12 = 24576: fits
      }
    }
  }
}

// ---- micro-kernel: R rows x C*8 columns, nblk K-blocks (R, C, SIDE, FM literal constants) ----
// A: signed codes a [rows][lda]; AU: |a| (asign only). W: this panel's packed weights at the chunk's
// first block; META: 0.5*sB at the chunk's first block. Cout: f32 output tile (row stride ldc);
// first: the chunk starts at block 0 (accumulators start at 0, else from Cout).
#define DEFK(R,C,SIDE,FM) \
static void uk_##R##_##C##_##SIDE##_##FM(const int8_t *A, const uint8_t *AU, long lda, const float *SA, long ldsa, \
    const int8_t *W, const float *META, float *Cout, long ldc, int nblk, int first) \
{ \
  enum { P = 8*C, NW = SIDE ? 1 : 2, MW = SIDE==2 ? 2 : 1 }; \
  const __m256i ones = _mm256_set1_epi16(1); \
  __m256 f[FM ? 1 : R][FM ? 1 : C]; \
  if (!FM) { _Pragma("GCC unroll 8") for (int r=0;r<R;r++) _Pragma("GCC unroll 4") for (int c=0;c<C;c++) \
    f[FM?0:r][FM?0:c] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(Cout + r*ldc + c*8); } \
  else if (first) { _Pragma("GCC unroll 8") for (int r=0;r<R;r++) _Pragma("GCC unroll 4") for (int c=0;c<C;c++) \
    _mm256_storeu_ps(Cout + r*ldc + c*8, _mm256_setzero_ps()); } \
  for (int b=0;b<nblk;b++){ \
    const float *mb = META + (size_t)b*MW*P; \
    const int8_t *wb = W + (size_t)b*BS*P*NW; \
    const int8_t *ab = A + b*BS; \
    const uint8_t *aub = AU + b*BS; \
    __m256i acc[R][C]; \
    _Pragma("GCC unroll 8") for (int r=0;r<R;r++) _Pragma("GCC unroll 4") for (int c=0;c<C;c++) \
      acc[r][c] = SIDE==2 ? _mm256_load_si256((const __m256i*)(mb + P + c*8)) : _mm256_setzero_si256(); \
    _Pragma("GCC unroll 8") for (int k4=0;k4<BS/4;k4++){ \
      __m256i wv[C], wa[SIDE ? 1 : C]; \
      _Pragma("GCC unroll 4") for (int c=0;c<C;c++){ \
        wv[c] = _mm256_load_si256((const __m256i*)(wb + (k4*NW*P + c*8)*4)); \
        if (!SIDE) wa[SIDE?0:c] = _mm256_load_si256((const __m256i*)(wb + (k4*NW*P + P + c*8)*4)); } \
      _Pragma("GCC unroll 8") for (int r=0;r<R;r++){ \
        __m256i av = _mm256_set1_epi32(*(const int32_t*)(ab + r*lda + k4*4)); \
        if (SIDE==2) { __m256i au = _mm256_set1_epi32(*(const int32_t*)(aub + r*lda + k4*4)); \
          _Pragma("GCC unroll 4") for (int c=0;c<C;c++) \
            { acc[r][c] = _mm256_add_epi16(acc[r][c], _mm256_maddubs_epi16(au, wv[c])); ACCBAR(acc[r][c]); } } \
        else if (SIDE) { __m256i au = _mm256_set1_epi32(*(const int32_t*)(aub + r*lda + k4*4)); \
          _Pragma("GCC unroll 4") for (int c=0;c<C;c++) \
            { acc[r][c] = _mm256_add_epi16(acc[r][c], _mm256_maddubs_epi16(au, _mm256_sign_epi8(wv[c], av))); ACCBAR(acc[r][c]); } } \
        else { _Pragma("GCC unroll 4") for (int c=0;c<C;c++) \
            { acc[r][c] = _mm256_add_epi16(acc[r][c], _mm256_maddubs_epi16(wa[SIDE?0:c], _mm256_sign_epi8(av, wv[c]))); ACCBAR(acc[r][c]); } } \
      } \
    } \
    _Pragma("GCC unroll 8") for (int r=0;r<R;r++){ \
      __m256 sav = _mm256_set1_ps(SA[r*ldsa + b]); \
      _Pragma("GCC unroll 4") for (int c=0;c<C;c++){ \
        __m256 t = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(acc[r][c], ones)), _mm256_load_ps(mb + c*8)); \
        if (FM) _mm256_storeu_ps(Cout + r*ldc + c*8, _mm256_fmadd_ps(t, sav, _mm256_loadu_ps(Cout + r*ldc + c*8))); \
        else f[FM?0:r][FM?0:c] = _mm256_fmadd_ps(t, sav, f[FM?0:r][FM?0:c]); \
      } \
    } \
  } \
  if (!FM) { _Pragma("GCC unroll 8") for (int r=0;r<R;r++) _Pragma("GCC unroll 4") for (int c=0;c<C;c++) \
    _mm256_storeu_ps(Cout + r*ldc + c*8, f[FM?0:r][FM?0:c]); } \
}
typedef void (*ukfn)(const int8_t*, const uint8_t*, long, const float*, long, const int8_t*, const float*, float*, long, int, int);
#define DEFR(C,S,FM) DEFK(1,C,S,FM) DEFK(2,C,S,FM) DEFK(3,C,S,FM) DEFK(4,C,S,FM) DEFK(5,C,S,FM) DEFK(6,C,S,FM) DEFK(7,C,S,FM) DEFK(8,C,S,FM)
#define DEFS(S,FM) DEFR(1,S,FM) DEFR(2,S,FM) DEFR(3,S,FM) DEFR(4,S,FM)
DEFS(0,0) DEFS(0,1) DEFS(1,0) DEFS(1,1) DEFS(2,0) DEFS(2,1)
#define ROW(C,S,FM) {0, uk_1_##C##_##S##_##FM, uk_2_##C##_##S##_##FM, uk_3_##C##_##S##_##FM, uk_4_##C##_##S##_##FM, \
                        uk_5_##C##_##S##_##FM, uk_6_##C##_##S##_##FM, uk_7_##C##_##S##_##FM, uk_8_##C##_##S##_##FM}
static ukfn KT[3][2][5][9] = {
  { { {0}, ROW(1,0,0), ROW(2,0,0), ROW(3,0,0), ROW(4,0,0) }, { {0}, ROW(1,0,1), ROW(2,0,1), ROW(3,0,1), ROW(4,0,1) } },
  { { {0}, ROW(1,1,0), ROW(2,1,0), ROW(3,1,0), ROW(4,1,0) }, { {0}, ROW(1,1,1), ROW(2,1,1), ROW(3,1,1), ROW(4,1,1) } },
  { { {0}, ROW(1,2,0), ROW(2,2,0), ROW(3,2,0), ROW(4,2,0) }, { {0}, ROW(1,2,1), ROW(2,2,1), ROW(3,2,1), ROW(4,2,1) } } };

typedef struct { int R, KCB, FM; } Cfg;

// a: signed codes (as given); au: |a| (asign only; made by prep_a, timed separately)
static void mx_matmul(const Prob *pr, const uint8_t *au, const Packed *pk, float *Cout, Cfg cfg){
  const int M=pr->M, N=pr->N, K=pr->K, nb=pr->nb, P=pk->P, R=cfg.R, NW = pk->side ? 1 : 2, MW = pk->side==2 ? 2 : 1;
  const int KCB = cfg.KCB > nb ? nb : cfg.KCB;
  ukfn *T = KT[pk->side][cfg.FM][pk->C];
  ukfn kR = T[R];
  #pragma omp parallel for schedule(static)
  for (int p=0;p<N/P;p++){
    const int8_t *wpp = pk->wp + (size_t)p*K*P*NW;
    const float *mp = pk->meta + (size_t)p*nb*MW*P;
    for (int b0=0;b0<nb;b0+=KCB){
      int nbl = nb-b0 < KCB ? nb-b0 : KCB;
      int m0=0;
      for (; m0+R<=M; m0+=R)
        kR(pr->a + (size_t)m0*K + b0*BS, au ? au + (size_t)m0*K + b0*BS : 0, K, pr->sa + (size_t)m0*nb + b0, nb,
           wpp + (size_t)b0*BS*P*NW, mp + (size_t)b0*MW*P, Cout + (size_t)m0*N + p*P, N, nbl, b0==0);
      for (; m0<M; m0+=(M-m0>8?8:M-m0))
        T[M-m0>8?8:M-m0](pr->a + (size_t)m0*K + b0*BS, au ? au + (size_t)m0*K + b0*BS : 0, K, pr->sa + (size_t)m0*nb + b0, nb,
           wpp + (size_t)b0*BS*P*NW, mp + (size_t)b0*MW*P, Cout + (size_t)m0*N + p*P, N, nbl, b0==0);
    }
  }
}

// asign: au = |a|;  offset: au = a + 128 = a ^ 0x80 (u8)
static void prep_a(const Prob *pr, uint8_t *au, int side){
  const long n = (long)pr->M*pr->K;
  const __m256i x80 = _mm256_set1_epi8((char)0x80);
  #pragma omp parallel for schedule(static)
  for (long i=0;i<n;i+=32){
    __m256i v = _mm256_loadu_si256((const __m256i*)(pr->a+i));
    _mm256_storeu_si256((__m256i*)(au+i), side==2 ? _mm256_xor_si256(v, x80) : _mm256_abs_epi8(v));
  }
}

static const int8_t WV[15] = {0,1,2,3,4,6,8,12,-1,-2,-3,-4,-6,-8,-12};
// extreme: |a| = 127 and w = ±12 with signs chosen so that rows reach the i16 bound (+-24384 per lane)
static void gen(Prob *pr, int M, int N, int K, int extreme){
  pr->M=M; pr->N=N; pr->K=K; pr->nb=K/BS;
  pr->a = big_alloc((size_t)M*K); pr->w = big_alloc((size_t)K*N);
  pr->sa = aligned_alloc(64, (size_t)M*pr->nb*4); pr->sb = aligned_alloc(64, (size_t)pr->nb*N*4);
  for (size_t i=0;i<(size_t)M*K;i++) pr->a[i] = extreme ? ((rnd()&1) ? 127 : -127) : (int8_t)((int)(rnd()%255) - 127);
  for (size_t i=0;i<(size_t)K*N;i++) pr->w[i] = extreme ? ((i/N)%3==2 && (i%N)%2 ? -12 : 12) : WV[rnd()%15];
  if (extreme) for (int m=0;m<M;m++) if (m&1) for (int k=0;k<K;k++) pr->a[(size_t)m*K+k] = (m&2) ? -127 : 127;
  for (size_t i=0;i<(size_t)M*pr->nb;i++) pr->sa[i] = ldexpf(1.0f, -(int)(rnd()%9));       // 2^-8..2^0
  for (size_t i=0;i<(size_t)pr->nb*N;i++) pr->sb[i] = ldexpf(1.0f, -(int)(rnd()%7));       // 2^-6..2^0
}

// float64 reference (true value; w doubled -> *0.5) and f32 same-order emulation for one entry
static void ref_entry(const Prob *pr, int m, int n, double *d, float *f32, double *mag){
  double acc=0, mg=0; float fa=0.f;
  for (int b=0;b<pr->nb;b++){
    int s=0;
    for (int k=b*BS;k<(b+1)*BS;k++) s += pr->a[(size_t)m*pr->K+k]*pr->w[(size_t)k*pr->N+n];
    double sc = (double)pr->sa[(size_t)m*pr->nb+b] * pr->sb[(size_t)b*pr->N+n] * 0.5;
    acc += s*sc; mg += fabs(s*sc);
    float t = (float)s * (0.5f*pr->sb[(size_t)b*pr->N+n]);
    fa = fmaf(t, pr->sa[(size_t)m*pr->nb+b], fa);
  }
  *d=acc; *f32=fa; *mag=mg;
}

static int check(const Prob *pr, const float *Cout, int nsamp, const char *tag){
  double maxrel=0; long nbitdiff=0, n=0;
  int full = nsamp<=0;
  long tot = full ? (long)pr->M*pr->N : nsamp;
  for (long i=0;i<tot;i++){
    int m, nn;
    if (full){ m = i / pr->N; nn = i % pr->N; } else { m = rnd()%pr->M; nn = rnd()%pr->N; }
    double d, mg; float f; ref_entry(pr, m, nn, &d, &f, &mg);
    float c = Cout[(size_t)m*pr->N+nn];
    double rel = fabs(c-d)/(mg>0?mg:1);
    if (rel>maxrel) maxrel=rel;
    if (memcmp(&c,&f,4)) nbitdiff++;
    n++;
  }
  int ok = maxrel < 1e-5 && nbitdiff==0;
  printf("  check %-34s entries=%ld  max|C-ref64|/sum|terms|=%.2e  bitwise!=f32-same-order=%ld  %s\n",
         tag, n, maxrel, nbitdiff, ok?"OK":"FAIL");
  return ok;
}

static const char *SN[3] = {"wsign", "asign", "offset"};
static void free_prob(Prob *p){ free(p->a); free(p->w); free(p->sa); free(p->sb); }

// ======================= peaks (register-only microbenchmarks) =======================
// Written in inline asm: with intrinsics gcc CSEs identical (sign, maddubs) pairs and reassociates
// the adds, so the instruction counts would not be the ones printed. Every instruction below writes
// a register that no other instruction of the same kind reads (or an accumulator chain of 1-cycle
// vpaddw/vpaddd with >= 4 chains), so the figures are throughput, not latency.
// Inputs: ymm12 = a (s8), ymm13 = ones (i16), ymm14 = w (s8), ymm15 = |w| (u8); values are irrelevant
// for timing on this core (no data-dependent latency for these instructions).
#define CLOB "xmm0","xmm1","xmm2","xmm3","xmm4","xmm5","xmm6","xmm7","xmm8","xmm9","xmm10","xmm11"
static void peak_init(void){
  __asm__ volatile("vpcmpeqb %%ymm12, %%ymm12, %%ymm12\n\tvpabsb %%ymm12, %%ymm12\n\t"   // a = 1
                   "vpabsw %%ymm12, %%ymm13\n\tvpaddb %%ymm12, %%ymm12, %%ymm14\n\tvpabsb %%ymm14, %%ymm15\n\t"
                   "vpxor %%xmm2, %%xmm2, %%xmm2\n\tvpxor %%xmm3, %%xmm3, %%xmm3\n\tvpxor %%xmm4, %%xmm4, %%xmm4\n\tvpxor %%xmm5, %%xmm5, %%xmm5\n\t"
                   "vpxor %%xmm6, %%xmm6, %%xmm6\n\tvpxor %%xmm7, %%xmm7, %%xmm7\n\t" ::: CLOB, "xmm12","xmm13","xmm14","xmm15");
}
// ops per asm body: given as the 'n' argument of the table below
#define R12(ins) ins " %%ymm15, %%ymm14, %%ymm0\n\t" ins " %%ymm15, %%ymm14, %%ymm1\n\t" ins " %%ymm15, %%ymm14, %%ymm2\n\t" \
  ins " %%ymm15, %%ymm14, %%ymm3\n\t" ins " %%ymm15, %%ymm14, %%ymm4\n\t" ins " %%ymm15, %%ymm14, %%ymm5\n\t" \
  ins " %%ymm15, %%ymm14, %%ymm6\n\t" ins " %%ymm15, %%ymm14, %%ymm7\n\t" ins " %%ymm15, %%ymm14, %%ymm8\n\t" \
  ins " %%ymm15, %%ymm14, %%ymm9\n\t" ins " %%ymm15, %%ymm14, %%ymm10\n\t" ins " %%ymm15, %%ymm14, %%ymm11\n\t"
static void pk_ubsw(long it){ for (long t=0;t<it;t++) __asm__ volatile(R12("vpmaddubsw") ::: CLOB); }
static void pk_wd(long it){ for (long t=0;t<it;t++) __asm__ volatile(R12("vpmaddwd") ::: CLOB); }
static void pk_both(long it){ for (long t=0;t<it;t++) __asm__ volatile(
  "vpmaddubsw %%ymm15, %%ymm14, %%ymm0\n\tvpmaddwd %%ymm15, %%ymm14, %%ymm1\n\tvpmaddubsw %%ymm15, %%ymm14, %%ymm2\n\tvpmaddwd %%ymm15, %%ymm14, %%ymm3\n\t"
  "vpmaddubsw %%ymm15, %%ymm14, %%ymm4\n\tvpmaddwd %%ymm15, %%ymm14, %%ymm5\n\tvpmaddubsw %%ymm15, %%ymm14, %%ymm6\n\tvpmaddwd %%ymm15, %%ymm14, %%ymm7\n\t"
  "vpmaddubsw %%ymm15, %%ymm14, %%ymm8\n\tvpmaddwd %%ymm15, %%ymm14, %%ymm9\n\tvpmaddubsw %%ymm15, %%ymm14, %%ymm10\n\tvpmaddwd %%ymm15, %%ymm14, %%ymm11\n\t" ::: CLOB); }
static void pk_padd(long it){ for (long t=0;t<it;t++) __asm__ volatile(R12("vpaddw") ::: CLOB); }
static void pk_sign(long it){ for (long t=0;t<it;t++) __asm__ volatile(R12("vpsignb") ::: CLOB); }
// the int8 dot unit as the AVX2 dpbusd equivalent: t = ubsw(|w|, a); t = wd(t, ones); acc += t  (4 accs ymm4..7)
#define PAIR(t,acc) "vpmaddubsw %%ymm12, %%ymm15, %%ymm" #t "\n\tvpmaddwd %%ymm13, %%ymm" #t ", %%ymm" #t "\n\tvpaddd %%ymm" #t ", %%ymm" #acc ", %%ymm" #acc "\n\t"
static void pk_pair(long it){ for (long t=0;t<it;t++) __asm__ volatile(PAIR(0,4) PAIR(1,5) PAIR(2,6) PAIR(3,7) PAIR(8,4) PAIR(9,5) PAIR(10,6) PAIR(11,7) ::: CLOB); }
// the kernel's step: t = sign(a, w); t = ubsw(|w|, t); acc16 += t   (4 accs ymm4..7)
#define SGN(t,acc) "vpsignb %%ymm14, %%ymm12, %%ymm" #t "\n\tvpmaddubsw %%ymm" #t ", %%ymm15, %%ymm" #t "\n\tvpaddw %%ymm" #t ", %%ymm" #acc ", %%ymm" #acc "\n\t"
#define SGN8 SGN(0,4) SGN(1,5) SGN(2,6) SGN(3,7) SGN(8,4) SGN(9,5) SGN(10,6) SGN(11,7)
static void pk_sgn(long it){ for (long t=0;t<it;t++) __asm__ volatile(SGN8 ::: CLOB); }
// vpsignb and vpmaddubsw 1:1, independent
static void pk_sgnubsw(long it){ for (long t=0;t<it;t++) __asm__ volatile(
  "vpsignb %%ymm15, %%ymm14, %%ymm0\n\tvpmaddubsw %%ymm15, %%ymm14, %%ymm1\n\tvpsignb %%ymm15, %%ymm14, %%ymm2\n\tvpmaddubsw %%ymm15, %%ymm14, %%ymm3\n\t"
  "vpsignb %%ymm15, %%ymm14, %%ymm4\n\tvpmaddubsw %%ymm15, %%ymm14, %%ymm5\n\tvpsignb %%ymm15, %%ymm14, %%ymm6\n\tvpmaddubsw %%ymm15, %%ymm14, %%ymm7\n\t"
  "vpsignb %%ymm15, %%ymm14, %%ymm8\n\tvpmaddubsw %%ymm15, %%ymm14, %%ymm9\n\tvpsignb %%ymm15, %%ymm14, %%ymm10\n\tvpmaddubsw %%ymm15, %%ymm14, %%ymm11\n\t" ::: CLOB); }
// the offset kernel's step: t = ubsw(a+128, w); acc16 += t   (4 accs ymm4..7)
#define OFS(t,acc) "vpmaddubsw %%ymm14, %%ymm12, %%ymm" #t "\n\tvpaddw %%ymm" #t ", %%ymm" #acc ", %%ymm" #acc "\n\t"
static void pk_ofs(long it){ for (long t=0;t<it;t++) __asm__ volatile(OFS(0,4) OFS(1,5) OFS(2,6) OFS(3,7) OFS(8,4) OFS(9,5) OFS(10,6) OFS(11,7) ::: CLOB); }
// block mix: 8 accumulators (ymm4..11) x 8 steps each, then per acc: wd(x ones), cvt, mul sB, fma(sA) into an f32 acc
// (ymm2, ymm3; sB = sA = ymm13 reinterpreted, values irrelevant for timing), then vpxor resets the acc (sign) or
// vmovdqa reloads its compensation from L1 (offset). Temporaries ymm0, ymm1.
#define TAIL(acc,f) "vpmaddwd %%ymm13, %%ymm" #acc ", %%ymm" #acc "\n\tvcvtdq2ps %%ymm" #acc ", %%ymm" #acc "\n\tvmulps %%ymm13, %%ymm" #acc ", %%ymm" #acc "\n\t" \
  "vfmadd231ps %%ymm13, %%ymm" #acc ", %%ymm" #f "\n\t"
#define RST(acc) "vpxor %%xmm" #acc ", %%xmm" #acc ", %%xmm" #acc "\n\t"
#define LDC(acc) "vmovdqa (%0), %%ymm" #acc "\n\t"
#define SGNB(t,acc) "vpsignb %%ymm14, %%ymm12, %%ymm" #t "\n\tvpmaddubsw %%ymm" #t ", %%ymm15, %%ymm" #t "\n\tvpaddw %%ymm" #t ", %%ymm" #acc ", %%ymm" #acc "\n\t"
#define SGNB8 SGNB(0,4) SGNB(1,5) SGNB(0,6) SGNB(1,7) SGNB(0,8) SGNB(1,9) SGNB(0,10) SGNB(1,11)
#define TAIL8 TAIL(4,2) TAIL(5,3) TAIL(6,2) TAIL(7,3) TAIL(8,2) TAIL(9,3) TAIL(10,2) TAIL(11,3)
static void pk_mix(long it){ for (long t=0;t<it;t++) __asm__ volatile(SGNB8 SGNB8 SGNB8 SGNB8 SGNB8 SGNB8 SGNB8 SGNB8 TAIL8
  RST(4) RST(5) RST(6) RST(7) RST(8) RST(9) RST(10) RST(11) ::: CLOB); }
#define OFSB8 OFS(0,4) OFS(1,5) OFS(0,6) OFS(1,7) OFS(0,8) OFS(1,9) OFS(0,10) OFS(1,11)
static int16_t comp16[16] __attribute__((aligned(32)));
static void pk_mixo(long it){ for (long t=0;t<it;t++) __asm__ volatile(OFSB8 OFSB8 OFSB8 OFSB8 OFSB8 OFSB8 OFSB8 OFSB8 TAIL8
  LDC(4) LDC(5) LDC(6) LDC(7) LDC(8) LDC(9) LDC(10) LDC(11) :: "r"(comp16) : CLOB); }
static void pk_fma(long it){ for (long t=0;t<it;t++) __asm__ volatile(R12("vfmadd231ps") ::: CLOB); }
// clock estimate: a dependent chain of 1-cycle scalar adds
static long pk_clk(long it){
  long x = 0; for (long t=0;t<it;t++){ __asm__ volatile("add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0" : "+r"(x)); } return x; }

static int run_peaks(int nth){
  omp_set_num_threads(nth);
  long it = getenv("PEAK_ITERS") ? atol(getenv("PEAK_ITERS")) : 40000000;
  volatile long sink=0;
  double ghz;
  { double best=1e9; for (int rep=0;rep<5;rep++){ double t0=now();
      #pragma omp parallel reduction(+:sink)
      { sink += pk_clk(it*4); }
      double t=now()-t0; if(t<best) best=t; }
    ghz = (double)it*16/best*1e-9;
    printf("peaks, threads=%d; clock from dependent scalar adds: %.2f GHz (per-cycle figures below use it)\n", nth, ghz); }
  struct { const char *name; void (*f)(long); int n; int macs; const char *unit; } L[] = {
    {"vpmaddubsw alone",         pk_ubsw, 12, 0,   "vpmaddubsw"},
    {"vpmaddwd alone",           pk_wd,   12, 0,   "vpmaddwd"},
    {"vpmaddubsw+vpmaddwd 1:1",  pk_both, 12, 0,   "mul-ops"},
    {"vpaddw alone",             pk_padd, 12, 0,   "vpaddw"},
    {"vpsignb alone",            pk_sign, 12, 0,   "vpsignb"},
    {"int8 pair ubsw+wd+addd",   pk_pair,  8, 32,  "pairs"},
    {"vpsignb+vpmaddubsw 1:1",   pk_sgnubsw, 12, 0, "ops"},
    {"step sign+ubsw+addw",      pk_sgn,   8, 32,  "steps"},
    {"step offset ubsw+addw",    pk_ofs,   8, 32,  "steps"},
    {"block mix sign (8 accs)",  pk_mix,   8, 256, "acc-blocks"},
    {"block mix offset (8 accs)", pk_mixo, 8, 256, "acc-blocks"},
    {"vfmadd231ps ymm",          pk_fma,  12, 0,   "fma"},
  };
  for (unsigned d=0; d<sizeof L/sizeof L[0]; d++){
    long itd = L[d].macs == 256 ? it/8 : it;
    double best=1e9;
    for (int rep=0;rep<5;rep++){ double t0=now();
      #pragma omp parallel
      { peak_init(); L[d].f(itd); }
      double t=now()-t0; if(t<best) best=t; }
    double n = (double)itd*L[d].n*nth;
    printf("  %-26s %.3f s  %6.2f %s/ns  %5.2f per cycle per core", L[d].name, best, n/best*1e-9, L[d].unit, n/best/(ghz*1e9)/nth);
    if (L[d].macs) printf("  = %6.1f GMAC/s int8 per core", n*L[d].macs/best*1e-9/nth);
    if (!strcmp(L[d].unit, "fma")) printf("  = %6.1f GFLOP/s f32 per core", n*16/best*1e-9/nth);
    printf("\n");
  }
  return 0;
}

// ======================= main =======================
int main(int argc, char **argv){
  if (argc >= 2 && !strcmp(argv[1], "peaks")) return run_peaks(argc >= 3 ? atoi(argv[2]) : 1);
  int checkonly = argc >= 2 && !strcmp(argv[1], "check");
  int M=256, N=4096, K=4096;
  int nthreads_list[2] = {1,2};
  struct { int C, R, KCB, side, fm; } cfgs[] = {
    // ymm registers (gcc 12 -O3; ymm spills counted in the assembly: none, except 2 in offset C=2 R=6)
    // wsign: R*C i16 acc + 2C (w, |w|) + a + tmp (+ R*C f32 when fm=0 'reg')
    {2,4,16,0,1},{2,4,64,0,1},{4,2,64,0,1},{1,5,64,0,0},
    // asign: R*C i16 acc + C w + a + |a| + tmp (+ R*C f32 when fm=0 'reg')
    {2,4,64,1,1},{4,2,64,1,1},{2,2,64,1,0},
    // offset: R*C i16 acc + C w + a + tmp (+ R*C f32 when fm=0 'reg')
    {2,5,16,2,1},{2,5,32,2,1},{2,5,64,2,1},{2,5,128,2,1},{2,6,64,2,1},{2,4,64,2,1},{4,2,64,2,1},{4,2,16,2,1},{1,8,64,2,1},
    {2,3,16,2,0},{2,3,64,2,0},{2,3,128,2,0},{1,6,64,2,0},{2,2,64,2,0},
  };
  int ncfg = sizeof(cfgs)/sizeof(cfgs[0]);
  if (argc >= 2 && !strcmp(argv[1], "short")) {   // the best of each kind from full runs, for repeated timing
    int keep[][5] = {{2,4,64,0,1},{4,2,64,1,1},{2,5,64,2,1},{2,4,64,2,1},{2,3,64,2,0},{2,3,128,2,0},{2,2,64,2,0}};
    ncfg = sizeof keep / sizeof keep[0];
    for (int i=0;i<ncfg;i++){ cfgs[i].C=keep[i][0]; cfgs[i].R=keep[i][1]; cfgs[i].KCB=keep[i][2]; cfgs[i].side=keep[i][3]; cfgs[i].fm=keep[i][4]; }
  }
  if (argc >= 6) { cfgs[0].C = atoi(argv[1]); cfgs[0].R = atoi(argv[2]); cfgs[0].KCB = atoi(argv[3]); cfgs[0].side = atoi(argv[4]); cfgs[0].fm = atoi(argv[5]); ncfg = 1; }

  printf("correctness (small problems, every entry vs float64 and vs the f32 same-order loop):\n");
  int allok=1;
  for (int ex=0; ex<2; ex++){
    Prob sp; gen(&sp, 21, 96*2, 512, ex);
    uint8_t *au = aligned_alloc(64, (size_t)sp.M*sp.K);
    for (int ci=0; ci<ncfg; ci++){
      prep_a(&sp, au, cfgs[ci].side);
      if (sp.N % (8*cfgs[ci].C)) continue;
      Packed pk; pack_w(&sp, &pk, cfgs[ci].C, cfgs[ci].side);
      float *Cout = aligned_alloc(64, (size_t)sp.M*sp.N*4);
      Cfg cf = {cfgs[ci].R, 5, cfgs[ci].fm};  // small KCB to exercise K chunking
      mx_matmul(&sp, cfgs[ci].side ? au : 0, &pk, Cout, cf);
      char tag[96]; snprintf(tag, sizeof tag, "%s C=%d R=%d KCB=%d %s %s", ex?"extreme":"random", cfgs[ci].C, cfgs[ci].R, cf.KCB,
        SN[cfgs[ci].side], cfgs[ci].fm?"mem":"reg");
      allok &= check(&sp, Cout, 0, tag);
      free(Cout); free(pk.wp); free(pk.meta);
    }
    free(au); free_prob(&sp);
  }
  if (checkonly){ printf("ALL CHECKS %s\n", allok?"PASSED":"FAILED"); return !allok; }

  Prob pr; gen(&pr, M, N, K, 0);
  uint8_t *au = big_alloc((size_t)M*K);
  float *Cout = big_alloc((size_t)M*N*4);
  double flop = 2.0*M*N*K;
  printf("big problem M=%d N=%d K=%d (%.2f GFLOP-equivalent), best of 5 after 2 warm-ups\n", M, N, K, flop*1e-9);
  for (int t=0;t<2;t++){
    int nt = nthreads_list[t]; omp_set_num_threads(nt);
    double bp=1e9; for (int rep=0;rep<5;rep++){ double t0=now(); prep_a(&pr, au, 2); double dt=now()-t0; if(dt<bp) bp=dt; }
    printf("threads=%d  prep_a (a^0x80 for offset, |a| for asign; not in the times below): %.3f ms\n", nt, bp*1e3);
    for (int ci=0; ci<ncfg; ci++){
      if (N % (8*cfgs[ci].C)) continue;
      Packed pk; pack_w(&pr, &pk, cfgs[ci].C, cfgs[ci].side);
      Cfg cf = {cfgs[ci].R, cfgs[ci].KCB, cfgs[ci].fm};
      if (cfgs[ci].side) prep_a(&pr, au, cfgs[ci].side);
      const uint8_t *aup = cfgs[ci].side ? au : 0;
      for (int wu=0; wu<2; wu++) mx_matmul(&pr, aup, &pk, Cout, cf);
      double best=1e9, worst=0;
      for (int rep=0;rep<5;rep++){ double t0=now(); mx_matmul(&pr, aup, &pk, Cout, cf); double dt=now()-t0; if (dt<best) best=dt; if (dt>worst) worst=dt; }
      printf("  C=%d(P=%2d) R=%d KCB=%3d %s %s : %7.2f ms (worst %7.2f)  %6.1f GFLOP/s-eq  %6.1f GMAC/s\n",
        cfgs[ci].C, 8*cfgs[ci].C, cfgs[ci].R, cfgs[ci].KCB, SN[cfgs[ci].side], cfgs[ci].fm?"mem":"reg",
        best*1e3, worst*1e3, flop/best*1e-9, flop/2/best*1e-9);
      if (t==0){ char tag[64]; snprintf(tag,sizeof tag,"big spot C=%d R=%d", cfgs[ci].C, cfgs[ci].R); allok &= check(&pr, Cout, 200, tag); }
      fflush(stdout);
      free(pk.wp); free(pk.meta);
    }
  }
  printf("ALL CHECKS %s\n", allok?"PASSED":"FAILED");
  return !allok;
}

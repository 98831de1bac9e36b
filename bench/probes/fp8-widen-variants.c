// A limit probe, not project code (issue 51, session 54): widenings of E4M3
// codes to exact f32 for the f32-activation MXFP8 decode step (64 codes of one
// row of B, 4 x 16 columns, acc = fma(a_k, b, acc) per column in k order), in
// L1 (512 rows x 64 codes), thread CPU time, min of 40 rounds; and the cost of
// each instruction involved (8 independent chains).  Every step variant is
// checked bit for bit against a scalar fmaf chain over the E4M3 values.
//
//     gcc -O2 -march=sapphirerapids bench/probes/fp8-widen-variants.c -o /tmp/fp8-widen -lm
//     /tmp/fp8-widen
//
// Variants (per 64 codes; "cycles" = port-0/5 issue cycles at the measured
// single-instruction rates below: vpermt2b takes 2):
//   table   today's kernel (widen.Decoder._table_decode in lane order):
//           2 vpermt2b (bf16 high / low byte, 128-entry tables), vpternlogq
//           (sign), vpunpck{l,h}bw, 2 vpslld + 2 vpandq, 4 FMA: 13 instr, 15 cycles
//           (+ 2 table copies, which the compiler adds as LLVM does).
//   nocopy  table without the copies (vpermi2b on the codes loaded again).
//   place   the 2 lookups + sign, then each f32 vector by one zero-masked
//           two-source byte permute (vpermt2b{z}) of (low, high): 11 instr,
//           17 cycles.
//   f16     vpmovsxbw, (w << 7) & 0xBF80 = value * 2^-8 as f16, vcvtph2ps
//           (2 vextracti64x4 for the upper halves), A * 2^8: 16 instr.
//   gfni    two vgf2p8affineqb build s<<31 | mag<<20 = value * 2^-120 (an f32
//           denormal for E4M3 subnormals), unpack + shift/mask, A * 2^120:
//           12 instr, exact, but denormal FMA inputs take microcode assists.
//   nosign  table without the sign's vpternlogq: NOT exact (wrong signs), the
//           gain of one instruction fewer.
//   e5m2    for comparison, E5M2 codes (the high byte of an f16): 2 byte unpacks
//           with zero, 2 vextracti64x4, 4 vcvtph2ps, 4 FMA: 12 instr.
// Measured 2026-12-05 on the Intel Xeon (KVM, Sapphire Rapids class), loaded
// (load average 5.6-7.2 on 2 vCPUs), ns per 64 codes, three runs
// (bench/results/fp8-widen-variants-2026-12-05-s54-loaded.md):
//   table 2.40-2.47, nocopy 2.47-2.56, place 3.39-3.57, f16 2.80-2.95,
//   gfni 99-101, nosign 2.27-2.34, e5m2 2.41; all exact but nosign.
// Single instructions, ns (0.122 = two per cycle at the ~4.1 GHz this core ran):
//   vpandq 0.12, vfmadd 0.13-0.14, vpermb 0.24, vpunpcklbw 0.24, vpslld 0.24,
//   vgf2p8affineqb 0.24-0.26, vcvtph2ps 0.29, vpermt2b 0.49-0.51,
//   vpermt2b{z} 0.49-0.50.
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

#define ROWS 512
static uint8_t B[ROWS * 64] __attribute__((aligned(64)));
static float A[ROWS], A8[ROWS], A120[ROWS];
static uint8_t B5[ROWS * 64] __attribute__((aligned(64)));
static uint8_t th[128], tl[128];
float out[64];

static float e4m3(uint8_t c) {
    int e = (c >> 3) & 15, m = c & 7;
    float v = e ? (8 + m) * ldexpf(1, e - 10) : m * ldexpf(1, -9);
    return c >> 7 ? -v : v;
}

#define STORE                                                                  \
    _mm512_storeu_ps(out, c0); _mm512_storeu_ps(out + 16, c1);                 \
    _mm512_storeu_ps(out + 32, c2); _mm512_storeu_ps(out + 48, c3);
#define FMA4(x0, x1, x2, x3)                                                   \
    c0 = _mm512_fmadd_ps(ak, _mm512_castsi512_ps(x0), c0);                     \
    c1 = _mm512_fmadd_ps(ak, _mm512_castsi512_ps(x1), c1);                     \
    c2 = _mm512_fmadd_ps(ak, _mm512_castsi512_ps(x2), c2);                     \
    c3 = _mm512_fmadd_ps(ak, _mm512_castsi512_ps(x3), c3);

typedef struct { __m512i t0, t1, t2, t3, p[4], ghi, glo; } Tabs;

__attribute__((noinline)) static void table(const float *a, const Tabs *T, int sign) {
    __m512 c0 = _mm512_setzero_ps(), c1 = c0, c2 = c0, c3 = c0;
    __m512i s80 = _mm512_set1_epi8((char)0x80), hm = _mm512_set1_epi32((int)0xFFFF0000u);
    __m512i t0 = T->t0, t1 = T->t1, t2 = T->t2, t3 = T->t3;
    for (int k = 0; k < ROWS; k++) {
        __m512i x = _mm512_loadu_si512(B + 64 * k);
        __m512i h = _mm512_permutex2var_epi8(t0, x, t1), l = _mm512_permutex2var_epi8(t2, x, t3);
        if (sign) h = _mm512_ternarylogic_epi64(h, x, s80, 0xF8);
        __m512i w0 = _mm512_unpacklo_epi8(l, h), w1 = _mm512_unpackhi_epi8(l, h);
        __m512 ak = _mm512_set1_ps(a[k]);
        FMA4(_mm512_slli_epi32(w0, 16), _mm512_and_si512(w0, hm), _mm512_slli_epi32(w1, 16),
             _mm512_and_si512(w1, hm))
    }
    STORE
}
static void table_s(const float *a, const Tabs *T) { table(a, T, 1); }

// table with no register copies: the codes loaded three times (vpermi2b
// overwrites its index; the sign's vpternlogq reads memory).
__attribute__((noinline)) static void nocopy(const float *a, const Tabs *T) {
    __m512 c0 = _mm512_setzero_ps(), c1 = c0, c2 = c0, c3 = c0;
    __m512i s80 = _mm512_set1_epi8((char)0x80), hm = _mm512_set1_epi32((int)0xFFFF0000u);
    __m512i t0 = T->t0, t1 = T->t1, t2 = T->t2, t3 = T->t3;
    for (int k = 0; k < ROWS; k++) {
        __m512i h, l;
        const uint8_t *p = B + 64 * k;
        __asm__("vmovdqu64 (%[p]), %[h]\n\tvpermi2b %[t1], %[t0], %[h]\n\t"
                "vmovdqu64 (%[p]), %[l]\n\tvpermi2b %[t3], %[t2], %[l]\n\t"
                "vpternlogq $0xF8, (%[p]), %[s], %[h]"
                : [h] "=&v"(h), [l] "=&v"(l)
                : [p] "r"(p), [t0] "v"(t0), [t1] "v"(t1), [t2] "v"(t2), [t3] "v"(t3), [s] "v"(s80)
                : "memory");
        __m512i w0 = _mm512_unpacklo_epi8(l, h), w1 = _mm512_unpackhi_epi8(l, h);
        __m512 ak = _mm512_set1_ps(a[k]);
        FMA4(_mm512_slli_epi32(w0, 16), _mm512_and_si512(w0, hm), _mm512_slli_epi32(w1, 16),
             _mm512_and_si512(w1, hm))
    }
    STORE
}
static void nosign(const float *a, const Tabs *T) { table(a, T, 0); }

__attribute__((noinline)) static void place(const float *a, const Tabs *T) {
    __m512 c0 = _mm512_setzero_ps(), c1 = c0, c2 = c0, c3 = c0;
    __m512i s80 = _mm512_set1_epi8((char)0x80);
    __m512i t0 = T->t0, t1 = T->t1, t2 = T->t2, t3 = T->t3;
    __m512i p0 = T->p[0], p1 = T->p[1], p2 = T->p[2], p3 = T->p[3];
    const __mmask64 m = 0xCCCCCCCCCCCCCCCCull;  // bytes 2 and 3 of each dword
    for (int k = 0; k < ROWS; k++) {
        __m512i x = _mm512_loadu_si512(B + 64 * k);
        __m512i h = _mm512_permutex2var_epi8(t0, x, t1), l = _mm512_permutex2var_epi8(t2, x, t3);
        h = _mm512_ternarylogic_epi64(h, x, s80, 0xF8);
        __m512 ak = _mm512_set1_ps(a[k]);
        FMA4(_mm512_maskz_permutex2var_epi8(m, l, p0, h), _mm512_maskz_permutex2var_epi8(m, l, p1, h),
             _mm512_maskz_permutex2var_epi8(m, l, p2, h), _mm512_maskz_permutex2var_epi8(m, l, p3, h))
    }
    STORE
}

__attribute__((noinline)) static void f16(const float *a, const Tabs *T) {
    (void)T;
    __m512 c0 = _mm512_setzero_ps(), c1 = c0, c2 = c0, c3 = c0;
    __m512i mk = _mm512_set1_epi16((short)0xBF80);
    for (int k = 0; k < ROWS; k++) {
        __m512i w0 = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const void *)(B + 64 * k)));
        __m512i w1 = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const void *)(B + 64 * k + 32)));
        w0 = _mm512_and_si512(_mm512_slli_epi16(w0, 7), mk);
        w1 = _mm512_and_si512(_mm512_slli_epi16(w1, 7), mk);
        __m512 ak = _mm512_set1_ps(a[k]);
        c0 = _mm512_fmadd_ps(ak, _mm512_cvtph_ps(_mm512_castsi512_si256(w0)), c0);
        c1 = _mm512_fmadd_ps(ak, _mm512_cvtph_ps(_mm512_extracti64x4_epi64(w0, 1)), c1);
        c2 = _mm512_fmadd_ps(ak, _mm512_cvtph_ps(_mm512_castsi512_si256(w1)), c2);
        c3 = _mm512_fmadd_ps(ak, _mm512_cvtph_ps(_mm512_extracti64x4_epi64(w1, 1)), c3);
    }
    STORE
}

__attribute__((noinline)) static void gfni(const float *a, const Tabs *T) {
    __m512 c0 = _mm512_setzero_ps(), c1 = c0, c2 = c0, c3 = c0;
    __m512i hm = _mm512_set1_epi32((int)0xFFFF0000u), ghi = T->ghi, glo = T->glo;
    for (int k = 0; k < ROWS; k++) {
        __m512i x = _mm512_loadu_si512(B + 64 * k);
        __m512i h = _mm512_gf2p8affine_epi64_epi8(x, ghi, 0), l = _mm512_gf2p8affine_epi64_epi8(x, glo, 0);
        __m512i w0 = _mm512_unpacklo_epi8(l, h), w1 = _mm512_unpackhi_epi8(l, h);
        __m512 ak = _mm512_set1_ps(a[k]);
        FMA4(_mm512_slli_epi32(w0, 16), _mm512_and_si512(w0, hm), _mm512_slli_epi32(w1, 16),
             _mm512_and_si512(w1, hm))
    }
    STORE
}

// E5M2 (not E4M3): the code is the high byte of an f16, so a byte unpack
// with zero and vcvtph2ps widen it: 2 unpacks, 2 vextracti64x4, 4 vcvtph2ps,
// 4 FMA per 64 codes (B's bytes read as E5M2 codes, Inf/NaN codes left out).
__attribute__((noinline)) static void e5m2(const float *a, const Tabs *T) {
    (void)T;
    __m512 c0 = _mm512_setzero_ps(), c1 = c0, c2 = c0, c3 = c0;
    const __m512i zero = _mm512_setzero_si512();
    for (int k = 0; k < ROWS; k++) {
        __m512i x = _mm512_loadu_si512(B5 + 64 * k);
        __m512i w0 = _mm512_unpacklo_epi8(zero, x), w1 = _mm512_unpackhi_epi8(zero, x);
        __m512 ak = _mm512_set1_ps(a[k]);
        c0 = _mm512_fmadd_ps(ak, _mm512_cvtph_ps(_mm512_castsi512_si256(w0)), c0);
        c1 = _mm512_fmadd_ps(ak, _mm512_cvtph_ps(_mm512_extracti64x4_epi64(w0, 1)), c1);
        c2 = _mm512_fmadd_ps(ak, _mm512_cvtph_ps(_mm512_castsi512_si256(w1)), c2);
        c3 = _mm512_fmadd_ps(ak, _mm512_cvtph_ps(_mm512_extracti64x4_epi64(w1, 1)), c3);
    }
    STORE
}

// GF(2) affine matrix: output bit i = input bit src[i] (-1: 0).
static uint64_t gfrow(const int *src) {
    uint64_t m = 0;
    for (int i = 0; i < 8; i++)
        if (src[i] >= 0) m |= (uint64_t)(1u << src[i]) << (8 * (7 - i));
    return m;
}

// Lane order of the step variants (lane_table.LANE_COLUMN): vector v lane L
// holds column 16 (L / 4) + 8 (v / 2) + 2 (L % 4) + v % 2; f16 is in order.
static int column(int lane_order, int v, int lane) {
    if (lane_order == 2)  // e5m2: vector v lanes 0-7 / 8-15 = bytes of 128-bit lanes
        return 8 * (v / 2) + 32 * (v % 2) + 16 * (lane / 8) + lane % 8;
    return lane_order ? 16 * (lane / 4) + 8 * (v / 2) + 2 * (lane % 4) + v % 2 : 16 * v + lane;
}

// Single-instruction rates: 8 independent chains, inputs kept opaque.
#define N_RATE 20000000L
#define R8(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)
#define BAR(i) __asm__ volatile("" : "+v"(a##i));
#define RATE(NAME, OP)                                                                  \
    __attribute__((noinline)) static double NAME(__m512i t0, __m512i t1) {               \
        __m512i a0 = t0, a1 = t1, a2 = t0, a3 = t1, a4 = t0, a5 = t1, a6 = t0, a7 = t1;  \
        double s = now();                                                               \
        for (long i = 0; i < N_RATE; i++) { R8(OP) R8(BAR) }                            \
        s = now() - s;                                                                  \
        __m512i z = _mm512_xor_si512(_mm512_xor_si512(_mm512_xor_si512(a0, a1), a2),    \
                                     _mm512_xor_si512(_mm512_xor_si512(a3, a4),         \
                                                      _mm512_xor_si512(a5, _mm512_xor_si512(a6, a7)))); \
        volatile int sink = _mm512_reduce_add_epi32(z); (void)sink;                     \
        return s / N_RATE / 8 * 1e9;                                                    \
    }
#define O_T2B(i) a##i = _mm512_permutex2var_epi8(t0, a##i, t1);
#define O_B(i) a##i = _mm512_permutexvar_epi8(a##i, t0);
#define O_UNP(i) a##i = _mm512_unpacklo_epi8(a##i, t1);
#define O_SLL(i) a##i = _mm512_slli_epi32(a##i, 1);
#define O_AND(i) a##i = _mm512_and_si512(a##i, t1);
#define O_GF(i) a##i = _mm512_gf2p8affine_epi64_epi8(a##i, t1, 0);
#define O_FMA(i) a##i = _mm512_castps_si512(_mm512_fmadd_ps(_mm512_castsi512_ps(a##i), \
                         _mm512_castsi512_ps(t1), _mm512_castsi512_ps(t0)));
#define O_CVT(i) a##i = _mm512_castps_si512(_mm512_cvtph_ps(_mm512_castsi512_si256(a##i)));
#define O_MT2B(i) a##i = _mm512_maskz_permutex2var_epi8(0xCCCCCCCCCCCCCCCCull, t0, a##i, t1);
RATE(r_t2b, O_T2B) RATE(r_b, O_B) RATE(r_unp, O_UNP) RATE(r_sll, O_SLL) RATE(r_and, O_AND)
RATE(r_gf, O_GF) RATE(r_fma, O_FMA) RATE(r_cvt, O_CVT) RATE(r_mt2b, O_MT2B)

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 1000;
    for (int i = 0; i < ROWS * 64; i++) {
        B[i] = (uint8_t)(i * 37 + i / 64 * 11);
        if ((B[i] & 0x7F) == 0x7F) B[i] ^= 1;  // no NaN code (the kernel routes NaN per block)
        B5[i] = ((B[i] & 0x7C) == 0x7C) ? B[i] ^ 0x40 : B[i];  // no E5M2 Inf/NaN code
    }
    for (int i = 0; i < ROWS; i++) {
        A[i] = 1.0f / (1 + i % 7);
        A8[i] = A[i] * 256;
        A120[i] = A[i] * ldexpf(1, 120);
    }
    for (int i = 0; i < 128; i++) {  // bf16 high / low byte of each magnitude's value
        float v = i == 127 ? NAN : e4m3((uint8_t)i);
        uint32_t u;
        memcpy(&u, &v, 4);
        th[i] = u >> 24;
        tl[i] = (u >> 16) & 0xFF;
    }
    Tabs T;
    T.t0 = _mm512_loadu_si512(th); T.t1 = _mm512_loadu_si512(th + 64);
    T.t2 = _mm512_loadu_si512(tl); T.t3 = _mm512_loadu_si512(tl + 64);
    for (int v = 0; v < 4; v++) {  // place: dword j of vector v = [high, low] of byte 16 v + j
        uint8_t p[64];
        for (int j = 0; j < 16; j++) {
            p[4 * j] = p[4 * j + 1] = 0;
            p[4 * j + 2] = (uint8_t)(16 * v + j);
            p[4 * j + 3] = (uint8_t)(64 + 16 * v + j);
        }
        T.p[v] = _mm512_loadu_si512(p);
    }
    int hs[8] = {4, 5, 6, -1, -1, -1, -1, 7}, ls[8] = {-1, -1, -1, -1, 0, 1, 2, 3};
    T.ghi = _mm512_set1_epi64((long long)gfrow(hs));
    T.glo = _mm512_set1_epi64((long long)gfrow(ls));

    const char *name[] = {"table", "nocopy", "place", "f16", "gfni", "nosign", "e5m2"};
    void (*fn[])(const float *, const Tabs *) = {table_s, nocopy, place, f16, gfni, nosign, e5m2};
    const float *act[] = {A, A, A, A8, A120, A, A};
    int lane_order[] = {1, 1, 0, 0, 1, 1, 2};  // place's p[] puts bytes 16 v + j in order
    float ref[64], ref5[64];
    for (int j = 0; j < 64; j++) {
        float acc = 0, acc5 = 0;
        for (int k = 0; k < ROWS; k++) {
            acc = fmaf(A[k], e4m3(B[64 * k + j]), acc);
            acc5 = fmaf(A[k], _cvtsh_ss((unsigned short)(B5[64 * k + j] << 8)), acc5);
        }
        ref[j] = acc;
        ref5[j] = acc5;
    }
    double best[7];
    for (int f = 0; f < 7; f++) {
        fn[f](act[f], &T);
        int bad = 0;
        for (int v = 0; v < 4; v++)
            for (int l = 0; l < 16; l++)
                bad += memcmp(&(f == 6 ? ref5 : ref)[column(lane_order[f], v, l)], &out[16 * v + l], 4) != 0;
        best[f] = 1e9;
        for (int r = 0; r < 40; r++) {
            double t = now();
            for (int q = 0; q < reps; q++) fn[f](act[f], &T);
            t = (now() - t) / ((double)reps * ROWS) * 1e9;
            if (t < best[f]) best[f] = t;
        }
        printf("%-7s %.3f ns per 64 codes, %2d of 64 columns differ from the fmaf chain\n",
               name[f], best[f], bad);
    }
    volatile int q0 = 0x01020304, q1 = 0x3F800000;
    __m512i t0 = _mm512_set1_epi32(q0), t1 = _mm512_set1_epi32(q1);
    const char *iname[] = {"vpermt2b", "vpermb", "vpunpcklbw", "vpslld", "vpandq",
                           "vgf2p8affineqb", "vfmadd231ps", "vcvtph2ps", "vpermt2b{z}"};
    double (*rate[])(__m512i, __m512i) = {r_t2b, r_b, r_unp, r_sll, r_and, r_gf, r_fma, r_cvt, r_mt2b};
    for (int j = 0; j < 9; j++) {
        double b = 1e9;
        for (int r = 0; r < 5; r++) {
            double t = rate[j](t0, t1);
            if (t < b) b = t;
        }
        printf("%-15s %.3f ns per instruction\n", iname[j], b);
    }
    return 0;
}

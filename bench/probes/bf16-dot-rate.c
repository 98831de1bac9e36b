/* vdpbf16ps zmm against vfmadd231ps zmm: time per instruction, 10 independent
 * accumulators each (no latency bound), both loops in one process, 3 rounds
 * (issue 51, session 52: is a bf16-dot MXFP8 decode worth it on this CPU?).
 *
 *     gcc -O2 -mavx512f -mavx512bw -mavx512bf16 bench/probes/bf16-dot-rate.c -o /tmp/bf16-dot-rate
 *     /tmp/bf16-dot-rate
 *
 * One vdpbf16ps adds 32 products to 16 lanes, one FMA 16: the dot pays
 * where its time per instruction is under 2x the FMA's.  On the Intel Xeon
 * (Sapphire Rapids class, KVM) of session 52, loaded (load average 7):
 * 3.4-4.4x, so 0.45-0.6x the FMA's products per second; compare
 * mlir_mx.host.bf16_dot_pays. */
#include <immintrin.h>
#include <stdio.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

#define R(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9)

int main(void) {
#define D(i) __m512 a##i = _mm512_set1_ps(i);
    R(D)
    __m512bh w = (__m512bh)_mm512_set1_epi32(0x3f803f80);
    __m512 fa = _mm512_set1_ps(1.0001f), fb = _mm512_set1_ps(0.9999f);
    long n = 30000000;
    for (int rep = 0; rep < 3; rep++) {
        double t0 = now();
        for (long k = 0; k < n; k++) {
#define B(i) a##i = _mm512_dpbf16_ps(a##i, w, w);
            R(B)
        }
        double t1 = now();
        for (long k = 0; k < n; k++) {
#define F(i) a##i = _mm512_fmadd_ps(fa, fb, a##i);
            R(F)
        }
        double t2 = now();
        printf("vdpbf16ps %.3f ns, vfmadd %.3f ns per instruction: ratio %.2f\n",
               (t1 - t0) / n / 10 * 1e9, (t2 - t1) / n / 10 * 1e9, (t1 - t0) / (t2 - t1));
    }
    float s = 0;
#define S(i) s += _mm512_reduce_add_ps(a##i);
    R(S)
    printf("(checksum %g)\n", s);
    return 0;
}

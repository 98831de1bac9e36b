/* Do vpdpbusd zmm and FMA zmm share the two 512-bit ports, and do register
 * copies of an accumulator's start cost anything? (issue 54: NVFP4's integer
 * block loop, 144 vector operations per 32 codes against MXFP4's 132, and 12
 * vmovdqa64 copies of the biased start per 16 codes; docs/passes/
 * mx-matmul-kernels.md, "Session 55".)  TSC ticks per iteration of each
 * body, 12 independent accumulators; the minimum of 5 runs.
 *
 *   gcc -O2 -mavx512f -mavx512vnni bench/probes/vnni-fma-ports.c -o /tmp/ports && /tmp/ports
 *
 * If vpdpbusd and FMA each issue 2 per cycle on ports 0 and 5 and share them,
 * "12 dpbusd" ~ "12 fma" and "12 dpbusd + 12 fma" ~ twice either; copies that
 * move elimination removes leave "+ 12 copies" ~ "12 dpbusd + 12 fma".
 */
#include <stdint.h>
#include <stdio.h>
#include <x86intrin.h>

#define N 20000000
#define D(i) "vpdpbusd %%zmm30, %%zmm31, %%zmm" #i "\n"
#define F(i) "vfmadd231ps %%zmm30, %%zmm31, %%zmm" #i "\n"
#define C(i) "vmovdqa64 %%zmm29, %%zmm" #i "\n" D(i)
#define L(i) "vmovdqa64 (%0), %%zmm" #i "\n" D(i)
#define D12 D(0) D(1) D(2) D(3) D(4) D(5) D(6) D(7) D(8) D(9) D(10) D(11)
#define C12 C(0) C(1) C(2) C(3) C(4) C(5) C(6) C(7) C(8) C(9) C(10) C(11)
#define L12 L(0) L(1) L(2) L(3) L(4) L(5) L(6) L(7) L(8) L(9) L(10) L(11)
#define F12 F(12) F(13) F(14) F(15) F(16) F(17) F(18) F(19) F(20) F(21) F(22) F(23)

/* Every vector register the bodies write: the compiler keeps nothing there. */
#define CLOBBERS "memory", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", \
    "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "xmm16", "xmm17", \
    "xmm18", "xmm19", "xmm20", "xmm21", "xmm22", "xmm23"

static int32_t buf[16] __attribute__((aligned(64)));

static double run(int which) {
    uint64_t t0 = __rdtsc();
    for (long n = 0; n < N; n++) {
        switch (which) {
        case 0: __asm__ volatile(D12 ::"r"(buf) : CLOBBERS); break;
        case 1: __asm__ volatile(F12 ::"r"(buf) : CLOBBERS); break;
        case 2: __asm__ volatile(D12 F12 ::"r"(buf) : CLOBBERS); break;
        case 3: __asm__ volatile(C12 F12 ::"r"(buf) : CLOBBERS); break;
        default: __asm__ volatile(L12 F12 ::"r"(buf) : CLOBBERS); break;
        }
    }
    return (double)(__rdtsc() - t0) / N;
}

int main(void) {
    const char *names[] = {"12 dpbusd", "12 fma", "12 dpbusd + 12 fma",
                           "  + 12 copies of the start", "  + 12 loads of the start"};
    for (int w = 0; w < 5; w++) {
        double best = 1e30;
        for (int r = 0; r < 5; r++) {
            double t = run(w);
            best = t < best ? t : best;
        }
        printf("%-28s %.2f ticks/iteration\n", names[w], best);
    }
    return 0;
}

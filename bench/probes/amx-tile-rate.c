/* What TDPBF16PS rate the AMX matmul kernel's loop nest can reach here, and why
 * the kernel's tiles ran at about a third of the instruction's rate (issue 51,
 * session 55).
 *
 * Tiles only: bf16 A in the kernel's tile layout (M/16, K/32, 16, 32), B panels in
 * the pair layout (K/32 x 2 column tiles x 16 x 32 per column group of 32
 * columns), C f32; no widening, no guard, no fallback.  The panel is one buffer
 * for every column group (hot, as the kernel's, which widens it right before use)
 * but in "kernel cold B".  Rows:
 *
 *   l1          2 x 2 tiles (2 A + 2 B loads, 4 TDPBF16PS into 4 accumulators)
 *               over one 4 KiB set of tiles: the rate with the operands in L1
 *   l1-1x1      1 A + 1 B load per TDPBF16PS (L1)
 *   chain       one accumulator, no loads: TDPBF16PS after TDPBF16PS
 *   stream S    2 x 2 over S KiB of tiles, 4 new tiles a step: L1, L2, L3 rates
 *   kernel      the kernel's nest before session 55: column groups (32 columns)
 *               outer, row groups (32 rows) next, the whole K loop inside with C
 *               in the tiles: every column group reads all of A (M x K bf16)
 *   kc=B,w=W    the nest after: the columns in items of W column groups; per
 *               item, K in chunks of B blocks (chunk outer), each chunk over every
 *               column group of the item and every row group, C stored and
 *               reloaded between chunks (in C itself, or with "cs" in a scratch of
 *               the item's C tiles, 1 KiB each, contiguous: the kernel's cacc;
 *               "next": each group first prefetches (prefetcht1) its share of the
 *               next chunk's A)
 *
 *   gcc -O2 -march=sapphirerapids bench/probes/amx-tile-rate.c -o /tmp/amx-tile-rate
 *   /tmp/amx-tile-rate [M K N] [reps]     (default 256 4096 4096, 5)
 *
 * Prints per row the median thread CPU time and ns per TDPBF16PS.
 * Seen on this host (bench/results/amx-tile-rate-2026-12-06-s55-loaded.txt; KVM,
 * 2 vCPUs, LOADED, load average 3.5-3.8; 256 x 4096 x 4096), ns per TDPBF16PS:
 *   l1 5.5-5.7, chain 4.7, stream 32 KiB 5.5, 512 KiB (L2) 7.4-7.7,
 *   4 MiB (L3) 34-35 (about 29 GB/s of tiles);
 *   kernel 13.2-14.4 (40 % of l1: "a third"), prefetching the next blocks no change;
 *   kc=8,w=8 with C in C 13.0, in the scratch (cs) 11.2; kc=8,w=16 cs 10.8.
 * So: each TDPBF16PS of the 2 x 2 scheme needs 1 KiB of tile loads; from L2 that
 * costs 1.35x L1's rate, from L3 6x; the old nest read A (2 MiB here: L2 is 2 MiB)
 * again for every 32 columns, half of its loads from L3.  Chunking K so that a
 * chunk of A stays in L2 for W column groups, with C between chunks in a
 * contiguous scratch, gives 11 ns; the rest is the L2 loads and the C round trips. */
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

typedef struct {
  uint8_t palette_id, start_row, rsv[14];
  uint16_t colsb[16];
  uint8_t rows[16];
} __attribute__((packed)) tilecfg;

static int NEXT = 0, PF = 0, HOT = 1, CS = 0, KC = 32, W = 8;
static float *CSB; /* C scratch: (MT, W*2, 16, 16) */
static int M = 256, K = 4096, N = 4096, MT, NB, NG;
static uint16_t *A, *B; /* A (MT, NB, 16, 32); B (NG, NB, 2, 16, 32) */
static float *C;        /* (M, N) */

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

#define AT(mt, j) (A + (((size_t)(mt) * NB + (j)) << 9))
#define BT(g, j, jn) (B + ((((size_t)(HOT ? 0 : (g)) * NB + (j)) * 2 + (jn)) << 9))
#define CT(mt, nt) (C + (size_t)(mt) * 16 * N + (size_t)(nt) * 16)

static long l1(long iters) {
  _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
  for (long i = 0; i < iters; i++) {
    _tile_loadd(4, A, 64); _tile_loadd(5, A + 512, 64);
    _tile_loadd(6, B, 64); _tile_loadd(7, B + 512, 64);
    _tile_dpbf16ps(0, 4, 6); _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6); _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, C, 64); _tile_stored(1, C + 256, 64);
  _tile_stored(2, C + 512, 64); _tile_stored(3, C + 768, 64);
  return 4 * iters;
}

static long l1_1x1(long iters) {
  _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
  for (long i = 0; i < iters; i++) {
    _tile_loadd(4, A, 64); _tile_loadd(6, B, 64); _tile_dpbf16ps(0, 4, 6);
    _tile_loadd(5, A + 512, 64); _tile_loadd(7, B + 512, 64); _tile_dpbf16ps(1, 5, 7);
    _tile_loadd(4, A, 64); _tile_loadd(6, B, 64); _tile_dpbf16ps(2, 4, 6);
    _tile_loadd(5, A + 512, 64); _tile_loadd(7, B + 512, 64); _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, C, 64); _tile_stored(1, C + 256, 64);
  _tile_stored(2, C + 512, 64); _tile_stored(3, C + 768, 64);
  return 4 * iters;
}

static long chain(long iters) {
  _tile_zero(0);
  _tile_loadd(4, A, 64); _tile_loadd(6, B, 64);
  for (long i = 0; i < iters; i++) {
    _tile_dpbf16ps(0, 4, 6); _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(0, 4, 6); _tile_dpbf16ps(0, 4, 6);
  }
  _tile_stored(0, C, 64);
  return 4 * iters;
}

/* 2 x 2 over a buffer of STREAM KiB of tiles, 4 consecutive tiles a step */
static long STREAM = 32;
static long stream(long steps) {
  long ntiles = STREAM, t = 0;
  _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
  for (long s = 0; s < steps; s++) {
    uint16_t *p = A + t * 512;
    _tile_loadd(4, p, 64); _tile_loadd(5, p + 512, 64);
    _tile_loadd(6, p + 1024, 64); _tile_loadd(7, p + 1536, 64);
    _tile_dpbf16ps(0, 4, 6); _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6); _tile_dpbf16ps(3, 5, 7);
    t += 4;
    if (t >= ntiles) t = 0;
  }
  _tile_stored(0, C, 64); _tile_stored(1, C + 256, 64);
  _tile_stored(2, C + 512, 64); _tile_stored(3, C + 768, 64);
  return 4 * steps;
}

/* one 2 x 2 group: row tiles mt, mt + 1; column group g; blocks [j0, j1) */
static inline void group(int mt, int g, int j0, int j1, int first, int last) {
  float *c00 = CT(mt, 2 * g), *c01 = CT(mt, 2 * g + 1);
  float *c10 = CT(mt + 1, 2 * g), *c11 = CT(mt + 1, 2 * g + 1);
  int cs = 4 * N;
  if (CS && !last) {
    int gi = g % W;
    c00 = CSB + (((size_t)mt * 2 * W + 2 * gi) << 8); c01 = c00 + 256;
    c10 = CSB + (((size_t)(mt + 1) * 2 * W + 2 * gi) << 8); c11 = c10 + 256;
    cs = 64;
  }
  float *l00 = c00, *l01 = c01, *l10 = c10, *l11 = c11; int ls = cs;
  if (CS && last && !first) {
    int gi = g % W;
    l00 = CSB + (((size_t)mt * 2 * W + 2 * gi) << 8); l01 = l00 + 256;
    l10 = CSB + (((size_t)(mt + 1) * 2 * W + 2 * gi) << 8); l11 = l10 + 256;
    ls = 64;
  }
  if (first) { _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3); }
  else {
    _tile_loadd(0, l00, ls); _tile_loadd(1, l01, ls);
    _tile_loadd(2, l10, ls); _tile_loadd(3, l11, ls);
  }
  for (int j = j0; j < j1; j++) {
    if (PF) {
      int jp = j + PF < NB ? j + PF : NB - 1;
      const char *pa0 = (const char *)AT(mt, jp), *pa1 = (const char *)AT(mt + 1, jp);
      const char *pb = (const char *)BT(g, jp, 0);
      for (int l = 0; l < 16; l++) {
        _mm_prefetch(pa0 + 64 * l, _MM_HINT_T0); _mm_prefetch(pa1 + 64 * l, _MM_HINT_T0);
        _mm_prefetch(pb + 64 * l, _MM_HINT_T0); _mm_prefetch(pb + 1024 + 64 * l, _MM_HINT_T0);
      }
    }
    _tile_loadd(4, AT(mt, j), 64); _tile_loadd(5, AT(mt + 1, j), 64);
    _tile_loadd(6, BT(g, j, 0), 64); _tile_loadd(7, BT(g, j, 1), 64);
    _tile_dpbf16ps(0, 4, 6); _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6); _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, c00, cs); _tile_stored(1, c01, cs);
  _tile_stored(2, c10, cs); _tile_stored(3, c11, cs);
}

static long kernel(long unused) {
  (void)unused;
  for (int g = 0; g < NG; g++)
    for (int mt = 0; mt < MT; mt += 2) group(mt, g, 0, NB, 1, 1);
  return (long)(MT / 2) * NG * NB * 4;
}


static long chunked(long unused) {
  (void)unused;
  for (int g0 = 0; g0 < NG; g0 += W)
    for (int j0 = 0; j0 < NB; j0 += KC) {
      int j1 = j0 + KC < NB ? j0 + KC : NB;
      for (int g = g0; g < g0 + W && g < NG; g++) {
        if (NEXT && j1 < NB) { /* this group's share of the next chunk's A, into L2 */
          int kc = j1 + KC < NB ? KC : NB - j1, gi = g - g0;
          for (int mt = MT * gi / W; mt < MT * (gi + 1) / W; mt++) {
            const char *p = (const char *)AT(mt, j1);
            for (int l = 0; l < 16 * kc; l++) _mm_prefetch(p + 64 * l, _MM_HINT_T1);
          }
        }
        for (int mt = 0; mt < MT; mt += 2) group(mt, g, j0, j1, j0 == 0, j1 == NB);
      }
    }
  return (long)(MT / 2) * NG * NB * 4;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double l1rate;
static void run(const char *name, long (*fn)(long), long arg, int reps) {
  double t[64];
  long n = 0;
  fn(arg);
  for (int r = 0; r < reps; r++) {
    double t0 = now();
    n = fn(arg);
    t[r] = (now() - t0) * 1e3;
  }
  qsort(t, reps, sizeof t[0], cmp);
  double ns = t[reps / 2] * 1e6 / n;
  if (!l1rate) l1rate = ns;
  printf("%-16s %8.3f ms  %6.2f ns/TDPBF16PS  %5.1f %% of l1's rate\n", name, t[reps / 2], ns,
         100.0 * l1rate / ns);
}

int main(int argc, char **argv) {
  int reps = 5;
  if (argc >= 4) { M = atoi(argv[1]); K = atoi(argv[2]); N = atoi(argv[3]); }
  if (argc >= 5) reps = atoi(argv[4]);
  if (reps > 64) reps = 64;
  MT = M / 16; NB = K / 32; NG = N / 32;
  if (syscall(SYS_arch_prctl, 0x1023, 18)) { perror("arch_prctl(ARCH_REQ_XCOMP_PERM)"); return 2; }
  static tilecfg cfg;
  cfg.palette_id = 1;
  for (int t = 0; t < 8; t++) { cfg.rows[t] = 16; cfg.colsb[t] = 64; }
  _tile_loadconfig(&cfg);
  size_t abytes = (size_t)M * K * 2 > (4u << 20) ? (size_t)M * K * 2 : (4u << 20);
  A = aligned_alloc(64, abytes);
  B = aligned_alloc(64, (size_t)K * N * 2);
  C = aligned_alloc(64, (size_t)M * N * 4);
  srand(1);
  for (size_t i = 0; i < abytes / 2; i++) A[i] = 0x3f80 | (rand() & 0x7f); /* [1, 2) */
  for (size_t i = 0; i < (size_t)K * N; i++) B[i] = 0x3f80 | (rand() & 0x7f);
  memset(C, 0, (size_t)M * N * 4);
  printf("M %d K %d N %d, 1 thread, median of %d (A %.2f MiB, one column group's panel %.0f KiB)\n",
         M, K, N, reps, M * (double)K * 2 / (1 << 20), (double)K * 32 * 2 / 1024);
  run("l1", l1, 1 << 20, reps);
  run("l1-1x1", l1_1x1, 1 << 20, reps);
  run("chain", chain, 1 << 18, reps);
  long kib[] = {32, 512, 1536, 4096};
  char name[48];
  for (int i = 0; i < 4; i++) {
    STREAM = kib[i];
    snprintf(name, sizeof name, "stream %ld KiB", kib[i]);
    run(name, stream, 1 << 18, reps);
  }
  run("kernel", kernel, 0, reps);
  PF = 2;
  run("kernel pf=2", kernel, 0, reps);
  PF = 0;
  CSB = aligned_alloc(64, (size_t)M * 32 * 64 * 4);
  int kcs[] = {4, 8, 16, 32}, ws[] = {1, 8, 16};
  for (int cs = 0; cs < 2; cs++)
    for (int a = 0; a < 4; a++)
      for (int b = 0; b < 3; b++) {
        KC = kcs[a]; W = ws[b]; CS = cs;
        snprintf(name, sizeof name, "kc=%d,w=%d%s", KC, W, cs ? " cs" : "");
        run(name, chunked, 0, reps);
      }
  KC = 8; W = 8; CS = 1;
  for (int r = 0; r < 2; r++) {
    NEXT = 0; run("kc=8,w=8 cs", chunked, 0, reps);
    NEXT = 1; run("kc=8,w=8 cs next", chunked, 0, reps);
  }
  NEXT = 0; CS = 0;
  run("kernel", kernel, 0, reps);
  HOT = 0;
  run("kernel cold B", kernel, 0, reps);
  _tile_release();
  return 0;
}

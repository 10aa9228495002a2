/*
 * tests/cpu/test_cpu.c -- property tests of the CPU stages (1, 2, 3) and the harness.
 *
 * Every run draws a fresh seed (printed; replay with --seed S) so that the
 * algorithms are checked on new inputs each time, not on one lucky draw.
 * Output follows tests/run.sh: one PASS/FAIL line per test.
 *
 *   build/test_cpu [--seed S] [--quick] [--csv data/cpu/exactness.csv]
 *
 * --quick shrinks the shapes (for the sanitizer build); --csv writes the
 * errors measured per shape, which the paper's exactness figure reads.
 */
#include <float.h>
#include <stdarg.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "npy.h"
#include "stage1_naive.h"
#include "stage2_online_softmax.h"
#include "stage3_tiled.h"
#include "tolerances.h"

#include "test_report.h"

static FILE *csv;

static void csv_row(const char *stage, const char *check, int N, int d, bool causal, int Br,
                    int Bc, double err, double tol)
{
    if (csv)
        fprintf(csv, "%s,%s,%d,%d,%d,%d,%d,%.6e,%.6g,%llu\n", stage, check, N, d, causal, Br, Bc,
                err, tol, (unsigned long long)seed);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* A random (N, d) problem: Q, K, V, dO ~ N(0, 1). */
typedef struct { double *Q, *K, *V, *dO; } qkv;
static qkv random_qkv(int N, int d, rng_t *rng)
{
    size_t n = (size_t)N * d;
    qkv x;
    x.Q = xmalloc(4 * n, sizeof(double), "qkv");
    x.K = x.Q + n;
    x.V = x.K + n;
    x.dO = x.V + n;
    fill_normal(x.Q, 4 * n, 0, 1, rng);
    return x;
}

/* The one-head problem (N, d) of these tests, causal or not. */
static attn_params problem(int N, int d, double scale, bool causal)
{
    attn_params p = attn_params_make(1, 1, N, d, scale);
    attn_params_causal(&p, causal);
    return p;
}

/* Naive forward + backward into freshly allocated buffers. */
typedef struct { double *O, *L, *dQ, *dK, *dV; } grads;
static grads naive_all(qkv x, int N, int d, double scale, bool causal, io_counter *f, io_counter *b)
{
    size_t n = (size_t)N * d;
    attn_params p = problem(N, d, scale, causal);
    grads g;
    g.O = xmalloc(4 * n + (size_t)N, sizeof(double), "naive out");
    g.dQ = g.O + n;
    g.dK = g.dQ + n;
    g.dV = g.dK + n;
    g.L = g.dV + n;
    naive_attention_all_heads(&p, x.Q, x.K, x.V, x.dO, g.O, g.L, g.dQ, g.dK, g.dV, f, b, NULL, NULL);
    return g;
}

static grads tiled_all(qkv x, int N, int d, double scale, bool causal, int Br, int Bc,
                       sram_arena *sram, io_counter *f, io_counter *b, tile_stats *sf,
                       tile_stats *sb)
{
    size_t n = (size_t)N * d;
    attn_params p = problem(N, d, scale, causal);
    grads g;
    g.O = xmalloc(4 * n + 2 * (size_t)N, sizeof(double), "tiled out");
    poison(g.O, 4 * n + 2 * (size_t)N);
    g.dQ = g.O + n;
    g.dK = g.dQ + n;
    g.dV = g.dK + n;
    g.L = g.dV + n;
    flash_forward(&p, x.Q, x.K, x.V, Br, Bc, g.O, g.L, sram, f, sf);
    flash_backward(&p, x.Q, x.K, x.V, g.O, g.L, x.dO, Br, Bc, g.dQ, g.dK, g.dV, g.L + N, sram, b, sb);
    return g;
}

/* ---- stage 2 ------------------------------------------------------------ */
static void test_online_softmax(rng_t *rng, int trials)
{
    /* Each row against its own bound (it grows as sqrt(N)); the row that
     * comes nearest its bound is reported and written to the CSV. */
    double worst = 0, worst_L = 0, worst_ratio = 0;
    int worst_N = 0, worst_d = 0;
    for (int t = 0; t < trials; t++) {
        int N = rng_int(rng, 1, 200), d = rng_int(rng, 1, 16), block = rng_int(rng, 1, N + 3);
        double spread = rng_int(rng, 0, 1) ? 5.0 : 50.0;
        double *x = xmalloc((size_t)N * (d + 1) + 2 * (size_t)d, sizeof(double), "row");
        double *V = x + N, *o = V + (size_t)N * d, *r = o + d, L, Lr, vmax = 0, xmax = 1;
        fill_normal(x, (size_t)N, 0, spread, rng);
        fill_normal(V, (size_t)N * d, 0, 1, rng);
        for (size_t j = 0; j < (size_t)N * d; j++) vmax = fmax(vmax, fabs(V[j]));
        for (int j = 0; j < N; j++) xmax = fmax(xmax, fabs(x[j]));
        online_softmax_weighted_sum(x, V, N, d, block, o, &L, NULL, NULL);
        two_pass_softmax_weighted_sum(x, V, N, d, r, &Lr);
        double e = compare("o", o, r, (size_t)d, 0, 0, 0).max_abs / (DBL_EPSILON * vmax);
        double eL = fabs(L - Lr) / (DBL_EPSILON * xmax), ratio = fmax(e, eL) / tol_online_eps_units(N);
        if (ratio > worst_ratio) {
            worst_ratio = ratio;
            worst = e, worst_L = eL, worst_N = N, worst_d = d;
        }
        free(x);
    }
    /* the row nearest its bound: its N, d, error (eps units) and bound */
    csv_row("stage2", "online_random_rows_eps_units", worst_N, worst_d, false, 0, 0,
            fmax(worst, worst_L), tol_online_eps_units(worst_N));
    result(worst_ratio <= 1, "online softmax vs two-pass, random rows",
           "%d rows of 1..200 logits, each within %g sqrt(N) eps (at least %g); nearest its bound: "
           "N = %d, output %.2f eps max|V|, L %.2f eps max(1, max|x|), bound %.1f", trials,
           TOL_ONLINE_EPS_PER_ROOT, TOL_ONLINE_EPS_UNITS, worst_N, worst, worst_L,
           tol_online_eps_units(worst_N));

    /* The chapter's case: N = 37, d = 8, spread 5, 1000 fresh rows. The
     * chapter reports one row; the median row is that figure's like, the
     * maximum over the 1000 rows is what the test bounds. */
    double max_abs = 0, per_row[1000], vmax_all = 0, worst_units = 0;
    int within = 0;
    for (int t = 0; t < 1000; t++) {
        double x[37], V[37 * 8], o[8], r[8], L, Lr;
        fill_normal(x, 37, 0, 5, rng);
        fill_normal(V, 37 * 8, 0, 1, rng);
        online_softmax_weighted_sum(x, V, 37, 8, 4, o, &L, NULL, NULL);
        two_pass_softmax_weighted_sum(x, V, 37, 8, r, &Lr);
        double e = compare("o", o, r, 8, 0, 0, 0).max_abs, vmax = 0;
        for (int j = 0; j < 37 * 8; j++) vmax = fmax(vmax, fabs(V[j]));
        max_abs = fmax(max_abs, e);
        vmax_all = fmax(vmax_all, vmax);
        worst_units = fmax(worst_units, e / (DBL_EPSILON * vmax));
        per_row[t] = e;
        within += e <= 1e-15;
    }
    qsort(per_row, 1000, sizeof per_row[0], cmp_double);
    double median = 0.5 * (per_row[499] + per_row[500]);
    /* Each row is held to its own scale; in absolute terms no row may pass
     * the bound at the largest max|V| of the 1000, which the CSV records. */
    double abs_bound = tol_online_eps_units(37) * DBL_EPSILON * vmax_all;
    csv_row("stage2", "online_vs_two_pass_max_abs", 37, 8, false, 4, 4, max_abs, abs_bound);
    csv_row("stage2", "online_vs_two_pass_median_row", 37, 8, false, 4, 4, median, abs_bound);
    result(worst_units <= tol_online_eps_units(37), "online softmax, chapter case N=37 d=8 spread 5 block 4",
           "max abs %.2e over 1000 rows (<= %.1e: %.1f eps at the largest max|V|), largest %.2f eps "
           "max|V| of its row (<= %.1f); median row %.2e; %d of 1000 rows within 1e-15", max_abs,
           abs_bound, tol_online_eps_units(37), worst_units, tol_online_eps_units(37), median, within);

    /* Fully masked rows: O = 0 and L = -inf, never NaN. */
    double x[5] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY}, V[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    double o[2], L;
    online_softmax_weighted_sum(x, V, 5, 2, 2, o, &L, NULL, NULL);
    result(o[0] == 0 && o[1] == 0 && L == -INFINITY, "online softmax, fully masked row",
           "O = (%g, %g), L = %g", o[0], o[1], L);

    /* The exercise's trace: [3, 1, 6, 2] in blocks of 2. */
    double xs[4] = {3, 1, 6, 2}, out;
    online_softmax_weighted_sum(xs, NULL, 4, 0, 2, &out, &L, NULL, NULL);
    double l = exp(L - 6);
    result(fabs(l - 1.074841) < 5e-7 && fabs(L - 6.0721724) < 5e-8, "online softmax trace [3,1,6,2]",
           "l = %.6f, L = %.7f", l, L);
}

/* ---- stage 3 against stage 1 ------------------------------------------- */

/* Stage 3's counts in the closed forms of chapters/13-tiled-backward.md (no
 * mask, and causal with seqlen_q = seqlen_k = N), written out here as the
 * chapter derives them, to hold the general, mask.h-driven formulas to
 * them. */
static uint64_t closed_form_forward(int64_t N, int64_t d, int64_t Br, int64_t Bc, bool causal)
{
    int64_t Tr = (N + Br - 1) / Br;
    if (!causal) return (uint64_t)(2 * N * d * (Tr + 1) + N);
    int64_t kv_rows = 0;   /* keys up to the end of the key block holding each block's last row */
    for (int64_t i = 0; i < Tr; i++) {
        int64_t e = (i + 1) * Br < N ? (i + 1) * Br : N;
        int64_t keys = Bc * ((e - 1) / Bc + 1);
        kv_rows += keys < N ? keys : N;
    }
    return (uint64_t)(2 * N * d + N + 2 * d * kv_rows);
}

static uint64_t closed_form_backward(int64_t N, int64_t d, int64_t Br, int64_t Bc, bool causal)
{
    int64_t Tc = (N + Bc - 1) / Bc;
    if (!causal) return (uint64_t)(5 * N * d + N + Tc * (4 * N * d + 2 * N));
    int64_t total = 6 * N * d + N;
    for (int64_t j = 0; j < Tc; j++) {
        int64_t R = N - Br * ((j * Bc) / Br);   /* rows of the query blocks key block j reaches */
        total += R * (3 * d + 2) + (j > 0 ? R * d : 0);
    }
    return (uint64_t)total;
}
static void test_tiled_vs_naive(rng_t *rng, int Nmax, int Nstep)
{
    double wf = 0, wl = 0, wb = 0;
    int cases = 0, nonfinite = 0, io_bad = 0, hw_bad = 0;
    for (int N = 1; N <= Nmax; N += (N < 40 ? 1 : Nstep)) {
        int d = rng_int(rng, 1, 48);
        bool causal = rng_int(rng, 0, 1);
        int Br, Bc;
        long M;
        if (rng_int(rng, 0, 1)) {   /* explicit blocks, often not dividing N */
            Br = rng_int(rng, 1, 70);
            Bc = rng_int(rng, 1, 70);
            M = (long)flash_backward_sram_elements(Br, Bc, d);
        } else {                    /* derived from a random M */
            M = (long)flash_backward_sram_elements(1, 1, d) + rng_int(rng, 0, 20000);
            int fb, fc;
            derive_blocks(M, d, true, &Br, &Bc);
            derive_blocks(M, d, false, &fb, &fc);
            if (flash_forward_sram_elements(fb, fc, d) > (size_t)M) hw_bad++;
        }
        double scale = 1.0 / sqrt((double)d);
        qkv x = random_qkv(N, d, rng);
        io_counter nf, nb, tf, tb;
        io_reset(&nf); io_reset(&nb); io_reset(&tf); io_reset(&tb);
        sram_arena sram;
        sram_init(&sram, (size_t)M);
        grads r = naive_all(x, N, d, scale, causal, &nf, &nb);
        grads g = tiled_all(x, N, d, scale, causal, Br, Bc, &sram, &tf, &tb, NULL, NULL);
        size_t n = (size_t)N * d;
        double ef = compare("O", g.O, r.O, n, TOL_TILED_FORWARD, 0, 2).max_abs;
        double el = compare("L", g.L, r.L, (size_t)N, TOL_TILED_FORWARD, 0, 2).max_abs;
        double eb = fmax(compare("dQ", g.dQ, r.dQ, n, TOL_TILED_BACKWARD, 0, 2).max_abs,
                         fmax(compare("dK", g.dK, r.dK, n, TOL_TILED_BACKWARD, 0, 2).max_abs,
                              compare("dV", g.dV, r.dV, n, TOL_TILED_BACKWARD, 0, 2).max_abs));
        nonfinite += count_nonfinite(g.O, 4 * n + (size_t)N, false) != 0;
        attn_params p = problem(N, d, scale, causal);
        io_bad += io_total(&tf) != flash_forward_io_formula(&p, Br, Bc);
        io_bad += io_total(&tb) != flash_backward_io_formula(&p, Br, Bc);
        io_bad += io_total(&nf) != naive_forward_io_formula(&p);
        io_bad += io_total(&nb) != naive_backward_io_formula(&p);
        io_bad += io_total(&tf) != closed_form_forward(N, d, Br, Bc, causal);
        io_bad += io_total(&tb) != closed_form_backward(N, d, Br, Bc, causal);
        hw_bad += sram.high_water > (size_t)M;
        if (N % 25 == 0 || N < 4) {
            csv_row("stage3", "forward_O_max_abs", N, d, causal, Br, Bc, ef, TOL_TILED_FORWARD);
            csv_row("stage3", "forward_L_max_abs", N, d, causal, Br, Bc, el, TOL_TILED_FORWARD);
            csv_row("stage3", "backward_max_abs", N, d, causal, Br, Bc, eb, TOL_TILED_BACKWARD);
        }
        wf = fmax(wf, ef);
        wl = fmax(wl, el);
        wb = fmax(wb, eb);
        cases++;
        sram_free(&sram);
        free(x.Q); free(r.O); free(g.O);
    }
    result(wf <= TOL_TILED_FORWARD && wl <= TOL_TILED_FORWARD, "tiled forward vs naive, N = 1..",
           "%d shapes up to N = %d, causal and not, tails: O %.2e, L %.2e (<= %.0e)", cases, Nmax,
           wf, wl, TOL_TILED_FORWARD);
    result(wb <= TOL_TILED_BACKWARD, "tiled backward vs naive",
           "%d shapes: max abs %.2e over dQ, dK, dV (<= %.0e)", cases, wb, TOL_TILED_BACKWARD);
    result(nonfinite == 0, "tiled outputs fully written", "%d shapes with a non-finite output", nonfinite);
    result(io_bad == 0, "counted IO == formula == the chapter's closed form (naive and tiled, fwd and bwd)",
           "%d mismatches over %d shapes x 6 counts", io_bad, cases);
    result(hw_bad == 0, "SRAM high-water <= M", "%d shapes over M", hw_bad);
}

static void test_gradcheck(rng_t *rng, int trials)
{
    double worst = 0;
    for (int t = 0; t < trials; t++) {
        int N = rng_int(rng, 1, 20), d = rng_int(rng, 1, 8), Br = rng_int(rng, 1, 7),
            Bc = rng_int(rng, 1, 7);
        bool causal = t % 2;
        qkv x = random_qkv(N, d, rng);
        sram_arena sram;
        sram_init(&sram, flash_backward_sram_elements(Br, Bc, d));
        grads g = tiled_all(x, N, d, 1.0 / sqrt((double)d), causal, Br, Bc, &sram, NULL, NULL,
                            NULL, NULL);
        attn_params p = problem(N, d, 1.0 / sqrt((double)d), causal);
        double e = gradcheck_central(&p, x.Q, x.K, x.V, x.dO, g.dQ, g.dK, g.dV, 1e-5);
        csv_row("stage3", "gradcheck_rel", N, d, causal, Br, Bc, e, TOL_GRADCHECK);
        worst = fmax(worst, e);
        sram_free(&sram);
        free(x.Q); free(g.O);
    }
    result(worst <= TOL_GRADCHECK, "tiled backward vs central differences",
           "%d random shapes: max relative error %.2e (<= %.0e)", trials, worst, TOL_GRADCHECK);
}

/* Causal skipping: visited tiles are exactly the blocks that touch the lower
 * triangle, and for N >> B about half of all tiles. */
static void test_causal_tiles(void)
{
    int N = 1024, d = 8, B = 64, T = N / B;
    rng_t rng;
    rng_seed(&rng, 5);
    qkv x = random_qkv(N, d, &rng);
    sram_arena sram;
    sram_init(&sram, flash_backward_sram_elements(B, B, d));
    tile_stats sf = {0}, sb = {0};
    grads g = tiled_all(x, N, d, 0.3, true, B, B, &sram, NULL, NULL, &sf, &sb);
    uint64_t want = (uint64_t)T * (T + 1) / 2;
    result(sf.tiles_visited == want && sf.tiles_skipped == (uint64_t)T * T - want &&
               sb.tiles_visited == want && sb.tiles_skipped == (uint64_t)T * T - want,
           "causal visits T(T+1)/2 of T^2 tiles", "N = %d, Br = Bc = %d: forward %llu/%llu, "
           "backward %llu/%llu visited/skipped, want %llu", N, B,
           (unsigned long long)sf.tiles_visited, (unsigned long long)sf.tiles_skipped,
           (unsigned long long)sb.tiles_visited, (unsigned long long)sb.tiles_skipped,
           (unsigned long long)want);
    sram_free(&sram);
    free(x.Q); free(g.O);
}

static void test_derive_blocks(void)
{
    int bad = 0, checked = 0;
    for (int d = 1; d <= 256; d += 7)
        for (long M = 1; M <= 300000; M = M * 3 / 2 + 1)
            for (int bwd = 0; bwd < 2; bwd++) {
                int Br, Bc;
                size_t (*fp)(int, int, int) = bwd ? flash_backward_sram_elements
                                                  : flash_forward_sram_elements;
                int rc = derive_blocks(M, d, bwd, &Br, &Bc);
                bool fits1 = fp(1, 1, d) <= (size_t)M;
                if (rc != 0) bad += fits1;   /* refused although one tile fits */
                else bad += !fits1 || fp(Br, Bc, d) > (size_t)M || Br < 1 || Bc < 1 || Br > d;
                /* the IO rule: one block is 1, the other the largest that fits */
                rc = derive_blocks_io(M, d, bwd, &Br, &Bc);
                if (rc != 0) bad += fits1;
                else if (bwd) bad += Br != 1 || fp(1, Bc, d) > (size_t)M || fp(1, Bc + 1, d) <= (size_t)M;
                else bad += Bc != 1 || fp(Br, 1, d) > (size_t)M || fp(Br + 1, 1, d) <= (size_t)M;
                checked++;
            }
    result(bad == 0, "derive_blocks and derive_blocks_io fit M, refuse only impossible M", "%d of %d (d, M) wrong",
           bad, checked);
}

/* ---- .npy ---------------------------------------------------------------- */
static void test_npy(rng_t *rng)
{
    char path[256];
    snprintf(path, sizeof path, "/tmp/fa_test_%d.npy", (int)getpid());
    double x[3 * 5 * 7];
    fill_normal(x, 105, 0, 1, rng);
    int64_t shape[3] = {3, 5, 7};
    char err[256];
    npy_array a;
    int ok = npy_write(path, x, 3, shape, false, err, sizeof err) == 0 &&
             npy_read(path, &a, err, sizeof err) == 0;
    ok = ok && a.ndim == 3 && a.shape[2] == 7 && a.elem_bytes == 8 && !memcmp(a.data, x, sizeof x);
    if (ok) npy_free(&a);
    result(ok, "npy float64 round trip is bit exact", "%s", ok ? "(3,5,7)" : err);

    ok = npy_write(path, x, 3, shape, true, err, sizeof err) == 0 &&
         npy_read(path, &a, err, sizeof err) == 0;
    double worst = 0;
    for (int i = 0; ok && i < 105; i++) worst = fmax(worst, fabs(a.data[i] - (double)(float)x[i]));
    if (ok) npy_free(&a);
    result(ok && worst == 0, "npy float32 round trip widens exactly", "%s", ok ? "(3,5,7)" : err);

    /* A Fortran-order file (what np.save writes for a transposed array):
     * its data is column-major; the reader must give the C-order array. */
    ok = npy_write(path, x, 3, shape, false, err, sizeof err) == 0;
    FILE *f = ok ? fopen(path, "r+b") : NULL;
    unsigned char pre[10];
    char hdr[256] = "";
    size_t hlen = 0;
    ok = f && fread(pre, 1, 10, f) == 10;
    if (ok) hlen = (size_t)(pre[8] | pre[9] << 8);
    ok = ok && hlen < sizeof hdr && fread(hdr, 1, hlen, f) == hlen;
    char *fo = ok ? strstr(hdr, "False") : NULL;
    if ((ok = fo != NULL)) {   /* "False" -> "True " keeps the header's length */
        memcpy(fo, "True ", 5);
        double col[105];       /* x[a][b][c] at a + 3 (b + 5 c), column-major */
        for (int a3 = 0; a3 < 3; a3++)
            for (int b5 = 0; b5 < 5; b5++)
                for (int c7 = 0; c7 < 7; c7++) col[a3 + 3 * (b5 + 5 * c7)] = x[(a3 * 5 + b5) * 7 + c7];
        ok = fseek(f, 10, SEEK_SET) == 0 && fwrite(hdr, 1, hlen, f) == hlen &&
             fwrite(col, sizeof col, 1, f) == 1;
    }
    if (f) fclose(f);
    ok = ok && npy_read(path, &a, err, sizeof err) == 0;
    ok = ok && a.ndim == 3 && a.shape[0] == 3 && a.shape[2] == 7 && !memcmp(a.data, x, sizeof x);
    if (ok) npy_free(&a);
    result(ok, "npy Fortran-order file reads as the C-order array", "%s", ok ? "(3,5,7)" : err);
    remove(path);
}

int main(int argc, char **argv)
{
    bool quick = test_args(argc, argv, "stage,check,N,d,causal,Br,Bc,error,tolerance,seed", &csv);
    rng_t rng = test_rng;
    test_online_softmax(&rng, quick ? 50 : 500);
    test_tiled_vs_naive(&rng, quick ? 64 : 300, quick ? 13 : 1);
    test_gradcheck(&rng, quick ? 3 : 12);
    test_causal_tiles();
    test_derive_blocks();
    test_npy(&rng);
    if (csv) csv_close(csv);
    printf("test_cpu: %d passed, %d failed\n", n_pass, n_fail);
    return outputs_finish(n_fail ? 1 : 0);
}

/*
 * tests/cpu/test_masks.c -- the one mask definition (core/mask.h) and the tiled
 * stage under it.
 *
 *   1. mask.h against itself, pair by pair: every range, block range, tile
 *      count and row count it derives equals what brute force over
 *      mask_visible finds, for random sizes and windows; and mask_visible
 *      against FlashAttention's documented pictures of its convention.
 *   2. The property test: >= 1000 random problems (seqlen_q, seqlen_k, d, B,
 *      H, H_kv, window or causal, Br != Bc from 1 to past the lengths), the
 *      tiled forward and backward against stage 1 masked (fp64), errors
 *      relative to the magnitudes (core/tolerances.h: forward <= 1e-13, backward <= 1e-12 plus
 *      the |L| term of flash_backward_tol), tiles visited == formula ==
 *      brute force, counted IO == formula, no NaN, empty rows O = 0,
 *      L = -inf, dQ = 0.
 *   3. The conventions, each pinned: empty rows add nothing to dK, dV; the
 *      mask value is -inf, so logits near -1000 still beat masked keys after
 *      a whole tile of a row was masked (the -inf - -inf guard); windows
 *      that cover every key give the unbounded or causal result bit for bit;
 *      a gradient check with grouped heads and a mask.
 *
 *   build/test_masks [--seed S] [--quick] [--csv data/cpu/masks_property.csv]
 *
 * A fresh seed each run, printed. --csv writes the property test's summary
 * (worst errors, counts) for the chapter on masks.
 */
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "mask.h"
#include "stage1_naive.h"
#include "stage3_tiled.h"

#include "test_report.h"

static FILE *csv;

static void csv_row(const char *check, long draws, double value, double tolerance, long count)
{
    if (csv)
        fprintf(csv, "%s,%ld,%.6e,%.6e,%ld,%llu\n", check, draws, value, tolerance, count,
                (unsigned long long)seed);
}

static int random_side(rng_t *rng, int n)
{
    switch (rng_int(rng, 0, 3)) {
    case 0: return -1;                        /* unbounded */
    case 1: return rng_int(rng, 0, 3);        /* narrow */
    case 2: return rng_int(rng, 0, n + 3);    /* anything up to past the length */
    default: return rng_int(rng, n, 2 * n + 5);   /* covers everything */
    }
}

/* ---- 1. mask.h against brute force ---------------------------------------- */

/* The pictures of FlashAttention's README (causal with seqlen_q != seqlen_k,
 * "aligned to the bottom right corner") and a sliding window of one key back. */
static void test_convention(void)
{
    struct { int sq, sk, left, right; const char *picture; } cases[] = {
        {2, 5, -1, 0, "11110" "11111"},
        {5, 2, -1, 0, "00" "00" "00" "10" "11"},
        {4, 4, 1, 0, "1000" "1100" "0110" "0011"},
        {3, 3, -1, -1, "111" "111" "111"},
        {3, 5, 0, 0, "00100" "00010" "00001"},
        {3, 3, 0, 1, "110" "011" "001"},
    };
    int bad = 0, n = (int)(sizeof cases / sizeof cases[0]);
    for (int k = 0; k < n; k++) {
        attn_mask m = mask_make(cases[k].sq, cases[k].sk, cases[k].left, cases[k].right);
        for (int i = 0; i < cases[k].sq; i++)
            for (int j = 0; j < cases[k].sk; j++)
                bad += mask_visible(m, i, j) != (cases[k].picture[i * cases[k].sk + j] == '1');
    }
    bool causal_is = mask_causal(7, 9).window_size_left == -1 && mask_causal(7, 9).window_size_right == 0;
    result(bad == 0 && causal_is, "mask_visible draws FlashAttention's pictures (bottom-right causal, windows)",
           "%d cases, %d pairs wrong; causal = window (-1, 0): %s", n, bad, causal_is ? "yes" : "no");
}

/* The visible set of row i (by_row) or of column i, by brute force: the
 * first and last index and the count. */
typedef struct { int lo, hi, n; } visible_run;
static visible_run visible_of(attn_mask m, int i, bool by_row)
{
    visible_run v = {-1, -2, 0};
    int len = by_row ? m.seqlen_k : m.seqlen_q;
    for (int j = 0; j < len; j++)
        if (by_row ? mask_visible(m, i, j) : mask_visible(m, j, i)) {
            if (v.lo < 0) v.lo = j;
            v.hi = j;
            v.n++;
        }
    return v;
}

/* The run of marked entries among n of hit, stride apart: first and last
 * index and the count (a brute-force block range). */
static visible_run marked_run(const unsigned char *hit, int n, size_t stride)
{
    visible_run v = {-1, -2, 0};
    for (int c = 0; c < n; c++)
        if (hit[c * stride]) {
            if (v.lo < 0) v.lo = c;
            v.hi = c;
            v.n++;
        }
    return v;
}

static void test_mask_brute_force(rng_t *rng, int trials)
{
    int bad_rows = 0, bad_cols = 0, bad_blocks = 0, bad_tiles = 0, bad_counts = 0, bad_whole = 0;
    for (int t = 0; t < trials; t++) {
        int sq = rng_int(rng, 1, 40), sk = rng_int(rng, 1, 40);
        attn_mask m = mask_make(sq, sk, random_side(rng, sk), random_side(rng, sk));
        int Br = rng_int(rng, 1, sq + 4), Bc = rng_int(rng, 1, sk + 4);
        /* each row's and each column's visible set is one interval, and it is
         * [key_first, key_last] / [query_first, query_last] */
        for (int i = 0; i < sq; i++) {
            visible_run v = visible_of(m, i, true);
            bad_rows += v.n == 0 ? !mask_row_empty(m, i)
                                 : (v.n != v.hi - v.lo + 1 || mask_key_first(m, i) != v.lo ||
                                    mask_key_last(m, i) != v.hi || mask_row_empty(m, i));
        }
        for (int j = 0; j < sk; j++) {
            visible_run v = visible_of(m, j, false);
            bad_cols += v.n ? (v.n != v.hi - v.lo + 1 || mask_query_first(m, j) != v.lo ||
                               mask_query_last(m, j) != v.hi)
                            : mask_query_first(m, j) <= mask_query_last(m, j);
        }
        /* tiles: which hold a visible pair, by brute force */
        int Tr = ceil_div(sq, Br), Tc = ceil_div(sk, Bc);
        int64_t tiles = 0, key_rows = 0, query_rows = 0, q_active = 0, k_active = 0;
        unsigned char *hit = xcalloc((size_t)Tr * Tc, 1, "tile marks");
        for (int i = 0; i < sq; i++)
            for (int j = 0; j < sk; j++)
                if (mask_visible(m, i, j)) hit[(size_t)(i / Br) * Tc + j / Bc] = 1;
        for (int a = 0; a < Tr; a++) {
            int i0 = a * Br, i1 = imin(i0 + Br, sq), b, e;
            visible_run v = marked_run(hit + (size_t)a * Tc, Tc, 1);
            int n = mask_key_blocks(m, i0, i1, Bc, &b, &e);
            bad_blocks += v.n ? (n != v.n || b != v.lo || e != v.hi + 1 || v.n != v.hi - v.lo + 1) : n != 0;
            q_active += v.n ? i1 - i0 : 0;
            for (int c = 0; c < Tc; c++) {   /* a tile wholly visible <=> mask_tile_unmasked */
                int j0 = c * Bc, j1 = imin(j0 + Bc, sk), all = 1;
                if (hit[(size_t)a * Tc + c]) {   /* the tiles a pass visits and the rows it reads */
                    tiles++;
                    key_rows += j1 - j0;
                    query_rows += i1 - i0;
                }
                for (int i = i0; i < i1; i++)
                    for (int j = j0; j < j1; j++) all &= mask_visible(m, i, j);
                bad_whole += all != (int)mask_tile_unmasked(m, i0, i1, j0, j1);
            }
        }
        for (int c = 0; c < Tc; c++) {
            int j0 = c * Bc, j1 = imin(j0 + Bc, sk), b, e;
            visible_run v = marked_run(hit + c, Tr, (size_t)Tc);
            int n = mask_query_blocks(m, j0, j1, Br, &b, &e);
            bad_blocks += v.n ? (n != v.n || b != v.lo || e != v.hi + 1) : n != 0;
            k_active += v.n ? j1 - j0 : 0;
        }
        bad_tiles += mask_tiles_visited(m, Br, Bc) != tiles;
        bad_counts += (mask_key_rows_read(m, Br, Bc) != key_rows) +
                      (mask_query_rows_read(m, Br, Bc) != query_rows) +
                      (mask_query_rows_active(m, Br) != q_active) + (mask_key_rows_active(m, Bc) != k_active);
        free(hit);
    }
    result(bad_rows + bad_cols == 0, "mask.h rows and columns: one interval each, its ends as brute force finds them",
           "%d random masks, %d rows and %d columns wrong", trials, bad_rows, bad_cols);
    result(bad_blocks == 0, "mask_key_blocks, mask_query_blocks: exactly the blocks holding a visible pair",
           "%d masks with random Br, Bc, %d block ranges wrong", trials, bad_blocks);
    result(bad_tiles + bad_whole == 0, "mask_tiles_visited and mask_tile_unmasked as brute force",
           "%d masks: %d tile counts, %d whole-tile answers wrong", trials, bad_tiles, bad_whole);
    result(bad_counts == 0, "mask.h's row sums (K, V rows read; Q rows read; active rows) as brute force",
           "%d masks, %d sums wrong", trials, bad_counts);
}

/* ---- 2. the property test ------------------------------------------------ */

typedef struct {
    attn_problem in;
    double *out, *ref;   /* O, dQ, dK, dV, L of the tiled run and of stage 1 */
} case_t;

static attn_problem random_problem(rng_t *rng, int max_len)
{
    attn_problem in;
    memset(&in, 0, sizeof in);
    attn_params *p = &in.params;
    p->B = rng_int(rng, 1, 2);
    p->H_kv = rng_int(rng, 1, 3);
    p->H = p->H_kv * rng_int(rng, 1, 3);
    p->seqlen_q = rng_int(rng, 1, max_len);
    p->seqlen_k = rng_int(rng, 1, max_len);
    p->d = rng_int(rng, 1, 16);
    p->softmax_scale = (rng_int(rng, 0, 3) ? 1.0 : 3.0) / sqrt((double)p->d);   /* some peaked */
    switch (rng_int(rng, 0, 3)) {
    case 0: p->window_size_left = p->window_size_right = -1; break;
    case 1: p->window_size_left = -1, p->window_size_right = 0; break;
    default:
        p->window_size_left = random_side(rng, p->seqlen_k);
        p->window_size_right = random_side(rng, p->seqlen_k);
    }
    size_t nq = attn_q_numel(p), nkv = attn_kv_numel(p);
    in.Q = xmalloc(nq, sizeof(double), "Q");
    in.dO = xmalloc(nq, sizeof(double), "dO");
    in.K = xmalloc(nkv, sizeof(double), "K");
    in.V = xmalloc(nkv, sizeof(double), "V");
    double vs = rng_int(rng, 0, 4) ? 1.0 : 300.0;   /* some large values */
    fill_normal(in.Q, nq, 0, 1, rng);
    fill_normal(in.dO, nq, 0, 1, rng);
    fill_normal(in.K, nkv, 0, 1, rng);
    fill_normal(in.V, nkv, 0, vs, rng);
    return in;
}

static void test_property(rng_t *rng, int draws)
{
    double wf = 0, wb = 0;   /* worst forward error; worst backward error over its tolerance */
    int bad_fwd = 0, bad_bwd = 0, bad_tiles = 0, bad_io = 0, bad_nan = 0, bad_empty = 0, bad_hw = 0;
    long empty_rows = 0, skipped = 0, all_tiles = 0;
    for (int t = 0; t < draws; t++) {
        attn_problem in = random_problem(rng, t < draws / 2 ? 24 : 64);
        const attn_params *p = &in.params;
        int maxlen = p->seqlen_q > p->seqlen_k ? p->seqlen_q : p->seqlen_k;
        flash_blocks b;
        b.fBr = rng_int(rng, 1, maxlen + 5);
        do b.fBc = rng_int(rng, 1, maxlen + 5); while (b.fBc == b.fBr && maxlen > 1);
        b.bBr = rng_int(rng, 0, 1) ? b.fBr : rng_int(rng, 1, maxlen + 5);
        b.bBc = rng_int(rng, 0, 1) ? b.fBc : rng_int(rng, 1, maxlen + 5);
        size_t nq = attn_q_numel(p), nkv = attn_kv_numel(p), rows = attn_rows(p);
        size_t n = 2 * nq + 2 * nkv + rows;
        double *out = xmalloc(n, sizeof(double), "tiled"), *ref = xmalloc(n, sizeof(double), "naive");
        double *O = out, *dQ = O + nq, *dK = dQ + nq, *dV = dK + nkv, *L = dV + nkv;
        double *rO = ref, *rdQ = rO + nq, *rdK = rdQ + nq, *rdV = rdK + nkv, *rL = rdV + nkv;
        poison(out, n);
        poison(ref, n);
        size_t M = flash_backward_sram_elements(b.bBr, b.bBc, p->d);
        size_t Mf = flash_forward_sram_elements(b.fBr, b.fBc, p->d);
        sram_arena sram;
        sram_init(&sram, M > Mf ? M : Mf);
        io_counter f, bw;
        io_reset(&f);
        io_reset(&bw);
        tile_stats sf = {0, 0}, sb = {0, 0};
        flash_attention_all_heads(p, in.Q, in.K, in.V, in.dO, b, O, L, dQ, dK, dV, &sram, &f, &bw,
                                  &sf, &sb, NULL, NULL);
        naive_attention_all_heads(p, in.Q, in.K, in.V, in.dO, rO, rL, rdQ, rdK, rdV, NULL, NULL,
                                  NULL, NULL);
        flash_errors e = flash_errors_vs(&in, O, L, dQ, dK, dV, rO, rL, rdQ, rdK, rdV);
        double tol = flash_backward_tol(rL, rows), eb = fmax(e.dQ, fmax(e.dK, e.dV));
        bad_fwd += !(e.O <= FLASH_FWD_TOL && e.L <= FLASH_FWD_TOL);
        bad_bwd += !(eb <= tol);
        wf = nanmax(wf, fmax(e.O, e.L));
        wb = nanmax(wb, eb);
        /* tiles: the formula, and brute force over mask_visible */
        attn_mask m = attn_mask_of(p);
        int64_t brute_f = 0, brute_b = 0;
        for (int pass = 0; pass < 2; pass++) {
            int Br = pass ? b.bBr : b.fBr, Bc = pass ? b.bBc : b.fBc;
            for (int i0 = 0; i0 < p->seqlen_q; i0 += Br)
                for (int j0 = 0; j0 < p->seqlen_k; j0 += Bc) {
                    int any = 0;
                    for (int i = i0; i < imin(i0 + Br, p->seqlen_q) && !any; i++)
                        for (int j = j0; j < imin(j0 + Bc, p->seqlen_k) && !any; j++)
                            any = mask_visible(m, i, j);
                    *(pass ? &brute_b : &brute_f) += any;
                }
        }
        int64_t heads = (int64_t)p->B * p->H;
        bad_tiles += sf.tiles_visited != flash_tiles_formula(p, b.fBr, b.fBc) ||
                     sb.tiles_visited != flash_tiles_formula(p, b.bBr, b.bBc) ||
                     (int64_t)sf.tiles_visited != heads * brute_f ||
                     (int64_t)sb.tiles_visited != heads * brute_b;
        skipped += (long)sf.tiles_skipped;
        all_tiles += (long)(sf.tiles_visited + sf.tiles_skipped);
        bad_io += io_total(&f) != flash_forward_io_formula(p, b.fBr, b.fBc) ||
                  io_total(&bw) != flash_backward_io_formula(p, b.bBr, b.bBc);
        bad_hw += sram.high_water > sram.M;
        bad_nan += count_nonfinite(out, n - rows, false) + count_nonfinite(L, rows, true) != 0;
        for (int bh = 0; bh < p->B * p->H; bh++)
            for (int i = 0; i < p->seqlen_q; i++) {
                if (!mask_row_empty(m, i)) continue;
                size_t row = (size_t)bh * p->seqlen_q + i;
                empty_rows++;
                bool ok = L[row] == -INFINITY;
                for (int c = 0; c < p->d; c++)
                    ok &= O[row * p->d + c] == 0 && dQ[row * p->d + c] == 0;
                bad_empty += !ok;
            }
        sram_free(&sram);
        free(out);
        free(ref);
        free_problem(&in);
    }
    csv_row("forward_rel_err", draws, wf, FLASH_FWD_TOL, bad_fwd);
    csv_row("backward_rel_err", draws, wb, FLASH_BWD_TOL, bad_bwd);
    csv_row("tiles_wrong", draws, bad_tiles, 0, skipped);
    csv_row("tiles_all", draws, (double)all_tiles, 0, skipped);
    csv_row("io_wrong", draws, bad_io, 0, bad_hw);
    csv_row("empty_rows", draws, (double)empty_rows, 0, bad_empty + bad_nan);
    result(bad_fwd == 0, "property: tiled forward vs stage 1 masked",
           "%d draws (B, H, H_kv, Sq, Sk <= 64, d, window or causal, Br != Bc up to past the lengths): "
           "worst relative %.2e (<= %.0e), %d over", draws, wf, FLASH_FWD_TOL, bad_fwd);
    result(bad_bwd == 0, "property: tiled backward vs stage 1 masked",
           "%d draws: worst relative %.2e (<= %.0e + %.0f eps max|L|), %d over", draws, wb,
           FLASH_BWD_TOL, FLASH_BWD_L_FACTOR, bad_bwd);
    result(bad_tiles == 0, "property: tiles visited == mask_tiles_visited == brute force, both passes",
           "%d draws, %d wrong; %ld of %ld forward tiles skipped", draws, bad_tiles, skipped, all_tiles);
    result(bad_io == 0 && bad_hw == 0, "property: counted IO == formula, SRAM high-water <= M",
           "%d draws, %d IO and %d SRAM wrong", draws, bad_io, bad_hw);
    result(bad_nan == 0 && bad_empty == 0, "property: no NaN; rows that see no key hold O = 0, L = -inf, dQ = 0",
           "%d draws, %d with a NaN, %d of %ld empty rows wrong", draws, bad_nan, bad_empty, empty_rows);
}

/* ---- 3. the conventions ---------------------------------------------------- */

/* Rows that see no key add nothing to dK and dV: the problem with those rows
 * deleted has the same dK, dV (causal, seqlen_q > seqlen_k: the first
 * seqlen_q - seqlen_k rows are empty). */
static void test_empty_rows_add_nothing(rng_t *rng)
{
    int Sq = 37, Sk = 20, d = 7, cut = Sq - Sk;
    attn_params p = attn_params_make(1, 1, Sq, d, 0.4), r = p;
    p.seqlen_k = Sk, p.window_size_right = 0;
    r.seqlen_q = Sq - cut, r.seqlen_k = Sk, r.window_size_right = 0;
    size_t nq = (size_t)Sq * d, nk = (size_t)Sk * d;
    double *x = xmalloc(2 * nq + 2 * nk, sizeof(double), "inputs");
    fill_normal(x, 2 * nq + 2 * nk, 0, 1, rng);
    double *Q = x, *dO = x + nq, *K = x + 2 * nq, *V = K + nk;
    double *a = xmalloc(2 * nq + 2 * nk + Sq, sizeof(double), "full"), *c = xmalloc(2 * nq + 2 * nk + Sq, sizeof(double), "cut");
    sram_arena sram;
    sram_init(&sram, flash_backward_sram_elements(8, 6, d));
    flash_blocks b = {8, 6, 8, 6};
    flash_attention_all_heads(&p, Q, K, V, dO, b, a, a + 2 * nq + 2 * nk, a + nq, a + 2 * nq,
                              a + 2 * nq + nk, &sram, NULL, NULL, NULL, NULL, NULL, NULL);
    flash_attention_all_heads(&r, Q + (size_t)cut * d, K, V, dO + (size_t)cut * d, b, c,
                              c + 2 * nq + 2 * nk, c + nq, c + 2 * nq, c + 2 * nq + nk, &sram, NULL,
                              NULL, NULL, NULL, NULL, NULL);
    double e = fmax(rel_err(a + 2 * nq, c + 2 * nq, 2 * nk, max_abs_finite(c + 2 * nq, 2 * nk)),
                    rel_err(a + (size_t)cut * d, c, (size_t)(Sq - cut) * d, max_abs_finite(V, nk)));
    result(e <= TOL_EMPTY_ROWS, "empty rows add nothing to dK, dV (causal, 37 queries, 20 keys)",
           "dK, dV and the seeing rows' O against the problem without the 17 empty rows: relative %.2e (<= %.0e)",
           e, TOL_EMPTY_ROWS);
    sram_free(&sram);
    free(x), free(a), free(c);
}

/* The mask value is -inf, never a finite stand-in: a row whose first visited
 * tile is wholly masked, and whose visible logits are -1000, must still get
 * the softmax of those logits. A guard that sets the running max to 0 for
 * such a tile (the chapter's) underflows exp(-1000) to 0 and returns O = 0. */
static void test_neg_inf_mask(void)
{
    int N = 8, d = 1;
    attn_params p = attn_params_make(1, 1, N, d, 1.0);
    p.window_size_left = 1, p.window_size_right = 0;     /* row i sees keys i - 1, i */
    double Q[8], K[8], V[8], dO[8], O[8], L[8], dQ[8], dK[8], dV[8];
    for (int i = 0; i < N; i++) Q[i] = 1, K[i] = -1000, V[i] = i + 1, dO[i] = 1;
    sram_arena sram;
    sram_init(&sram, flash_backward_sram_elements(8, 2, d));
    /* one query block of 8 rows, key blocks of 2: row 7 sees only the last */
    flash_attention_all_heads(&p, Q, K, V, dO, (flash_blocks){8, 2, 8, 2}, O, L, dQ, dK, dV, &sram,
                              NULL, NULL, NULL, NULL, NULL, NULL);
    bool ok = O[7] == 7.5 && L[7] == -1000 + log(2.0) && O[0] == 1 && L[0] == -1000;
    result(ok, "mask value -inf: logits of -1000 after a wholly masked tile still win",
           "row 7 sees keys 6, 7 (V = 7, 8) with logits -1000: O = %.17g (want 7.5), L = %.17g "
           "(want -1000 + log 2)", O[7], L[7]);
    sram_free(&sram);
}

/* Windows that reach past every key are the unbounded masks: bit for bit. */
static void test_full_cover(rng_t *rng, int trials)
{
    int differ = 0;
    for (int t = 0; t < trials; t++) {
        attn_problem in = random_problem(rng, 50);
        attn_params *p = &in.params;
        int causal = rng_int(rng, 0, 1), cover_l = p->seqlen_q - 1 + p->seqlen_k - p->seqlen_q;
        int cover_r = p->seqlen_k - 1 + p->seqlen_q - p->seqlen_k;   /* j - i - delta at its extremes */
        flash_blocks b = {rng_int(rng, 1, 20), rng_int(rng, 1, 20), rng_int(rng, 1, 20), rng_int(rng, 1, 20)};
        size_t nq = attn_q_numel(p), nkv = attn_kv_numel(p), rows = attn_rows(p);
        size_t n = 2 * nq + 2 * nkv + rows;
        double *o[2];
        sram_arena sram;
        sram_init(&sram, flash_backward_sram_elements(20, 20, p->d) + flash_forward_sram_elements(20, 20, p->d));
        for (int k = 0; k < 2; k++) {
            p->window_size_left = k ? mask_imax(cover_l, 0) + rng_int(rng, 0, 3) : -1;
            p->window_size_right = causal ? 0 : k ? mask_imax(cover_r, 0) + rng_int(rng, 0, 3) : -1;
            o[k] = xmalloc(n, sizeof(double), "outputs");
            flash_attention_all_heads(p, in.Q, in.K, in.V, in.dO, b, o[k], o[k] + 2 * nq + 2 * nkv,
                                      o[k] + nq, o[k] + 2 * nq, o[k] + 2 * nq + nkv, &sram, NULL, NULL,
                                      NULL, NULL, NULL, NULL);
        }
        differ += memcmp(o[0], o[1], n * sizeof(double)) != 0;
        free(o[0]), free(o[1]);
        sram_free(&sram);
        free_problem(&in);
    }
    result(differ == 0, "windows covering every key == no mask / causal, bit for bit (O, L, dQ, dK, dV)",
           "%d random shapes, %d differ", trials, differ);
}

/* Central differences through grouped heads and a window (the tiled
 * backward's dK, dV sum a group's query heads). */
static void test_gradcheck_gqa(rng_t *rng, int trials)
{
    double worst = 0;
    for (int t = 0; t < trials; t++) {
        attn_problem in;
        memset(&in, 0, sizeof in);
        in.params = (attn_params){1, 4, 2, rng_int(rng, 1, 9), rng_int(rng, 1, 9), rng_int(rng, 1, 4),
                                  0.5, rng_int(rng, -1, 4), rng_int(rng, -1, 2)};
        attn_params *p = &in.params;
        size_t nq = attn_q_numel(p), nkv = attn_kv_numel(p);
        in.Q = xmalloc(nq, sizeof(double), "Q"), in.dO = xmalloc(nq, sizeof(double), "dO");
        in.K = xmalloc(nkv, sizeof(double), "K"), in.V = xmalloc(nkv, sizeof(double), "V");
        fill_normal(in.Q, nq, 0, 1, rng), fill_normal(in.dO, nq, 0, 1, rng);
        fill_normal(in.K, nkv, 0, 1, rng), fill_normal(in.V, nkv, 0, 1, rng);
        worst = nanmax(worst, flash_gradcheck(&in, 3, 2));
        free_problem(&in);
    }
    result(worst <= TOL_GRADCHECK, "tiled backward with 4 query heads on 2 key/value heads and a window vs central differences",
           "%d random shapes: max relative %.2e (<= %.0e)", trials, worst, TOL_GRADCHECK);
}

int main(int argc, char **argv)
{
    bool quick = test_args(argc, argv, "check,draws,value,tolerance,count,seed", &csv);
    rng_t rng = test_rng;
    test_convention();
    test_mask_brute_force(&rng, quick ? 300 : 3000);
    test_property(&rng, quick ? 200 : 1000);
    test_empty_rows_add_nothing(&rng);
    test_neg_inf_mask();
    test_full_cover(&rng, quick ? 20 : 100);
    test_gradcheck_gqa(&rng, quick ? 2 : 8);
    if (csv) csv_close(csv);
    printf("test_masks: %d passed, %d failed\n", n_pass, n_fail);
    return outputs_finish(n_fail ? 1 : 0);
}

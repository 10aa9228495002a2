/*
 * stage6_masks.c -- Stage 6: masks as one definition.
 *
 * What it adds over stage 3: nothing in the algorithm, which already takes
 * any mask, seqlen_q != seqlen_k and grouped heads through attn_params and
 * core/mask.h. This program holds the tiled stage to that generality: every
 * mask against stage 1 masked (fp64), the conventions of empty rows and
 * full-cover windows, long sequences checked in O(N) memory, and the sweeps
 * the chapter draws (window size, memory against N, error against |L|).
 *
 * Build and run:   make stage6 && ./stage6
 *   ./stage6                        the real input (all-MiniLM-L6-v2) under a
 *                                   tour of masks: none, causal, sliding and
 *                                   two-sided windows, keys cut so that
 *                                   seqlen_q != seqlen_k, 4 key/value heads;
 *                                   then random shapes; one line each
 *   ./stage6 --random --n 300 --seqlen-k 200 --heads 4 --kv-heads 2 --window 31,0
 *   ./stage6 --random --n 131072 --d 16 --window 255,0 --check rows
 *                                   no N x N reference: sampled rows against an
 *                                   fp64 row-by-row reference, O(N) memory
 *   ./stage6 --sweep window --csv data/cpu/window_sweep.csv    (make sweep-masks)
 *   ./stage6 --sweep memory --csv data/cpu/memory_vs_n.csv
 *   ./stage6 --sweep lse --csv data/cpu/lse_error.csv
 *
 * What it prints: per problem, the errors against the reference relative to
 * their magnitudes (flash_errors_vs), the empty rows and what they hold,
 * counted IO against the formula, tiles visited against mask_tiles_visited,
 * a gradient check by central differences. Exit 0 only when every check
 * passes; 2 on bad input, before any work.
 *
 * Cost: the tiled algorithm's, Theta(visible pairs x d) time and O(N) extra
 * memory; the naive reference's Theta(Sq Sk) memory unless --check rows.
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "stage6_masks.h"
#include "mask.h"
#include "stage1_naive.h"
#include "stage3_tiled.h"


/* ------------------------------------------------------------------------- */
/* The row-by-row reference: O(seqlen_k) memory                               */
/* ------------------------------------------------------------------------- */

//> row-reference
/* Query row i of one head from scratch, fp64: its scores over the keys it
 * sees (mask_key_first .. mask_key_last, mask_visible's own interval), their
 * softmax, o (d) and *L. An empty row gives o = 0, *L = -inf. s: scratch of
 * seqlen_k. Q row q (d); K, V (seqlen_k, d) of its key/value head. */
static void row_forward(const attn_params *p, const double *q, const double *K, const double *V,
                        int i, double *s, double *o, double *L)
{
    attn_mask mask = attn_mask_of(p);
    int lo = mask_key_first(mask, i), hi = mask_key_last(mask, i), d = p->d;
    for (int c = 0; c < d; c++) o[c] = 0;
    *L = -INFINITY;
    if (lo > hi) return;
    double m = -INFINITY, l = 0;
    for (int j = lo; j <= hi; j++) {
        double acc = 0;
        for (int c = 0; c < d; c++) acc += q[c] * K[(size_t)j * d + c];
        s[j] = acc * p->softmax_scale;
        m = fmax(m, s[j]);
    }
    for (int j = lo; j <= hi; j++) l += (s[j] = exp(s[j] - m));
    for (int j = lo; j <= hi; j++)
        for (int c = 0; c < d; c++) o[c] += s[j] / l * V[(size_t)j * d + c];
    *L = m + log(l);
}

/* dQ row i: scale sum_j P_ij (dP_ij - D_i) K_j with dP_ij = dO_i . V_j and
 * D_i = dO_i . O_i, P and O from row_forward. */
static void row_dq(const attn_params *p, const double *q, const double *dout, const double *K,
                   const double *V, int i, double *s, double *o, double *dq)
{
    attn_mask mask = attn_mask_of(p);
    int lo = mask_key_first(mask, i), hi = mask_key_last(mask, i), d = p->d;
    double L, D = 0;
    row_forward(p, q, K, V, i, s, o, &L);
    for (int c = 0; c < d; c++) dq[c] = 0;
    if (L == -INFINITY) return;
    for (int c = 0; c < d; c++) D += dout[c] * o[c];
    for (int j = lo; j <= hi; j++) {
        double dp = 0, qk = 0;
        for (int c = 0; c < d; c++) {
            dp += dout[c] * V[(size_t)j * d + c];
            qk += q[c] * K[(size_t)j * d + c];
        }
        double g = exp(qk * p->softmax_scale - L) * (dp - D) * p->softmax_scale;
        for (int c = 0; c < d; c++) dq[c] += g * K[(size_t)j * d + c];
    }
}

/* dK and dV row j of key/value head (b, g): sums over the query heads of the
 * group and the queries that see key j (mask_query_first .. _last), each
 * query's L and D from its own row_forward. */
static void col_dkdv(const attn_params *p, const attn_problem *in, int b, int g, int j, double *s,
                     double *o, double *dk, double *dv)
{
    attn_mask mask = attn_mask_of(p);
    int d = p->d, G = p->H / p->H_kv;
    const double *K = in->K + attn_kv_offset(p, b, g * G), *V = in->V + attn_kv_offset(p, b, g * G);
    for (int c = 0; c < d; c++) dk[c] = dv[c] = 0;
    for (int h = g * G; h < (g + 1) * G; h++)
        for (int i = mask_query_first(mask, j); i <= mask_query_last(mask, j); i++) {
            const double *q = in->Q + attn_q_offset(p, b, h) + (size_t)i * d;
            const double *dout = in->dO + attn_q_offset(p, b, h) + (size_t)i * d;
            double L, D = 0, dp = 0, qk = 0;
            row_forward(p, q, K, V, i, s, o, &L);
            for (int c = 0; c < d; c++) {
                D += dout[c] * o[c];
                dp += dout[c] * V[(size_t)j * d + c];
                qk += q[c] * K[(size_t)j * d + c];
            }
            double P = exp(qk * p->softmax_scale - L);
            for (int c = 0; c < d; c++) {
                dv[c] += P * dout[c];
                dk[c] += P * (dp - D) * p->softmax_scale * q[c];
            }
        }
}
//< row-reference

/* ------------------------------------------------------------------------- */
/* One problem: the tiled run and its checks                                  */
/* ------------------------------------------------------------------------- */

typedef struct {
    flash_errors e;         /* against the reference (naive, or sampled rows) */
    double btol;            /* the backward's tolerance (flash_backward_tol) */
    double gradcheck;       /* central differences on a slice, relative */
    size_t empty_rows;      /* query rows that see no key */
    size_t empty_bad;       /* of those, rows whose O, L or dQ is not 0, -inf, 0 */
    size_t nonfinite;       /* NaN or inf in the outputs (L = -inf of empty rows excepted) */
    bool io_ok, tiles_ok, naive_io_ok, sram_ok;
    uint64_t io_f, io_f_formula, io_b, io_b_formula, tiles_f, tiles_formula;
    double t_f, t_b;
    int rows_checked, cols_checked;   /* --check rows */
} run_result;

static int failures(const run_result *r)
{
    return !(r->e.O <= FLASH_FWD_TOL) + !(r->e.L <= FLASH_FWD_TOL) + !(r->e.dQ <= r->btol) +
           !(r->e.dK <= r->btol) + !(r->e.dV <= r->btol) + !(r->gradcheck <= TOL_GRADCHECK) +
           (r->empty_bad != 0) + (r->nonfinite != 0) + !r->io_ok + !r->tiles_ok + !r->naive_io_ok +
           !r->sram_ok;
}

/* The convention for a query row that sees no key: O = 0, L = -inf, dQ = 0. */
static void check_empty_rows(const attn_params *p, const double *O, const double *L,
                             const double *dQ, run_result *r)
{
    attn_mask mask = attn_mask_of(p);
    for (int bh = 0; bh < p->B * p->H; bh++)
        for (int i = 0; i < p->seqlen_q; i++) {
            size_t row = (size_t)bh * p->seqlen_q + i, at = row * p->d;
            bool empty = mask_row_empty(mask, i), bad = false;
            r->empty_rows += empty;
            if (!empty) {
                bad = L[row] == -INFINITY;   /* a row that sees keys has a finite L */
            } else {
                bad = L[row] != -INFINITY;
                for (int c = 0; c < p->d; c++) bad |= O[at + c] != 0 || dQ[at + c] != 0;
            }
            r->empty_bad += bad;
        }
}

/* Sampled rows against the row-by-row reference (--check rows): query rows of
 * the first and the last head, and key rows within a budget of work. */
static void check_sampled_rows(const attn_problem *in, const double *O, const double *L,
                               const double *dQ, const double *dK, const double *dV,
                               uint64_t seed, run_result *r)
{
    const attn_params *p = &in->params;
    attn_mask mask = attn_mask_of(p);
    int Sq = p->seqlen_q, Sk = p->seqlen_k, d = p->d, G = p->H / p->H_kv;
    size_t nq = attn_q_numel(p), nkv = attn_kv_numel(p);
    double *s = xmalloc((size_t)Sk, sizeof(double), "score row");
    double *o = xmalloc(3 * (size_t)d, sizeof(double), "reference rows");
    double *x = o + d, *y = x + d;
    rng_t rng;
    rng_seed(&rng, seed);
    double eO = 0, eL = 0, edQ = 0, edK = 0, edV = 0, mL = 1, mdQ = 0, mdK = 0, mdV = 0;
    /* rows: both ends, the middle, both sides of the first non-empty row,
     * and random ones */
    int delta = Sk - Sq, fixed[] = {0, 1, Sq / 2, Sq - 2, Sq - 1, -delta - 1, -delta};
    int heads[2][2] = {{0, 0}, {p->B - 1, p->H - 1}};
    for (int hh = 0; hh < 2; hh++) {
        int b = heads[hh][0], h = heads[hh][1];
        const double *K = in->K + attn_kv_offset(p, b, h), *V = in->V + attn_kv_offset(p, b, h);
        for (int k = 0; k < 32; k++) {
            int i = k < 7 ? fixed[k] : rng_int(&rng, 0, Sq - 1);
            if (i < 0 || i >= Sq) continue;
            size_t at = attn_q_offset(p, b, h) + (size_t)i * d, row = attn_row_offset(p, b, h) + i;
            double Lr;
            row_forward(p, in->Q + at, K, V, i, s, o, &Lr);
            row_dq(p, in->Q + at, in->dO + at, K, V, i, s, y, x);
            for (int c = 0; c < d; c++) {
                eO = nanmax(eO, fabs(O[at + c] - o[c]));
                edQ = nanmax(edQ, fabs(dQ[at + c] - x[c]));
                mdQ = fmax(mdQ, fabs(x[c]));
            }
            if (Lr != L[row]) eL = nanmax(eL, isinf(Lr) || isinf(L[row]) ? INFINITY : fabs(L[row] - Lr));
            if (isfinite(Lr)) mL = fmax(mL, fabs(Lr));
            r->rows_checked++;
        }
    }
    /* key rows: the cheapest first (a key few queries see), until the work
     * of their reference passes a budget of about 4e9 multiply-adds */
    double budget = 4e9, spent = 0;
    for (int k = 0; k < 24; k++) {
        int j = k == 0 ? Sk - 1 : k == 1 ? 0 : k == 2 ? Sk / 2 : rng_int(&rng, 0, Sk - 1);
        int b = k % 2 ? p->B - 1 : 0, g = k % 2 ? p->H_kv - 1 : 0;
        double cost = 0;
        for (int i = mask_query_first(mask, j); i <= mask_query_last(mask, j); i++)
            cost += (double)(mask_key_last(mask, i) - mask_key_first(mask, i) + 2) * d * G * 2;
        if (k > 0 && spent + cost > budget) continue;
        spent += cost;
        col_dkdv(p, in, b, g, j, s, o, x, y);
        size_t at = attn_kv_offset(p, b, g * G) + (size_t)j * d;
        for (int c = 0; c < d; c++) {
            edK = nanmax(edK, fabs(dK[at + c] - x[c]));
            edV = nanmax(edV, fabs(dV[at + c] - y[c]));
            mdK = fmax(mdK, fabs(x[c]));
            mdV = fmax(mdV, fabs(y[c]));
        }
        r->cols_checked++;
    }
    /* the same scales as flash_errors_vs, from the sampled magnitudes */
    double mV = max_abs_finite(in->V, nkv), mdO = max_abs_finite(in->dO, nq);
    double sc = p->softmax_scale * mdO * mV;
    r->e.O = eO / fmax(mV, DBL_MIN);
    r->e.L = eL / mL;
    r->e.dQ = edQ / fmax(fmax(mdQ, sc * max_abs_finite(in->K, nkv)), DBL_MIN);
    r->e.dK = edK / fmax(fmax(mdK, sc * max_abs_finite(in->Q, nq)), DBL_MIN);
    r->e.dV = edV / fmax(fmax(mdV, mdO), DBL_MIN);
    free(s);
    free(o);
}

/* The tiled run of one problem and every check of it. check_naive: against
 * stage 1 (else sampled rows). Outputs are kept in *out (2 nq + 2 nkv + rows)
 * when out is not NULL, for the caller to save or compare. */
static run_result run_problem(const attn_problem *in, flash_blocks b, long M, bool check_naive,
                              uint64_t seed, double **out)
{
    const attn_params *p = &in->params;
    size_t nq = attn_q_numel(p), nkv = attn_kv_numel(p), rows = attn_rows(p);
    size_t nout = 2 * nq + 2 * nkv + rows;
    run_result r;
    memset(&r, 0, sizeof r);
    double *buf = xmalloc(nout, sizeof(double), "tiled outputs");
    double *O = buf, *dQ = O + nq, *dK = dQ + nq, *dV = dK + nkv, *L = dV + nkv;
    poison(buf, nout);
    flash_run run = flash_run_counted(p, in->Q, in->K, in->V, in->dO, b, M, O, L, dQ, dK, dV);
    io_counter io_f = run.io_f, io_b = run.io_b;
    tile_stats st_f = run.st_f, st_b = run.st_b;
    r.t_f = run.t_f;
    r.t_b = run.t_b;
    r.sram_ok = run.high_water <= (size_t)M;

    r.io_f = io_total(&io_f);
    r.io_b = io_total(&io_b);
    r.io_f_formula = flash_forward_io_formula(p, b.fBr, b.fBc);
    r.io_b_formula = flash_backward_io_formula(p, b.bBr, b.bBc);
    r.io_ok = r.io_f == r.io_f_formula && r.io_b == r.io_b_formula;
    r.tiles_f = st_f.tiles_visited;
    r.tiles_formula = flash_tiles_formula(p, b.fBr, b.fBc);
    r.tiles_ok = st_f.tiles_visited == r.tiles_formula &&
                 st_b.tiles_visited == flash_tiles_formula(p, b.bBr, b.bBc) &&
                 st_f.tiles_visited + st_f.tiles_skipped ==
                     (uint64_t)p->B * p->H * ceil_div(p->seqlen_q, b.fBr) * ceil_div(p->seqlen_k, b.fBc);
    r.nonfinite = count_nonfinite(buf, nout - rows, false) + count_nonfinite(L, rows, true);
    check_empty_rows(p, O, L, dQ, &r);
    r.naive_io_ok = true;
    if (check_naive) {
        double *ref = xmalloc(nout, sizeof(double), "naive outputs");
        double *rO = ref, *rdQ = rO + nq, *rdK = rdQ + nq, *rdV = rdK + nkv, *rL = rdV + nkv;
        io_counter nf, nb;
        io_reset(&nf);
        io_reset(&nb);
        naive_attention_all_heads(p, in->Q, in->K, in->V, in->dO, rO, rL, rdQ, rdK, rdV, &nf, &nb,
                                  NULL, NULL);
        naive_require_finite_scores(rL, p);
        r.naive_io_ok = io_total(&nf) == naive_forward_io_formula(p) &&
                        io_total(&nb) == naive_backward_io_formula(p);
        r.e = flash_errors_vs(in, O, L, dQ, dK, dV, rO, rL, rdQ, rdK, rdV);
        free(ref);
    } else {
        check_sampled_rows(in, O, L, dQ, dK, dV, seed, &r);
    }
    r.btol = flash_backward_tol(L, rows);

    /* central differences on a slice of head 0, small tiles across its edges */
    attn_problem g = problem_slice(in, 12, 6);
    r.gradcheck = flash_gradcheck(&g, 4, 3);
    free_problem(&g);

    if (out) *out = buf;
    else free(buf);
    return r;
}

static double worst_bwd(const run_result *r) { return fmax(r->e.dQ, fmax(r->e.dK, r->e.dV)); }

/* ------------------------------------------------------------------------- */
/* The tour: the real input under every kind of mask, and random shapes       */
/* ------------------------------------------------------------------------- */

typedef struct {
    const char *name;
    int window_left, window_right;   /* window; -2 marks "causal" for the label only */
    int seqlen_k;                    /* 0: the input's */
    int kv_heads;                    /* 0: the input's */
    int Br, Bc;
} tour_case;

/* A problem of the tour: the real input (or random when random_shape) cut
 * and masked as the case says, through load_problem like any command line. */
static void tour_problem(const options *base, const tour_case *c, attn_problem *prob)
{
    options o = *base;
    o.given &= ~(opt_set)(OPT_MASKS);
    o.causal = false;
    o.given |= OPT_WINDOW;
    o.window_left = c->window_left;
    o.window_right = c->window_right;
    if (c->seqlen_k) o.given |= OPT_SEQLEN_K, o.seqlen_k = c->seqlen_k;
    if (c->kv_heads) o.given |= OPT_KV_HEADS, o.kv_heads = c->kv_heads;
    load_problem(&o, prob);
}

static int tour_line(const char *name, const attn_problem *in, flash_blocks b, run_result *r)
{
    const attn_params *p = &in->params;
    int bad = failures(r);
    char bh[40];   /* "B,H/H_kv", right-aligned so that the columns after it line up */
    snprintf(bh, sizeof bh, "%d,%d/%d", p->B, p->H, p->H_kv);
    printf("  %-32s (%7s,%4d,%4d,%3d) (%4d,%4d) %3dx%-3d %9.2e %9.2e %10.2e %5zu %-3s %-5s %s\n",
           name, bh, p->seqlen_q, p->seqlen_k, p->d, p->window_size_left,
           p->window_size_right, b.fBr, b.fBc, fmax(r->e.O, r->e.L), worst_bwd(r), r->gradcheck,
           r->empty_rows, r->io_ok && r->naive_io_ok ? "yes" : "NO", r->tiles_ok ? "yes" : "NO",
           bad ? "FAIL" : "ok");
    if (bad)
        printf("    errors O %.3g, L %.3g, dQ %.3g, dK %.3g, dV %.3g (tol %.0e, %.3g); empty rows "
               "wrong %zu; non-finite %zu; IO %llu/%llu, %llu/%llu; SRAM %s\n",
               r->e.O, r->e.L, r->e.dQ, r->e.dK, r->e.dV, FLASH_FWD_TOL, r->btol, r->empty_bad,
               r->nonfinite, (unsigned long long)r->io_f, (unsigned long long)r->io_f_formula,
               (unsigned long long)r->io_b, (unsigned long long)r->io_b_formula,
               r->sram_ok ? "ok" : "over M");
    return bad;
}

/* Outputs of two runs that the convention says are the same: bit for bit. */
static int identical(const char *what, const double *a, const double *b, size_t n)
{
    bool same = memcmp(a, b, n * sizeof(double)) == 0;
    printf("  %-78s %s\n", what, same ? "identical bits: ok" : "DIFFER: FAIL");
    return !same;
}

int masks_run_tour(const options *opt)
{
    static const tour_case real[] = {
        {"no mask", -1, -1, 0, 0, 16, 16},
        {"causal", -1, 0, 0, 0, 16, 16},
        {"causal window of 24 keys", 23, 0, 0, 0, 16, 16},
        {"two-sided window (16, 16)", 16, 16, 0, 0, 16, 24},
        {"keys cut to 100, causal", -1, 0, 100, 0, 16, 16},
        {"keys cut to 100, window (23, 0)", 23, 0, 100, 0, 24, 16},
        {"keys cut to 20, diagonal (0, 0)", 0, 0, 20, 0, 7, 5},
        {"4 key/value heads, causal", -1, 0, 0, 4, 16, 16},
        {"1 key/value head, window (8, 2)", 8, 2, 60, 1, 13, 32},
    };
    int failed = 0;
    printf("stage6: the tiled stage under every mask, against stage 1 masked (fp64)\n");
    printf("  the columns: fwd err, the larger error of O and L, and bwd err, the largest of dQ, dK\n"
           "  and dV, each relative to its magnitude (<= %.0e and <= %.0e + %.0f eps max|L|);\n"
           "  gradcheck, the backward against central differences on a 12-query slice (<= %.0e);\n"
           "  empty, the rows that see no key (each must hold O = 0, L = -inf, dQ = 0); IO, the\n"
           "  counted reads and writes equal their formula (tiled and naive); tiles, the tiles\n"
           "  visited equal their closed form for the mask; row, ok when every check of the row\n"
           "  holds (bounds: core/tolerances.h)\n\n",
           FLASH_FWD_TOL, FLASH_BWD_TOL, FLASH_BWD_L_FACTOR, TOL_GRADCHECK);
    printf("  %-32s %-23s %-11s %-7s %9s %9s %10s %5s %-3s %-5s %s\n", "problem",
           "(B,H/H_kv,Sq,Sk,d)", "window", "Br x Bc", "fwd err", "bwd err", "gradcheck", "empty",
           "IO", "tiles", "row");
    printf("  real input (all-MiniLM-L6-v2, 12 heads of 148 x 32)\n");
    for (size_t k = 0; k < sizeof real / sizeof real[0]; k++) {
        attn_problem prob;
        tour_problem(opt, &real[k], &prob);
        flash_blocks b = {real[k].Br, real[k].Bc, real[k].Br, real[k].Bc};
        long M = (long)fmax(flash_backward_sram_elements(b.fBr, b.fBc, prob.params.d),
                            flash_forward_sram_elements(b.fBr, b.fBc, prob.params.d));
        run_result r = run_problem(&prob, b, M, true, opt->seed + k, NULL);
        failed += tour_line(real[k].name, &prob, b, &r);
        free_problem(&prob);
    }

    /* Random shapes: lengths that differ both ways, grouped heads, windows
     * of every kind, tiles that do not divide anything. */
    printf("  random N(0,1) inputs, seed %llu\n", (unsigned long long)opt->seed);
    rng_t rng;
    rng_seed(&rng, opt->seed);
    for (int k = 0; k < 8; k++) {
        options o = *opt;
        o.given = (o.given & ~(opt_set)OPT_MASKS) | OPT_RANDOM | OPT_SEQLEN_K | OPT_KV_HEADS |
                  OPT_WINDOW | OPT_HEADS | OPT_BATCH | OPT_N | OPT_D;
        o.random = true;
        o.batch = rng_int(&rng, 1, 2);
        o.kv_heads = rng_int(&rng, 1, 2);
        o.heads = o.kv_heads * rng_int(&rng, 1, 3);
        o.N = rng_int(&rng, 1, 120);
        o.seqlen_k = rng_int(&rng, 1, 120);
        o.d = rng_int(&rng, 1, 24);
        o.window_left = rng_int(&rng, -1, 40);
        o.window_right = rng_int(&rng, -1, 10);
        o.seed = opt->seed + 100 + (uint64_t)k;
        attn_problem prob;
        load_problem(&o, &prob);
        flash_blocks b = {rng_int(&rng, 1, 40), rng_int(&rng, 1, 40), 0, 0};
        b.bBr = b.fBr, b.bBc = b.fBc;
        long M = (long)flash_backward_sram_elements(b.fBr, b.fBc, prob.params.d);
        run_result r = run_problem(&prob, b, M, true, o.seed, NULL);
        char name[32];
        snprintf(name, sizeof name, "random %d", k + 1);
        failed += tour_line(name, &prob, b, &r);
        free_problem(&prob);
    }

    /* Windows that cover every key are the unbounded masks: same bits. */
    printf("\n  conventions\n");
    {
        tour_case full = {"", -1, -1, 100, 0, 16, 16}, causal = {"", -1, 0, 100, 0, 16, 16};
        tour_case wide = {"", 150, 152, 100, 0, 16, 16}, left = {"", 154, 0, 100, 0, 16, 16};
        const tour_case *pairs[2][2] = {{&full, &wide}, {&causal, &left}};
        const char *what[2] = {"window (150, 152) over 148 queries and 100 keys == no mask (O, L, dQ, dK, dV)",
                               "window (154, 0) over 148 queries and 100 keys == causal (O, L, dQ, dK, dV)"};
        for (int t = 0; t < 2; t++) {
            double *o1, *o2;
            attn_problem a, c;
            tour_problem(opt, pairs[t][0], &a);
            tour_problem(opt, pairs[t][1], &c);
            flash_blocks b = {16, 16, 16, 16};
            long M = (long)flash_backward_sram_elements(16, 16, a.params.d);
            run_problem(&a, b, M, false, 1, &o1);
            run_problem(&c, b, M, false, 1, &o2);
            const attn_params *p = &a.params;
            failed += identical(what[t], o1, o2, 2 * attn_q_numel(p) + 2 * attn_kv_numel(p) + attn_rows(p));
            free(o1);
            free(o2);
            free_problem(&a);
            free_problem(&c);
        }
    }
    printf("\nstage6: %s\n", failed ? "FAILED" : "all checks passed");
    return failed ? EXIT_CHECK_FAILED : 0;
}

/* ------------------------------------------------------------------------- */
/* One problem from the command line, in detail                               */
/* ------------------------------------------------------------------------- */

static int report(const char *what, double err, double tol) { return report_check(what, 52, err, tol); }

/* The naive reference keeps four seqlen_q x seqlen_k fp64 matrices (S, P,
 * dP, dS of one head; naive_require_size's limit, 8.6 GB). With random input
 * the flags give the shape, so a problem too long for it is refused from the
 * flags, before the inputs are drawn (2 GB of them at N = 2^20, d = 64). */
static void require_naive_fits_flags(const options *opt)
{
    if (!(opt->given & (OPT_N | OPT_SEQLEN_K))) return;
    double Sq = opt->N, Sk = (opt->given & OPT_SEQLEN_K) ? opt->seqlen_k : opt->N;
    double bytes = Sq * Sk * 4 * sizeof(double);
    if (bytes <= 8.6e9) return;
    char shape[64];
    if (opt->given & OPT_SEQLEN_K) snprintf(shape, sizeof shape, "--n %d --seqlen-k %d", opt->N, opt->seqlen_k);
    else snprintf(shape, sizeof shape, "--n %d", opt->N);
    fatal(EXIT_BAD_INPUT, "%s: naive attention needs four seqlen_q x seqlen_k matrices for the reference "
          "(%.4g GB; the limit is 8.6 GB, N <= 16384 when seqlen_k = N); give --check rows to check sampled "
          "rows in O(N) memory", shape, bytes / 1e9);
}

int masks_run_one(const options *opt)
{
    bool naive = !strcmp(opt->check, "naive");
    if (naive) require_naive_fits_flags(opt);
    attn_problem prob;
    load_problem(opt, &prob);
    const attn_params *p = &prob.params;
    if (naive) naive_require_size(p, "the reference (use --check rows for long sequences)");
    long M;
    flash_blocks b = flash_blocks_from_options(opt, p, &M);
    printf("stage6: %s\n", prob.source);
    printf("  B = %d, H = %d, H_kv = %d, seqlen_q = %d, seqlen_k = %d, d = %d, softmax_scale = %.6g\n"
           "  window = (%d, %d)%s; forward Br = %d, Bc = %d; backward Br = %d, Bc = %d; M = %ld\n"
           "  reference: %s\n\n",
           p->B, p->H, p->H_kv, p->seqlen_q, p->seqlen_k, p->d, p->softmax_scale,
           p->window_size_left, p->window_size_right,
           attn_is_causal(p) ? " (causal)" : attn_is_masked(p) ? "" : " (no mask)", b.fBr, b.fBc,
           b.bBr, b.bBc, M,
           naive ? "stage 1, every output (fp64)"
                 : "sampled rows, fp64 row by row (no seqlen_q x seqlen_k matrix anywhere)");
    double *out;
    run_result r = run_problem(&prob, b, M, naive, opt->seed, opt->out || opt->lse || opt->dq ||
                                                                   opt->dk || opt->dv ? &out : NULL);
    int failed = 0;
    if (!naive)
        printf("checks on %d sampled query rows and %d sampled key rows\n", r.rows_checked,
               r.cols_checked);
    else
        printf(p->B * p->H == 1 ? "checks against stage 1 (the one query head)\n"
                                 : "checks against stage 1 (all %d query heads)\n", p->B * p->H);
    failed += report("O: max|O - O_ref| / max|V|", r.e.O, FLASH_FWD_TOL);
    failed += report("L: max|L - L_ref| / max(1, max|L_ref|)", r.e.L, FLASH_FWD_TOL);
    failed += report("dQ: relative to its scale", r.e.dQ, r.btol);
    failed += report("dK: relative to its scale", r.e.dK, r.btol);
    failed += report("dV: relative to its scale", r.e.dV, r.btol);
    printf("    (a gradient's scale: the larger of max|ref| and the size of its terms, c max|K| for dQ,\n"
           "    c max|Q| for dK with c = softmax_scale max|dO| max|V|, and max|dO| for dV)\n");
    failed += report("central differences, 12-query slice of head 0", r.gradcheck, TOL_GRADCHECK);
    char what[96];
    snprintf(what, sizeof what, "empty rows (%zu) not holding O = 0, L = -inf, dQ = 0", r.empty_rows);
    failed += report(what, (double)r.empty_bad, 0);
    failed += report("NaN or inf in the outputs (L = -inf of empty rows allowed)", (double)r.nonfinite, 0);
    printf("  %-52s %10s\n", "SRAM high-water <= M", r.sram_ok ? "ok" : "FAIL");
    failed += !r.sram_ok;
    printf("\nslow-memory traffic (elements) and tiles\n");
    printf("  tiled forward  %15llu counted, %15llu formula  %s   %.3f s\n",
           (unsigned long long)r.io_f, (unsigned long long)r.io_f_formula,
           r.io_f == r.io_f_formula ? "equal" : "NOT EQUAL", r.t_f);
    printf("  tiled backward %15llu counted, %15llu formula  %s   %.3f s\n",
           (unsigned long long)r.io_b, (unsigned long long)r.io_b_formula,
           r.io_b == r.io_b_formula ? "equal" : "NOT EQUAL", r.t_b);
    uint64_t all = (uint64_t)p->B * p->H * ceil_div(p->seqlen_q, b.fBr) * ceil_div(p->seqlen_k, b.fBc);
    printf("  tiles visited  %15llu of %llu, formula %llu  %s\n", (unsigned long long)r.tiles_f,
           (unsigned long long)all, (unsigned long long)r.tiles_formula, r.tiles_ok ? "equal" : "NOT EQUAL");
    if (naive)
        printf("  naive (stage 1) counted == its formula: %s\n", r.naive_io_ok ? "yes" : "NO");
    failed += !r.io_ok + !r.tiles_ok + !r.naive_io_ok;

    if (opt->out || opt->lse || opt->dq || opt->dk || opt->dv) {
        size_t nq = attn_q_numel(p), nkv = attn_kv_numel(p);
        double *O = out, *dQ = O + nq, *dK = dQ + nq, *dV = dK + nkv, *L = dV + nkv;
        if (opt->out) save_q_like(opt->out, O, p);
        if (opt->lse) save_rows(opt->lse, L, p);
        if (opt->dq) save_q_like(opt->dq, dQ, p);
        if (opt->dk) save_kv_like(opt->dk, dK, p);
        if (opt->dv) save_kv_like(opt->dv, dV, p);
        free(out);
    }
    printf("\nstage6: %s\n", failed ? "FAILED" : "all checks passed");
    free_problem(&prob);
    return failed ? EXIT_CHECK_FAILED : 0;
}

/*
 * tests/cpu/test_ring.c -- property tests of the merge rule (core/merge.h) and of
 * the ring plan (src/cpu/ring.h) on the CPU, in fp64: what stage 7 runs across
 * GPUs, checked here first, where every number can be exact.
 *
 *   build/test_ring [--seed S] [--quick]
 *
 * Every run draws a fresh seed (printed; replay with --seed S). Output
 * follows tests/run.sh: one PASS/FAIL line per test.
 *
 * What is held against what:
 *   - the merge rule: an empty partial (L = -inf) gives the other back bit
 *     for bit, whatever its O holds; two empty give O = 0, L = -inf; the
 *     merge commutes bit for bit and associates within a few roundings;
 *     a row split in two and merged equals stage 2's two-pass softmax of the
 *     whole row; extreme L gaps give no NaN;
 *   - the plan: a shard pair's translated window hides exactly what the
 *     global mask hides (every pair, by mask_visible); over all ranks and
 *     steps every visible (query, key) pair is computed exactly once and no
 *     hidden one ever; every rank meets every shard once; under the causal
 *     mask every rank has the same visible pairs (the zigzag's balance);
 *   - the ring itself: the plan run through stage 3's tiled forward and
 *     backward, partials merged with the rule, equals the one-piece tiled
 *     result (G = 1..6, causal and not, fresh shapes).
 */
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "merge.h"
#include "ring.h"
#include "stage2_online_softmax.h"
#include "stage3_tiled.h"
#include "test_report.h"


/* ---- the merge rule ------------------------------------------------------ */

/* A random partial row: O entries N(0,1) with signed zeros and subnormals
 * mixed in (what a bitwise check must carry through), L in [-30, 30]. */
static void random_partial(rng_t *rng, double *O, double *L, size_t rows, int d)
{
    fill_normal(O, rows * d, 0, 1, rng);
    for (size_t i = 0; i < rows * d; i++) {
        int k = rng_int(rng, 0, 9);
        if (k == 0) O[i] = -0.0;
        else if (k == 1) O[i] = 0.0;
        else if (k == 2) O[i] = O[i] * 1e-310;
    }
    for (size_t r = 0; r < rows; r++) L[r] = 60 * rng_uniform(rng) - 30;
}

static void test_merge_empty(rng_t *rng)
{
    enum { R = 64, D = 24 };
    static double Oa[R * D], La[R], Ob[R * D], Lb[R], O[R * D], L[R], E[R * D], EL[R];
    random_partial(rng, Ob, Lb, R, D);
    /* The empty partial's O is never read: fill it with NaN to show it. */
    for (int i = 0; i < R * D; i++) E[i] = NAN;
    for (int r = 0; r < R; r++) EL[r] = -INFINITY;

    merge_rows(E, EL, Ob, Lb, R, D, O, L);
    bool left = !memcmp(O, Ob, sizeof O) && !memcmp(L, Lb, sizeof L);
    merge_rows(Ob, Lb, E, EL, R, D, O, L);
    bool right = !memcmp(O, Ob, sizeof O) && !memcmp(L, Lb, sizeof L);
    result(left && right, "merge with an empty partial (L = -inf) returns the other bit for bit",
           "%d rows of d = %d with signed zeros and subnormals; empty side's O all NaN", R, D);

    merge_rows(E, EL, E, EL, R, D, O, L);
    size_t bad = 0;
    for (int i = 0; i < R * D; i++) bad += !(O[i] == 0);
    for (int r = 0; r < R; r++) bad += L[r] != -INFINITY;
    result(bad == 0, "merge of two empty partials is O = 0, L = -inf, no NaN", "%zu wrong entries", bad);

    /* In place, as the GPU accumulator does: start empty, merge one partial. */
    memcpy(Oa, E, sizeof Oa);
    memcpy(La, EL, sizeof La);
    merge_into(Oa, La, Ob, Lb, R, D);
    result(!memcmp(Oa, Ob, sizeof Oa) && !memcmp(La, Lb, sizeof La),
           "merge_into an empty accumulator copies the partial bit for bit", "%d rows", R);
}

static void test_merge_algebra(rng_t *rng, int trials)
{
    enum { R = 32, D = 16 };
    static double A[R * D], LA[R], B[R * D], LB[R], C[R * D], LC[R];
    static double X[R * D], LX[R], Y[R * D], LY[R];
    size_t comm_bad = 0;
    double assoc_O = 0, assoc_L = 0;
    for (int t = 0; t < trials; t++) {
        random_partial(rng, A, LA, R, D);
        random_partial(rng, B, LB, R, D);
        random_partial(rng, C, LC, R, D);
        if (t % 3 == 0) LB[rng_int(rng, 0, R - 1)] = -INFINITY;   /* empty rows among them */
        merge_rows(A, LA, B, LB, R, D, X, LX);
        merge_rows(B, LB, A, LA, R, D, Y, LY);
        comm_bad += memcmp(X, Y, sizeof X) != 0 || memcmp(LX, LY, sizeof LX) != 0;
        /* (A + B) + C against A + (B + C) */
        merge_into(X, LX, C, LC, R, D);
        merge_rows(B, LB, C, LC, R, D, Y, LY);
        merge_rows(A, LA, Y, LY, R, D, Y, LY);
        /* Each side rounds the weights and the sums a few times; the O rows
         * are convex combinations of rows with entries up to max|A, B, C|. */
        double scale = fmax(max_abs_finite(A, R * D), fmax(max_abs_finite(B, R * D), max_abs_finite(C, R * D)));
        assoc_O = fmax(assoc_O, rel_err(X, Y, R * D, DBL_EPSILON * scale));
        assoc_L = fmax(assoc_L, rel_err(LX, LY, R, DBL_EPSILON * fmax(1, max_abs_finite(LX, R))));
    }
    result(comm_bad == 0, "merge commutes bit for bit", "%d trials of %d rows", trials, R);
    result(assoc_O <= 8 && assoc_L <= 4, "merge associates within rounding",
           "%d trials: O %.2f eps max|O_i|, L %.2f eps max(1, |L|) (<= 8, 4)", trials, assoc_O,
           assoc_L);
}

/* The rule is the chapter's: split a row of logits in two, take each part's
 * softmax-weighted sum and logsumexp (stage 2's two-pass reference), merge,
 * and the whole row's two-pass result comes out. */
static void test_merge_split_row(rng_t *rng, int trials)
{
    double worst_o = 0, worst_L = 0;
    for (int t = 0; t < trials; t++) {
        int N = rng_int(rng, 2, 300), d = rng_int(rng, 1, 16), cut = rng_int(rng, 1, N - 1);
        double spread = rng_int(rng, 0, 1) ? 5.0 : 50.0;
        double *x = xmalloc((size_t)N * (d + 1) + 3 * (size_t)d, sizeof(double), "row");
        double *V = x + N, *oa = V + (size_t)N * d, *ob = oa + d, *ow = ob + d, La, Lb, Lw;
        fill_normal(x, (size_t)N, 0, spread, rng);
        fill_normal(V, (size_t)N * d, 0, 1, rng);
        two_pass_softmax_weighted_sum(x, V, cut, d, oa, &La);
        two_pass_softmax_weighted_sum(x + cut, V + (size_t)cut * d, N - cut, d, ob, &Lb);
        two_pass_softmax_weighted_sum(x, V, N, d, ow, &Lw);
        merge_into(oa, &La, ob, &Lb, 1, d);
        /* Each two-pass result sums N rounded terms p_j V_j with sum p_j = 1:
         * an error up to about N eps max|V| each, in the worst case. */
        worst_o = fmax(worst_o, rel_err(oa, ow, (size_t)d,
                                        (N + 4) * DBL_EPSILON * max_abs_finite(V, (size_t)N * d)));
        worst_L = fmax(worst_L, fabs(La - Lw) / (DBL_EPSILON * fmax(1, fabs(Lw))));
        free(x);
    }
    result(worst_o <= 2 && worst_L <= 8, "a row split in two and merged equals the two-pass softmax",
           "%d rows, N <= 300, spread 5 and 50: O %.3f (N + 4) eps max|V| (<= 2), L %.2f eps max(1,|L|) (<= 8)",
           trials, worst_o, worst_L);
}

static void test_merge_extremes(void)
{
    const double Ls[][2] = {{0, -800}, {-800, 0}, {1e308, 1e308}, {-1e308, 1e308}, {1e308, -1e308},
                            {700, 700}, {-745, -745}, {3, 3}};
    double oa[2] = {1.5, -2}, ob[2] = {-4, 0.25}, o[2], L;
    int bad = 0;
    char what[128] = "";
    for (size_t i = 0; i < sizeof Ls / sizeof Ls[0]; i++) {
        merge_rows(oa, &Ls[i][0], ob, &Ls[i][1], 1, 2, o, &L);
        bool fin = isfinite(o[0]) && isfinite(o[1]) && !isnan(L);
        /* equal L: the average; one far below: the other exactly */
        bool val = true;
        if (Ls[i][0] == Ls[i][1]) val = o[0] == 0.5 * (oa[0] + ob[0]) && o[1] == 0.5 * (oa[1] + ob[1]);
        else if (Ls[i][0] - Ls[i][1] > 750) val = o[0] == oa[0] && o[1] == oa[1];
        else if (Ls[i][1] - Ls[i][0] > 750) val = o[0] == ob[0] && o[1] == ob[1];
        if (!fin || !val) {
            bad++;
            snprintf(what, sizeof what, "L = (%g, %g) gave O = (%g, %g), L = %g", Ls[i][0], Ls[i][1],
                     o[0], o[1], L);
        }
    }
    double nanL = NAN, one = 1.0;
    merge_rows(oa, &nanL, ob, &one, 1, 2, o, &L);
    if (!isnan(L)) {
        bad++;
        snprintf(what, sizeof what, "L_a = NaN gave L = %g (a NaN must propagate)", L);
    }
    result(bad == 0, "merge at extreme L gaps: no NaN, far partial drops out exactly, NaN L propagates",
           "%s", bad ? what : "8 pairs and a NaN");
}

/* ---- the plan ------------------------------------------------------------ */

static int random_window_side(rng_t *rng, int N)
{
    return rng_int(rng, 0, 2) == 0 ? -1 : rng_int(rng, 0, N);
}

/* ring_sub_problem against mask_visible, pair by pair, for random global
 * windows and random pieces (the key piece aligned to its length). */
static void test_sub_problem(rng_t *rng, int trials)
{
    int bad = 0, masked = 0, unrep = 0, skip = 0, full = 0;
    char what[200] = "";
    for (int t = 0; t < trials; t++) {
        int N = rng_int(rng, 1, 48);
        attn_params p = attn_params_make(1, 1, N, 4, 0.5);
        p.window_size_left = random_window_side(rng, N);
        p.window_size_right = random_window_side(rng, N);
        attn_mask m = attn_mask_of(&p);
        int klen = rng_int(rng, 1, N), kstart = klen * rng_int(rng, 0, N / klen - 1);
        int qlen = rng_int(rng, 1, N), qstart = rng_int(rng, 0, N - qlen);
        ring_piece q = {qstart, qlen}, k = {kstart, klen};
        attn_params sub;
        int kind = ring_sub_problem(&p, q, k, &sub);
        attn_mask sm = attn_mask_of(&sub);
        int seen = 0, wrong = 0;
        for (int i = 0; i < qlen; i++)
            for (int j = 0; j < klen; j++) {
                bool g = mask_visible(m, qstart + i, kstart + j);
                seen += g;
                if (kind == RING_MASKED || kind == RING_FULL) wrong += mask_visible(sm, i, j) != g;
            }
        if (kind == RING_SKIP) { skip++; wrong += seen != 0; }
        if (kind == RING_FULL) { full++; wrong += seen != qlen * klen || attn_is_masked(&sub); }
        if (kind == RING_MASKED) masked++;
        if (kind == RING_UNREPRESENTABLE) unrep++;
        if (kind != RING_UNREPRESENTABLE && (sub.seqlen_q != qlen || sub.seqlen_k != klen)) wrong++;
        if (wrong) {
            bad++;
            snprintf(what, sizeof what, "N %d window (%d,%d) q [%d,+%d) k [%d,+%d): kind %d, %d pairs wrong",
                     N, p.window_size_left, p.window_size_right, qstart, qlen, kstart, klen, kind, wrong);
        }
    }
    result(bad == 0, "a shard pair's translated window hides exactly what the global mask hides",
           "%s%d pairs: %d skipped, %d full, %d masked (checked pair by pair), %d not a window",
           bad ? what : "", trials, skip, full, masked, unrep);
}

/* Over all ranks and steps of a layout: every visible global pair computed
 * once, no hidden one ever; each rank meets each shard once; the visible
 * pairs of each rank (its work) for the causal mask are all equal. */
static void test_layout(rng_t *rng, int trials)
{
    int bad = 0, unbalanced = 0, layouts = 0;
    char what[200] = "";
    for (int t = 0; t < trials; t++) {
        int G = rng_int(rng, 1, 6);
        int kind = rng_int(rng, 0, 2);   /* 0 full, 1 causal, 2 a random window */
        int c = rng_int(rng, 1, 6), N = 2 * G * c;
        attn_params p = attn_params_make(1, 1, N, 4, 0.5);
        attn_params_causal(&p, kind == 1);
        if (kind == 2) {
            p.window_size_left = random_window_side(rng, N);
            p.window_size_right = random_window_side(rng, N);
        }
        ring_layout lay;
        char why[200];
        if (ring_layout_make(&p, G, &lay, why, sizeof why)) continue;   /* a window that is not one */
        layouts++;
        attn_mask m = attn_mask_of(&p);
        unsigned char *hits = xcalloc((size_t)N * N, 1, "hits");
        int64_t work0 = -1;
        int wrong = 0;
        for (int r = 0; r < G; r++) {
            int met = 0;
            int64_t work = 0;
            for (int s = 0; s < G; s++) {
                met |= 1 << ring_kv_rank(&lay, r, s);
                ring_call calls[RING_MAX_CALLS];
                int n = ring_calls(&lay, &p, r, s, calls);
                for (int i = 0; i < n; i++) {
                    ring_piece q = ring_piece_of(&lay, r, calls[i].q_piece);
                    ring_piece k = ring_piece_of(&lay, ring_kv_rank(&lay, r, s), calls[i].k_piece);
                    attn_mask sm = attn_mask_of(&calls[i].sub);
                    for (int a = 0; a < q.len; a++)
                        for (int b = 0; b < k.len; b++)
                            if (mask_visible(sm, a, b)) hits[(size_t)(q.start + a) * N + k.start + b]++;
                    work += ring_visible_pairs(&calls[i].sub);
                }
            }
            wrong += met != (1 << G) - 1;
            if (work0 < 0) work0 = work;
            if (kind == 1 && work != work0) unbalanced++;
        }
        for (int i = 0; i < N; i++)
            for (int j = 0; j < N; j++) wrong += hits[(size_t)i * N + j] != (mask_visible(m, i, j) ? 1 : 0);
        if (wrong) {
            bad++;
            snprintf(what, sizeof what, "G %d N %d window (%d,%d): %d wrong; ", G, N,
                     p.window_size_left, p.window_size_right, wrong);
        }
        free(hits);
    }
    result(bad == 0, "ring plan computes every visible pair once, no hidden pair, every shard meets every rank",
           "%s%d layouts, G = 1..6, full, causal and random windows", bad ? what : "", layouts);
    result(unbalanced == 0, "causal zigzag gives every rank the same work",
           "%d ranks with other visible-pair counts", unbalanced);
}

/* ---- the ring on the CPU, through stage 3 -------------------------------- */

typedef struct {
    int Br, Bc;
    sram_arena *sram;
} tiles;

/* One pass of stage 3 over every head of a sub-problem (any window, since
 * stage 3 takes attn_params); D is the backward's workspace. */
static void tiled_forward(const attn_params *s, const double *Q, const double *K, const double *V,
                          double *O, double *L, tiles tl)
{
    flash_blocks b = {tl.Br, tl.Bc, tl.Br, tl.Bc};
    flash_attention_all_heads(s, Q, K, V, NULL, b, O, L, NULL, NULL, NULL, tl.sram, NULL, NULL, NULL,
                              NULL, NULL, NULL);
}
static void tiled_backward(const attn_params *s, const double *Q, const double *K, const double *V,
                           const double *O, const double *L, const double *dO, double *dQ,
                           double *dK, double *dV, double *D, tiles tl)
{
    size_t qh = (size_t)s->seqlen_q * s->d, kh = (size_t)s->seqlen_k * s->d;
    for (int bh = 0; bh < s->B * s->H; bh++)
        flash_backward(s, Q + bh * qh, K + bh * kh, V + bh * kh, O + bh * qh, L + (size_t)bh * s->seqlen_q,
                       dO + bh * qh, tl.Br, tl.Bc, dQ + bh * qh, dK + bh * kh, dV + bh * kh, D, tl.sram,
                       NULL, NULL);
}

static void add(double *acc, const double *x, size_t n)
{
    for (size_t i = 0; i < n; i++) acc[i] += x[i];
}

/* The forward and the backward walk the plan in the same way, written out
 * in each deliberately: chapters/25-merge-rule.md shows this function as the
 * schedule. */
//> ring-cpu
/* The ring, rank by rank, on the CPU: the partials of each query piece merged
 * as the shards come by (forward); then dQ summed where it stays and dK, dV
 * summed into the accumulator of the shard they belong to (backward). The
 * whole (B, H, N, d) tensors in, the whole outputs out; H_kv = H. */
static void ring_cpu(const ring_layout *lay, const attn_params *p, const double *Q, const double *K,
                     const double *V, const double *dO, tiles tl, double *O, double *L, double *dQ,
                     double *dK, double *dV)
{
    int B = p->B, H = p->H, N = p->seqlen_q, d = p->d, np = lay->n_pieces;
    size_t pq = ring_q_piece_numel(p, lay), pr = ring_rows_piece_numel(p, lay);
    size_t total = 13 * pq + 5 * pr;
    double *buf = xmalloc(total, sizeof(double), "ring pieces");
    double *q = buf, *k = q + pq, *v = k + pq, *o = v + pq, *dout = o + pq, *po = dout + pq;
    double *dq = po + pq, *dk = dq + pq, *dv = dk + pq, *acc = dv + pq, *gq = acc + 2 * pq;
    double *l = gq + 2 * pq, *pl = l + pr, *D = pl + pr, *lacc = D + pr;
    poison(buf, total);
    memset(dK, 0, (size_t)B * H * N * d * sizeof(double));
    memset(dV, 0, (size_t)B * H * N * d * sizeof(double));
    for (int r = 0; r < lay->G; r++) {
        /* forward: one accumulator per query piece, empty to start */
        for (int a = 0; a < np; a++) {
            double *oa = acc + a * pq, *la = lacc + a * pr;
            for (size_t i = 0; i < pr; i++) la[i] = -INFINITY;
            memset(oa, 0, pq * sizeof(double));
            ring_piece qp = ring_piece_of(lay, r, a);
            ring_piece_get(q, Q, B, H, N, d, sizeof(double), qp);
            for (int t = 0; t < lay->G; t++) {
                int src = ring_kv_rank(lay, r, t);
                ring_call c[RING_MAX_CALLS];
                int n = ring_calls(lay, p, r, t, c);
                for (int i = 0; i < n; i++) {
                    if (c[i].q_piece != a) continue;
                    ring_piece kp = ring_piece_of(lay, src, c[i].k_piece);
                    ring_piece_get(k, K, B, H, N, d, sizeof(double), kp);
                    ring_piece_get(v, V, B, H, N, d, sizeof(double), kp);
                    tiled_forward(&c[i].sub, q, k, v, po, pl, tl);
                    merge_into(oa, la, po, pl, pr, d);
                }
            }
            ring_piece_put(O, oa, B, H, N, d, sizeof(double), qp);
            ring_piece_put(L, la, B, H, N, 1, sizeof(double), qp);
        }
    }
    /* Deliberate copy: the backward walks the same schedule as the forward
     * above, one loop per pass as stage 7 runs them, so that each pass can be
     * read against stage7_schedule.c on its own. */
    for (int r = 0; r < lay->G; r++) {
        /* backward, from the merged O and L */
        for (int a = 0; a < np; a++) {
            ring_piece qp = ring_piece_of(lay, r, a);
            double *ga = gq + a * pq;
            memset(ga, 0, pq * sizeof(double));
            ring_piece_get(q, Q, B, H, N, d, sizeof(double), qp);
            ring_piece_get(o, O, B, H, N, d, sizeof(double), qp);
            ring_piece_get(dout, dO, B, H, N, d, sizeof(double), qp);
            ring_piece_get(l, L, B, H, N, 1, sizeof(double), qp);
            for (int t = 0; t < lay->G; t++) {
                int src = ring_kv_rank(lay, r, t);
                ring_call c[RING_MAX_CALLS];
                int n = ring_calls(lay, p, r, t, c);
                for (int i = 0; i < n; i++) {
                    if (c[i].q_piece != a) continue;
                    ring_piece kp = ring_piece_of(lay, src, c[i].k_piece);
                    ring_piece_get(k, K, B, H, N, d, sizeof(double), kp);
                    ring_piece_get(v, V, B, H, N, d, sizeof(double), kp);
                    tiled_backward(&c[i].sub, q, k, v, o, l, dout, dq, dk, dv, D, tl);
                    add(ga, dq, pq);
                    /* dK, dV of the visiting shard: read, add, write back */
                    ring_piece_get(k, dK, B, H, N, d, sizeof(double), kp);
                    ring_piece_get(v, dV, B, H, N, d, sizeof(double), kp);
                    add(k, dk, pq);
                    add(v, dv, pq);
                    ring_piece_put(dK, k, B, H, N, d, sizeof(double), kp);
                    ring_piece_put(dV, v, B, H, N, d, sizeof(double), kp);
                }
            }
            ring_piece_put(dQ, ga, B, H, N, d, sizeof(double), qp);
        }
    }
    free(buf);
}
//< ring-cpu

/* A gradient's errors relative to its largest entry; one that is all zero
 * (N = 1: a softmax over one key has no gradient) in absolute terms. */
static double grad_scale(const double *ref, size_t n)
{
    double m = max_abs_finite(ref, n);
    return m > 0 ? m : 1.0;
}

static void test_ring_cpu(rng_t *rng, int trials)
{
    double wO = 0, wL = 0, wdQ = 0, wdK = 0, wdV = 0;
    int cases = 0, g1_bad = 0, nonfinite = 0;
    for (int t = 0; t < trials; t++) {
        int G = 1 + t % 6;
        bool causal = rng_int(rng, 0, 1);
        int c = rng_int(rng, 1, 24), N = (causal ? 2 * G : G) * c;
        if (G == 1 && causal) N = rng_int(rng, 1, 48);
        int B = rng_int(rng, 1, 2), H = rng_int(rng, 1, 2), d = rng_int(rng, 1, 24);
        attn_params p = attn_params_make(B, H, N, d, 1.0 / sqrt((double)d));
        attn_params_causal(&p, causal);
        ring_layout lay;
        char why[200];
        if (ring_layout_make(&p, G, &lay, why, sizeof why)) fatal(EXIT_CHECK_FAILED, "test_ring: %s", why);
        tiles tl = {rng_int(rng, 1, 16), rng_int(rng, 1, 16), NULL};
        sram_arena sram;
        sram_init(&sram, flash_backward_sram_elements(tl.Br, tl.Bc, d));
        tl.sram = &sram;
        size_t n = (size_t)B * H * N * d, rows = (size_t)B * H * N;
        double *in = xmalloc(4 * n, sizeof(double), "inputs");
        fill_normal(in, 4 * n, 0, 1, rng);
        const double *Q = in, *K = in + n, *V = in + 2 * n, *dO = in + 3 * n;
        double *out = xmalloc(10 * n + 3 * rows, sizeof(double), "outputs");
        poison(out, 10 * n + 3 * rows);
        double *O = out, *dQ = O + n, *dK = dQ + n, *dV = dK + n, *rO = dV + n, *rdQ = rO + n;
        double *rdK = rdQ + n, *rdV = rdK + n, *L = rdV + n, *rL = L + rows, *D = rL + rows;
        /* the one-piece result: stage 3 on the whole problem */
        tiled_forward(&p, Q, K, V, rO, rL, tl);
        tiled_backward(&p, Q, K, V, rO, rL, dO, rdQ, rdK, rdV, D, tl);
        ring_cpu(&lay, &p, Q, K, V, dO, tl, O, L, dQ, dK, dV);
        nonfinite += count_nonfinite(O, 4 * n, false) + count_nonfinite(L, rows, false) != 0;
        if (G == 1)
            g1_bad += memcmp(O, rO, n * sizeof(double)) || memcmp(L, rL, rows * sizeof(double)) ||
                      memcmp(dQ, rdQ, n * sizeof(double)) || memcmp(dK, rdK, n * sizeof(double)) ||
                      memcmp(dV, rdV, n * sizeof(double));
        /* O is a convex combination of V's rows: its rounding scales with max|V|. */
        wO = nanmax(wO, rel_err(O, rO, n, max_abs_finite(V, n)));
        wL = nanmax(wL, rel_err(L, rL, rows, fmax(1, max_abs_finite(rL, rows))));
        wdQ = nanmax(wdQ, rel_err(dQ, rdQ, n, grad_scale(rdQ, n)));
        wdK = nanmax(wdK, rel_err(dK, rdK, n, grad_scale(rdK, n)));
        wdV = nanmax(wdV, rel_err(dV, rdV, n, grad_scale(rdV, n)));
        cases++;
        sram_free(&sram);
        free(in);
        free(out);
    }
    result(wO <= 2e-15 && wL <= 1e-15 && nonfinite == 0,
           "ring forward (stage 3 per shard pair + merge) equals the one-piece tiled forward",
           "%d problems, G = 1..6, causal and not: O %.2e of max|V|, L %.2e of max(1,|L|) "
           "(<= 2e-15, 1e-15)", cases, wO, wL);
    result(wdQ <= 1e-13 && wdK <= 1e-13 && wdV <= 1e-13,
           "ring backward (dQ local, dK dV summed per shard) equals the one-piece tiled backward",
           "dQ %.2e, dK %.2e, dV %.2e of max|ref| (<= 1e-13)", wdQ, wdK, wdV);
    result(g1_bad == 0, "ring with G = 1 is the one-piece result bit for bit",
           "%d of the G = 1 problems differ", g1_bad);
}

int main(int argc, char **argv)
{
    bool quick = test_args(argc, argv, NULL, NULL);
    rng_t rng = test_rng;
    test_merge_empty(&rng);
    test_merge_algebra(&rng, quick ? 50 : 500);
    test_merge_split_row(&rng, quick ? 100 : 1000);
    test_merge_extremes();
    test_sub_problem(&rng, quick ? 2000 : 20000);
    test_layout(&rng, quick ? 100 : 600);
    test_ring_cpu(&rng, quick ? 24 : 120);
    printf("test_ring: %d passed, %d failed\n", n_pass, n_fail);
    return n_fail ? 1 : 0;
}

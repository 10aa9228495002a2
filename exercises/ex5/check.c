/*
 * ex5/check.c -- checker of exercise 5.
 *
 * (a) The learner's rebuilt_row_sums (rowsum.c of the marked folder, linked
 *     in) must give sum_j exp(S_ij - L_i) = 1 to rounding when L comes from
 *     the project's tiled forward (flash_forward), on random problems
 *     (causal and not, fresh seed) and on the real input of data/input/.
 *     With L shifted row by row by delta_i, each row's sum must be scaled
 *     by exp(-delta_i), whatever keys it sums over: a function that ignores
 *     L cannot pass, and one that sums over the wrong keys fails the row
 *     sums (rowsum_random, rowsum_real) with a hint about the keys, not
 *     rowsum_uses_L with one about L. The three parts are always marked
 *     (todo while the function writes nothing), so the count of parts does
 *     not change as the work goes on. The proof
 *     (written.md) is shown beside the model answer, not marked.
 * (b) Bytes saved by keeping L (fp32) instead of P (fp16) at N = 16384,
 *     d = 128, and the FLOPs the backward pays to recompute S = Q K^T.
 *
 * Usage: check [DIR] [--seed S]
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checklib.h"
#include "common.h"
#include "rowsum.h"
#include "stage3_tiled.h"

static const double SUM_TOL = 1e-12;     /* |row sum - 1|, fp64 */

typedef struct {
    double worst;          /* max |rowsum - 1| */
    double worst_shift;    /* max |shifted sum - exp(-delta) sum| / (exp(-delta) sum) */
    size_t unwritten;      /* entries still NaN after the call */
    size_t judged;         /* rows whose shifted sum says whether L is used */
    size_t rows;
    char where[320];       /* the case holding `worst` */
    char where_shift[320];
} sums;

/* L from the tiled forward, then the learner's sums for L and for L + delta. */
static void run_case(const double *Q, const double *K, const double *V, int N, int d,
                     bool causal, int Br, int Bc, rng_t *rng, const char *what, sums *acc)
{
    double scale = 1.0 / sqrt((double)d);
    double *O = xmalloc((size_t)N * d, sizeof(double), "O");
    double *L = xmalloc((size_t)N, sizeof(double), "L");
    double *Ls = xmalloc((size_t)N, sizeof(double), "shifted L");
    double *delta = xmalloc((size_t)N, sizeof(double), "delta");
    double *rs = xmalloc((size_t)N, sizeof(double), "row sums");
    double *rs0 = xmalloc((size_t)N, sizeof(double), "unshifted row sums");
    sram_arena sram;
    sram_init(&sram, flash_forward_sram_elements(Br, Bc, d));
    attn_params p = attn_params_make(1, 1, N, d, scale);
    attn_params_causal(&p, causal);   /* the window (-1, 0) */
    flash_forward(&p, Q, K, V, Br, Bc, O, L, &sram, NULL, NULL);
    sram_free(&sram);

    char where[160];
    snprintf(where, sizeof where, "%s N=%d d=%d %s", what, N, d, causal ? "causal" : "not causal");
    poison(rs, (size_t)N);
    check_case("rebuilt_row_sums, %s", where);
    rebuilt_row_sums(Q, K, L, N, d, scale, causal, rs);
    for (int i = 0; i < N; i++) {
        double e = fabs(rs[i] - 1.0);
        if (isnan(rs[i])) acc->unwritten++;
        if (!(e <= acc->worst)) {   /* NaN counts as worst */
            acc->worst = isnan(e) ? INFINITY : e;
            snprintf(acc->where, sizeof acc->where, "%s, row %d: sum %.17g", where, i, rs[i]);
        }
    }
    for (int i = 0; i < N; i++) {
        rs0[i] = rs[i];
        delta[i] = 2.0 * rng_uniform(rng) - 1.0;
        Ls[i] = L[i] + delta[i];
    }
    poison(rs, (size_t)N);
    check_case("rebuilt_row_sums with a shifted L, %s", where);
    rebuilt_row_sums(Q, K, Ls, N, d, scale, causal, rs);
    for (int i = 0; i < N; i++) {
        /* Against the function's own sum without the shift, so that a wrong
         * set of keys (the row sums' part) is not blamed on L here. A sum
         * of 0 or one not finite shows nothing about L: that row is left to
         * the row sums' part. */
        if (!(isfinite(rs0[i]) && rs0[i] > 0)) continue;
        acc->judged++;
        double want = exp(-delta[i]) * rs0[i];
        double e = fabs(rs[i] - want) / want;
        if (!(e <= acc->worst_shift)) {
            acc->worst_shift = isnan(e) ? INFINITY : e;
            snprintf(acc->where_shift, sizeof acc->where_shift,
                     "%s, row %d: with L_i raised by %.3f the sum is %.6g, expected %.6g "
                     "(exp(-%.3f) times the sum %.6g it gave for L_i itself)",
                     where, i, delta[i], rs[i], want, delta[i], rs0[i]);
        }
    }
    acc->rows += (size_t)N;
    free(O), free(L), free(Ls), free(delta), free(rs), free(rs0);
}

static void mark_sums(tally *t, const char *key, const sums *s)
{
    if (s->unwritten == s->rows) {
        mark_todo(t, key, "rowsum was left unwritten: the function still does nothing");
        return;
    }
    printf("         %s: max |row sum - 1| = %.3g over %zu rows\n", key, s->worst, s->rows);
    mark(t, key, s->worst <= SUM_TOL,
         "%s (more than %.0e from 1). Sum exp(S_ij - L_i) over exactly the keys "
         "row i sees, with S_ij = softmax_scale * q_i . k_j", s->where, SUM_TOL);
}

int main(int argc, char **argv)
{
    const char *dir = check_begin_with_options(argc, argv, 5, "storing L instead of P");
    set_prog_name(argv[0]);
    uint64_t seed = check_seed_flags(argc, argv, dir, "(a) random cases", NULL);
    rng_t rng;
    rng_seed(&rng, seed);
    tally t = {0};

    /* (a) random problems */
    sums rnd = {0}, real = {0};
    for (int k = 0; k < 40; k++) {
        int N = rng_int(&rng, 1, 200), d = rng_int(&rng, 1, 64);
        int Br = rng_int(&rng, 1, 48), Bc = rng_int(&rng, 1, 48);
        bool causal = k % 2;
        double sd = k % 3 == 0 ? 4.0 : 1.0;   /* some rows far from uniform */
        size_t nd = (size_t)N * d;
        double *Q = xmalloc(nd, sizeof(double), "Q"), *K = xmalloc(nd, sizeof(double), "K");
        double *V = xmalloc(nd, sizeof(double), "V");
        fill_normal(Q, nd, 0, sd, &rng);
        fill_normal(K, nd, 0, 1, &rng);
        fill_normal(V, nd, 0, 1, &rng);
        run_case(Q, K, V, N, d, causal, Br, Bc, &rng, "random", &rnd);
        free(Q), free(K), free(V);
    }
    /* (a) the real input, every head, causal and not, blocks from M = 16384 */
    options opt;
    char *fake_argv[] = {argv[0], NULL};
    parse_options(1, fake_argv, 0, "", &opt);
    attn_problem p;
    load_problem(&opt, &p);
    int N = p.params.seqlen_q, d = p.params.d, Br, Bc;
    if (derive_blocks(16384, d, false, &Br, &Bc) != 0) {
        printf("  internal error: derive_blocks refused d = %d\n", d);
        return 2;
    }
    size_t head = (size_t)N * d;
    for (int h = 0; h < p.params.B * p.params.H; h++)
        for (int causal = 0; causal < 2; causal++) {
            char what[64];
            snprintf(what, sizeof what, "real input head %d", h);
            run_case(p.Q + h * head, p.K + h * head, p.V + h * head, N, d, causal, Br, Bc,
                     &rng, what, &real);
        }
    free_problem(&p);

    mark_sums(&t, "rowsum_random", &rnd);
    mark_sums(&t, "rowsum_real", &real);
    if (rnd.unwritten == rnd.rows) {
        mark_todo(&t, "rowsum_uses_L", "rowsum was left unwritten: the function still does nothing");
    } else if (rnd.judged + real.judged == 0) {
        mark_todo(&t, "rowsum_uses_L", "no row sum is a positive number yet, so none can "
                  "show how it follows L: get the row sums right first");
    } else {
        double w = fmax(rnd.worst_shift, real.worst_shift);
        mark(&t, "rowsum_uses_L", w <= SUM_TOL,
             "%s (raising L_i by delta must scale the row's sum by exp(-delta): build "
             "each term from the scores and the L passed in)",
             rnd.worst_shift >= real.worst_shift ? rnd.where_shift : real.where_shift);
    }

    /* (b) */
    printf("  (b)\n");
    answers *a = answers_load(dir, "answers.txt");
    if (!a) {
        t.todo++;
    } else {
        const double n = 16384, dd = 128, FP16 = 2, FP32 = 4;
        double p_bytes = n * n * FP16, l_bytes = n * FP32;
        double flops = 2 * n * n * dd;   /* S = Q K^T: d multiply-adds per score */
        double x;
        if (take_answer(&t, a, "p_bytes", &x))
            mark_number(&t, a, "p_bytes", x, x == p_bytes, p_bytes, "the exact integer", "%s", x == n * n ? "that counts elements; give bytes"
                 : "P has one fp16 entry per (query, key) pair");
        if (take_answer(&t, a, "l_bytes", &x))
            mark_number(&t, a, "l_bytes", x, x == l_bytes, l_bytes, "the exact integer", "%s", x == n * FP16 ? "L is kept in fp32"
                 : "L has one fp32 entry per query row");
        if (take_answer(&t, a, "saved_bytes", &x)) {
            const char *hint = "what P would take minus what L takes";
            if (x == p_bytes) hint = "L is not free: subtract it";
            else if (x == p_bytes - n * FP16) hint = "L is kept in fp32";
            mark_number(&t, a, "saved_bytes", x, x == p_bytes - l_bytes, p_bytes - l_bytes,
                        "the exact integer", "%s", hint);
        }
        if (take_answer(&t, a, "recompute_flops", &x)) {
            const char *hint = "count the product Q K^T only: d multiplies and d adds per score";
            if (x == 2 * flops) hint = "the backward recomputes S only; P V is not redone";
            else if (x == flops / 2) hint = "a multiply and an add are two FLOPs";
            else if (x == flops + n * n || x == flops + 2 * n * n)
                hint = "leave the O(N^2) scaling, subtraction and exp out: the matrix product only";
            mark_number(&t, a, "recompute_flops", x, x == flops, flops, "the exact integer", "%s", hint);
        }
        answers_done(&t, a);
    }
    show_written(dir, "written.md", 5, &t);
    return check_end(&t, 5);
}

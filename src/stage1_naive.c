/*
 * stage1_naive.c -- Stage 1: naive attention, S and P materialized.
 *
 * What it adds: the reference. S = softmax_scale * Q K^T and P = softmax(S)
 * are whole N x N matrices in slow memory; O = P V. The backward pass reads
 * the stored P. Every later stage checks itself against these functions.
 *
 * Build and run:   make stage1 && ./stage1
 *   ./stage1                      real input (all-MiniLM-L6-v2, all 12 heads)
 *   ./stage1 --random --n 512 --d 64 --causal
 *   ./stage1 --window 24,0 --seqlen-k 100 --kv-heads 4   masks, keys cut, grouped heads
 *   ./stage1 --dtype fp32         the same algorithm with fp32 arithmetic
 *   ./stage1 --q q.npy --k k.npy --v v.npy --do do.npy --out o.npy --lse l.npy
 *
 * What it prints: for each check, the error and its tolerance; the slow-memory
 * elements counted while running beside the closed form of stage1_naive.h;
 * wall time. It exits 0 only when every check passes.
 *
 * Checks: the rows of P sum to 1 (0 for a row the mask empties); the
 * backward pass against central differences of sum(dO * O); counted IO ==
 * formula; on the real input, our O against the model's own attention
 * output; fp32 against fp64.
 *
 * Cost: Theta(Sq Sk d) time and Theta(Sq Sk) memory per head (S, P, dP, dS),
 * whatever the mask: the naive algorithm builds every score.
 */
#include "stage1_naive.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "npy.h"
#include "tolerances.h"

/* The fp64 and fp32 bodies: one text, two element types. */
#define T double
#define FN(name) name
#define EXP exp
#define LOG log
#include "stage1_naive_body.h"
#define T float
#define FN(name) name##_f32
#define EXP expf
#define LOG logf
#include "stage1_naive_body.h"

//> naive-io-formula
uint64_t naive_forward_io_formula(const attn_params *p)
{
    int64_t Sq = p->seqlen_q, Sk = p->seqlen_k, d = p->d, heads = (int64_t)p->B * p->H;
    return (uint64_t)(heads * (4 * Sq * Sk + 2 * Sq * d + 2 * Sk * d + Sq));
}

uint64_t naive_backward_io_formula(const attn_params *p)
{
    int64_t Sq = p->seqlen_q, Sk = p->seqlen_k, d = p->d, heads = (int64_t)p->B * p->H;
    int64_t G = p->H / p->H_kv, kv_heads = (int64_t)p->B * p->H_kv;
    int64_t sum_groups = G > 1 ? kv_heads * (2 * G * Sk * d + 2 * Sk * d) : 0;
    return (uint64_t)(heads * (7 * Sq * Sk + 6 * Sq * d + 4 * Sk * d) + sum_groups);
}
//< naive-io-formula

void naive_attention_all_heads(const attn_params *p, const double *Q, const double *K,
                               const double *V, const double *dO, double *O, double *L,
                               double *dQ, double *dK, double *dV, io_counter *io_f,
                               io_counter *io_b, double *t_f, double *t_b)
{
    double tf = 0, tb = 0;
    int G = p->H / p->H_kv;
    size_t SS = (size_t)p->seqlen_q * p->seqlen_k, kd = (size_t)p->seqlen_k * p->d;
    double *S = xmalloc(SS, sizeof(double), "S (seqlen_q x seqlen_k)");
    double *P = xmalloc(SS, sizeof(double), "P (seqlen_q x seqlen_k)");
    double *dP = dQ ? xmalloc(SS, sizeof(double), "dP (seqlen_q x seqlen_k)") : NULL;
    double *dS = dQ ? xmalloc(SS, sizeof(double), "dS (seqlen_q x seqlen_k)") : NULL;
    /* With grouped heads each query head's dK, dV go to slow memory first and
     * one more pass sums each group's into its key/value head. */
    double *dKh = dQ && G > 1 ? xmalloc((size_t)G * kd, sizeof(double), "dK per query head") : NULL;
    double *dVh = dQ && G > 1 ? xmalloc((size_t)G * kd, sizeof(double), "dV per query head") : NULL;
    for (int b = 0; b < p->B; b++)
        for (int h = 0; h < p->H; h++) {
            size_t qo = attn_q_offset(p, b, h), ko = attn_kv_offset(p, b, h);
            double t0 = now_seconds();
            naive_forward(p, Q + qo, K + ko, V + ko, S, P, O + qo, L + attn_row_offset(p, b, h), io_f);
            double t1 = now_seconds();
            if (dQ) {
                int g = h % G;
                naive_backward(p, Q + qo, K + ko, V + ko, O + qo, P, dO + qo, dP, dS, dQ + qo,
                               G > 1 ? dKh + g * kd : dK + ko, G > 1 ? dVh + g * kd : dV + ko,
                               io_b);
                if (G > 1 && g == G - 1) {   /* the group is complete: sum it */
                    double *acc = xmalloc(kd, sizeof(double), "group sum");
                    double *part = xmalloc(kd, sizeof(double), "one head's part");
                    for (int t = 0; t < 2; t++) {
                        const double *src = t ? dVh : dKh;
                        for (size_t x = 0; x < kd; x++) acc[x] = 0;
                        for (int k = 0; k < G; k++) {
                            hbm_load(part, src + k * kd, 1, (int)kd, (int)kd, io_b, t ? T_dV : T_dK);
                            for (size_t x = 0; x < kd; x++) acc[x] += part[x];
                        }
                        hbm_store((t ? dV : dK) + ko, acc, 1, (int)kd, (int)kd, io_b, t ? T_dV : T_dK);
                    }
                    free(acc);
                    free(part);
                }
            }
            tf += t1 - t0;
            tb += now_seconds() - t1;
        }
    if (t_f) *t_f = tf;
    if (t_b) *t_b = tb;
    free(S);
    free(P);
    free(dP);
    free(dS);
    free(dKh);
    free(dVh);
}

void naive_require_size(const attn_params *p, const char *origin)
{
    double bytes = (double)p->seqlen_q * p->seqlen_k * 4 * sizeof(double);
    if (bytes <= 8.6e9) return;
    if (p->seqlen_q == p->seqlen_k)
        fatal(EXIT_BAD_INPUT, "%s: naive attention needs four N x N matrices (%.1f GB); "
              "N must be <= 16384", origin, bytes / 1e9);
    fatal(EXIT_BAD_INPUT, "%s: naive attention needs four seqlen_q x seqlen_k matrices (%d x %d, "
          "%.1f GB); at most 8.6 GB", origin, p->seqlen_q, p->seqlen_k, bytes / 1e9);
}

void naive_load_problem(const options *opt, attn_problem *prob)
{
    load_problem(opt, prob);
    char origin[64];
    snprintf(origin, sizeof origin, "the input's N = %d", prob->params.seqlen_q);
    naive_require_size(&prob->params, origin);
}

void naive_require_size_flags(const options *opt)
{
    if (!(opt->given & OPT_N)) return;
    attn_params want = attn_params_make(1, 1, opt->N, 1, 1.0);
    if (opt->given & OPT_SEQLEN_K) want.seqlen_k = opt->seqlen_k;
    char origin[64];
    snprintf(origin, sizeof origin, "--n %d", opt->N);
    naive_require_size(&want, origin);
}

void naive_require_finite_scores(const double *L, const attn_params *p)
{
    size_t rows = attn_rows(p), N = (size_t)p->seqlen_q;
    for (size_t i = 0; i < rows; i++)
        if (isnan(L[i]) || L[i] == INFINITY)
            fatal(EXIT_BAD_INPUT, "the scores softmax_scale * Q K^T overflow fp64 (head %zu, row "
                  "%zu): inputs this large have no finite softmax in double precision",
                  i / N, i % N);
}

//> gradcheck
double gradcheck_central(const attn_params *p, const double *Q, const double *K, const double *V,
                         const double *dO, const double *dQ, const double *dK, const double *dV,
                         double eps)
{
    /* f(Q, K, V) = sum(dO * O) has gradient exactly (dQ, dK, dV), so each
     * entry's central difference (f(x+eps) - f(x-eps)) / 2 eps, whose error
     * is O(eps^2) truncation plus O(ulp * |f| / eps) rounding, must agree. */
    size_t nq = attn_q_numel(p), nkv = attn_kv_numel(p);
    double *X[3] = {xmalloc(nq, sizeof(double), "gradcheck Q"),
                    xmalloc(nkv, sizeof(double), "gradcheck K"),
                    xmalloc(nkv, sizeof(double), "gradcheck V")};
    double *O = xmalloc(nq, sizeof(double), "gradcheck O");
    double *L = xmalloc(attn_rows(p), sizeof(double), "gradcheck L");
    memcpy(X[0], Q, nq * sizeof(double));
    memcpy(X[1], K, nkv * sizeof(double));
    memcpy(X[2], V, nkv * sizeof(double));
    const double *analytic[3] = {dQ, dK, dV};
    size_t sizes[3] = {nq, nkv, nkv};
    double max_diff = 0, max_grad = 0;
    for (int t = 0; t < 3; t++)
        for (size_t x = 0; x < sizes[t]; x++) {
            double keep = X[t][x], f[2];
            for (int side = 0; side < 2; side++) {
                X[t][x] = keep + (side ? -eps : eps);
                naive_attention_all_heads(p, X[0], X[1], X[2], NULL, O, L, NULL, NULL, NULL, NULL,
                                          NULL, NULL, NULL);
                f[side] = 0;
                for (size_t y = 0; y < nq; y++) f[side] += dO[y] * O[y];
            }
            X[t][x] = keep;
            double numeric = (f[0] - f[1]) / (2 * eps);
            max_diff = nanmax(max_diff, fabs(numeric - analytic[t][x]));
            max_grad = nanmax(max_grad, fabs(analytic[t][x]));
        }
    for (int t = 0; t < 3; t++) free(X[t]);
    free(O);
    free(L);
    return max_diff / fmax(max_grad, DBL_MIN);
}
//< gradcheck

/* ------------------------------------------------------------------------- */
/* The demonstration program                                                  */
/* ------------------------------------------------------------------------- */
#ifndef STAGE_NO_MAIN

static const char USAGE[] =
    "stage1: naive attention with S and P materialized (the fp64 reference)\n"
    "usage: ./stage1 [options]\n"
    "With no options: the real input (all-MiniLM-L6-v2 Q, K, V, dO; every head),\n"
    "forward and backward, checked; exit 0 only if every check passes.";

static int report(const char *what, double err, double tol) { return report_check(what, 44, err, tol); }

int main(int argc, char **argv)
{
    options opt;
    parse_options(argc, argv,
                  OPT_N | OPT_D | OPT_BATCH | OPT_HEADS | OPT_RANDOM | OPT_SEED | OPT_MASKS |
                      OPT_SCALE | OPT_INPUTS | OPT_OUTPUTS | OPT_DTYPE | OPT_FP64 | OPT_FP32,
                  USAGE, &opt);
    bool fp32 = !strcmp(opt.dtype, "fp32");   /* the parser let only fp64 and fp32 through */
    naive_require_size_flags(&opt);
    attn_problem prob;
    naive_load_problem(&opt, &prob);
    const attn_params *p = &prob.params;
    int Sq = p->seqlen_q, Sk = p->seqlen_k, d = p->d, G = p->H / p->H_kv;
    size_t nq = attn_q_numel(p), nkv = attn_kv_numel(p), rows = attn_rows(p);
    size_t SS = (size_t)Sq * Sk, qd = (size_t)Sq * d, kd = (size_t)Sk * d;

    printf("stage1: naive attention, %s\n", prob.source);
    printf("  B = %d, H = %d, H_kv = %d, seqlen_q = %d, seqlen_k = %d, d = %d, softmax_scale = %.6g,\n"
           "  window = (%d, %d)%s, dtype = %s\n\n", p->B, p->H, p->H_kv, Sq, Sk, d,
           p->softmax_scale, p->window_size_left, p->window_size_right,
           attn_is_causal(p) ? " (causal)" : attn_is_masked(p) ? "" : " (no mask)", opt.dtype);

    /* fp64: forward and backward over every head, timed and counted. */
    double *O = xmalloc(nq, sizeof(double), "O"), *L = xmalloc(rows, sizeof(double), "L");
    double *dQ = xmalloc(nq, sizeof(double), "dQ"), *dK = xmalloc(nkv, sizeof(double), "dK");
    double *dV = xmalloc(nkv, sizeof(double), "dV");
    poison(O, nq); poison(L, rows); poison(dQ, nq); poison(dK, nkv); poison(dV, nkv);
    io_counter io_f, io_b;
    io_reset(&io_f);
    io_reset(&io_b);
    double t_fwd = 0, t_bwd = 0;
    naive_attention_all_heads(p, prob.Q, prob.K, prob.V, prob.dO, O, L, dQ, dK, dV, &io_f, &io_b,
                              &t_fwd, &t_bwd);
    naive_require_finite_scores(L, p);

    /* The rows of P sum to 1, or to 0 for a row that sees no key: checked on
     * head 0's P, rebuilt by one more forward pass. */
    double row_sum_err = 0;
    size_t empty_rows = 0;
    {
        double *S = xmalloc(SS, sizeof(double), "S"), *P = xmalloc(SS, sizeof(double), "P");
        double *o = xmalloc(qd, sizeof(double), "O"), *l = xmalloc((size_t)Sq, sizeof(double), "L");
        naive_forward(p, prob.Q, prob.K, prob.V, S, P, o, l, NULL);
        for (int i = 0; i < Sq; i++) {
            double sum = 0;
            for (int j = 0; j < Sk; j++) sum += P[(size_t)i * Sk + j];
            bool empty = l[i] == -INFINITY;
            empty_rows += empty;
            row_sum_err = nanmax(row_sum_err, fabs(sum - (empty ? 0.0 : 1.0)));
        }
        free(S); free(P); free(o); free(l);
    }

    int failed = 0;
    printf("checks (fp64)\n");
    char what[96];
    snprintf(what, sizeof what, "rows of P sum to 1 (head 0; %zu empty rows: 0)", empty_rows);
    failed += report(what, row_sum_err, TOL_ROWSUM);
    failed += report("outputs fully written: NaN or +-inf (L = -inf of an empty row allowed)",
                     (double)(count_nonfinite(O, nq, false) + count_nonfinite(L, rows, true) +
                              count_nonfinite(dQ, nq, false) + count_nonfinite(dK, nkv, false) +
                              count_nonfinite(dV, nkv, false)), 0);

    /* Gradient check by central differences on a small slice of head 0: the
     * first queries and keys form a problem of their own. */
    {
        attn_problem g = problem_slice(&prob, 12, 8);
        const attn_params *gp = &g.params;
        size_t gq = attn_q_numel(gp), gk = attn_kv_numel(gp);
        double *buf = xmalloc(2 * gq + 2 * gk + attn_rows(gp), sizeof(double), "gradcheck buffers");
        double *o = buf, *gdq = o + gq, *gdk = gdq + gq, *gdv = gdk + gk, *l = gdv + gk;
        naive_attention_all_heads(gp, g.Q, g.K, g.V, g.dO, o, l, gdq, gdk, gdv, NULL, NULL, NULL,
                                  NULL);
        snprintf(what, sizeof what, "backward vs central differences (head 0, %d queries, %d keys, d = %d)",
                 gp->seqlen_q, gp->seqlen_k, gp->d);
        failed += report(what, gradcheck_central(gp, g.Q, g.K, g.V, g.dO, gdq, gdk, gdv, 1e-5), TOL_GRADCHECK);
        free(buf);
        free_problem(&g);
    }

    /* The real input carries the model's own attention output: our fp64
     * attention must reproduce it to within the model's fp32 rounding. */
    if (!(opt.given & (OPT_INPUTS | OPT_N | OPT_D | OPT_BATCH | OPT_HEADS | OPT_RANDOM | OPT_MASKS)) &&
        !(opt.given & OPT_SCALE)) {
        npy_array om;
        char err[256], path[512];
        snprintf(path, sizeof path, "%s/o_model.npy", DEFAULT_INPUT_DIR);
        if (npy_read(path, &om, err, sizeof err) == 0 && om.numel == nq) {
            err_stats e = compare("O vs model", O, om.data, nq, INFINITY, 0, 0);
            failed += report("O vs the model's own fp32 output (rel. norm)", e.rel_norm, TOL_MODEL_OUTPUT);
            npy_free(&om);
        } else if (om.data == NULL) {
            printf("  (no %s: model output check skipped)\n", path);
        }
    }

    /* fp32 arithmetic, compared with fp64. */
    double *O32 = NULL, *dQ32 = NULL, *dK32 = NULL, *dV32 = NULL, *L32 = NULL;
    if (fp32) {
        if (G > 1) fatal(EXIT_BAD_INPUT, "--dtype fp32 runs H_kv = H only");
        O32 = xmalloc(nq, sizeof(double), "O32"); L32 = xmalloc(rows, sizeof(double), "L32");
        dQ32 = xmalloc(nq, sizeof(double), "dQ32"); dK32 = xmalloc(nkv, sizeof(double), "dK32");
        dV32 = xmalloc(nkv, sizeof(double), "dV32");
        float *buf = xmalloc(4 * SS + 5 * qd + 4 * kd + (size_t)Sq, sizeof(float), "fp32 buffers");
        float *fS = buf, *fP = fS + SS, *fdP = fP + SS, *fdS = fdP + SS, *fO = fdS + SS;
        float *fdQ = fO + qd, *fq = fdQ + qd, *fg = fq + qd, *fdK = fg + qd, *fdV = fdK + kd;
        float *fk = fdV + kd, *fv = fk + kd, *fL = fv + kd;
        for (int bh = 0; bh < p->B * p->H; bh++) {
            size_t qo = (size_t)bh * qd, ko = (size_t)bh * kd, lo = (size_t)bh * Sq;
            for (size_t x = 0; x < qd; x++) { fq[x] = (float)prob.Q[qo + x]; fg[x] = (float)prob.dO[qo + x]; }
            for (size_t x = 0; x < kd; x++) { fk[x] = (float)prob.K[ko + x]; fv[x] = (float)prob.V[ko + x]; }
            naive_forward_f32(p, fq, fk, fv, fS, fP, fO, fL, NULL);
            naive_backward_f32(p, fq, fk, fv, fO, fP, fg, fdP, fdS, fdQ, fdK, fdV, NULL);
            for (size_t x = 0; x < qd; x++) { O32[qo + x] = fO[x]; dQ32[qo + x] = fdQ[x]; }
            for (size_t x = 0; x < kd; x++) { dK32[ko + x] = fdK[x]; dV32[ko + x] = fdV[x]; }
            for (int i = 0; i < Sq; i++) L32[lo + (size_t)i] = fL[i];
        }
        free(buf);
        printf("checks (fp32 arithmetic against fp64, relative norm)\n");
        failed += report("O", compare("O", O32, O, nq, INFINITY, 0, 0).rel_norm, TOL_FP32_OUT);
        failed += report("dQ", compare("dQ", dQ32, dQ, nq, INFINITY, 0, 0).rel_norm, TOL_FP32_GRAD);
        failed += report("dK", compare("dK", dK32, dK, nkv, INFINITY, 0, 0).rel_norm, TOL_FP32_GRAD);
        failed += report("dV", compare("dV", dV32, dV, nkv, INFINITY, 0, 0).rel_norm, TOL_FP32_OUT);
    }

    uint64_t f_formula = naive_forward_io_formula(p), b_formula = naive_backward_io_formula(p);
    printf("\nslow-memory traffic of the fp64 run (elements; bytes at 8 B each), counted pass by pass\n");
    printf("  %-9s %16s %16s %14s %10s\n", "pass", "counted", "formula", "bytes", "time [s]");
    printf("  %-9s %16llu %16llu %14.4g %10.4f\n", "forward", (unsigned long long)io_total(&io_f),
           (unsigned long long)f_formula, 8.0 * (double)io_total(&io_f), t_fwd);
    printf("  %-9s %16llu %16llu %14.4g %10.4f\n", "backward", (unsigned long long)io_total(&io_b),
           (unsigned long long)b_formula, 8.0 * (double)io_total(&io_b), t_bwd);
    printf("  formula per query head: forward 4 Sq Sk + 2 Sq d + 2 Sk d + Sq, backward 7 Sq Sk + "
           "6 Sq d + 4 Sk d%s\n", G > 1 ? ", plus the sum over each group's dK, dV" : "");
    io_print(&io_f, "  forward:  ");
    io_print(&io_b, "  backward: ");
    failed += io_total(&io_f) != f_formula;
    failed += io_total(&io_b) != b_formula;

    if (opt.out) save_q_like(opt.out, fp32 ? O32 : O, p);
    if (opt.lse) save_rows(opt.lse, fp32 ? L32 : L, p);
    if (opt.dq) save_q_like(opt.dq, fp32 ? dQ32 : dQ, p);
    if (opt.dk) save_kv_like(opt.dk, fp32 ? dK32 : dK, p);
    if (opt.dv) save_kv_like(opt.dv, fp32 ? dV32 : dV, p);

    printf("\nstage1: %s\n", failed ? "FAILED" : "all checks passed");
    free(O); free(L); free(dQ); free(dK); free(dV);
    free(O32); free(L32); free(dQ32); free(dK32); free(dV32);
    free_problem(&prob);
    return outputs_finish(failed ? EXIT_CHECK_FAILED : 0);
}
#endif /* STAGE_NO_MAIN */

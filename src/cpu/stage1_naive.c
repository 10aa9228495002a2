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
    //> gradcheck-loop
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
    //< gradcheck-loop
}
//< gradcheck

/* ------------------------------------------------------------------------- */
/* The demonstration program                                                  */
/* ------------------------------------------------------------------------- */

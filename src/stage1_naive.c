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
 *   ./stage1 --dtype fp32         the same algorithm with fp32 arithmetic
 *   ./stage1 --q q.npy --k k.npy --v v.npy --do do.npy --out o.npy --lse l.npy
 *
 * What it prints: for each check, the error and its tolerance; the slow-memory
 * elements counted while running beside the closed form of stage1_naive.h;
 * wall time. It exits 0 only when every check passes.
 *
 * Checks: the rows of P sum to 1; the backward pass against central
 * differences of sum(dO * O); counted IO == formula; on the real input, our
 * O against the model's own attention output; fp32 against fp64.
 *
 * Cost: Theta(N^2 d) time and Theta(N^2) memory per head (S, P, dP, dS).
 */
#include "stage1_naive.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "npy.h"

/* The fp64 and fp32 bodies: one text, two element types. */
#define T double
#define FN(name) name
#define EXP exp
#define LOG log
#include "stage1_naive_body.h"
#undef T
#undef FN
#undef EXP
#undef LOG
#define T float
#define FN(name) name##_f32
#define EXP expf
#define LOG logf
#include "stage1_naive_body.h"
#undef T
#undef FN
#undef EXP
#undef LOG

//> naive-io-formula
uint64_t naive_forward_io_formula(int64_t N, int64_t d)
{
    return (uint64_t)(4 * N * N + 4 * N * d + N);
}

uint64_t naive_backward_io_formula(int64_t N, int64_t d)
{
    return (uint64_t)(7 * N * N + 10 * N * d);
}
//< naive-io-formula

void naive_attention_all_heads(const double *Q, const double *K, const double *V,
                               const double *dO, attn_shape s, double softmax_scale,
                               bool causal, double *O, double *L,
                               double *dQ, double *dK, double *dV,
                               io_counter *io_f, io_counter *io_b, double *t_f, double *t_b)
{
    double tf = 0, tb = 0;
    size_t NN = (size_t)s.N * s.N, nd = (size_t)s.N * s.d;
    double *S = xmalloc(NN, sizeof(double), "S (N x N)");
    double *P = xmalloc(NN, sizeof(double), "P (N x N)");
    double *dP = dQ ? xmalloc(NN, sizeof(double), "dP (N x N)") : NULL;
    double *dS = dQ ? xmalloc(NN, sizeof(double), "dS (N x N)") : NULL;
    for (int bh = 0; bh < s.B * s.H; bh++) {
        size_t off = (size_t)bh * nd;
        double t0 = now_seconds();
        naive_forward(Q + off, K + off, V + off, s.N, s.d, softmax_scale, causal, S, P,
                      O + off, L + (size_t)bh * s.N, io_f);
        double t1 = now_seconds();
        if (dQ)
            naive_backward(Q + off, K + off, V + off, O + off, P, dO + off, s.N, s.d,
                           softmax_scale, dP, dS, dQ + off, dK + off, dV + off, io_b);
        tf += t1 - t0;
        tb += now_seconds() - t1;
    }
    if (t_f) *t_f = tf;
    if (t_b) *t_b = tb;
    free(S);
    free(P);
    free(dP);
    free(dS);
}

void naive_require_size(int N, const char *origin)
{
    if ((double)N * N * 4 * sizeof(double) > 8.6e9)
        fatal(EXIT_BAD_INPUT, "%s: naive attention needs four N x N matrices (%.1f GB); "
              "N must be <= 16384", origin, (double)N * N * 32 / 1e9);
}

void naive_require_finite_scores(const double *L, size_t rows, int N)
{
    for (size_t i = 0; i < rows; i++)
        if (isnan(L[i]) || L[i] == INFINITY)
            fatal(EXIT_BAD_INPUT, "the scores softmax_scale * Q K^T overflow fp64 (head %zu, row "
                  "%zu): inputs this large have no finite softmax in double precision",
                  i / (size_t)N, i % (size_t)N);
}

//> gradcheck
double gradcheck_central(const double *Q, const double *K, const double *V,
                         const double *dO, int N, int d, double softmax_scale, bool causal,
                         const double *dQ, const double *dK, const double *dV, double eps)
{
    /* f(Q, K, V) = sum(dO * O) has gradient exactly (dQ, dK, dV), so each
     * entry's central difference (f(x+eps) - f(x-eps)) / 2 eps, whose error
     * is O(eps^2) truncation plus O(ulp * |f| / eps) rounding, must agree. */
    size_t nd = (size_t)N * d, NN = (size_t)N * N;
    double *X = xmalloc(3 * nd, sizeof(double), "gradcheck inputs");
    double *S = xmalloc(NN, sizeof(double), "gradcheck S");
    double *P = xmalloc(NN, sizeof(double), "gradcheck P");
    double *O = xmalloc(nd, sizeof(double), "gradcheck O");
    double *L = xmalloc((size_t)N, sizeof(double), "gradcheck L");
    memcpy(X, Q, nd * sizeof(double));
    memcpy(X + nd, K, nd * sizeof(double));
    memcpy(X + 2 * nd, V, nd * sizeof(double));
    const double *analytic[3] = {dQ, dK, dV};
    double max_diff = 0, max_grad = 0;
    for (int t = 0; t < 3; t++)
        for (size_t x = 0; x < nd; x++) {
            double keep = X[t * nd + x], f[2];
            for (int side = 0; side < 2; side++) {
                X[t * nd + x] = keep + (side ? -eps : eps);
                naive_forward(X, X + nd, X + 2 * nd, N, d, softmax_scale, causal, S, P, O, L,
                              NULL);
                f[side] = 0;
                for (size_t y = 0; y < nd; y++) f[side] += dO[y] * O[y];
            }
            X[t * nd + x] = keep;
            double numeric = (f[0] - f[1]) / (2 * eps);
            max_diff = nanmax(max_diff, fabs(numeric - analytic[t][x]));
            max_grad = nanmax(max_grad, fabs(analytic[t][x]));
        }
    free(X);
    free(S);
    free(P);
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

static int report(const char *what, double err, double tol)
{
    bool ok = err <= tol && !isnan(err);
    printf("  %-44s %10.3e   <= %.0e   %s\n", what, err, tol, ok ? "ok" : "FAIL");
    return ok ? 0 : 1;
}

static float *to_f32(const double *x, size_t n)
{
    float *y = xmalloc(n, sizeof(float), "fp32 copy");
    for (size_t i = 0; i < n; i++) y[i] = (float)x[i];
    return y;
}

int main(int argc, char **argv)
{
    options opt;
    parse_options(argc, argv,
                  OPT_N | OPT_D | OPT_BATCH | OPT_HEADS | OPT_RANDOM | OPT_SEED | OPT_CAUSAL |
                      OPT_SCALE | OPT_INPUTS | OPT_OUTPUTS | OPT_DTYPE | OPT_FP64 | OPT_FP32,
                  USAGE, &opt);
    bool fp32 = !strcmp(opt.dtype, "fp32");   /* the parser let only fp64 and fp32 through */
    char origin[64];
    snprintf(origin, sizeof origin, "--n %d", opt.N);
    if (opt.given & OPT_N) naive_require_size(opt.N, origin);

    attn_problem p;
    load_problem(&opt, &p);
    attn_shape s = p.shape;
    snprintf(origin, sizeof origin, "the input's N = %d", s.N);
    naive_require_size(s.N, origin);
    double scale = effective_scale(&opt, s.d);
    size_t n = shape_numel(s), rows = shape_rows(s), NN = (size_t)s.N * s.N, nd = (size_t)s.N * s.d;

    printf("stage1: naive attention, %s\n", p.source);
    printf("  shape (B, H, N, d) = (%d, %d, %d, %d), softmax_scale = %.6g, causal = %s, dtype = %s\n\n",
           s.B, s.H, s.N, s.d, scale, opt.causal ? "yes" : "no", opt.dtype);

    /* fp64: forward and backward over every head, timed and counted. */
    double *O = xmalloc(n, sizeof(double), "O"), *L = xmalloc(rows, sizeof(double), "L");
    double *dQ = xmalloc(n, sizeof(double), "dQ"), *dK = xmalloc(n, sizeof(double), "dK");
    double *dV = xmalloc(n, sizeof(double), "dV");
    double *S = xmalloc(NN, sizeof(double), "S"), *P = xmalloc(NN, sizeof(double), "P");
    double *dP = xmalloc(NN, sizeof(double), "dP"), *dS = xmalloc(NN, sizeof(double), "dS");
    poison(O, n); poison(L, rows); poison(dQ, n); poison(dK, n); poison(dV, n);
    io_counter io_f, io_b;
    io_reset(&io_f);
    io_reset(&io_b);
    double t_fwd = 0, t_bwd = 0, row_sum_err = 0;
    for (int bh = 0; bh < s.B * s.H; bh++) {
        size_t off = (size_t)bh * nd;
        double t0 = now_seconds();
        naive_forward(p.Q + off, p.K + off, p.V + off, s.N, s.d, scale, opt.causal, S, P,
                      O + off, L + (size_t)bh * s.N, &io_f);
        double t1 = now_seconds();
        naive_backward(p.Q + off, p.K + off, p.V + off, O + off, P, p.dO + off, s.N, s.d,
                       scale, dP, dS, dQ + off, dK + off, dV + off, &io_b);
        t_bwd += now_seconds() - t1;
        t_fwd += t1 - t0;
        for (int i = 0; i < s.N; i++) {
            double sum = 0;
            for (int j = 0; j < s.N; j++) sum += P[(size_t)i * s.N + j];
            row_sum_err = nanmax(row_sum_err, fabs(sum - 1.0));
        }
    }
    free(S); free(P); free(dP); free(dS);
    naive_require_finite_scores(L, rows, s.N);

    int failed = 0;
    printf("checks (fp64)\n");
    failed += report("rows of P sum to 1: max |sum - 1|", row_sum_err, 1e-14);
    failed += report("outputs fully written: non-finite entries",
                     (double)(count_nonfinite(O, n, false) + count_nonfinite(L, rows, false) +
                              count_nonfinite(dQ, n, false) + count_nonfinite(dK, n, false) +
                              count_nonfinite(dV, n, false)), 0);

    /* Gradient check by central differences on a small slice of head 0: the
     * first n_gc queries and keys form a problem of their own. */
    {
        attn_problem g = problem_slice(&p, 12, 8);
        int ng = g.shape.N, dg = g.shape.d;
        size_t m = (size_t)ng * dg, nn = (size_t)ng * ng;
        double *buf = xmalloc(4 * m + (size_t)ng + 4 * nn, sizeof(double), "gradcheck buffers");
        double *o = buf, *gq = buf + m, *gk = buf + 2 * m, *gv = buf + 3 * m, *l = buf + 4 * m;
        double *t = l + ng;   /* S, P, dP, dS of the slice */
        naive_forward(g.Q, g.K, g.V, ng, dg, scale, opt.causal, t, t + nn, o, l, NULL);
        naive_backward(g.Q, g.K, g.V, o, t + nn, g.dO, ng, dg, scale, t + 2 * nn, t + 3 * nn, gq,
                       gk, gv, NULL);
        char what[80];
        snprintf(what, sizeof what, "backward vs central differences (%d x %d of head 0)", ng, dg);
        failed += report(what, gradcheck_central(g.Q, g.K, g.V, g.dO, ng, dg, scale, opt.causal,
                                                 gq, gk, gv, 1e-5), 1e-6);
        free(buf);
        free_problem(&g);
    }

    /* The real input carries the model's own attention output: our fp64
     * attention must reproduce it to within the model's fp32 rounding. */
    if (!(opt.given & (OPT_INPUTS | OPT_N | OPT_D | OPT_BATCH | OPT_HEADS | OPT_RANDOM)) &&
        !opt.causal && !(opt.given & OPT_SCALE)) {
        npy_array om;
        char err[256], path[512];
        snprintf(path, sizeof path, "%s/o_model.npy", DEFAULT_INPUT_DIR);
        if (npy_read(path, &om, err, sizeof err) == 0 && om.numel == n) {
            err_stats e = compare("O vs model", O, om.data, n, INFINITY, 0, 0);
            failed += report("O vs the model's own fp32 output (rel. norm)", e.rel_norm, 1e-5);
            npy_free(&om);
        } else if (om.data == NULL) {
            printf("  (no %s: model output check skipped)\n", path);
        }
    }

    /* fp32 arithmetic, compared with fp64. */
    double *O32 = NULL, *dQ32 = NULL, *dK32 = NULL, *dV32 = NULL, *L32 = NULL;
    if (fp32) {
        O32 = xmalloc(n, sizeof(double), "O32"); L32 = xmalloc(rows, sizeof(double), "L32");
        dQ32 = xmalloc(n, sizeof(double), "dQ32"); dK32 = xmalloc(n, sizeof(double), "dK32");
        dV32 = xmalloc(n, sizeof(double), "dV32");
        float *buf = xmalloc(4 * NN + 9 * nd + (size_t)s.N, sizeof(float), "fp32 buffers");
        float *fS = buf, *fP = fS + NN, *fdP = fP + NN, *fdS = fdP + NN, *fO = fdS + NN;
        float *fdQ = fO + nd, *fdK = fdQ + nd, *fdV = fdK + nd, *fL = fdV + nd;
        for (int bh = 0; bh < s.B * s.H; bh++) {
            size_t off = (size_t)bh * nd;
            float *q = to_f32(p.Q + off, nd), *k = to_f32(p.K + off, nd);
            float *v = to_f32(p.V + off, nd), *g = to_f32(p.dO + off, nd);
            naive_forward_f32(q, k, v, s.N, s.d, (float)scale, opt.causal, fS, fP, fO, fL, NULL);
            naive_backward_f32(q, k, v, fO, fP, g, s.N, s.d, (float)scale, fdP, fdS, fdQ, fdK,
                               fdV, NULL);
            for (size_t x = 0; x < nd; x++) {
                O32[off + x] = fO[x]; dQ32[off + x] = fdQ[x];
                dK32[off + x] = fdK[x]; dV32[off + x] = fdV[x];
            }
            for (int i = 0; i < s.N; i++) L32[(size_t)bh * s.N + i] = fL[i];
            free(q); free(k); free(v); free(g);
        }
        free(buf);
        printf("checks (fp32 arithmetic against fp64, relative norm)\n");
        failed += report("O", compare("O", O32, O, n, INFINITY, 0, 0).rel_norm, 1e-5);
        failed += report("dQ", compare("dQ", dQ32, dQ, n, INFINITY, 0, 0).rel_norm, 1e-4);
        failed += report("dK", compare("dK", dK32, dK, n, INFINITY, 0, 0).rel_norm, 1e-4);
        failed += report("dV", compare("dV", dV32, dV, n, INFINITY, 0, 0).rel_norm, 1e-5);
    }

    uint64_t BH = (uint64_t)s.B * s.H;
    uint64_t f_formula = BH * naive_forward_io_formula(s.N, s.d);
    uint64_t b_formula = BH * naive_backward_io_formula(s.N, s.d);
    printf("\nslow-memory traffic of the fp64 run (elements; bytes at 8 B each)\n");
    printf("  %-9s %16s %16s %14s %10s\n", "pass", "counted", "formula", "bytes", "time [s]");
    printf("  %-9s %16llu %16llu %14.4g %10.4f\n", "forward", (unsigned long long)io_total(&io_f),
           (unsigned long long)f_formula, 8.0 * (double)io_total(&io_f), t_fwd);
    printf("  %-9s %16llu %16llu %14.4g %10.4f\n", "backward", (unsigned long long)io_total(&io_b),
           (unsigned long long)b_formula, 8.0 * (double)io_total(&io_b), t_bwd);
    printf("  formula: forward 4N^2 + 4Nd + N, backward 7N^2 + 10Nd, per head\n");
    failed += io_total(&io_f) != f_formula;
    failed += io_total(&io_b) != b_formula;

    if (opt.out) save_tensor(opt.out, fp32 ? O32 : O, s, false);
    if (opt.lse) save_tensor(opt.lse, fp32 ? L32 : L, s, true);
    if (opt.dq) save_tensor(opt.dq, fp32 ? dQ32 : dQ, s, false);
    if (opt.dk) save_tensor(opt.dk, fp32 ? dK32 : dK, s, false);
    if (opt.dv) save_tensor(opt.dv, fp32 ? dV32 : dV, s, false);

    printf("\nstage1: %s\n", failed ? "FAILED" : "all checks passed");
    free(O); free(L); free(dQ); free(dK); free(dV);
    free(O32); free(L32); free(dQ32); free(dK32); free(dV32);
    free_problem(&p);
    return failed ? EXIT_CHECK_FAILED : 0;
}
#endif /* STAGE_NO_MAIN */

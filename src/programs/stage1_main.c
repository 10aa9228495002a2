/*
 * src/programs/stage1_main.c -- ./stage1, the program: naive attention in
 * fp64 (the reference) and fp32 on the real or a random input, forward and
 * backward checked, its counted IO against the closed form, a gradient
 * check. The algorithm is library code (src/cpu/stage1_naive.c).
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stage1_naive.h"
#include "npy.h"
#include "tolerances.h"

static const char USAGE[] =
    "stage1: naive attention with S and P materialized (the fp64 reference)\n"
    "usage: ./stage1 [options]\n"
    "With no options: the real input (all-MiniLM-L6-v2 Q, K, V, dO; every head),\n"
    "forward and backward, checked; exit 0 only if every check passes.";

static int report(const char *what, double err, double tol) { return report_check(what, 44, err, tol); }

/* The rows of P sum to 1, or to 0 for a row that sees no key: checked on
 * head 0's P, rebuilt by one more forward pass. Returns the largest
 * deviation; *empty_rows counts the rows that see no key. */
static double head0_row_sums(const attn_problem *prob, size_t *empty_rows)
{
    const attn_params *p = &prob->params;
    int Sq = p->seqlen_q, Sk = p->seqlen_k, d = p->d;
    size_t SS = (size_t)Sq * Sk, qd = (size_t)Sq * d;
    double row_sum_err = 0;
    double *S = xmalloc(SS, sizeof(double), "S"), *P = xmalloc(SS, sizeof(double), "P");
    double *o = xmalloc(qd, sizeof(double), "O"), *l = xmalloc((size_t)Sq, sizeof(double), "L");
    naive_forward(p, prob->Q, prob->K, prob->V, S, P, o, l, NULL);
    for (int i = 0; i < Sq; i++) {
        double sum = 0;
        for (int j = 0; j < Sk; j++) sum += P[(size_t)i * Sk + j];
        bool empty = l[i] == -INFINITY;
        *empty_rows += empty;
        row_sum_err = nanmax(row_sum_err, fabs(sum - (empty ? 0.0 : 1.0)));
    }
    free(S); free(P); free(o); free(l);
    return row_sum_err;
}

/* Gradient check by central differences on a small slice of head 0: the
 * first queries and keys form a problem of their own. 1 when it fails. */
static int check_gradients(const attn_problem *prob)
{
    char what[96];
    attn_problem g = problem_slice(prob, 12, 8);
    const attn_params *gp = &g.params;
    size_t gq = attn_q_numel(gp), gk = attn_kv_numel(gp);
    double *buf = xmalloc(2 * gq + 2 * gk + attn_rows(gp), sizeof(double), "gradcheck buffers");
    double *o = buf, *gdq = o + gq, *gdk = gdq + gq, *gdv = gdk + gk, *l = gdv + gk;
    naive_attention_all_heads(gp, g.Q, g.K, g.V, g.dO, o, l, gdq, gdk, gdv, NULL, NULL, NULL,
                              NULL);
    snprintf(what, sizeof what, "backward vs central differences (head 0, %d queries, %d keys, d = %d)",
             gp->seqlen_q, gp->seqlen_k, gp->d);
    int failed = report(what, gradcheck_central(gp, g.Q, g.K, g.V, g.dO, gdq, gdk, gdv, 1e-5), TOL_GRADCHECK);
    free(buf);
    free_problem(&g);
    return failed;
}

/* The real input carries the model's own attention output: our fp64
 * attention O (nq entries) must reproduce it to within the model's fp32
 * rounding. 1 when it does not; a missing file is said and skipped. */
static int check_model_output(const double *O, size_t nq)
{
    int failed = 0;
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
    return failed;
}

int main(int argc, char **argv)
{
    options opt;
    parse_options(argc, argv,
                  OPT_N | OPT_D | OPT_BATCH | OPT_HEADS | OPT_RANDOM | OPT_SEED | OPT_MASKS |
                      OPT_SCALE | OPT_INPUTS | OPT_DO | OPT_OUTPUTS | OPT_DTYPE | OPT_FP64 | OPT_FP32,
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

    size_t empty_rows = 0;
    double row_sum_err = head0_row_sums(&prob, &empty_rows);

    int failed = 0;
    printf("checks (fp64)\n");
    char what[96];
    snprintf(what, sizeof what, "rows of P sum to 1 (head 0; %zu empty rows: 0)", empty_rows);
    failed += report(what, row_sum_err, TOL_ROWSUM);
    failed += report("outputs fully written: NaN or +-inf (L = -inf of an empty row allowed)",
                     (double)(count_nonfinite(O, nq, false) + count_nonfinite(L, rows, true) +
                              count_nonfinite(dQ, nq, false) + count_nonfinite(dK, nkv, false) +
                              count_nonfinite(dV, nkv, false)), 0);

    failed += check_gradients(&prob);

    if (!(opt.given & (OPT_INPUTS | OPT_DO | OPT_N | OPT_D | OPT_BATCH | OPT_HEADS | OPT_RANDOM | OPT_MASKS)) &&
        !(opt.given & OPT_SCALE))
        failed += check_model_output(O, nq);

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

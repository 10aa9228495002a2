/*
 * src/programs/stage2_main.c -- ./stage2, the program: the online softmax
 * against the two-pass softmax on random rows, huge logits and the real
 * input, and --trace. The algorithm is library code
 * (src/cpu/stage2_online_softmax.c).
 */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "stage2_online_softmax.h"
#include "tolerances.h"

static const char USAGE[] =
    "stage2: the online softmax, a softmax-weighted sum in one streaming pass\n"
    "usage: ./stage2 [options]\n"
    "With no options: random rows (N = 37, d = 8, logits ~ N(0, 5^2)), rows with huge\n"
    "logits, and every query row of the real input, each against the two-pass softmax.\n"
    "--trace streams --logits (default 3,1,6,2) in blocks of --block (default 2), and with\n"
    "--csv FILE writes the same trace as CSV.";

/* Streaming against two-pass, for one row of logits x (N,) over V (N, d), at
 * every block size in `blocks`. The two differ only by rounding, and rounding
 * scales with the numbers involved, so errors are kept in units of
 * eps = 2^-52 of that scale: the output's error over eps * max|V|, L's over
 * eps * max(1, max|x|). Also counts rows whose raw output error exceeds
 * 1e-15, and streams whose IO was not N + N d reads and d + 1 writes. */
typedef struct { double out_ulps, L_ulps, out_abs; long rows, rows_over_1e15; int io_bad; } row_errors;

static void check_row(const double *x, const double *V, int N, int d, const int *blocks,
                      int nblocks, row_errors *e)
{
    double *ref = xmalloc((size_t)d + 1, sizeof(double), "reference row");
    double *got = xmalloc((size_t)d + 1, sizeof(double), "streamed row");
    double L_ref, L_got, vmax = 0, xmax = 1;
    for (size_t j = 0; j < (size_t)N * d; j++) vmax = fmax(vmax, fabs(V[j]));
    for (int j = 0; j < N; j++) if (isfinite(x[j])) xmax = fmax(xmax, fabs(x[j]));
    two_pass_softmax_weighted_sum(x, V, N, d, ref, &L_ref);
    for (int b = 0; b < nblocks; b++) {
        io_counter io;
        io_reset(&io);
        poison(got, (size_t)d);
        online_softmax_weighted_sum(x, V, N, d, blocks[b], got, &L_got, &io, NULL);
        double err = compare("out", got, ref, (size_t)d, 0, 0, 0).max_abs;
        e->out_abs = fmax(e->out_abs, err);
        e->out_ulps = fmax(e->out_ulps, err / (DBL_EPSILON * fmax(vmax, DBL_MIN)));
        e->L_ulps = fmax(e->L_ulps, compare("L", &L_got, &L_ref, 1, 0, 0, 0).max_abs /
                                        (DBL_EPSILON * xmax));
        e->rows++;
        e->rows_over_1e15 += err > 1e-15;
        if (io.reads[T_S] != (uint64_t)N || io.reads[T_V] != (uint64_t)N * d ||
            io_total(&io) != (uint64_t)N + (uint64_t)N * d + (uint64_t)d + 1)
            e->io_bad++;
    }
    free(ref);
    free(got);
}

/* The rows of one report have N logits each. */
static int report_rows(const char *what, row_errors e, int N)
{
    const double tol = tol_online_eps_units(N);
    int bad = !(e.out_ulps <= tol) + !(e.L_ulps <= tol);
    printf("%s\n", what);
    printf("    output: max abs error %.3e = %.2f eps max|V|  (<= %.3g: %s)\n"
           "      %s %ld streams within the bound; %ld of them also below 1e-15 absolute\n",
           e.out_abs, e.out_ulps, tol, e.out_ulps <= tol ? "ok" : "FAIL",
           e.out_ulps <= tol ? "all" : "not all", e.rows, e.rows - e.rows_over_1e15);
    printf("    L: max error %.2f eps max(1, max|x|)  (<= %.3g: %s)\n", e.L_ulps, tol,
           e.L_ulps <= tol ? "ok" : "FAIL");
    return bad;
}

/* --trace: --logits (default 3,1,6,2) streamed in blocks of --block
 * (default 2), every step printed, against the two-pass softmax; with --csv
 * the same trace at full precision. 0 when the streamed L is the two-pass
 * one within TOL_TRACE_L, else EXIT_CHECK_FAILED. */
static int run_trace(const options *opt, int argc, char **argv)
{
    static const double example[] = {3, 1, 6, 2};
    const double *x = opt->n_logits ? opt->logits : example;
    int N = opt->n_logits ? opt->n_logits : 4;
    int block = (opt->given & OPT_BLOCK) ? opt->block : 2;
    double out, L, L_ref;
    printf("stage2 --trace: %d logits in blocks of %d\n", N, block);
    online_softmax_weighted_sum(x, NULL, N, 0, block, &out, &L, NULL, stdout);
    two_pass_softmax_weighted_sum(x, NULL, N, 0, &out, &L_ref);
    double m = -INFINITY, l = 0;
    for (int j = 0; j < N; j++) m = fmax(m, x[j]);
    /* every logit masked: the sum is empty (l = 0, L = -inf), and
     * exp(-inf - -inf) would print NaN */
    if (m > -INFINITY)
        for (int j = 0; j < N; j++) l += exp(x[j] - m);
    printf(fabs(L_ref) < 1e6 ? "  two-pass: m = %g, l = sum exp(x - max) = %.6f, L = %.7f\n"
                             : "  two-pass: m = %g, l = sum exp(x - max) = %.6f, L = %.9g\n",
           m, l, L_ref);
    if (opt->csv) {
        /* The same trace, every number at full precision, for the paper
         * and the exercise's cross-checks: one row per block, then the
         * streamed and the two-pass results. */
        FILE *f = csv_open(opt->csv, argc, argv, "step,block_logits,m,alpha,l,L");
        double sm = -INFINITY, sl = 0, sL, a;
        for (int j0 = 0, b = 1; j0 < N; j0 += block, b++) {
            int nb = N - j0 < block ? N - j0 : block;
            online_softmax_update(&sm, &sl, NULL, x + j0, NULL, nb, 0, 0, &a);
            fprintf(f, "%d,", b);
            for (int j = 0; j < nb; j++) fprintf(f, "%s%.17g", j ? ";" : "", x[j0 + j]);
            fprintf(f, ",%.17g,%.17g,%.17g,\n", sm, a, sl);
        }
        online_softmax_finalize(sm, sl, NULL, 0, &sL);
        fprintf(f, "streamed,,%.17g,,%.17g,%.17g\n", sm, sl, sL);
        fprintf(f, "two_pass,,%.17g,,%.17g,%.17g\n", m, l, L_ref);
        csv_close(f);
    }
    /* L == L_ref first: an all-masked row has L = L_ref = -inf, and
     * -inf - -inf is NaN */
    bool same = L == L_ref || fabs(L - L_ref) <= TOL_TRACE_L * fmax(1.0, fabs(L_ref));
    return same ? 0 : EXIT_CHECK_FAILED;
}

/* Every query row i of every head of problem p streams its logits
 * scale * q_i . k_j over the keys, in blocks of 1, 16, 32 and 64, against
 * the two-pass softmax (check_row); the errors of all of them. */
static row_errors real_input_rows(const attn_problem *p, double scale)
{
    const attn_params *ap = &p->params;
    int Sk = ap->seqlen_k, d_in = ap->d;
    double *row = xmalloc((size_t)Sk, sizeof(double), "logit row");
    row_errors real = {0};
    int real_blocks[] = {1, 16, 32, 64};
    for (int b = 0; b < ap->B; b++)
        for (int h = 0; h < ap->H; h++) {
            const double *Q = p->Q + attn_q_offset(ap, b, h), *K = p->K + attn_kv_offset(ap, b, h);
            const double *Vh = p->V + attn_kv_offset(ap, b, h);
            for (int i = 0; i < ap->seqlen_q; i++) {
                for (int j = 0; j < Sk; j++) {
                    double acc = 0;
                    for (int c = 0; c < d_in; c++) acc += Q[(size_t)i * d_in + c] * K[(size_t)j * d_in + c];
                    row[j] = acc * scale;
                }
                check_row(row, Vh, Sk, d_in, real_blocks, 4, &real);
            }
        }
    free(row);
    return real;
}

int main(int argc, char **argv)
{
    options opt;
    parse_options(argc, argv,
                  OPT_N | OPT_D | OPT_SEED | OPT_BLOCK | OPT_TRACE | OPT_LOGITS |
                      OPT_INPUTS | OPT_CSV,
                  USAGE, &opt);
    if ((opt.given & OPT_LOGITS) && !opt.trace)
        fatal(EXIT_BAD_INPUT, "--logits is used with --trace");
    if (opt.csv && !opt.trace) fatal(EXIT_BAD_INPUT, "--csv is written by --trace");
    if (opt.trace && (opt.given & (OPT_N | OPT_D | OPT_INPUTS)))
        fatal(EXIT_BAD_INPUT, "--trace streams --logits; --n, --d and input files are for the checks");

    if (opt.trace) return outputs_finish(run_trace(&opt, argc, argv));

    /* Here --n and --d shape the random rows below, not this input. */
    options real_opt = opt;
    real_opt.given &= ~(opt_set)(OPT_N | OPT_D);
    attn_problem p;
    load_problem(&real_opt, &p);
    const attn_params *ap = &p.params;
    double scale = 1.0 / sqrt((double)ap->d);
    int N = (opt.given & OPT_N) ? opt.N : 37, d = (opt.given & OPT_D) ? opt.d : 8;
    int blocks[] = {1, 2, 3, 4, 5, 8, 16, 37, 64, opt.block > 0 ? opt.block : 7};
    int nblocks = (int)(sizeof blocks / sizeof blocks[0]);
    rng_t rng;
    rng_seed(&rng, opt.seed);
    int failed = 0, io_bad = 0;

    printf("stage2: online softmax vs two-pass softmax (max abs error over out and L)\n");
    printf("  block sizes 1, 2, 3, 4, 5, 8, 16, 37, 64 and %d (--block); seed %llu\n", blocks[nblocks - 1],
           (unsigned long long)opt.seed);
    printf("  the check: error <= %g sqrt(N) eps of the values' scale for a row of N logits, at least\n"
           "  %g (core/tolerances.h). A stream is one row streamed in one block size. The streams below\n"
           "  1e-15 absolute are counted for information only: the error scales with max|V|, so a\n"
           "  stream with larger values can be above 1e-15 and still well within the bound\n\n",
           TOL_ONLINE_EPS_PER_ROOT, TOL_ONLINE_EPS_UNITS);

    double *x = xmalloc((size_t)N, sizeof(double), "logits");
    double *V = xmalloc((size_t)N * d, sizeof(double), "values");
    row_errors err = {0};
    for (int trial = 0; trial < 100; trial++) {
        fill_normal(x, (size_t)N, 0, 5, &rng);    /* spread 5: the chapter's case */
        fill_normal(V, (size_t)N * d, 0, 1, &rng);
        check_row(x, V, N, d, blocks, nblocks, &err);
    }
    char what[96];
    snprintf(what, sizeof what, "100 random rows, N = %d, d = %d, logits ~ N(0, 5^2)", N, d);
    failed += report_rows(what, err, N);
    io_bad += err.io_bad;

    /* Logits in the thousands: exp(x) alone overflows past x = 709 in fp64,
     * the max-subtracted forms never exponentiate anything positive. */
    err = (row_errors){0};
    for (int trial = 0; trial < 100; trial++) {
        fill_normal(x, (size_t)N, 0, 3000, &rng);
        fill_normal(V, (size_t)N * d, 0, 1, &rng);
        check_row(x, V, N, d, blocks, nblocks, &err);
    }
    failed += report_rows("100 rows with logits ~ N(0, 3000^2), where exp(x) alone overflows", err, N);
    io_bad += err.io_bad;

    /* A row that is masked in part: -inf logits contribute nothing. */
    for (int j = 0; j < N; j += 2) x[j] = -INFINITY;
    err = (row_errors){0};
    check_row(x, V, N, d, blocks, nblocks, &err);
    failed += report_rows("a row with every other logit masked (-inf)", err, N);
    io_bad += err.io_bad;
    free(x);
    free(V);

    /* The real input: every query row i of every head streams the logits
     * softmax_scale * q_i . k_j over the keys, in blocks. */
    row_errors real = real_input_rows(&p, scale);
    snprintf(what, sizeof what, "%s: %zu query rows of %d logits, d = %d, blocks 1, 16, 32, 64",
             (opt.given & OPT_INPUTS) ? "input files" : "real input", attn_rows(ap), ap->seqlen_k, ap->d);
    failed += report_rows(what, real, ap->seqlen_k);
    io_bad += real.io_bad;
    free_problem(&p);

    printf("streams whose counted IO was not N + N d reads and d + 1 writes: %d (%s)\n", io_bad,
           io_bad ? "FAIL" : "ok");
    failed += io_bad != 0;
    printf("\n  state held while streaming: m, l and o (d values) = d + 2 numbers, for any N\n");
    printf("\nstage2: %s\n", failed ? "FAILED" : "all checks passed");
    return outputs_finish(failed ? EXIT_CHECK_FAILED : 0);
}

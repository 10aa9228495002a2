/*
 * stage6_sweeps.c -- stage 6's sweeps, the data the chapter draws: errors
 * and tiles against the window size (--sweep window), peak memory against N
 * (--sweep memory, each N a child run of ./stage6) and the error of L against
 * |L| with a long double reference (--sweep lse). Called by ./stage6's
 * command line (src/programs/stage6_main.c); the checks of one problem are
 * src/cpu/stage6_masks.c.
 */
#define _DEFAULT_SOURCE   /* wait4, for the peak memory of a child process */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"
#include "stage6_masks.h"
#include "mask.h"
#include "stage1_naive.h"
#include "stage3_tiled.h"

/* ------------------------------------------------------------------------- */
/* Sweeps                                                                     */
/* ------------------------------------------------------------------------- */

/* --sweep window: N x N, d, window (W - 1, 0) for W = 16, 32, ..., N, then
 * causal and no mask; tiles, IO against the formulas, wall time. */
int masks_sweep_window(const options *opt, int argc, char **argv)
{
    int N = (opt->given & OPT_N) ? opt->N : 4096, d = (opt->given & OPT_D) ? opt->d : 64, bad = 0;
    FILE *csv = csv_open(opt->csv, argc, argv,
                         "mask,W,window_left,window_right,N,d,M,Br_fwd,Bc_fwd,Br_bwd,Bc_bwd,"
                         "tiles_fwd,tiles_fwd_formula,tiles_bwd,tiles_bwd_formula,tiles_all,"
                         "io_fwd,io_fwd_formula,io_bwd,io_bwd_formula,fwd_s,bwd_s");
    for (int k = 0;; k++) {
        int W = 16 << k;
        const char *kind = W < N ? "window" : W == N ? "causal" : "full";
        if (W > 2 * N) break;
        options o = *opt;
        o.given = (o.given & ~(opt_set)OPT_MASKS) | OPT_RANDOM | OPT_N | OPT_D;
        o.random = true;
        o.N = N;
        o.d = d;
        o.batch = o.heads = 1;
        if (W < N) o.given |= OPT_WINDOW, o.window_left = W - 1, o.window_right = 0;
        if (W == N) o.given |= OPT_CAUSAL, o.causal = true;
        attn_problem prob;
        load_problem(&o, &prob);
        const attn_params *p = &prob.params;
        long M;
        flash_blocks b = flash_blocks_from_options(&o, p, &M);
        size_t nq = attn_q_numel(p), rows = attn_rows(p);
        double *buf = xmalloc(4 * nq + rows, sizeof(double), "outputs");
        fprintf(stderr, "sweep window: N = %d, %s%s\n", N, kind, W < N ? "" : " (reference)");
        flash_run run = flash_run_counted(p, prob.Q, prob.K, prob.V, prob.dO, b, M, buf, buf + 4 * nq,
                                          buf + nq, buf + 2 * nq, buf + 3 * nq);
        io_counter f = run.io_f, bw = run.io_b;
        tile_stats sf = run.st_f, sb = run.st_b;
        double tf = run.t_f, tb = run.t_b;
        uint64_t ff = flash_forward_io_formula(p, b.fBr, b.fBc), bf = flash_backward_io_formula(p, b.bBr, b.bBc);
        uint64_t tff = flash_tiles_formula(p, b.fBr, b.fBc), tbf = flash_tiles_formula(p, b.bBr, b.bBc);
        fprintf(csv, "%s,%d,%d,%d,%d,%d,%ld,%d,%d,%d,%d,%llu,%llu,%llu,%llu,%llu,%llu,%llu,%llu,%llu,"
                "%.6f,%.6f\n", kind, W > N ? 0 : W, p->window_size_left, p->window_size_right, N, d,
                M, b.fBr, b.fBc, b.bBr, b.bBc, (unsigned long long)sf.tiles_visited,
                (unsigned long long)tff, (unsigned long long)sb.tiles_visited, (unsigned long long)tbf,
                (unsigned long long)ceil_div(N, b.fBr) * (unsigned long long)ceil_div(N, b.fBc),
                (unsigned long long)io_total(&f), (unsigned long long)ff,
                (unsigned long long)io_total(&bw), (unsigned long long)bf, tf, tb);
        fflush(csv);
        bad += (io_total(&f) != ff) + (io_total(&bw) != bf) + (sf.tiles_visited != tff) +
               (sb.tiles_visited != tbf) + (count_nonfinite(buf, 4 * nq, false) != 0);
        free(buf);
        free_problem(&prob);
    }
    csv_close(csv);
    printf("stage6 --sweep window: wrote %s; counted == formula, tiles == formula: %s\n", opt->csv,
           bad ? "NO" : "yes");
    return bad ? EXIT_CHECK_FAILED : 0;
}

/* Run argv (a stage of this build) as a child; its peak resident memory
 * (KiB) and wall time; -1 when it did not exit 0. */
static long child_peak_kib(char *const *args, double *wall)
{
    double t0 = now_seconds();
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) fatal(EXIT_CHECK_FAILED, "fork: cannot start %s", args[0]);
    if (pid == 0) {
        if (!freopen("/dev/null", "w", stdout)) _exit(127);
        execv(args[0], args);
        _exit(127);
    }
    int status;
    struct rusage ru;
    if (wait4(pid, &status, 0, &ru) != pid) return -1;
    *wall = now_seconds() - t0;
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? ru.ru_maxrss : -1;
}

/* --sweep memory: peak resident memory of stage 1 (naive, fp64, forward and
 * backward) and of this stage with --check rows (tiled, same work) on random
 * (1, 1, N, d) problems under one window, N doubling while the naive N x N
 * matrices fit (N <= 16384) and the tiled run up to --n (default 2^19). */
int masks_sweep_memory(const options *opt, const char *self, int argc, char **argv)
{
    int d = (opt->given & OPT_D) ? opt->d : 16, N_max = (opt->given & OPT_N) ? opt->N : 1 << 19;
    int W = 256;
    char dir[4096], naive_bin[4200], tiled_bin[4200];
    snprintf(dir, sizeof dir, "%s", self);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = '\0';
    else strcpy(dir, ".");
    snprintf(naive_bin, sizeof naive_bin, "%s/stage1", dir);
    snprintf(tiled_bin, sizeof tiled_bin, "%s/stage6", dir);
    if (access(naive_bin, X_OK) != 0) fatal(EXIT_BAD_INPUT, "--sweep memory needs %s (make stage1)", naive_bin);
    FILE *csv = csv_open(opt->csv, argc, argv,
                         "algorithm,N,d,window_left,window_right,peak_rss_kib,inputs_outputs_bytes,"
                         "extra_bytes_model,wall_s");
    int bad = 0;
    for (int N = 1024; N <= N_max; N *= 2)
        for (int alg = 0; alg < 2; alg++) {
            if (alg == 0 && (double)N * N * 32 > 8.6e9) continue;
            char n[16], ds[16], win[32];
            snprintf(n, sizeof n, "%d", N);
            snprintf(ds, sizeof ds, "%d", d);
            snprintf(win, sizeof win, "%d,0", W - 1);
            char *args[20] = {alg ? tiled_bin : naive_bin, "--random", "--n", n, "--d", ds,
                              "--window", win, "--seed", "1", NULL};
            if (alg) {   /* square 64 x 64 tiles: fewer wasted scores under the window */
                char *more[] = {"--check", "rows", "--br", "64", "--bc", "64", NULL};
                memcpy(args + 10, more, sizeof more);
            }
            fprintf(stderr, "sweep memory: %s, N = %d\n", alg ? "tiled" : "naive", N);
            double wall = 0;
            long kib = child_peak_kib(args, &wall);
            bad += kib < 0;
            /* Q, K, V, dO in; O, dQ, dK, dV out: 8 N d; L: N */
            double io_bytes = 8.0 * (8.0 * N * d + N);
            double extra = alg ? 8.0 * 2 * N : 8.0 * 4 * (double)N * N;   /* L, D vs S, P, dP, dS */
            fprintf(csv, "%s,%d,%d,%d,0,%ld,%.0f,%.0f,%.3f\n", alg ? "tiled" : "naive", N, d, W - 1,
                    kib, io_bytes, extra, wall);
            fflush(csv);
        }
    csv_close(csv);
    printf("stage6 --sweep memory: wrote %s; every run exited 0: %s\n", opt->csv, bad ? "NO" : "yes");
    return bad ? EXIT_CHECK_FAILED : 0;
}

//> long-double-reference
/* The backward's reference for --sweep lse: the scores S exactly as every
 * fp64 stage computes them (the same products in the same order), then the
 * softmax and every gradient in long double (64-bit significand on x86), so
 * that what is left is the fp64 algorithms' own rounding. One head. */
static void reference_ld(const attn_params *p, const double *Q, const double *K, const double *V,
                         const double *dO, double *O, double *L, double *dQ, double *dK, double *dV)
{
    int Sq = p->seqlen_q, Sk = p->seqlen_k, d = p->d;
    attn_mask mask = attn_mask_of(p);
    long double *P = xmalloc((size_t)Sq * Sk, sizeof(long double), "P (long double)");
    long double *acc = xmalloc(3 * (size_t)Sk * d, sizeof(long double), "dK, dV (long double)");
    for (size_t x = 0; x < 3 * (size_t)Sk * d; x++) acc[x] = 0;
    for (int i = 0; i < Sq; i++) {
        //> long-double-softmax
        long double m = -INFINITY, l = 0, Dl = 0;
        long double *Pi = P + (size_t)i * Sk;
        for (int j = 0; j < Sk; j++) {
            double s = 0;
            for (int c = 0; c < d; c++) s += Q[(size_t)i * d + c] * K[(size_t)j * d + c];
            Pi[j] = mask_visible(mask, i, j) ? (long double)(s * p->softmax_scale) : -INFINITY;
            if (Pi[j] > m) m = Pi[j];
        }
        for (int j = 0; j < Sk; j++) l += (Pi[j] = m == -INFINITY ? 0 : expl(Pi[j] - m));
        for (int c = 0; c < d; c++) {
            long double o = 0;
            for (int j = 0; j < Sk; j++) o += (l > 0 ? Pi[j] / l : 0) * V[(size_t)j * d + c];
            O[(size_t)i * d + c] = (double)o;
            Dl += o * dO[(size_t)i * d + c];
        }
        L[i] = l > 0 ? (double)(m + logl(l)) : -INFINITY;
        //< long-double-softmax
        for (int c = 0; c < d; c++) dQ[(size_t)i * d + c] = 0;
        long double *dq = acc + 2 * (size_t)Sk * d;   /* scratch row */
        for (int c = 0; c < d; c++) dq[c] = 0;
        for (int j = 0; j < Sk; j++) {
            long double pij = l > 0 ? Pi[j] / l : 0, dp = 0;
            for (int c = 0; c < d; c++) dp += (long double)dO[(size_t)i * d + c] * V[(size_t)j * d + c];
            long double ds = pij * (dp - Dl) * p->softmax_scale;
            for (int c = 0; c < d; c++) {
                acc[(size_t)j * d + c] += ds * Q[(size_t)i * d + c];                       /* dK */
                acc[(size_t)Sk * d + (size_t)j * d + c] += pij * dO[(size_t)i * d + c];    /* dV */
                dq[c] += ds * K[(size_t)j * d + c];
            }
        }
        for (int c = 0; c < d; c++) dQ[(size_t)i * d + c] = (double)dq[c];
    }
    for (size_t x = 0; x < (size_t)Sk * d; x++) {
        dK[x] = (double)acc[x];
        dV[x] = (double)acc[(size_t)Sk * d + x];
    }
    free(P);
    free(acc);
}
//< long-double-reference

/* --sweep lse: one random head whose scores all carry a common offset c
 * (an extra column in Q and K), so that softmax, O and the gradients keep
 * their size while L grows with |c|; the errors of the tiled and the naive
 * stage against the long-double reference, as |L| grows, at softmax_scale
 * 1/sqrt(d) and at 1 (a peaked softmax, where one key dominates a row and
 * an error of P passes into dV undiluted). */
int masks_sweep_lse(const options *opt, int argc, char **argv)
{
    int N = (opt->given & OPT_N) ? opt->N : 256, d = (opt->given & OPT_D) ? opt->d : 32;
    if (LDBL_MANT_DIG < 64)
        fatal(EXIT_BAD_INPUT, "--sweep lse needs a long double wider than double (this one has %d "
              "bits)", LDBL_MANT_DIG);
    FILE *csv = csv_open(opt->csv, argc, argv,
                         "softmax_scale,offset,max_abs_L,algorithm,err_O,err_L,err_dQ,err_dK,err_dV,"
                         "err_bwd,eps_max_abs_L,tolerance_bwd,N,d");
    static const double offsets[] = {0, -1, -3, -10, -30, -100, -300, -1e3, -3e3, -1e4, -3e4,
                                     -7.5e4, -1e5, -3e5, 1e3, 1e5};
    double scales[2] = {1.0 / sqrt((double)d), 1.0};
    if (opt->given & OPT_SCALE) scales[0] = scales[1] = opt->softmax_scale;
    rng_t rng;
    rng_seed(&rng, opt->seed);
    attn_problem in;
    memset(&in, 0, sizeof in);
    in.params = attn_params_make(1, 1, N, d, 1.0);
    attn_params *p = &in.params;
    size_t n = attn_q_numel(p);
    double *base = xmalloc(4 * n, sizeof(double), "inputs");
    fill_normal(base, 4 * n, 0, 1, &rng);
    double *buf = xmalloc(4 * n + 4 * n + 2 * (size_t)N, sizeof(double), "inputs and outputs");
    in.Q = buf, in.K = buf + n, in.V = buf + 2 * n, in.dO = buf + 3 * n;
    double *R = buf + 4 * n, *rL = R + 4 * n, *T = xmalloc(4 * n + N, sizeof(double), "outputs");
    int bad = 0;
    sram_arena sram;
    sram_init(&sram, flash_backward_sram_elements(32, 32, d));
    for (int sc = 0; sc < (scales[0] == scales[1] ? 1 : 2); sc++)
        for (size_t k = 0; k < sizeof offsets / sizeof offsets[0]; k++) {
            p->softmax_scale = scales[sc];
            double c = offsets[k], a = sqrt(fabs(c) / p->softmax_scale);
            memcpy(buf, base, 4 * n * sizeof(double));
            for (int i = 0; i < N; i++) {   /* column 0: q_i0 k_j0 scale = c for every pair */
                in.Q[(size_t)i * d] = a;
                in.K[(size_t)i * d] = c < 0 ? -a : a;
            }
            reference_ld(p, in.Q, in.K, in.V, in.dO, R, rL, R + n, R + 2 * n, R + 3 * n);
            double mL = max_abs_finite(rL, (size_t)N);
            for (int alg = 0; alg < 2; alg++) {
                double *O = T, *dQ = T + n, *dK = T + 2 * n, *dV = T + 3 * n, *L = T + 4 * n;
                poison(T, 4 * n + N);
                if (alg)
                    flash_attention_all_heads(p, in.Q, in.K, in.V, in.dO,
                                              (flash_blocks){32, 32, 32, 32}, O, L, dQ, dK, dV,
                                              &sram, NULL, NULL, NULL, NULL, NULL, NULL);
                else
                    naive_attention_all_heads(p, in.Q, in.K, in.V, in.dO, O, L, dQ, dK, dV, NULL,
                                              NULL, NULL, NULL);
                flash_errors e = flash_errors_vs(&in, O, L, dQ, dK, dV, R, rL, R + n, R + 2 * n,
                                                 R + 3 * n);
                double eb = fmax(e.dQ, fmax(e.dK, e.dV)), tol = flash_backward_tol(rL, (size_t)N);
                fprintf(csv, "%.6g,%g,%.6g,%s,%.3e,%.3e,%.3e,%.3e,%.3e,%.3e,%.3e,%.3e,%d,%d\n",
                        p->softmax_scale, c, mL, alg ? "tiled" : "naive", e.O, e.L, e.dQ, e.dK,
                        e.dV, eb, DBL_EPSILON * mL, tol, N, d);
                bad += !(e.O <= FLASH_FWD_TOL && e.L <= FLASH_FWD_TOL && eb <= tol);
            }
        }
    sram_free(&sram);
    csv_close(csv);
    free(base);
    free(buf);
    free(T);
    printf("stage6 --sweep lse: wrote %s; every error within its tolerance: %s\n", opt->csv,
           bad ? "NO" : "yes");
    return bad ? EXIT_CHECK_FAILED : 0;
}

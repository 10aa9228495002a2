/*
 * stage7_timing.c -- stage 7's measurement: G GPUs against one on random
 * inputs made on the GPUs, each pass in three modes (the ring, its
 * computation alone, its communication alone), and how much of the
 * traffic the computation hid; rows of --sweep scale's CSV.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "common.h"
#include "fa_gpu.h"
#include "gpu_host.h"
#include "ring.h"
#include "stage7_ring.h"
#include "stage7_schedule.h"
#include "stage7_checks.h"
#include "stage7_timing.h"
/* ------------------------------------------------------------------------- */
/* Measurement: G GPUs against one, and how much of the traffic is hidden     */

void provenance_of(provenance *pv, int argc, char **argv, int device)
{
    struct cudaDeviceProp prop;
    CU(cudaGetDeviceProperties(&prop, device));
    snprintf(pv->gpu, sizeof pv->gpu, "%s", prop.name);
    command_line_of("nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null", pv->driver,
              sizeof pv->driver);
    if (!pv->driver[0]) snprintf(pv->driver, sizeof pv->driver, "unknown");
    int rt = 0, nv = 0;
    cudaRuntimeGetVersion(&rt);
    snprintf(pv->cuda, sizeof pv->cuda, "%d.%d", rt / 1000, (rt % 1000) / 10);
    ncclGetVersion(&nv);
    /* NCCL_VERSION_CODE: X*1000+Y*100+Z up to 2.8, X*10000+Y*100+Z after */
    if (nv >= 10000) snprintf(pv->nccl, sizeof pv->nccl, "%d.%d.%d", nv / 10000, (nv / 100) % 100, nv % 100);
    else snprintf(pv->nccl, sizeof pv->nccl, "%d.%d.%d", nv / 1000, (nv / 100) % 10, nv % 100);
    source_commit(pv->commit, sizeof pv->commit);
    utc_date(pv->date, sizeof pv->date);
    size_t at_ = 0;
    pv->command[0] = '\0';
    for (int i = 0; i < argc && at_ < sizeof pv->command - 2; i++)
        at_ += (size_t)snprintf(pv->command + at_, sizeof pv->command - at_, "%s%s", i ? " " : "", argv[i]);
    for (char *q = pv->command; *q; q++)
        if (*q == '"' || *q == ',') *q = ' ';   /* one CSV field, no quoting needed */
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}
static double median_of(double *t, int n)
{
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

/* Median wall time (s) of one ring pass in one mode, after a warm-up. */
static double time_ring(ring_ctx *x, const ring_job *j, rank_bufs *rb, int pass, int mode, int repeats)
{
    double t[MAX_REPEATS];
    for (int i = -1; i < repeats; i++) {
        ctx_sync(x);
        double t0 = now_seconds();
        if (pass == FA_FORWARD) ring_forward(x, j, rb, mode);
        else ring_backward(x, j, rb, mode);
        ctx_sync(x);
        if (i >= 0) t[i] = now_seconds() - t0;
    }
    return median_of(t, repeats);
}

/* The single-GPU kernels on the whole problem, random inputs made on the
 * GPU: median wall time (s) of each pass (bwd 0 when there is none); -1
 * when the problem does not fit in the device's memory. */
static int time_single(int device, const ring_job *j, int repeats, double *fwd, double *bwd)
{
    const attn_params *p = &j->p;
    size_t es = fa_dtype_bytes(j->dtype), nq = attn_q_numel(p) * es, nk = attn_kv_numel(p) * es;
    size_t ws = fa_workspace_bytes(FA_FORWARD, j->fwd, j->dtype, p);
    if (j->bwd >= 0) {
        size_t wb = fa_workspace_bytes(FA_BACKWARD, j->bwd, j->dtype, p);
        ws = ws > wb ? ws : wb;
    }
    CU(cudaSetDevice(device));
    size_t sizes[] = {nq, nk, nk, nq, nq, nq, nk, nk, attn_rows(p) * sizeof(float), ws};
    void *b[10] = {0};
    int nb = j->bwd >= 0 ? 10 : 5;
    for (int i = 0; i < 10; i++) {
        if ((i >= 5 && i < 8 && j->bwd < 0) || !sizes[i]) continue;
        if (!(b[i] = fa_malloc(sizes[i]))) {
            for (int k = 0; k < i; k++) fa_free(b[k]);
            (void)cudaGetLastError();
            return -1;
        }
    }
    (void)nb;
    for (int i = 0; i < 5; i++)
        if (i != 3 && b[i]) FA(ring_fill_random(j->dtype, b[i], sizes[i] / es, 1000 + i, NULL));
    fa_ptrs f = {0};
    f.q = b[0]; f.k = b[1]; f.v = b[2]; f.o = b[3]; f.do_ = b[4];
    f.dq = b[5]; f.dk = b[6]; f.dv = b[7]; f.softmax_lse = b[8]; f.workspace = b[9]; f.workspace_bytes = ws;
    double t[MAX_REPEATS];
    for (int pass = FA_FORWARD; pass <= FA_BACKWARD; pass++) {
        double *out = pass == FA_FORWARD ? fwd : bwd;
        *out = 0;
        if (pass == FA_BACKWARD && j->bwd < 0) break;
        for (int i = -1; i < repeats; i++) {
            FA(fa_synchronize());
            double t0 = now_seconds();
            if (pass == FA_FORWARD) FA(fa_forward(j->fwd, j->dtype, p, &f, NULL));
            else FA(fa_backward(j->bwd, j->dtype, p, &f, 0, NULL));
            FA(fa_synchronize());
            if (i >= 0) t[i] = now_seconds() - t0;
        }
        *out = median_of(t, repeats);
    }
    for (int i = 0; i < 10; i++) fa_free(b[i]);
    return 0;
}

typedef struct { double ring, compute, comm; } ring_times;

/* The ring on random inputs made on the GPUs: each pass in the three modes.
 * -1 when a rank's buffers do not fit. */
static int time_ring_modes(ring_ctx *x, const ring_job *j, int repeats, ring_times *tf, ring_times *tb,
                           double *sent_f, double *sent_b)
{
    rank_bufs rb[MAX_G];
    size_t es = fa_dtype_bytes(j->dtype);
    int np = j->lay.n_pieces;
    for (int r = 0; r < x->G; r++) {
        if (rank_alloc(x, j, r, &rb[r])) {
            for (int k = 0; k < r; k++) rank_free(x, k, &rb[k]);
            return -1;
        }
        FA(ring_fill_random(j->dtype, rb[r].q, np * rb[r].pq, 10 * r + 1, x->comp[r]));
        FA(ring_fill_random(j->dtype, rb[r].kv_home, 2 * np * rb[r].pk, 10 * r + 2, x->comp[r]));
        if (j->bwd >= 0) FA(ring_fill_random(j->dtype, rb[r].dout, np * rb[r].pq, 10 * r + 3, x->comp[r]));
    }
    (void)es;
    memset(x->sent, 0, sizeof x->sent);
    ring_forward(x, j, rb, RUN_ALL);   /* O and L for the backward; the bytes of one pass */
    ctx_sync(x);
    *sent_f = x->sent[0];
    tf->ring = time_ring(x, j, rb, FA_FORWARD, RUN_ALL, repeats);
    tf->compute = time_ring(x, j, rb, FA_FORWARD, RUN_COMPUTE, repeats);
    tf->comm = x->G > 1 ? time_ring(x, j, rb, FA_FORWARD, RUN_COMM, repeats) : 0;
    memset(tb, 0, sizeof *tb);
    *sent_b = 0;
    if (j->bwd >= 0) {
        ring_forward(x, j, rb, RUN_ALL);
        memset(x->sent, 0, sizeof x->sent);
        ring_backward(x, j, rb, RUN_ALL);
        ctx_sync(x);
        *sent_b = x->sent[0];
        tb->ring = time_ring(x, j, rb, FA_BACKWARD, RUN_ALL, repeats);
        tb->compute = time_ring(x, j, rb, FA_BACKWARD, RUN_COMPUTE, repeats);
        tb->comm = x->G > 1 ? time_ring(x, j, rb, FA_BACKWARD, RUN_COMM, repeats) : 0;
    }
    for (int r = 0; r < x->G; r++) rank_free(x, r, &rb[r]);
    return 0;
}

//> ring-hidden
/* The share of the communication that overlapped computation: with T the
 * ring's time, C the same schedule with the transfers left out and M the
 * transfers alone, T = C + M - hidden, so hidden / M = (C + M - T) / M.
 * Clipped to [0, 1]: timing noise can push it past either end. */
static double hidden_share(ring_times t)
{
    if (t.comm <= 0) return 0;
    double h = (t.compute + t.comm - t.ring) / t.comm;
    return h < 0 ? 0 : h > 1 ? 1 : h;
}
//< ring-hidden

void scale_sweep(ring_ctx *x, const options *opt, int dtype, int kernel, double budget,
                        const provenance *pv, FILE *csv)
{
    int B = opt->given & OPT_BATCH ? opt->batch : 1;
    int H = opt->given & OPT_HEADS ? opt->heads : 16;
    int d = opt->given & OPT_D ? opt->d : 128;
    int repeats = opt->given & OPT_REPEATS ? opt->repeats : 3;
    if (repeats > MAX_REPEATS) repeats = MAX_REPEATS;
    int n0 = opt->given & OPT_N ? opt->N : 4096;
    double start = now_seconds(), last_cost = 0;
    int largest = 0;
    const char *stop = "the N list ended";
    printf("\nstage7 --sweep scale: B = %d, H = %d, d = %d, %s, kernel %d, G = %d (%s), %d repeats, "
           "budget %.0f s\n", B, H, d, fa_dtype_name(dtype), kernel, x->G, x->virt ? "virtual" : "nccl",
           repeats, budget);
    printf("  %-4s %7s %6s %10s %10s %10s %10s %7s %9s %9s %6s %12s\n", "pass", "N", "causal", "1 GPU ms",
           "ring ms", "compute ms", "comm ms", "hidden", "1GPU TF/s", "ring TF/s", "eff", "bytes/GPU");
    for (int N = n0; N <= (1 << 22); N *= 2) {
        double elapsed = now_seconds() - start;
        /* a doubling of N quadruples the work */
        if (last_cost > 0 && elapsed + 4.2 * last_cost > budget) {
            stop = "the time budget";
            break;
        }
        double t0 = now_seconds();
        bool fitted = true;
        for (int causal = 0; causal <= 1 && fitted; causal++) {
            if ((opt->given & OPT_CAUSAL) && !causal) continue;
            attn_params p = attn_params_make(B, H, N, d, 1.0 / sqrt((double)d));
            attn_params_causal(&p, causal);
            ring_job j;
            char why[256], bwhy[256];
            if (job_make(&j, &p, x->G, dtype, kernel, true, why, bwhy, sizeof why))
                fatal(EXIT_BAD_INPUT, "%s", why);
            /* Timed in the default mode, as the single-GPU baseline is: the
             * deterministic mode (used by the checks for G = 1's bitwise
             * equality) orders the dQ additions and costs about half the
             * backward's speed, which would be charged to the ring. */
            j.deterministic = 0;
            double s_f = 0, s_b = 0, sent_f = 0, sent_b = 0;
            ring_times tf, tb;
            if (time_single(x->dev[0], &j, repeats, &s_f, &s_b) || time_ring_modes(x, &j, repeats, &tf, &tb, &sent_f, &sent_b)) {
                fitted = false;
                stop = "device memory";
                break;
            }
            for (int pass = FA_FORWARD; pass <= FA_BACKWARD; pass++) {
                if (pass == FA_BACKWARD && j.bwd < 0) continue;
                ring_times t = pass == FA_FORWARD ? tf : tb;
                double single = pass == FA_FORWARD ? s_f : s_b, flops = fa_flops(pass, &p);
                double sent = pass == FA_FORWARD ? sent_f : sent_b;
                double formula = pass == FA_FORWARD ? ring_forward_bytes_formula(&p, x->G, fa_dtype_bytes(dtype))
                                                    : ring_backward_bytes_formula(&p, x->G, fa_dtype_bytes(dtype));
                double eff = single / (x->G * t.ring);
                printf("  %-4s %7d %6d %10.3f %10.3f %10.3f %10.3f %7.3f %9.1f %9.1f %6.3f %12.0f%s\n",
                       pass == FA_FORWARD ? "fwd" : "bwd", N, causal, 1e3 * single, 1e3 * t.ring,
                       1e3 * t.compute, 1e3 * t.comm, hidden_share(t), flops / single / 1e12,
                       flops / t.ring / 1e12, eff, sent, sent == formula ? "" : " (!= formula)");
                if (csv)
                    fprintf(csv, "%s,%s,%s,%s,%s,%s,%s,%s,%d,%d,%s,%d,%s,%d,%d,%d,%d,%d,%.4f,%.4f,%.4f,%.4f,"
                            "%.4f,%.2f,%.2f,%.4f,%.0f,%.0f\n",
                            pv->gpu, pv->driver, pv->cuda, pv->nccl, pv->commit, pv->date, pv->command,
                            x->virt ? "virtual" : "nccl", x->G, causal, fa_dtype_name(dtype), kernel,
                            pass == FA_FORWARD ? "fwd" : "bwd", B, H, N, d, repeats, 1e3 * single,
                            1e3 * t.ring, 1e3 * t.compute, 1e3 * t.comm, hidden_share(t),
                            flops / single / 1e12, flops / t.ring / 1e12, eff, sent, formula);
            }
            fflush(stdout);
            if (csv) fflush(csv);
        }
        if (!fitted) break;
        largest = N;
        last_cost = now_seconds() - t0;
    }
    printf("stage7 --sweep scale: largest N run %d (stopped by %s after %.1f s)\n", largest, stop,
           now_seconds() - start);
    if (csv) fprintf(csv, "# largest N run: %d; stopped by %s\n", largest, stop);
}

/*
 * gpu_host.c -- the GPU stages' shared host code (see gpu_host.h).
 */
#include "gpu_host.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "fa_gpu.h"
#include "npy.h"
#include "stage1_naive.h"

const char *const gh_tensor_name[GH_COUNT] = {"Q", "K", "V", "O", "L", "dO", "dQ", "dK", "dV"};

#define GH_TRY(call)                                                                  \
    do {                                                                              \
        if ((call) != 0) fatal(EXIT_CHECK_FAILED, "%s", fa_error_string());           \
    } while (0)

static bool is_kv(gh_tensor t) { return t == GH_K || t == GH_V || t == GH_DK || t == GH_DV; }

size_t gh_numel(const attn_params *p, gh_tensor t)
{
    if (t == GH_L) return attn_rows(p);
    return is_kv(t) ? attn_kv_numel(p) : attn_q_numel(p);
}

static size_t elem_bytes(const gh_problem *g, gh_tensor t)
{
    return t == GH_L ? sizeof(float) : fa_dtype_bytes(g->dtype);
}

size_t gh_bytes(const gh_problem *g, gh_tensor t) { return gh_numel(&g->p, t) * elem_bytes(g, t); }

/* Round x to what tensor t holds on the GPU, upload it, keep the rounded
 * fp64 values in g->host[t]. */
static void put(gh_problem *g, gh_tensor t, const double *x)
{
    size_t n = gh_numel(&g->p, t), bytes = gh_bytes(g, t);
    void *staging = xmalloc(n, elem_bytes(g, t), "upload staging");
    if (!g->host[t]) g->host[t] = xmalloc(n, sizeof(double), gh_tensor_name[t]);
    if (t == GH_L) {
        for (size_t i = 0; i < n; i++) {
            ((float *)staging)[i] = (float)x[i];
            g->host[t][i] = ((float *)staging)[i];
        }
    } else {
        fa_host_from_double(staging, x, n, g->dtype);
        fa_host_to_double(g->host[t], staging, n, g->dtype);
    }
    GH_TRY(fa_copy_to_device(g->dev[t], staging, bytes));
    free(staging);
}

void gh_upload(gh_problem *g, const attn_params *p, int dtype, const double *Q, const double *K,
               const double *V, const double *dO)
{
    memset(g, 0, sizeof *g);
    g->p = *p;
    g->dtype = dtype;
    for (int t = 0; t < GH_COUNT; t++) {
        g->dev[t] = fa_malloc(gh_bytes(g, (gh_tensor)t));
        if (!g->dev[t]) fatal(EXIT_CHECK_FAILED, "%s", fa_error_string());
    }
    put(g, GH_Q, Q);
    put(g, GH_K, K);
    put(g, GH_V, V);
    if (dO) put(g, GH_DO, dO);
}

void gh_set_forward(gh_problem *g, const double *O, const double *L)
{
    put(g, GH_O, O);
    put(g, GH_L, L);
}

void gh_select(int pass, const char *dtype_flag, int kernel, int *dtypes, int *nd, int *versions,
               int *nv)
{
    const char *what = pass == FA_FORWARD ? "forward" : "backward";
    *nd = 0;
    for (int t = FA_FP32; t <= FA_BF16; t++)
        if (!dtype_flag || !strcmp(dtype_flag, fa_dtype_name(t))) dtypes[(*nd)++] = t;
    if (*nd == 0) fatal(EXIT_BAD_INPUT, "--dtype %s: the GPU stages run fp32, fp16 or bf16", dtype_flag);
    *nv = 0;
    if (kernel >= 0) {
        const fa_version_info *v = fa_version(pass, kernel);
        if (!v)
            fatal(EXIT_BAD_INPUT, "--kernel %d: the %s has versions 0 to %d", kernel, what,
                  fa_num_versions(pass) - 1);
        versions[(*nv)++] = kernel;
        if (!dtype_flag) {
            int n = 0;
            for (int t = 0; t < *nd; t++)
                if (v->dtypes & FA_DT(dtypes[t])) dtypes[n++] = dtypes[t];
            *nd = n;
        }
    } else {
        for (int k = 0; k < fa_num_versions(pass) && *nv < 16; k++) versions[(*nv)++] = k;
    }
}

void gh_round(double *x, size_t n, int dtype)
{
    void *staging = xmalloc(n, fa_dtype_bytes(dtype), "rounding staging");
    fa_host_from_double(staging, x, n, dtype);
    fa_host_to_double(x, staging, n, dtype);
    free(staging);
}

void gh_free(gh_problem *g)
{
    for (int t = 0; t < GH_COUNT; t++) {
        fa_free(g->dev[t]);
        free(g->host[t]);
    }
    fa_free(g->workspace);
    memset(g, 0, sizeof *g);
}

fa_ptrs gh_ptrs(gh_problem *g)
{
    fa_ptrs x;
    memset(&x, 0, sizeof x);
    x.q = g->dev[GH_Q];
    x.k = g->dev[GH_K];
    x.v = g->dev[GH_V];
    x.o = g->dev[GH_O];
    x.softmax_lse = (float *)g->dev[GH_L];
    x.do_ = g->dev[GH_DO];
    x.dq = g->dev[GH_DQ];
    x.dk = g->dev[GH_DK];
    x.dv = g->dev[GH_DV];
    x.workspace = g->workspace;
    x.workspace_bytes = g->workspace_bytes;
    return x;
}

/* Check the version takes the problem, and grow the workspace to its need. */
static int prepare(gh_problem *g, int pass, int version)
{
    int rc = fa_check_supported(pass, version, g->dtype, &g->p);
    if (rc) return rc;
    size_t need = fa_workspace_bytes(pass, version, g->dtype, &g->p);
    if (need > g->workspace_bytes) {
        fa_free(g->workspace);
        g->workspace = fa_malloc(need);
        if (!g->workspace) fatal(EXIT_CHECK_FAILED, "%s", fa_error_string());
        g->workspace_bytes = need;
    }
    return FA_OK;
}

int gh_run(gh_problem *g, int pass, int version, int deterministic)
{
    int rc = prepare(g, pass, version);
    if (rc) return rc;
    const gh_tensor outs_f[2] = {GH_O, GH_L}, outs_b[3] = {GH_DQ, GH_DK, GH_DV};
    const gh_tensor *outs = pass == FA_FORWARD ? outs_f : outs_b;
    for (int i = 0; i < (pass == FA_FORWARD ? 2 : 3); i++)
        GH_TRY(fa_poison(g->dev[outs[i]], gh_bytes(g, outs[i])));
    fa_ptrs x = gh_ptrs(g);
    rc = pass == FA_FORWARD ? fa_forward(version, g->dtype, &g->p, &x, NULL)
                            : fa_backward(version, g->dtype, &g->p, &x, deterministic, NULL);
    if (rc == FA_ERR_UNSUPPORTED) return rc;
    GH_TRY(rc);
    GH_TRY(fa_synchronize());
    return FA_OK;
}

double gh_time(gh_problem *g, int pass, int version, int deterministic, int repeats)
{
    if (prepare(g, pass, version)) return 0;
    fa_ptrs x = gh_ptrs(g);
    double ms = 0;
    GH_TRY(fa_time(pass, version, g->dtype, &g->p, &x, 1, deterministic, repeats, 1, &ms));
    return ms;
}

void gh_fetch_raw(const gh_problem *g, gh_tensor t, void *dst)
{
    GH_TRY(fa_copy_to_host(dst, g->dev[t], gh_bytes(g, t)));
}

void gh_fetch(const gh_problem *g, gh_tensor t, double *dst)
{
    size_t n = gh_numel(&g->p, t);
    void *raw = xmalloc(n, elem_bytes(g, t), "fetch staging");
    gh_fetch_raw(g, t, raw);
    if (t == GH_L)
        for (size_t i = 0; i < n; i++) dst[i] = ((float *)raw)[i];
    else
        fa_host_to_double(dst, raw, n, g->dtype);
    free(raw);
}

/* ------------------------------------------------------------------------- */
/* The reference                                                              */
/* ------------------------------------------------------------------------- */


void gh_reference(const attn_params *p, const double *Q, const double *K, const double *V,
                  const double *dO, double *O, double *L, double *dQ, double *dK, double *dV)
{
    naive_attention_all_heads(p, Q, K, V, dO, O, L, dQ, dK, dV, NULL, NULL, NULL, NULL);
}

/* ------------------------------------------------------------------------- */
/* Error measures and output                                                  */
/* ------------------------------------------------------------------------- */

gh_err gh_compare(const double *got, const double *ref, size_t n, double fallback)
{
    gh_err e = {0, 0, 0, 0};
    double worst = 0, d2 = 0, r2 = 0;
    for (size_t i = 0; i < n; i++) {
        if (isinf(ref[i]) && got[i] == ref[i]) continue;   /* L = -inf of an empty row */
        if (!isfinite(got[i])) {
            e.nonfinite++;
            continue;
        }
        double diff = fabs(got[i] - ref[i]);
        worst = fmax(worst, diff);
        d2 += diff * diff;
        if (isfinite(ref[i])) r2 += ref[i] * ref[i];
    }
    e.scale = max_abs_finite(ref, n);
    if (e.scale == 0) e.scale = fallback > 0 ? fallback : 1;
    e.err = e.nonfinite ? INFINITY : worst / e.scale;
    e.norm = e.nonfinite ? INFINITY : (r2 > 0 ? sqrt(d2 / r2) : sqrt(d2));
    return e;
}

void gh_save(const char *path, const double *x, const attn_params *p, gh_tensor t)
{
    if (t == GH_L) save_rows(path, x, p);
    else if (is_kv(t)) save_kv_like(path, x, p);
    else save_q_like(path, x, p);
}

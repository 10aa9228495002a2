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
        if (!v) {
            char list[96];
            gh_version_list(pass, list, sizeof list);
            fatal(EXIT_BAD_INPUT, "--kernel %d: the %s has versions %s", kernel, what, list);
        }
        versions[(*nv)++] = kernel;
        if (!dtype_flag) {
            int n = 0;
            for (int t = 0; t < *nd; t++)
                if (v->dtypes & FA_DT(dtypes[t])) dtypes[n++] = dtypes[t];
            *nd = n;
        }
    } else {
        *nv = gh_versions(pass, versions, 16);
    }
}

int gh_versions(int pass, int *versions, int max)
{
    int n = 0;
    for (int k = 0; k < fa_version_limit(pass) && n < max; k++)
        if (fa_version(pass, k)) versions[n++] = k;
    return n;
}

void gh_version_list(int pass, char *buf, size_t n)
{
    int v[16], nv = gh_versions(pass, v, 16);
    size_t at = 0;
    buf[0] = '\0';
    for (int i = 0; i < nv && at < n; i++)
        at += (size_t)snprintf(buf + at, n - at, "%s%d", i == 0 ? "" : i == nv - 1 ? " and " : ", ", v[i]);
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

/* ------------------------------------------------------------------------- */
/* Inputs on the host                                                         */
/* ------------------------------------------------------------------------- */

const char *const gh_input_name[4] = {"N(0,1)", "Q, K ~ U[4e4, 6.5e4] (logits ~2e10)",
                                      "Q, K ~ -900 U[0,1) (logits ~1e6)", "logits near -7.5e4"};

void gh_inputs_free(gh_inputs *in) { free_problem(in); }

/* Round to bf16, then flush what fp16 would make subnormal: the values are
 * then exact in fp32, fp16 and bf16. */
static void make_representable(double *x, size_t n)
{
    gh_round(x, n, FA_BF16);
    for (size_t i = 0; i < n; i++)
        if (fabs(x[i]) < 0x1p-14) x[i] = 0;
}

static bool representable(const double *x, size_t n, int dtype)
{
    double *y = xmalloc(n, sizeof(double), "rounding check");
    memcpy(y, x, n * sizeof(double));
    gh_round(y, n, dtype);
    bool same = memcmp(x, y, n * sizeof(double)) == 0;
    free(y);
    return same;
}

bool gh_inputs_exact(const gh_inputs *in, const int *dtypes, int nd, bool grads)
{
    const attn_params *p = &in->params;
    size_t nq = attn_q_numel(p), nk = attn_kv_numel(p);
    bool exact = true;
    for (int t = 0; t < nd; t++)
        exact = exact && representable(in->Q, nq, dtypes[t]) && representable(in->K, nk, dtypes[t]) &&
                representable(in->V, nk, dtypes[t]) && (!grads || representable(in->dO, nq, dtypes[t]));
    return exact;
}

void gh_inputs_random(gh_inputs *in, const attn_params *p, gh_input_kind kind, uint64_t seed)
{
    memset(in, 0, sizeof *in);
    in->params = *p;
    in->kind = kind;
    size_t nq = attn_q_numel(p), nk = attn_kv_numel(p);
    rng_t rng;
    rng_seed(&rng, seed);
    problem_fill_normal(in, &rng);
    if (kind == GH_IN_HUGE) {
        for (size_t i = 0; i < nq; i++) in->Q[i] = 4e4 + 2.5e4 * rng_uniform(&rng);
        for (size_t i = 0; i < nk; i++) in->K[i] = 4e4 + 2.5e4 * rng_uniform(&rng);
    } else if (kind == GH_IN_NEG900) {
        for (size_t i = 0; i < nq; i++) in->Q[i] = -900 * rng_uniform(&rng);
        for (size_t i = 0; i < nk; i++) in->K[i] = -900 * rng_uniform(&rng);
    } else if (kind == GH_IN_NEAR_NEG) {
        /* q = (a, x), k = (-a, y): softmax_scale q.k = -7.5e4 + a few units */
        double a = sqrt(7.5e4 / p->softmax_scale);
        for (size_t r = 0; r < nq / p->d; r++) in->Q[r * p->d] = a;
        for (size_t r = 0; r < nk / p->d; r++) in->K[r * p->d] = -a;
    }
    make_representable(in->Q, nq);
    make_representable(in->K, nk);
    make_representable(in->V, nk);
    make_representable(in->dO, nq);
    snprintf(in->source, sizeof in->source, "random %s, seed %llu", gh_input_name[kind],
             (unsigned long long)seed);
}

void gh_inputs_of_options(gh_inputs *in, const options *opt)
{
    load_problem(opt, in);
    in->kind = GH_IN_NORMAL;
}

void gh_inputs_real(gh_inputs *in, const options *opt, int left, int right, int seqlen_k)
{
    options o = *opt;
    o.given &= ~(opt_set)(OPT_N | OPT_D | OPT_BATCH | OPT_HEADS | OPT_RANDOM | OPT_MASKS | OPT_INPUTS | OPT_DO |
                           OPT_OUTPUTS);
    o.random = o.causal = false;
    o.q = o.k = o.v = o.dO = NULL;
    o.out = o.lse = o.dq = o.dk = o.dv = NULL;
    o.window_left = left;
    o.window_right = right;
    if (left >= 0 || right >= 0) o.given |= OPT_WINDOW;
    if (seqlen_k > 0) {
        o.seqlen_k = seqlen_k;
        o.given |= OPT_SEQLEN_K;
    }
    gh_inputs_of_options(in, &o);
}

void gh_describe(const attn_params *p, char *buf, size_t n)
{
    char mask[64] = "";
    if (attn_is_causal(p)) snprintf(mask, sizeof mask, ", causal");
    else if (attn_is_masked(p))
        snprintf(mask, sizeof mask, ", window (%d,%d)", p->window_size_left, p->window_size_right);
    snprintf(buf, n, "(B,H/H_kv,Sq,Sk,d) = (%d,%d/%d,%d,%d,%d)%s", p->B, p->H, p->H_kv, p->seqlen_q,
             p->seqlen_k, p->d, mask);
}

attn_params gh_tcase_params(const gh_tcase *c)
{
    attn_params p = {c->B, c->H, c->H_kv, c->Sq, c->Sk, c->d, 1.0 / sqrt((double)c->d), c->left, c->right};
    return p;
}

const gh_tcase gh_default_cases[2] = {{"", 2, 4, 4, 1000, 1000, 64, -1, -1, GH_IN_NORMAL},
                                      {"", 1, 4, 2, 1500, 1500, 128, -1, 0, GH_IN_NORMAL}};

const gh_tcase gh_size_cases[GH_SIZE_CASES] = {
    {"N=1", 1, 1, 1, 1, 1, 64, -1, -1, GH_IN_NORMAL},
    {"N=17", 1, 2, 2, 17, 17, 64, -1, -1, GH_IN_NORMAL},
    {"N=113", 1, 1, 1, 113, 113, 64, -1, -1, GH_IN_NORMAL},
    {"N=1023", 1, 1, 1, 1023, 1023, 64, -1, -1, GH_IN_NORMAL},
    {"N=4097", 1, 1, 1, 4097, 4097, 64, -1, -1, GH_IN_NORMAL},
    {"d=16", 1, 2, 2, 300, 300, 16, -1, -1, GH_IN_NORMAL},
    {"d=20", 2, 3, 3, 129, 129, 20, -1, -1, GH_IN_NORMAL},
    {"d=32", 1, 2, 2, 300, 300, 32, -1, -1, GH_IN_NORMAL},
    {"d=48", 1, 2, 2, 200, 200, 48, -1, -1, GH_IN_NORMAL},
    {"d=80", 1, 2, 2, 300, 300, 80, -1, -1, GH_IN_NORMAL},
    {"d=96", 1, 2, 2, 300, 300, 96, -1, -1, GH_IN_NORMAL},
    {"d=112", 1, 1, 1, 200, 200, 112, -1, -1, GH_IN_NORMAL},
    {"d=128", 1, 2, 2, 300, 300, 128, -1, -1, GH_IN_NORMAL},
    {"d=128 N=1023", 1, 1, 1, 1023, 1023, 128, -1, -1, GH_IN_NORMAL},
};

size_t gh_shared_cases(int sm_count, gh_tcase *out)
{
    const int big = sm_count + 18 + (sm_count % 2);   /* B H above the SM count, even */
    const gh_tcase cases[GH_SHARED_CASES] = {
        {"causal", 1, 2, 2, 300, 300, 64, -1, 0, GH_IN_NORMAL},
        {"causal Sq>Sk (rows that see no key)", 1, 2, 2, 200, 130, 64, -1, 0, GH_IN_NORMAL},
        {"causal Sq<Sk", 1, 2, 2, 100, 257, 32, -1, 0, GH_IN_NORMAL},
        {"window (32,32) Sq<Sk", 1, 2, 2, 300, 400, 64, 32, 32, GH_IN_NORMAL},
        {"window (10,5) Sq>Sk (rows that see no key)", 1, 2, 2, 300, 200, 48, 10, 5, GH_IN_NORMAL},
        {"GQA H=8 H_kv=2", 1, 8, 2, 200, 200, 64, -1, -1, GH_IN_NORMAL},
        {"B H > SMs", 2, big / 2, big / 2, 40, 40, 32, -1, -1, GH_IN_NORMAL},
        {"fault: huge logits", 1, 1, 1, 128, 128, 64, -1, -1, GH_IN_HUGE},
        {"fault: -900 U[0,1)", 1, 1, 1, 128, 128, 64, -1, -1, GH_IN_NEG900},
        {"fault: logits near -7.5e4", 1, 1, 1, 128, 128, 64, -1, -1, GH_IN_NEAR_NEG},
    };
    memcpy(out, cases, sizeof cases);
    return GH_SHARED_CASES;
}

int gh_judge(const char *who, const attn_params *p, gh_tensor t, const gh_err *e, double allowed, bool twice_v0,
             const double *got, const double *ref, char *why, size_t n)
{
    if (e->nonfinite == 0 && e->err <= allowed) return 0;
    if (e->nonfinite)
        snprintf(why, n, "%s: %zu non-finite %s entries (unwritten or NaN)", who, e->nonfinite, gh_tensor_name[t]);
    else
        snprintf(why, n, "%s err %s %.3g > %.3g%s", who, gh_tensor_name[t], e->err, allowed,
                 twice_v0 ? " (2 x v0 + u)" : "");
    gh_diagnose(who, p, t, got, ref, allowed * e->scale);
    return 1;
}

uint64_t gh_tests_seed(const char *stage, const char *program, const options *opt, const char *device)
{
    uint64_t seed = (opt->given & OPT_SEED) ? opt->seed : fresh_seed();
    printf("%s GPU tests on %s; seed %llu (replay: %s --sweep tests --seed %llu)\n", stage, device,
           (unsigned long long)seed, program, (unsigned long long)seed);
    return seed;
}

void gh_test_name(const char *stage, const char *what, const attn_params *p, char *buf, size_t n)
{
    char shape[128];
    gh_describe(p, shape, sizeof shape);
    snprintf(buf, n, "%s %s %s", stage, what, shape);
}

int gh_run_cases(const char *stage, const gh_tcase *cases, size_t n, uint64_t seed0, gh_case_fn fn, void *ctx)
{
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        attn_params p = gh_tcase_params(&cases[i]);
        gh_inputs in;
        gh_inputs_random(&in, &p, cases[i].kind, seed0 + i);
        char name[256];
        gh_test_name(stage, cases[i].what, &p, name, sizeof name);
        bad += fn(ctx, &in, name);
        gh_inputs_free(&in);
    }
    return bad;
}

/* ------------------------------------------------------------------------- */
/* The reference set and the rule                                             */
/* ------------------------------------------------------------------------- */

void gh_ref_compute(gh_ref *r, const attn_params *p, const double *Q, const double *K, const double *V,
                    const double *dO)
{
    memset(r, 0, sizeof *r);
    size_t nq = attn_q_numel(p), nk = attn_kv_numel(p);
    r->O = xmalloc(nq, sizeof(double), "O_ref");
    r->L = xmalloc(attn_rows(p), sizeof(double), "L_ref");
    if (dO) {
        r->dQ = xmalloc(nq, sizeof(double), "dQ_ref");
        r->dK = xmalloc(nk, sizeof(double), "dK_ref");
        r->dV = xmalloc(nk, sizeof(double), "dV_ref");
    }
    gh_reference(p, Q, K, V, dO, r->O, r->L, r->dQ, r->dK, r->dV);
    double mq = max_abs_finite(Q, nq), mk = max_abs_finite(K, nk), mv = max_abs_finite(V, nk);
    r->fallback[GH_O] = mv;
    if (dO) {
        double mo = max_abs_finite(dO, nq);
        r->fallback[GH_DQ] = p->softmax_scale * mo * mv * mk;
        r->fallback[GH_DK] = p->softmax_scale * mo * mv * mq;
        r->fallback[GH_DV] = mo;
    }
}

void gh_ref_free(gh_ref *r)
{
    free(r->O);
    free(r->L);
    free(r->dQ);
    free(r->dK);
    free(r->dV);
    memset(r, 0, sizeof *r);
}

int gh_each_dtype(const gh_inputs *in, const int *dtypes, int nd, bool grads, gh_dtype_fn fn, void *ctx)
{
    const attn_params *p = &in->params;
    const double *dO = grads ? in->dO : NULL;
    bool exact = gh_inputs_exact(in, dtypes, nd, grads);
    gh_ref shared;
    if (exact) gh_ref_compute(&shared, p, in->Q, in->K, in->V, dO);
    int bad = 0;
    for (int t = 0; t < nd; t++) {
        gh_problem g;
        gh_upload(&g, p, dtypes[t], in->Q, in->K, in->V, dO);
        gh_ref own;
        if (!exact) gh_ref_compute(&own, p, g.host[GH_Q], g.host[GH_K], g.host[GH_V], g.host[GH_DO]);
        bad += fn(ctx, in, &g, exact ? &shared : &own);
        if (!exact) gh_ref_free(&own);
        gh_free(&g);
    }
    if (exact) gh_ref_free(&shared);
    return bad;
}

double gh_allowed(int dtype, int version, double v0_err, double floor, bool fault, bool *twice_v0)
{
    double allowed = fault ? INFINITY : dtype == FA_FP32 ? 1e-5 : dtype == FA_FP16 ? 1e-2 : 5e-2;
    *twice_v0 = !fault && dtype != FA_FP32 && version != 0 && v0_err >= 0 && 2 * v0_err + floor < allowed;
    if (*twice_v0) allowed = 2 * v0_err + floor;
    return allowed;
}

/* Contiguous runs of true in flag[0..n), as "first-last, ..." (at most 8). */
static void ranges(const bool *flag, int n, char *buf, size_t len)
{
    size_t at = 0;
    int shown = 0;
    buf[0] = '\0';
    for (int first = 0; first < n; first++) {
        if (!flag[first]) continue;
        int last = first;
        while (last + 1 < n && flag[last + 1]) last++;
        if (shown++ == 8) {
            snprintf(buf + at, len - at, ", ...");
            return;
        }
        at += (size_t)snprintf(buf + at, len - at, last > first ? "%s%d-%d" : "%s%d", at ? ", " : "",
                               first, last);
        if (at >= len) return;
        first = last;
    }
}

//> gh-diagnose
void gh_diagnose(const char *who, const attn_params *p, gh_tensor t, const double *got, const double *ref,
                 double tol)
{
    bool kv = is_kv(t);
    int hp = kv ? p->H_kv : p->H, heads = p->B * hp, rows = kv ? p->seqlen_k : p->seqlen_q;
    int d = t == GH_L ? 1 : p->d;   /* L has one column */
    bool *bad_hr = xcalloc((size_t)heads * rows, 1, "bad rows"), *bad_c = xcalloc((size_t)d, 1, "bad cols");
    bool *bad_h = xcalloc((size_t)heads, 1, "bad heads");
    size_t n = 0, nonfinite = 0, worst_at = 0;
    double worst = -1;
    printf("# %s %s: ", who, gh_tensor_name[t]);
    for (size_t i = 0; i < (size_t)heads * rows * d; i++) {
        double e = fabs(got[i] - ref[i]);
        if (got[i] == ref[i]) e = 0;   /* L = -inf where the row sees no key */
        bool nf = !isfinite(got[i]) && e != 0;
        nonfinite += nf;
        if (!(e <= tol) || nf) {   /* NaN and infinities count, even against tol = inf */
            if (n < 3) {
                size_t hr = i / d;
                printf("%s[b%zu h%zu row %zu col %zu] got %.6g ref %.6g", n ? "; " : "",
                       hr / rows / hp, hr / rows % hp, hr % rows, i % d, got[i], ref[i]);
            }
            n++;
            bad_hr[i / d] = bad_c[i % d] = bad_h[i / d / rows] = true;
            if (!(e <= worst)) { worst = isnan(e) ? INFINITY : e; worst_at = i; }
        }
    }
    printf("\n#   %zu of %zu entries off by more than %.3g (non-finite: %zu); worst %.3g at "
           "[head %zu row %zu col %zu]\n", n, (size_t)heads * rows * d, tol, nonfinite, worst,
           worst_at / d / rows, worst_at / d % rows, worst_at % d);
    char buf[256];
    ranges(bad_h, heads, buf, sizeof buf);
    printf("#   heads (b H%s + h): %s\n", kv ? "_kv" : "", buf);
    for (int h = 0, shown = 0; h < heads && shown < 3; h++) {
        if (!bad_h[h]) continue;
        shown++;
        ranges(bad_hr + (size_t)h * rows, rows, buf, sizeof buf);
        printf("#   head %d rows: %s\n", h, buf);
    }
    ranges(bad_c, d, buf, sizeof buf);
    printf("#   columns: %s\n", buf);
    free(bad_hr);
    free(bad_c);
    free(bad_h);
}
//< gh-diagnose

/* ------------------------------------------------------------------------- */
/* The program's frame                                                        */
/* ------------------------------------------------------------------------- */

void gh_check_problem(int pass, const attn_params *p, const int *dtypes, int nd, const int *versions,
                      int nv, bool check)
{
    for (int t = 0; t < nd && check; t++)
        for (int i = 0; i < nv; i++)
            if (fa_check_problem(pass, versions[i], dtypes[t], p) != 0)
                fatal(EXIT_BAD_INPUT, "%s", fa_error_string());
    if ((double)p->seqlen_q * p->seqlen_k > 64e6)
        fatal(EXIT_BAD_INPUT, "seqlen_q %d, seqlen_k %d: the CPU reference builds seqlen_q x seqlen_k "
              "matrices; use seqlen_q seqlen_k <= 64e6 (N <= 8000)", p->seqlen_q, p->seqlen_k);
}

void gh_run_of_options(int pass, const options *opt, bool outputs, const char *output_flags, gh_inputs *in,
                       int *dtypes, int *nd, int *versions, int *nv)
{
    gh_select(pass, (opt->given & OPT_DTYPE) ? opt->dtype : NULL, opt->kernel, dtypes, nd, versions, nv);
    if (outputs && (*nv != 1 || *nd != 1))
        fatal(EXIT_BAD_INPUT, "%s write one run: give --kernel K and --dtype T", output_flags);
    /* Bad input is refused before looking for a GPU: files are read, the
     * problem checked against the chosen versions. */
    memset(in, 0, sizeof *in);
    gh_inputs_of_options(in, opt);
    gh_check_problem(pass, &in->params, dtypes, *nd, versions, *nv, opt->kernel >= 0);
}

bool gh_device(const char *stage, char *device, size_t n, int *sm_count)
{
    if (fa_device_count() == 0) {
        printf("%s: no CUDA GPU here; nothing to run (the GPU stages need one)\n", stage);
        return false;
    }
    if (fa_device_info(device, n, sm_count) != 0) fatal(EXIT_CHECK_FAILED, "%s", fa_error_string());
    return true;
}

FILE *gh_csv_open(const char *path, int argc, char **argv, const char *header)
{
    FILE *csv = csv_open(path, argc, argv, header);
    /* A copy of the tree without .git (the GPU machine) names its commit here. */
    if (getenv("FA_COMMIT")) fprintf(csv, "# source commit (FA_COMMIT): %s\n", getenv("FA_COMMIT"));
    return csv;
}

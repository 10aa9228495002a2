/*
 * fa_api.cu -- the library's entry points (fa_gpu.h): the table of versions
 * and the dispatch through it, the checks every version shares, the IO and
 * FLOP models' common parts, timing, the error state, runtime helpers.
 * Kernels live in their stage files; this file holds none.
 */
#include "gpu_common.cuh"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <algorithm>
#include <vector>

/* ------------------------------------------------------------------------- */
/* Errors                                                                    */
/* ------------------------------------------------------------------------- */
static char g_err[512] = "no error";

int fa_set_error(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_err, sizeof g_err, fmt, ap);
    va_end(ap);
    return code;
}
extern "C" const char *fa_error_string(void) { return g_err; }

static cublasHandle_t g_cublas = nullptr;
int fa_cublas(cublasHandle_t *h, cudaStream_t stream)
{
    if (!g_cublas) CUBLAS_TRY(cublasCreate(&g_cublas));
    CUBLAS_TRY(cublasSetStream(g_cublas, stream));
    *h = g_cublas;
    return FA_OK;
}

/* ------------------------------------------------------------------------- */
/* The table                                                                 */
/* ------------------------------------------------------------------------- */
static const fa_row *const g_rows[] = {
#define FA_ROW(x) &fa_row_##x,
#include "versions.def"
#undef FA_ROW
};
static const int g_nrows = (int)(sizeof g_rows / sizeof g_rows[0]);

static const fa_row *find_row(int pass, int version)
{
    for (int i = 0; i < g_nrows; i++)
        if (g_rows[i]->info.pass == pass && g_rows[i]->info.version == version) return g_rows[i];
    return nullptr;
}

extern "C" int fa_num_versions(int pass)
{
    int n = 0;
    for (int i = 0; i < g_nrows; i++) n += g_rows[i]->info.pass == pass;
    return n;
}
extern "C" int fa_version_limit(int pass)
{
    int n = 0;
    for (int i = 0; i < g_nrows; i++)
        if (g_rows[i]->info.pass == pass && g_rows[i]->info.version >= n) n = g_rows[i]->info.version + 1;
    return n;
}
extern "C" const fa_version_info *fa_version(int pass, int version)
{
    const fa_row *r = find_row(pass, version);
    return r ? &r->info : nullptr;
}

extern "C" size_t fa_dtype_bytes(int dtype) { return dtype == FA_FP32 ? 4 : 2; }
extern "C" const char *fa_dtype_name(int dtype)
{
    return dtype == FA_FP32 ? "fp32" : dtype == FA_FP16 ? "fp16" : dtype == FA_BF16 ? "bf16" : "?";
}
static const char *pass_name(int pass) { return pass == FA_FORWARD ? "forward" : "backward"; }

extern "C" int fa_check_problem(int pass, int version, int dtype, const attn_params *p)
{
    const fa_row *r = find_row(pass, version);
    if (!r) {
        int lo = 1 << 30, hi = -1;
        for (int i = 0; i < g_nrows; i++)
            if (g_rows[i]->info.pass == pass) {
                lo = std::min(lo, g_rows[i]->info.version);
                hi = std::max(hi, g_rows[i]->info.version);
            }
        return fa_set_error(FA_ERR_UNSUPPORTED, "the %s has no version %d: its versions are %d to %d",
                            pass_name(pass), version, lo, hi);
    }
    const fa_version_info *v = &r->info;
    if (dtype < FA_FP32 || dtype > FA_BF16)
        return fa_set_error(FA_ERR_UNSUPPORTED, "unknown dtype code %d", dtype);
    if (!(v->dtypes & FA_DT(dtype))) {
        char list[32] = "";
        for (int t = FA_FP32; t <= FA_BF16; t++)
            if (v->dtypes & FA_DT(t))
                snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", list[0] ? " or " : "",
                         fa_dtype_name(t));
        return fa_set_error(FA_ERR_UNSUPPORTED, "%s version %d takes %s, not %s", pass_name(pass),
                            v->version, list, fa_dtype_name(dtype));
    }
    char why[256];
    if (attn_params_check(p, why, sizeof why)) return fa_set_error(FA_ERR_UNSUPPORTED, "%s", why);
    if (p->d < v->d_min || p->d > v->d_max || p->d % v->d_multiple) {
        char step[48] = "";
        if (v->d_multiple > 1) snprintf(step, sizeof step, " in multiples of %d", v->d_multiple);
        return fa_set_error(FA_ERR_UNSUPPORTED, "%s version %d takes d = %d to %d%s, not d = %d",
                            pass_name(pass), v->version, v->d_min, v->d_max, step, p->d);
    }
    if (!v->masks && (attn_is_masked(p) || p->seqlen_q != p->seqlen_k || p->H_kv != p->H))
        return fa_set_error(FA_ERR_UNSUPPORTED,
                            "%s %s takes no mask, seqlen_q = seqlen_k and H_kv = H only",
                            pass_name(pass), v->name);
    if ((long long)p->B * p->H > 65535)
        return fa_set_error(FA_ERR_UNSUPPORTED, "B = %d, H = %d: need B H <= 65535", p->B, p->H);
    if (r->check) return r->check(dtype, p);
    return FA_OK;
}

extern "C" int fa_device_cc(void)
{
    int dev = 0, major = 0, minor = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return major * 10 + minor;
}

extern "C" int fa_check_supported(int pass, int version, int dtype, const attn_params *p)
{
    int rc = fa_check_problem(pass, version, dtype, p);
    if (rc) return rc;
    const fa_version_info *v = fa_version(pass, version);
    int cc = fa_device_cc();
    if (cc && cc < v->min_cc)
        return fa_set_error(FA_ERR_UNSUPPORTED, "%s version %d needs compute capability %d.%d, this GPU "
                            "has %d.%d", pass_name(pass), version, v->min_cc / 10, v->min_cc % 10, cc / 10,
                            cc % 10);
    /* Exact Hopper instructions (sm_90a) run on 9.0 only. */
    if (cc && v->min_cc == 90 && cc != 90)
        return fa_set_error(FA_ERR_UNSUPPORTED, "%s version %d is built for sm_90a (H100/H200) only, "
                            "this GPU has %d.%d", pass_name(pass), version, cc / 10, cc % 10);
    return FA_OK;
}

extern "C" size_t fa_workspace_bytes(int pass, int version, int dtype, const attn_params *p)
{
    const fa_row *r = find_row(pass, version);
    return r && r->workspace ? r->workspace(dtype, p) : 0;
}
extern "C" int fa_block_rows(int pass, int version, int d)
{
    const fa_row *r = find_row(pass, version);
    return r && r->block_rows ? r->block_rows(d) : 0;
}
extern "C" int fa_block_cols(int pass, int version, int d)
{
    const fa_row *r = find_row(pass, version);
    return r && r->block_cols ? r->block_cols(d) : 0;
}

extern "C" void fa_tiles(int pass, int version, const attn_params *p, int64_t *visited,
                         int64_t *skipped)
{
    int Br = fa_block_rows(pass, version, p->d), Bc = fa_block_cols(pass, version, p->d);
    *visited = *skipped = 0;
    if (!Br || !Bc) return;
    *visited = mask_tiles_visited(attn_mask_of(p), Br, Bc);
    int64_t all = (int64_t)((p->seqlen_q + Br - 1) / Br) * ((p->seqlen_k + Bc - 1) / Bc);
    *skipped = all - *visited;
}

extern "C" int fa_mask_fill(const attn_params *p, unsigned char *visible)
{
    char why[256];
    if (attn_mask_fill(p, visible, why, sizeof why)) return fa_set_error(FA_ERR_UNSUPPORTED, "%s", why);
    return FA_OK;
}

extern "C" double fa_model_bytes(int pass, int version, int dtype, const attn_params *p)
{
    const fa_row *r = find_row(pass, version);
    if (!r || !r->model_bytes) return 0;
    return r->model_bytes(dtype, p, fa_block_rows(pass, version, p->d),
                          fa_block_cols(pass, version, p->d));
}

/* Rows of the score matrix times the keys each sees, summed: the visible
 * (query, key) pairs of one head. */
static double visible_pairs(const attn_params *p)
{
    attn_mask m = attn_mask_of(p);
    if (!attn_is_masked(p)) return (double)p->seqlen_q * p->seqlen_k;
    double n = 0;
    for (int i = 0; i < p->seqlen_q; i++) {
        int lo = mask_key_first(m, i), hi = mask_key_last(m, i);
        if (hi >= lo) n += hi - lo + 1;
    }
    return n;
}

extern "C" double fa_flops(int pass, const attn_params *p)
{
    double pairs;
    if (attn_is_causal(p) && p->seqlen_q == p->seqlen_k)
        pairs = 0.5 * (double)p->seqlen_q * p->seqlen_k;   /* the papers' convention */
    else
        pairs = visible_pairs(p);
    double fwd = 4.0 * p->B * p->H * pairs * p->d;
    return pass == FA_FORWARD ? fwd : 2.5 * fwd;
}

/* The tiled forward's IO model (stage3_tiled.h's count in bytes): Q read
 * once by the query blocks that visit a key block (mask_query_rows_active;
 * a block whose rows see no key writes O = 0, L = -inf and reads nothing),
 * K and V once for each key block a query block visits (mask_key_rows_read),
 * O written once in the dtype, L once in fp32. With grouped heads each query
 * head reads its K/V head itself. */
double fa_model_tiled_forward(int dtype, const attn_params *p, int Br, int Bc)
{
    double es = (double)fa_dtype_bytes(dtype), bh = (double)p->B * p->H, d = p->d;
    attn_mask m = attn_mask_of(p);
    double q_rows = (double)mask_query_rows_active(m, Br), kv_rows = (double)mask_key_rows_read(m, Br, Bc);
    return bh * (es * ((q_rows + p->seqlen_q) * d + 2.0 * d * kv_rows) + 4.0 * p->seqlen_q);
}

extern "C" double fa_compulsory_bytes(int pass, int dtype, const attn_params *p)
{
    double es = (double)fa_dtype_bytes(dtype);
    double q = (double)attn_q_numel(p), kv = (double)attn_kv_numel(p), rows = (double)attn_rows(p);
    if (pass == FA_FORWARD) return es * (2 * q + 2 * kv) + 4 * rows;   /* Q, K, V in; O, L out */
    /* Q, K, V, O, dO, L in; dQ, dK, dV out */
    return es * (4 * q + 4 * kv) + 4 * rows;
}

/* ------------------------------------------------------------------------- */
/* Running a pass                                                            */
/* ------------------------------------------------------------------------- */
extern "C" void fa_strides_of(const attn_params *p, const fa_ptrs *x, fa_stride out[8])
{
    const fa_stride *given[8] = {&x->sq, &x->sk, &x->sv, &x->so, &x->sdo, &x->sdq, &x->sdk, &x->sdv};
    const int64_t d = p->d, rq = (int64_t)p->seqlen_q * d, rk = (int64_t)p->seqlen_k * d;
    const fa_stride cq = {p->H * rq, rq, d}, ck = {p->H_kv * rk, rk, d};
    /* q, k, v, o, do_, dq, dk, dv: which of the two shapes each has */
    static const int is_kv[8] = {0, 1, 1, 0, 0, 0, 1, 1};
    for (int i = 0; i < 8; i++) {
        const fa_stride *g = given[i];
        out[i] = (g->batch == 0 && g->head == 0 && g->row == 0) ? (is_kv[i] ? ck : cq) : *g;
    }
}

extern "C" int fa_strides_contiguous(const attn_params *p, const fa_ptrs *x)
{
    fa_stride s[8];
    fa_strides_of(p, x, s);
    const int64_t d = p->d, rq = (int64_t)p->seqlen_q * d, rk = (int64_t)p->seqlen_k * d;
    for (int i = 0; i < 8; i++) {
        const int kv = i == 1 || i == 2 || i == 6 || i == 7;
        const int64_t r = kv ? rk : rq, heads = kv ? p->H_kv : p->H;
        if (s[i].row != d || s[i].head != r || s[i].batch != heads * r) return 0;
    }
    return 1;
}

/* Strided versions read rows with 16-byte copies (TMA boxes, cp.async): each
 * stride a multiple of 16 bytes. The pointers' alignment is the caller's,
 * as for contiguous tensors. */
static int check_strides(const fa_row *r, int pass, int dtype, const attn_params *p, const fa_ptrs *x)
{
    if (fa_strides_contiguous(p, x)) return FA_OK;
    if (!r->info.strided)
        return fa_set_error(FA_ERR_UNSUPPORTED, "%s %s takes contiguous tensors only (strides given)",
                            pass_name(pass), r->info.name);
    fa_stride s[8];
    fa_strides_of(p, x, s);
    const int64_t per16 = 16 / (int64_t)fa_dtype_bytes(dtype);
    static const char *names[8] = {"q", "k", "v", "o", "do", "dq", "dk", "dv"};
    for (int i = 0; i < 8; i++)
        if (s[i].batch < 0 || s[i].head < 0 || s[i].row < p->d || s[i].batch % per16 ||
            s[i].head % per16 || s[i].row % per16)
            return fa_set_error(FA_ERR_UNSUPPORTED, "%s strides (batch %lld, head %lld, row %lld): "
                                "need rows of >= d elements and strides in multiples of 16 bytes",
                                names[i], (long long)s[i].batch, (long long)s[i].head, (long long)s[i].row);
    return FA_OK;
}

static int run_pass(int pass, int version, int dtype, const attn_params *p, const fa_ptrs *x,
                    int flags, void *stream)
{
    int rc = fa_check_problem(pass, version, dtype, p);
    if (rc) return rc;
    const fa_row *r = find_row(pass, version);
    size_t need = fa_workspace_bytes(pass, version, dtype, p);
    if (need && (!x->workspace || x->workspace_bytes < need))
        return fa_set_error(FA_ERR_UNSUPPORTED, "%s %s needs %zu bytes of workspace, got %zu",
                            pass_name(pass), r->info.name, need, x->workspace ? x->workspace_bytes : 0);
    if (flags & ~(FA_BWD_DETERMINISTIC | FA_BWD_CENTER_K | FA_BWD_CENTER_AUTO | FA_BWD_DQ_PASS))
        return fa_set_error(FA_ERR_UNSUPPORTED, "%s flags %#x: only FA_BWD_DETERMINISTIC (1), "
                            "FA_BWD_CENTER_K (2), FA_BWD_CENTER_AUTO (4) and FA_BWD_DQ_PASS (8) exist",
                            pass_name(pass), (unsigned)flags);
    if (flags & FA_BWD_DQ_PASS)   /* the pass runs on K_c: it implies the centering */
        flags = (flags & ~FA_BWD_CENTER_AUTO) | FA_BWD_CENTER_K;
    /* the auto mode decided here, from the version's measured rate (fa_gpu.h's rule) */
    if (flags & FA_BWD_CENTER_AUTO) {
        flags &= ~FA_BWD_CENTER_AUTO;
        if (pass == FA_BACKWARD && fa_bwd_center_auto(version, dtype, p))
            flags |= FA_BWD_CENTER_K;
    }
    if ((flags & FA_BWD_DETERMINISTIC) && !r->info.deterministic)
        return fa_set_error(FA_ERR_UNSUPPORTED, "%s version %d has no deterministic mode (FA_BWD_DETERMINISTIC)",
                            pass_name(pass), r->info.version);
    if ((rc = check_strides(r, pass, dtype, p, x))) return rc;
    return r->run(dtype, p, x, flags, (cudaStream_t)stream);
}

extern "C" int fa_forward(int version, int dtype, const attn_params *p, const fa_ptrs *x, void *stream)
{
    return run_pass(FA_FORWARD, version, dtype, p, x, 0, stream);
}
extern "C" int fa_backward(int version, int dtype, const attn_params *p, const fa_ptrs *x,
                           int flags, void *stream)
{
    return run_pass(FA_BACKWARD, version, dtype, p, x, flags, stream);
}

/* ------------------------------------------------------------------------- */
/* Variable lengths (fa_varlen, core/varlen.h)                               */
/* ------------------------------------------------------------------------- */
extern "C" int fa_varlen_check(const int32_t *cu_q, const int32_t *cu_k, int B, int total_q, int total_k,
                               int max_seqlen_q, int max_seqlen_k)
{
    char why[256];
    if (!cu_q || !cu_k) return fa_set_error(FA_ERR_UNSUPPORTED, "cu_seqlens: a NULL array");
    if (varlen_check(cu_q, cu_k, B, total_q, total_k, max_seqlen_q, max_seqlen_k, why, sizeof why))
        return fa_set_error(FA_ERR_UNSUPPORTED, "%s", why);
    return FA_OK;
}

extern "C" void fa_varlen_strides_of(const attn_params *p, const fa_ptrs *x, fa_stride out[8])
{
    const fa_stride *given[8] = {&x->sq, &x->sk, &x->sv, &x->so, &x->sdo, &x->sdq, &x->sdk, &x->sdv};
    const int64_t d = p->d;
    const fa_stride cq = {0, d, p->H * d}, ck = {0, d, p->H_kv * d};   /* packed (total, heads, d) */
    static const int is_kv[8] = {0, 1, 1, 0, 0, 0, 1, 1};
    for (int i = 0; i < 8; i++) {
        const fa_stride *g = given[i];
        out[i] = (g->batch == 0 && g->head == 0 && g->row == 0) ? (is_kv[i] ? ck : cq) : *g;
    }
}

/* The version's row, the problem (p's seqlen_q, seqlen_k the longest
 * sequences), the packed totals and the strides; no GPU needed. */
static int varlen_problem(int pass, int version, int dtype, const attn_params *p, const fa_varlen *vl,
                          const fa_ptrs *x, int flags)
{
    int rc = fa_check_problem(pass, version, dtype, p);
    if (rc) return rc;
    const fa_row *r = find_row(pass, version);
    if (!r->info.varlen || !r->run_varlen)
        return fa_set_error(FA_ERR_UNSUPPORTED, "%s version %d takes no variable lengths (cu_seqlens)",
                            pass_name(pass), version);
    if (!vl || !vl->cu_seqlens_q || !vl->cu_seqlens_k)
        return fa_set_error(FA_ERR_UNSUPPORTED, "varlen: cu_seqlens_q and cu_seqlens_k must be given");
    if (vl->total_q < p->seqlen_q || vl->total_k < p->seqlen_k)
        return fa_set_error(FA_ERR_UNSUPPORTED, "varlen: total_q %d, total_k %d: fewer rows than "
                            "max_seqlen_q %d, max_seqlen_k %d", vl->total_q, vl->total_k, p->seqlen_q,
                            p->seqlen_k);
    if ((long long)vl->total_q * p->H * p->d >= (1ll << 40) || (long long)vl->total_q + 2ll * p->B >= INT32_MAX)
        return fa_set_error(FA_ERR_UNSUPPORTED, "varlen: total_q %d: too many rows", vl->total_q);
    if (x) {
        fa_stride s[8];
        fa_varlen_strides_of(p, x, s);
        const int64_t per16 = 16 / (int64_t)fa_dtype_bytes(dtype);
        static const char *names[8] = {"q", "k", "v", "o", "do", "dq", "dk", "dv"};
        for (int i = 0; i < 8; i++)
            if (s[i].batch != 0 || s[i].head < 0 || s[i].row < p->d || s[i].head % per16 || s[i].row % per16)
                return fa_set_error(FA_ERR_UNSUPPORTED, "varlen %s strides (batch %lld, head %lld, row %lld): "
                                    "need batch 0, rows of >= d elements, strides in multiples of 16 bytes",
                                    names[i], (long long)s[i].batch, (long long)s[i].head, (long long)s[i].row);
    }
    if (r->check_varlen) return r->check_varlen(dtype, p, flags);
    return FA_OK;
}

extern "C" int fa_check_varlen(int pass, int version, int dtype, const attn_params *p, const fa_varlen *vl)
{
    int rc = varlen_problem(pass, version, dtype, p, vl, nullptr, 0);
    if (rc) return rc;
    return fa_check_supported(pass, version, dtype, p);
}

extern "C" size_t fa_workspace_bytes_varlen(int pass, int version, int dtype, const attn_params *p,
                                            const fa_varlen *vl)
{
    const fa_row *r = find_row(pass, version);
    return r && r->workspace_varlen && vl ? r->workspace_varlen(dtype, p, vl) : 0;
}

static int run_varlen_pass(int pass, int version, int dtype, const attn_params *p, const fa_varlen *vl,
                           const fa_ptrs *x, int flags, void *stream)
{
    if (pass == FA_BACKWARD && (flags & FA_BWD_DQ_PASS))
        return fa_set_error(FA_ERR_UNSUPPORTED, "FA_BWD_DQ_PASS (accurate_dq=\"full\") takes no variable lengths: "
                            "it centers K, whose mean would be per sequence");
    if ((flags & ~(FA_BWD_DETERMINISTIC | FA_BWD_CENTER_K | FA_BWD_CENTER_AUTO)) || (pass == FA_FORWARD && flags))
        return fa_set_error(FA_ERR_UNSUPPORTED, "%s flags %#x: only FA_BWD_DETERMINISTIC (1), FA_BWD_CENTER_K "
                            "(2) and FA_BWD_CENTER_AUTO (4) exist, for the backward", pass_name(pass),
                            (unsigned)flags);
    flags &= ~FA_BWD_CENTER_AUTO;   /* the auto mode keeps K as given here: c would be per sequence */
    int rc = varlen_problem(pass, version, dtype, p, vl, x, flags);
    if (rc) return rc;
    const fa_row *r = find_row(pass, version);
    if ((flags & FA_BWD_DETERMINISTIC) && !r->info.deterministic)
        return fa_set_error(FA_ERR_UNSUPPORTED, "%s version %d has no deterministic mode (FA_BWD_DETERMINISTIC)",
                            pass_name(pass), r->info.version);
    size_t need = fa_workspace_bytes_varlen(pass, version, dtype, p, vl);
    if (need && (!x->workspace || x->workspace_bytes < need))
        return fa_set_error(FA_ERR_UNSUPPORTED, "%s %s needs %zu bytes of workspace, got %zu",
                            pass_name(pass), r->info.name, need, x->workspace ? x->workspace_bytes : 0);
    fa_ptrs y = *x;   /* the strides resolved: the launchers read them as they are */
    fa_stride s[8];
    fa_varlen_strides_of(p, x, s);
    y.sq = s[0]; y.sk = s[1]; y.sv = s[2]; y.so = s[3]; y.sdo = s[4]; y.sdq = s[5]; y.sdk = s[6]; y.sdv = s[7];
    return r->run_varlen(dtype, p, vl, &y, flags, (cudaStream_t)stream);
}

extern "C" int fa_forward_varlen(int version, int dtype, const attn_params *p, const fa_varlen *vl,
                                 const fa_ptrs *x, void *stream)
{
    return run_varlen_pass(FA_FORWARD, version, dtype, p, vl, x, 0, stream);
}
extern "C" int fa_backward_varlen(int version, int dtype, const attn_params *p, const fa_varlen *vl,
                                  const fa_ptrs *x, int flags, void *stream)
{
    return run_varlen_pass(FA_BACKWARD, version, dtype, p, vl, x, flags, stream);
}

/* Overwrite the L2 with a buffer twice its size, so that the next run reads
 * its inputs from DRAM as a first touch would. */
static int flush_l2(cudaStream_t st)
{
    static void *buf = nullptr;
    static size_t bytes = 0;
    if (!buf) {
        int dev = 0, l2 = 0;
        CUDA_TRY(cudaGetDevice(&dev));
        CUDA_TRY(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
        bytes = 2 * (size_t)(l2 > 0 ? l2 : (64 << 20));
        CUDA_TRY(cudaMalloc(&buf, bytes));
    }
    CUDA_TRY(cudaMemsetAsync(buf, 0, bytes, st));
    return FA_OK;
}

/* NaN in every output of the pass, so an element a kernel forgets to write
 * cannot pass a check by accident. */
static int poison_outputs(int pass, int dtype, const attn_params *p, const fa_ptrs *x, cudaStream_t st)
{
    size_t es = fa_dtype_bytes(dtype);
    if (pass == FA_FORWARD) {
        CUDA_TRY(cudaMemsetAsync(x->o, 0xFF, attn_q_numel(p) * es, st));
        CUDA_TRY(cudaMemsetAsync(x->softmax_lse, 0xFF, attn_rows(p) * sizeof(float), st));
    } else {
        CUDA_TRY(cudaMemsetAsync(x->dq, 0xFF, attn_q_numel(p) * es, st));
        CUDA_TRY(cudaMemsetAsync(x->dk, 0xFF, attn_kv_numel(p) * es, st));
        CUDA_TRY(cudaMemsetAsync(x->dv, 0xFF, attn_kv_numel(p) * es, st));
    }
    return FA_OK;
}

extern "C" int fa_time(int pass, int version, int dtype, const attn_params *p, const fa_ptrs *sets,
                       int n_sets, int flags, int repeats, int flush, double *median_ms)
{
    cudaStream_t st = nullptr;
    cudaEvent_t e0, e1;
    CUDA_TRY(cudaEventCreate(&e0));
    CUDA_TRY(cudaEventCreate(&e1));
    std::vector<float> ms;
    int rc = FA_OK;
    for (int r = -1; r < repeats && rc == FA_OK; r++) {   /* r = -1: warm-up */
        const fa_ptrs *x = &sets[(r + 1) % (n_sets > 0 ? n_sets : 1)];
        if ((rc = poison_outputs(pass, dtype, p, x, st))) break;
        if (flush && (rc = flush_l2(st))) break;
        if (cudaEventRecord(e0, st) != cudaSuccess) { rc = fa_set_error(FA_ERR_CUDA, "cudaEventRecord failed"); break; }
        rc = run_pass(pass, version, dtype, p, x, flags, st);
        if (rc) break;
        if (cudaEventRecord(e1, st) != cudaSuccess || cudaEventSynchronize(e1) != cudaSuccess) {
            rc = fa_set_error(FA_ERR_CUDA, "timing %s %d: %s", pass_name(pass), version,
                              cudaGetErrorString(cudaGetLastError()));
            break;
        }
        float t = 0;
        cudaEventElapsedTime(&t, e0, e1);
        if (r >= 0) ms.push_back(t);
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    if (rc) return rc;
    std::sort(ms.begin(), ms.end());
    size_t n = ms.size();
    *median_ms = n == 0 ? 0 : (n % 2 ? ms[n / 2] : 0.5 * (ms[n / 2 - 1] + ms[n / 2]));
    return FA_OK;
}

/* ------------------------------------------------------------------------- */
/* Runtime helpers for the C host programs                                    */
/* ------------------------------------------------------------------------- */
extern "C" int fa_device_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return n;
}

extern "C" int fa_device_info(char *buf, size_t n, int *sm_count)
{
    cudaDeviceProp p;
    int dev = 0, drv = 0, rt = 0;
    CUDA_TRY(cudaGetDevice(&dev));
    CUDA_TRY(cudaGetDeviceProperties(&p, dev));
    CUDA_TRY(cudaDriverGetVersion(&drv));
    CUDA_TRY(cudaRuntimeGetVersion(&rt));
    snprintf(buf, n, "%s, cc %d.%d, %d SMs, %.0f MiB L2, CUDA driver %d.%d, runtime %d.%d",
             p.name, p.major, p.minor, p.multiProcessorCount, p.l2CacheSize / 1048576.0,
             drv / 1000, (drv % 1000) / 10, rt / 1000, (rt % 1000) / 10);
    if (sm_count) *sm_count = p.multiProcessorCount;
    return FA_OK;
}

extern "C" int fa_set_device(int device)
{
    CUDA_TRY(cudaSetDevice(device));
    return FA_OK;
}
extern "C" void *fa_malloc(size_t bytes)
{
    void *p = nullptr;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        fa_set_error(FA_ERR_CUDA, "cudaMalloc(%zu bytes): %s", bytes, cudaGetErrorString(e));
        (void)cudaGetLastError();
        return nullptr;
    }
    return p;
}
extern "C" void fa_free(void *p) { if (p) cudaFree(p); }
extern "C" int fa_copy_to_device(void *dst, const void *src, size_t bytes)
{
    CUDA_TRY(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
    return FA_OK;
}
extern "C" int fa_copy_to_host(void *dst, const void *src, size_t bytes)
{
    CUDA_TRY(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
    return FA_OK;
}
extern "C" int fa_poison(void *p, size_t bytes)
{
    CUDA_TRY(cudaMemset(p, 0xFF, bytes));
    return FA_OK;
}
extern "C" int fa_synchronize(void)
{
    CUDA_TRY(cudaDeviceSynchronize());
    CUDA_TRY(cudaGetLastError());
    return FA_OK;
}

__global__ void fa_marker_kernel(void) {}
extern "C" int fa_marker(int tag)
{
    fa_marker_kernel<<<tag > 0 ? tag : 1, 1>>>();
    LAUNCH_CHECK();
    return FA_OK;
}

/* ------------------------------------------------------------------------- */
/* Host conversions                                                          */
/* ------------------------------------------------------------------------- */
extern "C" void fa_host_from_double(void *dst, const double *src, size_t n, int dtype)
{
    for (size_t i = 0; i < n; i++) {
        if (dtype == FA_FP32) ((float *)dst)[i] = (float)src[i];
        else if (dtype == FA_FP16) ((__half *)dst)[i] = __double2half(src[i]);
        else ((__nv_bfloat16 *)dst)[i] = __double2bfloat16(src[i]);
    }
}

extern "C" void fa_host_to_double(double *dst, const void *src, size_t n, int dtype)
{
    for (size_t i = 0; i < n; i++) {
        if (dtype == FA_FP32) dst[i] = ((const float *)src)[i];
        else if (dtype == FA_FP16) dst[i] = __half2float(((const __half *)src)[i]);
        else dst[i] = __bfloat162float(((const __nv_bfloat16 *)src)[i]);
    }
}

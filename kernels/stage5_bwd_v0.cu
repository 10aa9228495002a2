/*
 * stage5_bwd_v0.cu -- backward version 0, the materialized baseline: S,
 * dP and dS of every head in fp32 in the workspace, P in the dtype, the
 * products by cuBLAS and two elementwise kernels (bwd-v0-probs) between
 * them; its launch (bwd-v0-launch), limits, IO model and row. The
 * equations, conventions and IO model of every version: stage5_backward.cuh.
 */
#include "stage5_backward.cuh"

#include <limits.h>

//> bwd-v0-probs
/* P = exp(S - L) where the mask lets query i see key j, 0 elsewhere; one
 * block per row of S (already scaled, fp32), P in the dtype. With grouped
 * heads the rows of one key/value head's query heads are consecutive, and
 * row r of the whole problem is query i = r mod seqlen_q. */
template <typename T>
__global__ void __launch_bounds__(256)
    bwd_v0_probs_kernel(const float *__restrict__ S, T *__restrict__ P, const float *__restrict__ L,
                        long long rows, int Sq, int Sk, attn_mask m, bool masked)
{
    for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
        int i = (int)(row % Sq);
        float l = lse_guard(L[row]);
        const float *s = S + row * Sk;
        T *p = P + row * Sk;
        for (int j = threadIdx.x; j < Sk; j += blockDim.x) {
            bool visible = !masked || mask_visible(m, i, j);
            p[j] = from_f<T>(visible ? expf(fminf(s[j] - l, 0.f)) : 0.f);
        }
    }
}

/* dS = P (dP - D) in place over dP (fp32), from the P the dV product used.
 * A zero P gives a zero dS even if dP is not finite (0 * inf is NaN). */
template <typename T>
__global__ void __launch_bounds__(256)
    bwd_v0_ds_kernel(float *__restrict__ dPdS, const T *__restrict__ P, const float *__restrict__ D,
                     long long rows, int Sk)
{
    for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
        float Di = D[row];
        float *x = dPdS + row * Sk;
        const T *p = P + row * Sk;
        for (int j = threadIdx.x; j < Sk; j += blockDim.x) {
            float pj = to_f(p[j]);
            x[j] = pj == 0.f ? 0.f : pj * (x[j] - Di);
        }
    }
}
//< bwd-v0-probs

static cudaDataType_t bwd_cuda_type(int dtype)
{
    return dtype == FA_FP32 ? CUDA_R_32F : dtype == FA_FP16 ? CUDA_R_16F : CUDA_R_16BF;
}

/* Version 0's workspace: S/dP/dS (fp32), P (dtype), D, and for fp16/bf16
 * fp32 copies of Q, K and fp32 dQ, dK for the two fp32 products. */
struct bwd_v0_ws {
    float *A;           /* (B, H, Sq, Sk): S, then dP, then dS */
    void *P;            /* (B, H, Sq, Sk) in the dtype */
    float *D;           /* (B, H, Sq) */
    float *Q32, *K32;   /* fp16/bf16 only */
    float *dQ32, *dK32;
    void *cen;          /* centering (bwd-center): bwd_center_bytes */
};
static size_t bwd_v0_ws_carve(int dtype, const attn_params *p, void *base, bwd_v0_ws *w)
{
    ws_carver c = {(char *)base, 0};
    size_t es = fa_dtype_bytes(dtype), sqk = attn_rows(p) * (size_t)p->seqlen_k;
    w->A = c.take<float>(sqk);
    w->P = c.take<char>(sqk * es);
    w->D = c.take<float>(attn_rows(p));
    w->Q32 = w->K32 = w->dQ32 = w->dK32 = nullptr;
    if (dtype != FA_FP32) {
        w->Q32 = c.take<float>(attn_q_numel(p));
        w->K32 = c.take<float>(attn_kv_numel(p));
        w->dQ32 = c.take<float>(attn_q_numel(p));
        w->dK32 = c.take<float>(attn_kv_numel(p));
    }
    w->cen = c.take<char>(bwd_center_bytes(dtype, p));
    return c.used;
}
static size_t bwd_v0_workspace(int dtype, const attn_params *p)
{
    bwd_v0_ws w;
    return bwd_v0_ws_carve(dtype, p, nullptr, &w);
}

//> bwd-v0-launch
/* Version 0. cuBLAS is column-major: a row-major (rows, cols) matrix is a
 * column-major cols x rows one. The g = H / H_kv query heads of one
 * key/value head are consecutive in Q, dO, dQ, so the M = g Sq rows of a
 * group are one matrix and one strided-batched call over the B H_kv groups
 * does each product; dV = P^T dO and dK = dS^T Q then sum over the group's
 * query heads inside the product. */
template <typename T>
static int bwd_v0_run_t(int dtype, const attn_params *p, const fa_ptrs *x, int flags, cudaStream_t st)
{
    bwd_v0_ws w;
    bwd_v0_ws_carve(dtype, p, x->workspace, &w);
    const int Sq = p->seqlen_q, Sk = p->seqlen_k, d = p->d, batch = p->B * p->H_kv;
    const int M = (p->H / p->H_kv) * Sq;
    const long long mk = (long long)M * Sk, md = (long long)M * d, kd = (long long)Sk * d;
    const long long rows = (long long)p->B * p->H * Sq;
    const T *Q = (const T *)x->q, *V = (const T *)x->v, *dO = (const T *)x->do_;
    T *P = (T *)w.P;
    cublasHandle_t h;
    if (int rc = fa_cublas(&h, st)) return rc;
    const cudaDataType_t t = bwd_cuda_type(dtype), f32 = CUDA_R_32F;
    const float scale = (float)p->softmax_scale, one = 1.f, zero = 0.f;
    const unsigned row_blocks = (unsigned)(rows < 1 << 30 ? rows : 1 << 30);
    const attn_mask m = attn_mask_of(p);

    /* K, L: x's, or K_c and L' when centered; version 0 takes contiguous
     * tensors only (fa_api.cu), as K_c is */
    const T *K;
    const float *L;
    fa_stride sk;
    if (int rc = bwd_prepass<T>(p, x, flags, w.D, w.cen, &K, &L, &sk, st)) return rc;
    /* FA_BWD_DQ_PASS: D from fp32 P and dP, for dK */
    if (flags & FA_BWD_DQ_PASS) {
        if (int rc = bwd_dq_pass_check(dtype, p, x)) return rc;
        if (int rc = bwd_dq_pass<T>(0, p, x, K, sk, L, w.D, st)) return rc;
    }
    /* S = softmax_scale Q K^T, fp32 out: a scaled logit beyond 65504 must
     * not become an fp16 infinity. */
    CUBLAS_TRY(cublasGemmStridedBatchedEx(h, CUBLAS_OP_T, CUBLAS_OP_N, Sk, M, d, &scale, K, t, d, kd,
                                          Q, t, d, md, &zero, w.A, f32, Sk, mk, batch,
                                          CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    bwd_v0_probs_kernel<T><<<row_blocks, 256, 0, st>>>(w.A, P, L, rows, Sq, Sk, m,
                                                       attn_is_masked(p));
    LAUNCH_CHECK();
    /* dV = P^T dO */
    CUBLAS_TRY(cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_T, d, Sk, M, &one, dO, t, d, md,
                                          P, t, Sk, mk, &zero, x->dv, t, d, kd, batch,
                                          CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    /* dP = dO V^T, fp32, over S */
    CUBLAS_TRY(cublasGemmStridedBatchedEx(h, CUBLAS_OP_T, CUBLAS_OP_N, Sk, M, d, &one, V, t, d, kd,
                                          dO, t, d, md, &zero, w.A, f32, Sk, mk, batch,
                                          CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    bwd_v0_ds_kernel<T><<<row_blocks, 256, 0, st>>>(w.A, P, w.D, rows, Sk);
    LAUNCH_CHECK();
    /* dQ = scale dS K and dK = scale dS^T Q with dS in fp32: cuBLAS takes
     * one type for both factors, so Q and K are widened to fp32 first. */
    const float *Q32 = (const float *)x->q, *K32 = (const float *)K;   /* K_c when centered */
    float *dQ32 = (float *)x->dq, *dK32 = (float *)x->dk;
    if (dtype != FA_FP32) {
        if (int rc = bwd_convert<T, float>(Q, w.Q32, attn_q_numel(p), st)) return rc;
        if (int rc = bwd_convert<T, float>(K, w.K32, attn_kv_numel(p), st)) return rc;
        Q32 = w.Q32; K32 = w.K32; dQ32 = w.dQ32; dK32 = w.dK32;
    }
    CUBLAS_TRY(cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_N, d, M, Sk, &scale, K32, f32, d,
                                          kd, w.A, f32, Sk, mk, &zero, dQ32, f32, d, md, batch,
                                          CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    CUBLAS_TRY(cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_T, d, Sk, M, &scale, Q32, f32, d,
                                          md, w.A, f32, Sk, mk, &zero, dK32, f32, d, kd, batch,
                                          CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    if (dtype != FA_FP32) {
        if (int rc = bwd_convert<float, T>(w.dQ32, (T *)x->dq, attn_q_numel(p), st)) return rc;
        if (int rc = bwd_convert<float, T>(w.dK32, (T *)x->dk, attn_kv_numel(p), st)) return rc;
    }
    /* P went through the dtype before dS: the pass's dQ replaces this one */
    if (flags & FA_BWD_DQ_PASS) return bwd_dq_pass<T>(1, p, x, K, sk, L, w.D, st);
    return FA_OK;
}
//< bwd-v0-launch

static int bwd_v0_run(int dtype, const attn_params *p, const fa_ptrs *x, int deterministic,
                      cudaStream_t st)
{
    /* cuBLAS's products and these kernels have a fixed order: deterministic
     * either way; only FA_BWD_CENTER_K is read */
    return fa_dispatch_dtype(dtype, [&](auto zero) {
        using T = decltype(zero);
        return bwd_v0_run_t<T>(dtype, p, x, deterministic, st);
    });
}

/* cuBLAS takes int sizes: the M = (H / H_kv) seqlen_q rows of a group. */
static int bwd_v0_check(int dtype, const attn_params *p)
{
    (void)dtype;
    if ((long long)(p->H / p->H_kv) * p->seqlen_q > INT_MAX)
        return fa_set_error(FA_ERR_UNSUPPORTED, "backward v0: (H / H_kv) seqlen_q = %lld rows "
                            "exceed cuBLAS's int sizes", (long long)(p->H / p->H_kv) * p->seqlen_q);
    return FA_OK;
}

/* The header's formula for version 0, term by term. */
static double bwd_v0_model(int dtype, const attn_params *p, int Br, int Bc)
{
    (void)Br; (void)Bc;
    double es = (double)fa_dtype_bytes(dtype), d = p->d, Sk = p->seqlen_k;
    double M = (double)(p->H / p->H_kv) * p->seqlen_q;
    double per = (28 + 3 * es) * M * Sk + es * (5 * M * d + 3 * Sk * d) + 12 * M;
    per += dtype == FA_FP32 ? 8 * M * d + 8 * Sk * d : (16 + 2 * es) * (M * d + Sk * d);
    return (double)p->B * p->H_kv * per;
}

/* The version's row of the table of versions (core/versions.def); one shape
 * with every row, as the forward's, and every field named. */
const fa_row fa_row_bwd_v0 = {.info = {.pass = FA_BACKWARD, .version = 0, .name = "v0",
    .what = "materialized (cuBLAS; S, dP, dS in fp32)", .dtypes = FA_DT(FA_FP32) | FA_DT(FA_FP16) | FA_DT(FA_BF16), .d_min = 1, .d_max = 1 << 20, .d_multiple = 1, .masks = 1, .deterministic = 1, .min_cc = 0, .slug = "materialized", .strided = 0},
    .run = bwd_v0_run, .check = bwd_v0_check, .workspace = bwd_v0_workspace, .block_rows = nullptr, .block_cols = nullptr, .model_bytes = bwd_v0_model};

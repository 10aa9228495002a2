/*
 * stage5_bwd_tiled.cu -- the launch around every tiled backward kernel
 * (versions 1, 2, 4; bwd-tiled-launch): the workspace (D, the fp32 dQ
 * accumulator, the deterministic mode's counters, the centering's piece),
 * the pre-pass, the zeroed accumulator, the version's kernel, the
 * post-pass into dQ; the same for packed sequences; and the tiled versions'
 * IO model (stage5_backward.cuh's header).
 */
#include "stage5_backward.cuh"

/* Workspace of the tiled versions: D, the fp32 dQ accumulator (fp16/bf16;
 * in fp32 dQ itself accumulates), the counters of the deterministic mode.
 * Every tiled version takes Br = BWD_TILED_BR = 64 query rows, which sizes
 * the counters. */
struct tiled_ws {
    float *D, *dq_acc;
    int *sem;
    void *cen;          /* centering (bwd-center): bwd_center_bytes */
};
/* sems: the counters' count, 0 for the dense problem's B H Tr (a varlen
 * call's p is the packed problem as one batch, packed_problem below) */
static size_t tiled_ws_carve(int dtype, const attn_params *p, void *base, tiled_ws *w, size_t sems = 0)
{
    ws_carver c = {(char *)base, 0};
    const size_t Tr = (size_t)(p->seqlen_q + BWD_TILED_BR - 1) / BWD_TILED_BR;
    w->D = c.take<float>(attn_rows(p));
    w->dq_acc = dtype == FA_FP32 ? nullptr : c.take<float>(attn_q_numel(p));
    w->sem = c.take<int>(sems ? sems : (size_t)p->B * p->H * Tr);
    w->cen = c.take<char>(bwd_center_bytes(dtype, p));
    return c.used;
}
size_t tiled_bwd_workspace(int dtype, const attn_params *p)
{
    tiled_ws w;
    return tiled_ws_carve(dtype, p, nullptr, &w);
}

/* Packed sequences: the rows of every sequence as one batch (B = 1,
 * seqlen = total), the shape D, the dQ accumulator and the post-pass see;
 * and the deterministic mode's counters, one per slot of core/varlen.h's
 * block map per query head. */
static attn_params packed_problem(const attn_params *p, const fa_varlen *vl)
{
    attn_params q = *p;
    q.B = 1;
    q.seqlen_q = vl->total_q;
    q.seqlen_k = vl->total_k;
    return q;
}
static size_t varlen_sems(const attn_params *p, const fa_varlen *vl)
{
    return (size_t)p->H * varlen_slots(vl->total_q, p->B, BWD_TILED_BR);
}
size_t tiled_bwd_workspace_varlen(int dtype, const attn_params *p, const fa_varlen *vl)
{
    tiled_ws w;
    const attn_params q = packed_problem(p, vl);
    return tiled_ws_carve(dtype, &q, nullptr, &w, varlen_sems(p, vl));
}

//> bwd-tiled-launch
template <typename T>
int tiled_backward(int dtype, const attn_params *p, const fa_ptrs *x, int deterministic, cudaStream_t st,
                   bwd_launch_fn<T> launch, bool ds16)
{
    return tiled_backward_vl<T>(dtype, p, nullptr, x, deterministic, st, launch, ds16);
}

/* (vl: packed sequences; the rows D, the accumulator and the post-pass
 * touch are those of the packed problem, pk; the kernel gets p and the
 * arrays) */
template <typename T>
int tiled_backward_vl(int dtype, const attn_params *p0, const fa_varlen *vl, const fa_ptrs *x, int deterministic,
                      cudaStream_t st, bwd_launch_fn<T> launch, bool ds16)
{
    if (vl && (bwd_centers(deterministic, p0) || (deterministic & FA_BWD_DQ_PASS)))
        return fa_set_error(FA_ERR_UNSUPPORTED, "FA_BWD_CENTER_K and FA_BWD_DQ_PASS (accurate_dq) take no "
                            "variable lengths: K's mean would be per sequence");
    const bool dq_pass = (deterministic & FA_BWD_DQ_PASS) != 0;
    if (dq_pass)
        if (int rc = bwd_dq_pass_check(dtype, p0, x)) return rc;
    const attn_params pk = vl ? packed_problem(p0, vl) : *p0;
    const attn_params *p = &pk;
    tiled_ws w;
    tiled_ws_carve(dtype, p, x->workspace, &w, vl ? varlen_sems(p0, vl) : 0);
    bwd_args<T> a;
    a.q = (const T *)x->q; a.k = (const T *)x->k; a.v = (const T *)x->v; a.dO = (const T *)x->do_;
    a.L = x->softmax_lse; a.D = w.D;
    a.dq_acc = dtype == FA_FP32 ? (float *)x->dq : w.dq_acc;
    a.dk = (T *)x->dk; a.dv = (T *)x->dv;
    a.sem = w.sem; a.deterministic = (deterministic & FA_BWD_DETERMINISTIC) != 0;
    a.a = fa_kargs_make(p0);   /* varlen: the longest sequences (the grid), the window */
    const size_t nq = attn_q_numel(p);
    fa_stride s[8];
    fa_strides_of(p, x, s);   /* (varlen: x's, resolved by fa_api.cu) */
    a.sq = s[0]; a.sv = s[2]; a.sdo = s[4]; a.sdk = s[6]; a.sdv = s[7];
    a.cu_q = vl ? vl->cu_seqlens_q : nullptr;
    a.cu_k = vl ? vl->cu_seqlens_k : nullptr;
    a.total_q = vl ? vl->total_q : 0;
    a.total_k = vl ? vl->total_k : 0;
    const long long Tr = (p0->seqlen_q + BWD_TILED_BR - 1) / BWD_TILED_BR;
    a.l_batch = vl ? 0 : (long long)p->H * p->seqlen_q;
    a.l_head = vl ? vl->total_q : p->seqlen_q;
    a.sem_batch = vl ? 0 : p->H * Tr;
    a.sem_head = vl ? (long long)varlen_slots(vl->total_q, p0->B, BWD_TILED_BR) : Tr;
    const size_t sems = vl ? varlen_sems(p0, vl) : (size_t)p->B * p->H * Tr;
    /* D; with K centered also a.k = K_c (contiguous), a.L = L' */
    if (int rc = bwd_prepass<T>(p, x, deterministic, w.D, w.cen, &a.k, &a.L, &a.sk, st)) return rc;
    /* FA_BWD_DQ_PASS: D from fp32 P and dP for the kernel, and (ds16) the
     * kernel's dQ replaced by the pass's instead of converted */
    if (dq_pass)
        if (int rc = bwd_dq_pass<T>(0, p, x, a.k, a.sk, a.L, w.D, st)) return rc;
    CUDA_TRY(cudaMemsetAsync(a.dq_acc, 0, nq * sizeof(float), st));
    if (a.deterministic) CUDA_TRY(cudaMemsetAsync(w.sem, 0, sems * sizeof(int), st));
    int rc = launch(a, p0->B, st);
    if (dq_pass && ds16 && rc == FA_OK) return bwd_dq_pass<T>(1, p, x, a.k, a.sk, a.L, w.D, st);
    if constexpr (!std::is_same<T, float>::value) {
        if (vl && rc == FA_OK) {
            /* the varlen kernels accumulate in the packed layout (total_q, H,
             * d): one conversion when dQ is packed too, else row by row, the
             * rows seen as (total_q, H, 1, d) */
            if (s[5].head == p->d && s[5].row == (int64_t)p->H * p->d) {
                rc = bwd_convert<float, T>(w.dq_acc, (T *)x->dq, nq, st);
            } else {
                attn_params pr = *p;
                pr.B = vl->total_q;
                pr.seqlen_q = 1;
                rc = bwd_convert_rows<T>(w.dq_acc, (T *)x->dq, &pr, fa_stride{s[5].row, s[5].head, p->d}, st);
            }
        } else if (rc == FA_OK && s[5].row == p->d && s[5].head == (int64_t)p->seqlen_q * p->d &&
            s[5].batch == (int64_t)p->H * p->seqlen_q * p->d)
            rc = bwd_convert<float, T>(w.dq_acc, (T *)x->dq, nq, st);
        else if (rc == FA_OK)   /* dQ strided: row by row */
            rc = bwd_convert_rows<T>(w.dq_acc, (T *)x->dq, p, s[5], st);
    }
    return rc;
}
//< bwd-tiled-launch
template int tiled_backward<float>(int, const attn_params *, const fa_ptrs *, int, cudaStream_t,
                                   bwd_launch_fn<float>, bool);
template int tiled_backward<__half>(int, const attn_params *, const fa_ptrs *, int, cudaStream_t,
                                    bwd_launch_fn<__half>, bool);
template int tiled_backward<__nv_bfloat16>(int, const attn_params *, const fa_ptrs *, int, cudaStream_t,
                                           bwd_launch_fn<__nv_bfloat16>, bool);
template int tiled_backward_vl<__half>(int, const attn_params *, const fa_varlen *, const fa_ptrs *, int,
                                       cudaStream_t, bwd_launch_fn<__half>, bool);
template int tiled_backward_vl<__nv_bfloat16>(int, const attn_params *, const fa_varlen *, const fa_ptrs *, int,
                                              cudaStream_t, bwd_launch_fn<__nv_bfloat16>, bool);

/* The header's formula for the tiled versions (1 to 4). Kr: rows of the
 * key blocks that some query sees (mask.h; the others only write zero dK,
 * dV). */
double tiled_bwd_model(int dtype, const attn_params *p, int Br, int Bc)
{
    const attn_mask m = attn_mask_of(p);
    double es = (double)fa_dtype_bytes(dtype), d = p->d, Sq = p->seqlen_q, Sk = p->seqlen_k;
    double R = (double)mask_query_rows_read(m, Br, Bc), Kr = (double)mask_key_rows_active(m, Bc);
    double per_q = es * 2 * Sq * d + 4 * Sq + 4 * Sq * d + R * (2 * es * d + 8 + 8 * d);
    if (dtype != FA_FP32) per_q += (4 + es) * Sq * d;
    double per_kv = 2 * es * Kr * d + 2 * es * Sk * d;
    return (double)p->B * (p->H * per_q + p->H_kv * per_kv);
}

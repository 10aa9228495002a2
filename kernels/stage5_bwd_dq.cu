/*
 * stage5_bwd_dq.cu -- dQ as accurate as an fp32 backward's, beside any
 * backward version (FA_BWD_DQ_PASS, core/fa_gpu.h;
 * chapters/21-gpu-backward.md).
 *
 * Every tiled backward rounds two things that reach dQ multiplied by K
 * (chapters/21-gpu-backward.md, "the error model"): D = rowsum(dO * O) is
 * formed from the O the forward wrote in 16 bits, and dS is rounded to 16
 * bits before the tensor-core product dQ = softmax_scale dS K. Centering K
 * (FA_BWD_CENTER_K) shrinks the factor; this pass removes both errors.
 * One thread block owns Br = 64 query rows of one head and walks every key
 * block the mask lets them see, twice:
 *
 *   phase 0 (before the version's kernel)
 *       S = Q K^T, dP = dO V^T (fp32 accumulators),
 *       P = exp(softmax_scale S - L),
 *       D_i = sum_j P_ij dP_ij          -- the softmax Jacobian's row term
 *                                          from fp32 P and dP, not from O
 *   phase 1 (after it, for a version that rounds dS, or P before dS:
 *            every version but 1, whose arithmetic is fp32)
 *       S, dP, P again, dS = P (dP - D) in fp32, split dS = hi + lo with
 *       hi = dS rounded to the dtype and lo = (dS - hi) rounded,
 *       dQ_i = softmax_scale sum_j (hi + lo)_ij K_j   -- two products on
 *                                          the tensor cores, fp32 sums
 *
 * so the version's own kernel computes dK and dV with this D, and its dQ
 * is replaced. Both phases run on what the version runs on: K_c and L'
 * when K is centered (FA_BWD_DQ_PASS implies FA_BWD_CENTER_K, since the
 * split leaves dS's error at u^2 |dS| and that still reaches dQ times |K|).
 * The products of 16-bit factors are exact in fp32; what is left is fp32
 * summation and lo's own rounding, 2^-16 of dS in bf16.
 *
 * Cost: phase 0 is two of the backward's five N^2 d products, phase 1 four
 * (S, dP, and dQ twice); the version's kernel still forms its own dQ, which
 * is then discarded. scripts/gpu/dq_accuracy.py measures the time (kind=time,
 * ms_dq_pass); chapters/21-gpu-backward.md states it. The pass is
 * deterministic: each block writes its own rows, in a fixed order of key
 * blocks.
 *
 * Layout: 4 warps, warp w owns query rows 16 w .. 16 w + 15 of the block;
 * Q_i and dO_i stay in shared memory, K_j and V_j in two cp.async stages.
 * Rows of every operand must start on 16 bytes (bwd_dq_pass_check).
 */
#include "stage5_backward.cuh"

/* What the pass reads and writes; strides in elements (fa_stride). */
template <typename T> struct dq_pass_args {
    const T *q, *k, *v, *dO;   /* k: K, or K_c when centered */
    const float *L;            /* (B, H, Sq): L, or L' when centered */
    float *D;                  /* (B, H, Sq): written by phase 0, read by phase 1 */
    T *dq;
    fa_kargs a;
    fa_stride sq, sk, sv, sdo, sdq;
};

template <int D> struct dqp_cfg {
    static constexpr int BR = 64, BC = 64, LD = D + 8;   /* rows padded as version 2's */
    static constexpr size_t smem_bytes() { return 2 * (size_t)(2 * BR + 4 * BC) * LD; }
};

//> bwd-dq-pass
/* x rounded to the dtype (hi) and what it leaves, rounded (lo): two
 * registers of A fragments whose sum is x to 2 u^2. */
template <typename T> __device__ __forceinline__ void split2(float x0, float x1, unsigned &hi, unsigned &lo)
{
    hi = pack2<T>(x0, x1);
    const float2 h = unpack2<T>(hi);
    lo = pack2<T>(x0 - h.x, x1 - h.y);
}

template <typename T, int D, int PHASE>
__global__ void __launch_bounds__(128) bwd_dq_pass_kernel(dq_pass_args<T> x)
{
    using C = dqp_cfg<D>;
    constexpr int BR = C::BR, BC = C::BC, LD = C::LD, KD = D / 16, NT = BC / 8, DT = D / 8;
    extern __shared__ uint4 smem_dqp[];
    T *Qs = reinterpret_cast<T *>(smem_dqp);   /* Br x LD */
    T *dOs = Qs + BR * LD;                     /* Br x LD */
    T *Ks = dOs + BR * LD;                     /* 2 stages of Bc x LD */
    T *Vs = Ks + 2 * BC * LD;                  /* 2 stages of Bc x LD */

    const fa_kargs &a = x.a;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int Sq = a.seqlen_q, Sk = a.seqlen_k;
    const int bh = blockIdx.y, b = bh / a.H, h = bh % a.H, hk = h / a.h_per_kv;
    const int i0 = blockIdx.x * BR, i1 = min(i0 + BR, Sq);
    const T *Qh = x.q + b * x.sq.batch + h * x.sq.head, *dOh = x.dO + b * x.sdo.batch + h * x.sdo.head;
    const T *Kh = x.k + b * x.sk.batch + hk * x.sk.head, *Vh = x.v + b * x.sv.batch + hk * x.sv.head;
    T *dQh = x.dq + b * x.sdq.batch + h * x.sdq.head;
    const size_t l0 = (size_t)bh * Sq;
    const int r0 = i0 + 16 * warp + g;   /* this lane's rows: r0 and r0 + 8 */

    float dsum[2] = {0.f, 0.f}, Dr[2] = {0.f, 0.f}, Lr[2];
    float dq[PHASE == 1 ? DT : 1][4];
#pragma unroll
    for (int c = 0; c < (PHASE == 1 ? DT : 1); c++) dq[c][0] = dq[c][1] = dq[c][2] = dq[c][3] = 0.f;
#pragma unroll
    for (int e = 0; e < 2; e++) {
        const int r = r0 + 8 * e;
        Lr[e] = r < Sq ? lse_guard(x.L[l0 + r]) : INFINITY;   /* +inf: P = 0, the row adds nothing */
        if (PHASE == 1 && r < Sq) Dr[e] = x.D[l0 + r];
    }

    int jb0, jb1;
    if (mask_key_blocks(a.mask, i0, i1, BC, &jb0, &jb1) > 0) {
        cp_async_rows<T, D, BR, LD, 128>(Qs, Qh, i0, Sq, x.sq.row);
        cp_async_rows<T, D, BR, LD, 128>(dOs, dOh, i0, Sq, x.sdo.row);
        cp_async_rows<T, D, BC, LD, 128>(Ks, Kh, jb0 * BC, Sk, x.sk.row);
        cp_async_rows<T, D, BC, LD, 128>(Vs, Vh, jb0 * BC, Sk, x.sv.row);
        cp_async_commit();
    } else {
        jb0 = jb1 = 0;   /* no row sees a key: D = 0, dQ = 0 */
    }
    for (int j = jb0; j < jb1; j++) {
        const int st = (j - jb0) & 1, j0 = j * BC;
        if (j + 1 < jb1) {   /* the next keys fly while these are used */
            cp_async_rows<T, D, BC, LD, 128>(Ks + (st ^ 1) * BC * LD, Kh, j0 + BC, Sk, x.sk.row);
            cp_async_rows<T, D, BC, LD, 128>(Vs + (st ^ 1) * BC * LD, Vh, j0 + BC, Sk, x.sv.row);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        const T *Kt = Ks + st * BC * LD, *Vt = Vs + st * BC * LD;

        /* S = Q_i K_j^T and dP = dO_i V_j^T for this warp's 16 rows */
        float s[NT][4], dp[NT][4];
#pragma unroll
        for (int n = 0; n < NT; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) s[n][e] = dp[n][e] = 0.f;
#pragma unroll
        for (int kd = 0; kd < KD; kd++) {
            unsigned qa[4], oa[4];
            const int ar = 16 * warp + (lane & 7) + ((lane >> 3) & 1) * 8, ac = kd * 16 + (lane >> 4) * 8;
            ldsm_x4(qa[0], qa[1], qa[2], qa[3], Qs + ar * LD + ac);
            ldsm_x4(oa[0], oa[1], oa[2], oa[3], dOs + ar * LD + ac);
#pragma unroll
            for (int n2 = 0; n2 < NT / 2; n2++) {
                const int br = n2 * 16 + (lane & 7) + (lane >> 4) * 8, bc = kd * 16 + ((lane >> 3) & 1) * 8;
                unsigned b0, b1, b2, b3;
                ldsm_x4(b0, b1, b2, b3, Kt + br * LD + bc);
                mma16816<T>(s[2 * n2], qa, b0, b1);
                mma16816<T>(s[2 * n2 + 1], qa, b2, b3);
                ldsm_x4(b0, b1, b2, b3, Vt + br * LD + bc);
                mma16816<T>(dp[2 * n2], oa, b0, b1);
                mma16816<T>(dp[2 * n2 + 1], oa, b2, b3);
            }
        }
        /* P (0 past seqlen_k and where the mask hides the key); then phase
         * 0 sums P dP per row, phase 1 forms dS in s's registers */
        const bool full = j0 + BC <= Sk && mask_tile_unmasked(a.mask, i0, i1, j0, j0 + BC);
#pragma unroll
        for (int n = 0; n < NT; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int r = e >> 1, row = r0 + 8 * r, col = j0 + n * 8 + 2 * t + (e & 1);
                float pv = ex2(bwd_exponent2(s[n][e], a.softmax_scale, Lr[r]));
                if (!full && (col >= Sk || !mask_visible(a.mask, row, col))) pv = 0.f;
                if constexpr (PHASE == 0) dsum[r] = fmaf(pv, dp[n][e], dsum[r]);
                else s[n][e] = pv * (dp[n][e] - Dr[r]);
            }
        if constexpr (PHASE == 1) {
            /* dQ_i += (hi + lo) K_j, 16 keys per step, K_j read transposed */
#pragma unroll
            for (int kk = 0; kk < BC / 16; kk++) {
                unsigned hi[4], lo[4];
                split2<T>(s[2 * kk][0], s[2 * kk][1], hi[0], lo[0]);
                split2<T>(s[2 * kk][2], s[2 * kk][3], hi[1], lo[1]);
                split2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1], hi[2], lo[2]);
                split2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3], hi[3], lo[3]);
#pragma unroll
                for (int c2 = 0; c2 < DT / 2; c2++) {
                    unsigned b0, b1, b2, b3;
                    ldsm_x4_t(b0, b1, b2, b3,
                              Kt + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * LD + c2 * 16 + (lane >> 4) * 8);
                    mma16816<T>(dq[2 * c2], hi, b0, b1);
                    mma16816<T>(dq[2 * c2], lo, b0, b1);
                    mma16816<T>(dq[2 * c2 + 1], hi, b2, b3);
                    mma16816<T>(dq[2 * c2 + 1], lo, b2, b3);
                }
            }
        }
        __syncthreads();   /* this stage is refilled on the next step */
    }

    /* the four lanes of a row hold its sums over their columns */
#pragma unroll
    for (int e = 0; e < 2; e++) {
        const int row = r0 + 8 * e;
        if constexpr (PHASE == 0) {
            float v = dsum[e];
            v += __shfl_xor_sync(0xffffffffu, v, 1);
            v += __shfl_xor_sync(0xffffffffu, v, 2);
            if (t == 0 && row < Sq) x.D[l0 + row] = v;
        } else if (row < Sq) {
            const float sc = a.softmax_scale;
#pragma unroll
            for (int c = 0; c < DT; c++)
                *reinterpret_cast<unsigned *>(dQh + row * x.sdq.row + c * 8 + 2 * t) =
                    pack2<T>(sc * dq[c][2 * e], sc * dq[c][2 * e + 1]);
        }
    }
}
//< bwd-dq-pass

/* core/fa_gpu.h: the bytes both phases move, the closed form of the
 * kernel's loads and stores (the model of stage5_backward.cuh's header, for
 * a forward-shaped pass). Per query head, with q_rows the rows of the
 * query blocks that see a key (their Q, dO are read) and kv_rows the key
 * rows read summed over those blocks (mask_key_rows_read), each phase reads
 * es d (2 q_rows + 2 kv_rows) bytes of Q, dO, K, V and 4 Sq of L; phase 0
 * writes D (4 Sq), phase 1 reads it and writes dQ (es Sq d). */
extern "C" double fa_bwd_dq_pass_bytes(int dtype, const attn_params *p)
{
    const double es = (double)fa_dtype_bytes(dtype), d = p->d, Sq = p->seqlen_q;
    const attn_mask m = attn_mask_of(p);
    const double q_rows = (double)mask_query_rows_active(m, dqp_cfg<64>::BR);
    const double kv_rows = (double)mask_key_rows_read(m, dqp_cfg<64>::BR, dqp_cfg<64>::BC);
    return (double)p->B * p->H * (2 * es * d * (2 * q_rows + 2 * kv_rows) + 16 * Sq + es * Sq * d);
}

extern "C" int fa_bwd_dq_pass_supported(int dtype, const attn_params *p)
{
    if (dtype == FA_FP32)
        return fa_set_error(FA_ERR_UNSUPPORTED, "FA_BWD_DQ_PASS (accurate_dq=\"full\") takes fp16 or bf16: "
                            "in fp32 neither O nor dS is rounded to 16 bits");
    if (p->d % 16 || p->d > 128)
        return fa_set_error(FA_ERR_UNSUPPORTED, "FA_BWD_DQ_PASS (accurate_dq=\"full\") takes a head dimension "
                            "that is a multiple of 16 up to 128, got %d", p->d);
    return FA_OK;
}

extern "C" int bwd_dq_pass_check(int dtype, const attn_params *p, const fa_ptrs *x)
{
    if (int rc = fa_bwd_dq_pass_supported(dtype, p)) return rc;
    fa_stride s[8];
    fa_strides_of(p, x, s);
    const void *ptr[5] = {x->q, x->k, x->v, x->do_, x->dq};
    const int at[5] = {0, 1, 2, 4, 5};
    for (int i = 0; i < 5; i++) {
        const fa_stride &z = s[at[i]];
        if (!aligned16(ptr[i]) || z.batch % 8 || z.head % 8 || z.row % 8)
            return fa_set_error(FA_ERR_UNSUPPORTED, "FA_BWD_DQ_PASS (accurate_dq=\"full\") needs rows of Q, K, V, "
                                "dO and dQ that start on 16 bytes");
    }
    return FA_OK;
}

template <typename T>
int bwd_dq_pass(int phase, const attn_params *p, const fa_ptrs *x, const T *K, fa_stride sk, const float *L,
                float *D, cudaStream_t st)
{
    if constexpr (std::is_same<T, float>::value) {
        (void)phase; (void)p; (void)x; (void)K; (void)sk; (void)L; (void)D; (void)st;
        return fa_set_error(FA_ERR_UNSUPPORTED, "FA_BWD_DQ_PASS takes fp16 or bf16");
    } else {
        fa_stride s[8];
        fa_strides_of(p, x, s);
        dq_pass_args<T> y;
        y.q = (const T *)x->q; y.k = K; y.v = (const T *)x->v; y.dO = (const T *)x->do_;
        y.L = L; y.D = D; y.dq = (T *)x->dq;
        y.a = fa_kargs_make(p);
        y.sq = s[0]; y.sk = sk; y.sv = s[2]; y.sdo = s[4]; y.sdq = s[5];
        const dim3 grid((p->seqlen_q + 63) / 64, p->B * p->H);
        if (grid.x == 0) return FA_OK;
        return bwd_dispatch_d16(p->d, [&](auto dc) -> int {
            constexpr int DD = decltype(dc)::value;
            const size_t smem = dqp_cfg<DD>::smem_bytes();
            auto kern = phase == 0 ? bwd_dq_pass_kernel<T, DD, 0> : bwd_dq_pass_kernel<T, DD, 1>;
            CUDA_TRY(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
            kern<<<grid, 128, smem, st>>>(y);
            LAUNCH_CHECK();
            return FA_OK;
        });
    }
}
#define BWD_DQ_PASS(T)                                                                                        \
    template int bwd_dq_pass<T>(int, const attn_params *, const fa_ptrs *, const T *, fa_stride, const float *, \
                                float *, cudaStream_t);
BWD_DQ_PASS(float)
BWD_DQ_PASS(__half)
BWD_DQ_PASS(__nv_bfloat16)

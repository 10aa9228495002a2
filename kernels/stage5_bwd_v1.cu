/*
 * stage5_bwd_v1.cu -- backward version 1: tiled on the CUDA cores, fp32
 * arithmetic. One block per (key block, key/value head) holds K_j, V_j in
 * shared memory and dK_j, dV_j in registers while it walks the query
 * blocks that see its keys; P and dS tiles in shared memory; dQ added into
 * the fp32 accumulator of tiled_backward (stage5_bwd_tiled.cu). The
 * equations, conventions and IO model: stage5_backward.cuh.
 */
#include "stage5_backward.cuh"

#define BWD_V1_BR 64   /* query rows per tile */

template <int D, int BC> struct bwd_v1_cfg {
    static constexpr int BR = BWD_V1_BR;
    static constexpr int LD = D + 4;     /* fp32 rows of K, V, Q, dO: float4-aligned, banks spread */
    static constexpr int LDP = BC + 4;   /* P tile, row-major BR x BC */
    static constexpr int LDT = BR + 4;   /* dS tile, transposed BC x BR */
    static constexpr size_t smem_bytes()
    {
        return sizeof(float) * (2 * (size_t)BC * LD + 2 * (size_t)BR * LD + (size_t)BR * LDP +
                                (size_t)BC * LDT + 2 * (size_t)BR);
    }
};

/* dQ_i's register tile is zeroed with the unrolled loops of the forward's
 * version 1 (stage4_fwd_v1.cu), deliberately: each chapter shows its kernel
 * whole. */
//> bwd-v1-kernel
/* One block of 256 threads per (key block j of Bc keys, key/value head);
 * thread (ty, tx), ty, tx = 0..15. Per query block i (Br = 64 rows) of each
 * query head of the group, the chapter's five steps on fp32 tiles:
 *   S, dP  rows 4 ty + r, keys tx + 16 k       (registers, as in the forward)
 *   P, dS  -> shared memory (P row-major, dS transposed)
 *   dV_j += P^T dO_i, dK_j += dS^T Q_i   keys NS ty + c, columns col(e)
 *                                        (registers for the whole block)
 *   dQ_i += dS K_j                       rows 4 ty + r, columns col(e), added
 *                                        to the fp32 accumulator
 * D = head dimension rounded up to a template size, NS = Bc / 16, NO = D / 16
 * columns per thread: 64 (e / 4) + 4 tx + e % 4 when NO % 4 == 0 (float4
 * rows), else NO tx + e. */
template <typename T, int D, int BC>
__global__ void __launch_bounds__(256) bwd_v1_kernel(bwd_args<T> x, bool vec)
{
    using C = bwd_v1_cfg<D, BC>;
    constexpr int BR = C::BR, LD = C::LD, LDP = C::LDP, LDT = C::LDT;
    constexpr int NS = BC / 16, NO = D / 16;
    extern __shared__ float4 smem_bwd1[];
    float *Ks = reinterpret_cast<float *>(smem_bwd1);   /* Bc x LD */
    float *Vs = Ks + BC * LD;                            /* Bc x LD */
    float *Qs = Vs + BC * LD;                            /* Br x LD */
    float *dOs = Qs + BR * LD;                           /* Br x LD */
    float *Ps = dOs + BR * LD;                           /* Br x LDP */
    float *dSt = Ps + BR * LDP;                          /* Bc x LDT */
    float *Ls = dSt + BC * LDT;                          /* Br */
    float *Ds = Ls + BR;                                 /* Br */

    const fa_kargs &a = x.a;
    const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
    const int Sq = a.seqlen_q, Sk = a.seqlen_k, d = a.d;
    const int jb = blockIdx.x, j0 = jb * BC, j1 = min(j0 + BC, Sk);
    const int bkv = blockIdx.y, b = bkv / a.H_kv, hk = bkv % a.H_kv;
    const int Tr = (Sq + BR - 1) / BR;
    auto col = [&](int e) { return NO % 4 == 0 ? 64 * (e / 4) + 4 * tx + (e % 4) : NO * tx + e; };

    float dk[NS][NO], dv[NS][NO];
#pragma unroll
    for (int c = 0; c < NS; c++)
#pragma unroll
        for (int e = 0; e < NO; e++) dk[c][e] = dv[c][e] = 0.f;

    int ib_begin, ib_end;
    if (mask_query_blocks(a.mask, j0, j1, BR, &ib_begin, &ib_end) > 0) {
        load_rows_f32<T, D, BC>(Ks, LD, x.k + (size_t)bkv * Sk * d, j0, Sk, d, vec, 1.f);
        load_rows_f32<T, D, BC>(Vs, LD, x.v + (size_t)bkv * Sk * d, j0, Sk, d, vec, 1.f);
        for (int gi = 0; gi < a.h_per_kv; gi++) {
            const int bh = b * a.H + hk * a.h_per_kv + gi;
            for (int ib = ib_begin; ib < ib_end; ib++) {
                const int i0 = ib * BR, i1 = min(i0 + BR, Sq);
                __syncthreads();   /* the previous tile's Q, dO, P, dS are no longer read */
                load_rows_f32<T, D, BR>(Qs, LD, x.q + (size_t)bh * Sq * d, i0, Sq, d, vec, 1.f);
                load_rows_f32<T, D, BR>(dOs, LD, x.dO + (size_t)bh * Sq * d, i0, Sq, d, vec, 1.f);
                if (threadIdx.x < BR) {
                    int i = i0 + threadIdx.x;
                    Ls[threadIdx.x] = i < Sq ? lse_guard(x.L[(size_t)bh * Sq + i]) : INFINITY;
                    Ds[threadIdx.x] = i < Sq ? x.D[(size_t)bh * Sq + i] : 0.f;
                }
                __syncthreads();

                /* S = Q_i K_j^T and dP = dO_i V_j^T, 4 dimensions per step */
                float s[4][NS], dp[4][NS];
#pragma unroll
                for (int r = 0; r < 4; r++)
#pragma unroll
                    for (int k = 0; k < NS; k++) s[r][k] = dp[r][k] = 0.f;
#pragma unroll 2
                for (int e = 0; e < D; e += 4) {
                    float4 q[4], o[4], kk[NS], vv[NS];
#pragma unroll
                    for (int r = 0; r < 4; r++) {
                        q[r] = *reinterpret_cast<const float4 *>(Qs + (4 * ty + r) * LD + e);
                        o[r] = *reinterpret_cast<const float4 *>(dOs + (4 * ty + r) * LD + e);
                    }
#pragma unroll
                    for (int k = 0; k < NS; k++) {
                        kk[k] = *reinterpret_cast<const float4 *>(Ks + (tx + 16 * k) * LD + e);
                        vv[k] = *reinterpret_cast<const float4 *>(Vs + (tx + 16 * k) * LD + e);
                    }
#pragma unroll
                    for (int r = 0; r < 4; r++)
#pragma unroll
                        for (int k = 0; k < NS; k++) {
                            s[r][k] = fmaf(q[r].x, kk[k].x, fmaf(q[r].y, kk[k].y,
                                      fmaf(q[r].z, kk[k].z, fmaf(q[r].w, kk[k].w, s[r][k]))));
                            dp[r][k] = fmaf(o[r].x, vv[k].x, fmaf(o[r].y, vv[k].y,
                                       fmaf(o[r].z, vv[k].z, fmaf(o[r].w, vv[k].w, dp[r][k]))));
                        }
                }
                /* P = exp(S - L), masked per element only on partial tiles;
                 * dS = P (dP - D). */
                const bool full = i1 - i0 == BR && j1 - j0 == BC &&
                                  mask_tile_unmasked(a.mask, i0, i1, j0, j1);
#pragma unroll
                for (int r = 0; r < 4; r++)
#pragma unroll
                    for (int k = 0; k < NS; k++) {
                        const int rr = 4 * ty + r, cc = tx + 16 * k;
                        float p = exp2f(bwd_exponent2(s[r][k], a.softmax_scale, Ls[rr]));
                        if (!full && !(i0 + rr < Sq && j0 + cc < Sk && mask_visible(a.mask, i0 + rr, j0 + cc)))
                            p = 0.f;
                        Ps[rr * LDP + cc] = p;
                        dSt[cc * LDT + rr] = p * (dp[r][k] - Ds[rr]);
                    }
                __syncthreads();

                /* dV_j += P^T dO_i, dK_j += dS^T Q_i: keys NS ty + c */
#pragma unroll 4
                for (int r = 0; r < BR; r++) {
                    float pv[NS], sv[NS], orow[NO], qrow[NO];
#pragma unroll
                    for (int c = 0; c < NS; c++) {
                        pv[c] = Ps[r * LDP + NS * ty + c];
                        sv[c] = dSt[(NS * ty + c) * LDT + r];
                    }
#pragma unroll
                    for (int e = 0; e < NO; e++) {
                        orow[e] = dOs[r * LD + col(e)];
                        qrow[e] = Qs[r * LD + col(e)];
                    }
#pragma unroll
                    for (int c = 0; c < NS; c++)
#pragma unroll
                        for (int e = 0; e < NO; e++) {
                            dv[c][e] = fmaf(pv[c], orow[e], dv[c][e]);
                            dk[c][e] = fmaf(sv[c], qrow[e], dk[c][e]);
                        }
                }

                /* dQ_i += dS K_j: rows 4 ty + r */
                float dq[4][NO];
#pragma unroll
                for (int r = 0; r < 4; r++)
#pragma unroll
                    for (int e = 0; e < NO; e++) dq[r][e] = 0.f;
#pragma unroll 4
                for (int c = 0; c < BC; c++) {
                    float4 sc = *reinterpret_cast<const float4 *>(dSt + c * LDT + 4 * ty);
                    float krow[NO];
#pragma unroll
                    for (int e = 0; e < NO; e++) krow[e] = Ks[c * LD + col(e)];
#pragma unroll
                    for (int e = 0; e < NO; e++) {
                        dq[0][e] = fmaf(sc.x, krow[e], dq[0][e]);
                        dq[1][e] = fmaf(sc.y, krow[e], dq[1][e]);
                        dq[2][e] = fmaf(sc.z, krow[e], dq[2][e]);
                        dq[3][e] = fmaf(sc.w, krow[e], dq[3][e]);
                    }
                }
                const bool ordered = x.deterministic;
                int *sem = x.sem + (size_t)bh * Tr + ib;
                if (ordered) dq_turn_wait(sem, dq_turn(a.mask, i0, i1, BC, jb));
                float *acc = x.dq_acc + (size_t)bh * Sq * d;
#pragma unroll
                for (int r = 0; r < 4; r++) {
                    const int i = i0 + 4 * ty + r;
                    if (i >= Sq) continue;
#pragma unroll
                    for (int e = 0; e < NO; e++)
                        if (col(e) < d) dq_add(acc + (size_t)i * d + col(e), a.softmax_scale * dq[r][e], ordered);
                }
                if (ordered) dq_turn_pass(sem);
            }
        }
    }
    /* dK_j = softmax_scale dS^T Q summed, dV_j; zero rows for keys nobody sees */
#pragma unroll
    for (int c = 0; c < NS; c++) {
        const int j = j0 + NS * ty + c;
        if (j >= Sk) continue;
#pragma unroll
        for (int e = 0; e < NO; e++)
            if (col(e) < d) {
                x.dk[((size_t)bkv * Sk + j) * d + col(e)] = from_f<T>(a.softmax_scale * dk[c][e]);
                x.dv[((size_t)bkv * Sk + j) * d + col(e)] = from_f<T>(dv[c][e]);
            }
    }
}
//< bwd-v1-kernel

static int bwd_v1_block_rows(int d) { (void)d; return BWD_V1_BR; }
static int bwd_v1_block_cols(int d) { return d > 64 ? 32 : 64; }

template <typename T, int D>
static int bwd_v1_launch_d(const bwd_args<T> &x, dim3 grid, bool vec, cudaStream_t st)
{
    constexpr int BC = D > 64 ? 32 : 64;
    const size_t smem = bwd_v1_cfg<D, BC>::smem_bytes();
    /* Above 48 KB a kernel must ask for its dynamic shared memory. */
    CUDA_TRY(cudaFuncSetAttribute(bwd_v1_kernel<T, D, BC>,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    bwd_v1_kernel<T, D, BC><<<grid, 256, smem, st>>>(x, vec);
    LAUNCH_CHECK();
    return FA_OK;
}

template <typename T>
static int bwd_v1_launch(const bwd_args<T> &x, int B, cudaStream_t st)
{
    const int d = x.a.d, Bc = bwd_v1_block_cols(d);
    const dim3 grid((x.a.seqlen_k + Bc - 1) / Bc, (unsigned)(B * x.a.H_kv));
    const bool vec = d % vec16<T>::n == 0 && aligned16(x.q) && aligned16(x.k) && aligned16(x.v) &&
                     aligned16(x.dO);
    if (d <= 16) return bwd_v1_launch_d<T, 16>(x, grid, vec, st);
    if (d <= 32) return bwd_v1_launch_d<T, 32>(x, grid, vec, st);
    if (d <= 64) return bwd_v1_launch_d<T, 64>(x, grid, vec, st);
    if (d <= 80) return bwd_v1_launch_d<T, 80>(x, grid, vec, st);
    if (d <= 96) return bwd_v1_launch_d<T, 96>(x, grid, vec, st);
    return bwd_v1_launch_d<T, 128>(x, grid, vec, st);
}

static_assert(BWD_V1_BR == BWD_TILED_BR, "the deterministic mode's counters are per BWD_TILED_BR query rows");

static int bwd_v1_run(int dtype, const attn_params *p, const fa_ptrs *x, int deterministic,
                      cudaStream_t st)
{
    return fa_dispatch_dtype(dtype, [&](auto zero) {
        using T = decltype(zero);
        return tiled_backward<T>(dtype, p, x, deterministic, st, bwd_v1_launch<T>, false);
    });
}

/* The version's row of the table of versions (core/versions.def); one shape
 * with every row, as the forward's, and every field named. */
const fa_row fa_row_bwd_v1 = {.info = {.pass = FA_BACKWARD, .version = 1, .name = "v1",
    .what = "tiled (smem tiles, fp32 CUDA cores, dQ atomics)", .dtypes = FA_DT(FA_FP32) | FA_DT(FA_FP16) | FA_DT(FA_BF16), .d_min = 16, .d_max = 128, .d_multiple = 1, .masks = 1, .deterministic = 1, .min_cc = 0, .slug = "tiled", .strided = 0},
    .run = bwd_v1_run, .check = nullptr, .workspace = tiled_bwd_workspace, .block_rows = bwd_v1_block_rows, .block_cols = bwd_v1_block_cols, .model_bytes = tiled_bwd_model};

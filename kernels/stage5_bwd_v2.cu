/*
 * stage5_bwd_v2.cu -- backward version 2: version 1's schedule on the
 * tensor cores (FlashAttention-2's backward): mma.sync m16n8k16 for the five
 * products, S^T and dP^T in registers, only dS through shared memory (for
 * dQ); Q_i, dO_i tiles double-buffered with cp.async; fp16/bf16. The
 * fragment helpers and steps 1-5 it shares with version 4
 * (stage5_bwd_v4.cu) are in stage5_backward.cuh; the equations, conventions
 * and IO model too.
 */
#include "stage5_backward.cuh"

/* Tiles of Br = 64 query rows and Bc = 64 keys; 4 warps, warp w owns keys
 * 16 w .. 16 w + 15 of the block (its rows of dK_j, dV_j live in its
 * registers). Shared memory (16-bit elements, rows padded by 8 elements so
 * the 8 rows one ldmatrix reads fall in 8 different bank groups): K_j, V_j,
 * two stages of Q_i and dO_i, the dS^T tile, two stages of L_i and D_i; at
 * d = 128 112 KiB, so that two blocks share an SM. */
template <int D> struct bwd_v2_cfg {
    static constexpr int BR = 64, BC = 64, NT = 128;
    static constexpr int LD = D + 8;        /* row stride of K, V, Q, dO tiles */
    static constexpr int LDS = BR + 8;      /* row stride of the dS^T tile */
    static constexpr bool KVREG = D <= 64;  /* K_j, V_j held as A fragments in registers */
    static constexpr size_t smem_bytes()
    {
        return 2 * ((2 * (size_t)BC + 4 * (size_t)BR) * LD + (size_t)BC * LDS) + 4 * 4 * (size_t)BR;
    }
};

/* Deliberate copy: version 4 (stage5_bwd_v4.cu) writes this kernel's
 * two-stage pipeline out again beside its own steps, so that
 * chapters/21-gpu-backward.md can set the two listings side by side. */
//> bwd-v2-kernel
template <typename T, int D>
__global__ void __launch_bounds__(128, 2) bwd_v2_kernel(bwd_args<T> x)
{
    using C = bwd_v2_cfg<D>;
    constexpr int BR = C::BR, BC = C::BC, LD = C::LD, LDS = C::LDS, DT = D / 8, KD = D / 16;
    constexpr bool KVREG = C::KVREG;
    extern __shared__ uint4 smem_bwd2[];
    T *Ks = reinterpret_cast<T *>(smem_bwd2);   /* Bc x LD */
    T *Vs = Ks + BC * LD;                       /* Bc x LD */
    T *Qs = Vs + BC * LD;                       /* 2 stages of Br x LD */
    T *dOs = Qs + 2 * BR * LD;                  /* 2 stages of Br x LD */
    T *dSs = dOs + 2 * BR * LD;                 /* Bc x LDS: dS^T, [key][query] */
    float *Ls = reinterpret_cast<float *>(dSs + BC * LDS);   /* 2 stages of Br */
    float *Ds = Ls + 2 * BR;                                 /* 2 stages of Br */

    const fa_kargs &a = x.a;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int Sq = a.seqlen_q, Sk = a.seqlen_k;
    const int jb = blockIdx.x, j0 = jb * BC, j1 = min(j0 + BC, Sk);
    const int bkv = blockIdx.y, b = bkv / a.H_kv, hk = bkv % a.H_kv;
    const int Tr = (Sq + BR - 1) / BR;
    const T *Kh = x.k + (size_t)bkv * Sk * D, *Vh = x.v + (size_t)bkv * Sk * D;

    /* The steps: every query block that sees this key block (mask.h), for
     * each query head of the group. */
    int ib_begin, ib_end;
    const int nq = mask_query_blocks(a.mask, j0, j1, BR, &ib_begin, &ib_end);
    const int steps = nq * a.h_per_kv;
    auto head_of = [&](int s) { return b * a.H + hk * a.h_per_kv + s / nq; };
    auto block_of = [&](int s) { return ib_begin + s % nq; };
    auto load_step = [&](int s, int stage) {   /* Q_i, dO_i by cp.async; L_i, D_i by plain loads */
        const int bh = head_of(s), i0 = block_of(s) * BR;
        cp_async_rows<T, D, BR, LD, 128>(Qs + stage * BR * LD, x.q + (size_t)bh * Sq * D, i0, Sq);
        cp_async_rows<T, D, BR, LD, 128>(dOs + stage * BR * LD, x.dO + (size_t)bh * Sq * D, i0, Sq);
        const int r = threadIdx.x & (BR - 1), i = i0 + r;
        if (threadIdx.x < BR) Ls[stage * BR + r] = i < Sq ? lse_guard(x.L[(size_t)bh * Sq + i]) : INFINITY;
        else Ds[stage * BR + r] = i < Sq ? x.D[(size_t)bh * Sq + i] : 0.f;
    };

    float dk[DT][4], dv[DT][4];
#pragma unroll
    for (int c = 0; c < DT; c++)
#pragma unroll
        for (int e = 0; e < 4; e++) dk[c][e] = dv[c][e] = 0.f;
    unsigned kf[KVREG ? KD : 1][4], vf[KVREG ? KD : 1][4];

    if (steps > 0) {
        cp_async_rows<T, D, BC, LD, 128>(Ks, Kh, j0, Sk);
        cp_async_rows<T, D, BC, LD, 128>(Vs, Vh, j0, Sk);
        load_step(0, 0);
        cp_async_commit();
    }
    for (int s = 0; s < steps; s++) {
        const int stage = s & 1;
        if (s + 1 < steps) {   /* the next step's tiles fly while this one computes */
            load_step(s + 1, stage ^ 1);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        if constexpr (KVREG)
            if (s == 0) bwd_load_kv_frags<T, KD, LD>(kf, vf, Ks, Vs, warp, lane);
        const int bh = head_of(s), ib = block_of(s), i0 = ib * BR, i1 = min(i0 + BR, Sq);
        const T *Qt = Qs + stage * BR * LD, *dOt = dOs + stage * BR * LD;
        const float *Lt = Ls + stage * BR, *Dt = Ds + stage * BR;
        const bool full = i1 - i0 == BR && j1 - j0 == BC && mask_tile_unmasked(a.mask, i0, i1, j0, j1);

        /* Steps 1-5 (bwd_key_half) on the tile's queries in two halves of 32 */
#pragma unroll
        for (int half = 0; half < 2; half++)
            bwd_key_half<T, D, LD, LDS, KVREG, false, false>(dk, dv, kf, vf, Ks, Vs, Qt, dOt, Lt, Dt, dSs, 32 * half,
                                                            i0, j0 + 16 * warp, Sq, Sk, full, a, warp, lane);
        __syncthreads();

        /* 6. dQ_i += softmax_scale dS K_j: warp w takes query rows 16 w..16 w + 15,
         * A = dS read transposed from dS^T, B = K_j (ldmatrix.trans), 16
         * columns at a time, each added into the fp32 accumulator */
        unsigned qa[4][4];
#pragma unroll
        for (int kk = 0; kk < 4; kk++)
            ldsm_x4_t(qa[kk][0], qa[kk][1], qa[kk][2], qa[kk][3],
                      dSs + (kk * 16 + (lane & 7) + (lane >> 4) * 8) * LDS + 16 * warp + ((lane >> 3) & 1) * 8);
        const bool ordered = x.deterministic;
        int *sem = x.sem + (size_t)bh * Tr + ib;
        if (ordered) dq_turn_wait(sem, dq_turn(a.mask, i0, i1, BC, jb));
        const int r0 = i0 + 16 * warp + g;
        float *acc_r0 = x.dq_acc + ((size_t)bh * Sq + r0) * D, *acc_r8 = acc_r0 + 8 * D;
#pragma unroll
        for (int c2 = 0; c2 < D / 16; c2++) {
            float q0[4] = {0.f, 0.f, 0.f, 0.f}, q1[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
            for (int kk = 0; kk < 4; kk++) {
                unsigned b0, b1, b2, b3;
                ldsm_x4_t(b0, b1, b2, b3,
                          Ks + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * LD + c2 * 16 + (lane >> 4) * 8);
                mma16816<T>(q0, qa[kk], b0, b1);
                mma16816<T>(q1, qa[kk], b2, b3);
            }
            const int c = 16 * c2 + 2 * t;
            const float sc = a.softmax_scale;
            if (r0 < Sq) {
                dq_add2(acc_r0 + c, sc * q0[0], sc * q0[1], ordered);
                dq_add2(acc_r0 + c + 8, sc * q1[0], sc * q1[1], ordered);
            }
            if (r0 + 8 < Sq) {
                dq_add2(acc_r8 + c, sc * q0[2], sc * q0[3], ordered);
                dq_add2(acc_r8 + c + 8, sc * q1[2], sc * q1[3], ordered);
            }
        }
        if (ordered) dq_turn_pass(sem);
        __syncthreads();   /* this stage's tiles and dS^T are rewritten next */
    }

    /* dK_j, dV_j: zero for keys nobody sees */
    bwd_store_dkdv<T, D>(x, dk, dv, bkv, j0 + 16 * warp, Sk, lane);
}
//< bwd-v2-kernel

template <typename T, int D>
static int bwd_v2_launch_d(const bwd_args<T> &x, int B, cudaStream_t st)
{
    const size_t smem = bwd_v2_cfg<D>::smem_bytes();
    CUDA_TRY(cudaFuncSetAttribute(bwd_v2_kernel<T, D>,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    const dim3 grid((x.a.seqlen_k + bwd_v2_cfg<D>::BC - 1) / bwd_v2_cfg<D>::BC, (unsigned)(B * x.a.H_kv));
    bwd_v2_kernel<T, D><<<grid, bwd_v2_cfg<D>::NT, smem, st>>>(x);
    LAUNCH_CHECK();
    return FA_OK;
}

template <typename T>
static int bwd_v2_launch(const bwd_args<T> &x, int B, cudaStream_t st)
{
    return bwd_dispatch_d16(x.a.d, [&](auto dd) { return bwd_v2_launch_d<T, decltype(dd)::value>(x, B, st); });
}

static_assert(bwd_v2_cfg<64>::BR == BWD_TILED_BR, "the deterministic mode's counters are per BWD_TILED_BR query rows");

static int bwd_v2_run(int dtype, const attn_params *p, const fa_ptrs *x, int deterministic,
                      cudaStream_t st)
{
    return tiled_backward_mma("v2", dtype, p, x, deterministic, st, bwd_v2_launch<__half>,
                              bwd_v2_launch<__nv_bfloat16>);
}

static int bwd_v2_block_rows(int d) { (void)d; return bwd_v2_cfg<64>::BR; }
static int bwd_v2_block_cols(int d) { (void)d; return bwd_v2_cfg<64>::BC; }

/* The version's row of the table of versions (core/versions.def); one shape
 * with every row, as the forward's, and every field named. */
const fa_row fa_row_bwd_v2 = {.info = {.pass = FA_BACKWARD, .version = 2, .name = "v2",
    .what = "tiled, tensor cores (mma.sync m16n8k16, FlashAttention-2 schedule)", .dtypes = FA_DT(FA_FP16) | FA_DT(FA_BF16), .d_min = 16, .d_max = 128, .d_multiple = 16, .masks = 1, .deterministic = 1, .min_cc = 80, .slug = "mma", .strided = 0, .center_rate = 162e12},
    .run = bwd_v2_run, .check = nullptr, .workspace = tiled_bwd_workspace, .block_rows = bwd_v2_block_rows, .block_cols = bwd_v2_block_cols, .model_bytes = tiled_bwd_model};

/*
 * stage5_backward.cuh -- what the tiled backward versions share across
 * files: kernels/stage5_backward.cu (versions 0, 1, 2, the pre-pass, the
 * post-pass and the launch around a tiled kernel) and
 * kernels/stage5_bwd_v3.cu (version 3). The equations, the conventions and
 * the IO model are in stage5_backward.cu's header comment.
 *
 *   P's exponent     lse_guard, bwd_exponent2 (device)
 *   kernel args      bwd_args<T>: pointers and the problem
 *   dQ additions     atomically, or in key-block order (deterministic mode)
 *   mma fragments    the key-major products of the tensor-core versions:
 *                    S^T = K_j Q^T (or dP^T = V_j dO^T) for one warp's 16
 *                    keys, and dK_j (or dV_j) += A Y for them
 *   tiled launch     tiled_backward<T>: pre-pass D, zeroed dQ accumulator and
 *                    counters, the version's kernel, post-pass; its
 *                    workspace and IO model (defined in stage5_backward.cu)
 *
 * Device functions only (every one inline), and declarations: no kernel is
 * defined here, so each kernel lives in exactly one object file.
 */
#ifndef FA_STAGE5_BACKWARD_CUH
#define FA_STAGE5_BACKWARD_CUH

#include "gpu_common.cuh"

#include <math.h>

#define FA_LOG2E 1.4426950408889634f

//> bwd-lse-guard
/* L of a row that sees no key is -inf; exp(S - L) would be exp(+inf). As
 * +inf instead, every P of that row is exp(-inf) = 0 and the row adds
 * nothing, whatever the mask test says. */
__device__ __forceinline__ float lse_guard(float L) { return L == -INFINITY ? INFINITY : L; }

/* P from a score s (not yet scaled) and the row's guarded L: the exponent
 * s softmax_scale - L is formed first, in one rounding (fma), so that it is
 * exact when it is small whatever the size of L, and clamped at 0 (a P
 * above 1 can only be rounding); then it changes base for exp2. */
__device__ __forceinline__ float bwd_exponent2(float s, float softmax_scale, float L)
{
    return fminf(fmaf(s, softmax_scale, -L), 0.f) * FA_LOG2E;
}
//< bwd-lse-guard

/* What the tiled kernels read and write. */
template <typename T> struct bwd_args {
    const T *q, *k, *v, *dO;   /* (B,H,Sq,d), (B,H_kv,Sk,d) x2, (B,H,Sq,d) */
    const float *L, *D;        /* (B,H,Sq): softmax_lse, the pre-pass's D */
    float *dq_acc;             /* (B,H,Sq,d) fp32, zeroed: the dQ accumulator */
    T *dk, *dv;                /* (B,H_kv,Sk,d) */
    int *sem;                  /* (B,H,Tr) counters of the deterministic mode */
    int deterministic;
    fa_kargs a;
};

//> bwd-dq-order
/* The deterministic mode: the key blocks that see query block (bh, i) add
 * their dQ_i shares one at a time, in key-block order. sem counts the shares
 * added so far, so key block j waits for turn j - (first key block of i),
 * adds with plain loads and stores (no atomics), and passes the turn on.
 * Blocks wait only for blocks of the same head with a smaller key-block
 * index, so the waits cannot close a cycle, provided a block waited for has
 * been started: the GPU dispatches a grid's blocks in index order (observed
 * behaviour, not a CUDA guarantee; this mode relies on it). The cost: a key
 * block may idle while an earlier one finishes its share. */
__device__ __forceinline__ void dq_turn_wait(const int *sem, int turn)
{
    if (threadIdx.x == 0) {
        int seen;
        for (;;) {
            asm volatile("ld.acquire.gpu.global.s32 %0, [%1];" : "=r"(seen) : "l"(sem) : "memory");
            if (seen == turn) break;
            __nanosleep(64);
        }
    }
    __syncthreads();
}
__device__ __forceinline__ void dq_turn_pass(int *sem)
{
    __threadfence();   /* this block's dQ stores before the next block's loads */
    __syncthreads();
    if (threadIdx.x == 0) atomicAdd(sem, 1);
}
/* One share: atomically (default), or, holding the turn, a plain
 * read-add-write through L2 (ld.cg/st.cg: never a stale L1 line). */
__device__ __forceinline__ void dq_add(float *p, float v, bool ordered)
{
    if (ordered) __stcg(p, __ldcg(p) + v);
    else atomicAdd(p, v);
}
__device__ __forceinline__ void dq_add2(float *p, float v0, float v1, bool ordered)
{
    if (ordered) {
        float2 o = __ldcg(reinterpret_cast<const float2 *>(p));
        __stcg(reinterpret_cast<float2 *>(p), make_float2(o.x + v0, o.y + v1));
    } else {
#if __CUDA_ARCH__ >= 900
        atomicAdd(reinterpret_cast<float2 *>(p), make_float2(v0, v1));   /* one 8-byte red */
#else
        atomicAdd(p, v0);
        atomicAdd(p + 1, v1);
#endif
    }
}
//< bwd-dq-order

/* The turn of key block jb at query block [i0, i1): its index among the key
 * blocks that query block visits (mask.h). */
__device__ __forceinline__ int dq_turn(const attn_mask &m, int i0, int i1, int Bc, int jb)
{
    int jb_begin, jb_end;
    mask_key_blocks(m, i0, i1, Bc, &jb_begin, &jb_end);
    return jb - jb_begin;
}

/* ------------------------------------------------------------------------- */
/* The key-major products on the tensor cores (versions 2 and 3)              */
/* ------------------------------------------------------------------------- */
/* A warp owns 16 keys of the block; tiles of 16-bit elements in shared
 * memory with rows of LD elements (d + 8: the 8 rows one ldmatrix reads
 * fall in 8 different bank groups). */

/* S^T (or dP^T) = X_w Y^T for this warp's 16 keys and NQ queries of the
 * tile starting at query q0: A = X rows 16 w.. (registers when xf, else
 * ldmatrix from Xs), B = Y^T read from Yt[query][d] as it lies (ldmatrix
 * without .trans). acc holds NQ / 8 n-tiles. */
template <typename T, int D, int LD, bool XREG, int NQ>
__device__ __forceinline__ void bwd_keys_by_queries(float (&acc)[NQ / 8][4], const unsigned (*xf)[4],
                                                    const T *Xs, const T *Yt, int q0, int warp, int lane)
{
#pragma unroll
    for (int n = 0; n < NQ / 8; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;
#pragma unroll
    for (int kd = 0; kd < D / 16; kd++) {
        unsigned xa[4];
        if constexpr (XREG) {
            xa[0] = xf[kd][0]; xa[1] = xf[kd][1]; xa[2] = xf[kd][2]; xa[3] = xf[kd][3];
        } else {
            ldsm_x4(xa[0], xa[1], xa[2], xa[3],
                    Xs + (16 * warp + (lane & 7) + ((lane >> 3) & 1) * 8) * LD + kd * 16 + (lane >> 4) * 8);
        }
#pragma unroll
        for (int n2 = 0; n2 < NQ / 16; n2++) {
            unsigned b0, b1, b2, b3;
            ldsm_x4(b0, b1, b2, b3,
                    Yt + (q0 + n2 * 16 + (lane & 7) + (lane >> 4) * 8) * LD + kd * 16 + ((lane >> 3) & 1) * 8);
            mma16816<T>(acc[2 * n2], xa, b0, b1);
            mma16816<T>(acc[2 * n2 + 1], xa, b2, b3);
        }
    }
}

/* acc (16 keys x D) += A (16 keys x NQ queries from q0, packed fragments)
 * Y (those NQ queries x D, read from Yt[query][d] with ldmatrix.trans). */
template <typename T, int D, int LD, int NQ>
__device__ __forceinline__ void bwd_accumulate_keys(float (&acc)[D / 8][4], const unsigned (&af)[NQ / 16][4],
                                                    const T *Yt, int q0, int lane)
{
#pragma unroll
    for (int kk = 0; kk < NQ / 16; kk++)
#pragma unroll
        for (int c2 = 0; c2 < D / 16; c2++) {
            unsigned b0, b1, b2, b3;
            ldsm_x4_t(b0, b1, b2, b3,
                      Yt + (q0 + kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * LD + c2 * 16 + (lane >> 4) * 8);
            mma16816<T>(acc[2 * c2], af[kk], b0, b1);
            mma16816<T>(acc[2 * c2 + 1], af[kk], b2, b3);
        }
}

/* ------------------------------------------------------------------------- */
/* The tiled backward around a kernel (stage5_backward.cu)                    */
/* ------------------------------------------------------------------------- */
/* A tiled version's kernel launcher: the grid over (key block, key/value
 * head) for the B batches of x. */
template <typename T> using bwd_launch_fn = int (*)(const bwd_args<T> &x, int B, cudaStream_t st);

/* The whole tiled pass (listing bwd-tiled-launch): D = rowsum(dO * O), the
 * dQ accumulator (and in deterministic mode the counters) zeroed, the
 * kernel, the accumulator rounded into dQ (fp16/bf16). Instantiated for
 * float, __half and __nv_bfloat16 in stage5_backward.cu. The counters are
 * per 64 query rows: every tiled kernel takes Br = 64 (BWD_TILED_BR). */
#define BWD_TILED_BR 64
template <typename T>
int tiled_backward(int dtype, const attn_params *p, const fa_ptrs *x, int deterministic, cudaStream_t st,
                   bwd_launch_fn<T> launch);
/* The tiled versions' workspace (D, dQ accumulator, counters) in bytes, and
 * their IO model with Br x Bc tiles (stage5_backward.cu's header). */
size_t tiled_bwd_workspace(int dtype, const attn_params *p);
double tiled_bwd_model(int dtype, const attn_params *p, int Br, int Bc);

#endif /* FA_STAGE5_BACKWARD_CUH */

/*
 * stage5_backward.cuh -- Stage 5: the attention backward pass on the GPU:
 * what every version computes and costs, and what the versions share.
 *
 * What it adds over stage 4: gradients. Given Q, K, V, the forward's O and
 * L = softmax_lse, and the upstream gradient dO, every version computes
 *
 *     P  = exp(softmax_scale Q K^T - L)     (rebuilt, never stored by the forward)
 *     dV = P^T dO                            D  = rowsum(dO * O)
 *     dP = dO V^T                            dS = P * (dP - D)
 *     dQ = softmax_scale dS K                dK = softmax_scale dS^T Q
 *
 * (the chapter's backward; stage 3's flash_backward is the CPU model), with
 * the masks, seqlen_q != seqlen_k and grouped heads of core/mask.h and
 * core/attn_params.h. Five versions, chosen by --kernel K (one row each in
 * core/versions.def, one file each: stage5_bwd_v0.cu .. stage5_bwd_v4.cu,
 * version 3, Hopper's, in stage5_bwd_v3_hopper.cu):
 *
 *   version | what
 *   --------+-----------------------------------------------------------------
 *   0       | materialized, cuBLAS: S, dP and dS of every head in fp32 in the
 *           | workspace, P in the dtype (as a materialized backward in that
 *           | dtype keeps it); elementwise kernels rebuild P from S and L
 *           | (masked entries 0, through mask_visible) and form dS
 *   1       | tiled on the CUDA cores, fp32 arithmetic: one thread block per
 *           | (key block, key/value head) holds K_j, V_j in shared memory and
 *           | dK_j, dV_j in registers while it walks the query blocks that see
 *           | its keys; P and dS tiles in shared memory; dQ added into an fp32
 *           | accumulator
 *   2       | the same schedule on the tensor cores (FlashAttention-2's
 *           | backward): mma.sync m16n8k16 for the five products, S^T and dP^T
 *           | in registers, only dS through shared memory (for dQ); Q_i, dO_i
 *           | tiles double-buffered with cp.async; fp16/bf16
 *   3       | Hopper's: TMA copies, wgmma, warp-specialized, sm_90a
 *           | (stage5_bwd_v3_hopper.cu)
 *   4       | version 2 on blocks of 128 keys and 8 warps (one block per SM):
 *           | Q_i, dO_i, L_i, D_i loaded once for twice the keys, all by
 *           | cp.async; dQ added 16 bytes at a time (stage5_bwd_v4.cu)
 *
 * Every version runs the pre-pass D = rowsum(dO * O) (fp32, workspace),
 * which with K centered (FA_BWD_CENTER_K, bwd-center) also forms c, K_c and
 * L' (bwd_prepass); with
 * FA_BWD_DQ_PASS the pass of stage5_bwd_dq.cu then forms D from fp32 P and
 * dP, and after the kernel replaces its dQ (tiled_backward, version 0). In
 * versions 1 to 4 the blocks of different key blocks run at once and all
 * add into the same dQ rows, so dQ is accumulated in fp32 (atomicAdd; a
 * post-pass rounds it to the dtype): the order of those additions, and so the
 * last bits of dQ, changes from run to run. deterministic = 1 orders them:
 * the key blocks that see a query block add their share one after another,
 * in key-block order, through a counter per (query head, query block) in the
 * workspace (bwd-dq-order). dK and dV are summed in registers in a fixed
 * order, and version 0 is cuBLAS's fixed-order products, so both are
 * deterministic in either mode. With grouped heads one block loops over the
 * H / H_kv query heads of its key/value head, so dK and dV need no extra
 * reduction.
 *
 * Conventions (mask.h): a row that sees no key (L = -inf) gets a zero dQ row
 * and adds nothing to dK, dV; a key no query sees gets zero dK, dV rows; no
 * NaN for finite inputs. P's exponent S - L is formed first and only then
 * changed to base 2, and clamped at 0 (P <= 1 exactly: L >= S for every key
 * the row sees), so rounding can never make a P above 1 or an infinity.
 *
 * K and V may be any block of a longer sequence's keys (stage 7 calls this
 * once per shard pair): P is rebuilt from the L given, never renormalized
 * over the keys given, and D from the O given, so with O and L of the full
 * row the call returns exactly that block's share of dQ and the block's dK,
 * dV. The mask must then describe the block (seqlen_k = the block's keys).
 *
 * IO model (bytes of slow memory per call; es = element size of the dtype,
 * 4 for fp32, 2 for fp16/bf16; L, D and every accumulator fp32; each kernel
 * reads each operand once and writes its result once, the accounting of
 * stage 1 and stage 3; Sq = seqlen_q, Sk = seqlen_k, g = H / H_kv):
 *
 *   version 0, per key/value head (M = g Sq rows of its query heads):
 *       (28 + 3 es) M Sk                      S, P, dP, dS written and read
 *     + es (5 M d + 3 Sk d)                   Q, K (S), dO, V (dP), dO (dV),
 *                                             O, dO (D), dV written
 *     + 12 M                                  L read, D written and read
 *     + 8 M d + 8 Sk d  (fp32)                dQ, dK products: Q, K read, dQ, dK written
 *     + (16 + 2 es)(M d + Sk d)  (fp16/bf16)  Q, K widened to fp32, read; dQ, dK
 *                                             written in fp32 and narrowed
 *   versions 1 to 4, per query head (R = query rows read, summed over key
 *   blocks = mask_query_rows_read(Br, Bc); Sq Tc without a mask):
 *       es 2 Sq d + 4 Sq                      pre-pass: O, dO read, D written
 *     + 4 Sq d                                dQ accumulator zeroed
 *     + R (2 es d + 8 + 8 d)                  per tile: Q_i, dO_i, L_i, D_i read;
 *                                             dQ_i read and written (atomics)
 *     + (4 + es) Sq d  (fp16/bf16)            post-pass: dQ accumulator -> dQ
 *   plus, per key/value head (Kr = rows of the key blocks some query sees;
 *   Sk without a mask):
 *       2 es Kr d + 2 es Sk d                 K_j, V_j read once, dK, dV written
 *   The deterministic mode's counters (4 bytes per query block) are left out.
 *   Against stage 3's count (elements, one type): in fp32 the model is 4
 *   bytes times stage 3's count plus 8 R' d per query head, R' the rows some
 *   key block adds to (mask_query_rows_active; Sq without a mask): the
 *   accumulator's zeroing and the first key block's dQ read, which stage 3
 *   skips and an atomic addition cannot know to skip. build/tests/gpu/stage5_tests --sweep model
 *   checks it.
 *
 * Tiles: version 1 Br = 64 query rows, Bc = 64 keys (32 when d > 64);
 * version 2 Br = Bc = 64, 4 warps of 16 keys each; version 4 Br = 64,
 * Bc = 128, 8 warps of 16 keys each.
 *
 * The files of stage 5 (kernels/):
 *   stage5_bwd_prepass.cu   the pre-pass: D, and with K centered L' (bwd-dot)
 *   stage5_bwd_center.cu    centering K (bwd-center) and the rule for when
 *   stage5_bwd_v0.cu ..     one version each: its kernel, launch, row
 *   stage5_bwd_tiled.cu     the launch around a tiled kernel (versions 1, 2,
 *                           4), its workspace and IO model
 *   stage5_bwd_convert.cu   the dtype conversions (dQ accumulator into dQ)
 *   stage5_bwd_dq.cu        the dQ pass (FA_BWD_DQ_PASS)
 * and this header, what they share:
 *   P's exponent     lse_guard, bwd_exponent2 (device)
 *   kernel args      bwd_args<T>: pointers and the problem
 *   dQ additions     atomically, or in key-block order (deterministic mode)
 *   mma fragments    the key-major products of the tensor-core versions:
 *                    S^T = K_j Q^T (or dP^T = V_j dO^T) for one warp's 16
 *                    keys, and dK_j (or dV_j) += A Y for them; steps 1-5
 *                    of one query tile for those keys (bwd_key_half)
 *   tiled launch     tiled_backward<T>: pre-pass D, zeroed dQ accumulator and
 *                    counters, the version's kernel, post-pass; its
 *                    workspace and IO model (stage5_bwd_tiled.cu)
 *   dQ pass          bwd_dq_pass<T>: D and dQ without 16-bit roundings
 *                    (FA_BWD_DQ_PASS; defined in stage5_bwd_dq.cu)
 *   pre-pass         bwd_prepass<T>, and the centering's workspace and
 *                    kernels (bwd_center_bytes, bwd_center_carve,
 *                    bwd_center_k; stage5_bwd_prepass.cu, stage5_bwd_center.cu)
 *   conversions      bwd_convert, bwd_convert_rows (stage5_bwd_convert.cu)
 *
 * Build:   make stage5        (the host program src/programs/stage5_main.c links these)
 * Run:     ./stage5 [--kernel K] [--dtype fp32|fp16|bf16] [--deterministic] ...
 * Cost:    2.5 times the forward's FLOPs (5 products of 2 Sq Sk d instead of
 *          2), version 0 needs (4 + es) B H Sq Sk bytes of workspace, versions
 *          1 to 4 O(B H Sq d).
 *
 * Inline functions (device ones, and the host's workspace carver and
 * centering test) and declarations only: no kernel is defined here, so each
 * kernel lives in exactly one object file.
 */
#ifndef FA_STAGE5_BACKWARD_CUH
#define FA_STAGE5_BACKWARD_CUH

#include "gpu_common.cuh"

#include <math.h>

#define FA_LOG2E 1.4426950408889634f
/* Query rows per tile of every tiled backward kernel (see tiled_backward). */
#define BWD_TILED_BR 64

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
    /* element strides of q, k, v, dO, dK, dV (fa_strides_of: the contiguous
     * layout's unless the call gave others); L, D and dq_acc are contiguous */
    fa_stride sq, sk, sv, sdo, sdk, sdv;
    /* Packed sequences (core/varlen.h; cu_q NULL without): sequence b's rows
     * start at row cu_q[b] (cu_k[b]) of Q, dO (K, V, dK, dV), whose batch
     * strides are then 0. L and D rows of query head h, batch b start at
     * b l_batch + h l_head (+ the sequence's first row): (B, H, Sq) dense,
     * (H, total_q) packed; dq_acc is (B, H, Sq, d) dense, (total_q, H, d)
     * packed (the packed dQ's own layout). The deterministic mode's counters of query
     * block ib at b sem_batch + h sem_head + ib (+ the sequence's first slot
     * of varlen_start). */
    const int32_t *cu_q, *cu_k;
    int total_q, total_k;
    long long l_batch, l_head, sem_batch, sem_head;
};

//> bwd-varlen-view
/* What a kernel block of key/value batch b works on: with VL (packed
 * sequences) sequence b alone, as its own problem (lengths, mask), and
 * where its rows start; without, the call itself (x.a, offsets 0). A block
 * of a grid sized by the longest sequence whose keys start past its
 * sequence's end has nothing to do. */
struct bwd_view {
    fa_kargs a;
    int q0, k0, slot;   /* first query row, key row, deterministic-mode slot */
};
template <bool VL, typename T> __device__ __forceinline__ bwd_view bwd_view_of(const bwd_args<T> &x, int b)
{
    bwd_view v;
    v.a = x.a;
    v.q0 = v.k0 = v.slot = 0;
    if constexpr (VL) {
        const varlen_seq s = varlen_seq_of(x.cu_q, x.cu_k, x.total_q, x.total_k, b);
        v.a.seqlen_q = s.len_q;
        v.a.seqlen_k = s.len_k;
        v.a.mask = varlen_mask(s, x.a.mask.window_size_left, x.a.mask.window_size_right);
        v.q0 = s.q0;
        v.k0 = s.k0;
        v.slot = varlen_start(x.cu_q, x.total_q, b, BWD_TILED_BR);
    }
    return v;
}
//< bwd-varlen-view

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

/* The 16-byte dQ additions of versions 4 and 3 (stage5_bwd_v4.cu,
 * stage5_bwd_v3_hopper.cu): an m16n8 accumulator tile, whose layout mma.sync
 * and wgmma share, four consecutive floats per lane. */
//> bwd-v4-dq
/* Four consecutive dQ entries: one 16-byte atomic (sm_90's red.v4.f32), or,
 * holding the deterministic mode's turn, a plain read-add-write through L2. */
__device__ __forceinline__ void dq_add4(float *p, float4 v, bool ordered)
{
    if (ordered) {
        const float4 o = __ldcg(reinterpret_cast<const float4 *>(p));
        __stcg(reinterpret_cast<float4 *>(p), make_float4(o.x + v.x, o.y + v.y, o.z + v.z, o.w + v.w));
    } else {
#if __CUDA_ARCH__ >= 900
        atomicAdd(reinterpret_cast<float4 *>(p), v);
#else
        atomicAdd(p, v.x);
        atomicAdd(p + 1, v.y);
        atomicAdd(p + 2, v.z);
        atomicAdd(p + 3, v.w);
#endif
    }
}

/* One m16n8 accumulator of dQ (rows r0 and r0 + 8 of the head's rows,
 * columns col + 2t, col + 2t + 1, t = lane % 4), times scale, into the fp32
 * accumulator, 16 bytes per lane: lanes t and t ^ 1 swap halves, so that an
 * even t holds row r0, columns col + 2t .. col + 2t + 3, and an odd t row
 * r0 + 8, columns col + 2t - 2 .. col + 2t + 1. row: this lane's 4 floats at
 * col = 0 (dq_row_of), so a tile's address is row + col, col a compile-time
 * constant; row_ok: that row is inside Sq (else it adds nothing). ORDERED is
 * a template argument so that the choice is made once per step, outside the
 * 8 calls. Every lane of the warp must call it (the swap is a shuffle). The
 * scaling comes first: the neighbour's scale * c is the same float as scale
 * times the neighbour's c. */
template <bool ORDERED, bool CHECK>
__device__ __forceinline__ void dq_add_tile(float *row, bool row_ok, int col, const float (&c)[4], float scale,
                                            int lane)
{
    const bool odd = lane & 1;
    const float c0 = scale * c[0], c1 = scale * c[1], c2 = scale * c[2], c3 = scale * c[3];
    const float s0 = __shfl_xor_sync(0xffffffffu, odd ? c0 : c2, 1);
    const float s1 = __shfl_xor_sync(0xffffffffu, odd ? c1 : c3, 1);
    const float4 v = odd ? make_float4(s0, s1, c2, c3) : make_float4(c0, c1, s0, s1);
#if __CUDA_ARCH__ >= 900
    if constexpr (!ORDERED) {
        /* dq_add4's 16-byte atomic as a red (no result wanted), predicated
         * on row_ok when CHECK: written as "if (row_ok) atomicAdd", nvcc puts
         * each of the 8 additions behind a branch and rebuilds the 64-bit
         * address inside it; atomicAdd alone may become an ATOM that returns
         * a value nobody reads. */
        if constexpr (CHECK)
            asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %5, 0;\n\t"
                         "@p red.relaxed.gpu.global.add.v4.f32 [%0], {%1, %2, %3, %4};\n\t}"
                         ::"l"(row + col), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w), "r"((int)row_ok)
                         : "memory");
        else
            asm volatile("red.relaxed.gpu.global.add.v4.f32 [%0], {%1, %2, %3, %4};"
                         ::"l"(row + col), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w)
                         : "memory");
        return;
    }
#endif
    if (!CHECK || row_ok) dq_add4(row + col, v, ORDERED);
}
/* This lane's dq_add_tile row in the accumulator acc of one head (rows d
 * floats apart: the head's rows, or with variable lengths the packed
 * layout's H d), for the tiles of rows r0, r0 + 8: row r0 (even t) or r0 + 8
 * (odd t), first column 2 (t & 2). */
__device__ __forceinline__ float *dq_row_of(float *acc, int d, int r0, int lane)
{
    const int t = lane & 3;
    float *row = acc + (size_t)(r0 + ((t & 1) ? 8 : 0)) * d + 2 * (t & 2);
    /* Opaque to the compiler: otherwise it rebuilds the 64-bit address from
     * the row index at each of the 8 additions instead of adding a constant */
    asm("mov.b64 %0, %0;" : "+l"(row));
    return row;
}
//< bwd-v4-dq

/* ------------------------------------------------------------------------- */
/* The key-major products on the tensor cores (versions 2 and 4)              */
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

/* K_j, V_j rows 16 w .. 16 w + 15 (this warp's keys) as A fragments, for
 * the whole block's life when d <= 64 (KD = d / 16 fragments each). */
template <typename T, int KD, int LD>
__device__ __forceinline__ void bwd_load_kv_frags(unsigned (&kf)[KD][4], unsigned (&vf)[KD][4], const T *Ks,
                                                  const T *Vs, int warp, int lane)
{
#pragma unroll
    for (int kd = 0; kd < KD; kd++) {
        const int at = (16 * warp + (lane & 7) + ((lane >> 3) & 1) * 8) * LD + kd * 16 + (lane >> 4) * 8;
        ldsm_x4(kf[kd][0], kf[kd][1], kf[kd][2], kf[kd][3], Ks + at);
        ldsm_x4(vf[kd][0], vf[kd][1], vf[kd][2], vf[kd][3], Vs + at);
    }
}

/* dK_j = softmax_scale dk and dV_j = dv for this warp's 16 keys (the first
 * is key jw; rows jw + g (+ 8), columns 8 n + 2 t of the accumulators) into
 * dK, dV of key/value head bkv; keys at or past Sk are not written. */
template <typename T, int D>
__device__ __forceinline__ void bwd_store_dkdv(const bwd_args<T> &x, const float (&dk)[D / 8][4],
                                               const float (&dv)[D / 8][4], int bkv, int jw, int Sk, int lane,
                                               int k0 = 0)   /* varlen: the sequence's first key row */
{
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int j = jw + g + 8 * h;
        if (j >= Sk) continue;
        const int b = bkv / x.a.H_kv, hk = bkv % x.a.H_kv;
        T *dkr = x.dk + b * x.sdk.batch + hk * x.sdk.head + (k0 + j) * x.sdk.row;
        T *dvr = x.dv + b * x.sdv.batch + hk * x.sdv.head + (k0 + j) * x.sdv.row;
#pragma unroll
        for (int n = 0; n < D / 8; n++) {
            *reinterpret_cast<unsigned *>(dkr + 8 * n + 2 * t) =
                pack2<T>(x.a.softmax_scale * dk[n][2 * h], x.a.softmax_scale * dk[n][2 * h + 1]);
            *reinterpret_cast<unsigned *>(dvr + 8 * n + 2 * t) = pack2<T>(dv[n][2 * h], dv[n][2 * h + 1]);
        }
    }
}

//> bwd-key-half
/* Steps 1-5 of the tensor-core backward (versions 2 and 4) for this warp's
 * 16 keys (the first is key jw; rows 16 w.. of Ks, Vs, dSs) against the 32
 * queries q0 .. q0 + 31 of the query tile (first query i0): S^T and dP^T of
 * the 32 queries (16 registers each) are alive together, so that
 * dS = P (dP - D) takes P in fp32, before it is rounded for the dV product.
 * (From the rounded P, as an earlier version 2 did, dQ's error was 2.2x SDPA
 * flash's on the H200: every P_ij of a row carries its own rounding into dS,
 * and dQ_i sums them over j.) full: the caller knows every (query, key)
 * pair of the call to be visible, so no entry needs the mask test. Two ways
 * to do the same: RAW_L, Lt holds L as stored
 * (-inf for a row that sees no key) and is guarded here (version 4, whose
 * cp.async copies cannot change it), else guarded already (version 2);
 * MASK_APART, the mask in a branch of its own after the exponentials, so
 * that they stay one straight run of code (version 4), else per element
 * inside their loop (version 2). */
template <typename T, int D, int LD, int LDS, bool KVREG, bool RAW_L, bool MASK_APART>
__device__ __forceinline__ void bwd_key_half(float (&dk)[D / 8][4], float (&dv)[D / 8][4], const unsigned (*kf)[4],
                                             const unsigned (*vf)[4], const T *Ks, const T *Vs, const T *Qt,
                                             const T *dOt, const float *Lt, const float *Dt, T *dSs, int q0,
                                             int i0, int jw, int Sq, int Sk, bool full, const fa_kargs &a,
                                             int warp, int lane)
{
    const int g = lane >> 2, t = lane & 3;
    /* 1. S^T = K_j Q^T (16 keys x 32 queries); P^T = exp(S^T - L) in fp32;
     * entry e of n-tile n: key jw + g + 8 (e / 2), query q0 + 8 n + 2 t + e % 2. */
    float ps[4][4], dp[4][4];
    bwd_keys_by_queries<T, D, LD, KVREG, 32>(ps, kf, Ks, Qt, q0, warp, lane);
#pragma unroll
    for (int n = 0; n < 4; n++) {
        float2 l2 = *reinterpret_cast<const float2 *>(Lt + q0 + 8 * n + 2 * t);
        if constexpr (RAW_L) l2 = make_float2(lse_guard(l2.x), lse_guard(l2.y));
#pragma unroll
        for (int e = 0; e < 4; e++) {
            float p = ex2(bwd_exponent2(ps[n][e], a.softmax_scale, (e & 1) ? l2.y : l2.x));
            if constexpr (!MASK_APART) {
                if (!full) {
                    const int i = i0 + q0 + 8 * n + 2 * t + (e & 1), j = jw + g + 8 * (e >> 1);
                    if (!(i < Sq && j < Sk && mask_visible(a.mask, i, j))) p = 0.f;
                }
            }
            ps[n][e] = p;
        }
    }
    if constexpr (MASK_APART) {
        if (!full)
#pragma unroll
            for (int n = 0; n < 4; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int i = i0 + q0 + 8 * n + 2 * t + (e & 1), j = jw + g + 8 * (e >> 1);
                    if (!(i < Sq && j < Sk && mask_visible(a.mask, i, j))) ps[n][e] = 0.f;
                }
    }
    /* 2. dV_j += P^T dO: P rounded to the dtype once, packed as the A
     * operand (k = query; the m16n8 accumulator layout of two n-tiles is the
     * m16n8k16 A layout) */
    unsigned pf[2][4];
#pragma unroll
    for (int kk = 0; kk < 2; kk++) {
        pf[kk][0] = pack2<T>(ps[2 * kk][0], ps[2 * kk][1]);
        pf[kk][1] = pack2<T>(ps[2 * kk][2], ps[2 * kk][3]);
        pf[kk][2] = pack2<T>(ps[2 * kk + 1][0], ps[2 * kk + 1][1]);
        pf[kk][3] = pack2<T>(ps[2 * kk + 1][2], ps[2 * kk + 1][3]);
    }
    bwd_accumulate_keys<T, D, LD, 32>(dv, pf, dOt, q0, lane);

    /* 3. dP^T = V_j dO^T; dS^T = P^T (dP^T - D) with P in fp32, rounded and
     * packed */
    bwd_keys_by_queries<T, D, LD, KVREG, 32>(dp, vf, Vs, dOt, q0, warp, lane);
    unsigned sf[2][4];
#pragma unroll
    for (int kk = 0; kk < 2; kk++)
#pragma unroll
        for (int h = 0; h < 2; h++) {   /* n-tile n = 2 kk + h */
            const int n = 2 * kk + h;
            const float2 d2 = *reinterpret_cast<const float2 *>(Dt + q0 + 8 * n + 2 * t);
            sf[kk][2 * h] = pack2<T>(ps[n][0] * (dp[n][0] - d2.x), ps[n][1] * (dp[n][1] - d2.y));
            sf[kk][2 * h + 1] = pack2<T>(ps[n][2] * (dp[n][2] - d2.x), ps[n][3] * (dp[n][3] - d2.y));
        }
    /* 4. dK_j += dS^T Q (softmax_scale applied once, at the end) */
    bwd_accumulate_keys<T, D, LD, 32>(dk, sf, Qt, q0, lane);

    /* 5. dS^T to shared memory: dQ_i needs all the block's keys of a query
     * row, spread over the warps */
#pragma unroll
    for (int kk = 0; kk < 2; kk++) {
        T *row0 = dSs + (16 * warp + g) * LDS + q0 + 16 * kk + 2 * t, *row8 = row0 + 8 * LDS;
        *reinterpret_cast<unsigned *>(row0) = sf[kk][0];
        *reinterpret_cast<unsigned *>(row8) = sf[kk][1];
        *reinterpret_cast<unsigned *>(row0 + 8) = sf[kk][2];
        *reinterpret_cast<unsigned *>(row8 + 8) = sf[kk][3];
    }
}
//< bwd-key-half

/* ------------------------------------------------------------------------- */
/* The tiled backward around a kernel (stage5_bwd_tiled.cu)                  */
/* ------------------------------------------------------------------------- */
/* A tiled version's kernel launcher: the grid over (key block, key/value
 * head) for the B batches of x. */
template <typename T> using bwd_launch_fn = int (*)(const bwd_args<T> &x, int B, cudaStream_t st);

/* The whole tiled pass (listing bwd-tiled-launch): D = rowsum(dO * O), the
 * dQ accumulator (and in deterministic mode the counters) zeroed, the
 * kernel, the accumulator rounded into dQ (fp16/bf16). Instantiated for
 * float, __half and __nv_bfloat16 in stage5_bwd_tiled.cu. The counters are
 * per 64 query rows: every tiled kernel takes Br = 64 (BWD_TILED_BR, above).
 * ds16: the kernel rounds dS to 16 bits for dQ's product (the tensor-core
 * versions), so FA_BWD_DQ_PASS replaces its dQ with phase 1's; false
 * (version 1's fp32 arithmetic): phase 0's D is all the mode changes. */
template <typename T>
int tiled_backward(int dtype, const attn_params *p, const fa_ptrs *x, int deterministic, cudaStream_t st,
                   bwd_launch_fn<T> launch, bool ds16 = true);
/* The pre-pass of every backward version (stage5_bwd_prepass.cu, bwd-dot;
 * stage5_bwd_center.cu, bwd-center): D (B H Sq fp32) from dO and O, and
 * when flags hold FA_BWD_CENTER_K (fa_backward has resolved
 * FA_BWD_CENTER_AUTO already) c, K_c and L' first. cen:
 * bwd_center_bytes(dtype, p) bytes of the version's workspace, 256-byte
 * aligned. On return *K, *L, *sk are what the kernel reads: K_c
 * (contiguous) and L', or x's K, its strides and L. So the centering needs
 * nothing of a version but this call and that piece of workspace.
 * Instantiated for float, __half and __nv_bfloat16. */
size_t bwd_center_bytes(int dtype, const attn_params *p);
template <typename T>
int bwd_prepass(const attn_params *p, const fa_ptrs *x, int flags, float *D, void *cen, const T **K,
                const float **L, fa_stride *sk, cudaStream_t st);
/* Whether a backward call centers K: fa_api.cu has turned FA_BWD_CENTER_AUTO
 * into FA_BWD_CENTER_K or nothing (fa_bwd_center_cost); centering needs keys. */
static inline bool bwd_centers(int flags, const attn_params *p)
{
    return (flags & FA_BWD_CENTER_K) && p->seqlen_k > 0;
}
/* The centering's piece of workspace at cen (bwd_center_bytes long): K_c in
 * the dtype, the stats kernel's partials (sum, min, max planes of B H_kv
 * chunks d floats), c, L'; and c, K_c from K read through its strides sk
 * (stats, mean, shift kernels; stage5_bwd_center.cu). */
struct bwd_center_ws {
    void *Kc;
    float *part, *c, *Lc;
};
bwd_center_ws bwd_center_carve(int dtype, const attn_params *p, void *cen);
template <typename T>
int bwd_center_k(const attn_params *p, const T *K, fa_stride sk, const bwd_center_ws &w, cudaStream_t st);
/* dst[i] = src[i] for n elements in another type, rounded to nearest even
 * (the fp32 accumulators into the dtype, or the dtype into fp32 for version
 * 0's fp32 products); and the fp32 (B, H, Sq, d) accumulator src into a dQ
 * dst read through its strides s. FA_OK or a launch error
 * (stage5_bwd_convert.cu). */
template <typename S, typename T> int bwd_convert(const S *src, T *dst, size_t n, cudaStream_t st);
template <typename T>
int bwd_convert_rows(const float *src, T *dst, const attn_params *p, fa_stride s, cudaStream_t st);
/* Carve a workspace into 256-byte aligned pieces; base NULL only measures. */
struct ws_carver {
    char *base;
    size_t used;
    template <typename X> X *take(size_t count)
    {
        size_t at = used;
        used += (count * sizeof(X) + 255) & ~(size_t)255;
        return base ? reinterpret_cast<X *>(base + at) : nullptr;
    }
};
/* FA_BWD_DQ_PASS (kernels/stage5_bwd_dq.cu): phase 0 writes D (B H Sq
 * fp32) as rowsum(P * dP) from fp32 P and dP, before the version's kernel;
 * phase 1 writes dQ from fp32 dS split in two 16-bit parts, after it. K, sk
 * and L are what the version's kernel reads (K_c and L' when centered).
 * bwd_dq_pass_check: the limits (fa_bwd_dq_pass_supported's, and rows on
 * 16 bytes), FA_OK or one line; every caller runs it before its first
 * launch. */
extern "C" int bwd_dq_pass_check(int dtype, const attn_params *p, const fa_ptrs *x);
template <typename T>
int bwd_dq_pass(int phase, const attn_params *p, const fa_ptrs *x, const T *K, fa_stride sk, const float *L,
                float *D, cudaStream_t st);
/* The same for packed sequences (vl; NULL: tiled_backward itself): D and
 * the post-pass over the packed rows, the launcher given x.cu_q etc. (it
 * starts its varlen kernel when x.cu_q is set). x's strides resolved
 * (fa_varlen_strides_of). FA_BWD_CENTER_K is refused with vl. */
template <typename T>
int tiled_backward_vl(int dtype, const attn_params *p, const fa_varlen *vl, const fa_ptrs *x, int deterministic,
                      cudaStream_t st, bwd_launch_fn<T> launch, bool ds16 = true);
/* The entry of the tensor-core versions (2, 3, 4): fp16 or bf16, and 16-byte
 * aligned Q, K, V, dO (their tiles are copied with 16-byte cp.async); name
 * ("v2") for the error line. */
static inline int tiled_backward_mma(const char *name, int dtype, const attn_params *p, const fa_ptrs *x,
                                     int deterministic, cudaStream_t st, bwd_launch_fn<__half> f16,
                                     bwd_launch_fn<__nv_bfloat16> bf16)
{
    if (!aligned16(x->q) || !aligned16(x->k) || !aligned16(x->v) || !aligned16(x->do_))
        return fa_set_error(FA_ERR_UNSUPPORTED, "backward %s needs 16-byte aligned Q, K, V, dO", name);
    if (dtype == FA_FP16) return tiled_backward<__half>(dtype, p, x, deterministic, st, f16);
    return tiled_backward<__nv_bfloat16>(dtype, p, x, deterministic, st, bf16);
}
static inline int tiled_backward_mma_vl(const char *name, int dtype, const attn_params *p, const fa_varlen *vl,
                                        const fa_ptrs *x, int deterministic, cudaStream_t st,
                                        bwd_launch_fn<__half> f16, bwd_launch_fn<__nv_bfloat16> bf16)
{
    if (!aligned16(x->q) || !aligned16(x->k) || !aligned16(x->v) || !aligned16(x->do_))
        return fa_set_error(FA_ERR_UNSUPPORTED, "backward %s needs 16-byte aligned Q, K, V, dO", name);
    if (dtype == FA_FP16) return tiled_backward_vl<__half>(dtype, p, vl, x, deterministic, st, f16);
    return tiled_backward_vl<__nv_bfloat16>(dtype, p, vl, x, deterministic, st, bf16);
}
/* f(std::integral_constant<int, D>()) for the head dimension d, a multiple
 * of 16 from 16 to 128: the tensor-core kernels' template sizes. */
template <typename F> static int bwd_dispatch_d16(int d, F f)
{
    switch (d) {
    case 16: return f(std::integral_constant<int, 16>());
    case 32: return f(std::integral_constant<int, 32>());
    case 48: return f(std::integral_constant<int, 48>());
    case 64: return f(std::integral_constant<int, 64>());
    case 80: return f(std::integral_constant<int, 80>());
    case 96: return f(std::integral_constant<int, 96>());
    case 112: return f(std::integral_constant<int, 112>());
    default: return f(std::integral_constant<int, 128>());
    }
}
/* The tiled versions' workspace (D, dQ accumulator, counters) in bytes, and
 * their IO model with Br x Bc tiles (this header's comment). */
size_t tiled_bwd_workspace(int dtype, const attn_params *p);
size_t tiled_bwd_workspace_varlen(int dtype, const attn_params *p, const fa_varlen *vl);
double tiled_bwd_model(int dtype, const attn_params *p, int Br, int Bc);

#endif /* FA_STAGE5_BACKWARD_CUH */

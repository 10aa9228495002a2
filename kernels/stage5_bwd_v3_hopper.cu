/*
 * stage5_bwd_v3_hopper.cu -- backward version 3: the backward on Hopper's own
 * hardware (sm_90a), the technique of forward version 3 (TMA copies on
 * mbarriers, wgmma, a producer warp and consumer warpgroups with
 * setmaxnreg) applied to stage 5's equations (stage5_backward.cuh's header:
 * P = exp(softmax_scale S - L), dV = P^T dO, dP = dO V^T, dS = P (dP - D),
 * dQ = softmax_scale dS K, dK = softmax_scale dS^T Q).
 *
 * Schedule (FlashAttention-3's, keys outer as versions 2 and 4): one block
 * of 384 threads per (key block of Bc = 128 keys, key/value head).
 *   - warpgroup 0 is the producer (32 registers): its thread 0 asks the copy
 *     engine for K_j and V_j once (they stay in shared memory for the
 *     block's life) and then, for every query block i that sees the key
 *     block (mask.h) of every query head of the group, for Q_i and dO_i
 *     into one of two stages; its 32 lanes copy L_i and D_i of the stage
 *     (guarded: a row that sees no key, or past Sq, gets L = +inf, so its P
 *     is 0 whatever the mask says, and D = 0). "full" and "empty" mbarriers
 *     hand each stage over and back.
 *   - warpgroups 1 and 2 are the consumers (240 registers each); warpgroup
 *     w owns keys 64 w .. 64 w + 63 of the block and keeps dK, dV of them in
 *     registers (wgmma accumulators, d / 2 each per thread). Per query block:
 *       S^T  = K_w Q_i^T     wgmma, both operands in shared memory (M = 64 keys)
 *       dP^T = V_w dO_i^T    the same
 *       P^T  = exp(S^T softmax_scale - L) in fp32 (masked entries 0)
 *       dS^T = P^T (dP^T - D)              from the fp32 P
 *       dV_w += P^T dO_i     A = P^T from registers, B = dO_i through the
 *       dK_w += dS^T Q_i     descriptor's transpose bit (the forward's O += P V)
 *       dS^T (16-bit) into shared memory, one barrier of the two warpgroups,
 *       dQ_i += softmax_scale dS K_j: A = dS read transposed from dS^T, B =
 *       K_j read transposed, M = 64 queries, N = 64, K = 128 keys; the
 *       warpgroups split it by query rows at d = 64 (Br = 128) and by
 *       columns at d = 128 (Br = 64); added into the fp32 accumulator with
 *       16-byte reductions (dq_add_tile, stage5_backward.cuh).
 * Tiles: d = 64: Br = 128 query rows (S^T is m64n128), d = 128: Br = 64
 * (the dK, dV accumulators take 128 of the 240 registers). dS^T has two
 * buffers, so one barrier per query block orders both its write before the
 * dQ product and the previous read before the next write.
 *
 * What it shares with versions 2 and 4 (stage5_backward.cuh): the D
 * pre-pass, the zeroed fp32 dQ accumulator and its rounding post-pass
 * (tiled_backward), P's exponent (bwd_exponent2, lse_guard), the dQ
 * additions, the deterministic mode's turns (dq_turn: key blocks add their
 * dQ_i shares one after another in key-block order; here the two consumer
 * warpgroups hold the turn together through a named barrier); masks only
 * through mask.h; with grouped heads one block walks the query heads of its
 * key/value head, so dK and dV are summed over the group in registers.
 *
 * Packed sequences (VL, fa_backward_varlen; core/varlen.h): the same
 * kernel with each block on sequence b = blockIdx.y / H_kv alone
 * (bwd_view_of: its lengths, its mask, its first rows q0, k0), the tensor
 * maps over one batch of the packed rows, tile origins at q0 + i0, k0 + j0
 * (the dense kernel's, relative to the sequence), L, D and the dQ
 * accumulator in the packed layouts. A sequence's last tiles bring the next
 * sequence's rows with them (bwd_v3_check_varlen says what makes them harmless).
 *
 * Layout in shared memory: every tile in the 128-byte swizzle the copy
 * engine writes and wgmma reads (stage4_fwd_v3_hopper.cu's header), as column
 * blocks of 64 16-bit elements; dS^T is [key][query], written by the
 * consumers in the same swizzle (chunk c of row r at c ^ (r % 8)).
 * d = 128: K, V 32 KiB each, Q, dO 2 x 16 KiB each, dS^T 2 x 16 KiB;
 * d = 64: K, V 16 KiB, Q, dO 2 x 16 KiB, dS^T 2 x 32 KiB; 160 KiB either way.
 *
 * IO model: the tiled one (tiled_bwd_model) with Br = 128 (d = 64) or 64
 * (d = 128) and Bc = 128.
 *
 * Needs: fp16 or bf16, d = 64 or 128, a GPU of compute capability 9.0
 * (fa_api.cu refuses others from the row's min_cc), 16-byte aligned
 * Q, K, V, dO and strides (the copy engine's rule). Build:
 * -gencode=arch=compute_90a,code=sm_90a (kernels/gpu.mk).
 */
#include "stage5_backward.cuh"
#include "hopper.cuh"   /* mbarrier, TMA, wgmma wrappers, the products of a tile */

#include <stdlib.h>

#include <type_traits>

template <int D> struct bwd_v3_cfg {
    static constexpr int BC = 128, BR = D == 64 ? 128 : 64, CB = D / 64;
    static constexpr int NT = 384;
    static constexpr int KV_BYTES = BC * D * 2, QT_BYTES = BR * D * 2, DS_BYTES = BC * BR * 2;
    static constexpr int OFF_V = KV_BYTES, OFF_Q = 2 * KV_BYTES, OFF_DO = OFF_Q + 2 * QT_BYTES;
    static constexpr int OFF_DS = OFF_DO + 2 * QT_BYTES, OFF_L = OFF_DS + 2 * DS_BYTES;
    /* step 2: each consumer warpgroup's 64 x 64 fp32 share of dQ_i, as two
     * boxes of 64 rows x 32 columns (128 bytes) for the tensor reduction */
    static constexpr int OFF_DQ = OFF_L + 2 * BR * 4 * 2, DQ_BYTES = 2 * 64 * 64 * 4;
    static constexpr int OFF_D = OFF_L + 2 * BR * 4, OFF_BAR = OFF_DQ + DQ_BYTES;
    static constexpr int SMEM = OFF_BAR + 8 * 5 + 1024;   /* + alignment slack */
    /* setmaxnreg moves registers within the block's allocation at launch:
     * 384 threads x 168 (65536 / 384, in multiples of 8); the consumers
     * take what the producer warpgroup gives up */
    static constexpr int PRODUCER_REGS = 24, CONSUMER_REGS = 240, LAUNCH_REGS = 168;
    /* the lanes of the producer warp that arrive on "full": 32, lane 0
     * twice (its two copies' expect_tx) */
    static constexpr int FULL_ARRIVALS = 33;
    static_assert(128 * PRODUCER_REGS + 256 * CONSUMER_REGS <= NT * LAUNCH_REGS, "registers at launch");
    static_assert(SMEM <= 227 * 1024, "shared memory per block");
};

/* Shared-memory addresses (1024-aligned base). */
template <int D> struct bwd_v3_smem {
    using C = bwd_v3_cfg<D>;
    uint32_t base;
    float *gen;   /* the same base as a generic pointer (L, D stages) */
    __device__ uint32_t k() const { return base; }
    __device__ uint32_t v() const { return base + C::OFF_V; }
    __device__ uint32_t q(int st) const { return base + C::OFF_Q + st * C::QT_BYTES; }
    __device__ uint32_t dO(int st) const { return base + C::OFF_DO + st * C::QT_BYTES; }
    __device__ uint32_t ds(int b) const { return base + C::OFF_DS + b * C::DS_BYTES; }
    __device__ float *L(int st) const { return gen + (C::OFF_L + st * C::BR * 4) / 4; }
    __device__ float *Dr(int st) const { return gen + (C::OFF_D + st * C::BR * 4) / 4; }
    __device__ uint32_t dq(int cw) const { return base + C::OFF_DQ + cw * (C::DQ_BYTES / 2); }
    __device__ uint32_t kv_full() const { return base + C::OFF_BAR; }
    __device__ uint32_t full(int st) const { return base + C::OFF_BAR + 8 * (1 + st); }
    __device__ uint32_t empty(int st) const { return base + C::OFF_BAR + 8 * (3 + st); }
};

/* The walk over (query head of the group, query block): step s is head h
 * and the k-th block of the walk, which starts at the rot-th of the nq
 * blocks (rot = jb mod nq in the default mode, so that the key blocks
 * running at once add into different dQ tiles; 0 in the deterministic
 * mode, whose turns go in key-block order). A cursor, one compare a step. */
struct bwd_v3_walk {
    int h, k, nq, rot, ib_begin;
    __device__ void next()
    {
        if (++k == nq) { k = 0; h++; }
    }
    __device__ int block() const
    {
        const int r = k + rot;
        return ib_begin + (r < nq ? r : r - nq);
    }
};

/* Step 2's dQ path: the tensor copy engine adds a box of shared memory
 * (fp32, in the 128-byte swizzle of its tensor map) into global memory
 * (cp.reduce.async.bulk.tensor .add: an atomic addition per element, done
 * by the copy engine; rows past the tensor's extent are left alone). The
 * issuing thread waits for its earlier reductions to have read their
 * source before the box is written again, and for all of them to be done
 * before the block ends. */
__device__ __forceinline__ void tma_reduce_add_4d(const CUtensorMap *map, uint32_t src, int c0, int c1, int c2, int c3)
{
    asm volatile("cp.reduce.async.bulk.tensor.4d.global.shared::cta.add.tile.bulk_group"
                 " [%0, {%2, %3, %4, %5}], [%1];" ::"l"(reinterpret_cast<uint64_t>(map)),
                 "r"(src), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
                 : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
__device__ __forceinline__ void bulk_wait_read0() { asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory"); }
__device__ __forceinline__ void bulk_wait0() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }

//> bwd-v3-producer
/* The producer warp: K_j, V_j once, then per step the stage's Q_i, dO_i (the
 * copy engine; rows past Sq arrive as zeros) and L_i, D_i (the lanes). A
 * stage is refilled after its "empty" phase completed: every consumer
 * thread arrived after its last read of it. */
template <typename T, int D, bool VL>
__device__ void bwd_v3_producer(const bwd_v3_smem<D> &sm, const CUtensorMap *tmQ, const CUtensorMap *tmK,
                                const CUtensorMap *tmV, const CUtensorMap *tmdO, const bwd_args<T> &x,
                                const bwd_view &seq, bwd_v3_walk w, int steps, int b, int hk, int j0)
{
    using C = bwd_v3_cfg<D>;
    const fa_kargs &a = VL ? seq.a : x.a;   /* VL: the sequence as its own problem */
    const int lane = threadIdx.x & 31;
    const bool lane0 = lane == 0;
    /* VL: the packed maps' one batch; the sequence's rows from q0, k0 */
    const int zb = VL ? 0 : b;
    if (lane0) {
        tma_tile<C::CB, C::BC>(tmK, sm.k(), sm.kv_full(), (VL ? seq.k0 : 0) + j0, make_int2(hk, zb));
        tma_tile<C::CB, C::BC>(tmV, sm.v(), sm.kv_full(), (VL ? seq.k0 : 0) + j0, make_int2(hk, zb));
    }
    for (int s = 0; s < steps; s++, w.next()) {
        const int st = s & 1;
        mbar_wait(sm.empty(st), ((s >> 1) & 1) ^ 1);
        const int hq = hk * a.h_per_kv + w.h, bh = b * a.H + hq, i0 = w.block() * C::BR;
        /* L, D rows: (B, H, Sq), or packed (H, total_q) from the sequence's first row */
        const float *Lh = x.L + (VL ? (size_t)hq * x.l_head + seq.q0 : (size_t)bh * a.seqlen_q);
        const float *Dh = x.D + (VL ? (size_t)hq * x.l_head + seq.q0 : (size_t)bh * a.seqlen_q);
        float *Ls = sm.L(st), *Ds = sm.Dr(st);
        /* rows past the sequence's end (VL: the next sequence's, which the
         * copy engine brings with the tile) get L = +inf, D = 0: their P and
         * dS are 0 for any finite S, dP */
#pragma unroll
        for (int r = lane; r < C::BR; r += 32) {
            const int i = i0 + r;
            Ls[r] = i < a.seqlen_q ? lse_guard(Lh[i]) : INFINITY;
            Ds[r] = i < a.seqlen_q ? Dh[i] : 0.f;
        }
        if (lane0) {
            tma_tile<C::CB, C::BR>(tmQ, sm.q(st), sm.full(st), (VL ? seq.q0 : 0) + i0, make_int2(hq, zb));
            tma_tile<C::CB, C::BR>(tmdO, sm.dO(st), sm.full(st), (VL ? seq.q0 : 0) + i0, make_int2(hq, zb));
        } else {
            mbar_arrive(sm.full(st));
        }
    }
}
//< bwd-v3-producer

/* The deterministic mode's turn, held by the 256 consumer threads together
 * (named barrier 2; the producer warp takes no part): the first consumer
 * thread waits for the counter to reach `turn`, and after the additions
 * passes it on. dq_turn_wait/dq_turn_pass's protocol (stage5_backward.cuh)
 * with a barrier of the consumers instead of the block's. */
__device__ __forceinline__ void bwd_v3_turn_wait(const int *sem, int turn, bool first)
{
    if (first) {
        int seen;
        for (;;) {
            asm volatile("ld.acquire.gpu.global.s32 %0, [%1];" : "=r"(seen) : "l"(sem) : "memory");
            if (seen == turn) break;
            __nanosleep(64);
        }
    }
    named_bar_sync(2, 256);
}
__device__ __forceinline__ void bwd_v3_turn_pass(int *sem, bool first)
{
    __threadfence();
    named_bar_sync(2, 256);
    if (first) atomicAdd(sem, 1);
}

//> bwd-v3-consumer
/* Consumer warpgroup cw (0, 1): keys 64 cw .. 64 cw + 63 of the block.
 * STEP 1: dQ_i by 16-byte reductions from registers (and the deterministic
 * mode); STEP 2: through shared memory by the copy engine's tensor
 * reduction (tmdQ), so the warpgroup goes on to the next query block at
 * once. */
template <typename T, int D, int STEP, bool VL>
__device__ void bwd_v3_consumer(int cw, const bwd_v3_smem<D> &sm, const bwd_args<T> &x, const bwd_view &seq,
                                const CUtensorMap *tmdQ, bwd_v3_walk w, int steps, int b, int hk, int jb, int j0)
{
    using C = bwd_v3_cfg<D>;
    constexpr int BR = C::BR, BC = C::BC, NS = BR / 8;   /* n-tiles of 8 queries in S^T */
    const fa_kargs &a = VL ? seq.a : x.a;   /* VL: the sequence as its own problem */
    const int Sq = a.seqlen_q, Sk = a.seqlen_k;
    const int tid = threadIdx.x & 127, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int jw = j0 + 64 * cw;   /* the warpgroup's first key */
    float dk[D / 2], dv[D / 2];
#pragma unroll
    for (int i = 0; i < D / 2; i++) dk[i] = dv[i] = 0.f;

    if (steps > 0) {
        mbar_wait(sm.kv_full(), 0);
        const uint32_t kw = sm.k() + 64 * cw * 128, vw = sm.v() + 64 * cw * 128;
        /* the dQ product's operands: d = 64, rows 64 cw.. of dS (column block
         * cw of dS^T) times all of K_j; d = 128, all of dS times column
         * block cw of K_j */
        const uint32_t ds_off = BR == 128 ? cw * BC * 128 : 0, k_dq = sm.k() + (D == 128 ? cw * BC * 128 : 0);
        const int q_off = BR == 128 ? 64 * cw : 0, c_off = D == 128 ? 64 * cw : 0;
        const bool unwindowed = mask_is_full(a.mask);
        const bool first = threadIdx.x == 128;
        for (int s = 0; s < steps; s++, w.next()) {
            const int st = s & 1;
            const int hq = hk * a.h_per_kv + w.h, bh = b * a.H + hq, ib = w.block(), i0 = ib * BR;
            const int i1 = min(i0 + BR, Sq);
            const bool full = jw + 64 <= Sk && (unwindowed || mask_tile_unmasked(a.mask, i0, i1, jw, jw + 64));
            mbar_wait(sm.full(st), (s >> 1) & 1);

            /* S^T = K_w Q_i^T and dP^T = V_w dO_i^T, two groups */
            float sp[BR / 2], dp[BR / 2];
            wgmma_fence();
            gemm_qk<T, D, BC, BR>(sp, kw, sm.q(st));
            wgmma_commit();
            gemm_qk<T, D, BC, BR>(dp, vw, sm.dO(st));
            wgmma_commit();
            wgmma_wait<1>();
            reg_fence(sp);

            /* P^T in fp32: entry 4n + e is key jw + 16 warp + g + 8 (e / 2),
             * query i0 + 8 n + 2 t + e % 2 */
            const float *Ls = sm.L(st), *Ds = sm.Dr(st);
#pragma unroll
            for (int n = 0; n < NS; n++) {
                const float2 l2 = *reinterpret_cast<const float2 *>(Ls + 8 * n + 2 * t);
#pragma unroll
                for (int e = 0; e < 4; e++)
                    sp[4 * n + e] = ex2(bwd_exponent2(sp[4 * n + e], a.softmax_scale, (e & 1) ? l2.y : l2.x));
            }
            if (!full) {
#pragma unroll
                for (int n = 0; n < NS; n++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const int i = i0 + 8 * n + 2 * t + (e & 1), j = jw + 16 * warp + g + 8 * (e >> 1);
                        if (!(j < Sk && mask_visible(a.mask, i, j))) sp[4 * n + e] = 0.f;
                    }
            }
            uint32_t pf[BR / 4];
#pragma unroll
            for (int i = 0; i < BR / 4; i++) pf[i] = pack2<T>(sp[2 * i], sp[2 * i + 1]);
            wgmma_wait<0>();
            reg_fence(dp);
            /* dS^T = P^T (dP^T - D), from the fp32 P, rounded once */
            uint32_t sf[BR / 4];
#pragma unroll
            for (int n = 0; n < NS; n++) {
                const float2 d2 = *reinterpret_cast<const float2 *>(Ds + 8 * n + 2 * t);
                sf[2 * n] = pack2<T>(sp[4 * n] * (dp[4 * n] - d2.x), sp[4 * n + 1] * (dp[4 * n + 1] - d2.y));
                sf[2 * n + 1] = pack2<T>(sp[4 * n + 2] * (dp[4 * n + 2] - d2.x), sp[4 * n + 3] * (dp[4 * n + 3] - d2.y));
            }
            /* dV_w += P^T dO_i, dK_w += dS^T Q_i: one group */
            reg_fence(dv);
            reg_fence(dk);
            wgmma_fence();
            gemm_pv<T, D, BR>(dv, pf, sm.dO(st));
            gemm_pv<T, D, BR>(dk, sf, sm.q(st));
            wgmma_commit();

            /* dS^T into buffer s % 2 in the 128-byte swizzle: key row r, the
             * 16-byte chunk of queries 8 n.. at (n % 8) ^ (r % 8) of column
             * block n / 8 */
            const uint32_t dsb = sm.ds(s & 1);
#pragma unroll
            for (int n = 0; n < NS; n++)
#pragma unroll
                for (int hh = 0; hh < 2; hh++) {
                    const int r = 64 * cw + 16 * warp + g + 8 * hh;
                    const uint32_t at = dsb + (n / 8) * BC * 128 + r * 128 + (((n % 8) ^ (r & 7)) << 4) + 4 * t;
                    asm volatile("st.shared.u32 [%0], %1;" ::"r"(at), "r"(sf[2 * n + hh]) : "memory");
                }
            fence_proxy_async();
            if constexpr (STEP == 2)   /* the previous reduction has read this warpgroup's dQ boxes */
                if (tid == 0) bulk_wait_read0();
            named_bar_sync(1, 256);   /* both warpgroups' dS^T are in */

            /* dQ_i (64 queries x 64 columns of this warpgroup) = dS K_j over the 128 keys */
            float dq[32];
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < BC / 16; kk++)
                wgmma_ss<T, 64, true>(dq, make_desc(dsb + ds_off + kk * 2048, BC * 128, 1024),
                                      make_desc(k_dq + kk * 2048, BC * 128, 1024), kk > 0);
            wgmma_commit();
            wgmma_wait<0>();
            reg_fence(dq);
            reg_fence(dk);
            reg_fence(dv);
            mbar_arrive(sm.empty(st));   /* Q_i, dO_i, L_i, D_i of this stage are read */

            if constexpr (STEP == 2) {
                /* softmax_scale dQ into the two boxes: row r = 16 warp + g (+ 8),
                 * column 8 n + 2 t of the 64 is box n / 4, 16-byte chunk
                 * 2 (n % 4) + t / 2 (at its swizzled place), 8 bytes in when t is odd */
                const uint32_t box = sm.dq(cw);
#pragma unroll
                for (int n = 0; n < 8; n++)
#pragma unroll
                    for (int hh = 0; hh < 2; hh++) {
                        const int r = 16 * warp + g + 8 * hh, c = 2 * (n % 4) + (t >> 1);
                        const uint32_t at = box + (n / 4) * 8192 + r * 128 + ((c ^ (r & 7)) << 4) + (t & 1) * 8;
                        asm volatile("st.shared.v2.f32 [%0], {%1, %2};" ::"r"(at),
                                     "f"(a.softmax_scale * dq[4 * n + 2 * hh]), "f"(a.softmax_scale * dq[4 * n + 2 * hh + 1])
                                     : "memory");
                    }
                fence_proxy_async();
                named_bar_sync(3 + cw, 128);
                /* (VL: rows past the sequence's end add exact zeros, their dS
                 * being 0; rows past total_q are clipped by the copy engine) */
                if (tid == 0) {
#pragma unroll
                    for (int bx = 0; bx < 2; bx++)
                        tma_reduce_add_4d(tmdQ, box + bx * 8192, c_off + 32 * bx, (VL ? seq.q0 : 0) + i0 + q_off,
                                          hq, VL ? 0 : b);
                    bulk_commit();
                }
                continue;
            }
            /* the additions (rows past Sq add nothing: with VL they are the
             * next sequence's, whose ordered additions a plain
             * read-add-write here would race with). VL: the accumulator is
             * laid out as the packed dQ, (total_q, H, d) */
            const int r0 = i0 + q_off + 16 * warp + g;
            float *row = dq_row_of(x.dq_acc + (size_t)bh * Sq * D, D, r0, lane);
            if constexpr (VL) row = dq_row_of(x.dq_acc + ((size_t)seq.q0 * a.H + hq) * D, a.H * D, r0, lane);
            const bool row_ok = r0 + ((lane & 1) ? 8 : 0) < Sq;
            auto add_dq = [&](auto ordered_c, auto check_c) {
#pragma unroll
                for (int n = 0; n < 8; n++) {
                    const float c4[4] = {dq[4 * n], dq[4 * n + 1], dq[4 * n + 2], dq[4 * n + 3]};
                    dq_add_tile<decltype(ordered_c)::value, decltype(check_c)::value>(row, row_ok, c_off + 8 * n, c4,
                                                                                     a.softmax_scale, lane);
                }
            };
            if (x.deterministic) {
                int *sem = x.sem + (size_t)bh * ((Sq + BWD_TILED_BR - 1) / BWD_TILED_BR) + i0 / BWD_TILED_BR;
                if constexpr (VL) sem = x.sem + hq * x.sem_head + seq.slot + i0 / BWD_TILED_BR;
                bwd_v3_turn_wait(sem, dq_turn(a.mask, i0, i1, BC, jb), first);
                add_dq(std::true_type(), std::true_type());
                bwd_v3_turn_pass(sem, first);
            } else if (i0 + BR <= Sq) {
                add_dq(std::false_type(), std::false_type());
            } else {
                add_dq(std::false_type(), std::true_type());
            }
        }
        if constexpr (STEP == 2)
            if (tid == 0) bulk_wait0();
    }

    /* dK_j = softmax_scale dk, dV_j = dv: rows jw + 16 warp + g (+ 8),
     * columns 8 c + 2 t; keys past Sk are not written, keys nobody sees get 0 */
#pragma unroll
    for (int hh = 0; hh < 2; hh++) {
        const int j = jw + 16 * warp + g + 8 * hh;
        if (j >= Sk) continue;   /* (VL: the next sequence's key) */
        const int jr = (VL ? seq.k0 : 0) + j;
        T *dkr = x.dk + b * x.sdk.batch + hk * x.sdk.head + jr * x.sdk.row + 2 * t;
        T *dvr = x.dv + b * x.sdv.batch + hk * x.sdv.head + jr * x.sdv.row + 2 * t;
#pragma unroll
        for (int c = 0; c < D / 8; c++) {
            *reinterpret_cast<uint32_t *>(dkr + 8 * c) =
                pack2<T>(a.softmax_scale * dk[4 * c + 2 * hh], a.softmax_scale * dk[4 * c + 2 * hh + 1]);
            *reinterpret_cast<uint32_t *>(dvr + 8 * c) = pack2<T>(dv[4 * c + 2 * hh], dv[4 * c + 2 * hh + 1]);
        }
    }
}
//< bwd-v3-consumer

/* Step 3: the two consumer warpgroups in ping-pong, with no barrier that
 * both meet every step (step 2's named barrier 1).
 *   - dQ_{s-1} is issued in step s, after step s's dV, dK products: then
 *     the other warpgroup's half of dS^T_{s-1} has long been written. Each
 *     warpgroup publishes its half with bar.arrive on named barrier
 *     5 + 2 cw + s % 2 (128 arrivals) and reads the other's after bar.sync
 *     on the other's (128 more: 256 a phase); the writer arrives after its
 *     own dQ_{s-1} has read buffer (s + 1) % 2, so the arrival also frees
 *     the buffer the reader writes next. A warpgroup arrives on a barrier
 *     again only two steps later, after waiting for the other's arrival of
 *     the step between, which comes after the other's wait on this one:
 *     a barrier never holds two of a writer's phases at once.
 *   - Turns on named barriers 9 + cw (forward version 3's ping-pong): a
 *     warpgroup issues its S^T, dP^T products after the other has issued
 *     its own of the step before (warpgroup 1: of the same step), so the
 *     exponentials and dS^T of one run under the other's products.
 * No cycle of waits: a warpgroup's waits in step s are on the producer's
 * stage s (freed by both consumers in step s - 2), on the other's turn
 * hand-over of step s (warpgroup 1) or s - 1 (warpgroup 0) and on the
 * other's dS^T of step s - 1. dK, dV: step 2's products in step 2's order.
 * Its set-up and per-step products repeat bwd_v3_consumer's lines by design:
 * the steps stay whole and selectable side by side (FA_BWD3_STEP), as
 * forward version 3's do, so each is measured as it was written. */
template <typename T, int D, bool VL>
__device__ void bwd_v3_consumer3(int cw, const bwd_v3_smem<D> &sm, const bwd_args<T> &x, const bwd_view &seq,
                                 const CUtensorMap *tmdQ, bwd_v3_walk w, int steps, int b, int hk, int j0)
{
    using C = bwd_v3_cfg<D>;
    constexpr int BR = C::BR, BC = C::BC, NS = BR / 8;
    constexpr int BAR_DS = 5, BAR_TURN = 9;
    const fa_kargs &a = VL ? seq.a : x.a;
    const int Sq = a.seqlen_q, Sk = a.seqlen_k;
    const int tid = threadIdx.x & 127, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int jw = j0 + 64 * cw;
    /* the warpgroup index read again where a barrier number needs it: kept
     * in a register through the loop it would cost a spill at d = 128 */
    auto cw_now = []() {
        uint32_t tx;
        asm volatile("mov.u32 %0, %%tid.x;" : "=r"(tx));
        return (int)(tx >> 7) - 1;
    };
    float dk[D / 2], dv[D / 2];
#pragma unroll
    for (int i = 0; i < D / 2; i++) dk[i] = dv[i] = 0.f;

    if (steps > 0) {
        mbar_wait(sm.kv_full(), 0);
        const uint32_t kw = sm.k() + 64 * cw * 128, vw = sm.v() + 64 * cw * 128;
        const uint32_t ds_off = BR == 128 ? cw * BC * 128 : 0, k_dq = sm.k() + (D == 128 ? cw * BC * 128 : 0);
        const int q_off = BR == 128 ? 64 * cw : 0, c_off = D == 128 ? 64 * cw : 0;
        const bool unwindowed = mask_is_full(a.mask);
        const uint32_t box = sm.dq(cw);

        /* dQ_{s-1} = dS K_j over the 128 keys, from dS^T buffer (s - 1) % 2,
         * once the other warpgroup's half of it is in */
        auto ds_wait = [&](int s) {
            if (tid == 0) bulk_wait_read0();   /* the last reduction has read this warpgroup's dQ boxes */
            named_bar_sync(BAR_DS + 2 * (cw_now() ^ 1) + ((s - 1) & 1), 256);
        };
        auto dq_issue = [&](float (&dq)[32], int s) {
            const uint32_t dsb = sm.ds((s - 1) & 1);
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < BC / 16; kk++)
                wgmma_ss<T, 64, true>(dq, make_desc(dsb + ds_off + kk * 2048, BC * 128, 1024),
                                      make_desc(k_dq + kk * 2048, BC * 128, 1024), kk > 0);
            wgmma_commit();
        };
        /* softmax_scale dQ_{s-1} into the boxes and to the copy engine (step 2's layout) */
        auto dq_reduce = [&](const float (&dq)[32], int where) {
#pragma unroll
            for (int n = 0; n < 8; n++)
#pragma unroll
                for (int hh = 0; hh < 2; hh++) {
                    const int r = 16 * warp + g + 8 * hh, c = 2 * (n % 4) + (t >> 1);
                    const uint32_t at = box + (n / 4) * 8192 + r * 128 + ((c ^ (r & 7)) << 4) + (t & 1) * 8;
                    asm volatile("st.shared.v2.f32 [%0], {%1, %2};" ::"r"(at),
                                 "f"(a.softmax_scale * dq[4 * n + 2 * hh]), "f"(a.softmax_scale * dq[4 * n + 2 * hh + 1])
                                 : "memory");
                }
            fence_proxy_async();
            named_bar_sync(3 + cw, 128);
            if (tid == 0) {
                const int hq = where % a.H, i0 = where / a.H * BR;
#pragma unroll
                for (int bx = 0; bx < 2; bx++)
                    tma_reduce_add_4d(tmdQ, box + bx * 8192, c_off + 32 * bx, (VL ? seq.q0 : 0) + i0 + q_off, hq,
                                      VL ? 0 : b);
                bulk_commit();
            }
        };

        /* Step s up to its dV, dK products (issued, not waited for): step 2's
         * products and arithmetic; leaves the 16-bit P^T, dS^T fragments and
         * where dQ_s goes, as one number (query block x H + query head, at
         * most 2^27 + H by bwd_v3_check's extent limit): fewer registers held across the
         * next step's products */
        int where = 0;
        auto front = [&](int s, uint32_t (&pf)[BR / 4], uint32_t (&sf)[BR / 4]) {
            const int st = s & 1;
            const int hq = hk * a.h_per_kv + w.h, ib = w.block(), i0 = ib * BR;
            where = ib * a.H + hq;
            const int i1 = min(i0 + BR, Sq);
            const bool full = jw + 64 <= Sk && (unwindowed || mask_tile_unmasked(a.mask, i0, i1, jw, jw + 64));
            mbar_wait(sm.full(st), (s >> 1) & 1);

            /* S^T = K_w Q_i^T and dP^T = V_w dO_i^T, two groups, in turn */
            float sp[BR / 2], dp[BR / 2];
            named_bar_sync(BAR_TURN + cw_now(), 256);
            wgmma_fence();
            gemm_qk<T, D, BC, BR>(sp, kw, sm.q(st));
            wgmma_commit();
            gemm_qk<T, D, BC, BR>(dp, vw, sm.dO(st));
            wgmma_commit();
            named_bar_arrive(BAR_TURN + (cw_now() ^ 1), 256);
            wgmma_wait<1>();
            reg_fence(sp);

            const float *Ls = sm.L(st), *Ds = sm.Dr(st);
#pragma unroll
            for (int n = 0; n < NS; n++) {
                const float2 l2 = *reinterpret_cast<const float2 *>(Ls + 8 * n + 2 * t);
#pragma unroll
                for (int e = 0; e < 4; e++)
                    sp[4 * n + e] = ex2(bwd_exponent2(sp[4 * n + e], a.softmax_scale, (e & 1) ? l2.y : l2.x));
            }
            if (!full) {
#pragma unroll
                for (int n = 0; n < NS; n++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const int i = i0 + 8 * n + 2 * t + (e & 1), j = jw + 16 * warp + g + 8 * (e >> 1);
                        if (!(j < Sk && mask_visible(a.mask, i, j))) sp[4 * n + e] = 0.f;
                    }
            }
#pragma unroll
            for (int i = 0; i < BR / 4; i++) pf[i] = pack2<T>(sp[2 * i], sp[2 * i + 1]);
            wgmma_wait<0>();
            reg_fence(dp);
#pragma unroll
            for (int n = 0; n < NS; n++) {
                const float2 d2 = *reinterpret_cast<const float2 *>(Ds + 8 * n + 2 * t);
                sf[2 * n] = pack2<T>(sp[4 * n] * (dp[4 * n] - d2.x), sp[4 * n + 1] * (dp[4 * n + 1] - d2.y));
                sf[2 * n + 1] = pack2<T>(sp[4 * n + 2] * (dp[4 * n + 2] - d2.x), sp[4 * n + 3] * (dp[4 * n + 3] - d2.y));
            }
            /* dV_w += P^T dO_i, dK_w += dS^T Q_i: one group */
            reg_fence(dv);
            reg_fence(dk);
            wgmma_fence();
            gemm_pv<T, D, BR>(dv, pf, sm.dO(st));
            gemm_pv<T, D, BR>(dk, sf, sm.q(st));
            wgmma_commit();
        };
        /* this warpgroup's half of dS^T_s into buffer s % 2 (step 2's swizzle) */
        auto store_ds = [&](int s, const uint32_t (&sf)[BR / 4]) {
            const uint32_t dsb = sm.ds(s & 1);
#pragma unroll
            for (int n = 0; n < NS; n++)
#pragma unroll
                for (int hh = 0; hh < 2; hh++) {
                    const int r = 64 * cw + 16 * warp + g + 8 * hh;
                    const uint32_t at = dsb + (n / 8) * BC * 128 + r * 128 + (((n % 8) ^ (r & 7)) << 4) + 4 * t;
                    asm volatile("st.shared.u32 [%0], %1;" ::"r"(at), "r"(sf[2 * n + hh]) : "memory");
                }
            fence_proxy_async();
        };
        /* once the products of step s (and dQ_{s-1}) are done: the stage back
         * to the producer, dS^T_s published to the other warpgroup */
        auto back = [&](int s) {
            reg_fence(dk);
            reg_fence(dv);
            mbar_arrive(sm.empty(s & 1));   /* Q_i, dO_i, L_i, D_i of this stage are read */
            named_bar_arrive(BAR_DS + 2 * cw_now() + (s & 1), 256);
        };

        if (cw == 1) named_bar_arrive(BAR_TURN, 256);   /* warpgroup 0 takes the first turn */
        {   /* step 0: no dQ before it; buffer 0 not used yet */
            uint32_t pf[BR / 4], sf[BR / 4];
            front(0, pf, sf);
            store_ds(0, sf);
            wgmma_wait<0>();
            back(0);
        }
        for (int s = 1; s < steps; s++) {
            const int where_prev = where;
            w.next();
            uint32_t pf[BR / 4], sf[BR / 4];
            float dq[32];
            front(s, pf, sf);
            ds_wait(s);        /* the other's dS^T_{s-1} is in, and its dQ_{s-2} has read buffer s % 2 */
            store_ds(s, sf);   /* before dQ_{s-1}: the fragments' registers are free for dQ */
            dq_issue(dq, s);   /* dQ_{s-1}, under the dV, dK products */
            wgmma_wait<0>();
            reg_fence(dq);
            back(s);           /* after dQ_{s-1} has read buffer (s - 1) % 2 */
            dq_reduce(dq, where_prev);
        }
        {   /* the last step's dQ */
            float dq[32];
            ds_wait(steps);
            dq_issue(dq, steps);
            wgmma_wait<0>();
            reg_fence(dq);
            dq_reduce(dq, where);
        }
        if (cw == 0) named_bar_sync(BAR_TURN, 256);   /* warpgroup 1's last hand-over */
        if (tid == 0) bulk_wait0();
    }

    /* dK_j, dV_j as step 2 writes them */
#pragma unroll
    for (int hh = 0; hh < 2; hh++) {
        const int j = jw + 16 * warp + g + 8 * hh;
        if (j >= Sk) continue;   /* (VL: the next sequence's key) */
        const int jr = (VL ? seq.k0 : 0) + j;
        T *dkr = x.dk + b * x.sdk.batch + hk * x.sdk.head + jr * x.sdk.row + 2 * t;
        T *dvr = x.dv + b * x.sdv.batch + hk * x.sdv.head + jr * x.sdv.row + 2 * t;
#pragma unroll
        for (int c = 0; c < D / 8; c++) {
            *reinterpret_cast<uint32_t *>(dkr + 8 * c) =
                pack2<T>(a.softmax_scale * dk[4 * c + 2 * hh], a.softmax_scale * dk[4 * c + 2 * hh + 1]);
            *reinterpret_cast<uint32_t *>(dvr + 8 * c) = pack2<T>(dv[4 * c + 2 * hh], dv[4 * c + 2 * hh + 1]);
        }
    }
}

//> bwd-v3-kernel
template <typename T, int D, int STEP, bool VL>
__global__ void __launch_bounds__(bwd_v3_cfg<D>::NT, 1)
    bwd_v3_kernel(const __grid_constant__ CUtensorMap tmQ, const __grid_constant__ CUtensorMap tmK,
                  const __grid_constant__ CUtensorMap tmV, const __grid_constant__ CUtensorMap tmdO,
                  const __grid_constant__ CUtensorMap tmdQ, const bwd_args<T> x)
{
    using C = bwd_v3_cfg<D>;
    extern __shared__ __align__(16) uint8_t bwd_v3_smem_raw[];
    const uint32_t raw = smem_u32(bwd_v3_smem_raw), base = (raw + 1023u) & ~1023u;
    const bwd_v3_smem<D> sm{base, reinterpret_cast<float *>(bwd_v3_smem_raw + (base - raw))};
    /* VL: sequence b as its own problem (lengths, mask) and where its rows
     * start (bwd_view_of); else the call itself */
    const bwd_view seq = bwd_view_of<VL>(x, blockIdx.y / x.a.H_kv);
    const fa_kargs &a = VL ? seq.a : x.a;
    const int jb = blockIdx.x, j0 = jb * C::BC, j1 = min(j0 + C::BC, a.seqlen_k);
    if (VL && j0 >= a.seqlen_k) return;   /* the grid is the longest sequence's: no key of this one here */
    const int bkv = blockIdx.y, b = bkv / a.H_kv, hk = bkv % a.H_kv;
    bwd_v3_walk w{0, 0, 0, 0, 0};
    int ib_end;
    w.nq = mask_query_blocks(a.mask, j0, j1, C::BR, &w.ib_begin, &ib_end);
    w.rot = x.deterministic || w.nq == 0 ? 0 : jb % w.nq;
    const int steps = w.nq * a.h_per_kv;
    if (threadIdx.x == 0) {
        mbar_init(sm.kv_full(), 2);   /* the two expect_tx arrivals of K and V */
        for (int st = 0; st < 2; st++) {
            mbar_init(sm.full(st), C::FULL_ARRIVALS);
            mbar_init(sm.empty(st), 256);   /* every consumer thread */
        }
        fence_barrier_init();
    }
    __syncthreads();
    if (threadIdx.x < 128) {
        setmaxnreg_dec<C::PRODUCER_REGS>();
        if (threadIdx.x < 32 && steps > 0)
            bwd_v3_producer<T, D, VL>(sm, &tmQ, &tmK, &tmV, &tmdO, x, seq, w, steps, b, hk, j0);
    } else {
        setmaxnreg_inc<C::CONSUMER_REGS>();
        /* the warpgroup index as a warp-uniform value (stage4_fwd_v3_hopper.cu, v3-kernel) */
        const int wg = __shfl_sync(0xffffffffu, threadIdx.x / 128, 0);
        if constexpr (STEP == 3)
            bwd_v3_consumer3<T, D, VL>(wg - 1, sm, x, seq, &tmdQ, w, steps, b, hk, j0);
        else
            bwd_v3_consumer<T, D, STEP, VL>(wg - 1, sm, x, seq, &tmdQ, w, steps, b, hk, jb, j0);
    }
}
//< bwd-v3-kernel

//> bwd-v3-step
/* The steps version 3 of the backward was built in, selectable with
 * FA_BWD3_STEP in the environment (default BWD_V3_DEFAULT_STEP), so that each
 * can be measured beside the others (data/gpu/studies/bwd_v3_steps/steps.md):
 *   1  the schedule of the header, dQ_i added by 16-byte reductions from
 *      the registers
 *   2  dQ_i through shared memory, added by the copy engine's tensor
 *      reduction (the deterministic mode keeps step 1's ordered additions)
 *   3  step 2 with the consumer warpgroups in ping-pong, dQ_i a step late
 *      and no barrier of both per step (the same deterministic mode): the
 *      default: dK and dV bitwise step 2's, the stage-5 suite and repeated
 *      runs of each compute-sanitizer tool clean, faster than step 2 at
 *      most shapes (data/gpu/studies/bwd_v3_steps/steps.md, bwd_step3.csv) */
#define BWD_V3_STEPS 3
#define BWD_V3_DEFAULT_STEP 3
static int bwd_v3_step(void)
{
    const char *e = getenv("FA_BWD3_STEP");
    if (!e || !*e) return BWD_V3_DEFAULT_STEP;
    char *end;
    const long k = strtol(e, &end, 10);
    return *end == '\0' && k >= 1 && k <= BWD_V3_STEPS ? (int)k : 0;
}
//< bwd-v3-step

/* The tensor map of the fp32 dQ accumulator (B, H, Sq, d), contiguous, in
 * boxes of 32 columns (128 bytes) x 64 rows, 128-byte swizzle: what step 2's
 * reductions add from. packed: the varlen accumulator (total_q = Sq, H, d)
 * as one batch (B = 1; the batch stride, never stepped over, one row's). */
static int bwd_v3_dq_map(CUtensorMap *map, float *acc, int d, int Sq, int H, int B, bool packed = false)
{
    PFN_cuTensorMapEncodeTiled_v12000 encode = v3_encode_fn();
    if (!encode)
        return fa_set_error(FA_ERR_CUDA, "%s:%d: the driver has no cuTensorMapEncodeTiled", __FILE__, __LINE__);
    cuuint64_t dims[4] = {(cuuint64_t)d, (cuuint64_t)Sq, (cuuint64_t)H, (cuuint64_t)B};
    cuuint64_t strides[3] = {(cuuint64_t)d * 4, (cuuint64_t)Sq * d * 4, (cuuint64_t)H * Sq * d * 4};
    if (packed) {
        strides[0] = (cuuint64_t)H * d * 4;
        strides[1] = (cuuint64_t)d * 4;
        strides[2] = strides[0];
    }
    cuuint32_t box[4] = {32, 64, 1, 1}, elem[4] = {1, 1, 1, 1};
    CUresult r = encode(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, acc, dims, strides, box, elem,
                        CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                        CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
        return fa_set_error(FA_ERR_CUDA, "%s:%d: cuTensorMapEncodeTiled (dQ accumulator, d %d, seqlen %d): CUresult %d",
                            __FILE__, __LINE__, d, Sq, (int)r);
    return FA_OK;
}

/* VL (packed sequences, x.cu_q set): the maps over one batch of the packed
 * rows, as forward version 3's (a dimension of 1 whose stride is one row's),
 * and the grid over the longest sequence's key blocks (x.a.seqlen_k) x B
 * H_kv; a block whose keys start past its sequence's end returns. */
template <typename T, int D, bool VL>
static int bwd_v3_launch_d(const bwd_args<T> &x, int B, cudaStream_t st)
{
    using C = bwd_v3_cfg<D>;
    const int dtype = std::is_same<T, __nv_bfloat16>::value ? FA_BF16 : FA_FP16;
    const fa_kargs &a = x.a;
    const int rows_q = VL ? x.total_q : a.seqlen_q, rows_k = VL ? x.total_k : a.seqlen_k, batches = VL ? 1 : B;
    fa_stride sq = x.sq, sdo = x.sdo, sk = x.sk, sv = x.sv;
    if (VL) {
        sq.batch = sq.row;
        sdo.batch = sdo.row;
        sk.batch = sk.row;
        sv.batch = sv.row;
    }
    CUtensorMap tq, tk, tv, tdo, tdq;
    int rc;
    if ((rc = v3_tensor_map_strided(&tq, x.q, dtype, D, rows_q, a.H, batches, &sq, C::BR)) ||
        (rc = v3_tensor_map_strided(&tdo, x.dO, dtype, D, rows_q, a.H, batches, &sdo, C::BR)) ||
        (rc = v3_tensor_map_strided(&tk, x.k, dtype, D, rows_k, a.H_kv, batches, &sk, C::BC)) ||
        (rc = v3_tensor_map_strided(&tv, x.v, dtype, D, rows_k, a.H_kv, batches, &sv, C::BC)) ||
        (rc = bwd_v3_dq_map(&tdq, x.dq_acc, D, rows_q, a.H, batches, VL)))
        return rc;
    const dim3 grid((a.seqlen_k + C::BC - 1) / C::BC, (unsigned)(B * a.H_kv));
    auto go = [&](auto kernel, bool &attr_set) -> int {   /* attr_set: per instantiation */
        if (!attr_set) {
            CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, C::SMEM));
            attr_set = true;
        }
        kernel<<<grid, C::NT, C::SMEM, st>>>(tq, tk, tv, tdo, tdq, x);
        LAUNCH_CHECK();
        return FA_OK;
    };
    static bool set1 = false, set2 = false, set3 = false;
    const int step = x.deterministic ? 1 : bwd_v3_step();
    return step == 3   ? go(bwd_v3_kernel<T, D, 3, VL>, set3)
           : step == 2 ? go(bwd_v3_kernel<T, D, 2, VL>, set2)
                       : go(bwd_v3_kernel<T, D, 1, VL>, set1);
}

template <typename T> static int bwd_v3_launch(const bwd_args<T> &x, int B, cudaStream_t st)
{
    if (x.cu_q)   /* packed sequences (bwd_v3_run_varlen) */
        return x.a.d == 64 ? bwd_v3_launch_d<T, 64, true>(x, B, st) : bwd_v3_launch_d<T, 128, true>(x, B, st);
    return x.a.d == 64 ? bwd_v3_launch_d<T, 64, false>(x, B, st) : bwd_v3_launch_d<T, 128, false>(x, B, st);
}

/* The row's limits beyond fa_api.cu's (fp16/bf16, d 64 or 128, cc 9.0):
 * the grid's second dimension, and the tensor maps' extents. */
static int bwd_v3_check(int dtype, const attn_params *p)
{
    (void)dtype;
    if (!bwd_v3_step())
        return fa_set_error(FA_ERR_UNSUPPORTED, "FA_BWD3_STEP=%s: backward version 3 has steps 1 to %d",
                            getenv("FA_BWD3_STEP"), BWD_V3_STEPS);
    if ((long long)p->B * p->H_kv > 65535)
        return fa_set_error(FA_ERR_UNSUPPORTED, "backward version 3: B H_kv above 65535");
    if ((long long)p->B * p->H * p->seqlen_q * p->d > (1ll << 40))
        return fa_set_error(FA_ERR_UNSUPPORTED, "backward version 3: problem too large (tensor extent)");
    return FA_OK;
}

static int bwd_v3_run(int dtype, const attn_params *p, const fa_ptrs *x, int deterministic, cudaStream_t st)
{
    return tiled_backward_mma("v3", dtype, p, x, deterministic, st, bwd_v3_launch<__half>, bwd_v3_launch<__nv_bfloat16>);
}

/* Packed sequences (fa_backward_varlen): the grid of the longest
 * sequence's key blocks x B H_kv, each block working on its sequence alone
 * (bwd_view_of), with the dense kernel's tile origins relative to the
 * sequence's first rows, so that the deterministic mode computes each
 * sequence bit for bit as a dense call on it alone. The rows of the next
 * sequence that the copy engine brings with a sequence's last tile meet
 * P = 0 (queries: L = +inf; keys: the bound test), so they add nothing
 * provided they are finite (the inputs of the call are); dK, dV of keys
 * past the end are not written, the ordered dQ additions stop at the end,
 * the copy engine's (default mode) add exact zeros there. */
static int bwd_v3_check_varlen(int dtype, const attn_params *p, int flags)
{
    (void)flags;   /* FA_BWD_CENTER_K: tiled_backward_vl refuses it, for every version */
    return bwd_v3_check(dtype, p);
}
static int bwd_v3_run_varlen(int dtype, const attn_params *p, const fa_varlen *vl, const fa_ptrs *x, int flags,
                             cudaStream_t st)
{
    if (fa_device_cc() != 90)
        return fa_set_error(FA_ERR_UNSUPPORTED, "backward version 3 is built for sm_90a (H100/H200) only");
    return tiled_backward_mma_vl("v3", dtype, p, vl, x, flags, st, bwd_v3_launch<__half>, bwd_v3_launch<__nv_bfloat16>);
}

static int bwd_v3_block_rows(int d) { return d == 64 ? bwd_v3_cfg<64>::BR : bwd_v3_cfg<128>::BR; }
static int bwd_v3_block_cols(int d) { (void)d; return bwd_v3_cfg<64>::BC; }

/* Version 3's backward row (core/versions.def). prefer: the op takes it
 * before version 4, which it runs 2.0-2.2 times as fast on the H200
 * (data/gpu/studies/bwd_v3_steps/steps.md); version 4 stays the choice elsewhere
 * (d other than 64 and 128, GPUs other than Hopper). */
const fa_row fa_row_bwd_v3 = {.info = {.pass = FA_BACKWARD, .version = 3, .name = "v3",
    .what = "Hopper: K, V resident, Q, dO by TMA, wgmma, producer warp + 2 consumer warpgroups, fp32 dQ reductions", .dtypes = FA_DT(FA_FP16) | FA_DT(FA_BF16), .d_min = 64, .d_max = 128, .d_multiple = 64, .masks = 1, .deterministic = 1, .min_cc = 90, .slug = "hopper", .strided = 1, .varlen = 1, .prefer = 1, .center_rate = 506e12},
    .run = bwd_v3_run, .check = bwd_v3_check, .workspace = tiled_bwd_workspace, .block_rows = bwd_v3_block_rows, .block_cols = bwd_v3_block_cols, .model_bytes = tiled_bwd_model,
    .run_varlen = bwd_v3_run_varlen, .check_varlen = bwd_v3_check_varlen, .workspace_varlen = tiled_bwd_workspace_varlen};

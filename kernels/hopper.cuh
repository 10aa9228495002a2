/*
 * hopper.cuh -- Hopper's own instructions as device functions (sm_90a
 * only), shared by forward version 3 (kernels/stage4_fwd_v3_hopper.cu) and
 * backward version 3 (kernels/stage5_bwd_v3_hopper.cu): the mbarrier, the
 * tensor copy engine (TMA) filling shared memory in the 128-byte swizzle,
 * fences, named barriers, setmaxnreg, wgmma with its
 * shared-memory descriptors, the two matrix products of a key tile built
 * from them, and the host's tensor maps. The piece tests of
 * tests/gpu/v3_check_cuda.cu run each of them alone on one tile.
 *
 * Every function here is the PTX instruction it wraps plus the layout rule
 * its comment gives; none holds state. Compile for
 * -gencode=arch=compute_90a,code=sm_90a (kernels/gpu.mk): wgmma and
 * setmaxnreg exist only in that target.
 */
#ifndef FA_HOPPER_CUH
#define FA_HOPPER_CUH

#include "gpu_common.cuh"

#include <cuda.h>           /* CUtensorMap and its enums (types only: libcuda is not linked) */
#include <cudaTypedefs.h>   /* PFN_cuTensorMapEncodeTiled */

#include <stdint.h>
#include <type_traits>

/* ------------------------------------------------------------------------- */
/* PTX wrappers: shared addresses, mbarriers, the tensor copy, wgmma          */
/* ------------------------------------------------------------------------- */
//> v3-mbarrier
/* An mbarrier is a 64-bit word in shared memory that counts arrivals and
 * bytes. A phase completes when `count` threads have arrived and every byte
 * announced with expect_tx has been delivered; waiters name the phase by its
 * parity (0, 1, 0, ...). */
__device__ __forceinline__ void mbar_init(uint32_t bar, int count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity)
{
    /* The retry loop is in PTX (labels are local to the { } block): a C++
     * loop would be a divergent branch to the compiler, which then
     * serializes the wgmma that follow it. */
    asm volatile("{\n.reg .pred p;\n"
                 "WAIT_%=:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
                 "@!p bra WAIT_%=;\n}\n" ::"r"(bar),
                 "r"(parity)
                 : "memory");
}
//< v3-mbarrier

//> v3-tma
/* One box of the tensor map (64 columns x rows x 1 head x 1 batch) into
 * shared memory at dst; the copy engine adds the bytes to bar's transaction
 * count when they have landed. Coordinates: {column, row, head, batch}; rows
 * past the tensor's extent arrive as zeros (and still count). */
__device__ __forceinline__ void tma_load_4d(uint32_t dst, const CUtensorMap *map, uint32_t bar,
                                            int c0, int c1, int c2, int c3, bool issue = true)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %7, 0;\n"
                 "@p cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3, %4, %5}], [%6];\n}\n" ::"r"(dst),
                 "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar),
                 "r"((int)issue)
                 : "memory");
}
/* A whole tile: ROWS rows from row0 of head z.x of batch z.y, all d = 64 CB
 * columns, as CB column blocks of ROWS x 128 bytes; one expect_tx announces
 * all of it. Only threads with `issue` set act (a predicate, not a branch:
 * step 1 calls this from all 128 threads of the warpgroup that also issues
 * wgmma, and a branch there would make the compiler serialize the wgmma). */
template <int CB, int ROWS>
__device__ __forceinline__ void tma_tile(const CUtensorMap *map, uint32_t dst, uint32_t bar,
                                         int row0, int2 z, bool issue = true)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %2, 0;\n"
                 "@p mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n}\n" ::"r"(bar),
                 "r"(CB * ROWS * 128), "r"((int)issue)
                 : "memory");
#pragma unroll
    for (int cb = 0; cb < CB; cb++)
        tma_load_4d(dst + cb * ROWS * 128, map, bar, cb * 64, row0, z.x, z.y, issue);
}
/* Head z of batch 0 (maps of one batch, as the pieces' self-tests build). */
template <int CB, int ROWS>
__device__ __forceinline__ void tma_tile(const CUtensorMap *map, uint32_t dst, uint32_t bar,
                                         int row0, int z, bool issue = true)
{
    tma_tile<CB, ROWS>(map, dst, bar, row0, make_int2(z, 0), issue);
}
//< v3-tma

/* Orders this thread's generic-proxy writes to shared memory before later
 * reads by the async proxy (wgmma operands, bulk copies): written before
 * the barrier that hands the tile to the warpgroups that read it. */
__device__ __forceinline__ void fence_proxy_async()
{
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}
__device__ __forceinline__ void fence_barrier_init()
{
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
__device__ __forceinline__ void named_bar_sync(int id, int n)
{
    asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(n) : "memory");
}
__device__ __forceinline__ void named_bar_arrive(int id, int n)
{
    asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(n) : "memory");
}
template <int R> __device__ __forceinline__ void setmaxnreg_inc()
{
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(R));
}
template <int R> __device__ __forceinline__ void setmaxnreg_dec()
{
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(R));
}

/* wgmma bookkeeping: fence before a batch (orders earlier register writes
 * before the asynchronous reads), commit closes a group, wait<N> blocks
 * until at most N groups are still in flight. */
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit()
{
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
template <int N> __device__ __forceinline__ void wgmma_wait()
{
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
/* Keeps the compiler from moving accesses of a register across an
 * asynchronous wgmma that reads or writes it (the asm "uses" the value). */
__device__ __forceinline__ void reg_fence(float &x) { asm volatile("" : "+f"(x)::"memory"); }
__device__ __forceinline__ void reg_fence(uint32_t &x) { asm volatile("" : "+r"(x)::"memory"); }
template <int N> __device__ __forceinline__ void reg_fence(float (&x)[N])
{
#pragma unroll
    for (int i = 0; i < N; i++) reg_fence(x[i]);
}
template <int N> __device__ __forceinline__ void reg_fence(uint32_t (&x)[N])
{
#pragma unroll
    for (int i = 0; i < N; i++) reg_fence(x[i]);
}

//> v3-desc
/* A wgmma shared-memory matrix descriptor (PTX ISA, "Matrix Descriptor
 * Format"): start address, leading and stride byte offsets (all >> 4), and
 * the swizzle mode in bits 62-63 (1 = 128-byte swizzle).
 *   K-major (Q, K: rows of 64 contiguous elements along the reduction
 *   dimension): SBO = 1024 bytes between groups of 8 rows; LBO unused.
 *   MN-major (V read transposed: 64 contiguous elements along the output
 *   dimension d): SBO = 1024 bytes between groups of 8 keys, LBO = bytes
 *   between 64-column blocks of d. */
__device__ __forceinline__ uint64_t make_desc(uint32_t addr, uint32_t lbo, uint32_t sbo)
{
    return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)((lbo >> 4) & 0x3FFF) << 16) |
           ((uint64_t)((sbo >> 4) & 0x3FFF) << 32) | (1ull << 62);
}
//< v3-desc

/* The operand lists of the wgmma wrappers: accumulators d[0..N/2). */
#define V3_A8(i)                                                                              \
    "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
        "+f"(d[i + 6]), "+f"(d[i + 7])
#define V3_A32 V3_A8(0), V3_A8(8), V3_A8(16), V3_A8(24)
#define V3_A64 V3_A32, V3_A8(32), V3_A8(40), V3_A8(48), V3_A8(56)
#define V3_A88 V3_A64, V3_A8(64), V3_A8(72), V3_A8(80)
#define V3_R32                                                                                 \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, " \
    "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define V3_R64                                                                                 \
    V3_R32 ", %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "  \
           "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define V3_R88                                                                                 \
    V3_R64 ", %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "  \
           "%80, %81, %82, %83, %84, %85, %86, %87"

/* S (64 x N, fp32) (+)= A (64 x 16) B^T (B: N x 16), both read from
 * shared memory, K-major. scale_d = 0 overwrites d (the first k-step). N is
 * 128, or 176 for step 8's key tiles at d = 128. */
#define V3_SS(TY, NN, RL, AL, IA, IB, IP, TR)                                                  \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" IP ", 0;\n"                              \
                 "wgmma.mma_async.sync.aligned.m64n" NN "k16.f32." TY "." TY " {" RL "}, "      \
                 "%" IA ", %" IB ", p, 1, 1, " TR ";\n}\n"                                     \
                 : AL                                                                          \
                 : "l"(da), "l"(db), "r"(scale_d))
/* TRANS: both operands MN-major (imm-trans-a = imm-trans-b = 1): A read as
 * the transpose of an [k][m] tile, B as the transpose of a [k][n] tile (the
 * backward's dQ = dS K from dS^T and K as they lie); n64 only. */
template <typename T, int N, bool TRANS = false>
__device__ __forceinline__ void wgmma_ss(float *d, uint64_t da, uint64_t db, int scale_d)
{
    static_assert(N == 64 || N == 128 || N == 176, "S = Q K^T is n64, n128 or n176");
    static_assert(!TRANS || N == 64, "the transposed product is n64");
    constexpr bool BF = std::is_same<T, __nv_bfloat16>::value;
    if constexpr (N == 64 && TRANS) {
        if constexpr (BF) V3_SS("bf16", "64", V3_R32, V3_A32, "32", "33", "34", "1, 1");
        else V3_SS("f16", "64", V3_R32, V3_A32, "32", "33", "34", "1, 1");
    } else if constexpr (N == 64) {
        if constexpr (BF) V3_SS("bf16", "64", V3_R32, V3_A32, "32", "33", "34", "0, 0");
        else V3_SS("f16", "64", V3_R32, V3_A32, "32", "33", "34", "0, 0");
    } else if constexpr (N == 128) {
        if constexpr (BF) V3_SS("bf16", "128", V3_R64, V3_A64, "64", "65", "66", "0, 0");
        else V3_SS("f16", "128", V3_R64, V3_A64, "64", "65", "66", "0, 0");
    } else {
        if constexpr (BF) V3_SS("bf16", "176", V3_R88, V3_A88, "88", "89", "90", "0, 0");
        else V3_SS("f16", "176", V3_R88, V3_A88, "88", "89", "90", "0, 0");
    }
}
/* O (64 x N, fp32) += A (64 x 16, registers) B (16 x N, shared memory,
 * N-major: the transpose bit is set, imm-trans-b = 1). */
#define V3_RS(TY, NN, RL, AL, I0, I1, I2, I3, I4, I5)                                          \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" I5 ", 0;\n"                              \
                 "wgmma.mma_async.sync.aligned.m64n" NN "k16.f32." TY "." TY " {" RL "}, "      \
                 "{%" I0 ", %" I1 ", %" I2 ", %" I3 "}, %" I4 ", p, 1, 1, 1;\n}\n"              \
                 : AL                                                                          \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d))
template <typename T, int N>
__device__ __forceinline__ void wgmma_rs(float *d, const uint32_t *a, uint64_t db, int scale_d)
{
    static_assert(N == 64 || N == 128, "P V is n64 or n128");
    if constexpr (N == 128) {
        if constexpr (std::is_same<T, __nv_bfloat16>::value)
            V3_RS("bf16", "128", V3_R64, V3_A64, "64", "65", "66", "67", "68", "69");
        else
            V3_RS("f16", "128", V3_R64, V3_A64, "64", "65", "66", "67", "68", "69");
    } else {
        if constexpr (std::is_same<T, __nv_bfloat16>::value)
            V3_RS("bf16", "64", V3_R32, V3_A32, "32", "33", "34", "35", "36", "37");
        else
            V3_RS("f16", "64", V3_R32, V3_A32, "32", "33", "34", "35", "36", "37");
    }
}

/* ------------------------------------------------------------------------- */
/* The two matrix products of one key tile, as a warpgroup issues them       */
/* ------------------------------------------------------------------------- */
//> v3-gemms
/* S = Q K^T for the warpgroup's 64 rows and a key tile of 128 rows: d/16
 * instructions m64n128k16. q: the warpgroup's first Q row in column block 0
 * (block cb lies QROWS * 128 bytes further on); k: the K tile. Moving 16
 * columns along d is +32 bytes inside a 128-byte row (the hardware applies
 * the swizzle to the final address), and +ROWS*128 bytes at each new
 * column block. Accumulator layout (64 x 128 over 128 threads): warp w holds
 * rows 16w..16w+15; thread (lane) has s[4n + e] = S[16w + lane/4 + 8(e/2)]
 * [8n + 2(lane%4) + e%2], n = 0..15. */
template <typename T, int D, int QROWS, int BC>
__device__ __forceinline__ void gemm_qk(float (&s)[BC / 2], uint32_t q, uint32_t k)
{
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) {
        const uint32_t col = (kk % 4) * 32;
        uint64_t da = make_desc(q + (kk / 4) * QROWS * 128 + col, 16, 1024);
        uint64_t db = make_desc(k + (kk / 4) * BC * 128 + col, 16, 1024);
        wgmma_ss<T, BC>(s, da, db, kk > 0);
    }
}
/* O += P V: 8 instructions m64n{d}k16, one per 16 keys. P comes from
 * registers in the A-fragment layout (p[4kk..4kk+3] for keys 16kk..16kk+15:
 * rows lane/4 and +8, columns 2(lane%4) and +8), which is the accumulator
 * layout of S repacked two values per register. V's tile is [key][d] with d
 * contiguous, so B is read "N-major" (transposed): 16 keys = two groups of
 * 8 rows, 2048 bytes per step. */
template <typename T, int D, int BC>
__device__ __forceinline__ void gemm_pv(float (&o)[D / 2], const uint32_t (&p)[BC / 4], uint32_t v)
{
#pragma unroll
    for (int kk = 0; kk < BC / 16; kk++) {
        uint64_t db = make_desc(v + kk * 2048, BC * 128, 1024);
        wgmma_rs<T, D>(o, &p[4 * kk], db, 1);
    }
}
//< v3-gemms

/* The tensor map of one operand (host side, defined in kernels/stage4_fwd_v3_hopper.cu):
 * a 3-D array (d, seqlen, heads) of 16-bit elements of dtype FA_FP16 or
 * FA_BF16 at ptr, read in boxes of 64 columns x `rows` rows x 1 head, in the
 * 128-byte swizzle; rows past seqlen arrive as zeros. FA_OK, or FA_ERR_CUDA
 * with one line when the driver refuses it. */
int v3_tensor_map(CUtensorMap *map, const void *ptr, int dtype, int d, int seqlen, int heads, int rows);
/* The driver's cuTensorMapEncodeTiled (through the runtime's entry-point
 * query, so that libcuda is not linked), NULL where the driver lacks it. */
PFN_cuTensorMapEncodeTiled_v12000 v3_encode_fn(void);
/* The same for a 4-D (d, seqlen, heads, batch) operand with the element
 * strides st (fa_stride: row, head, batch) of a call; boxes 64 columns x
 * `rows` x 1 x 1. */
int v3_tensor_map_strided(CUtensorMap *map, const void *ptr, int dtype, int d, int seqlen, int heads, int batch,
                          const fa_stride *st, int rows);

#endif /* FA_HOPPER_CUH */

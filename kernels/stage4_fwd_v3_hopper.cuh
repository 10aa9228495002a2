/*
 * stage4_fwd_v3_hopper.cuh -- what version 3 of the forward
 * (kernels/stage4_fwd_v3_hopper.cu) adds to Hopper's instructions
 * (kernels/hopper.cuh): step 7's matrix products of a key tile with
 * descriptors built once per tile. The piece tests of
 * tests/gpu/v3_check_cuda.cu run them alone on one tile. sm_90a only.
 */
#ifndef FA_STAGE4_V3_HOPPER_CUH
#define FA_STAGE4_V3_HOPPER_CUH

#include "hopper.cuh"
#include "stage4_fwd_v3_hopper.h"

//> v3-gemms-lean
/* Step 7: the same products with descriptors built once per tile. A
 * descriptor's low 32 bits hold the start address >> 4 (bits 0-13) and the
 * leading byte offset >> 4 (bits 16-29); the high 32 bits (stride 1024 bytes,
 * 128-byte swizzle) are the same for every operand here. So one operand's
 * descriptors differ only by a constant added to the low word: the address
 * of the next 16 columns or keys, >> 4, which never carries out of bits 0-13
 * (shared addresses stay below 2^18). The products of step 4 recompute the
 * address, mask and shift for each instruction instead (about 100 of the 573
 * instructions of a d = 64 key block). */
constexpr uint32_t V3_DESC_HI = (1024u >> 4) | (1u << 30);
__device__ __forceinline__ uint32_t desc_lo(uint32_t addr, uint32_t lbo)
{
    return ((addr & 0x3FFFF) >> 4) | ((lbo >> 4) << 16);
}
__device__ __forceinline__ uint64_t desc_of(uint32_t lo)
{
    return ((uint64_t)V3_DESC_HI << 32) | lo;
}
template <typename T, int D, int QROWS, int BC>
__device__ __forceinline__ void gemm_qk_lean(float (&s)[BC / 2], uint32_t qlo, uint32_t klo)
{
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) {
        const uint32_t col = (kk % 4) * 2;   /* 32 bytes >> 4 */
        wgmma_ss<T, BC>(s, desc_of(qlo + (kk / 4) * QROWS * 8 + col),
                        desc_of(klo + (kk / 4) * BC * 8 + col), kk > 0);
    }
}
template <typename T, int D, int BC>
__device__ __forceinline__ void gemm_pv_lean(float (&o)[D / 2], const uint32_t (&p)[BC / 4], uint32_t vlo)
{
#pragma unroll
    for (int kk = 0; kk < BC / 16; kk++) wgmma_rs<T, D>(o, &p[4 * kk], desc_of(vlo + kk * 128), 1);
}
//< v3-gemms-lean

#endif /* FA_STAGE4_V3_HOPPER_CUH */

/*
 * v3_check_cuda.cu -- the CUDA half of build/v3_check (tests/gpu/v3_check.c):
 * the piece tests of version 3 of the forward and the launch watchdog.
 *
 * The piece tests run each building block of the kernel alone, on one tile,
 * through the same device functions the kernel is made of
 * (kernels/hopper.cuh, kernels/stage4_fwd_v3_hopper.cuh): where the tensor
 * copy engine puts every element in the 128-byte swizzle, the wgmma
 * accumulator layout of S = Q K^T, and O = P V with P from registers and V
 * read transposed, with
 * the descriptors of make_desc and of step 7 (desc_lo), at 128 and 176 keys
 * (v3_check_cuda.h says what each prints). Built for sm_90a like the kernel
 * (kernels/gpu.mk); the tensor maps come from the kernel's own launcher code
 * (v3_tensor_map), so a map the kernel would get wrong fails here too.
 */
#include "stage4_fwd_v3_hopper.cuh"
#include "v3_check_cuda.h"

#include <stdint.h>
#include <stdio.h>
#include <time.h>

#include <vector>

/* ========================================================================= */
/* The launch watchdog                                                        */
/* ========================================================================= */
extern "C" int v3_watchdog_wait(double seconds)
{
    cudaEvent_t e;
    CUDA_TRY(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    CUDA_TRY(cudaEventRecord(e));
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        cudaError_t r = cudaEventQuery(e);
        if (r == cudaSuccess) break;
        if (r != cudaErrorNotReady) {
            cudaEventDestroy(e);
            return fa_set_error(FA_ERR_CUDA, "%s:%d: kernel failed: %s", __FILE__, __LINE__, cudaGetErrorString(r));
        }
        clock_gettime(CLOCK_MONOTONIC, &t1);
        if ((t1.tv_sec - t0.tv_sec) + 1e-9 * (t1.tv_nsec - t0.tv_nsec) > seconds)
            return fa_set_error(FA_ERR_CUDA, "%s:%d: the kernel is still running after %.0f s (a deadlock: "
                                "a barrier phase nobody completes)", __FILE__, __LINE__, seconds);
        struct timespec nap = {0, 200000};
        nanosleep(&nap, NULL);
    }
    cudaEventDestroy(e);
    CUDA_TRY(cudaGetLastError());
    return FA_OK;
}

/* ========================================================================= */
/* Self-tests of the pieces                                                   */
/* ========================================================================= */
/* Each test kernel runs one warpgroup on one tile through the same device
 * functions as fwd_v3_kernel: tma_tile, gemm_qk, gemm_pv and the fragment
 * layouts written in their comments. Inputs are small integers, so every
 * product and sum is exact in fp32 and a result is either right or not. */

/* TMA: one tile (128 rows from row0 of head z, d = 128: two column blocks)
 * copied raw back to global memory, so that the host can check where the
 * copy engine put every element. */
__global__ void v3_test_tma(const __grid_constant__ CUtensorMap map, uint4 *out, int row0, int z)
{
    extern __shared__ uint8_t raw[];
    uint32_t base = (smem_u32(raw) + 1023u) & ~1023u;
    uint32_t bar = base + 2 * 128 * 128;
    if (threadIdx.x == 0) {
        mbar_init(bar, 1);
        fence_barrier_init();
    }
    __syncthreads();
    if (threadIdx.x == 0) tma_tile<2, 128>(&map, base, bar, row0, z);
    mbar_wait(bar, 0);
    const uint4 *s = reinterpret_cast<const uint4 *>(raw + (base - smem_u32(raw)));
    for (int i = threadIdx.x; i < 2 * 128 * 128 / 16; i += blockDim.x) out[i] = s[i];
}

/* A wgmma accumulator of one warpgroup (64 x N, fp32) into a row-major
 * 64 x N matrix: register 4 n + e of the thread (warp, g, t) is row
 * 16 warp + g + 8 (e / 2), column 8 n + 2 t + e % 2. */
template <int N>
__device__ void acc_store(float *out, const float *acc, int warp, int g, int t)
{
#pragma unroll
    for (int n = 0; n < N / 8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            out[(16 * warp + g + 8 * (e >> 1)) * N + 8 * n + 2 * t + (e & 1)] = acc[4 * n + e];
}

/* S = Q K^T (Q: 64 x D, K: BC x D) and O = P V (P: 64 x BC from global,
 * V: BC x D), one warpgroup; S and O written out by the layouts the main
 * kernel assumes. BC = 128 or 176 (step 8 at d = 128); LEAN: through step
 * 7's descriptors (desc_lo + offsets) instead of make_desc. */
template <typename T, int D, int BC, bool LEAN>
__global__ void v3_test_gemms(const __grid_constant__ CUtensorMap tq, const __grid_constant__ CUtensorMap tk,
                              const __grid_constant__ CUtensorMap tv, const float *P, float *S_out,
                              float *O_out)
{
    extern __shared__ uint8_t raw[];
    uint32_t base = (smem_u32(raw) + 1023u) & ~1023u;
    const uint32_t q = base, k = q + 64 * D * 2, v = k + BC * D * 2, bar = v + BC * D * 2;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    if (tid == 0) {
        for (int i = 0; i < 3; i++) mbar_init(bar + 8 * i, 1);
        fence_barrier_init();
    }
    __syncthreads();
    if (tid == 0) {
        tma_tile<D / 64, 64>(&tq, q, bar, 0, 0);
        tma_tile<D / 64, BC>(&tk, k, bar + 8, 0, 0);
        tma_tile<D / 64, BC>(&tv, v, bar + 16, 0, 0);
    }
    for (int i = 0; i < 3; i++) mbar_wait(bar + 8 * i, 0);

    float s[BC / 2], o[D / 2];
    uint32_t p[BC / 4];
    wgmma_fence();
    if constexpr (LEAN) gemm_qk_lean<T, D, 64, BC>(s, desc_lo(q, 16), desc_lo(k, 16));
    else gemm_qk<T, D, 64, BC>(s, q, k);
    wgmma_commit();
    wgmma_wait<0>();
    reg_fence(s);
    acc_store<BC>(S_out, s, warp, g, t);
    /* P into the A-fragment layout: register 4kk + i holds row g + 8 (i & 1),
     * columns 16 kk + 8 (i >> 1) + 2t and + 1 */
#pragma unroll
    for (int kk = 0; kk < BC / 16; kk++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const float *pr = P + (16 * warp + g + 8 * (i & 1)) * BC + 16 * kk + 8 * (i >> 1) + 2 * t;
            p[4 * kk + i] = pack2<T>(pr[0], pr[1]);
        }
#pragma unroll
    for (int i = 0; i < D / 2; i++) o[i] = 0.f;
    reg_fence(o);
    reg_fence(p);
    wgmma_fence();
    if constexpr (LEAN) gemm_pv_lean<T, D, BC>(o, p, desc_lo(v, BC * 128));
    else gemm_pv<T, D, BC>(o, p, v);
    wgmma_commit();
    wgmma_wait<0>();
    reg_fence(o);
    acc_store<D>(O_out, o, warp, g, t);
}

static uint16_t v3_host_bits(float x, int dtype)
{
    if (dtype == FA_BF16) {
        __nv_bfloat16 b = __float2bfloat16_rn(x);
        return *reinterpret_cast<uint16_t *>(&b);
    }
    __half h = __float2half_rn(x);
    return *reinterpret_cast<uint16_t *>(&h);
}

/* In the piece tests a failed CUDA call is one FAIL line, and counts as one
 * failed piece. */
#define V3_TEST_TRY(name, call)                                                              \
    do {                                                                                     \
        cudaError_t e_ = (call);                                                             \
        if (e_ != cudaSuccess) {                                                             \
            printf("FAIL %s: %s:%d: %s: %s\n", name, __FILE__, __LINE__, #call,               \
                   cudaGetErrorString(e_));                                                  \
            return 1;                                                                        \
        }                                                                                    \
    } while (0)

/* TMA piece: head 1 of a (2 heads, 100 rows, 128 columns) tensor of
 * distinct 16-bit codes, rows 40.. (60 real rows, 68 past the end). */
static int v3_selftest_tma(void)
{
    const int heads = 2, rows = 100, d = 128, row0 = 40, z = 1;
    std::vector<uint16_t> h((size_t)heads * rows * d);
    for (size_t i = 0; i < h.size(); i++) h[i] = (uint16_t)(1 + i % 65000);
    void *dx = nullptr, *dout = nullptr;
    V3_TEST_TRY("v3-piece-tma-swizzle128", cudaMalloc(&dx, h.size() * 2));
    V3_TEST_TRY("v3-piece-tma-swizzle128", cudaMalloc(&dout, 2 * 128 * 128));
    V3_TEST_TRY("v3-piece-tma-swizzle128", cudaMemcpy(dx, h.data(), h.size() * 2, cudaMemcpyHostToDevice));
    V3_TEST_TRY("v3-piece-tma-swizzle128", cudaMemset(dout, 0xEE, 2 * 128 * 128));
    CUtensorMap map;
    if (v3_tensor_map(&map, dx, FA_BF16, d, rows, heads, 128)) {
        printf("FAIL v3-piece-tma-swizzle128: %s\n", fa_error_string());
        return 1;
    }
    const int smem = 2 * 128 * 128 + 64 + 1024;
    V3_TEST_TRY("v3-piece-tma-swizzle128", cudaFuncSetAttribute(v3_test_tma, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    v3_test_tma<<<1, 128, smem>>>(map, (uint4 *)dout, row0, z);
    V3_TEST_TRY("v3-piece-tma-swizzle128", cudaGetLastError());
    V3_TEST_TRY("v3-piece-tma-swizzle128", cudaDeviceSynchronize());
    std::vector<uint16_t> got(128 * 128);
    V3_TEST_TRY("v3-piece-tma-swizzle128", cudaMemcpy(got.data(), dout, got.size() * 2, cudaMemcpyDeviceToHost));
    /* expected: element (r, c) of the box at column block c/64, row r, chunk
     * ((c % 64) / 8) ^ (r % 8), position c % 8 */
    int bad = 0, bad_plain = 0;
    char first[200] = "";
    for (int r = 0; r < 128; r++)
        for (int c = 0; c < d; c++) {
            uint16_t want = row0 + r < rows ? h[((size_t)z * rows + row0 + r) * d + c] : 0;
            size_t at = (size_t)(c / 64) * 128 * 64 + (size_t)r * 64 + ((((c % 64) / 8) ^ (r % 8)) * 8) + c % 8;
            size_t plain = (size_t)(c / 64) * 128 * 64 + (size_t)r * 64 + c % 64;
            if (got[at] != want) {
                if (!bad++)
                    snprintf(first, sizeof first, "row %d col %d: want code %u at half-word %zu, found %u",
                             r, c, want, at, got[at]);
            }
            if (got[plain] != want) bad_plain++;
        }
    cudaFree(dx);
    cudaFree(dout);
    if (bad) {
        printf("FAIL v3-piece-tma-swizzle128: %d of %d elements misplaced (%s); unswizzled layout would "
               "misplace %d\n", bad, 128 * d, first, bad_plain);
        return 1;
    }
    printf("PASS v3-piece-tma-swizzle128 (128 x 128 box, 68 rows past the end zero-filled, 128-byte swizzle as "
           "assumed)\n");
    return 0;
}

template <typename T, int D, int BC = 128, bool LEAN = false> static int v3_selftest_gemms(int dtype)
{
    /* Q 64 x D, K BC x D, V BC x D, P 64 x BC: integers in [-4, 4] */
    std::vector<float> Q(64 * D), K(BC * D), V(BC * D), P(64 * BC);
    uint32_t x = 12345u + D + dtype + BC;
    auto next = [&]() { x = x * 1664525u + 1013904223u; return (int)((x >> 16) % 9) - 4; };
    for (auto &e : Q) e = (float)next();
    for (auto &e : K) e = (float)next();
    for (auto &e : V) e = (float)next();
    for (auto &e : P) e = (float)next() * 0.25f;   /* also exact: quarters */
    std::vector<uint16_t> q16(Q.size()), k16(K.size()), v16(V.size());
    for (size_t i = 0; i < Q.size(); i++) q16[i] = v3_host_bits(Q[i], dtype);
    for (size_t i = 0; i < K.size(); i++) k16[i] = v3_host_bits(K[i], dtype);
    for (size_t i = 0; i < V.size(); i++) v16[i] = v3_host_bits(V[i], dtype);
    void *dq, *dk, *dv, *dp, *ds, *dO;
    V3_TEST_TRY("v3-piece-wgmma", cudaMalloc(&dq, q16.size() * 2));
    V3_TEST_TRY("v3-piece-wgmma", cudaMalloc(&dk, k16.size() * 2));
    V3_TEST_TRY("v3-piece-wgmma", cudaMalloc(&dv, v16.size() * 2));
    V3_TEST_TRY("v3-piece-wgmma", cudaMalloc(&dp, P.size() * 4));
    V3_TEST_TRY("v3-piece-wgmma", cudaMalloc(&ds, 64 * BC * 4));
    V3_TEST_TRY("v3-piece-wgmma", cudaMalloc(&dO, 64 * D * 4));
    V3_TEST_TRY("v3-piece-wgmma", cudaMemcpy(dq, q16.data(), q16.size() * 2, cudaMemcpyHostToDevice));
    V3_TEST_TRY("v3-piece-wgmma", cudaMemcpy(dk, k16.data(), k16.size() * 2, cudaMemcpyHostToDevice));
    V3_TEST_TRY("v3-piece-wgmma", cudaMemcpy(dv, v16.data(), v16.size() * 2, cudaMemcpyHostToDevice));
    V3_TEST_TRY("v3-piece-wgmma", cudaMemcpy(dp, P.data(), P.size() * 4, cudaMemcpyHostToDevice));
    V3_TEST_TRY("v3-piece-wgmma", cudaMemset(ds, 0xFF, 64 * BC * 4));
    V3_TEST_TRY("v3-piece-wgmma", cudaMemset(dO, 0xFF, 64 * D * 4));
    CUtensorMap tq, tk, tv;
    if (v3_tensor_map(&tq, dq, dtype, D, 64, 1, 64) || v3_tensor_map(&tk, dk, dtype, D, BC, 1, BC) ||
        v3_tensor_map(&tv, dv, dtype, D, BC, 1, BC)) {
        printf("FAIL v3-piece-wgmma: %s\n", fa_error_string());
        return 1;
    }
    const int smem = (64 + 2 * BC) * D * 2 + 64 + 1024;
    V3_TEST_TRY("v3-piece-wgmma", cudaFuncSetAttribute(v3_test_gemms<T, D, BC, LEAN>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    v3_test_gemms<T, D, BC, LEAN><<<1, 128, smem>>>(tq, tk, tv, (const float *)dp, (float *)ds, (float *)dO);
    V3_TEST_TRY("v3-piece-wgmma", cudaGetLastError());
    V3_TEST_TRY("v3-piece-wgmma", cudaDeviceSynchronize());
    std::vector<float> S(64 * BC), O(64 * D);
    V3_TEST_TRY("v3-piece-wgmma", cudaMemcpy(S.data(), ds, S.size() * 4, cudaMemcpyDeviceToHost));
    V3_TEST_TRY("v3-piece-wgmma", cudaMemcpy(O.data(), dO, O.size() * 4, cudaMemcpyDeviceToHost));
    cudaFree(dq); cudaFree(dk); cudaFree(dv); cudaFree(dp); cudaFree(ds); cudaFree(dO);
    int fails = 0;
    char tn[48];
    snprintf(tn, sizeof tn, "%s%s%s", dtype == FA_BF16 ? "bf16" : "fp16", BC == 128 ? "" : "-bc176",
             LEAN ? "-lean" : "");
    /* S: exact; on a mismatch, say where the expected value does appear */
    for (int pass = 0; pass < 2; pass++) {
        const int R = 64, Ccols = pass == 0 ? BC : D;
        const std::vector<float> &got = pass == 0 ? S : O;
        std::vector<double> ref((size_t)R * Ccols);
        for (int i = 0; i < R; i++)
            for (int j = 0; j < Ccols; j++) {
                double acc = 0;
                if (pass == 0) for (int c = 0; c < D; c++) acc += (double)Q[i * D + c] * K[j * D + c];
                else for (int c = 0; c < BC; c++) acc += (double)P[i * BC + c] * V[c * D + j];
                ref[(size_t)i * Ccols + j] = acc;
            }
        int bad = 0, bi = -1, bj = -1;
        for (int i = 0; i < R; i++)
            for (int j = 0; j < Ccols; j++)
                if (got[(size_t)i * Ccols + j] != ref[(size_t)i * Ccols + j] && !bad++) { bi = i; bj = j; }
        const char *name = pass == 0 ? "qk (smem x smem)" : "pv (registers x smem transposed)";
        if (!bad) {
            printf("PASS v3-piece-wgmma-%s-%s-d%d (64 x %d exact)\n", pass == 0 ? "qk" : "pv", tn, D, Ccols);
            continue;
        }
        fails++;
        int fi = -1, fj = -1;
        for (int i = 0; i < R && fi < 0; i++)
            for (int j = 0; j < Ccols; j++)
                if (got[(size_t)i * Ccols + j] == ref[(size_t)bi * Ccols + bj]) { fi = i; fj = j; break; }
        printf("FAIL v3-piece-wgmma-%s-%s-d%d: %s: %d of %d wrong; first (%d, %d) = %g, want %g (that value "
               "is found at (%d, %d))\n", pass == 0 ? "qk" : "pv", tn, D, name, bad, R * Ccols, bi, bj,
               got[(size_t)bi * Ccols + bj], ref[(size_t)bi * Ccols + bj], fi, fj);
        printf("  rows 0-3, cols 0-7 got | want:\n");
        for (int i = 0; i < 4; i++) {
            printf("   ");
            for (int j = 0; j < 8; j++) printf(" %6g", got[(size_t)i * Ccols + j]);
            printf("  |");
            for (int j = 0; j < 8; j++) printf(" %6g", ref[(size_t)i * Ccols + j]);
            printf("\n");
        }
    }
    return fails;
}

extern "C" int v3_pieces_selftest(void)
{
    int dev = 0, major = 0, minor = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess ||
        major != 9 || minor != 0) {
        (void)cudaGetLastError();
        printf("SKIP v3-pieces: version 3 needs a GPU of compute capability 9.0 (sm_90a)\n");
        return 0;
    }
    int fails = v3_selftest_tma();
    fails += v3_selftest_gemms<__nv_bfloat16, 64>(FA_BF16);
    fails += v3_selftest_gemms<__nv_bfloat16, 128>(FA_BF16);
    fails += v3_selftest_gemms<__half, 64>(FA_FP16);
    fails += v3_selftest_gemms<__half, 128>(FA_FP16);
    /* step 7's descriptors, step 8's 176-key tiles */
    fails += v3_selftest_gemms<__nv_bfloat16, 64, 128, true>(FA_BF16);
    fails += v3_selftest_gemms<__nv_bfloat16, 128, 128, true>(FA_BF16);
    fails += v3_selftest_gemms<__nv_bfloat16, 128, 176, false>(FA_BF16);
    fails += v3_selftest_gemms<__nv_bfloat16, 128, 176, true>(FA_BF16);
    fails += v3_selftest_gemms<__half, 128, 176, true>(FA_FP16);
    return fails;
}

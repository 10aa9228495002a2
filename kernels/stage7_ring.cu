/*
 * stage7_ring.cu -- the kernels of stage7_ring.h: the merge rule of
 * core/merge.h on the GPU, and the elementwise sums and roundings of the ring.
 *
 * The merge reads every element of the accumulator and of the partial once
 * and writes the accumulator once: memory-bound, B H len d (4 + es + 4)
 * bytes per merge. Its arithmetic is merge.h's, in double, on values widened
 * from fp32 and the dtype: the rule is written once, and double costs
 * nothing here next to the memory traffic. The accumulators are fp32 (the
 * ring rounds each partial to the dtype once, in the forward kernel, and the
 * merged result once more at the end).
 */
#include "gpu_common.cuh"
#include "merge.h"
#include "stage7_ring.h"

#include <algorithm>

/* Blocks of 256 threads; a grid-stride loop covers any n. */
static unsigned grid_for(size_t n, int threads)
{
    size_t b = (n + threads - 1) / threads;
    return (unsigned)std::min<size_t>(std::max<size_t>(b, 1), 1u << 20);
}

__global__ void ring_fill_kernel(float *x, size_t n, float value)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        x[i] = value;
}

extern "C" int ring_fill_f32(float *x, size_t n, float value, void *stream)
{
    if (!n) return FA_OK;
    ring_fill_kernel<<<grid_for(n, 256), 256, 0, (cudaStream_t)stream>>>(x, n, value);
    LAUNCH_CHECK();
    return FA_OK;
}

//> ring-merge-kernel
/* RPB rows per block: their plans (one exp and one log1p each) are made once
 * by RPB threads and shared; then the block's threads sweep the RPB d
 * elements. */
constexpr int RPB = 16;

template <typename T>
__global__ void __launch_bounds__(256) ring_merge_kernel(float *O, float *L, const T *O_part,
                                                         const float *L_part, size_t rows, int d)
{
    //> ring-merge-rows
    __shared__ merge_plan plan[RPB];
    size_t r0 = (size_t)blockIdx.x * RPB;
    int nr = rows - r0 < (size_t)RPB ? (int)(rows - r0) : RPB;
    if ((int)threadIdx.x < nr) plan[threadIdx.x] = merge_plan_of(L[r0 + threadIdx.x], L_part[r0 + threadIdx.x]);
    __syncthreads();
    size_t base = r0 * d;
    for (int e = threadIdx.x; e < nr * d; e += blockDim.x)
        O[base + e] = (float)merge_elem(plan[e / d], O[base + e], to_f(O_part[base + e]));
    if ((int)threadIdx.x < nr) L[r0 + threadIdx.x] = (float)plan[threadIdx.x].L;
    //< ring-merge-rows
}
//< ring-merge-kernel

extern "C" int ring_merge(int dtype, float *O, float *L, const void *O_part, const float *L_part,
                          size_t rows, int d, void *stream)
{
    if (!rows) return FA_OK;
    size_t blocks = (rows + RPB - 1) / RPB;
    if (blocks > 0x7fffffffu) return fa_set_error(FA_ERR_UNSUPPORTED, "ring_merge: %zu rows", rows);
    return fa_dispatch_dtype(dtype, [&](auto zero) -> int {
        using T = decltype(zero);
        ring_merge_kernel<T><<<(unsigned)blocks, 256, 0, (cudaStream_t)stream>>>(
            O, L, static_cast<const T *>(O_part), L_part, rows, d);
        LAUNCH_CHECK();
        return FA_OK;
    });
}

/* launch(T{}, grid) for the dtype's element type T, with grid_for(n, 256)
 * blocks of 256 threads (the grid-stride kernels below), then the launch
 * check; nothing for n = 0. */
template <typename Launch>
static int launch_elementwise(int dtype, size_t n, Launch launch)
{
    if (!n) return FA_OK;
    return fa_dispatch_dtype(dtype, [&](auto zero) -> int {
        launch(zero, grid_for(n, 256));
        LAUNCH_CHECK();
        return FA_OK;
    });
}

template <typename T>
__global__ void ring_accumulate_kernel(float *acc, const T *x, size_t n, int first)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        acc[i] = first ? to_f(x[i]) : acc[i] + to_f(x[i]);
}

extern "C" int ring_accumulate(int dtype, float *acc, const void *x, size_t n, int first, void *stream)
{
    return launch_elementwise(dtype, n, [&](auto zero, auto grid) {
        using T = decltype(zero);
        ring_accumulate_kernel<T><<<grid, 256, 0, (cudaStream_t)stream>>>(acc, static_cast<const T *>(x), n, first);
    });
}

template <typename T>
__global__ void ring_round_kernel(T *out, const float *acc, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        out[i] = from_f<T>(acc[i]);
}

extern "C" int ring_round(int dtype, void *out, const float *acc, size_t n, void *stream)
{
    return launch_elementwise(dtype, n, [&](auto zero, auto grid) {
        using T = decltype(zero);
        ring_round_kernel<T><<<grid, 256, 0, (cudaStream_t)stream>>>(static_cast<T *>(out), acc, n);
    });
}

/* splitmix64's finalizer: consecutive counters give independent-looking bits. */
__device__ __forceinline__ uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

template <typename T>
__global__ void ring_fill_random_kernel(T *x, size_t n, uint64_t seed)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float u = (float)(mix64(seed + 0x9e3779b97f4a7c15ull * (i + 1)) >> 40) * 0x1p-24f;
        x[i] = from_f<T>((2.f * u - 1.f) * 1.7320508f);
    }
}

extern "C" int ring_fill_random(int dtype, void *x, size_t n, uint64_t seed, void *stream)
{
    return launch_elementwise(dtype, n, [&](auto zero, auto grid) {
        using T = decltype(zero);
        ring_fill_random_kernel<T><<<grid, 256, 0, (cudaStream_t)stream>>>(static_cast<T *>(x), n, seed);
    });
}

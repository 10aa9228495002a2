/*
 * stage5_bwd_convert.cu -- the backward's dtype conversions: the fp32 dQ
 * accumulator (and version 0's fp32 products) rounded into the dtype, the
 * dtype widened to fp32 for version 0's fp32 products, and the accumulator
 * written row by row into a strided dQ. Entry points bwd_convert,
 * bwd_convert_rows (stage5_backward.cuh).
 */
#include "stage5_backward.cuh"

/* dst[i] = src[i] in another type (fp32 accumulators to the dtype, or the
 * dtype to fp32 for version 0's fp32 products); round to nearest even. */
template <typename S, typename T>
__global__ void __launch_bounds__(256) bwd_convert_kernel(const S *__restrict__ src, T *__restrict__ dst,
                                                          size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        dst[i] = from_f<T>(to_f(src[i]));
}

/* The same for fp32 accumulators into a 16-bit dtype, eight elements a
 * thread: two 16-byte loads, one 16-byte store. The pass streams 6 bytes an
 * element; one element a thread ran it at a quarter of the memory's
 * bandwidth (data/gpu/studies/bwd_v3_steps/steps.md). */
template <typename T> __device__ __forceinline__ uint4 pack8(float4 a, float4 b)
{
    return make_uint4(pack2<T>(a.x, a.y), pack2<T>(a.z, a.w), pack2<T>(b.x, b.y), pack2<T>(b.z, b.w));
}

template <typename T>
__global__ void __launch_bounds__(256) bwd_convert8_kernel(const float *__restrict__ src, T *__restrict__ dst,
                                                           size_t n8)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n8; i += (size_t)gridDim.x * blockDim.x) {
        const float4 a = __ldg(reinterpret_cast<const float4 *>(src) + 2 * i);
        const float4 b = __ldg(reinterpret_cast<const float4 *>(src) + 2 * i + 1);
        reinterpret_cast<uint4 *>(dst)[i] = pack8<T>(a, b);
    }
}

template <typename S, typename T>
int bwd_convert(const S *src, T *dst, size_t n, cudaStream_t st)
{
    if constexpr (std::is_same<S, float>::value && sizeof(T) == 2) {
        if (n % 8 == 0 && aligned16(src) && aligned16(dst)) {
            const size_t blocks = (n / 8 + 255) / 256;
            bwd_convert8_kernel<T><<<(unsigned)(blocks < 65535 * 16 ? blocks : 65535 * 16), 256, 0, st>>>(
                src, dst, n / 8);
            LAUNCH_CHECK();
            return FA_OK;
        }
    }
    const size_t blocks = (n + 255) / 256;
    bwd_convert_kernel<S, T><<<(unsigned)(blocks < 65535 * 16 ? blocks : 65535 * 16), 256, 0, st>>>(src, dst, n);
    LAUNCH_CHECK();
    return FA_OK;
}

/* dst = src in the dtype, src contiguous (B, H, Sq, d) fp32, dst through
 * its strides (a dQ that is a (B, seqlen, H, d) view). */
template <typename T>
__global__ void __launch_bounds__(256) bwd_convert_rows_kernel(const float *__restrict__ src, T *__restrict__ dst,
                                                               long long rows, int d, long long H,
                                                               long long Sq, fa_stride s)
{
    for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
        const long long i = row % Sq, bh = row / Sq, h = bh % H, b = bh / H;
        T *out = dst + b * s.batch + h * s.head + i * s.row;
        for (int c = threadIdx.x; c < d; c += blockDim.x) out[c] = from_f<T>(src[row * d + c]);
    }
}

/* The same eight elements a thread (bwd_convert8_kernel's loads and
 * store), d / 8 threads a row, for a 16-bit dtype whose rows start on 16
 * bytes. */
template <typename T>
__global__ void __launch_bounds__(256) bwd_convert_rows8_kernel(const float *__restrict__ src, T *__restrict__ dst,
                                                                long long rows, int d, long long H,
                                                                long long Sq, fa_stride s)
{
    const int tpr = d / 8;
    for (long long g = (long long)blockIdx.x * blockDim.x + threadIdx.x; g < rows * tpr;
         g += (long long)gridDim.x * blockDim.x) {
        const long long row = g / tpr, i = row % Sq, bh = row / Sq, h = bh % H, b = bh / H;
        const int c = (int)(g % tpr) * 8;
        const float4 *in = reinterpret_cast<const float4 *>(src + row * d + c);
        const float4 x = __ldg(in), y = __ldg(in + 1);
        *reinterpret_cast<uint4 *>(dst + b * s.batch + h * s.head + i * s.row + c) = pack8<T>(x, y);
    }
}

template <typename T>
int bwd_convert_rows(const float *src, T *dst, const attn_params *p, fa_stride s, cudaStream_t st)
{
    const long long rows = (long long)attn_rows(p);
    if constexpr (sizeof(T) == 2) {
        if (p->d % 8 == 0 && aligned16(src) && aligned16(dst) && s.batch % 8 == 0 && s.head % 8 == 0 &&
            s.row % 8 == 0) {
            const long long blocks = (rows * (p->d / 8) + 255) / 256;
            bwd_convert_rows8_kernel<T><<<(unsigned)(blocks < 1 << 20 ? blocks : 1 << 20), 256, 0, st>>>(
                src, dst, rows, p->d, p->H, p->seqlen_q, s);
            LAUNCH_CHECK();
            return FA_OK;
        }
    }
    bwd_convert_rows_kernel<T><<<(unsigned)(rows < 1 << 20 ? rows : 1 << 20), 128, 0, st>>>(
        src, dst, rows, p->d, p->H, p->seqlen_q, s);
    LAUNCH_CHECK();
    return FA_OK;
}

template int bwd_convert<float, float>(const float *, float *, size_t, cudaStream_t);
template int bwd_convert<__half, float>(const __half *, float *, size_t, cudaStream_t);
template int bwd_convert<__nv_bfloat16, float>(const __nv_bfloat16 *, float *, size_t, cudaStream_t);
template int bwd_convert<float, __half>(const float *, __half *, size_t, cudaStream_t);
template int bwd_convert<float, __nv_bfloat16>(const float *, __nv_bfloat16 *, size_t, cudaStream_t);
template int bwd_convert_rows<__half>(const float *, __half *, const attn_params *, fa_stride, cudaStream_t);
template int bwd_convert_rows<__nv_bfloat16>(const float *, __nv_bfloat16 *, const attn_params *, fa_stride,
                                             cudaStream_t);

/*
 * gpu_common.cuh -- the GPU half of the shared harness: what every kernel
 * file of kernels/ needs and none of them should hold.
 *
 *   errors        one line kept until the next failure, with file:line of the
 *                 call that failed (fa_error_string() returns it)
 *   dtypes        loads convert to fp32, stores round from fp32
 *   kernel args   fa_kargs: the problem of attn_params.h as the kernels see it
 *                 (pointers of one dtype, the mask, GQA head mapping)
 *   Ampere-era    cp.async, ldmatrix, mma.sync m16n8k16, packing, ex2
 *   instructions  (sm_80 and later; Hopper's wgmma/TMA live in their own file)
 *
 * Every launcher returns FA_OK or an FA_ERR_* code (fa_gpu.h).
 */
#ifndef FA_GPU_COMMON_CUH
#define FA_GPU_COMMON_CUH

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <stdint.h>
#include <type_traits>

#include "fa_gpu.h"

/* ------------------------------------------------------------------------- */
/* Errors                                                                    */
/* ------------------------------------------------------------------------- */
/* Record one line (printf format) as the library's last error; returns code. */
int fa_set_error(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define FA_STR2(x) #x
#define FA_STR(x) FA_STR2(x)
/* Return FA_ERR_CUDA with the call, file:line and the library's words
 * unless call gives ok. */
#define FA_TRY(call, ok, words)                                                             \
    do {                                                                                    \
        auto r_ = (call);                                                                   \
        if (r_ != (ok))                                                                     \
            return fa_set_error(FA_ERR_CUDA, "%s (" __FILE__ ":" FA_STR(__LINE__) "): %s",  \
                                #call, words(r_));                                          \
    } while (0)
#define CUDA_TRY(call) FA_TRY(call, cudaSuccess, cudaGetErrorString)
#define CUBLAS_TRY(call) FA_TRY(call, CUBLAS_STATUS_SUCCESS, cublasGetStatusString)
/* After a launch: a bad configuration shows up here, not at the next sync. */
#define LAUNCH_CHECK() CUDA_TRY(cudaGetLastError())

/* One cuBLAS handle for the library (created on first use). */
int fa_cublas(cublasHandle_t *h, cudaStream_t stream);

/* ------------------------------------------------------------------------- */
/* Dtypes                                                                    */
/* ------------------------------------------------------------------------- */
__device__ __forceinline__ float to_f(float x) { return x; }
__device__ __forceinline__ float to_f(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_f(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T> __device__ __forceinline__ T from_f(float x);
template <> __device__ __forceinline__ float from_f<float>(float x) { return x; }
template <> __device__ __forceinline__ __half from_f<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float x)
{
    return __float2bfloat16_rn(x);
}

/* One 16-byte load: 4 fp32 or 8 fp16/bf16 elements, converted to fp32. The
 * 16-byte width is what makes a warp's 32 loads one 512-byte transaction. */
template <typename T> struct vec16 { static constexpr int n = 16 / sizeof(T); };
template <typename T> __device__ __forceinline__ void load16(const T *p, float *out)
{
    uint4 raw = __ldg(reinterpret_cast<const uint4 *>(p));
    const T *e = reinterpret_cast<const T *>(&raw);
#pragma unroll
    for (int u = 0; u < vec16<T>::n; u++) out[u] = to_f(e[u]);
}

static inline bool aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

/* Call f with a typed zero of the dtype: f((float)0), f((__half)0), ... so a
 * launcher is written once as a template. */
template <typename F> static int fa_dispatch_dtype(int dtype, F f)
{
    switch (dtype) {
    case FA_FP32: return f(float(0));
    case FA_FP16: return f(__half(0.f));
    case FA_BF16: return f(__nv_bfloat16(0.f));
    default: return fa_set_error(FA_ERR_UNSUPPORTED, "unknown dtype code %d", dtype);
    }
}

/* ------------------------------------------------------------------------- */
/* The problem as the kernels see it                                          */
/* ------------------------------------------------------------------------- */
/* Built once per launch from attn_params (fa_kargs_make). Grid convention of
 * every kernel: blockIdx.y = b H + h (one query head); the K/V head it reads
 * is b H_kv + h / h_per_kv. */
struct fa_kargs {
    int H, H_kv, h_per_kv;     /* query heads, key/value heads, H / H_kv */
    int seqlen_q, seqlen_k, d;
    float softmax_scale;
    float scale_log2;          /* softmax_scale * log2(e): scores in base 2 */
    attn_mask mask;
    bool masked;               /* any window bound (causal included) */

    /* element offsets of the (rows, d) block of query head bh = b H + h */
    __host__ __device__ size_t q_off(int bh) const { return (size_t)bh * seqlen_q * d; }
    __host__ __device__ size_t kv_off(int bh) const
    {
        int b = bh / H, h = bh % H;
        return ((size_t)b * H_kv + h / h_per_kv) * seqlen_k * d;
    }
    __host__ __device__ size_t row_off(int bh) const { return (size_t)bh * seqlen_q; }
};

static inline fa_kargs fa_kargs_make(const attn_params *p)
{
    fa_kargs a;
    a.H = p->H;
    a.H_kv = p->H_kv;
    a.h_per_kv = p->H / p->H_kv;
    a.seqlen_q = p->seqlen_q;
    a.seqlen_k = p->seqlen_k;
    a.d = p->d;
    a.softmax_scale = (float)p->softmax_scale;
    a.scale_log2 = (float)(p->softmax_scale * 1.4426950408889634);
    a.mask = attn_mask_of(p);
    a.masked = attn_is_masked(p);
    return a;
}

/* ------------------------------------------------------------------------- */
/* The online softmax's guard, in base 2                                      */
/* ------------------------------------------------------------------------- */
/* A row whose scores so far are all -inf (masked) has m = -inf; subtracting
 * it would give -inf - (-inf) = NaN. Rescaling against 0 instead gives
 * 2^(-inf) = 0 for every masked entry and leaves l = 0, O = 0: the row
 * finishes as O = 0, L = -inf (mask.h's convention). */
__device__ __forceinline__ float softmax_ref_max(float m) { return m == -INFINITY ? 0.f : m; }

/* Rows [i0, i1) of one head that see no key at all: O = 0, L = -inf, written
 * by the whole thread block (which then returns without reading K or V). */
template <typename T>
__device__ void write_empty_rows(T *O, float *L, int i0, int i1, int d)
{
    for (int idx = threadIdx.x; idx < (i1 - i0) * d; idx += blockDim.x)
        O[(size_t)i0 * d + idx] = from_f<T>(0.f);
    for (int r = i0 + threadIdx.x; r < i1; r += blockDim.x) L[r] = -INFINITY;
}

/* ------------------------------------------------------------------------- */
/* Ampere-era instructions (sm_80+)                                          */
/* ------------------------------------------------------------------------- */
__device__ __forceinline__ unsigned smem_u32(const void *p)
{
    return (unsigned)__cvta_generic_to_shared(p);
}
/* 16 bytes global -> shared, asynchronously; src_bytes < 16 zero-fills the
 * rest (0: a row past the end becomes zeros without a branch). */
__device__ __forceinline__ void cp_async16(void *smem, const void *gmem, int src_bytes)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(smem)),
                 "l"(gmem), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int n> __device__ __forceinline__ void cp_async_wait()
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(n));
}
/* Four 8x8 b16 matrices from shared memory, one row address per lane. */
__device__ __forceinline__ void ldsm_x4(unsigned &r0, unsigned &r1, unsigned &r2, unsigned &r3,
                                        const void *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(smem_u32(p)));
}
__device__ __forceinline__ void ldsm_x4_t(unsigned &r0, unsigned &r1, unsigned &r2, unsigned &r3,
                                          const void *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(smem_u32(p)));
}
/* D (16 x 8, fp32) += A (16 x 16) B (16 x 8), A row-major, B column-major */
template <typename T>
__device__ __forceinline__ void mma16816(float *c, const unsigned *a, unsigned b0, unsigned b1)
{
    if constexpr (std::is_same<T, __half>::value)
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, "
                     "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    else
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, "
                     "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
/* two fp32 -> one register of two 16-bit values, lo in the low half */
template <typename T> __device__ __forceinline__ unsigned pack2(float lo, float hi)
{
    if constexpr (std::is_same<T, __half>::value) {
        __half2 h = __floats2half2_rn(lo, hi);
        return *reinterpret_cast<unsigned *>(&h);
    } else {
        __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
        return *reinterpret_cast<unsigned *>(&h);
    }
}
/* the two 16-bit values of a packed register (pack2's), as floats */
template <typename T> __device__ __forceinline__ float2 unpack2(unsigned u)
{
    if constexpr (std::is_same<T, __half>::value)
        return __half22float2(*reinterpret_cast<const __half2 *>(&u));
    else
        return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&u));
}
/* 2^x on the special-function unit, flushing subnormals (P entries below
 * 2^-126 are zero either way once rounded to fp16/bf16). */
__device__ __forceinline__ float ex2(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

/* ------------------------------------------------------------------------- */
/* Tiles: rows of a head into shared memory                                  */
/* ------------------------------------------------------------------------- */
/* Rows [row0, row0 + ROWS) of a row-major (row_end, d) matrix into a shared
 * ROWS x ld fp32 tile, times mul. Rows at or past row_end and columns past d
 * become 0, so the tile arithmetic needs no bounds checks (a zero row of
 * values or of dO adds nothing; a zero key still scores 0, so keys past the
 * end are masked apart). D is the tile width, d rounded up to a template
 * size. vec: 16-byte loads (d a multiple of the vector width, src 16-byte
 * aligned); else one element at a time. Every thread of the block takes part. */
template <typename T, int D, int ROWS>
__device__ __forceinline__ void load_rows_f32(float *dst, int ld, const T *__restrict__ src, int row0,
                                              int row_end, int d, bool vec, float mul)
{
    if (vec) {
        constexpr int VEC = vec16<T>::n, CH = D / VEC;   /* 16-byte chunks per row */
        for (int idx = threadIdx.x; idx < ROWS * CH; idx += blockDim.x) {
            int r = idx / CH, c = (idx % CH) * VEC;
            float x[VEC];
            if (row0 + r < row_end && c < d) {
                load16(src + (size_t)(row0 + r) * d + c, x);
            } else {
#pragma unroll
                for (int u = 0; u < VEC; u++) x[u] = 0.f;
            }
#pragma unroll
            for (int u = 0; u < VEC; u += 4)
                *reinterpret_cast<float4 *>(dst + r * ld + c + u) =
                    make_float4(x[u] * mul, x[u + 1] * mul, x[u + 2] * mul, x[u + 3] * mul);
        }
    } else {
        for (int idx = threadIdx.x; idx < ROWS * D; idx += blockDim.x) {
            int r = idx / D, c = idx % D;
            dst[r * ld + c] =
                (row0 + r < row_end && c < d) ? to_f(src[(size_t)(row0 + r) * d + c]) * mul : 0.f;
        }
    }
}

/* Rows [row0, row0 + ROWS) of a row-major (row_end, D) matrix of 16-bit
 * elements into a ROWS x LD shared tile with cp.async, NT threads, 16 bytes
 * per copy (D a multiple of 8, src and LD 16-byte aligned); rows past row_end
 * are zero-filled by the copy itself (source size 0). The caller commits and
 * waits. */
template <typename T, int D, int ROWS, int LD, int NT>
__device__ __forceinline__ void cp_async_rows(T *dst, const T *__restrict__ src, int row0, int row_end,
                                              long long gs = D)
{
    constexpr int CH = D / 8;
    for (int idx = threadIdx.x; idx < ROWS * CH; idx += NT) {
        int r = idx / CH, c = (idx % CH) * 8;
        bool ok = row0 + r < row_end;
        cp_async16(dst + r * LD + c, ok ? src + (row0 + r) * gs + c : src, ok ? 16 : 0);
    }
}

/* ------------------------------------------------------------------------- */
/* The versions' launchers (one row each in fa_api.cu's table)               */
/* ------------------------------------------------------------------------- */
typedef int (*fa_launch_fn)(int dtype, const attn_params *p, const fa_ptrs *x, int flags,
                            cudaStream_t stream);
/* The same for packed sequences (fa_varlen, core/fa_gpu.h); x's strides
 * already those of fa_varlen_strides_of. */
typedef int (*fa_launch_varlen_fn)(int dtype, const attn_params *p, const fa_varlen *vl, const fa_ptrs *x,
                                   int flags, cudaStream_t stream);

/* A version: what fa_version() reports, and the functions fa_api.cu calls.
 * Each row stands beside its kernel, so the rows repeat this shape by design.
 * fa_api.cu has already checked the dtype, d range, masks and workspace
 * against info when run is called. */
struct fa_row {
    fa_version_info info;
    fa_launch_fn run;
    int (*check)(int dtype, const attn_params *p);            /* further limits, or NULL */
    size_t (*workspace)(int dtype, const attn_params *p);     /* NULL: none */
    int (*block_rows)(int d);                                 /* NULL: not tiled */
    int (*block_cols)(int d);
    double (*model_bytes)(int dtype, const attn_params *p, int Br, int Bc);
    /* packed sequences of different lengths (info.varlen = 1), or NULL */
    fa_launch_varlen_fn run_varlen = nullptr;
    int (*check_varlen)(int dtype, const attn_params *p, int flags) = nullptr;
    size_t (*workspace_varlen)(int dtype, const attn_params *p, const fa_varlen *vl) = nullptr;   /* none */
};

/* Every row, declared (so that each file's definition is visible to fa_api.cu). */
#define FA_ROW(x) extern const fa_row fa_row_##x;
#include "versions.def"
#undef FA_ROW

/* Shared IO model of the tiled forwards (fa_api.cu). */
double fa_model_tiled_forward(int dtype, const attn_params *p, int Br, int Bc);

#endif /* FA_GPU_COMMON_CUH */

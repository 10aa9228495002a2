/*
 * tests/emulate_center.cpp -- the backward's centering pre-pass
 * (kernels/stage5_bwd_center.cu, bwd-center; kernels/stage5_bwd_prepass.cu,
 * bwd-dot) run on the CPU (tests/emulate_cuda.h: one std::thread per CUDA
 * thread, barriers, static shared memory, bf16 and fp16 rounded to nearest
 * even), the regions cut into build/emulate/ by tests/emulate_center.sh. The launches are those of bwd_center_k
 * and bwd_prepass (stats, mean, shift; D with L'), written out here.
 *
 * Inputs: B = 2, H = 4 query heads on H_kv = 2, keys whose columns are of
 * five kinds: a common part far from zero (-120 sqrt(d), some keys -60
 * sqrt(d), as the far-logit tests use), a positive offset with a small
 * spread (3 + 0.1 z), values of both signs (0.1 z), a column holding a NaN,
 * and a column spread over more than a factor of 4 (1 + 9 u, u in [0, 1)).
 * Held to, against direct fp64 loops here (not the kernels' code):
 *   exact     every K_c = K - c exactly, c a number of the dtype
 *   rule      c != 0 only where Sterbenz's range holds: every key of the
 *             column of c's sign and c/2 <= |K| <= 2 |c|
 *   centers   the far and offset columns centered (c != 0), K_c's largest
 *             entry there at most the column's spread; the mixed, NaN and
 *             wide columns left (c = 0)
 *   L', D     L' = L - softmax_scale Q . c within 2^-23 of max(1, |L'|),
 *             rows with L = -inf kept -inf; D = dO . O within fp32's
 *             rounding of the sum of |dO O|
 *   layout    K read as a (B, seqlen_k, H_kv, d) view gives c and K_c
 *             bitwise those of the contiguous K
 * for bf16, fp16 and fp32, d = 64 (16-byte loads) and d = 36 (one element
 * a load in 16-bit types). This checks the arithmetic and indexing of the
 * source, not the GPU (tests/gpu, ./stage5 --sweep accuracy on the H200).
 * One PASS/FAIL line per case (tests/run.sh).
 */
#include <cstdio>
#include <cstdlib>
#include <random>
#include <type_traits>
#include "emulate_cuda.h"
#include "fa_gpu.h"

/* the dtypes under CUDA's names, and the conversions the kernels call */
typedef _Float16 __half;
typedef bf16 __nv_bfloat16;
static float __double2float_rn(double x) { return (float)x; }
static _Float16 __double2half(double x) { return (_Float16)x; }
static float __half2float(_Float16 h) { return (float)h; }
static float __bfloat162float(bf16 h) { return to_f(h); }
/* double to bf16 in one rounding (8 significant bits, subnormals below 2^-126) */
static bf16 __double2bfloat16(double x)
{
    if (x == 0 || !std::isfinite(x)) return from_f<bf16>((float)x);
    int e;
    frexp(x, &e);
    if (e - 1 < -126) e = -125;
    double h = ldexp(1.0, e - 8);
    return from_f<bf16>((float)(nearbyint(x / h) * h));
}
template <typename T> struct vec16 { static constexpr int n = 16 / sizeof(T); };
template <typename T> static void load16(const T *p, float *out)
{
    for (int u = 0; u < vec16<T>::n; u++) out[u] = to_f(p[u]);
}
static bool aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

#include "bwd_dot.inc"
#include "bwd_center.inc"

/* c (B H_kv d) and K_c (B, H_kv, Sk, d) contiguous from K through strides
 * sk, as bwd_center_k launches them. */
template <class T>
void center(const T *K, fa_stride sk, int B, int H_kv, int Sk, int d, std::vector<float> &c, std::vector<T> &Kc)
{
    const int chunks = (Sk + BWD_CEN_ROWS - 1) / BWD_CEN_ROWS, tiles = (d + BWD_CEN_COLS - 1) / BWD_CEN_COLS;
    const int bhk = B * H_kv;
    const size_t plane = (size_t)bhk * chunks * d;
    constexpr int V = vec16<T>::n;
    const bool vec = ((uintptr_t)K & 15) == 0 && d % V == 0 && sk.batch % V == 0 && sk.head % V == 0 &&
                     sk.row % V == 0;
    std::vector<float> part(3 * plane, NAN);
    c.assign((size_t)bhk * d, NAN);
    Kc.assign((size_t)bhk * Sk * d, from_f<T>(NAN));
    if (vec)
        launch({bhk, chunks, tiles}, 256, [&] {
            bwd_center_stats_kernel<T, V>(K, part.data(), H_kv, Sk, d, sk, chunks, plane);
        });
    else
        launch({bhk, chunks, tiles}, 256, [&] {
            bwd_center_stats_kernel<T, 1>(K, part.data(), H_kv, Sk, d, sk, chunks, plane);
        });
    launch({(d + 127) / 128, bhk, 1}, 128, [&] { bwd_center_mean_kernel<T>(part.data(), c.data(), Sk, d, chunks, plane); });
    const long long n_vec = (long long)bhk * Sk * d / (vec ? V : 1);
    if (vec)
        launch({3, 1, 1}, 256, [&] { bwd_center_shift_kernel<T, V>(K, c.data(), Kc.data(), H_kv, Sk, d, sk, n_vec); });
    else
        launch({3, 1, 1}, 256, [&] { bwd_center_shift_kernel<T, 1>(K, c.data(), Kc.data(), H_kv, Sk, d, sk, n_vec); });
}

static bool representable(double x, float) { return (double)(float)x == x; }
static bool representable(double x, _Float16) { return (double)(_Float16)x == x; }
static bool representable(double x, bf16) { return (double)to_f(__double2bfloat16(x)) == x; }

template <class T> int run(const char *dname, int d, unsigned seed)
{
    const int B = 2, H = 4, H_kv = 2, Sk = 300, Sq = 50, g = H / H_kv;
    const double scale = 1.0 / sqrt((double)d);
    std::mt19937 rng(seed);
    std::normal_distribution<double> nd;
    std::uniform_real_distribution<double> ud;
    enum { FAR, OFFSET, MIXED, HASNAN, WIDE, KINDS };
    auto kind = [](int col) { return col < KINDS ? col : MIXED; };
    /* K contiguous (B, H_kv, Sk, d) and the same values as a (B, Sk, H_kv, d) view */
    const size_t nk = (size_t)B * H_kv * Sk * d;
    std::vector<T> K(nk), Kv(nk);
    for (int bh = 0; bh < B * H_kv; bh++)
        for (int j = 0; j < Sk; j++)
            for (int k = 0; k < d; k++) {
                double x;
                switch (kind(k)) {
                case FAR: x = (j % 7 ? -120.0 : -60.0) * sqrt((double)d); break;
                case OFFSET: x = 3 + 0.1 * nd(rng); break;
                case HASNAN: x = j == 123 ? NAN : nd(rng); break;
                case WIDE: x = 1 + 9 * ud(rng); break;
                default: x = 0.1 * nd(rng);
                }
                T v = from_f<T>((float)x);
                K[((size_t)bh * Sk + j) * d + k] = v;
                Kv[(((size_t)(bh / H_kv) * Sk + j) * H_kv + bh % H_kv) * d + k] = v;
            }
    std::vector<float> c, c2;
    std::vector<T> Kc, Kc2;
    center(K.data(), fa_stride{(int64_t)H_kv * Sk * d, (int64_t)Sk * d, d}, B, H_kv, Sk, d, c, Kc);
    center(Kv.data(), fa_stride{(int64_t)Sk * H_kv * d, d, (int64_t)H_kv * d}, B, H_kv, Sk, d, c2, Kc2);

    int inexact = 0, rule_bad = 0, centers_bad = 0;
    for (int bh = 0; bh < B * H_kv; bh++)
        for (int k = 0; k < d; k++) {
            const double ck = c[(size_t)bh * d + k];
            double lo = INFINITY, hi = -INFINITY, big = 0;
            bool nan = false;
            for (int j = 0; j < Sk; j++) {
                const size_t at = ((size_t)bh * Sk + j) * d + k;
                const double x = to_f(K[at]), y = to_f(Kc[at]);
                nan |= std::isnan(x);
                if (std::isnan(x) ? !std::isnan(y) : y != x - ck) inexact++;
                if (!std::isnan(x)) lo = std::min(lo, x), hi = std::max(hi, x), big = std::max(big, fabs(y));
            }
            if (!representable(ck, T()) || !std::isfinite(ck)) rule_bad++;
            if (ck != 0) {
                const double amin = ck < 0 ? -hi : lo, amax = ck < 0 ? -lo : hi;
                if (nan || (ck < 0 ? hi >= 0 : lo <= 0) || fabs(ck) < amax / 2 || fabs(ck) > 2 * amin) rule_bad++;
            }
            const int kd = kind(k);
            if (kd == FAR || kd == OFFSET) centers_bad += ck == 0 || big > hi - lo;
            else centers_bad += ck != 0;
        }
    const bool same_layout = c == c2 && !memcmp(Kc.data(), Kc2.data(), nk * sizeof(T));

    /* D and L' in one pass over the query rows (bwd_prepass's launch) */
    const size_t rows = (size_t)B * H * Sq, nq = rows * d;
    std::vector<T> Q(nq), O(nq), dO(nq);
    std::vector<float> L(rows), Lc(rows, NAN), D(rows, NAN);
    for (size_t x = 0; x < nq; x++) {
        Q[x] = from_f<T>((float)(x % d == 0 ? 1.0 : 0.1 * nd(rng)));
        O[x] = from_f<T>((float)nd(rng));
        dO[x] = from_f<T>((float)nd(rng));
    }
    for (size_t r = 0; r < rows; r++) L[r] = r % 11 == 3 ? -INFINITY : (float)(-120 + 5 * ud(rng));
    const fa_stride sq = {(int64_t)H * Sq * d, (int64_t)Sq * d, d};
    const bwd_rows_at rat = {H, Sq, sq, sq, sq};
    const bwd_lse_shift<T> sh = {Q.data(), c.data(), L.data(), Lc.data(), g, scale};
    /* bwd_dot_launch's choice of threads per row, and its launch */
    const void *ptrs[3] = {dO.data(), O.data(), Q.data()};
    const fa_stride strides[3] = {sq, sq, sq};
    const int tpr = bwd_dot_tpr<T>(d, ptrs, strides);
    const int blocks = (int)((rows * (tpr ? tpr : 32) + 255) / 256);
    auto run = [&](auto kernel) {
        launch({blocks, 1, 1}, 256, [&] { kernel(dO.data(), O.data(), D.data(), (long long)rows, d, rat, sh); });
    };
    switch (tpr) {
    case 4: run(bwd_dot_kernel<T, 4, true>); break;
    case 8: run(bwd_dot_kernel<T, 8, true>); break;
    case 16: run(bwd_dot_kernel<T, 16, true>); break;
    case 0: run(bwd_dot_kernel<T, 32, false>); break;
    default: std::printf("FAIL emulated centering pre-pass: bwd_dot_tpr gave %d threads a row at d %d\n", tpr, d); return 1;
    }
    double errL = 0, errD = 0;
    int lse_bad = 0;
    for (size_t r = 0; r < rows; r++) {
        const size_t b = r / ((size_t)H * Sq), h = r / Sq % H;
        const float *cv = c.data() + (b * H_kv + h / g) * d;
        double t = 0, dd = 0, mag = 0;
        for (int k = 0; k < d; k++) {
            t += (double)to_f(Q[r * d + k]) * cv[k];
            dd += (double)to_f(dO[r * d + k]) * to_f(O[r * d + k]);
            mag += fabs((double)to_f(dO[r * d + k]) * to_f(O[r * d + k]));
        }
        if (L[r] == -INFINITY) lse_bad += Lc[r] != -INFINITY;
        else {
            const double ref = L[r] - scale * t;
            errL = std::max(errL, fabs(Lc[r] - ref) / std::max(1.0, fabs(ref)));
        }
        errD = std::max(errD, fabs(D[r] - dd) / (mag * d * ldexp(1.0, -23)));
    }
    const bool ok = inexact == 0 && rule_bad == 0 && centers_bad == 0 && same_layout && lse_bad == 0 &&
                    errL <= ldexp(1.0, -23) && errD <= 1;
    printf("%s emulated centering pre-pass, %s d=%d (%s loads): %d entries K_c != K - c, %d columns off the "
           "rule, %d columns centered or not as expected otherwise, (B, S, H_kv, d) view %s, L' err %.2g <= "
           "2^-23, %d rows of L = -inf changed, D err %.2g of d 2^-23 sum|dO O|\n",
           ok ? "PASS" : "FAIL", dname, d, d % vec16<T>::n ? "1-element" : "16-byte", inexact, rule_bad, centers_bad,
           same_layout ? "bitwise the same" : "DIFFERS", errL, lse_bad, errD);
    return !ok;
}

int main(int argc, char **argv)
{
    unsigned base = argc > 1 ? (unsigned)strtoul(argv[1], nullptr, 10) : std::random_device{}();
    printf("emulate_center: seed %u (replay: build/emulate/emulate_center %u)\n", base, base);
    run<bf16>("bf16", 64, base + 1);
    run<_Float16>("fp16", 64, base + 2);
    run<float>("fp32", 64, base + 3);
    run<bf16>("bf16", 36, base + 4);
    run<_Float16>("fp16", 36, base + 5);
    return 0;   /* the PASS/FAIL lines carry the verdict */
}

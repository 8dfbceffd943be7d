// LayerNorm and RMSNorm forward over the rows of a (rows, cols) matrix, training form:
//
//     LayerNorm: y = (x - mean) * rstd * gamma + beta,  rstd = 1 / sqrt(var + eps)
//     RMSNorm:   y = x * rstd * gamma,                  rstd = 1 / sqrt(mean(x^2) + eps)
//
// with the per-row mean (LayerNorm) and rstd written as float32. Arithmetic is float whatever the
// storage type T; y is rounded once, when it is stored.
//
// Optimized kernels (one read of x, one write of y):
//   norm_warp        a group of W lanes (W = 1 ... 32) per row, the row kept in registers; R rows
//                    per group at a time when one pack per lane covers the row (small cols);
//   norm_block<.., true>   one block per row, the row kept in shared memory between the
//                    statistics and the normalization;
//   norm_block<.., false>  one block per row, no cache: x is read a second time (from L2) for y;
//                    only for rows too long for shared memory.
//   norm_tile, norm_span, norm_span_rows   rows of an odd byte count, moved in aligned 16-byte
//                    packs although they do not start on one (see their sections);
//   norm_cluster     rows longer than a block holds, split over the blocks of a thread-block
//                    cluster (sm_90 and later), any offset.
//
// Statistics (LayerNorm): norm_span_rows takes the sums of x - K and its squares in one pass, K
// near the mean, and a second pass only where those cancel (normk::row_moments); norm_warp's full
// rows take two warp sums (the mean, then the squares about it); the others run Welford's update
// per thread, the partial states combined with Chan et al.'s pairwise merge across lanes
// (shuffles) and warps (shared memory). E[x^2] - E[x]^2 is never formed unshifted, so rows whose
// mean is large against their spread (mean 1e4, std 1) do not cancel catastrophically. Two more
// details keep such rows exact:
//   - the values are shifted by K, the row's first element or (norm_span_rows) the mean of eight
//     spread over it, before the update. The mean of x - K is then of the order of the spread,
//     not of the mean, so the float32 rounding of the mean (half an ulp of 1e4 is 5e-4, far more
//     than the float32 tolerance of y) never reaches y = ((x - K) - mean') * rstd; the mean
//     written out is K + mean'. (norm_span_rows stores x * rstd - (K + mean') * rstd instead
//     where that offset is at most 16, and the rounding it adds under 1e-6.)
//   - merges are ordered (the lower lane's state first) so that both partners of a butterfly step
//     compute bit-identical results: every lane normalizes its part of the row with the same
//     statistics.
//
// Naive kernels (the multi-kernel starting point): a row-mean kernel, a two-pass variance kernel
// that reads x again and writes rstd, and an elementwise normalization kernel that reads x a third
// time (RMSNorm: a mean-of-squares kernel and the normalization).
//
// Indices into x and y are 64-bit (rows * cols may exceed 2^31); column indices are 32-bit.

#include "cluster_mailbox.cuh"
#include "row_tile.cuh"
#include "welford.cuh"

// Dynamic shared memory of norm_block<..., true>: one row of x in its storage type (and of the tile
// tiers their packs; of norm_span_rows its shifted gamma and beta).
extern __shared__ __align__(16) unsigned char norm_row_cache[];

namespace normk {

// Threads per block of norm_warp (several groups, or several warps of one group each).
constexpr int kWarpBlock = 128;

// Packs each thread loads before using any of them where the block kernels read x through
// registers (the uncached tier, and scalar packs): several 16-byte loads in flight per thread.
// (The cached tier with 16-byte packs copies global -> shared with cp.async instead: the whole row
// is in flight at once without holding a register.)
constexpr int kBlockLoadBatch = 4;

// Packs per step of the block kernels' second pass: their gamma and beta loads are all issued
// before the first is used (the uncached kernel, which also reloads x, takes fewer).
constexpr int kBlockStoreBatch = 4;
constexpr int kUncachedStoreBatch = 2;

// ---------------------------------------------------------------------------------------------
// Welford / Chan
// ---------------------------------------------------------------------------------------------

// A partial result over the (shifted) values: count, mean and M2 (kernels/welford.cuh).
using bw::Welford;
using bw::block_merge;
using bw::chan_merge;
using bw::warp_merge;

// One element into a running state; `inv_count` is 1 / (count including this element). Callers
// pass compile-time constants, so there is no division per element.
__device__ __forceinline__ void welford_step(float v, float inv_count, float& mean, float& m2) {
    const float d = v - mean;
    mean = fmaf(d, inv_count, mean);
    m2 = fmaf(d, v - mean, m2);
}

// The same merge when every lane holds the same count n (a full row, no padding): Chan's formula
// becomes mean = (a + b) / 2, M2 = M2a + M2b + d^2 n / 2, symmetric in the two lanes, so the result
// is bit-identical across the group with no ordering and no division. n is a compile-time constant.
template <int Width>
__device__ __forceinline__ void warp_merge_equal(float& mean, float& m2, float n) {
#pragma unroll
    for (int mask = 1; mask < Width; mask *= 2) {
        const float om = __shfl_xor_sync(0xffffffffu, mean, mask);
        const float oq = __shfl_xor_sync(0xffffffffu, m2, mask);
        const float d = om - mean;
        mean = (mean + om) * 0.5f;
        m2 = fmaf(d * d, n * 0.5f, m2 + oq);
        n *= 2.0f;
    }
}

// Welford over one pack's N values: the counts 1 ... N are constants.
template <int N>
__device__ __forceinline__ Welford pack_welford(const float (&v)[N]) {
    float mean = 0.0f, m2 = 0.0f;
#pragma unroll
    for (int j = 0; j < N; ++j) welford_step(v[j], 1.0f / static_cast<float>(j + 1), mean, m2);
    Welford s;
    s.n = static_cast<float>(N);
    s.mean = mean;
    s.m2 = m2;
    return s;
}

// Calls f(i, value) for each element of a thread's valid packs, in order; i (the element's index
// among the thread's P x N values) is a compile-time constant once unrolled, so Welford's
// 1 / (i + 1) folds away.
template <typename T, int N, int P, typename F>
__device__ __forceinline__ void for_each_value(const bw::Pack<T, N> (&packs)[P], const bool (&valid)[P], F&& f);

// ---------------------------------------------------------------------------------------------
// Loads, stores and the affine step
// ---------------------------------------------------------------------------------------------

template <typename T, int N>
__device__ __forceinline__ bw::Pack<T, N> load_pack(const T* p) {
    return *reinterpret_cast<const bw::Pack<T, N>*>(p);
}

template <typename T, int N>
__device__ __forceinline__ void to_floats(const bw::Pack<T, N>& p, float* f) {
    bw::widen(p, *reinterpret_cast<float(*)[N]>(f));
}

// Narrowing a pack of floats and storing it as one access. For the 16-bit types on sm_80+ two
// elements per instruction (cvt.rn.{f16,bf16}x2.f32 rounds to nearest even, exactly as one cvt per
// element does), and the pack is stored as the 32-bit words the conversions produce: built as a
// Pack<T, N> first, it was stored as N 2-byte stores in norm_block (the compiler split the copy).
template <typename T>
struct Narrow {
    template <int N>
    static __device__ __forceinline__ void store(const float (&f)[N], T* dst) {
        bw::Pack<T, N> p;
#pragma unroll
        for (int j = 0; j < N; ++j) p.v[j] = bw::from_float<T>(f[j]);
        *reinterpret_cast<bw::Pack<T, N>*>(dst) = p;
    }
};

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
template <typename T, int kIsHalf>
struct NarrowPairs {
    template <int N>
    static __device__ __forceinline__ void store(const float (&f)[N], T* dst) {
        if constexpr (N % 2 == 0) {
            bw::Pack<unsigned int, N / 2> words;
#pragma unroll
            for (int j = 0; j < N; j += 2) {
                unsigned int r;
                if constexpr (kIsHalf) {
                    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(f[j + 1]), "f"(f[j]));
                } else {
                    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(f[j + 1]), "f"(f[j]));
                }
                words.v[j / 2] = r;
            }
            *reinterpret_cast<bw::Pack<unsigned int, N / 2>*>(dst) = words;
        } else {
            bw::Pack<T, N> p;
#pragma unroll
            for (int j = 0; j < N; ++j) p.v[j] = bw::from_float<T>(f[j]);
            *reinterpret_cast<bw::Pack<T, N>*>(dst) = p;
        }
    }
};
template <>
struct Narrow<half_t> : NarrowPairs<half_t, 1> {};
template <>
struct Narrow<bf16_t> : NarrowPairs<bf16_t, 0> {};
#endif

template <typename T, int N, int P, typename F>
__device__ __forceinline__ void for_each_value(const bw::Pack<T, N> (&packs)[P], const bool (&valid)[P], F&& f) {
#pragma unroll
    for (int p = 0; p < P; ++p) {
        if (!valid[p]) continue;
        float v[N];
        to_floats(packs[p], v);
#pragma unroll
        for (int j = 0; j < N; ++j) f(p * N + j, v[j]);
    }
}

// y = (v - mean) * rstd * gamma + beta, written as fma(fma(v, a, c), gamma, beta) with a = rstd and
// c = -mean * rstd (v and mean shifted, so c is of the order of 1 and costs no accuracy);
// RMSNorm: y = v * a * gamma.
template <bool kRms, int N>
__device__ __forceinline__ void normalize(const float* v, float a, float c, const float* g, const float* b,
                                          float (&out)[N]) {
#pragma unroll
    for (int j = 0; j < N; ++j) {
        if constexpr (kRms) {
            out[j] = v[j] * a * g[j];
        } else {
            out[j] = fmaf(fmaf(v[j], a, c), g[j], b[j]);
        }
    }
}

template <typename T, bool kRms, int N>
__device__ __forceinline__ void store_normalized(T* dst, const float* v, float a, float c, const float* g,
                                                 const float* b) {
    float out[N];
    normalize<kRms, N>(v, a, c, g, b, out);
    Narrow<T>::template store<N>(out, dst);
}

// The 32-bit words of a pack (or packs): where the compiler may not see through them.
template <typename T, int N>
__device__ __forceinline__ unsigned int* words_of(bw::Pack<T, N>& pack) {
    static_assert(sizeof(T) * N % 4 == 0, "whole 32-bit words");
    return reinterpret_cast<unsigned int*>(&pack);
}

// Replaces the elements of `pack` outside [lo, hi) with `neutral`, a 32-bit word at a time (an
// element at a time, the compiler split the packs into 16-bit pieces held in more registers).
template <typename T, int N>
__device__ __forceinline__ void keep_only(bw::Pack<T, N>& pack, int lo, int hi, T neutral) {
    constexpr int E = 4 / sizeof(T);  // elements a word
    unsigned int fill;
    if constexpr (E == 1) {
        memcpy(&fill, &neutral, 4);
    } else {
        unsigned short h;
        memcpy(&h, &neutral, 2);
        fill = h | (static_cast<unsigned int>(h) << 16);
    }
    unsigned int* w = words_of(pack);
#pragma unroll
    for (int i = 0; i < N / E; ++i) {
        unsigned int keep = 0;
#pragma unroll
        for (int e = 0; e < E; ++e) {
            const int j = i * E + e;
            if (j >= lo && j < hi) keep |= E == 1 ? 0xffffffffu : 0xffffu << (16 * e);
        }
        w[i] = (w[i] & keep) | (fill & ~keep);
    }
}

// Makes the packs' words opaque to the compiler: a value converted from them before cannot be
// reused after, so a pass over them converts again instead of holding every float in registers.
template <typename T, int N, int P>
__device__ __forceinline__ void opaque(bw::Pack<T, N> (&packs)[P]) {
#pragma unroll
    for (int p = 0; p < P; ++p) {
        unsigned int* w = words_of(packs[p]);
#pragma unroll
        for (int i = 0; i < static_cast<int>(sizeof(T)) * N / 4; ++i) asm volatile("" : "+r"(w[i]));
    }
}

// Asynchronous 16-byte copy global -> shared (sm_80+): the data bypasses the registers, so a
// thread can have its whole part of the row in flight at once.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    unsigned int s;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(s) : "l"(smem));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(gmem) : "memory");
#else
    *reinterpret_cast<uint4*>(smem) = *reinterpret_cast<const uint4*>(gmem);
#endif
}

// Waits for this thread's cp.async copies; they are then visible to this thread.
__device__ __forceinline__ void cp_async_wait_all() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_all;" ::: "memory");
#endif
}

// ---------------------------------------------------------------------------------------------
// LayerNorm's statistics in one pass over the row
// ---------------------------------------------------------------------------------------------

// A shift K near the row's mean, the same bits in every thread of the row: the mean of eight of
// its elements spread over it (columns (i cols) >> 3), rounded to T (so an element set to K is
// exactly K: LayerNorm's neutral edge elements). Summed in pairs, so a constant row gives K = its
// value.
template <typename T>
__device__ __forceinline__ float row_shift(const T* row, int cols) {
    float s[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) s[i] = bw::to_float(row[(i * cols) >> 3]);
    const float sum = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
    return bw::to_float(bw::from_float<T>(sum * 0.125f));
}

// Two sums reduced together over aligned groups of Width lanes (LayerNorm's sums of d and d^2):
// their shuffles interleave, and a block pays one pair of barriers for both.
template <int Width>
struct PairSum {
    __device__ __forceinline__ float2 operator()(float2 v) const {
#pragma unroll
        for (int mask = Width / 2; mask > 0; mask /= 2) {
            v.x += __shfl_xor_sync(0xffffffffu, v.x, mask, Width);
            v.y += __shfl_xor_sync(0xffffffffu, v.y, mask, Width);
        }
        return v;
    }
};

// A compile-time flag passed to a generic lambda (decltype(flag)::value).
template <bool B>
struct Flag {
    static constexpr bool value = B;
};

// A compile-time count passed to a generic lambda (decltype(count)::value).
template <int V>
struct Count {
    static constexpr int value = V;
};

// A store's parameter shift that says gamma's and beta's packs lie under the row's (no shift at all),
// beside the shifts of 0 to 3 whole words (bw::tile::shifted16).
constexpr int kParamsLinedUp = 4;

// The largest offset LayerNorm's store folds its shift into (norm_span_rows): x * rstd + folded is
// then off from (x - shift) * rstd + offset by at most half an ulp of 16 (1e-6), a tenth of the
// float32 y tolerance's absolute part.
constexpr float kFoldedOffsetMax = 16.0f;

// LayerNorm's statistics of a row: the mean and variance of x - shift.
struct RowMoments {
    float mean, var, shift;
};

// The statistics in one pass where it suffices: the sums of d = x - K and d^2 (K near the mean,
// row_shift), var = E[d^2] - E[d]^2. Where that cancelled more than half of E[d^2] (at most one
// bit of the variance lost otherwise) K lies far out in the row (its sampled elements are
// outliers), and a second pass takes the corrected two-pass form about c = K + mean, the mean so
// far (an exact sum there, mean being near -K): the sums of e = x - c and e^2 give the variance
// and what c is off by (the sum of x - K kept only float32's precision of K), and the row is then
// shifted by c (from x - K, (x - K) * rstd and the offset would cancel to a few ulps of K).
// Two passes every row had cost a second pass over the registers and a second reduction, in a
// block a row a second pair of barriers (LayerNorm of 12289 half columns: 84% of copy, now 92%).
//   for_each(f): f(x) for every value this thread holds, `neutrals` values of K among them over the
//                row (span_rows' edge elements);
//   reduce(float2): the two sums over the row, the same bits in every thread of it.
// Every thread of a warp calls it (the second pass is taken by the warp if any of its rows needs it).
template <typename Reduce, typename ForEach>
__device__ __forceinline__ RowMoments row_moments(float k, float n, float neutrals, Reduce&& reduce,
                                                  ForEach&& for_each) {
    auto sums_about = [&](float c) {  // of x - c and its squares over the row
        float2 sums = make_float2(0.0f, 0.0f);
        for_each([&](float v) {
            const float d = v - c;
            sums.x += d;
            sums.y = fmaf(d, d, sums.y);
        });
        return reduce(sums);
    };
    const float2 sums = sums_about(k);
    const float mean = sums.x / n;
    const float squares = sums.y / n;
    const bool exact = mean * mean <= 0.5f * squares;
    RowMoments m{mean, fmaxf(squares - mean * mean, 0.0f), k};
    if (__any_sync(0xffffffffu, !exact)) {
        const float center = k + mean;
        const float2 about = sums_about(center);
        const float neutral = k - center;  // each neutral value's x - c
        if (!exact) {
            m.shift = center;
            m.mean = fmaf(-neutrals, neutral, about.x) / n;
            m.var = fmaxf(fmaf(-neutrals * neutral, neutral, about.y) / n - m.mean * m.mean, 0.0f);
        }
    }
    return m;
}

}  // namespace normk

// =============================================================================================
// Optimized: a group of W lanes per row, the row in registers.
//
// Lane l of a group holds packs p = 0 ... C/N - 1 at columns (p * W + l) * N: each pack load of
// the group is one contiguous, coalesced access. Packs past the row end (cols < C * W) are not
// loaded; they are always a suffix of a lane's packs, so the count of element i, when it is
// valid, is i + 1, a constant. The row loop is uniform over the block (rows past the end are
// predicated, not skipped), which keeps every shuffle converged. Where registers allow (C * R <=
// 16) a lane keeps its gamma and beta as floats for the whole kernel (its columns never change).
// =============================================================================================
// Full rows of norm_warp take the shifted two-pass statistics: with the row in registers the
// second pass reads no memory, and a sum per pass costs one operation a value and a shuffle and
// an add per merge step, where Welford costs two dependent operations more a value and Chan's
// merge five a step (Nsight Compute on an H200, LayerNorm half 256 columns: Welford's kernel
// issued 41% more instructions than torch.compile's). The centered squares never form
// E[x^2] - E[x]^2, and the values are shifted by x[row, 0] first, so rows of mean 1e4 keep their
// accuracy (the "two-pass" branch below). Partial rows and the block tiers keep Welford and Chan.

// kFull: cols == C * W, every lane holds C columns. That body has no per-pack validity tests and
// no zero padding, and a group whose row is past the end loads the last row instead (it stores
// nothing), so its loads need no predicate either: on an H100 the predicated body issued 47% more
// instructions than torch.compile's kernel for the same row (Nsight Compute, half 1024 columns).
template <typename T, bool kRms, int N, int C, int W, int R, bool kFull, bool kRaw = false>
__device__ __forceinline__ void norm_warp_rows(const T* __restrict__ x, const T* __restrict__ gamma,
                                               const T* __restrict__ beta, T* __restrict__ y,
                                               float* __restrict__ mean_out, float* __restrict__ rstd_out,
                                               int rows, int cols, float eps) {
    static_assert(C % N == 0, "C must be a multiple of N");
    static_assert(W >= 1 && W <= 32 && (W & (W - 1)) == 0 && normk::kWarpBlock % W == 0, "bad W");
    static_assert(R >= 1, "bad R");
    constexpr int P = C / N;                   // packs per lane per row
    constexpr int G = normk::kWarpBlock / W;   // groups per block
    constexpr bool kCacheParams = C * R <= 16;  // registers allowing
    constexpr int kParams = kCacheParams ? C : 1;
    // kRaw (full rows of 16-bit packs; the plan builds it for three half packs a lane): the row
    // stays as stored (half the registers of floats) and is converted again in each pass. The float
    // rows of 384-768 half columns held 64 registers, 32 warps an SM at most, and left DRAM idle
    // (Nsight Compute on an H100: 39-43% of warp slots active, LayerNorm at 85-87% of copy where
    // torch.compile reached 88-95%).
    static_assert(!kRaw || (kFull && sizeof(T) * N == 16 && P >= 2), "raw rows: full rows of 16-byte packs");
    using PackT = bw::Pack<T, N>;
    const int lane = threadIdx.x % W;
    const int group = threadIdx.x / W;

    bool pack_valid[P];
    int valid_packs = 0;
#pragma unroll
    for (int p = 0; p < P; ++p) {
        pack_valid[p] = kFull || (p * W + lane) * N < cols;
        valid_packs += pack_valid[p] ? 1 : 0;
    }
    const float count = static_cast<float>(valid_packs * N);
    const float fcols = static_cast<float>(cols);
    const bool full = kFull || cols == C * W;  // every lane holds C columns: the symmetric merge applies

    float g_cache[kParams], b_cache[kParams];
    if constexpr (kCacheParams) {
#pragma unroll
        for (int p = 0; p < P; ++p) {
            const int col = (p * W + lane) * N;
#pragma unroll
            for (int j = 0; j < N; ++j) {
                g_cache[p * N + j] = 0.0f;
                b_cache[p * N + j] = 0.0f;
            }
            if (pack_valid[p]) {
                normk::to_floats(normk::load_pack<T, N>(gamma + col), &g_cache[p * N]);
                if constexpr (!kRms) {
                    normk::to_floats(normk::load_pack<T, N>(beta + col), &b_cache[p * N]);
                }
            }
        }
    }

    const i64 step = static_cast<i64>(gridDim.x) * G * R;
    for (i64 base = static_cast<i64>(blockIdx.x) * G * R; base < rows; base += step) {
        const i64 row0 = base + static_cast<i64>(group) * R;
        float v[R][C];                          // unused (and not allocated) with kRaw
        PackT raw[kRaw ? R : 1][kRaw ? P : 1];
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const bool row_ok = row0 + r < rows;
            const T* xr = x + (kFull && !row_ok ? rows - 1 : row0 + r) * cols;
#pragma unroll
            for (int p = 0; p < P; ++p) {
                if constexpr (kRaw) {
                    raw[r][p] = normk::load_pack<T, N>(xr + (p * W + lane) * N);
                } else if (kFull || (row_ok && pack_valid[p])) {
                    normk::to_floats(normk::load_pack<T, N>(xr + (p * W + lane) * N),
                                     &v[r][p * N]);
                } else {
#pragma unroll
                    for (int j = 0; j < N; ++j) v[r][p * N + j] = 0.0f;
                }
            }
        }

        float scale[R], offset[R], shift[R];  // shift: the raw store's k
#pragma unroll
        for (int r = 0; r < R; ++r) {
            float mean = 0.0f, rstd;
            if constexpr (kRaw) {
                // The passes of the float body below, each converting the packs again (opaque:
                // the compiler may not keep the floats of one pass for the next).
                float k = 0.0f;
                if constexpr (!kRms) k = __shfl_sync(0xffffffffu, bw::to_float(raw[r][0].v[0]), 0, W);
                float sum = 0.0f;
                if constexpr (!kRms) {
                    normk::opaque(raw[r]);
#pragma unroll
                    for (int p = 0; p < P; ++p)
#pragma unroll
                        for (int j = 0; j < N; ++j) sum += bw::to_float(raw[r][p].v[j]) - k;
                    mean = bw::warp_allreduce<bw::SumOp, W>(sum) / fcols;
                }
                normk::opaque(raw[r]);
                float m2 = 0.0f;
#pragma unroll
                for (int p = 0; p < P; ++p)
#pragma unroll
                    for (int j = 0; j < N; ++j) {
                        const float d = (bw::to_float(raw[r][p].v[j]) - k) - mean;
                        m2 = fmaf(d, d, m2);
                    }
                m2 = bw::warp_allreduce<bw::SumOp, W>(m2);
                rstd = rsqrtf(m2 / fcols + eps);
                shift[r] = k;
                scale[r] = rstd;
                offset[r] = -mean * rstd;  // of the order of 1: the values are shifted by k
                if (lane == 0 && row0 + r < rows) {
                    if constexpr (!kRms) mean_out[row0 + r] = k + mean;
                    rstd_out[row0 + r] = rstd;
                }
                continue;
            }
            if constexpr (kRms) {
                float ss = 0.0f;
#pragma unroll
                for (int i = 0; i < C; ++i) ss = fmaf(v[r][i], v[r][i], ss);  // padding is 0
                ss = bw::warp_allreduce<bw::SumOp, W>(ss);
                rstd = rsqrtf(ss / fcols + eps);
                offset[r] = 0.0f;
            } else {
                // Element 0 of lane 0's first pack is x[row, 0].
                const float k = __shfl_sync(0xffffffffu, v[r][0], 0, W);
                float m2 = 0.0f;
#pragma unroll
                for (int i = 0; i < C; ++i) v[r][i] -= k;
                bool centered = false;
                if (full) {
                    // The whole row is in the group's registers: the mean from a sum, then the
                    // squares of the centered values, each a plain warp sum (see norm_warp_rows' comment).
                    float sum = 0.0f;
#pragma unroll
                    for (int i = 0; i < C; ++i) sum += v[r][i];
                    mean = bw::warp_allreduce<bw::SumOp, W>(sum) / fcols;
#pragma unroll
                    for (int i = 0; i < C; ++i) {
                        v[r][i] -= mean;
                        m2 = fmaf(v[r][i], v[r][i], m2);
                    }
                    m2 = bw::warp_allreduce<bw::SumOp, W>(m2);
                    centered = true;
                } else if (full) {
#pragma unroll
                    for (int i = 0; i < C; ++i) normk::welford_step(v[r][i], 1.0f / static_cast<float>(i + 1), mean, m2);
                    normk::warp_merge_equal<W>(mean, m2, static_cast<float>(C));
                } else {
#pragma unroll
                    for (int p = 0; p < P; ++p) {
                        if (!pack_valid[p]) continue;
#pragma unroll
                        for (int j = 0; j < N; ++j) {
                            const int i = p * N + j;
                            normk::welford_step(v[r][i], 1.0f / static_cast<float>(i + 1), mean, m2);
                        }
                    }
                    normk::Welford s;
                    s.n = count;
                    s.mean = mean;
                    s.m2 = m2;
                    s = normk::warp_merge<W>(s);
                    mean = s.mean;
                    m2 = s.m2;
                }
                rstd = rsqrtf(m2 / fcols + eps);
                offset[r] = centered ? 0.0f : -mean * rstd;
                if (lane == 0 && row0 + r < rows) mean_out[row0 + r] = k + mean;
            }
            scale[r] = rstd;
            if (lane == 0 && row0 + r < rows) rstd_out[row0 + r] = rstd;
        }

#pragma unroll
        for (int p = 0; p < P; ++p) {
            if (!pack_valid[p]) continue;
            const int col = (p * W + lane) * N;
            float g[N], b[N];
            if constexpr (kCacheParams) {
#pragma unroll
                for (int j = 0; j < N; ++j) {
                    g[j] = g_cache[p * N + j];
                    b[j] = b_cache[p * N + j];
                }
            } else {
                normk::to_floats(normk::load_pack<T, N>(gamma + col), g);
                if constexpr (!kRms) normk::to_floats(normk::load_pack<T, N>(beta + col), b);
            }
#pragma unroll
            for (int r = 0; r < R; ++r) {
                if (row0 + r < rows) {
                    if constexpr (kRaw) {
                        float shifted[N];
#pragma unroll
                        for (int j = 0; j < N; ++j) shifted[j] = bw::to_float(raw[r][p].v[j]) - shift[r];
                        normk::store_normalized<T, kRms, N>(y + (row0 + r) * cols + col, shifted, scale[r], offset[r],
                                                            g, b);
                    } else {
                        normk::store_normalized<T, kRms, N>(y + (row0 + r) * cols + col, &v[r][p * N], scale[r],
                                                            offset[r], g, b);
                    }
                }
            }
        }
    }
}

// kRawRows: an instance for full rows only (cols == C * W, the plan's promise) of 16-bit packs kept
// raw, bounded to 64 registers (8 blocks an SM); the general instance also holds the float body of
// partial rows, which needs more.
template <typename T, bool kRms, int N, int C, int W, int R, bool kRawRows = false>
__global__ void __launch_bounds__(normk::kWarpBlock, kRawRows ? 8 : 4)
norm_warp(const T* __restrict__ x, const T* __restrict__ gamma, const T* __restrict__ beta,
          T* __restrict__ y, float* __restrict__ mean_out, float* __restrict__ rstd_out, int rows,
          int cols, float eps) {
    // Four lanes a row (half 64 columns) measured 5% slower with the full-row body on an H100
    // (LayerNorm 8.3 against 7.8 us, same grid; 2 and 8 lanes were 4-7% faster): they keep one body.
    constexpr bool kFullBody = W != 4;
    if constexpr (kRawRows) {
        norm_warp_rows<T, kRms, N, C, W, R, true, true>(x, gamma, beta, y, mean_out, rstd_out, rows, cols, eps);
    } else if (kFullBody && cols == C * W) {
        norm_warp_rows<T, kRms, N, C, W, R, true>(x, gamma, beta, y, mean_out, rstd_out, rows, cols, eps);
    } else {
        norm_warp_rows<T, kRms, N, C, W, R, false>(x, gamma, beta, y, mean_out, rstd_out, rows, cols, eps);
    }
}

// =============================================================================================
// Optimized: one block of B threads per row, the row in registers (P packs a thread), for rows
// too long for one warp's registers and short enough for the block's.
//
// Thread t holds packs t, t + B, ..., t + (P - 1) B: each of its P loads is, over the block, one
// contiguous access, and all P are in flight before any is used. Packs past the row end are a
// suffix of a thread's packs, so Welford's counts stay compile-time constants (as in norm_warp).
// The statistics merge across lanes with shuffles, then across warps through shared memory that
// alternates between two buffers by row parity: one barrier per row (the next write to a buffer
// comes after a barrier every thread has passed since it last read it). There is no row cache, no
// cp.async and no per-pack merge: this is what the shared-memory tier spends its instructions on.
// kHold: a thread keeps the gamma (and beta) packs of its columns in registers for all its rows.
// =============================================================================================
template <typename T, bool kRms, int N, int P, int B, bool kHold>
__global__ void __launch_bounds__(B, 1)
norm_rows(const T* __restrict__ x, const T* __restrict__ gamma, const T* __restrict__ beta,
          T* __restrict__ y, float* __restrict__ mean_out, float* __restrict__ rstd_out, int rows,
          int cols, float eps) {
    static_assert(B % 32 == 0 && B >= 32 && B <= 1024 && ((B / 32) & (B / 32 - 1)) == 0, "B: 32 x a power of two");
    using PackT = bw::Pack<T, N>;
    constexpr int kWarps = B / 32;
    constexpr int kHeld = kHold ? P : 1;
    constexpr int kHeldBeta = kHold && !kRms ? P : 1;
    const int packs = cols / N;
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const float fcols = static_cast<float>(cols);
    const bool full = packs == P * B;  // every thread holds P packs: the symmetric merge applies

    bool valid[P];
    int valid_packs = 0;
#pragma unroll
    for (int p = 0; p < P; ++p) {
        valid[p] = static_cast<int>(threadIdx.x) + p * B < packs;
        valid_packs += valid[p] ? 1 : 0;
    }
    const float count = static_cast<float>(valid_packs * N);

    PackT g_held[kHeld], b_held[kHeldBeta];
    if constexpr (kHold) {
#pragma unroll
        for (int p = 0; p < P; ++p) {
            const int col = (static_cast<int>(threadIdx.x) + p * B) * N;
            if (valid[p]) {
                g_held[p] = normk::load_pack<T, N>(gamma + col);
                if constexpr (!kRms) b_held[p] = normk::load_pack<T, N>(beta + col);
            }
        }
    }

    __shared__ float partial[2][kRms ? 1 : 3][kWarps];
    int parity = 0;
    for (i64 row = blockIdx.x; row < rows; row += gridDim.x, parity ^= 1) {
        const T* xr = x + row * cols;
        PackT raw[P];
#pragma unroll
        for (int p = 0; p < P; ++p) {
            if (valid[p]) raw[p] = normk::load_pack<T, N>(xr + (static_cast<int>(threadIdx.x) + p * B) * N);
        }
        const float k = kRms ? 0.0f : bw::to_float(xr[0]);

        float mean = 0.0f, rstd;
        if constexpr (kRms) {
            float ss = 0.0f;
            normk::for_each_value(raw, valid, [&](int, float v) { ss = fmaf(v, v, ss); });
            ss = bw::warp_allreduce<bw::SumOp, 32>(ss);
            if constexpr (kWarps > 1) {
                if (lane == 0) partial[parity][0][warp] = ss;
                __syncthreads();
                // Each aligned group of kWarps lanes reduces all the warps' sums: every lane gets it.
                ss = bw::warp_allreduce<bw::SumOp, kWarps>(partial[parity][0][lane & (kWarps - 1)]);
            }
            rstd = rsqrtf(ss / fcols + eps);
        } else {
            float m2 = 0.0f;
            normk::for_each_value(raw, valid, [&](int i, float v) {
                normk::welford_step(v - k, 1.0f / static_cast<float>(i + 1), mean, m2);
            });
            float warp_count = static_cast<float>(32 * P * N);
            if (full) {
                normk::warp_merge_equal<32>(mean, m2, static_cast<float>(P * N));
            } else {
                normk::Welford s = {count, mean, m2};
                s = normk::warp_merge<32>(s);
                mean = s.mean;
                m2 = s.m2;
                warp_count = s.n;
            }
            if constexpr (kWarps > 1) {
                if (lane == 0) {
                    partial[parity][0][warp] = warp_count;
                    partial[parity][1][warp] = mean;
                    partial[parity][2][warp] = m2;
                }
                __syncthreads();
                // Each aligned group of kWarps lanes merges all the warps' states, in the same
                // order: every lane ends with the same statistics.
                const int w = lane & (kWarps - 1);
                mean = partial[parity][1][w];
                m2 = partial[parity][2][w];
                if (full) {
                    normk::warp_merge_equal<kWarps>(mean, m2, warp_count);
                } else {
                    normk::Welford s = {partial[parity][0][w], mean, m2};
                    s = normk::warp_merge<kWarps>(s);
                    mean = s.mean;
                    m2 = s.m2;
                }
            }
            rstd = rsqrtf(m2 / fcols + eps);
            if (threadIdx.x == 0) mean_out[row] = k + mean;
        }
        if (threadIdx.x == 0) rstd_out[row] = rstd;
        const float offset = -mean * rstd;

        T* yr = y + row * cols;
#pragma unroll
        for (int p = 0; p < P; ++p) {
            if (!valid[p]) continue;
            const int col = (static_cast<int>(threadIdx.x) + p * B) * N;
            float f[N], g[N], b[N];
            normk::to_floats(raw[p], f);
            if constexpr (!kRms) {
#pragma unroll
                for (int j = 0; j < N; ++j) f[j] -= k;
            }
            if constexpr (kHold) {
                normk::to_floats(g_held[p], g);
                if constexpr (!kRms) normk::to_floats(b_held[p], b);
            } else {
                normk::to_floats(normk::load_pack<T, N>(gamma + col), g);
                if constexpr (!kRms) normk::to_floats(normk::load_pack<T, N>(beta + col), b);
            }
            normk::store_normalized<T, kRms, N>(yr + col, f, rstd, offset, g, b);
        }
    }
}

// =============================================================================================
// Optimized: one block per row (grid-stride over rows). kCached: the row stays in shared memory
// (dynamic, cols * sizeof(T) bytes) between the two passes; otherwise the second pass reads x
// again. Thread t owns packs t, t + blockDim.x, ... in every pass, so it only ever reads back
// what it wrote itself: the cache needs no barrier of its own. With 16-byte packs the row is
// copied into the cache with cp.async, all of it requested before any of it is used.
// kParams: gamma (and beta) are copied into shared memory once per block, after the row cache,
// and the second pass reads them there. Without it every row re-reads them from L1/L2: on an
// H200 that L2 traffic (twice the row's DRAM bytes for LayerNorm) held the tier near 50% of copy.
// =============================================================================================
template <typename T, bool kRms, int N, bool kCached, bool kParams>
__global__ void __launch_bounds__(1024, 1)
norm_block(const T* __restrict__ x, const T* __restrict__ gamma, const T* __restrict__ beta,
           T* __restrict__ y, float* __restrict__ mean_out, float* __restrict__ rstd_out, int rows,
           int cols, float eps) {
    using PackT = bw::Pack<T, N>;
    constexpr bool kAsync = kCached && sizeof(PackT) == 16;
    constexpr int U = normk::kBlockLoadBatch;
    constexpr int V = kCached ? normk::kBlockStoreBatch : normk::kUncachedStoreBatch;
    PackT* cache = reinterpret_cast<PackT*>(norm_row_cache);
    const int packs = cols / N;
    const int threads = blockDim.x;
    const float fcols = static_cast<float>(cols);
    PackT* gamma_cache = cache + (kCached ? packs : 0);
    PackT* beta_cache = gamma_cache + packs;
    if constexpr (kParams) {  // the same packs this thread uses in every second pass: no barrier
        for (int i = threadIdx.x; i < packs; i += threads) {
            gamma_cache[i] = normk::load_pack<T, N>(gamma + i * N);
            if constexpr (!kRms) beta_cache[i] = normk::load_pack<T, N>(beta + i * N);
        }
    }

    for (i64 row = blockIdx.x; row < rows; row += gridDim.x) {
        const T* xr = x + row * cols;
        const float k = kRms ? 0.0f : bw::to_float(xr[0]);
        normk::Welford s = {0.0f, 0.0f, 0.0f};
        float ss = 0.0f;
        auto accumulate = [&](const PackT& pk) {
            float f[N];
            normk::to_floats(pk, f);
            if constexpr (kRms) {
#pragma unroll
                for (int j = 0; j < N; ++j) ss = fmaf(f[j], f[j], ss);
            } else {
#pragma unroll
                for (int j = 0; j < N; ++j) f[j] -= k;
                s = normk::chan_merge(s, normk::pack_welford<N>(f));
            }
        };
        if constexpr (kAsync) {
            for (int i = threadIdx.x; i < packs; i += threads) normk::cp_async16(&cache[i], xr + i * N);
            normk::cp_async_wait_all();
            for (int i = threadIdx.x; i < packs; i += threads) accumulate(cache[i]);
        } else {
            for (int i0 = threadIdx.x; i0 < packs; i0 += U * threads) {
                PackT batch[U];
#pragma unroll
                for (int u = 0; u < U; ++u) {
                    const int i = i0 + u * threads;
                    if (i < packs) batch[u] = normk::load_pack<T, N>(xr + i * N);
                }
#pragma unroll
                for (int u = 0; u < U; ++u) {
                    const int i = i0 + u * threads;
                    if (i < packs) {
                        if constexpr (kCached) cache[i] = batch[u];
                        accumulate(batch[u]);
                    }
                }
            }
        }

        float mean, rstd;
        if constexpr (kRms) {
            ss = bw::block_allreduce<bw::SumOp>(ss);
            mean = 0.0f;
            rstd = rsqrtf(ss / fcols + eps);
        } else {
            s = normk::block_merge(s);
            mean = s.mean;
            rstd = rsqrtf(s.m2 / fcols + eps);
        }
        if (threadIdx.x == 0) {
            if constexpr (!kRms) mean_out[row] = k + mean;
            rstd_out[row] = rstd;
        }
        const float offset = -mean * rstd;

        T* yr = y + row * cols;
        for (int i0 = threadIdx.x; i0 < packs; i0 += V * threads) {
            // Issue every global load of the step first (gamma, beta, and uncached x); the cached
            // x is read from shared memory right where it is used (a short latency).
            PackT xs[kCached ? 1 : V], gs[V], bs[V];
#pragma unroll
            for (int u = 0; u < V; ++u) {
                const int i = i0 + u * threads;
                if (i < packs) {
                    if constexpr (!kCached) xs[u] = normk::load_pack<T, N>(xr + i * N);
                    gs[u] = kParams ? gamma_cache[i] : normk::load_pack<T, N>(gamma + i * N);
                    if constexpr (!kRms) bs[u] = kParams ? beta_cache[i] : normk::load_pack<T, N>(beta + i * N);
                }
            }
#pragma unroll
            for (int u = 0; u < V; ++u) {
                const int i = i0 + u * threads;
                if (i < packs) {
                    float f[N], g[N], b[N];
                    if constexpr (kCached) {
                        normk::to_floats(cache[i], f);
                    } else {
                        normk::to_floats(xs[u], f);
                    }
                    normk::to_floats(gs[u], g);
                    if constexpr (!kRms) {
                        normk::to_floats(bs[u], b);
#pragma unroll
                        for (int j = 0; j < N; ++j) f[j] -= k;
                    }
                    normk::store_normalized<T, kRms, N>(yr + i * N, f, rstd, offset, g, b);
                }
            }
        }
    }
}

// =============================================================================================
// Optimized, tile tier: short rows whose bytes are no multiple of 16 (31 or 1023 half columns).
// A block copies `tile_rows` consecutive rows of x (one contiguous run) into shared memory in
// aligned 16-byte packs (row_tile.cuh), groups of `group` lanes normalize one row each in place,
// and the tile goes back to y in packs: x and y move like a copy although no row starts on a
// pack. LayerNorm's statistics are two plain passes over the cached row, shifted by its first
// element K as in the other tiers (the mean of x - K, then the sum of squares about it), so no
// Welford merge is needed; the xor all-reduce gives every lane of a group the same bits. gamma and
// beta are read per element from global memory (L1-resident: every row reads the same ones).
// x and y must start the same number of elements past a 16-byte boundary (the host checks).
// =============================================================================================
namespace normk {

// Sums over the threads that share a row: the aligned group of `width` lanes (norm_tile), or the
// whole block (norm_span). Every thread that shares the row gets the same bits.
struct GroupSum {
    int width;
    __device__ __forceinline__ float operator()(float v) const { return bw::tile::group_allreduce<bw::SumOp>(v, width); }
};

struct BlockSum {
    __device__ __forceinline__ float operator()(float v) const { return bw::block_allreduce<bw::SumOp>(v); }
};

// Normalizes the cached row `row` (cols elements, this thread's are first, first + step, ...)
// in place and returns its statistics: two plain passes over the cache, shifted by the row's
// first element K (LayerNorm: the mean of x - K, then the squares about it). `stop` is cols for a
// live row, 0 for a thread whose group has no row (it still takes part in the sums).
template <typename T, bool kRms, typename Sum>
__device__ __forceinline__ void normalize_cached(T* row, int stop, int first, int step, float fcols, float eps,
                                                 const T* __restrict__ gamma, const T* __restrict__ beta,
                                                 Sum sum_over_row, float& mean_out, float& rstd_out) {
    float rstd, mean = 0.0f, k = 0.0f;
    if constexpr (kRms) {
        float ss = 0.0f;
        for (int c = first; c < stop; c += step) {
            const float v = bw::to_float(row[c]);
            ss = fmaf(v, v, ss);
        }
        rstd = rsqrtf(sum_over_row(ss) / fcols + eps);
    } else {
        k = stop > 0 ? bw::to_float(row[0]) : 0.0f;
        float sum = 0.0f;
        for (int c = first; c < stop; c += step) sum += bw::to_float(row[c]) - k;
        mean = sum_over_row(sum) / fcols;
        float m2 = 0.0f;
        for (int c = first; c < stop; c += step) {
            const float d = (bw::to_float(row[c]) - k) - mean;
            m2 = fmaf(d, d, m2);
        }
        rstd = rsqrtf(sum_over_row(m2) / fcols + eps);
    }
    for (int c = first; c < stop; c += step) {
        const float v = bw::to_float(row[c]);
        const float g = bw::to_float(gamma[c]);
        row[c] = bw::from_float<T>(kRms ? v * rstd * g : fmaf(((v - k) - mean) * rstd, g, bw::to_float(beta[c])));
    }
    mean_out = k + mean;
    rstd_out = rstd;
}

// normalize_cached for a lane that holds its E elements of the row (columns lane, lane + step, ...,
// all of the row: stop <= E * step) in registers, with gamma and beta already there: one read of
// the cached row instead of three, and no per-row gamma and beta loads. The sums run in the same
// order as normalize_cached's, so the results are the same bits.
template <typename T, bool kRms, int E, typename Sum>
__device__ __forceinline__ void normalize_held(T* row, int stop, int lane, int step, float fcols, float eps,
                                               const float (&gv)[E], const float (&bv)[E], Sum sum_over_row,
                                               float& mean_out, float& rstd_out) {
    float v[E];
#pragma unroll
    for (int e = 0; e < E; ++e) v[e] = lane + e * step < stop ? bw::to_float(row[lane + e * step]) : 0.0f;
    float rstd, mean = 0.0f, k = 0.0f;
    if constexpr (kRms) {
        float ss = 0.0f;
#pragma unroll
        for (int e = 0; e < E; ++e) ss = fmaf(v[e], v[e], ss);  // v = 0 past the row: adds nothing
        rstd = rsqrtf(sum_over_row(ss) / fcols + eps);
    } else {
        k = stop > 0 ? bw::to_float(row[0]) : 0.0f;
        float sum = 0.0f;
#pragma unroll
        for (int e = 0; e < E; ++e) {
            if (lane + e * step < stop) sum += v[e] - k;
        }
        mean = sum_over_row(sum) / fcols;
        float m2 = 0.0f;
#pragma unroll
        for (int e = 0; e < E; ++e) {
            if (lane + e * step < stop) {
                const float d = (v[e] - k) - mean;
                m2 = fmaf(d, d, m2);
            }
        }
        rstd = rsqrtf(sum_over_row(m2) / fcols + eps);
    }
#pragma unroll
    for (int e = 0; e < E; ++e) {
        const int c = lane + e * step;
        if (c < stop) row[c] = bw::from_float<T>(kRms ? v[e] * rstd * gv[e] : fmaf(((v[e] - k) - mean) * rstd, gv[e], bv[e]));
    }
    mean_out = k + mean;
    rstd_out = rstd;
}

}  // namespace normk

// E > 0: every lane's part of a row is at most E elements (cols <= E * group): the lane keeps them,
// and its columns' gamma and beta, in registers (normalize_held). E = 0: any row of the tile tier.
template <typename T, bool kRms, int E>
__global__ void __launch_bounds__(256)
norm_tile(const T* __restrict__ x, const T* __restrict__ gamma, const T* __restrict__ beta,
          T* __restrict__ y, float* __restrict__ mean_out, float* __restrict__ rstd_out, int rows,
          int cols, float eps, int tile_rows, int group) {
    typedef bw::Pack<T, 16 / sizeof(T)> PackT;
    PackT* cache = reinterpret_cast<PackT*>(norm_row_cache);
    const int phase = bw::tile::phase_of(x);
    const bw::tile::Groups g(group);
    const float fcols = static_cast<float>(cols);
    float gv[E > 0 ? E : 1], bv[E > 0 ? E : 1];  // E > 0: this lane's columns' gamma and beta, for every row
    if constexpr (E > 0) {
#pragma unroll
        for (int e = 0; e < E; ++e) {
            const int c = g.lane + e * group;
            gv[e] = c < cols ? bw::to_float(gamma[c]) : 0.0f;
            bv[e] = !kRms && c < cols ? bw::to_float(beta[c]) : 0.0f;
        }
    }
    bw::tile::for_each_tile<T>(rows, cols, tile_rows, phase, [&](const bw::tile::Tile<T>& tile, int r0, int n) {
        bw::tile::load(cache, x, tile);
        bw::tile::wait_copies();
        __syncthreads();
        T* cached = reinterpret_cast<T*>(cache) + tile.lead;
        for (int first = 0; first < n; first += g.slots) {
            const int r = first + g.slot;
            float mean, rstd;
            T* row = cached + static_cast<i64>(r < n ? r : 0) * cols;
            if constexpr (E > 0) {
                normk::normalize_held<T, kRms, E>(row, r < n ? cols : 0, g.lane, group, fcols, eps, gv, bv,
                                                  normk::GroupSum{group}, mean, rstd);
            } else {
                normk::normalize_cached<T, kRms>(row, r < n ? cols : 0, g.lane, group, fcols, eps, gamma, beta,
                                                 normk::GroupSum{group}, mean, rstd);
            }
            if (g.lane == 0 && r < n) {
                rstd_out[r0 + r] = rstd;
                if constexpr (!kRms) mean_out[r0 + r] = mean;
            }
        }
        __syncthreads();
        bw::tile::store(y, tile, cache);
        __syncthreads();  // the next tile's copies overwrite the cache
    });
}

// =============================================================================================
// Optimized, span tier: rows of odd byte counts too long for a tile (4097 or 30001 half columns),
// one block a row. The row's aligned 16-byte packs are copied into shared memory (a tile of one
// row), the block normalizes it there, and the packs go back to y: 16-byte accesses throughout,
// where the block tiers fall back to one element per access for rows that do not start on a pack.
// =============================================================================================
template <typename T, bool kRms>
__global__ void __launch_bounds__(1024)
norm_span(const T* __restrict__ x, const T* __restrict__ gamma, const T* __restrict__ beta,
          T* __restrict__ y, float* __restrict__ mean_out, float* __restrict__ rstd_out, int rows,
          int cols, float eps) {
    typedef bw::Pack<T, 16 / sizeof(T)> PackT;
    PackT* cache = reinterpret_cast<PackT*>(norm_row_cache);
    const int phase = bw::tile::phase_of(x);
    const float fcols = static_cast<float>(cols);
    for (int r = blockIdx.x; r < rows; r += gridDim.x) {
        const bw::tile::Tile<T> tile(static_cast<i64>(r) * cols, static_cast<i64>(r + 1) * cols, phase);
        bw::tile::load(cache, x, tile);
        bw::tile::wait_copies();
        __syncthreads();
        float mean, rstd;
        normk::normalize_cached<T, kRms>(reinterpret_cast<T*>(cache) + tile.lead, cols, threadIdx.x, blockDim.x, fcols,
                                         eps, gamma, beta, normk::BlockSum{}, mean, rstd);
        if (threadIdx.x == 0) {
            rstd_out[r] = rstd;
            if constexpr (!kRms) mean_out[r] = mean;
        }
        __syncthreads();
        bw::tile::store(y, tile, cache);
        __syncthreads();
    }
}

// =============================================================================================
// Optimized, span-rows tier: rows of odd byte counts (1023 or 4097 half columns) held in
// registers, W threads a row: a group of W lanes (W <= 32, B / W rows a block) or the whole block
// (W = B). A row that starts `lead` elements past a 16-byte boundary is the span of aligned packs
// that covers it; thread t of a row loads packs t, t + W, ... of the span straight from global
// memory in one 16-byte access each (the span's first and last packs carry elements of the
// neighbouring rows, which are masked out), so x moves like a copy with no shared-memory staging,
// and the whole packs of y are stored the same way (the edge packs element by element).
// Column c of pack k is k * N + j - lead: gamma and beta shift with the row's lead. Block b takes
// rows b, b + gridDim.x, b + 2 gridDim.x, ... (group g the g-th, g + B/W-th, ... of them); the
// host makes gridDim.x * cols a multiple of N, so all of them start at the block's lead, and the
// block writes gamma and beta shifted by it into shared memory once (dynamic: the span's packs,
// once for gamma and once for beta); a thread then reads its packs of them in one 16-byte access
// each. On another grid a block a row rewrites the copy when its row's lead changes, and a group's
// row at another lead reads them from global memory element by element: slower, still right. Held
// in registers instead, gamma and beta took LayerNorm's 8-pack kernel to 232 registers, 8 warps an
// SM. Statistics: LayerNorm sums x - K and its squares in one pass, K near the row's mean
// (normk::row_shift), and takes the squares about the mean in a second pass only where those
// cancel (normk::row_moments); RMSNorm sums the squares. Reduced over the row's threads.
// =============================================================================================
// Blocks an SM norm_span_rows is built for. The groups (W < B) stop at seven 128-thread blocks:
// left free, the compiler gave them 96-114 registers, four blocks an SM, and Nsight Compute found
// LayerNorm at 129 columns waiting on memory with no warp eligible in 55% of cycles (H100); seven
// cap them at 72. LayerNorm's kernels are bounded by their packs (4 registers each) plus what ptxas
// gave them besides, left free, before their edge packs took the same arithmetic as the others (64
// registers a block a row, 54 a group): left free since, it took 8-16 more at blocks of 32 to 128
// threads, and 74 for a group's five packs. RMSNorm's block-a-row kernels are left free.
constexpr int kSpanGroupMaxBlocks = 7;

constexpr int span_min_blocks(bool rms, int packs, int width, int block) {
    const bool group = width < block;
    if (rms) return group ? kSpanGroupMaxBlocks : 1;
    const int blocks = 65536 / (block * (4 * packs + (group ? 54 : 64)));
    const int most = group ? kSpanGroupMaxBlocks : 32;
    return blocks < 1 ? 1 : (blocks > most ? most : blocks);
}

// X = 1 (a block a row only): the slots hold only the row's whole packs, up to P x W of them, and
// the elements before and after them (at most 2N - 2) are moved one a thread by the first
// threads of the row. Every pack then takes the same arithmetic with no edge tests, LayerNorm
// needs no neutral values, and rows one pack past a power of two of packs (1023 and 1025 half
// columns span 129 packs, of which 127 or 128 whole) take P = 4 where they took P = 5, whose fifth
// slot every thread paid for in both passes while one thread filled it (Nsight Compute, H100,
// LayerNorm 1023 half columns: about 900 instructions a row, against 366 for 1024 columns).
template <typename T, bool kRms, int P, int W, int B, int X = 0>
__global__ void __launch_bounds__(B, span_min_blocks(kRms, P, W, B))
norm_span_rows(const T* __restrict__ x, const T* __restrict__ gamma, const T* __restrict__ beta,
               T* __restrict__ y, float* __restrict__ mean_out, float* __restrict__ rstd_out, int rows,
               int cols, float eps) {
    static_assert(B % 32 == 0 && B >= 32 && B <= 1024, "B: a multiple of 32 up to 1024");
    static_assert(W == B || (W <= 32 && (W & (W - 1)) == 0), "W: the block, or a power of two up to a warp");
    static_assert(X == 0 || (X == 1 && W == B), "X: 0, or 1 with a block a row");
    constexpr int N = 16 / sizeof(T);
    constexpr int kGroups = B / W;  // rows a block has in flight
    using PackT = bw::Pack<T, N>;
    using Sum = bw::WarpAllReduceOp<bw::SumOp>;
    const float fcols = static_cast<float>(cols);
    const float zero = 0.0f;
    const int span_max = (cols + 2 * N - 2) / N;  // the most packs a row spans, at any lead
    const int t = static_cast<int>(threadIdx.x) % W;  // thread within the row
    const int group = static_cast<int>(threadIdx.x) / W;
    PackT* g_shared = reinterpret_cast<PackT*>(norm_row_cache);
    PackT* b_shared = g_shared + span_max;  // LayerNorm only
    // Writes gamma and beta shifted by `lead` into shared memory (every thread of the block).
    auto shift_params = [&](int lead) {
        T* gs = reinterpret_cast<T*>(g_shared);
        T* bs = reinterpret_cast<T*>(b_shared);
        for (int e = threadIdx.x; e < span_max * N; e += B) {
            const int c = e - lead;
            const bool in = c >= 0 && c < cols;
            gs[e] = in ? gamma[c] : bw::from_float<T>(zero);
            if constexpr (!kRms) bs[e] = in ? beta[c] : bw::from_float<T>(zero);
        }
    };
    // A block a row (W = B) rewrites the shifted copy whenever its row's lead changes (never, on
    // the launcher's grid): its threads move through the rows together. Groups (W < B) hold
    // rows at once, so the copy keeps the block's lead and a row at another reads gamma and beta
    // from global memory; that path only exists in the group kernels, where its registers cost
    // less (with it, the block-a-row kernels took 16-23 more).
    int held_lead = -1;
    const int block_lead = bw::tile::phase_of(x + static_cast<i64>(blockIdx.x) * cols);
    if constexpr (W != B) {
        shift_params(block_lead);
        __syncthreads();
    }
    auto reduce = [](float v) {
        if constexpr (W == B) {
            return bw::block_allreduce_of<float, Sum, true>(v, 0.0f);
        } else {
            return bw::warp_allreduce<bw::SumOp, W>(v);
        }
    };
    auto reduce_pair = [](float2 v) {
        if constexpr (W == B) {
            return bw::block_allreduce_of<float2, normk::PairSum<32>, true>(v, make_float2(0.0f, 0.0f));
        } else {
            return normk::PairSum<W>()(v);
        }
    };
    // The loop runs as long as the block's (W = B) or the warp's first row is in range, the same
    // number of times for every group of a warp, which shuffle together. For a block a row the
    // offsets are 0 and `live` is true at compile time: one add and one compare a row, as in the
    // other block tiers (64-bit row bookkeeping there cost RMSNorm 1-2% and 8-16 registers). Row
    // numbers are ints, as in the other tiers.
    const int lead_offset = (W == B ? 0 : (static_cast<int>(threadIdx.x) & ~31) / W) * static_cast<int>(gridDim.x);
    const int group_offset = group * static_cast<int>(gridDim.x);
    const int row_step = kGroups * static_cast<int>(gridDim.x);
    for (int base = blockIdx.x; base < rows - lead_offset; base += row_step) {
        const bool live = W == B || base < rows - group_offset;
        const int row = base + (live ? group_offset : lead_offset);
        const T* xr = x + static_cast<i64>(row) * cols;
        const int lead = bw::tile::phase_of(xr);
        const int span = live ? (lead + cols + N - 1) / N : 0;
        // The packs the slots hold: [k_first, k_end) of the span (X: its whole packs only).
        const int k_first = X > 0 && lead > 0 ? 1 : 0;
        const int k_end = X > 0 ? max((lead + cols) / N, k_first) : span;
        const PackT* xs = reinterpret_cast<const PackT*>(xr - lead);
        PackT raw[P];
#pragma unroll
        for (int p = 0; p < P; ++p) {
            const int k = k_first + t + p * W;
            if (k < k_end) raw[p] = xs[k];
        }
        // X: the row's elements outside its whole packs, one a thread: `head` before them, then
        // those after them.
        const int head = X > 0 ? min(k_first * N - lead, cols) : 0;
        const int single_col = t < head ? t : t - head + k_end * N - lead;
        const bool has_single = X > 0 && single_col < cols;
        const T single = has_single ? xr[single_col] : bw::from_float<T>(zero);
        if constexpr (W == B) {
            if (lead != held_lead) {  // uniform over the block
                __syncthreads();  // every thread is done with the previous lead's parameters
                shift_params(lead);
                __syncthreads();
                held_lead = lead;
            }
        }
        // LayerNorm: the row's two edge packs hold elements of the neighbouring rows; they become
        // the row's shift K (so x - K is 0 there, and the sums need no correction), and every
        // pack then takes the same arithmetic. Tested element by element in each of its passes
        // instead, the edges cost a branch a pass and about a third of a 1023-column row's
        // instructions (LayerNorm 3-6 points of copy at odd widths, H100). RMSNorm, one pass, keeps
        // the tests: there the uniform passes cost it 3-5 points at 1023-4097 columns.
        const float k = kRms ? 0.0f : (live ? normk::row_shift(xr, cols) : 0.0f);
        if constexpr (!kRms && X == 0) {
            const T neutral = bw::from_float<T>(k);  // K is a T value: exact
#pragma unroll
            for (int p = 0; p < P; ++p) {
                const int first = (t + p * W) * N - lead;
                if (t + p * W < span && (first < 0 || first + N > cols)) {
                    normk::keep_only(raw[p], max(-first, 0), min(cols - first, N), neutral);
                }
            }
        }
        const int neutrals = X > 0 ? 0 : span * N - cols;  // LayerNorm's values of K in the edge packs
        // Calls f(v) for every element of the row this thread holds (LayerNorm: the neutral ones
        // too). LayerNorm converts the packs again each pass: kept as floats across passes, they
        // took up to 50 more registers.
        auto for_each = [&](auto&& f) {
            if constexpr (!kRms) normk::opaque(raw);
#pragma unroll
            for (int p = 0; p < P; ++p) {
                const int kp = k_first + t + p * W;
                if (kp >= k_end) continue;
                const int first = kp * N - lead;
                float v[N];
                normk::to_floats(raw[p], v);
                if (!kRms || X > 0 || (first >= 0 && first + N <= cols)) {
#pragma unroll
                    for (int j = 0; j < N; ++j) f(v[j]);
                } else {
#pragma unroll
                    for (int j = 0; j < N; ++j) {
                        if (first + j >= 0 && first + j < cols) f(v[j]);
                    }
                }
            }
            if constexpr (X > 0) {
                if (has_single) f(bw::to_float(single));
            }
        };
        float mean = 0.0f, rstd, shift = k;  // y is formed from x - shift (LayerNorm)
        if constexpr (kRms) {
            float ss = 0.0f;
            for_each([&](float v) { ss = fmaf(v, v, ss); });
            rstd = rsqrtf(reduce(ss) / fcols + eps);
        } else {
            const normk::RowMoments m =
                normk::row_moments(k, fcols, static_cast<float>(neutrals), reduce_pair, for_each);
            mean = m.mean;
            shift = m.shift;
            rstd = rsqrtf(m.var + eps);
            if (t == 0 && live) mean_out[row] = shift + mean;
        }
        if (t == 0 && live) rstd_out[row] = rstd;
        const float offset = -mean * rstd;
        const bool shifted = W == B || lead == block_lead;  // gamma and beta from shared memory
        if constexpr (!kRms) normk::opaque(raw);
        T* yr = y + static_cast<i64>(row) * cols;
        PackT* ys = reinterpret_cast<PackT*>(yr - lead);
        // LayerNorm's y = (x - shift) * rstd + offset, as x * rstd + folded where `folded` is small
        // (normk::kFoldedOffsetMax): one subtraction fewer an element. Rows whose mean is large
        // against their spread keep the subtraction.
        const float folded = fmaf(-shift, rstd, offset);
        auto store_row = [&](auto fold) {
            constexpr bool kFold = decltype(fold)::value;
#pragma unroll
            for (int p = 0; p < P; ++p) {
                const int kp = k_first + t + p * W;
                if (kp >= k_end) continue;
                const int first = kp * N - lead;
                float f[N], g[N], b[N];
                normk::to_floats(raw[p], f);
                if (shifted) {
                    normk::to_floats(g_shared[kp], g);
                    if constexpr (!kRms) normk::to_floats(b_shared[kp], b);
                } else {
#pragma unroll
                    for (int j = 0; j < N; ++j) {
                        const int c = first + j;
                        const bool in = c >= 0 && c < cols;
                        g[j] = in ? bw::to_float(gamma[c]) : 0.0f;
                        b[j] = !kRms && in ? bw::to_float(beta[c]) : 0.0f;
                    }
                }
                if constexpr (kRms) {
                    if (X > 0 || (first >= 0 && first + N <= cols)) {
                        normk::store_normalized<T, kRms, N>(reinterpret_cast<T*>(ys + kp), f, rstd, offset, g, b);
                    } else {  // an edge pack: only this row's elements
#pragma unroll
                        for (int j = 0; j < N; ++j) {
                            if (first + j >= 0 && first + j < cols) yr[first + j] = bw::from_float<T>(f[j] * rstd * g[j]);
                        }
                    }
                } else {  // y for the whole pack, then the store: the edge packs' arithmetic as the others'
                    if constexpr (!kFold) {
#pragma unroll
                        for (int j = 0; j < N; ++j) f[j] -= shift;
                    }
                    float out[N];
                    normk::normalize<kRms, N>(f, rstd, kFold ? folded : offset, g, b, out);
                    if (X > 0 || (first >= 0 && first + N <= cols)) {
                        normk::Narrow<T>::template store<N>(out, reinterpret_cast<T*>(ys + kp));
                    } else {  // an edge pack: only this row's elements
#pragma unroll
                        for (int j = 0; j < N; ++j) {
                            if (first + j >= 0 && first + j < cols) yr[first + j] = bw::from_float<T>(out[j]);
                        }
                    }
                }
            }
            if constexpr (X > 0) {  // the same arithmetic as normalize's, for one element
                if (has_single) {
                    const T* gs = reinterpret_cast<const T*>(g_shared);  // shifted by `lead`
                    const T* bs = reinterpret_cast<const T*>(b_shared);
                    float v = bw::to_float(single);
                    const float g = bw::to_float(gs[single_col + lead]);
                    if constexpr (kRms) {
                        yr[single_col] = bw::from_float<T>(v * rstd * g);
                    } else {
                        if constexpr (!kFold) v -= shift;
                        const float out = fmaf(fmaf(v, rstd, kFold ? folded : offset), g, bw::to_float(bs[single_col + lead]));
                        yr[single_col] = bw::from_float<T>(out);
                    }
                }
            }
        };
        if (!kRms && fabsf(folded) <= normk::kFoldedOffsetMax) {
            store_row(normk::Flag<true>{});
        } else {
            store_row(normk::Flag<false>{});
        }
    }
}

// =============================================================================================
// Optimized, cluster tier (sm_90 and later): rows too long for a block to cache with room for
// another block an SM (65519 half columns: 128 KiB, where norm_span ran one block an SM and read
// 11-20% of copy). C blocks of a thread-block cluster take a row, each its slice of the span of
// aligned 16-byte packs that covers the row, copied into its shared memory with cp.async (the whole
// slice in flight at once). The span's two edge packs are made neutral (the neighbouring rows'
// elements set to K or 0, as norm_span_rows does), so every pack sums alike. Each block sums its
// slice (LayerNorm: x - K and its squares, K from normk::row_shift; RMSNorm: the squares), posts
// the pair to every peer's mailbox (cluster_mailbox.cuh) and adds the C pairs in rank order, so
// every block of the cluster holds the same bits; LayerNorm takes a second exchange about the mean
// only where the first cancelled (normk::row_moments' rule). Then each block normalizes its slice
// from shared memory and stores it in packs, element by element only in the edge packs. gamma and
// beta are read from global memory (L1, L2) in the store, each pack from the two aligned packs it
// straddles (bw::tile::straddle16, all loads issued before any shift), shifted to the row's offset
// within a pack (shifted16). That shift is the same at every pack of a row, so the store loop is
// dispatched once a row on its whole words, and shifting a pack takes no selects, only a funnel
// shift of a 16-bit type's half-word (gamma and beta at different offsets keep the shift at run
// time). A shifted copy of gamma and beta in shared memory beside the slice, as norm_span_rows
// keeps, tripled LayerNorm's bytes a block, and its blocks an SM fell to a third (docs/norm.md).
// Clusters of 2, 4, 8 or 16 blocks (16 where the GPU holds them) stride over the rows.
// =============================================================================================
// LayerNorm's minimum of one block an SM lets ptxas keep gamma's and beta's loads in flight at once
// (with one pack a thread: 48 registers, not 43 and its beta loads after gamma's had arrived; with
// two packs a thread: 56 in 16 bits and 64 in float32, where without it ptxas held the 16-bit
// instances to 32); RMSNorm's one array keeps its 32 registers without it, and eight blocks an SM
// where it took 40 (docs/norm.md).
template <typename T, bool kRms, int C>
__global__ void __launch_bounds__(1024, kRms ? 0 : 1) BW_CLUSTER_DIMS(C)
norm_cluster(const T* __restrict__ x, const T* __restrict__ gamma, const T* __restrict__ beta, T* __restrict__ y,
             float* __restrict__ mean_out, float* __restrict__ rstd_out, int rows, int cols, float eps) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    constexpr int N = 16 / sizeof(T);
    using PackT = bw::Pack<T, N>;
    __shared__ bw::cluster::Mailbox<float2, C> box;
    const int tid = static_cast<int>(threadIdx.x);
    const int threads = static_cast<int>(blockDim.x);
    const int rank = static_cast<int>(blockIdx.x) % C;
    const float fcols = static_cast<float>(cols);
    PackT* cache = reinterpret_cast<PackT*>(norm_row_cache);
    // gamma and beta in 16-byte packs from their own boundaries (L1, L2), shifted to the row's.
    const int g_lead = bw::tile::phase_of(gamma);
    const int b_lead = kRms ? 0 : bw::tile::phase_of(beta);
    const T* g_aligned = gamma - g_lead;
    const T* b_aligned = beta - b_lead;
    bw::cluster::open(box);
    bool peers_ready = false;
    int round = 0;
    // The slice's partial pair, exchanged: the C pairs added in rank order. Each exchange is a
    // round of the mailbox, which completes once thread 0 has said to expect it.
    auto cluster_sum = [&](float2 part) {
        if (tid == 0) bw::cluster::expect(box, round);
        part = bw::block_allreduce_of<float2, normk::PairSum<32>, true>(part, make_float2(0.0f, 0.0f));
        if (!peers_ready) {
            bw::cluster::wait_peers_ready();
            peers_ready = true;
        }
        if (tid < C) bw::cluster::post(box, round, rank, tid, part);
        const float2* parts = bw::cluster::wait(box, round);
        float2 total = make_float2(0.0f, 0.0f);
#pragma unroll
        for (int r = 0; r < C; ++r) {
            total.x += parts[r].x;
            total.y += parts[r].y;
        }
        ++round;
        return total;
    };
    for (int row = static_cast<int>(blockIdx.x) / C; row < rows; row += static_cast<int>(gridDim.x) / C) {
        const T* xr = x + static_cast<i64>(row) * cols;
        const int lead = bw::tile::phase_of(xr);
        const int span = (lead + cols + N - 1) / N;
        const int share = (span + C - 1) / C;
        const int lo = min(span, rank * share);
        const int entries = min(span, lo + share) - lo;
        const PackT* xs = reinterpret_cast<const PackT*>(xr - lead) + lo;
        for (int e = tid; e < entries; e += threads) bw::tile::copy16_async(&cache[e], &xs[e]);
        const float k = kRms ? 0.0f : normk::row_shift(xr, cols);
        bw::tile::wait_copies();
        // The span's edge packs made neutral, each by the thread that copied it: the neighbouring
        // rows' elements set to K (LayerNorm: x - K is 0 there, the second exchange takes them out)
        // or 0 (RMSNorm), so that every pack sums alike, with no test an element. The store writes
        // only the row's elements.
        const int tail = span * N - lead - cols;  // neighbours' elements after the row in its last pack
        auto neutralize = [&](int e, int keep_lo, int keep_hi) {
            PackT pack = cache[e];
            normk::keep_only(pack, keep_lo, keep_hi, bw::from_float<T>(k));  // K is a value of T (row_shift)
            cache[e] = pack;
        };
        const bool head_here = lead > 0 && lo == 0 && entries > 0;          // this slice holds an edge pack
        const bool tail_here = tail > 0 && lo + entries == span && entries > 0;
        if (head_here && tid == 0) neutralize(0, lead, N);
        if (tail_here && (entries - 1) % threads == tid) neutralize(entries - 1, 0, N - tail);
        __syncthreads();
        // f(v) for every value of this thread's packs of the slice, neutral ones included.
        auto for_each = [&](auto&& f) {
            for (int e = tid; e < entries; e += threads) {
                float v[N];
                normk::to_floats(cache[e], v);
#pragma unroll
                for (int j = 0; j < N; ++j) f(v[j]);
            }
        };
        float mean = 0.0f, var, shift = k;
        if constexpr (kRms) {
            float ss = 0.0f;
            for_each([&](float v) { ss = fmaf(v, v, ss); });
            var = cluster_sum(make_float2(ss, 0.0f)).x / fcols;  // mean(x^2)
        } else {  // every block of the cluster holds the same totals, so takes the same branch
            const normk::RowMoments m =
                normk::row_moments(k, fcols, static_cast<float>(lead + tail), cluster_sum, for_each);
            mean = m.mean;
            var = m.var;
            shift = m.shift;
        }
        const float rstd = rsqrtf(var + eps);
        if (tid == 0 && rank == 0) {
            rstd_out[row] = rstd;
            if constexpr (!kRms) mean_out[row] = shift + mean;
        }
        const float offset = -mean * rstd;
        // LayerNorm's y = (x - shift) * rstd + offset, as x * rstd + folded where `folded` is small
        // (normk::kFoldedOffsetMax, as norm_span_rows does).
        const float folded = fmaf(-shift, rstd, offset);
        T* yr = y + static_cast<i64>(row) * cols;
        PackT* ys = reinterpret_cast<PackT*>(yr - lead) + lo;
        // gamma's and beta's offsets within a pack against the row's are the same at every pack of
        // the row: the pack of a parameter under the row's pack lo + e is lo + e - borrow, shifted.
        const int g_shift = (g_lead - lead + N) % N, g_borrow = g_lead < lead;
        const int b_shift = (b_lead - lead + N) % N, b_borrow = b_lead < lead;
        // The row's packs stored, the parameters' shift in whole words fixed at compile time
        // (Words; dispatched once a row, so that shifting a pack takes no selects) or at run time
        // where gamma and beta sit at different offsets.
        auto store_slice = [&](auto fold, auto words) {
            constexpr bool kFold = decltype(fold)::value;
            constexpr int Words = decltype(words)::value;
            constexpr bool kLinedUp = Words == normk::kParamsLinedUp;
            constexpr int ShiftWords = kLinedUp ? 0 : Words;
            struct Params {
                bw::tile::Straddle g, b;
            };
            auto fetch = [&](int e) {  // gamma's and beta's loads, issued before any shift waits on them
                Params p;
                p.g = bw::tile::straddle16(g_aligned, lo + e - g_borrow, g_shift);
                if constexpr (!kRms) p.b = bw::tile::straddle16(b_aligned, lo + e - b_borrow, b_shift);
                return p;
            };
            auto finish = [&](int e, const Params& p) {
                float f[N], g[N], b[N], out[N];
                normk::to_floats(cache[e], f);
                normk::to_floats(bw::tile::shifted16<T, ShiftWords>(p.g), g);
                if constexpr (!kRms) {
                    normk::to_floats(bw::tile::shifted16<T, ShiftWords>(p.b), b);
                    if constexpr (!kFold) {
#pragma unroll
                        for (int j = 0; j < N; ++j) f[j] -= shift;
                    }
                }
                normk::normalize<kRms, N>(f, rstd, kFold ? folded : offset, g, b, out);
                normk::Narrow<T>::template store<N>(out, reinterpret_cast<T*>(ys + e));
            };
            // The same with the parameters' packs as they lie (kLinedUp). Kept apart: finish calling
            // it with the shifted packs cost float32 LayerNorm a spill.
            auto finish_lined_up = [&](int e, const PackT& gp, const PackT& bp) {
                float f[N], g[N], b[N], out[N];
                normk::to_floats(cache[e], f);
                normk::to_floats(gp, g);
                if constexpr (!kRms) {
                    normk::to_floats(bp, b);
                    if constexpr (!kFold) {
#pragma unroll
                        for (int j = 0; j < N; ++j) f[j] -= shift;
                    }
                }
                normk::normalize<kRms, N>(f, rstd, kFold ? folded : offset, g, b, out);
                normk::Narrow<T>::template store<N>(out, reinterpret_cast<T*>(ys + e));
            };
            const int e_first = head_here;
            const int e_stop = tail_here ? entries - 1 : entries;
            int e = e_first + tid;
            if constexpr (kLinedUp) {
                // The parameters' packs lie under the row's: one load a pack each, so three packs of a
                // thread at a time fit the registers two straddled packs take (four spilled bfloat16).
                const uint4* gs = reinterpret_cast<const uint4*>(g_aligned) + lo;
                const uint4* bs = reinterpret_cast<const uint4*>(b_aligned) + lo;
                auto param = [](const uint4* packs, int e) { return bw::tile::as_pack16<T>(__ldg(packs + e)); };
                constexpr int kAhead = 3;
                for (; e + (kAhead - 1) * threads < e_stop; e += kAhead * threads) {
                    PackT gp[kAhead], bp[kAhead];
#pragma unroll
                    for (int i = 0; i < kAhead; ++i) {
                        gp[i] = param(gs, e + i * threads);
                        bp[i] = param(bs, e + i * threads);
                    }
#pragma unroll
                    for (int i = 0; i < kAhead; ++i) finish_lined_up(e + i * threads, gp[i], bp[i]);
                }
                for (; e < e_stop; e += threads) finish_lined_up(e, param(gs, e), param(bs, e));
            } else {
                // The whole packs, two a thread at a time so that both packs' parameter loads are in
                // flight together; the span's edge packs apart.
                for (; e + threads < e_stop; e += 2 * threads) {
                    const Params p0 = fetch(e), p1 = fetch(e + threads);
                    finish(e, p0);
                    finish(e + threads, p1);
                }
                if (e < e_stop) finish(e, fetch(e));
            }
            // An edge pack: its elements in the row one at a time, as normalize does each.
            auto store_edge = [&](int e) {
                const int first = (lo + e) * N - lead;
                const T* xs_e = reinterpret_cast<const T*>(&cache[e]);
#pragma unroll 1
                for (int j = max(0, -first); j < min(N, cols - first); ++j) {
                    const int c = first + j;
                    const float v = bw::to_float(xs_e[j]);
                    const float g = bw::to_float(gamma[c]);
                    yr[c] = bw::from_float<T>(
                        kRms ? v * rstd * g
                             : fmaf(kFold ? fmaf(v, rstd, folded) : fmaf(v - shift, rstd, offset), g,
                                    bw::to_float(beta[c])));
                }
            };
            if (head_here && tid == 0) store_edge(0);
            if (tail_here && tid == threads - 1 && !(head_here && entries == 1)) store_edge(entries - 1);  // not the head's
        };
        auto store_with = [&](auto fold) {
            if constexpr (sizeof(T) == 2 && !kRms) {  // float32 LayerNorm and bfloat16 RMSNorm lost (docs/norm.md)
                if (g_shift == 0 && b_shift == 0) {
                    store_slice(fold, normk::Count<normk::kParamsLinedUp>{});
                    return;
                }
            }
            if (!kRms && g_shift != b_shift) {
                store_slice(fold, normk::Count<bw::tile::kWordsAtRunTime>{});
                return;
            }
            switch (g_shift * static_cast<int>(sizeof(T)) / 4) {
                case 0: store_slice(fold, normk::Count<0>{}); break;
                case 1: store_slice(fold, normk::Count<1>{}); break;
                case 2: store_slice(fold, normk::Count<2>{}); break;
                default: store_slice(fold, normk::Count<3>{}); break;
            }
        };
        if (!kRms && fabsf(folded) <= normk::kFoldedOffsetMax) {
            store_with(normk::Flag<true>{});
        } else {
            store_with(normk::Flag<false>{});
        }
        __syncthreads();  // the next row's copies overwrite the cache
    }
    if (!peers_ready) bw::cluster::wait_peers_ready();
#endif
}

// =============================================================================================
// Naive: one kernel per step, each reading x from global memory again.
// =============================================================================================


// mean[r] = sum_c x[r, c] / cols   (one block per row, grid-stride)
template <typename T>
__global__ void naive_row_mean(const T* __restrict__ x, float* __restrict__ mean, i64 rows, i64 cols) {
    for (i64 row = blockIdx.x; row < rows; row += gridDim.x) {
        const T* xr = x + row * cols;
        float s = 0.0f;
        for (i64 c = threadIdx.x; c < cols; c += blockDim.x) s += bw::to_float(xr[c]);
        s = bw::block_allreduce<bw::SumOp>(s);
        if (threadIdx.x == 0) mean[row] = s / static_cast<float>(cols);
    }
}

// rstd[r] = 1 / sqrt(sum_c (x[r, c] - mean[r])^2 / cols + eps)   (the second pass over x)
template <typename T>
__global__ void naive_row_rstd(const T* __restrict__ x, const float* __restrict__ mean,
                               float* __restrict__ rstd, i64 rows, i64 cols, float eps) {
    for (i64 row = blockIdx.x; row < rows; row += gridDim.x) {
        const T* xr = x + row * cols;
        const float m = mean[row];
        float s = 0.0f;
        for (i64 c = threadIdx.x; c < cols; c += blockDim.x) {
            const float d = bw::to_float(xr[c]) - m;
            s = fmaf(d, d, s);
        }
        s = bw::block_allreduce<bw::SumOp>(s);
        if (threadIdx.x == 0) rstd[row] = rsqrtf(s / static_cast<float>(cols) + eps);
    }
}

// rstd[r] = 1 / sqrt(sum_c x[r, c]^2 / cols + eps)   (RMSNorm's only statistic)
template <typename T>
__global__ void naive_row_rms(const T* __restrict__ x, float* __restrict__ rstd, i64 rows, i64 cols,
                              float eps) {
    for (i64 row = blockIdx.x; row < rows; row += gridDim.x) {
        const T* xr = x + row * cols;
        float s = 0.0f;
        for (i64 c = threadIdx.x; c < cols; c += blockDim.x) {
            const float v = bw::to_float(xr[c]);
            s = fmaf(v, v, s);
        }
        s = bw::block_allreduce<bw::SumOp>(s);
        if (threadIdx.x == 0) rstd[row] = rsqrtf(s / static_cast<float>(cols) + eps);
    }
}

// y[r, c] = (x[r, c] - mean[r]) * rstd[r] * gamma[c] + beta[c]   (RMSNorm: x * rstd * gamma)
template <typename T, bool kRms>
__global__ void naive_normalize(const T* __restrict__ x, const float* __restrict__ mean,
                                const float* __restrict__ rstd, const T* __restrict__ gamma,
                                const T* __restrict__ beta, T* __restrict__ y, i64 rows, i64 cols) {
    const i64 n = rows * cols;
    const i64 stride = bw::grid_stride();
    i64 i = bw::global_thread_index();
    if (i >= n) return;
    bw::RowCursor cur(i, stride, cols);
    for (; i < n; i += stride, cur.advance()) {
        const float v = bw::to_float(x[i]);
        const float g = bw::to_float(gamma[cur.col]);
        if constexpr (kRms) {
            y[i] = bw::from_float<T>(v * rstd[cur.row] * g);
        } else {
            y[i] = bw::from_float<T>(fmaf((v - mean[cur.row]) * rstd[cur.row], g, bw::to_float(beta[cur.col])));
        }
    }
}

// Building blocks of the optimized softmax family (kernels/softmax.cu): the two algorithms as
// functors, the online (m, d) normalizer and its merges, and the packed row accessors.
//
// Like common.cuh this header includes nothing but the project's own header: NVRTC through CuPy
// does not reliably find the toolkit's headers.
//
// Indexing: a row is addressed as base + row * stride with a 64-bit row index (one multiply per
// row, so any rows * cols is correct), and a column inside a row as a 32-bit int (cols < 2^31).
// There is no per-element division anywhere, so 64-bit row offsets cost nothing measurable; the
// int32/int64 split the permute article needs for its index arithmetic does not arise here.
#pragma once

#include "common.cuh"

namespace bw {
namespace smx {

enum Algorithm { kSoftmax = 0, kLogSoftmax = 1 };

// exp for the kernels. For half and bfloat16: ex2.approx of x * log2(e) (FMUL + MUFU.EX2, flushing
// subnormals); its relative error is about 2 ulp of float plus |x| * 2^-24 from rounding the
// product, below 2e-6 for |x| < 30, far below the 2^-11 of the half result; where |x| is larger
// the result is below 1e-13, under every absolute tolerance. For float32 storage the result keeps
// float precision, so expf (about 1 ulp) is used: log-softmax's backward, dy - exp(y) * s, cancels
// where dy ~ exp(y) * s and would turn __expf's error into a visible absolute error. Callers pass
// x - max, formed first, so large inputs do not inflate the argument's rounding.
template <typename T>
__device__ __forceinline__ float fast_exp(float x) { return __expf(x); }

template <>
__device__ __forceinline__ float fast_exp<float>(float x) { return expf(x); }

// exp(x - m) for the terms of one softmax row of max m, as the sum and the store of the warp tier
// take them. For half and bfloat16: 2^(x log2 e - m log2 e), one FFMA and MUFU.EX2 where
// fast_exp(x - m) takes an FADD, an FMUL and the MUFU. Rounding m log2 e scales every term of the
// row by one factor, which cancels in y = e / sum(e) because the sum and the store share the
// shift; so it serves softmax, not log-softmax, whose output keeps log(sum). The FFMA rounds once,
// like the FADD it replaces. float32 storage keeps expf(x - m).
template <typename T>
struct RowExp {
    static constexpr float kLog2e = 1.4426950408889634f;
    float shift;
    RowExp() = default;
    __device__ __forceinline__ explicit RowExp(float m) : shift(m * kLog2e) {}
    __device__ __forceinline__ float operator()(float x) const {
        float e;
        asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(fmaf(x, kLog2e, -shift)));
        return e;
    }
};

template <>
struct RowExp<float> {
    float m;
    RowExp() = default;
    __device__ __forceinline__ explicit RowExp(float max) : m(max) {}
    __device__ __forceinline__ float operator()(float x) const { return expf(x - m); }
};

// Forward math of the two algorithms, from the row's max m and sum of exp(x - m).
template <int Algo, typename T>
struct Forward;

template <typename T>
struct Forward<kSoftmax, T> {
    // Per row: the scale applied to exp(x - m).
    __device__ __forceinline__ static float finish(float sum) { return 1.0f / sum; }
    __device__ __forceinline__ static float apply(float x, float m, float k) { return fast_exp<T>(x - m) * k; }
};

// log of a row's sum (>= 1: the max contributes exp(0)). For half and bfloat16: lg2.approx times
// ln 2 (MUFU.LG2 + FMUL), absolute error about 2^-21 near 1 and relative 2^-22 above, far below
// the half result's 2^-11 and every half/bfloat16 absolute tolerance. logf is a range reduction
// and a polynomial (about 40 PTX instructions with -ftz, against 2); run once per row by every
// lane of a group, that is about 5 instructions per element at 64-256 columns (8 a lane), where
// log-softmax ran at 81-88% of copy against softmax's 89-93% (H200). float32 storage keeps logf:
// its output keeps float precision.
template <typename T>
__device__ __forceinline__ float row_log(float sum) { return __logf(sum); }

template <>
__device__ __forceinline__ float row_log<float>(float sum) { return logf(sum); }

template <typename T>
struct Forward<kLogSoftmax, T> {
    // Per row: log(sum), subtracted from x - m.
    __device__ __forceinline__ static float finish(float sum) { return row_log<T>(sum); }
    __device__ __forceinline__ static float apply(float x, float m, float k) { return (x - m) - k; }
};

// Backward math: dx from y, dy and the row reduction s.
//   softmax:      s = sum(dy * y),  dx = y * (dy - s)
//   log-softmax:  s = sum(dy),      dx = dy - exp(y) * s
template <int Algo, typename T>
struct Backward;

template <typename T>
struct Backward<kSoftmax, T> {
    __device__ __forceinline__ static float term(float y, float dy) { return dy * y; }
    __device__ __forceinline__ static float apply(float y, float dy, float s) { return (dy - s) * y; }
};

template <typename T>
struct Backward<kLogSoftmax, T> {
    __device__ __forceinline__ static float term(float, float dy) { return dy; }
    __device__ __forceinline__ static float apply(float y, float dy, float s) { return dy - fast_exp<T>(y) * s; }
};

// ---------------------------------------------------------------------------------------------
// The online normalizer (Milakov & Gimelshein 2018): a row's max m and d = sum exp(x - m) in one
// pass. Partial results merge associatively:
//     (m_a, d_a) + (m_b, d_b) = (m, d_a * e^(m_a - m) + d_b * e^(m_b - m)),  m = max(m_a, m_b).
// The identity is (-inf, 0). A factor whose exponent would be -inf - (-inf) is taken as 1 (its d
// is 0 then), so rows that start with -inf (masked scores) never produce a NaN.
// ---------------------------------------------------------------------------------------------

struct MD {
    float m;
    float d;
};

__device__ __forceinline__ MD md_identity() { return MD{neg_inf(), 0.0f}; }

template <typename T>
__device__ __forceinline__ float md_scale(float from, float to) {
    return from == to ? 1.0f : fast_exp<T>(from - to);
}

template <typename T>
__device__ __forceinline__ MD md_merge(MD a, MD b) {
    const float m = fmaxf(a.m, b.m);
    return MD{m, a.d * md_scale<T>(a.m, m) + b.d * md_scale<T>(b.m, m)};
}

// Adds N values at once: one rescale of the running d per pack instead of one per element.
template <typename T, int N>
__device__ __forceinline__ MD md_add(MD acc, const float (&v)[N]) {
    float pm = v[0];
#pragma unroll
    for (int i = 1; i < N; ++i) pm = fmaxf(pm, v[i]);
    const float m = fmaxf(acc.m, pm);
    if (m == neg_inf()) return acc;  // nothing but -inf so far
    float d = acc.d * md_scale<T>(acc.m, m);
#pragma unroll
    for (int i = 0; i < N; ++i) d += fast_exp<T>(v[i] - m);
    return MD{m, d};
}

template <typename T, int Width>
__device__ __forceinline__ MD warp_allreduce_md(MD v) {
#pragma unroll
    for (int mask = Width / 2; mask > 0; mask /= 2) {
        MD other;
        other.m = __shfl_xor_sync(0xffffffffu, v.m, mask, Width);
        other.d = __shfl_xor_sync(0xffffffffu, v.d, mask, Width);
        v = md_merge<T>(v, other);
    }
    return v;
}

template <typename T>
struct WarpAllReduceMD {
    __device__ __forceinline__ MD operator()(MD v) const { return warp_allreduce_md<T, 32>(v); }
};

// Block-wide (m, d) all-reduce; same contract as bw::block_allreduce_of.
template <typename T>
__device__ __forceinline__ MD block_allreduce_md(MD v) {
    return block_allreduce_of<MD, WarpAllReduceMD<T>>(v, md_identity());
}

// ---------------------------------------------------------------------------------------------
// Packs: P elements moved as one access (16 bytes for P = 16 / sizeof(T), or 1 element).
// ---------------------------------------------------------------------------------------------

template <typename T, int P>
__device__ __forceinline__ void unpack(const Pack<T, P>& p, float (&out)[P]) {
#pragma unroll
    for (int i = 0; i < P; ++i) out[i] = to_float(p.v[i]);
}

// unpack for the warp tiers: bfloat16 widened a 32-bit word at a time (bw::widen). The block tiers
// keep unpack: at 1024 threads a block (64 registers) the word-wise form spilled in some of them.
template <typename T, int P>
__device__ __forceinline__ void unpack_words(const Pack<T, P>& p, float (&out)[P]) {
    widen(p, out);
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
__device__ __forceinline__ unsigned max_words(half_t, unsigned a, unsigned b) {
    unsigned m;
    asm("max.f16x2 %0, %1, %2;" : "=r"(m) : "r"(a), "r"(b));
    return m;
}

__device__ __forceinline__ unsigned max_words(bf16_t, unsigned a, unsigned b) {
    unsigned m;
    asm("max.bf16x2 %0, %1, %2;" : "=r"(m) : "r"(a), "r"(b));
    return m;
}
#endif

// Element-wise max of two packs of 16-bit values, a 32-bit word (two elements) an instruction
// (max.f16x2 / max.bf16x2, sm_80 on): a row's max from its packs as stored, where widening them
// first takes two instructions an element. Like fmaxf, a NaN loses to the other value, and the max
// of stored values is one of them, so the float max of the result is the float max of the row.
template <typename T, int P>
__device__ __forceinline__ Pack<T, P> max_packs(const Pack<T, P>& a, const Pack<T, P>& b) {
    Pack<T, P> out;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    if constexpr (sizeof(T) == 2 && P % 2 == 0) {
        const unsigned* wa = reinterpret_cast<const unsigned*>(&a);
        const unsigned* wb = reinterpret_cast<const unsigned*>(&b);
        unsigned* wo = reinterpret_cast<unsigned*>(&out);
#pragma unroll
        for (int i = 0; i < P / 2; ++i) wo[i] = max_words(T{}, wa[i], wb[i]);
    } else
#endif
    {
#pragma unroll
        for (int i = 0; i < P; ++i) out.v[i] = from_float<T>(fmaxf(to_float(a.v[i]), to_float(b.v[i])));
    }
    return out;
}

// The largest element of a pack, in float.
template <typename T, int P>
__device__ __forceinline__ float pack_max(const Pack<T, P>& p) {
    float f[P];
    widen(p, f);
    float m = f[0];
#pragma unroll
    for (int i = 1; i < P; ++i) m = fmaxf(m, f[i]);
    return m;
}

template <typename T, int P>
__device__ __forceinline__ Pack<T, P> pack_from(const float (&in)[P]) {
    Pack<T, P> p;
#pragma unroll
    for (int i = 0; i < P; ++i) p.v[i] = from_float<T>(in[i]);
    return p;
}

template <typename T, int P>
__device__ __forceinline__ Pack<T, P> pack_fill(float value) {
    Pack<T, P> p;
    const T v = from_float<T>(value);
#pragma unroll
    for (int i = 0; i < P; ++i) p.v[i] = v;
    return p;
}

// ---------------------------------------------------------------------------------------------
// A row of any length at any element offset, walked in aligned packs. Its span starts at the
// aligned pack holding its first element: the row's elements are [lo, hi) of the span (lo = 0
// where the row starts on a pack boundary, hi = lo + cols), pack k of the span covers elements
// [k P, k P + P). The whole packs, [first_whole, end_whole), move as one 16-byte access each in
// the kernels' main loops, which look at nothing else; the partial ones (at most two: the head,
// where the row starts mid-pack, and the tail) are loaded and stored element by element, once a
// row, by one owner thread (for_each_edge). So a row of odd length, or one that starts mid-pack
// (every other row of an odd-width tensor), moves its bulk in 16-byte accesses and the main loops
// keep the registers they had for aligned rows.
// The host picks P > 1 only where every tensor of a call has the same offset within 16 bytes at
// every row (equal base offsets and equal row strides modulo 16 bytes), so one span serves x and y.
// ---------------------------------------------------------------------------------------------

template <int P>
struct RowSpan {
    int lo;  // first element of the row within the span
    int hi;  // one past its last
    __device__ __forceinline__ int packs() const { return (hi + P - 1) / P; }
    __device__ __forceinline__ int first_whole() const { return lo > 0 ? 1 : 0; }
    __device__ __forceinline__ int end_whole() const { return hi / P; }
    __device__ __forceinline__ bool whole(int k) const { return k >= first_whole() && k < end_whole(); }
    // The partial pack `which` (0: the head, 1: the tail), or -1 where there is none.
    __device__ __forceinline__ int edge(int which) const {
        if (which == 0) return hi > 0 && !whole(0) ? 0 : -1;
        const int last = packs() - 1;
        return last > 0 && !whole(last) ? last : -1;
    }
};

// The span of a row of `cols` elements starting at `row`.
template <typename T, int P>
__device__ __forceinline__ RowSpan<P> row_span(const T* row, int cols) {
    int lo = 0;
    if constexpr (P > 1) lo = static_cast<int>((reinterpret_cast<unsigned long long>(row) / sizeof(T)) & (P - 1));
    return RowSpan<P>{lo, lo + cols};
}

// Whole pack k of the span of the row starting at `row`.
template <typename T, int P>
__device__ __forceinline__ Pack<T, P> load_whole(const T* __restrict__ row, RowSpan<P> span, int k) {
    return reinterpret_cast<const Pack<T, P>*>(row - span.lo)[k];
}

template <typename T, int P>
__device__ __forceinline__ void store_whole(T* __restrict__ row, RowSpan<P> span, int k, const Pack<T, P>& v) {
    reinterpret_cast<Pack<T, P>*>(row - span.lo)[k] = v;
}

// Pack k of the span (k < packs()), `fill` outside the row: one 16-byte load whatever k, for
// kernels that treat every pack alike. The aligned pack holds at least one of the row's elements,
// so it lies within the row's allocation (allocations are mapped in whole pages, and an aligned
// 16-byte pack never straddles a page); the bytes outside the row are read and replaced, never used.
template <typename T, int P>
__device__ __forceinline__ Pack<T, P> load_masked(const T* __restrict__ row, RowSpan<P> span, int k, float fill) {
    Pack<T, P> v = load_whole<T, P>(row, span, k);
    if (!span.whole(k)) {
        const T f = from_float<T>(fill);
#pragma unroll
        for (int i = 0; i < P; ++i) {
            const int e = k * P + i;
            if (e < span.lo || e >= span.hi) v.v[i] = f;
        }
    }
    return v;
}

// Partial pack k, element by element, `fill` outside the row: for the owner threads of the head
// and tail packs (the 16-byte load and selects of load_masked cost the unrolled loops registers).
template <typename T, int P>
__device__ __forceinline__ Pack<T, P> load_partial(const T* __restrict__ row, RowSpan<P> span, int k, float fill) {
    Pack<T, P> v = pack_fill<T, P>(fill);
#pragma unroll
    for (int i = 0; i < P; ++i) {
        const int e = k * P + i;
        if (e >= span.lo && e < span.hi) v.v[i] = row[e - span.lo];
    }
    return v;
}

// Pack k of the span where k may be whole or partial (k < packs()): whole packs in one access,
// partial ones element by element.
template <typename T, int P>
__device__ __forceinline__ void store_any(T* __restrict__ row, RowSpan<P> span, int k, const Pack<T, P>& v);

// Stores the row's elements of partial pack k.
template <typename T, int P>
__device__ __forceinline__ void store_partial(T* __restrict__ row, RowSpan<P> span, int k, const Pack<T, P>& v) {
#pragma unroll
    for (int i = 0; i < P; ++i) {
        const int e = k * P + i;
        if (e >= span.lo && e < span.hi) row[e - span.lo] = v.v[i];
    }
}

template <typename T, int P>
__device__ __forceinline__ void store_any(T* __restrict__ row, RowSpan<P> span, int k, const Pack<T, P>& v) {
    if (span.whole(k)) {
        store_whole<T, P>(row, span, k, v);
    } else {
        store_partial<T, P>(row, span, k, v);
    }
}

// Calls f(k) for each partial pack k of the span that thread `me` owns: the head belongs to
// thread 0, the tail to thread `last` (both 0 .. last being the threads that share the row).
template <int P, typename F>
__device__ __forceinline__ void for_each_edge(RowSpan<P> span, int me, int last, F f) {
    if constexpr (P > 1) {
        const int head = span.edge(0);
        if (head >= 0 && me == 0) f(head);
        const int tail = span.edge(1);
        if (tail >= 0 && me == last) f(tail);
    }
}

// Row `row` of a matrix with `stride` elements between rows (64-bit: any rows * cols).
template <typename T>
__device__ __forceinline__ T* row_at(T* base, i64 row, i64 stride) {
    return base + row * stride;
}

}  // namespace smx
}  // namespace bw

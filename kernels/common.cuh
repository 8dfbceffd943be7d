// Shared device helpers for bwbench kernels: storage types, float conversion, packed vectors and
// warp/block reductions.
//
// This header includes nothing on purpose. The kernels are compiled at run time by NVRTC through
// CuPy, and the include paths NVRTC is given differ between cupy-cuda12x and cupy-cuda13x builds
// (cuda_fp16.h, cuda_bf16.h and <cstdint> are not always found). Everything here relies only on
// what NVRTC and nvcc both provide with no header at all: built-in types and device functions, and
// inline PTX. Keep it that way; tests/test_kernels_compile.py compiles every kernel with nvcc (and
// with NVRTC where it is installed).
#pragma once

// <cstdint> is not reliably available under NVRTC.
typedef long long i64;

// 16-bit storage types. Only the bit pattern lives in memory; all arithmetic is done in float, so
// they need no operators. They sit at global scope so that CuPy name expressions read
// `kernel<half_t>`.
struct alignas(2) half_t {
    unsigned short bits;
};
struct alignas(2) bf16_t {
    unsigned short bits;
};

namespace bw {

// ---------------------------------------------------------------------------------------------
// Conversions. Widening is exact for both 16-bit formats; narrowing rounds to nearest even, as
// PyTorch does, so a kernel whose float math matches the reference rounds to the same value.
// ---------------------------------------------------------------------------------------------

__device__ __forceinline__ float to_float(float v) { return v; }

__device__ __forceinline__ float to_float(half_t v) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v.bits));
    return f;
}

__device__ __forceinline__ float to_float(bf16_t v) {
    // bfloat16 is the upper half of a float32, so widening is a shift.
    return __uint_as_float(static_cast<unsigned int>(v.bits) << 16);
}

template <typename T>
__device__ __forceinline__ T from_float(float f);

template <>
__device__ __forceinline__ float from_float<float>(float f) {
    return f;
}

template <>
__device__ __forceinline__ half_t from_float<half_t>(float f) {
    half_t h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h.bits) : "f"(f));
    return h;
}

template <>
__device__ __forceinline__ bf16_t from_float<bf16_t>(float f) {
    bf16_t b;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(b.bits) : "f"(f));
#else
    // No bf16 cvt before sm_80: round to nearest even by hand, and keep a NaN a (quiet) NaN
    // instead of letting the rounding carry turn it into infinity.
    unsigned int u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        b.bits = static_cast<unsigned short>((u >> 16) | 0x0040u);
    } else {
        u += 0x7fffu + ((u >> 16) & 1u);
        b.bits = static_cast<unsigned short>(u >> 16);
    }
#endif
    return b;
}

// -infinity without <cmath>'s INFINITY, which NVRTC does not always define.
__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }

// ---------------------------------------------------------------------------------------------
// Packed vectors: N elements moved as one access of sizeof(T) * N bytes (16 for the widest,
// ld.global.v4 / st.global.v4). The alignment is what lets the compiler emit the wide access, so
// only reinterpret pointers whose address is a multiple of sizeof(Pack<T, N>).
// ---------------------------------------------------------------------------------------------

template <typename T, int N>
struct alignas(sizeof(T) * N) Pack {
    static_assert(N > 0 && ((sizeof(T) * N) & (sizeof(T) * N - 1)) == 0 && sizeof(T) * N <= 16,
                  "a Pack must be 1, 2, 4, 8 or 16 bytes");
    T v[N];
};

// Elements of T in one 16-byte access.
template <typename T>
struct Pack16 {
    static constexpr int size = 16 / sizeof(T);
    typedef Pack<T, size> type;
};

// A pack widened to float. bfloat16 widens a 32-bit word (two elements) at a time: the low
// element is the word shifted up 16 bits, the high one the word with its low 16 bits cleared, one
// instruction each; element by element the compiler first extracted each 16-bit value and then
// shifted it (1.8 instructions an element in the softmax warp tier, where it ran at 74% of copy
// against float16's 91% on an H100). float16 takes one conversion an element either way.
template <typename T, int N>
__device__ __forceinline__ void widen(const Pack<T, N>& p, float (&out)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) out[i] = to_float(p.v[i]);
}

template <int N>
__device__ __forceinline__ void widen(const Pack<bf16_t, N>& p, float (&out)[N]) {
    if constexpr (N % 2 == 0) {
        const unsigned* words = reinterpret_cast<const unsigned*>(&p);  // aligned: alignof(Pack) = 2N
#pragma unroll
        for (int i = 0; i < N / 2; ++i) {
            out[2 * i] = __uint_as_float(words[i] << 16);
            out[2 * i + 1] = __uint_as_float(words[i] & 0xffff0000u);
        }
    } else {
#pragma unroll
        for (int i = 0; i < N; ++i) out[i] = to_float(p.v[i]);
    }
}

// ---------------------------------------------------------------------------------------------
// Reductions, always in float (the storage type is converted first, so half and bfloat16 rows
// lose nothing while being reduced).
// ---------------------------------------------------------------------------------------------

struct SumOp {
    __device__ __forceinline__ float operator()(float a, float b) const { return a + b; }
    __device__ __forceinline__ static float identity() { return 0.0f; }
};

// fmaxf ignores a NaN operand; a NaN in a row still reaches the output through exp and the sum.
struct MaxOp {
    __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
    __device__ __forceinline__ static float identity() { return neg_inf(); }
};

// Butterfly all-reduce within aligned groups of Width lanes: every lane ends with its group's
// result, so no broadcast is needed afterwards. All 32 lanes of the warp must call it (the shuffle
// mask is the full warp even when Width < 32).
template <typename Op, int Width = 32>
__device__ __forceinline__ float warp_allreduce(float v) {
    static_assert(Width >= 1 && Width <= 32 && (Width & (Width - 1)) == 0,
                  "Width must be a power of two, at most 32");
#pragma unroll
    for (int mask = Width / 2; mask > 0; mask /= 2) {
        v = Op()(v, __shfl_xor_sync(0xffffffffu, v, mask, Width));
    }
    return v;
}

// All-reduce over the whole block of any state (a float, softmax's (m, d), a Welford state): every
// thread gets the result. WarpAllReduce is a functor type whose call leaves every lane of a warp
// with its warp's result; `identity` stands in for the warps a smaller block does not have.
// blockDim.x must be a multiple of 32 (at most 1024) and every thread must call it (it contains
// __syncthreads). Each warp reduces the per-warp partials itself instead of waiting for warp 0 to
// broadcast them, which saves one barrier; the trailing barrier lets the caller call it again
// straight away (the partials buffer is static, one per instantiation). kOneWarpShortcut returns
// the warp's result at once in a one-warp block (no barrier; callers whose identity is not exact
// under the warp reduction ask for it).
// Where block_allreduce_of keeps one state per warp: an array of State unless a State says
// otherwise (welford.cuh keeps its three fields in three arrays).
template <typename State>
struct WarpPartials {
    State v[32];
    __device__ __forceinline__ void store(int warp, const State& s) { v[warp] = s; }
    // Warp `warp`'s state where the block has that warp (warp < warps), else `identity`.
    __device__ __forceinline__ State load_or(int warp, int warps, const State& identity) const {
        return warp < warps ? v[warp] : identity;
    }
};

template <typename State, typename WarpAllReduce, bool kOneWarpShortcut = false>
__device__ __forceinline__ State block_allreduce_of(State v, const State& identity) {
    __shared__ WarpPartials<State> partials;
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int warps = blockDim.x >> 5;
    v = WarpAllReduce()(v);
    if (kOneWarpShortcut && warps == 1) return v;  // uniform over the block: no barrier needed
    if (lane == 0) partials.store(warp, v);
    __syncthreads();
    v = partials.load_or(lane, warps, identity);
    v = WarpAllReduce()(v);
    __syncthreads();
    return v;
}

template <typename Op>
struct WarpAllReduceOp {
    __device__ __forceinline__ float operator()(float v) const { return warp_allreduce<Op>(v); }
};

// block_allreduce_of for a float and a reduction Op (SumOp, MaxOp).
template <typename Op>
__device__ __forceinline__ float block_allreduce(float v) {
    return block_allreduce_of<float, WarpAllReduceOp<Op>>(v, Op::identity());
}

// Keeps row = i / cols (and col = i % cols) up to date while a grid-stride loop walks the flat
// index i, with additions only: one 64-bit division per thread instead of one per element (a
// 64-bit division is a long software sequence, enough to make a memory-bound loop compute-bound).
struct RowCursor {
    i64 row, col, drow, dcol, cols;

    __device__ __forceinline__ RowCursor(i64 i, i64 stride, i64 cols_) : cols(cols_) {
        row = i / cols;
        col = i - row * cols;
        drow = stride / cols;
        dcol = stride - drow * cols;
    }

    __device__ __forceinline__ void advance() {
        row += drow;
        col += dcol;
        if (col >= cols) {
            col -= cols;
            ++row;
        }
    }
};

__device__ __forceinline__ i64 global_thread_index() {
    return static_cast<i64>(blockIdx.x) * blockDim.x + threadIdx.x;
}

__device__ __forceinline__ i64 grid_stride() { return static_cast<i64>(gridDim.x) * blockDim.x; }

}  // namespace bw

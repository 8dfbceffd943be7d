// The elementwise half of kernels/bn_relu.cu's three-kernel path: bn_relu_apply and
// bn_relu_backward_apply, and the evict-first accesses the fused kernels' phase C shares.
// Included by bn_relu.cu only, after bn_relu_stats.cuh.
#pragma once

#include "bn_relu_stats.cuh"

namespace bnr {

// ---------------------------------------------------------------------------------------------
// Elementwise passes over the flat tensor in memory order. A warp owns chunks of 32 * V
// consecutive elements (lane l the V at chunk + l * V), so the forward's mask words are built with
// bitmask.cuh's group OR exactly as the ReLU kernel builds them. Vec: 16-byte accesses. NHWC takes
// them with C % V == 0, each pack covering V consecutive channels; NCHW at any H*W, a pack that
// runs into the next plane (H*W % V != 0) selecting between two channels' coefficients element by
// element (pack_channels), with no divergence between such packs and the others (where H*W < V a
// pack may span more planes: those find each element's channel). Without Vec every element finds
// its own channel. Per-channel coefficients are kept in registers while a thread's channel does not change
// (NHWC grids are sized so that it never does).
// Register caps: 64 for the forward (4 blocks of 256 threads per SM), 85 for the backward (3 blocks:
// its NHWC float16 coefficients alone take 32 registers, and 64 spills on sm_80).
// ---------------------------------------------------------------------------------------------

// The elementwise passes of large tensors (from_end, the host decides: FROM_END_MIN_BYTES) walk from
// the end down: the reduction before them (statistics or gradient sums) swept the tensor from the
// start up, all blocks together, so what it read last is still in L2 when the pass starts, and part
// of the second read of x (and dy) comes from there instead of DRAM.
__device__ __forceinline__ int walk_item(int step, int count, int from_end) {
    return from_end ? count - 1 - step : step;
}

// For that reuse to last, what the pass reads for the last time and what it writes is marked
// evict-first (ld/st.global.cs): otherwise each line it reads or writes pushes out the oldest line
// the reduction left, which is the one the walk from the end needs next.
constexpr bool kApplyEvictFirst = true;

// bitmask.cuh's load_pack and store_pack with the hint above on their 16-byte accesses.
template <typename T, int V, bool Vec>
__device__ __forceinline__ void load_pack_once(const T* __restrict__ p, int first, int n, T (&out)[V]) {
    if (kApplyEvictFirst && Vec && first + V <= n) {
        static_assert(sizeof(T) * V == 16, "16-byte packs");
        const uint4 raw = __ldcs(reinterpret_cast<const uint4*>(p + first));
        const bw::Pack<T, V> pack = *reinterpret_cast<const bw::Pack<T, V>*>(&raw);
#pragma unroll
        for (int k = 0; k < V; ++k) out[k] = pack.v[k];
    } else {
        bw::load_pack<T, V, Vec>(p, first, n, out);
    }
}

template <typename T, int V, bool Vec>
__device__ __forceinline__ void store_pack_once(T* __restrict__ p, int first, int n, const T (&in)[V]) {
    if (kApplyEvictFirst && Vec && first + V <= n) {
        bw::Pack<T, V> pack;
#pragma unroll
        for (int k = 0; k < V; ++k) pack.v[k] = in[k];
        __stcs(reinterpret_cast<uint4*>(p + first), *reinterpret_cast<const uint4*>(&pack));
    } else {
        bw::store_pack<T, V, Vec>(p, first, n, in);
    }
}

template <bool kNhwc>
__device__ __forceinline__ int channel_of(int i, int C, int HW) {
    return kNhwc ? i % C : (i / HW) % C;
}

// The channel c0 of a 16-byte pack's first element and how many of its elements lie in c0's plane
// (NCHW: `split`, V unless the pack runs past the plane's end, which happens only where H*W % V !=
// 0; the rest are in the next plane, channel c0 + 1 mod C, where H*W >= V). NHWC packs cover
// channels c0 .. c0 + V - 1 (C % V == 0): split stays V.
template <bool kNhwc, int V>
__device__ __forceinline__ void pack_channels(int first, int C, int HW, int& c0, int& split) {
    if constexpr (kNhwc) {
        c0 = first % C;
        split = V;
    } else {
        const int plane = first / HW;
        c0 = plane % C;
        split = min(V, HW - (first - plane * HW));
    }
}

__device__ __forceinline__ int next_channel(int c, int C) { return c + 1 < C ? c + 1 : 0; }

// Per-channel constants of the forward: y = fma(x - m, a, b) with a = invstd * gamma.
struct FwdCoef {
    float m, a, b;
    __device__ __forceinline__ void load(int c, const float* mean, const float* invstd, const float* gamma,
                                         const float* beta) {
        m = mean[c];
        a = invstd[c] * gamma[c];
        b = beta[c];
    }
};

template <typename T, bool kNhwc, bool Vec, bool kResidual>
__global__ void __launch_bounds__(kBlock, 4) bn_relu_apply(const T* __restrict__ x, const T* __restrict__ z, const float* __restrict__ mean,
                              const float* __restrict__ invstd, const float* __restrict__ gamma,
                              const float* __restrict__ beta, T* __restrict__ y, unsigned* __restrict__ words,
                              int n, int C, int HW, int from_end) {
    constexpr int V = bw::Pack16<T>::size;
    constexpr int G = 32 / V;
    constexpr int NC = (kNhwc && Vec) ? V : 1;  // channels held in registers
    const int lane = threadIdx.x & 31;
    const int warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int warps = (gridDim.x * blockDim.x) >> 5;
    const int chunks = (n + 32 * V - 1) / (32 * V);
    FwdCoef coef[NC];
    int cached = -1;
    for (int step = warp; step < chunks; step += warps) {
        const int first = walk_item(step, chunks, from_end) * (32 * V) + lane * V;
        const bool full = first + V <= n;
        T xv[V], zv[V];
        load_pack_once<T, V, Vec>(x, first, n, xv);
        if constexpr (kResidual) load_pack_once<T, V, Vec>(z, first, n, zv);
        float out[V];
        unsigned b = 0;
        int c0 = 0, split = V;
        if (Vec && full) pack_channels<kNhwc, V>(first, C, HW, c0, split);
        if (Vec && full && (split == V || HW >= V)) {
            if (c0 != cached) {
#pragma unroll
                for (int k = 0; k < NC; ++k) coef[k].load(c0 + k, mean, invstd, gamma, beta);
                cached = c0;
            }
            FwdCoef next = coef[0];  // NCHW: elements k >= split are the next plane's
            if (!kNhwc && split < V) next.load(next_channel(c0, C), mean, invstd, gamma, beta);
#pragma unroll
            for (int k = 0; k < V; ++k) {
                const FwdCoef q = NC == 1 ? (k < split ? coef[0] : next) : coef[NC == 1 ? 0 : k];
                float p = fmaf(bw::to_float(xv[k]) - q.m, q.a, q.b);
                if constexpr (kResidual) p += bw::to_float(zv[k]);
                out[k] = p;
                b |= (p > 0.0f ? 1u : 0u) << k;
            }
        } else {
#pragma unroll
            for (int k = 0; k < V; ++k) {
                float p = 0.0f;
                if (first + k < n) {
                    FwdCoef q;
                    q.load(channel_of<kNhwc>(first + k, C, HW), mean, invstd, gamma, beta);
                    p = fmaf(bw::to_float(xv[k]) - q.m, q.a, q.b);
                    if constexpr (kResidual) p += bw::to_float(zv[k]);
                }
                out[k] = p;
                b |= (p > 0.0f ? 1u : 0u) << k;  // elements past n have p = 0: no bit
            }
        }
        T yv[V];
#pragma unroll
        for (int k = 0; k < V; ++k) yv[k] = (b >> k) & 1u ? bw::from_float<T>(out[k]) : bw::from_float<T>(0.0f);
        store_pack_once<T, V, Vec>(y, first, n, yv);
        const unsigned word = bw::group_or<G>(b << ((lane * V) & 31));
        const int w = first >> 5;
        if ((lane & (G - 1)) == 0 && w * 32 < n) words[w] = word;
    }
}

// Blocks an SM the backward pass's launch bound asks for: 4 (64 registers) where every instance
// compiles without spilling (sm_80 and sm_90), 3 (85) for the residual ones, whose float16
// instances spill at 64. On an H100 the 4th block made the NHWC float16 pass 11% faster (69.2 ->
// 61.5 us at 32x64x112x112): a thread keeps its 8 channels' coefficients in 32 registers, and the
// pass is latency-bound at one wave.
template <bool kResidual>
constexpr int kBwdApplyBlocks = kResidual ? 3 : 4;

// Per-channel constants of the backward: dx = k * (g - mg - (x - m) * kx).
struct BwdCoef {
    float m, k, mg, kx;
    __device__ __forceinline__ void load(int c, const float* mean, const float* invstd, const float* gamma,
                                         const float* dgamma, const float* dbeta, float inv_m) {
        const float is = invstd[c];
        m = mean[c];
        k = gamma[c] * is;
        mg = dbeta[c] * inv_m;
        kx = dgamma[c] * is * inv_m;
    }
};

template <typename T, bool kNhwc, bool Vec, bool kResidual>
__global__ void __launch_bounds__(kBlock, kBwdApplyBlocks<kResidual>) bn_relu_backward_apply(const T* __restrict__ dy, const unsigned char* __restrict__ mask, int mask_bytes,
                                       const T* __restrict__ x, const float* __restrict__ mean,
                                       const float* __restrict__ invstd, const float* __restrict__ gamma,
                                       const float* __restrict__ dgamma, const float* __restrict__ dbeta,
                                       T* __restrict__ dx, T* __restrict__ dz, int n, int C, int HW, float inv_m,
                                       int from_end) {
    constexpr int V = bw::Pack16<T>::size;
    constexpr int NC = (kNhwc && Vec) ? V : 1;
    BwdCoef coef[NC];
    int cached = -1;
    const int packs = (n + V - 1) / V;
    for (int step = blockIdx.x * blockDim.x + threadIdx.x; step < packs; step += gridDim.x * blockDim.x) {
        const int first = walk_item(step, packs, from_end) * V;
        const bool full = first + V <= n;
        T gv[V], xv[V];
        load_pack_once<T, V, Vec>(dy, first, n, gv);
        load_pack_once<T, V, Vec>(x, first, n, xv);
        unsigned bits = 0;
        if (Vec && full) {
            bits = bw::read_bits<V>(mask, mask_bytes, first);
        } else {
#pragma unroll
            for (int k = 0; k < V; ++k) bits |= (first + k < n ? mask_bit(mask, first + k) : 0u) << k;
        }
        T dxv[V], dzv[V];
        int c0 = 0, split = V;
        if (Vec && full) pack_channels<kNhwc, V>(first, C, HW, c0, split);
        if (Vec && full && (split == V || HW >= V)) {
            if (c0 != cached) {
#pragma unroll
                for (int k = 0; k < NC; ++k) coef[k].load(c0 + k, mean, invstd, gamma, dgamma, dbeta, inv_m);
                cached = c0;
            }
            BwdCoef next = coef[0];  // NCHW: elements k >= split are the next plane's
            if (!kNhwc && split < V) next.load(next_channel(c0, C), mean, invstd, gamma, dgamma, dbeta, inv_m);
#pragma unroll
            for (int k = 0; k < V; ++k) {
                const BwdCoef q = NC == 1 ? (k < split ? coef[0] : next) : coef[NC == 1 ? 0 : k];
                const float g = (bits >> k) & 1u ? bw::to_float(gv[k]) : 0.0f;
                dxv[k] = bw::from_float<T>(q.k * fmaf(-(bw::to_float(xv[k]) - q.m), q.kx, g - q.mg));
                dzv[k] = (bits >> k) & 1u ? gv[k] : bw::from_float<T>(0.0f);
            }
        } else {
#pragma unroll
            for (int k = 0; k < V; ++k) {
                const float g = (bits >> k) & 1u ? bw::to_float(gv[k]) : 0.0f;
                float d = 0.0f;
                if (first + k < n) {
                    BwdCoef q;
                    q.load(channel_of<kNhwc>(first + k, C, HW), mean, invstd, gamma, dgamma, dbeta, inv_m);
                    d = q.k * fmaf(-(bw::to_float(xv[k]) - q.m), q.kx, g - q.mg);
                }
                dxv[k] = bw::from_float<T>(d);
                dzv[k] = (bits >> k) & 1u ? gv[k] : bw::from_float<T>(0.0f);
            }
        }
        store_pack_once<T, V, Vec>(dx, first, n, dxv);
        if constexpr (kResidual) store_pack_once<T, V, Vec>(dz, first, n, dzv);
    }
}

}  // namespace bnr

// Welford / Chan: mean and sum of squared deviations (M2) of partial sets, merged pairwise.
// Shared by the LayerNorm kernels (norm.cu: per row) and the BatchNorm kernels (bn_relu.cu: per
// channel). Merging (n, mean, M2) states never forms E[x^2] - E[x]^2, so data whose mean is large
// against its spread does not cancel catastrophically.
//
// Like common.cuh, this header includes nothing beyond it (NVRTC may not find toolkit headers).
#pragma once

#include "common.cuh"

namespace bw {

// A partial result: count, mean and M2. The count is a float: exact up to 2^24, and it saves
// conversions in the merge.
struct Welford {
    float n;
    float mean;
    float m2;
};

// Chan et al.: the state of the union of two disjoint sets. (0, 0, 0) is an exact identity on
// either side, and a merge of two empty states stays (0, 0, 0) (no 0 / 0). The weight uses the
// fast division (2 ulp): it scales a difference of means, which the result's rounding dominates.
__device__ __forceinline__ Welford chan_merge(const Welford& a, const Welford& b) {
    const float n = a.n + b.n;
    const float wb = __fdividef(b.n, fmaxf(n, 1.0f));
    const float d = b.mean - a.mean;
    Welford r;
    r.n = n;
    r.mean = fmaf(d, wb, a.mean);
    r.m2 = a.m2 + b.m2 + d * d * a.n * wb;
    return r;
}

// One step of an ordered butterfly merge: this lane's state and the state of the lane `mask` away
// (mask < 32), the lower lane's first, so both lanes end with the same bits. All 32 lanes call it.
__device__ __forceinline__ Welford merge_with_lane(const Welford& s, int mask) {
    const int lane = threadIdx.x & 31;
    Welford o;
    o.n = __shfl_xor_sync(0xffffffffu, s.n, mask);
    o.mean = __shfl_xor_sync(0xffffffffu, s.mean, mask);
    o.m2 = __shfl_xor_sync(0xffffffffu, s.m2, mask);
    return (lane & mask) ? chan_merge(o, s) : chan_merge(s, o);
}

// Butterfly merge within aligned groups of Width lanes; every lane ends with its group's state,
// bit-identical across the group. All 32 lanes must call it.
template <int Width>
__device__ __forceinline__ Welford warp_merge(Welford s) {
    static_assert(Width >= 1 && Width <= 32 && (Width & (Width - 1)) == 0, "Width: a power of two <= 32");
#pragma unroll
    for (int mask = Width / 2; mask > 0; mask /= 2) s = merge_with_lane(s, mask);
    return s;
}

// block_merge's per-warp states, field by field (three arrays of 32 floats).
template <>
struct WarpPartials<Welford> {
    float n[32], mean[32], m2[32];
    __device__ __forceinline__ void store(int warp, const Welford& s) {
        n[warp] = s.n;
        mean[warp] = s.mean;
        m2[warp] = s.m2;
    }
    __device__ __forceinline__ Welford load_or(int warp, int warps, const Welford& identity) const {
        Welford t = identity;
        if (warp < warps) {
            t.n = n[warp];
            t.mean = mean[warp];
            t.m2 = m2[warp];
        }
        return t;
    }
};

struct WarpMerge {
    __device__ __forceinline__ Welford operator()(Welford s) const { return warp_merge<32>(s); }
};

// Merge over the whole block (blockDim.x a multiple of 32, at most 1024); every thread gets the
// same state (bw::block_allreduce_of's contract). A one-warp block returns its warp's state
// without a barrier: merging it with empty states again would not give back the same bits.
__device__ __forceinline__ Welford block_merge(Welford s) {
    return block_allreduce_of<Welford, WarpMerge, true>(s, Welford{0.0f, 0.0f, 0.0f});
}

}  // namespace bw

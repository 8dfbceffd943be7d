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

}  // namespace bw

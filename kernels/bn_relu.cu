// BatchNorm2d training forward fused with ReLU (optionally after a residual add) keeping a 1-bit
// mask, and its backward through the mask and BN (OneFlow's BN+ReLU article, seeds/003).
//
// Layouts: NCHW (x is (N, C, HW), a channel's elements are N planes of HW contiguous values) and
// NHWC (x is (M, C) with M = N * HW rows, the channel is the fastest dimension). The mask is over
// the tensor's memory order, in bitmask.cuh's format (element i: bit i % 32 of word i / 32).
//
// Forward, three kernels (x is read twice; the byte model says so):
//   bn_stats_{nchw,nhwc}    per (split, channel) partial statistics of x, written to a workspace;
//   bn_stats_finalize       per channel: merge the partials -> mean, invstd (saved, float32);
//   bn_relu_apply           y = relu((x - mean) * invstd * gamma + beta [+ z]) and the mask words.
// Backward, three kernels (dy, the mask and x are read twice):
//   bn_grad_{nchw,nhwc}     per (split, channel) partial sums of g and g * (x - mean), g = dy * mask;
//   bn_grad_finalize        dbeta = sum(g), dgamma = invstd * sum(g * (x - mean));
//   bn_relu_backward_apply  dx = gamma * invstd * (g - dbeta / M - xhat * dgamma / M) [and dz = g].
//
// Statistics: each thread sums d = x - K and d^2 for a per-channel shift K (the channel's first
// element), so the sums are of the order of the spread, not of the mean (no catastrophic
// cancellation for data of mean 1e4 and std 1); at the end of its loop it turns them into a
// Welford state (count, mean of d, M2 = sum d^2 - (sum d)^2 / count), and states are combined with
// Chan's pairwise merge across lanes, warps and blocks. All arithmetic is float32.
//
// Indices are 32-bit: the launcher refuses tensors of 2^31 elements or more.
#include "bitmask.cuh"
#include "welford.cuh"

namespace bnr {

constexpr int kBlock = 256;  // threads per block of every kernel here

using Stat = bw::Welford;  // kernels/welford.cuh
using bw::chan_merge;

// A thread's shifted sums as a Welford state.
__device__ __forceinline__ Stat from_sums(float n, float s1, float s2) {
    Stat s;
    s.n = n;
    s.mean = n > 0.0f ? s1 / n : 0.0f;
    s.m2 = fmaxf(fmaf(-s1, s.mean, s2), 0.0f);
    return s;
}

__device__ __forceinline__ Stat shfl_xor(const Stat& s, int mask) {
    Stat o;
    o.n = __shfl_xor_sync(0xffffffffu, s.n, mask);
    o.mean = __shfl_xor_sync(0xffffffffu, s.mean, mask);
    o.m2 = __shfl_xor_sync(0xffffffffu, s.m2, mask);
    return o;
}

// Merge the states of lanes that share (lane % Stride) within each warp; lanes < Stride end with
// their warp's total (lower lane first, so the result does not depend on timing).
__device__ __forceinline__ Stat warp_merge_strided(Stat s, int stride) {
    const int lane = threadIdx.x & 31;
    for (int m = stride; m < 32; m <<= 1) {
        const Stat o = shfl_xor(s, m);
        s = (lane & m) ? chan_merge(o, s) : chan_merge(s, o);
    }
    return s;
}

__device__ __forceinline__ float warp_sum_strided(float v, int stride) {
    for (int m = stride; m < 32; m <<= 1) v += __shfl_xor_sync(0xffffffffu, v, m);
    return v;
}

// Per-block merge of one channel's states when `width` consecutive threads hold `width`
// different channels (width = 1: the whole block holds one channel). Thread t < width gets the
// block's total for its channel. Contains __syncthreads: every thread calls it.
__device__ __forceinline__ Stat block_merge(Stat s, int width) {
    __shared__ float sh[3][kBlock / 32][32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    s = warp_merge_strided(s, width);
    if (lane < width) {
        sh[0][warp][lane] = s.n;
        sh[1][warp][lane] = s.mean;
        sh[2][warp][lane] = s.m2;
    }
    __syncthreads();
    Stat t = {0.0f, 0.0f, 0.0f};
    if (threadIdx.x < width) {
        for (int w = 0; w < kBlock / 32; ++w) t = chan_merge(t, Stat{sh[0][w][threadIdx.x], sh[1][w][threadIdx.x], sh[2][w][threadIdx.x]});
    }
    __syncthreads();
    return t;
}

__device__ __forceinline__ float block_sum(float v, int width) {
    __shared__ float sh[kBlock / 32][32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = warp_sum_strided(v, width);
    if (lane < width) sh[warp][lane] = v;
    __syncthreads();
    float t = 0.0f;
    if (threadIdx.x < width) {
        for (int w = 0; w < kBlock / 32; ++w) t += sh[w][threadIdx.x];
    }
    __syncthreads();
    return t;
}

// V values of x starting at element `off`: one 16-byte load (Vec) or V scalar loads.
template <typename T, int V, bool Vec>
__device__ __forceinline__ void load_floats(const T* __restrict__ p, int off, float (&f)[V]) {
    if constexpr (Vec) {
        const bw::Pack<T, V> pk = *reinterpret_cast<const bw::Pack<T, V>*>(p + off);
#pragma unroll
        for (int k = 0; k < V; ++k) f[k] = bw::to_float(pk.v[k]);
    } else {
#pragma unroll
        for (int k = 0; k < V; ++k) f[k] = bw::to_float(p[off + k]);
    }
}

// One mask bit of element i (any i; the mask holds mask_bytes bytes).
__device__ __forceinline__ unsigned mask_bit(const unsigned char* __restrict__ mask, int i) {
    return (static_cast<unsigned>(mask[i >> 3]) >> (i & 7)) & 1u;
}

// ---------------------------------------------------------------------------------------------
// Per-channel reductions. Kind::Stats: Welford state of x. Kind::Grad: sums of g and
// g * (x - mean), g = dy where the mask bit is set. The NCHW kernel runs on a (C, S) grid: block
// (c, s) walks channel c's N * HW elements (index j -> plane j / HW, offset j % HW) with the S
// blocks of the channel interleaved; V elements per step (V > 1 only when HW % V == 0 and x is
// 16-byte aligned, so a pack never crosses a plane). The NHWC kernel runs on a (tiles, S) grid:
// TX threads across channel packs of a row (coalesced), kBlock / TX rows per step, S row splits.
// Partials go to ws: Stats as 3 arrays (n, mean of x - K, M2) of S * C floats, Grad as 2 (sum g,
// sum g * (x - mean)), indexed [s * C + c].
// ---------------------------------------------------------------------------------------------

template <typename T, int V, bool Vec>
__global__ void bn_stats_nchw(const T* __restrict__ x, float* __restrict__ ws, int C, int HW, int per_channel) {
    const int c = blockIdx.x, s = blockIdx.y, S = gridDim.y;
    const float shift = bw::to_float(x[static_cast<i64>(c) * HW]);
    float s1 = 0.0f, s2 = 0.0f;
    int count = 0;
    for (int j = (s * kBlock + threadIdx.x) * V; j < per_channel; j += S * kBlock * V) {
        const int plane = j / HW;
        const int off = (plane * C + c) * HW + (j - plane * HW);
        float f[V];
        load_floats<T, V, Vec>(x, off, f);
#pragma unroll
        for (int k = 0; k < V; ++k) {
            const float d = f[k] - shift;
            s1 += d;
            s2 = fmaf(d, d, s2);
        }
        count += V;
    }
    const Stat t = block_merge(from_sums(static_cast<float>(count), s1, s2), 1);
    if (threadIdx.x == 0) {
        const int at = s * C + c, stride = S * C;
        ws[at] = t.n;
        ws[at + stride] = t.mean;
        ws[at + 2 * stride] = t.m2;
    }
}

template <typename T, int V, bool Vec>
__global__ void bn_stats_nhwc(const T* __restrict__ x, float* __restrict__ ws, int rows, int C, int tx_threads) {
    const int tx = threadIdx.x % tx_threads, ty = threadIdx.x / tx_threads, ty_threads = kBlock / tx_threads;
    const int c0 = (blockIdx.x * tx_threads + tx) * V;
    const int s = blockIdx.y, S = gridDim.y;
    const bool active = c0 < C;
    float shift[V], s1[V], s2[V];
#pragma unroll
    for (int k = 0; k < V; ++k) {
        shift[k] = active ? bw::to_float(x[c0 + k]) : 0.0f;
        s1[k] = 0.0f;
        s2[k] = 0.0f;
    }
    int count = 0;
    if (active) {
        for (int r = s * ty_threads + ty; r < rows; r += S * ty_threads) {
            float f[V];
            load_floats<T, V, Vec>(x, r * C + c0, f);
#pragma unroll
            for (int k = 0; k < V; ++k) {
                const float d = f[k] - shift[k];
                s1[k] += d;
                s2[k] = fmaf(d, d, s2[k]);
            }
            ++count;
        }
    }
#pragma unroll
    for (int k = 0; k < V; ++k) {
        const Stat t = block_merge(from_sums(static_cast<float>(count), s1[k], s2[k]), tx_threads);
        const int c = (blockIdx.x * tx_threads + static_cast<int>(threadIdx.x)) * V + k;
        if (static_cast<int>(threadIdx.x) < tx_threads && c < C) {
            const int at = s * C + c, stride = S * C;
            ws[at] = t.n;
            ws[at + stride] = t.mean;
            ws[at + 2 * stride] = t.m2;
        }
    }
}

// V elements of dy and x at `off`, dy zeroed where the mask bit is 0: the gradient through the
// ReLU, g, next to the x it multiplies in the BN backward's sums.
template <typename T, int V, bool Vec>
__device__ __forceinline__ void load_masked_grad(const T* __restrict__ dy, const unsigned char* __restrict__ mask,
                                                 int mask_bytes, const T* __restrict__ x, int off, float (&g)[V],
                                                 float (&f)[V]) {
    load_floats<T, V, Vec>(dy, off, g);
    load_floats<T, V, Vec>(x, off, f);
    unsigned bits;
    if constexpr (Vec) {
        bits = bw::read_bits<V>(mask, mask_bytes, off);
    } else {
        bits = mask_bit(mask, off);
    }
#pragma unroll
    for (int k = 0; k < V; ++k) g[k] = (bits >> k) & 1u ? g[k] : 0.0f;
}

// Partial sums of g and g * (x - mean) for the backward; same walks as the statistics.
template <typename T, int V, bool Vec>
__global__ void bn_grad_nchw(const T* __restrict__ dy, const unsigned char* __restrict__ mask, int mask_bytes, const T* __restrict__ x,
                             const float* __restrict__ mean, float* __restrict__ ws, int C, int HW, int per_channel) {
    const int c = blockIdx.x, s = blockIdx.y, S = gridDim.y;
    const float mu = mean[c];
    float sg = 0.0f, sgx = 0.0f;
    for (int j = (s * kBlock + threadIdx.x) * V; j < per_channel; j += S * kBlock * V) {
        const int plane = j / HW;
        const int off = (plane * C + c) * HW + (j - plane * HW);
        float g[V], f[V];
        load_masked_grad<T, V, Vec>(dy, mask, mask_bytes, x, off, g, f);
#pragma unroll
        for (int k = 0; k < V; ++k) {
            sg += g[k];
            sgx = fmaf(g[k], f[k] - mu, sgx);
        }
    }
    sg = block_sum(sg, 1);
    sgx = block_sum(sgx, 1);
    if (threadIdx.x == 0) {
        ws[s * C + c] = sg;
        ws[s * C + c + S * C] = sgx;
    }
}

template <typename T, int V, bool Vec>
__global__ void bn_grad_nhwc(const T* __restrict__ dy, const unsigned char* __restrict__ mask, int mask_bytes, const T* __restrict__ x,
                             const float* __restrict__ mean, float* __restrict__ ws, int rows, int C, int tx_threads) {
    const int tx = threadIdx.x % tx_threads, ty = threadIdx.x / tx_threads, ty_threads = kBlock / tx_threads;
    const int c0 = (blockIdx.x * tx_threads + tx) * V;
    const int s = blockIdx.y, S = gridDim.y;
    const bool active = c0 < C;
    float mu[V], sg[V], sgx[V];
#pragma unroll
    for (int k = 0; k < V; ++k) {
        mu[k] = active ? mean[c0 + k] : 0.0f;
        sg[k] = 0.0f;
        sgx[k] = 0.0f;
    }
    if (active) {
        for (int r = s * ty_threads + ty; r < rows; r += S * ty_threads) {
            const int off = r * C + c0;
            float g[V], f[V];
            load_masked_grad<T, V, Vec>(dy, mask, mask_bytes, x, off, g, f);
#pragma unroll
            for (int k = 0; k < V; ++k) {
                sg[k] += g[k];
                sgx[k] = fmaf(g[k], f[k] - mu[k], sgx[k]);
            }
        }
    }
#pragma unroll
    for (int k = 0; k < V; ++k) {
        const float a = block_sum(sg[k], tx_threads);
        const float b = block_sum(sgx[k], tx_threads);
        const int c = (blockIdx.x * tx_threads + static_cast<int>(threadIdx.x)) * V + k;
        if (static_cast<int>(threadIdx.x) < tx_threads && c < C) {
            ws[s * C + c] = a;
            ws[s * C + c + S * C] = b;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Finalize: one warp per channel merges its S partials (lanes stride over them, then a butterfly),
// so a thousand partials cost a few dozen merges per lane. blockDim.x is kBlock.
// ---------------------------------------------------------------------------------------------

template <typename T>
__global__ void bn_stats_finalize(const float* __restrict__ ws, int S, const T* __restrict__ x, int shift_stride,
                                  float eps, float* __restrict__ mean, float* __restrict__ invstd, int C) {
    const int c = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31;
    if (c >= C) return;  // warp-uniform: the whole warp leaves
    Stat t = {0.0f, 0.0f, 0.0f};
    for (int s = lane; s < S; s += 32) t = chan_merge(t, Stat{ws[s * C + c], ws[s * C + c + S * C], ws[s * C + c + 2 * S * C]});
    t = warp_merge_strided(t, 1);
    if (lane == 0) {
        const float shift = bw::to_float(x[static_cast<i64>(c) * shift_stride]);
        mean[c] = shift + t.mean;
        invstd[c] = 1.0f / sqrtf(t.m2 / fmaxf(t.n, 1.0f) + eps);
    }
}

__global__ void bn_grad_finalize(const float* __restrict__ ws, int S, const float* __restrict__ invstd,
                                 float* __restrict__ dgamma, float* __restrict__ dbeta, int C) {
    const int c = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31;
    if (c >= C) return;
    float sg = 0.0f, sgx = 0.0f;
    for (int s = lane; s < S; s += 32) {
        sg += ws[s * C + c];
        sgx += ws[s * C + c + S * C];
    }
    sg = warp_sum_strided(sg, 1);
    sgx = warp_sum_strided(sgx, 1);
    if (lane == 0) {
        dbeta[c] = sg;
        dgamma[c] = sgx * invstd[c];
    }
}

// ---------------------------------------------------------------------------------------------
// Elementwise passes over the flat tensor in memory order. A warp owns chunks of 32 * V
// consecutive elements (lane l the V at chunk + l * V), so the forward's mask words are built with
// bitmask.cuh's group OR exactly as the ReLU kernel builds them. Vec: 16-byte accesses, and each
// pack lies in one channel (NCHW, HW % V == 0) or covers V consecutive channels (NHWC, C % V ==
// 0); otherwise every element finds its own channel. Per-channel coefficients are kept in
// registers while a thread's channel does not change (NHWC grids are sized so that it never does).
// Register caps: 64 for the forward (4 blocks of 256 threads per SM), 85 for the backward (3 blocks:
// its NHWC float16 coefficients alone take 32 registers, and 64 spills on sm_80).
// ---------------------------------------------------------------------------------------------

template <bool kNhwc>
__device__ __forceinline__ int channel_of(int i, int C, int HW) {
    return kNhwc ? i % C : (i / HW) % C;
}

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
                              int n, int C, int HW) {
    constexpr int V = bw::Pack16<T>::size;
    constexpr int G = 32 / V;
    constexpr int NC = (kNhwc && Vec) ? V : 1;  // channels held in registers
    const int lane = threadIdx.x & 31;
    const int warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int warps = (gridDim.x * blockDim.x) >> 5;
    const int chunks = (n + 32 * V - 1) / (32 * V);
    FwdCoef coef[NC];
    int cached = -1;
    for (int ch = warp; ch < chunks; ch += warps) {
        const int first = ch * (32 * V) + lane * V;
        const bool full = first + V <= n;
        T xv[V], zv[V];
        bw::load_pack<T, V, Vec>(x, first, n, xv);
        if constexpr (kResidual) bw::load_pack<T, V, Vec>(z, first, n, zv);
        float out[V];
        unsigned b = 0;
        if (Vec && full) {
            const int c0 = channel_of<kNhwc>(first, C, HW);
            if (c0 != cached) {
#pragma unroll
                for (int k = 0; k < NC; ++k) coef[k].load(c0 + k, mean, invstd, gamma, beta);
                cached = c0;
            }
#pragma unroll
            for (int k = 0; k < V; ++k) {
                const FwdCoef& q = coef[NC == 1 ? 0 : k];
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
        bw::store_pack<T, V, Vec>(y, first, n, yv);
        const unsigned word = bw::group_or<G>(b << ((lane * V) & 31));
        const int w = first >> 5;
        if ((lane & (G - 1)) == 0 && w * 32 < n) words[w] = word;
    }
}

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
__global__ void __launch_bounds__(kBlock, 3) bn_relu_backward_apply(const T* __restrict__ dy, const unsigned char* __restrict__ mask, int mask_bytes,
                                       const T* __restrict__ x, const float* __restrict__ mean,
                                       const float* __restrict__ invstd, const float* __restrict__ gamma,
                                       const float* __restrict__ dgamma, const float* __restrict__ dbeta,
                                       T* __restrict__ dx, T* __restrict__ dz, int n, int C, int HW, float inv_m) {
    constexpr int V = bw::Pack16<T>::size;
    constexpr int NC = (kNhwc && Vec) ? V : 1;
    BwdCoef coef[NC];
    int cached = -1;
    const int stride = gridDim.x * blockDim.x * V;
    for (int first = (blockIdx.x * blockDim.x + threadIdx.x) * V; first < n; first += stride) {
        const bool full = first + V <= n;
        T gv[V], xv[V];
        bw::load_pack<T, V, Vec>(dy, first, n, gv);
        bw::load_pack<T, V, Vec>(x, first, n, xv);
        unsigned bits = 0;
        if (Vec && full) {
            bits = bw::read_bits<V>(mask, mask_bytes, first);
        } else {
#pragma unroll
            for (int k = 0; k < V; ++k) bits |= (first + k < n ? mask_bit(mask, first + k) : 0u) << k;
        }
        T dxv[V], dzv[V];
        if (Vec && full) {
            const int c0 = channel_of<kNhwc>(first, C, HW);
            if (c0 != cached) {
#pragma unroll
                for (int k = 0; k < NC; ++k) coef[k].load(c0 + k, mean, invstd, gamma, dgamma, dbeta, inv_m);
                cached = c0;
            }
#pragma unroll
            for (int k = 0; k < V; ++k) {
                const BwdCoef& q = coef[NC == 1 ? 0 : k];
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
        bw::store_pack<T, V, Vec>(dx, first, n, dxv);
        if constexpr (kResidual) bw::store_pack<T, V, Vec>(dz, first, n, dzv);
    }
}

}  // namespace bnr

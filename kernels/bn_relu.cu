// BatchNorm2d training forward fused with ReLU (optionally after a residual add) keeping a 1-bit
// mask, and its backward through the mask and BN (OneFlow's BN+ReLU article, seeds/003).
//
// Layouts: NCHW (x is (N, C, HW), a channel's elements are N planes of HW contiguous values) and
// NHWC (x is (M, C) with M = N * HW rows, the channel is the fastest dimension). The mask is over
// the tensor's memory order, in bitmask.cuh's format (element i: bit i % 32 of word i / 32).
//
// Forward, three kernels (x is read twice; the byte model says so), or the one-launch form of the
// same passes at the end of this file:
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

// block_merge for V channels a thread at once (the V channels of a 16-byte pack): the V merges over
// the warps run side by side on V * width threads, with far fewer barriers than V block_merges one
// after another (those took about 2 us at the end of every NHWC statistics block on an H100).
// Thread t < V * width gets channel k = t / width of lane t % width; the merge order is
// block_merge's, so the results are the same bits. The merge goes through `sh`, R channels of the
// pack a round (V / R rounds, two barriers each): 3 * R * (kBlock / 32) * width floats.
template <int V, int R = V>
__device__ __forceinline__ Stat block_merge_packs_in(Stat (&s)[V], int width, float* sh) {
    static_assert(V % R == 0, "whole rounds");
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    constexpr int W = kBlock / 32;
    auto at = [&](int q, int k, int w, int l) -> float& { return sh[((q * R + k) * W + w) * width + l]; };
    if constexpr (R == V) {  // one round: each channel's warp merge next to its stores
#pragma unroll
        for (int k = 0; k < V; ++k) {
            s[k] = warp_merge_strided(s[k], width);
            if (lane < width) {
                at(0, k, warp, lane) = s[k].n;
                at(1, k, warp, lane) = s[k].mean;
                at(2, k, warp, lane) = s[k].m2;
            }
        }
        __syncthreads();
        Stat t = {0.0f, 0.0f, 0.0f};
        if (static_cast<int>(threadIdx.x) < V * width) {
            const int k = threadIdx.x / width, l = threadIdx.x % width;
            for (int w = 0; w < W; ++w) t = chan_merge(t, Stat{at(0, k, w, l), at(1, k, w, l), at(2, k, w, l)});
        }
        __syncthreads();
        return t;
    }
#pragma unroll
    for (int k = 0; k < V; ++k) s[k] = warp_merge_strided(s[k], width);
    const int mine = static_cast<int>(threadIdx.x) / width, l = static_cast<int>(threadIdx.x) % width;
    Stat t = {0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int first = 0; first < V; first += R) {
        if (lane < width) {
#pragma unroll
            for (int k = 0; k < R; ++k) {
                at(0, k, warp, lane) = s[first + k].n;
                at(1, k, warp, lane) = s[first + k].mean;
                at(2, k, warp, lane) = s[first + k].m2;
            }
        }
        __syncthreads();
        if (mine >= first && mine < first + R) {
            for (int w = 0; w < W; ++w)
                t = chan_merge(t, Stat{at(0, mine - first, w, l), at(1, mine - first, w, l), at(2, mine - first, w, l)});
        }
        __syncthreads();
    }
    return t;
}

template <int V>
__device__ __forceinline__ Stat block_merge_packs(Stat (&s)[V], int width) {
    __shared__ float sh[3 * V * (kBlock / 32) * 32];
    return block_merge_packs_in<V>(s, width, sh);
}

// The channel whose block total thread t holds after block_merge_packs / block_sum_packs, in a
// block of a (tiles, S) grid whose tile spans `width` packs of V channels.
template <int V>
__device__ __forceinline__ int pack_channel(int width) {
    const int t = static_cast<int>(threadIdx.x);
    return (static_cast<int>(blockIdx.x) * width + t % width) * V + t / width;
}

// block_sum of two values for V channels a thread at once, as block_merge_packs does it.
template <int V>
__device__ __forceinline__ void block_sum_packs(float (&a)[V], float (&b)[V], int width, float& ta, float& tb) {
    __shared__ float sh[2][V][kBlock / 32][32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int k = 0; k < V; ++k) {
        a[k] = warp_sum_strided(a[k], width);
        b[k] = warp_sum_strided(b[k], width);
        if (lane < width) {
            sh[0][k][warp][lane] = a[k];
            sh[1][k][warp][lane] = b[k];
        }
    }
    __syncthreads();
    ta = 0.0f;
    tb = 0.0f;
    if (static_cast<int>(threadIdx.x) < V * width) {
        const int k = threadIdx.x / width, l = threadIdx.x % width;
        for (int w = 0; w < kBlock / 32; ++w) {
            ta += sh[0][k][w][l];
            tb += sh[1][k][w][l];
        }
    }
    __syncthreads();
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

// The fused forward's x cache (bn_relu_fused_*): phase A keeps the first `cached` 16-byte packs of
// each thread's walk in shared memory, slot k of thread t at cache[k * kBlock + t] (consecutive
// threads, consecutive 16 bytes: no bank conflicts), and phase C takes them from there instead of
// reading x again. Kernels without the cache pass cached = 0.
using XCache = uint4;

// load_floats, with 16-byte packs (Vec) the raw pack also kept in cache slot `item` if item < cached.
template <typename T, int V, bool Vec>
__device__ __forceinline__ void load_floats_keep(const T* __restrict__ p, int off, float (&f)[V], XCache* cache,
                                                 int item, int cached) {
    if constexpr (Vec) {
        static_assert(sizeof(T) * V == sizeof(XCache), "16-byte packs");
        const XCache raw = *reinterpret_cast<const XCache*>(p + off);
        if (item < cached) cache[item * kBlock + threadIdx.x] = raw;
        const bw::Pack<T, V> pk = *reinterpret_cast<const bw::Pack<T, V>*>(&raw);
#pragma unroll
        for (int k = 0; k < V; ++k) f[k] = bw::to_float(pk.v[k]);
    } else {
        load_floats<T, V, false>(p, off, f);
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

// Loads in flight per thread in the statistics walks (-DBW_BNR_STATS_LOADS=n for A/B runs).
#ifndef BW_BNR_STATS_LOADS
#define BW_BNR_STATS_LOADS 2
#endif
constexpr int kStatsLoads = BW_BNR_STATS_LOADS;

// Channels of a pack the fused NHWC forward's block merge takes a round in its kRounds instances
// (block_merge_packs_in; the host's MERGE_ROUND): the merge's scratch is shared memory the x
// cache cannot have. On an H100 (float16 32x256x56x56: 16 cache slots instead of 11) the forward
// took 54.4 -> 51.3 us with 2, 52.1 with 1; at 32x64x112x112, where rounds free one slot, 2 cost
// 0.9 us, so the host takes them only where they free several.
constexpr int kMergeRound = 2;

// Memory offset of element j of channel c's N * HW elements (plane j / HW, offset j % HW).
__device__ __forceinline__ int nchw_offset(int j, int c, int C, int HW) {
    const int plane = j / HW;
    return (plane * C + c) * HW + (j - plane * HW);
}

// Block (c, s) of a (C, S) grid: channel c's Welford state over its share of the channel (thread 0
// gets the block's total). Shared by bn_stats_nchw and the fused forward.
template <typename T, int V, bool Vec>
__device__ __forceinline__ Stat nchw_block_stats(const T* __restrict__ x, int c, int s, int S, int C, int HW,
                                                 int per_channel, XCache* cache = nullptr, int cached = 0) {
    const float shift = bw::to_float(x[static_cast<i64>(c) * HW]);
    float s1 = 0.0f, s2 = 0.0f;
    auto add = [&](const float (&f)[V]) {
#pragma unroll
        for (int k = 0; k < V; ++k) {
            const float d = f[k] - shift;
            s1 += d;
            s2 = fmaf(d, d, s2);
        }
    };
    const int step = S * kBlock * V;
    constexpr int U = kStatsLoads;
    int j = (s * kBlock + threadIdx.x) * V, item = 0;
    for (; j + (U - 1) * step < per_channel; j += U * step, item += U) {  // U loads in flight before any is used
        float f[U][V];
#pragma unroll
        for (int u = 0; u < U; ++u)
            load_floats_keep<T, V, Vec>(x, nchw_offset(j + u * step, c, C, HW), f[u], cache, item + u, cached);
#pragma unroll
        for (int u = 0; u < U; ++u) add(f[u]);
    }
    for (; j < per_channel; j += step, ++item) {
        float f0[V];
        load_floats_keep<T, V, Vec>(x, nchw_offset(j, c, C, HW), f0, cache, item, cached);
        add(f0);
    }
    const int count = item * V;
    return block_merge(from_sums(static_cast<float>(count), s1, s2), 1);
}

__device__ __forceinline__ float invstd_of(const Stat& t, float eps) {
    return 1.0f / sqrtf(t.m2 / fmaxf(t.n, 1.0f) + eps);
}

__device__ __forceinline__ void store_partial(float* __restrict__ ws, int s, int S, int C, int c, const Stat& t) {
    const int at = s * C + c, stride = S * C;
    ws[at] = t.n;
    ws[at + stride] = t.mean;
    ws[at + 2 * stride] = t.m2;
}

__device__ __forceinline__ Stat load_partial(const float* __restrict__ ws, int s, int S, int C, int c) {
    const int at = s * C + c, stride = S * C;
    return Stat{__ldcg(ws + at), __ldcg(ws + at + stride), __ldcg(ws + at + 2 * stride)};
}

template <typename T, int V, bool Vec>
__global__ void bn_stats_nchw(const T* __restrict__ x, float* __restrict__ ws, int C, int HW, int per_channel) {
    const int c = blockIdx.x, s = blockIdx.y, S = gridDim.y;
    const Stat t = nchw_block_stats<T, V, Vec>(x, c, s, S, C, HW, per_channel);
    if (threadIdx.x == 0) store_partial(ws, s, S, C, c, t);
}

// Block (tile, s) of a (tiles, S) grid: the Welford states of its tile's channels over its rows,
// written to ws. Shared by bn_stats_nhwc and the fused forward.
template <typename T, int V, bool Vec, bool kScratch = false, bool kRounds = false>
__device__ __forceinline__ void nhwc_block_stats(const T* __restrict__ x, float* __restrict__ ws, int rows, int C,
                                                 int tx_threads, XCache* cache = nullptr, int cached = 0,
                                                 float* scratch = nullptr) {
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
    auto add = [&](const float (&f)[V]) {
#pragma unroll
        for (int k = 0; k < V; ++k) {
            const float d = f[k] - shift[k];
            s1[k] += d;
            s2[k] = fmaf(d, d, s2[k]);
        }
    };
    if (active) {
        constexpr int U = kStatsLoads;
        const int step = S * ty_threads;
        int r = s * ty_threads + ty;
        for (; r + (U - 1) * step < rows; r += U * step, count += U) {  // U loads in flight before any is used
            float f[U][V];
#pragma unroll
            for (int u = 0; u < U; ++u)
                load_floats_keep<T, V, Vec>(x, (r + u * step) * C + c0, f[u], cache, count + u, cached);
#pragma unroll
            for (int u = 0; u < U; ++u) add(f[u]);
        }
        for (; r < rows; r += step, ++count) {
            float f0[V];
            load_floats_keep<T, V, Vec>(x, r * C + c0, f0, cache, count, cached);
            add(f0);
        }
    }
    Stat st[V];
#pragma unroll
    for (int k = 0; k < V; ++k) st[k] = from_sums(static_cast<float>(count), s1[k], s2[k]);
    Stat t;
    if constexpr (kScratch) {
        t = block_merge_packs_in<V, (kRounds && kMergeRound < V ? kMergeRound : V)>(st, tx_threads, scratch);
    } else {
        t = block_merge_packs<V>(st, tx_threads);
    }
    const int c = pack_channel<V>(tx_threads);
    if (static_cast<int>(threadIdx.x) < V * tx_threads && c < C) store_partial(ws, s, S, C, c, t);
}

template <typename T, int V, bool Vec>
__global__ void bn_stats_nhwc(const T* __restrict__ x, float* __restrict__ ws, int rows, int C, int tx_threads) {
    nhwc_block_stats<T, V, Vec>(x, ws, rows, C, tx_threads);
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

// Partial sums of g and g * (x - mean) for the backward; same walks as the statistics. Thread 0
// gets the block's (sum g, sum g * (x - mean)) of channel c.
template <typename T, int V, bool Vec>
__device__ __forceinline__ float2 nchw_block_grad(const T* __restrict__ dy, const unsigned char* __restrict__ mask,
                                                  int mask_bytes, const T* __restrict__ x, float mu, int c, int s,
                                                  int S, int C, int HW, int per_channel) {
    float sg = 0.0f, sgx = 0.0f;
    auto add = [&](const float (&g)[V], const float (&f)[V]) {
#pragma unroll
        for (int k = 0; k < V; ++k) {
            sg += g[k];
            sgx = fmaf(g[k], f[k] - mu, sgx);
        }
    };
    const int step = S * kBlock * V;
    int j = (s * kBlock + threadIdx.x) * V;
    for (; j + step < per_channel; j += 2 * step) {
        float g0[V], f0[V], g1[V], f1[V];
        load_masked_grad<T, V, Vec>(dy, mask, mask_bytes, x, nchw_offset(j, c, C, HW), g0, f0);
        load_masked_grad<T, V, Vec>(dy, mask, mask_bytes, x, nchw_offset(j + step, c, C, HW), g1, f1);
        add(g0, f0);
        add(g1, f1);
    }
    if (j < per_channel) {
        float g0[V], f0[V];
        load_masked_grad<T, V, Vec>(dy, mask, mask_bytes, x, nchw_offset(j, c, C, HW), g0, f0);
        add(g0, f0);
    }
    sg = block_sum(sg, 1);
    sgx = block_sum(sgx, 1);
    return make_float2(sg, sgx);
}

template <typename T, int V, bool Vec>
__global__ void bn_grad_nchw(const T* __restrict__ dy, const unsigned char* __restrict__ mask, int mask_bytes, const T* __restrict__ x,
                             const float* __restrict__ mean, float* __restrict__ ws, int C, int HW, int per_channel) {
    const int c = blockIdx.x, s = blockIdx.y, S = gridDim.y;
    const float2 t = nchw_block_grad<T, V, Vec>(dy, mask, mask_bytes, x, mean[c], c, s, S, C, HW, per_channel);
    if (threadIdx.x == 0) {
        ws[s * C + c] = t.x;
        ws[s * C + c + S * C] = t.y;
    }
}

template <typename T, int V, bool Vec>
__device__ __forceinline__ void nhwc_block_grad(const T* __restrict__ dy, const unsigned char* __restrict__ mask,
                                                int mask_bytes, const T* __restrict__ x, const float* __restrict__ mean,
                                                float* __restrict__ ws, int rows, int C, int tx_threads) {
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
    auto add = [&](const float (&g)[V], const float (&f)[V]) {
#pragma unroll
        for (int k = 0; k < V; ++k) {
            sg[k] += g[k];
            sgx[k] = fmaf(g[k], f[k] - mu[k], sgx[k]);
        }
    };
    if (active) {
        const int step = S * ty_threads;
        int r = s * ty_threads + ty;
        for (; r + step < rows; r += 2 * step) {
            float g0[V], f0[V], g1[V], f1[V];
            load_masked_grad<T, V, Vec>(dy, mask, mask_bytes, x, r * C + c0, g0, f0);
            load_masked_grad<T, V, Vec>(dy, mask, mask_bytes, x, (r + step) * C + c0, g1, f1);
            add(g0, f0);
            add(g1, f1);
        }
        if (r < rows) {
            float g0[V], f0[V];
            load_masked_grad<T, V, Vec>(dy, mask, mask_bytes, x, r * C + c0, g0, f0);
            add(g0, f0);
        }
    }
    float a, b;
    block_sum_packs<V>(sg, sgx, tx_threads, a, b);
    const int c = pack_channel<V>(tx_threads);
    if (static_cast<int>(threadIdx.x) < V * tx_threads && c < C) {
        ws[s * C + c] = a;
        ws[s * C + c + S * C] = b;
    }
}

template <typename T, int V, bool Vec>
__global__ void bn_grad_nhwc(const T* __restrict__ dy, const unsigned char* __restrict__ mask, int mask_bytes, const T* __restrict__ x,
                             const float* __restrict__ mean, float* __restrict__ ws, int rows, int C, int tx_threads) {
    nhwc_block_grad<T, V, Vec>(dy, mask, mask_bytes, x, mean, ws, rows, C, tx_threads);
}

// ---------------------------------------------------------------------------------------------
// Finalize: a block per channel merges its S partials (threads stride over them, then the block's
// tree), so the loads of a thousand partials are in flight together. (A warp per channel walked
// 33 partials a lane one after another: 12 us for the NHWC grid's S = 1056 on an H100.) Where S is
// small (NCHW with C near a wave of blocks: S = 1 at 2048 channels) a warp per channel is used
// instead. The fused NHWC kernels merge groups of channels in their phase B (merge_group_partials).
// blockDim.x is kBlock.
// ---------------------------------------------------------------------------------------------

// Both rounds of loads in flight before either is merged (S is up to 2 * kBlock in practice), the
// merge order unchanged.
__device__ __forceinline__ Stat merge_channel_partials(const float* __restrict__ ws, int S, int C, int c) {
    Stat t = {0.0f, 0.0f, 0.0f};
    int p = threadIdx.x;
    for (; p + kBlock < S; p += 2 * kBlock) {
        const Stat u = load_partial(ws, p, S, C, c), v = load_partial(ws, p + kBlock, S, C, c);
        t = chan_merge(t, u);
        t = chan_merge(t, v);
    }
    if (p < S) t = chan_merge(t, load_partial(ws, p, S, C, c));
    return block_merge(t, 1);
}

__device__ __forceinline__ float2 sum_channel_partials(const float* __restrict__ ws, int S, int C, int c) {
    float sg = 0.0f, sgx = 0.0f;
    int p = threadIdx.x;
    for (; p + kBlock < S; p += 2 * kBlock) {
        const float g0 = __ldcg(ws + p * C + c), gx0 = __ldcg(ws + p * C + c + S * C);
        const float g1 = __ldcg(ws + (p + kBlock) * C + c), gx1 = __ldcg(ws + (p + kBlock) * C + c + S * C);
        sg += g0;
        sgx += gx0;
        sg += g1;
        sgx += gx1;
    }
    if (p < S) {
        sg += __ldcg(ws + p * C + c);
        sgx += __ldcg(ws + p * C + c + S * C);
    }
    return make_float2(block_sum(sg, 1), block_sum(sgx, 1));
}

// The fused NHWC forward's phase B: the block merges the S partials of kMergeGroup consecutive
// channels at once, thread t taking channel c = first + t % kMergeGroup (c < C or not: every thread
// calls it) and partials t / kMergeGroup, + kBlock / kMergeGroup, ...; thread t < kMergeGroup gets
// channel c's total. Each 32-byte sector read then holds a partial of all 8 channels, where a
// merge of one channel read a sector per partial (S ~ 400 partials of 64 channels: 3-5 us a merge
// on an H100).
constexpr int kMergeGroup = 8;
__device__ __forceinline__ Stat merge_group_partials(const float* __restrict__ ws, int S, int C, int c) {
    constexpr int kStep = kBlock / kMergeGroup, kLoads = 4;
    Stat t = {0.0f, 0.0f, 0.0f};
    if (c < C) {
        int p = static_cast<int>(threadIdx.x) / kMergeGroup;
        for (; p + (kLoads - 1) * kStep < S; p += kLoads * kStep) {
            Stat u[kLoads];
#pragma unroll
            for (int k = 0; k < kLoads; ++k) u[k] = load_partial(ws, p + k * kStep, S, C, c);
#pragma unroll
            for (int k = 0; k < kLoads; ++k) t = chan_merge(t, u[k]);
        }
        for (; p < S; p += kStep) t = chan_merge(t, load_partial(ws, p, S, C, c));
    }
    return block_merge(t, kMergeGroup);
}

// merge_group_partials for the backward's two sums (the fused NHWC backward's phase B).
__device__ __forceinline__ float2 sum_group_partials(const float* __restrict__ ws, int S, int C, int c) {
    constexpr int kStep = kBlock / kMergeGroup, kLoads = 4;
    float sg = 0.0f, sgx = 0.0f;
    if (c < C) {
        int p = static_cast<int>(threadIdx.x) / kMergeGroup;
        for (; p + (kLoads - 1) * kStep < S; p += kLoads * kStep) {
            float g[kLoads], gx[kLoads];
#pragma unroll
            for (int k = 0; k < kLoads; ++k) {
                g[k] = __ldcg(ws + (p + k * kStep) * C + c);
                gx[k] = __ldcg(ws + (p + k * kStep) * C + c + S * C);
            }
#pragma unroll
            for (int k = 0; k < kLoads; ++k) {
                sg += g[k];
                sgx += gx[k];
            }
        }
        for (; p < S; p += kStep) {
            sg += __ldcg(ws + p * C + c);
            sgx += __ldcg(ws + p * C + c + S * C);
        }
    }
    const float a = block_sum(sg, kMergeGroup);
    return make_float2(a, block_sum(sgx, kMergeGroup));
}

// The same merges by one warp (lane 0 gets the result), for few partials.
__device__ __forceinline__ Stat warp_merge_channel_partials(const float* __restrict__ ws, int S, int C, int c) {
    Stat t = {0.0f, 0.0f, 0.0f};
    for (int p = threadIdx.x & 31; p < S; p += 32) t = chan_merge(t, load_partial(ws, p, S, C, c));
    return warp_merge_strided(t, 1);
}

__device__ __forceinline__ float2 warp_sum_channel_partials(const float* __restrict__ ws, int S, int C, int c) {
    float sg = 0.0f, sgx = 0.0f;
    for (int p = threadIdx.x & 31; p < S; p += 32) {
        sg += __ldcg(ws + p * C + c);
        sgx += __ldcg(ws + p * C + c + S * C);
    }
    return make_float2(warp_sum_strided(sg, 1), warp_sum_strided(sgx, 1));
}

// With few partials (S of one to a few per lane) a block-wide tree per channel costs more than
// the loads: WARPS = true gives each warp a channel (kBlock / 32 channels per block).
constexpr int kChannelsPerWarpBlock = kBlock / 32;

// The channel a finalize thread works on (WARPS: its warp's), and whether it writes the result.
template <bool WARPS>
__device__ __forceinline__ int finalize_channel() {
    return WARPS ? static_cast<int>(blockIdx.x) * kChannelsPerWarpBlock + static_cast<int>(threadIdx.x >> 5)
                 : static_cast<int>(blockIdx.x);
}

template <bool WARPS>
__device__ __forceinline__ bool finalize_writer() {
    return (threadIdx.x & (WARPS ? 31u : static_cast<unsigned>(kBlock - 1))) == 0;
}

template <typename T, bool WARPS>
__global__ void bn_stats_finalize(const float* __restrict__ ws, int S, const T* __restrict__ x, int shift_stride,
                                  float eps, float* __restrict__ mean, float* __restrict__ invstd, int C) {
    const int c = finalize_channel<WARPS>();
    if (WARPS && c >= C) return;  // the whole warp leaves; the warp path has no block barrier
    const Stat t = WARPS ? warp_merge_channel_partials(ws, S, C, c) : merge_channel_partials(ws, S, C, c);
    if (finalize_writer<WARPS>()) {
        mean[c] = bw::to_float(x[static_cast<i64>(c) * shift_stride]) + t.mean;
        invstd[c] = invstd_of(t, eps);
    }
}

template <bool WARPS>
__global__ void bn_grad_finalize(const float* __restrict__ ws, int S, const float* __restrict__ invstd,
                                 float* __restrict__ dgamma, float* __restrict__ dbeta, int C) {
    const int c = finalize_channel<WARPS>();
    if (WARPS && c >= C) return;
    const float2 t = WARPS ? warp_sum_channel_partials(ws, S, C, c) : sum_channel_partials(ws, S, C, c);
    if (finalize_writer<WARPS>()) {
        dbeta[c] = t.x;
        dgamma[c] = t.y * invstd[c];
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
// -DBW_BNR_APPLY_NO_HINTS builds plain accesses, for A/B runs.
#ifdef BW_BNR_APPLY_NO_HINTS
constexpr bool kApplyEvictFirst = false;
#else
constexpr bool kApplyEvictFirst = true;
#endif

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
        store_pack_once<T, V, Vec>(dx, first, n, dxv);
        if constexpr (kResidual) store_pack_once<T, V, Vec>(dz, first, n, dzv);
    }
}

// ---------------------------------------------------------------------------------------------
// Fused (persistent) forward and backward: one launch instead of three. The grid is the
// reduction's grid, no larger than the blocks the GPU holds at once, launched cooperatively (the
// driver refuses a grid that could not all be resident), so blocks can wait for each other:
//   phase A  the block's partial reduction, as the separate kernels do it, to ws;
//   barrier;
//   phase B  NCHW: each block merges its own channel's S partials (S is small); NHWC: blocks share
//            out the channels, merge their S partials and write them; barrier;
//   phase C  the elementwise pass over the same elements the block reduced in phase A, walked in
//            reverse so that what phase A read last, still in L2, is read first.
// No launch gaps, no finalize launch, and the second read of x (dy, mask, x) partly hits L2 (phase
// C's last reads and its writes are marked evict-first, as in the separate passes); the byte model
// still counts both reads. Needs 16-byte packs that never straddle a mask word's
// owner: NCHW with HW % 32 == 0 (a channel's plane is whole words), NHWC with C % 32 == 0 (a row
// is whole words). Other shapes take the three-kernel path.
// ---------------------------------------------------------------------------------------------

// Grid-wide barrier. bar[3 * kBarrierGap] is the generation, the number of barriers passed on this
// buffer; barrier g counts its arrivals in bar[(g % 3) * kBarrierGap]. Each word has its own 128-byte
// line, so that blocks polling the generation do not queue behind the arrivals' atomics at the same
// L2 slice (on one line, an H100 released blocks of the NHWC grid up to 17 us apart). The last block
// to arrive releases the others at once, then zeroes the counter of barrier g + 2 (last used by
// barrier g - 1, whose arrivals are all in; no block can reach g + 2 before this block reaches g + 1),
// so no reset sits between the last arrival and the release. Pollers back off up to 256 ns.
// Self-resetting: one zeroed buffer serves every launch on a stream. Only valid when every block
// of the grid is resident (a cooperative launch).
constexpr int kBarrierGap = 32;  // unsigned words: 128 bytes

// -DBW_BNR_TRACE: each block of a fused kernel stamps %globaltimer at its phase boundaries into
// bnr_trace[block][0..5] (start, phase A done, barrier 1 left, phase B done (NHWC forward: its
// tile's channels ready), end; 5: NHWC forward phase B's merge written, in the blocks that merge;
// 6: the block's SM), for
// timelines (scripts/bn_relu_trace.py). Off by default: no cost.
#ifdef BW_BNR_TRACE
extern "C" {
__device__ unsigned long long bnr_trace[4096][7];  // C linkage: the module's get_global("bnr_trace") finds it
}
__device__ __forceinline__ void trace_stamp(int point) {
    if (threadIdx.x == 0) {
        unsigned long long t;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
        unsigned sm;
        asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
        const int b = blockIdx.y * gridDim.x + blockIdx.x;
        if (b < 4096) {
            bnr_trace[b][point] = t;
            bnr_trace[b][6] = sm;
        }
    }
}
#else
__device__ __forceinline__ void trace_stamp(int) {}
#endif

// Loads in flight per step of the fused forward's phase C (H100, float16): bn_relu NHWC 4 packs of
// x (32x64x112x112 52.9 -> 51.7 us against 2; 6: 0.5-0.8 us slower at C = 64, as much faster at
// C = 256), bn_relu NCHW 6 (against 4: 46.9 -> 46.4 us, 32x256x56x56 48.7 -> 47.3; 4 against 2:
// 47.5 -> 47.2; 8 was 9 us slower), bn_add_relu 2 of x and 2 of z (4 + 4 was 1-1.5 us slower on
// NHWC; 3 + 3 even).
// -DBW_BNR_WALK_LOADS=n (NHWC) / _NCHW / _RESIDUAL for A/B runs.
#ifndef BW_BNR_WALK_LOADS
#define BW_BNR_WALK_LOADS 4
#endif
#ifndef BW_BNR_WALK_LOADS_NCHW
#define BW_BNR_WALK_LOADS_NCHW 6
#endif
#ifndef BW_BNR_WALK_LOADS_RESIDUAL
#define BW_BNR_WALK_LOADS_RESIDUAL 2
#endif
template <bool kResidual, bool kNchw>
constexpr int kWalkLoads = kResidual ? BW_BNR_WALK_LOADS_RESIDUAL : kNchw ? BW_BNR_WALK_LOADS_NCHW : BW_BNR_WALK_LOADS;

constexpr unsigned kGenerations = 3u << 30;  // the generation wraps here, a multiple of 3

// Returns (to every thread) this barrier's number + 1, in [1, kGenerations]: never 0, and different
// for each of the last kGenerations barriers on the buffer (a token for the ready flags below).
__device__ __forceinline__ unsigned grid_sync(unsigned* bar, unsigned blocks) {
    __shared__ unsigned token;
    volatile unsigned* generation = bar + 3 * kBarrierGap;
    unsigned seen = 0;
    if (threadIdx.x == 0) seen = *generation;  // this barrier's number: it cannot change before this block arrives
    __threadfence();  // the block's writes, and that read, before its arrival
    __syncthreads();
    if (threadIdx.x == 0) {
        if (atomicAdd(bar + (seen % 3) * kBarrierGap, 1u) == blocks - 1) {
            const unsigned next = seen + 1 == kGenerations ? 0u : seen + 1;
            atomicExch(bar + 3 * kBarrierGap, next);  // release (the only writer of this generation)
            atomicExch(bar + ((seen + 2) % 3) * kBarrierGap, 0u);
        } else {
            unsigned pause = 32;
            while (*generation == seen) {
                __nanosleep(pause);
                pause = pause < 256 ? 2 * pause : pause;
            }
        }
        __threadfence();
        token = seen + 1;
    }
    __syncthreads();
    return token;
}

// Ready flags after the barrier's words (from word kReadyFlags): flag g = the token of the launch
// whose phase B has written channel group g's statistics. A block waits only for its tile's groups,
// and only for the blocks that merge them, where a second grid barrier waited for every block and
// cost an atomic round trip more (H100, NHWC forward: about 2 us from the last merge to the release).
constexpr int kReadyFlags = 4 * kBarrierGap;

__device__ __forceinline__ void set_ready(unsigned* flag, unsigned token) {
    // the group's statistics first (their writers fenced, then a __syncthreads)
    asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(flag), "r"(token) : "memory");
}

__device__ __forceinline__ void wait_ready(const unsigned* flag, unsigned token) {
    unsigned v, pause = 32;
    while (true) {
        asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(flag) : "memory");
        if (v == token) break;
        __nanosleep(pause);
        pause = pause < 256 ? 2 * pause : pause;
    }
}

// Phase C of the fused forward: packs k = last, last - 1, ..., 0 of this thread's walk (where(k, off,
// active) gives pack k's memory offset and whether it exists; last < 0: none), kWalkLoads loads in
// flight per step. Every lane of the warp runs the same k (group_or); inactive lanes contribute no
// bits and store nothing. ready() fills coef: every thread of the block calls it once, between the
// first step's loads and their use, so those loads' latency overlaps phase B's last part.
template <typename T, bool kResidual, int NC, typename Where, typename Ready>
__device__ __forceinline__ void forward_walk(int last, Where where, const T* __restrict__ x, const T* __restrict__ z,
                                             const FwdCoef (&coef)[NC], Ready ready, T* __restrict__ y,
                                             unsigned* __restrict__ words, const XCache* cache, int cached) {
    constexpr int V = bw::Pack16<T>::size;
    constexpr int G = 32 / V;
    constexpr int U = kWalkLoads<kResidual, NC == 1>;  // NC == 1: the NCHW walk (one channel a block)
    const int lane = threadIdx.x & 31;
    auto load = [&](int k, int off, bool active, T (&xv)[V], T (&zv)[V]) {
        if (!active) return;
        if (k < cached) {  // phase A kept it
            const XCache raw = cache[k * kBlock + threadIdx.x];
            const bw::Pack<T, V> pk = *reinterpret_cast<const bw::Pack<T, V>*>(&raw);
#pragma unroll
            for (int e = 0; e < V; ++e) xv[e] = pk.v[e];
        } else {
            load_pack_once<T, V, true>(x, off, off + V, xv);
        }
        if constexpr (kResidual) load_pack_once<T, V, true>(z, off, off + V, zv);
    };
    auto finish = [&](const T (&xv)[V], const T (&zv)[V], int off, bool active) {
        unsigned b = 0;
        if (active) {
            T yv[V];
#pragma unroll
            for (int e = 0; e < V; ++e) {
                const FwdCoef& q = coef[NC == 1 ? 0 : e];
                float p = fmaf(bw::to_float(xv[e]) - q.m, q.a, q.b);
                if constexpr (kResidual) p += bw::to_float(zv[e]);
                b |= (p > 0.0f ? 1u : 0u) << e;
                yv[e] = p > 0.0f ? bw::from_float<T>(p) : bw::from_float<T>(0.0f);
            }
            store_pack_once<T, V, true>(y, off, off + V, yv);
        }
        const unsigned word = bw::group_or<G>(b << ((lane * V) & 31));
        if (active && (lane & (G - 1)) == 0) words[off >> 5] = word;
    };
    int k = last;
    // The first step, packs last .. last - U + 1 where they exist, around ready(). Written out apart
    // from the loop's step on purpose: one lambda for both made the bn_add_relu forward 2-4 points
    // of copy slower on an H100 (same registers, different schedule).
    {
        int off[U];
        bool on[U];
        T xv[U][V], zv[U][V];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            where(k - u, off[u], on[u]);
            on[u] = on[u] && k - u >= 0;
            load(k - u, off[u], on[u], xv[u], zv[u]);
        }
        ready();
#pragma unroll
        for (int u = 0; u < U; ++u) finish(xv[u], zv[u], off[u], on[u]);
        k -= U;
    }
    for (; k >= U - 1; k -= U) {
        int off[U];
        bool on[U];
        T xv[U][V], zv[U][V];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            where(k - u, off[u], on[u]);
            load(k - u, off[u], on[u], xv[u], zv[u]);
        }
#pragma unroll
        for (int u = 0; u < U; ++u) finish(xv[u], zv[u], off[u], on[u]);
    }
    for (; k >= 0; --k) {
        int off0;
        bool on0;
        where(k, off0, on0);
        T x0[V], z0[V];
        load(k, off0, on0, x0, z0);
        finish(x0, z0, off0, on0);
    }
}

template <typename T, bool kResidual>
__global__ void __launch_bounds__(kBlock, 4) bn_relu_fused_nchw(
        const T* __restrict__ x, const T* __restrict__ z, const float* __restrict__ gamma,
        const float* __restrict__ beta, float eps, float* __restrict__ mean, float* __restrict__ invstd,
        T* __restrict__ y, unsigned* __restrict__ words, float* __restrict__ ws, unsigned* bar, int C, int HW,
        int per_channel, int cached) {
    constexpr int V = bw::Pack16<T>::size;
    extern __shared__ XCache bnr_x_cache[];  // cached * kBlock packs
    const int c = blockIdx.x, s = blockIdx.y, S = gridDim.y;
    // Phase B's per-channel inputs, loaded now: after the barrier they would be a DRAM round trip
    const float shift = bw::to_float(x[static_cast<i64>(c) * HW]), g = gamma[c], bt = beta[c];
    trace_stamp(0);
    const Stat t = nchw_block_stats<T, V, true>(x, c, s, S, C, HW, per_channel, bnr_x_cache, cached);
    if (threadIdx.x == 0) store_partial(ws, s, S, C, c, t);
    trace_stamp(1);
    grid_sync(bar, static_cast<unsigned>(C * S));
    trace_stamp(2);

    __shared__ FwdCoef shared_coef;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    FwdCoef coef[1];
    auto ready = [&]() {
        if (warp == 0) {  // the channel's S partials (S is at most a few dozen here)
            const Stat u = warp_merge_channel_partials(ws, S, C, c);
            if (lane == 0) {
                const float m = shift + u.mean, is = invstd_of(u, eps);
                shared_coef = FwdCoef{m, is * g, bt};
                if (s == 0) {
                    mean[c] = m;
                    invstd[c] = is;
                }
            }
        }
        __syncthreads();
        trace_stamp(3);
        coef[0] = shared_coef;
    };
    const int step = S * kBlock * V;
    const int warp_first = (s * kBlock + warp * 32) * V;
    auto where = [&](int k, int& off, bool& active) {
        const int j = warp_first + lane * V + k * step;
        active = j < per_channel;  // whole 32-element words: HW % 32 == 0
        off = nchw_offset(j, c, C, HW);
    };
    // every warp walks (and calls ready()); one past the channel's end has last < 0 or no active pack
    forward_walk<T, kResidual, 1>(warp_first < per_channel ? (per_channel - 1 - warp_first) / step : -1, where, x,
                                  z, coef, ready, y, words, bnr_x_cache, cached);
#ifdef BW_BNR_TRACE
    __syncthreads();
    trace_stamp(4);
#endif
}

// 3 blocks an SM (85 registers): V channels' statistics and coefficients; at 4 (64 registers) the
// residual float16 instance spills. kRounds: phase A's block merge in rounds (kMergeRound), for a
// smaller scratch and more x-cache slots; its own instance, so the other keeps its schedule (with a
// runtime switch instead, the 32x64x112x112 forwards were 0.3-0.6 us slower on an H100).
template <typename T, bool kResidual, bool kRounds = false>
__global__ void __launch_bounds__(kBlock, 3) bn_relu_fused_nhwc(
        const T* __restrict__ x, const T* __restrict__ z, const float* __restrict__ gamma,
        const float* __restrict__ beta, float eps, float* __restrict__ mean, float* __restrict__ invstd,
        T* __restrict__ y, unsigned* __restrict__ words, float* __restrict__ ws, unsigned* bar, int rows, int C,
        int tx_threads, int cached) {
    constexpr int V = bw::Pack16<T>::size;
    // Dynamic shared memory: cached * kBlock packs of x, then a scratch area (fused_nhwc_scratch_bytes)
    // for phase A's block merge (kMergeRound channels a round with kRounds) and, later, phase C's
    // coefficients.
    extern __shared__ XCache bnr_x_cache[];
    float* scratch = reinterpret_cast<float*>(bnr_x_cache + cached * kBlock);
    const int S = gridDim.y;
    const unsigned blocks = gridDim.x * gridDim.y;
    const int b = blockIdx.y * gridDim.x + blockIdx.x;
    // Phase B's shift for this thread's channel of the block's first group, loaded now, not after the barrier
    const int first_c = b * kMergeGroup + static_cast<int>(threadIdx.x) % kMergeGroup;
    const float first_x = first_c < C ? bw::to_float(x[first_c]) : 0.0f;
    trace_stamp(0);
    nhwc_block_stats<T, V, true, true, kRounds>(x, ws, rows, C, tx_threads, bnr_x_cache, cached, scratch);
    trace_stamp(1);
    const unsigned token = grid_sync(bar, blocks);
    trace_stamp(2);

    // Phase B: block b finalizes channel groups b, b + blocks, ... (kMergeGroup channels each).
    for (int g = b; g * kMergeGroup < C; g += blocks) {
        const int c = g * kMergeGroup + static_cast<int>(threadIdx.x) % kMergeGroup;
        const Stat u = merge_group_partials(ws, S, C, c);
        if (static_cast<int>(threadIdx.x) < kMergeGroup && c < C) {
            mean[c] = (g == b ? first_x : bw::to_float(x[c])) + u.mean;
            invstd[c] = invstd_of(u, eps);
            __threadfence();  // each writer's own, as grid_sync does, before the flag
        }
        __syncthreads();
        if (threadIdx.x == 0) set_ready(bar + kReadyFlags + g, token);
        trace_stamp(5);
    }
    const int tx = threadIdx.x % tx_threads, ty = threadIdx.x / tx_threads, ty_threads = kBlock / tx_threads;
    const int c0 = (blockIdx.x * tx_threads + tx) * V;
    const bool in_channels = c0 < C;  // whole groups of G lanes: C % 32 == 0
    FwdCoef coef[V];
    auto ready = [&]() {
        {  // this tile's groups merged (C % 32 == 0: whole groups)
            const int first = blockIdx.x * tx_threads * V, groups = (min(C - first, tx_threads * V)) / kMergeGroup;
            if (static_cast<int>(threadIdx.x) < groups)
                wait_ready(bar + kReadyFlags + first / kMergeGroup + threadIdx.x, token);
            __syncthreads();
        }
        trace_stamp(3);
        // The tile's coefficients, one channel a thread, through shared memory: mean and invstd
        // come from L2 (other blocks wrote them), and every thread of the grid loading its V
        // channels' itself queued V * 2 L2 requests a warp on the same few lines (H100,
        // 32x64x112x112: phase C 33 -> 20 us).
        FwdCoef* tile_coef = reinterpret_cast<FwdCoef*>(scratch);  // tx_threads * V <= kBlock channels
        const int c = blockIdx.x * tx_threads * V + threadIdx.x;
        if (static_cast<int>(threadIdx.x) < tx_threads * V && c < C) {
            const float is = __ldcg(invstd + c);
            tile_coef[threadIdx.x] = FwdCoef{__ldcg(mean + c), is * gamma[c], beta[c]};
        }
        __syncthreads();
#pragma unroll
        for (int e = 0; e < V; ++e) coef[e] = tile_coef[in_channels ? tx * V + e : 0];
    };
    const int row_step = S * ty_threads;
    const int warp_row = blockIdx.y * ty_threads + (threadIdx.x & ~31) / tx_threads;  // the warp's first row
    const int first_row = blockIdx.y * ty_threads + ty;
    auto where = [&](int k, int& off, bool& active) {
        const int r = first_row + k * row_step;
        active = in_channels && r < rows;
        off = r * C + c0;
    };
    // every warp walks (and calls ready()); one past the last row has last < 0
    forward_walk<T, kResidual, V>(warp_row < rows ? (rows - 1 - warp_row) / row_step : -1, where, x, z, coef, ready,
                                  y, words, bnr_x_cache, cached);
#ifdef BW_BNR_TRACE
    __syncthreads();
    trace_stamp(4);
#endif
}

// Phase C of the fused backward: dx = k * (g - mg - (x - m) * kx) [and dz = g] over packs k = last,
// ..., 0 of this thread's walk (offset_of(k)), two packs' loads in flight per step.
template <typename T, bool kResidual, int NC, typename OffsetOf>
__device__ __forceinline__ void backward_walk(int last, OffsetOf offset_of, const T* __restrict__ dy,
                                              const unsigned char* __restrict__ mask, int mask_bytes,
                                              const T* __restrict__ x, const BwdCoef (&coef)[NC],
                                              T* __restrict__ dx, T* __restrict__ dz) {
    constexpr int V = bw::Pack16<T>::size;
    auto load = [&](int off, T (&gv)[V], T (&xv)[V], unsigned& bits) {
        load_pack_once<T, V, true>(dy, off, off + V, gv);
        load_pack_once<T, V, true>(x, off, off + V, xv);
        bits = bw::read_bits<V>(mask, mask_bytes, off);
    };
    auto finish = [&](const T (&gv)[V], const T (&xv)[V], unsigned bits, int off) {
        T dxv[V], dzv[V];
#pragma unroll
        for (int e = 0; e < V; ++e) {
            const BwdCoef& q = coef[NC == 1 ? 0 : e];
            const bool kept = (bits >> e) & 1u;
            const float g = kept ? bw::to_float(gv[e]) : 0.0f;
            dxv[e] = bw::from_float<T>(q.k * fmaf(-(bw::to_float(xv[e]) - q.m), q.kx, g - q.mg));
            dzv[e] = kept ? gv[e] : bw::from_float<T>(0.0f);
        }
        store_pack_once<T, V, true>(dx, off, off + V, dxv);
        if constexpr (kResidual) store_pack_once<T, V, true>(dz, off, off + V, dzv);
    };
    int k = last;
    for (; k >= 1; k -= 2) {
        const int off0 = offset_of(k), off1 = offset_of(k - 1);
        T g0[V], x0[V], g1[V], x1[V];
        unsigned b0, b1;
        load(off0, g0, x0, b0);
        load(off1, g1, x1, b1);
        finish(g0, x0, b0, off0);
        finish(g1, x1, b1, off1);
    }
    if (k == 0) {
        const int off0 = offset_of(0);
        T g0[V], x0[V];
        unsigned b0;
        load(off0, g0, x0, b0);
        finish(g0, x0, b0, off0);
    }
}

template <typename T, bool kResidual>
__global__ void __launch_bounds__(kBlock, 4) bn_relu_backward_fused_nchw(
        const T* __restrict__ dy, const unsigned char* __restrict__ mask, int mask_bytes, const T* __restrict__ x,
        const float* __restrict__ mean, const float* __restrict__ invstd, const float* __restrict__ gamma,
        float* __restrict__ dgamma, float* __restrict__ dbeta, T* __restrict__ dx, T* __restrict__ dz,
        float* __restrict__ ws, unsigned* bar, int C, int HW, int per_channel, float inv_m) {
    constexpr int V = bw::Pack16<T>::size;
    const int c = blockIdx.x, s = blockIdx.y, S = gridDim.y;
    const float mu = mean[c], is = invstd[c], gm = gamma[c];  // used after the barrier too
    const float2 t = nchw_block_grad<T, V, true>(dy, mask, mask_bytes, x, mu, c, s, S, C, HW, per_channel);
    if (threadIdx.x == 0) {
        ws[s * C + c] = t.x;
        ws[s * C + c + S * C] = t.y;
    }
    grid_sync(bar, static_cast<unsigned>(C * S));

    __shared__ BwdCoef shared_coef;
    if (threadIdx.x < 32) {  // the channel's S partials (S is at most a few dozen here)
        const int lane = threadIdx.x;
        const float2 sums = warp_sum_channel_partials(ws, S, C, c);
        const float sg = sums.x, sgx = sums.y;
        if (lane == 0) {
            const float dg = sgx * is;
            shared_coef = BwdCoef{mu, gm * is, sg * inv_m, dg * is * inv_m};
            if (s == 0) {
                dbeta[c] = sg;
                dgamma[c] = dg;
            }
        }
    }
    __syncthreads();
    const BwdCoef coef[1] = {shared_coef};
    const int step = S * kBlock * V;
    const int first = (s * kBlock + threadIdx.x) * V;
    if (first >= per_channel) return;
    auto offset_of = [&](int k) { return nchw_offset(first + k * step, c, C, HW); };
    backward_walk<T, kResidual, 1>((per_channel - 1 - first) / step, offset_of, dy, mask, mask_bytes, x, coef, dx, dz);
}

template <typename T, bool kResidual>
__global__ void __launch_bounds__(kBlock, 3) bn_relu_backward_fused_nhwc(
        const T* __restrict__ dy, const unsigned char* __restrict__ mask, int mask_bytes, const T* __restrict__ x,
        const float* __restrict__ mean, const float* __restrict__ invstd, const float* __restrict__ gamma,
        float* __restrict__ dgamma, float* __restrict__ dbeta, T* __restrict__ dx, T* __restrict__ dz,
        float* __restrict__ ws, unsigned* bar, int rows, int C, int tx_threads, float inv_m) {
    constexpr int V = bw::Pack16<T>::size;
    const int S = gridDim.y;
    const unsigned blocks = gridDim.x * gridDim.y;
    nhwc_block_grad<T, V, true>(dy, mask, mask_bytes, x, mean, ws, rows, C, tx_threads);
    grid_sync(bar, blocks);

    for (int g = blockIdx.y * gridDim.x + blockIdx.x; g * kMergeGroup < C; g += blocks) {
        const int c = g * kMergeGroup + static_cast<int>(threadIdx.x) % kMergeGroup;
        const float2 t = sum_group_partials(ws, S, C, c);
        if (static_cast<int>(threadIdx.x) < kMergeGroup && c < C) {
            dbeta[c] = t.x;
            dgamma[c] = t.y * invstd[c];
        }
    }
    grid_sync(bar, blocks);

    const int tx = threadIdx.x % tx_threads, ty = threadIdx.x / tx_threads, ty_threads = kBlock / tx_threads;
    const int c0 = (blockIdx.x * tx_threads + tx) * V;
    __shared__ BwdCoef tile_coef[kBlock];  // as in the fused forward: one channel a thread, then shared
    {
        const int c = blockIdx.x * tx_threads * V + threadIdx.x;
        if (static_cast<int>(threadIdx.x) < tx_threads * V && c < C) {
            const float is = invstd[c];
            tile_coef[threadIdx.x] = BwdCoef{mean[c], gamma[c] * is, __ldcg(dbeta + c) * inv_m,
                                             __ldcg(dgamma + c) * is * inv_m};
        }
    }
    __syncthreads();
    if (c0 >= C) return;
    BwdCoef coef[V];
#pragma unroll
    for (int e = 0; e < V; ++e) coef[e] = tile_coef[tx * V + e];
    const int row_step = S * ty_threads;
    const int first_row = blockIdx.y * ty_threads + ty;
    if (first_row >= rows) return;
    auto offset_of = [&](int k) { return (first_row + k * row_step) * C + c0; };
    backward_walk<T, kResidual, V>((rows - 1 - first_row) / row_step, offset_of, dy, mask, mask_bytes, x, coef, dx, dz);
}

}  // namespace bnr

// The statistics half of kernels/bn_relu.cu: Welford states per thread, their merges across
// lanes, warps and blocks, the per-channel reduction kernels (bn_stats_*, bn_grad_*) and the
// finalize kernels that merge their partials. Included by bn_relu.cu only.
#pragma once

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

// Merge the states of lanes that share (lane % Stride) within each warp; lanes < Stride end with
// their warp's total (lower lane first, so the result does not depend on timing).
__device__ __forceinline__ Stat warp_merge_strided(Stat s, int stride) {
    for (int m = stride; m < 32; m <<= 1) s = bw::merge_with_lane(s, m);
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

// block_sum of two values for V channels a thread at once, as block_merge_packs does it (width at
// most MaxWidth, which sizes its shared memory).
template <int V, int MaxWidth = 32>
__device__ __forceinline__ void block_sum_packs(float (&a)[V], float (&b)[V], int width, float& ta, float& tb) {
    __shared__ float sh[2][V][kBlock / 32][MaxWidth];
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

// Loads in flight per thread in the statistics walks.
constexpr int kStatsLoads = 2;

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
// NCHW with planes that no 16-byte pack divides (7x7, 14x14 and other odd H*W): the per-channel walk
// above would take one element an access there. Instead a block owns a group of consecutive
// channels whose planes, side by side in every image, span a whole number of packs (group * HW % V
// == 0 and C % group-unit == 0, the host's plane_group), at most one pack a thread. Thread t takes
// pack t of the span in each image of its split, so its elements stay in the same one or two
// channels (H*W >= V) through the walk, and it keeps sums for those two; the block then adds them
// up channel by channel through shared memory, in a fixed order. Grid (groups, S): S splits of the N images (image n
// goes to split n % S). Partials go to ws exactly as the per-channel kernels write them, so the
// finalize kernels and the elementwise passes are shared.
// ---------------------------------------------------------------------------------------------

// Loads in flight per thread in the group walks (raw packs of x; of dy and x in the backward),
// issued together, the last round's past the split's images predicated off.
constexpr int kGroupStatsLoads = 4;
constexpr int kGroupGradLoads = 4;

// The block's channels and where their span lies: pack p of image n is pack n * image_packs + first_pack + p.
struct GroupSpan {
    int c0, channels, packs, first_pack, image_packs;
};

template <int V>
__device__ __forceinline__ GroupSpan group_span(int C, int HW, int group) {
    GroupSpan g;
    g.c0 = static_cast<int>(blockIdx.x) * group;
    g.channels = min(group, C - g.c0);
    g.packs = g.channels * HW / V;
    g.first_pack = g.c0 * HW / V;
    g.image_packs = C * HW / V;
    return g;
}

// Images of split s of S.
__device__ __forceinline__ int split_images(int N, int s, int S) { return (N - s + S - 1) / S; }

// The group's channels of thread t's pack: j0 for its first `split` elements, j0 + 1 after.
__device__ __forceinline__ void span_channels(int t, int V, int HW, int channels, int& j0, int& split) {
    j0 = min(t * V / HW, channels - 1);
    split = min(V, (j0 + 1) * HW - t * V);
}

// One raw pack's values shifted by their channel's first element into (sum, sum of squares) of the
// thread's two channels.
template <typename T, int V>
__device__ __forceinline__ void add_shifted(const bw::Pack<T, V>& raw, int split, float lo, float hi, float2& a,
                                            float2& b) {
#pragma unroll
    for (int k = 0; k < V; ++k) {
        if (k < split) {  // predicated: a reference chosen at run time would put a and b on the stack
            const float d = bw::to_float(raw.v[k]) - lo;
            a.x += d;
            a.y = fmaf(d, d, a.y);
        } else {
            const float d = bw::to_float(raw.v[k]) - hi;
            b.x += d;
            b.y = fmaf(d, d, b.y);
        }
    }
}

// One pack of dy (zeroed where the mask bit is 0) and x into (sum g, sum g * (x - mean)) of the
// thread's two channels.
template <typename T, int V>
__device__ __forceinline__ void add_masked_grad(const bw::Pack<T, V>& g, const bw::Pack<T, V>& x, unsigned bits,
                                                int split, float mu_lo, float mu_hi, float2& a, float2& b) {
#pragma unroll
    for (int k = 0; k < V; ++k) {
        const float gr = (bits >> k) & 1u ? bw::to_float(g.v[k]) : 0.0f;
        if (k < split) {
            a.x += gr;
            a.y = fmaf(gr, bw::to_float(x.v[k]) - mu_lo, a.y);
        } else {
            b.x += gr;
            b.y = fmaf(gr, bw::to_float(x.v[k]) - mu_hi, b.y);
        }
    }
}

// Per-channel totals of the pairs the block's threads hold (thread t, pack t of the span: a = its
// first channel's, b = the next channel's where the pack crosses into it, else zero): warp w adds up
// channels w, w + 8, ... of the group over the packs that overlap each, and lane 0 calls out(j, total
// .x, total .y) for channel j. A pack overlapping channel j starts in it (its a) or in channel j - 1
// (its b; H*W >= V). Every thread calls it; the order is fixed. `scratch`: 2 * kBlock float2 of
// shared memory, the caller's (the one launch reuses them once this returns and the block has
// synchronized).
template <int V, typename Out>
__device__ __forceinline__ void group_pair_sums(float2 a, float2 b, const GroupSpan& g, int HW, Out out,
                                                float2* scratch) {
    float2* first_sums = scratch;
    float2* second_sums = scratch + kBlock;
    const int t = static_cast<int>(threadIdx.x), lane = t & 31, warp = t >> 5;
    if (t < g.packs) {
        first_sums[t] = a;
        second_sums[t] = b;
    }
    __syncthreads();
    for (int j = warp; j < g.channels; j += kBlock / 32) {
        const int first = j * HW / V, last = ((j + 1) * HW - 1) / V;  // the packs overlapping channel j
        float2 total = {0.0f, 0.0f};
        for (int p = first + lane; p <= last; p += 32) {
            const float2 v = p * V / HW == j ? first_sums[p] : second_sums[p];
            total.x += v.x;
            total.y += v.y;
        }
        total.x = warp_sum_strided(total.x, 1);
        total.y = warp_sum_strided(total.y, 1);
        if (lane == 0) out(j, total.x, total.y);
    }
}

template <int V, typename Out>
__device__ __forceinline__ void group_pair_sums(float2 a, float2 b, const GroupSpan& g, int HW, Out out) {
    __shared__ float2 scratch[2 * kBlock];
    group_pair_sums<V>(a, b, g, HW, out, scratch);
}

template <typename T>
__global__ void __launch_bounds__(kBlock, 4) bn_stats_nchw_groups(const T* __restrict__ x, float* __restrict__ ws,
                                                               int N, int C, int HW, int group) {
    constexpr int V = bw::Pack16<T>::size;
    constexpr int U = kGroupStatsLoads;
    using P = bw::Pack<T, V>;
    const GroupSpan g = group_span<V>(C, HW, group);
    const int s = blockIdx.y, S = gridDim.y, t = threadIdx.x;
    const bool active = t < g.packs;
    int j0, split;
    span_channels(t, V, HW, g.channels, j0, split);
    // each channel's shift: its first element, as the finalize adds back
    const float lo = active ? bw::to_float(x[(g.c0 + j0) * HW]) : 0.0f;
    const float hi = active && split < V ? bw::to_float(x[(g.c0 + j0 + 1) * HW]) : lo;
    float2 a = {0.0f, 0.0f}, b = {0.0f, 0.0f};  // (sum, sum of squares) of channel j0, of j0 + 1
    if (active) {
        const int step = S * g.image_packs;
        for (int n = s, p = s * g.image_packs + g.first_pack + t; n < N; n += U * S, p += U * step) {
            P raw[U];
#pragma unroll
            for (int u = 0; u < U; ++u)
                if (n + u * S < N) raw[u] = *reinterpret_cast<const P*>(x + (p + u * step) * V);
#pragma unroll
            for (int u = 0; u < U; ++u)
                if (n + u * S < N) add_shifted<T, V>(raw[u], split, lo, hi, a, b);
        }
    }
    const float count = static_cast<float>(split_images(N, s, S) * HW);
    group_pair_sums<V>(a, b, g, HW, [&](int j, float sa, float sb) {
        store_partial(ws, s, S, C, g.c0 + j, from_sums(count, sa, sb));
    });
}

template <typename T>
__global__ void __launch_bounds__(kBlock) bn_grad_nchw_groups(const T* __restrict__ dy,
                                                              const unsigned char* __restrict__ mask, int mask_bytes,
                                                              const T* __restrict__ x, const float* __restrict__ mean,
                                                              float* __restrict__ ws, int N, int C, int HW, int group) {
    constexpr int V = bw::Pack16<T>::size;
    constexpr int U = kGroupGradLoads;
    using P = bw::Pack<T, V>;
    const GroupSpan g = group_span<V>(C, HW, group);
    const int s = blockIdx.y, S = gridDim.y, t = threadIdx.x;
    const bool active = t < g.packs;
    int j0, split;
    span_channels(t, V, HW, g.channels, j0, split);
    const float mu_lo = active ? mean[g.c0 + j0] : 0.0f;
    const float mu_hi = active && split < V ? mean[g.c0 + j0 + 1] : mu_lo;
    float2 a = {0.0f, 0.0f}, b = {0.0f, 0.0f};  // (sum g, sum g * (x - mean)) of channel j0, of j0 + 1
    if (active) {
        const int step = S * g.image_packs;
        for (int n = s, p = s * g.image_packs + g.first_pack + t; n < N; n += U * S, p += U * step) {
            P graw[U], xraw[U];
            unsigned bits[U];
#pragma unroll
            for (int u = 0; u < U; ++u) {
                if (n + u * S < N) {
                    const int off = (p + u * step) * V;
                    graw[u] = *reinterpret_cast<const P*>(dy + off);
                    xraw[u] = *reinterpret_cast<const P*>(x + off);
                    bits[u] = bw::read_bits<V>(mask, mask_bytes, off);
                }
            }
#pragma unroll
            for (int u = 0; u < U; ++u)
                if (n + u * S < N) add_masked_grad<T, V>(graw[u], xraw[u], bits[u], split, mu_lo, mu_hi, a, b);
        }
    }
    group_pair_sums<V>(a, b, g, HW, [&](int j, float sa, float sb) {
        ws[s * C + g.c0 + j] = sa;
        ws[s * C + g.c0 + j + S * C] = sb;
    });
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

// The S partials of up to 32 consecutive channels c0, c0 + 1, ... (`count` of them) merged by the
// whole block: lane l takes channel c0 + l and warp w partials w, w + 8, ..., so a warp reads one
// partial of the 32 channels (whole sectors, where a warp per channel read one sector a lane), and
// the warps' states merge in shared memory in a fixed order. Thread t < 32 gets channel c0 + t's
// total. Every thread calls it (block barriers).
__device__ __forceinline__ Stat merge_channel_round(const float* __restrict__ ws, int S, int C, int c0, int count) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    Stat u = {0.0f, 0.0f, 0.0f};
    if (lane < count) {
        for (int p = warp; p < S; p += kBlock / 32) u = chan_merge(u, load_partial(ws, p, S, C, c0 + lane));
    }
    return block_merge(u, 32);
}

// merge_channel_round for the backward's two sums.
__device__ __forceinline__ float2 sum_channel_round(const float* __restrict__ ws, int S, int C, int c0, int count) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float sg = 0.0f, sgx = 0.0f;
    if (lane < count) {
        for (int p = warp; p < S; p += kBlock / 32) {
            sg += __ldcg(ws + p * C + c0 + lane);
            sgx += __ldcg(ws + p * C + c0 + lane + S * C);
        }
    }
    const float a = block_sum(sg, 32);
    return make_float2(a, block_sum(sgx, 32));
}

// The finalize kernels. FEW (few partials: a block-wide tree per channel costs more than the
// loads): a block merges 32 channels at once (merge_channel_round); otherwise a block per channel
// (merge_channel_partials: its loads of many partials in flight together).
constexpr int kChannelsPerRound = 32;

template <typename T, bool FEW>
__global__ void bn_stats_finalize(const float* __restrict__ ws, int S, const T* __restrict__ x, int shift_stride,
                                  float eps, float* __restrict__ mean, float* __restrict__ invstd, int C) {
    const int first = FEW ? static_cast<int>(blockIdx.x) * kChannelsPerRound : static_cast<int>(blockIdx.x);
    const Stat t = FEW ? merge_channel_round(ws, S, C, first, min(kChannelsPerRound, C - first))
                       : merge_channel_partials(ws, S, C, first);
    const int c = first + (FEW ? static_cast<int>(threadIdx.x) : 0);
    if (FEW ? (threadIdx.x < kChannelsPerRound && c < C) : threadIdx.x == 0) {
        mean[c] = bw::to_float(x[static_cast<i64>(c) * shift_stride]) + t.mean;
        invstd[c] = invstd_of(t, eps);
    }
}

template <bool FEW>
__global__ void bn_grad_finalize(const float* __restrict__ ws, int S, const float* __restrict__ invstd,
                                 float* __restrict__ dgamma, float* __restrict__ dbeta, int C) {
    const int first = FEW ? static_cast<int>(blockIdx.x) * kChannelsPerRound : static_cast<int>(blockIdx.x);
    const float2 t = FEW ? sum_channel_round(ws, S, C, first, min(kChannelsPerRound, C - first))
                         : sum_channel_partials(ws, S, C, first);
    const int c = first + (FEW ? static_cast<int>(threadIdx.x) : 0);
    if (FEW ? (threadIdx.x < kChannelsPerRound && c < C) : threadIdx.x == 0) {
        dbeta[c] = t.x;
        dgamma[c] = t.y * invstd[c];
    }
}

}  // namespace bnr

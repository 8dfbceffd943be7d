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
#include "bn_relu_apply.cuh"
#include "bn_relu_stats.cuh"
#include "grid_barrier.cuh"
#include "row_tile.cuh"

namespace bnr {

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

// Loads in flight per step of the fused forward's phase C (H100, float16): bn_relu NHWC 4 packs of
// x (32x64x112x112 52.9 -> 51.7 us against 2; 6: 0.5-0.8 us slower at C = 64, as much faster at
// C = 256), bn_relu NCHW 6 (against 4: 46.9 -> 46.4 us, 32x256x56x56 48.7 -> 47.3; 4 against 2:
// 47.5 -> 47.2; 8 was 9 us slower), bn_add_relu 2 of x and 2 of z (4 + 4 was 1-1.5 us slower on
// NHWC; 3 + 3 even).
template <bool kResidual, bool kNchw>
constexpr int kWalkLoads = kResidual ? 2 : kNchw ? 6 : 4;

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
    const Stat t = nchw_block_stats<T, V, true>(x, c, s, S, C, HW, per_channel, bnr_x_cache, cached);
    if (threadIdx.x == 0) store_partial(ws, s, S, C, c, t);
    grid_sync(bar, static_cast<unsigned>(C * S));

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
    nhwc_block_stats<T, V, true, true, kRounds>(x, ws, rows, C, tx_threads, bnr_x_cache, cached, scratch);
    const unsigned token = grid_sync(bar, blocks);

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

// ---------------------------------------------------------------------------------------------
// One launch for the group reduction's shapes (NCHW planes no pack divides: 7x7, 14x14, ...). The
// group walk of bn_*_nchw_groups holds every image of a thread's split in registers (at most R,
// loaded at once), the block writes its channels' partials, one grid barrier, then every block of
// a group merges that group's S partials itself (the same few hundred floats from L2) and makes
// the elementwise pass from its registers: x (dy, the mask and x) crosses DRAM once, with no
// finalize launch and no launch gaps. Needs (the host's fused_group_plan): spans of whole mask
// words (group * HW and C * HW multiples of 32, so a block owns its words), HW >= V (a pack spans
// at most two planes), at most R + held images a thread, and the grid resident at once.
// With kHeld, images past the R in registers wait in dynamic shared memory (`held_images` of them
// a thread, copied with cp.async beside the register loads): registers alone hold too few images
// for a grid of many groups (32x1024x14x14: 128 groups, 8 images a thread at 3 blocks an SM is 512
// of 396 blocks), while an SM's shared memory holds as much again as its registers.
// ---------------------------------------------------------------------------------------------

// Blocks an SM the one-launch group kernels' bounds ask for: 4 (64 registers) where every instance
// compiles without spilling, 3 where R packs of x and of z need more (the backward, R packs of dy
// and of x: 3).
template <bool kResidual, int R>
constexpr int kGroupFusedBlocks = !kResidual && R <= 4 ? 4 : 3;

template <typename T, bool kResidual, int R, bool kHeld = false>
__global__ void __launch_bounds__(kBlock, kGroupFusedBlocks<kResidual, R>) bn_relu_fused_nchw_groups(
        const T* __restrict__ x, const T* __restrict__ z, const float* __restrict__ gamma,
        const float* __restrict__ beta, float eps, float* __restrict__ mean, float* __restrict__ invstd,
        T* __restrict__ y, unsigned* __restrict__ words, float* __restrict__ ws, unsigned* bar, int N, int C,
        int HW, int group, int held_images) {
    constexpr int V = bw::Pack16<T>::size;
    const int held = kHeld ? held_images : 0;  // the instance without held images keeps none of their code
    constexpr int G = 32 / V;
    using P = bw::Pack<T, V>;
    const GroupSpan g = group_span<V>(C, HW, group);
    const int s = blockIdx.y, S = gridDim.y, t = threadIdx.x, lane = t & 31, warp = t >> 5;
    const bool active = t < g.packs;
    int j0, split;
    span_channels(t, V, HW, g.channels, j0, split);
    const int step = S * g.image_packs, p0 = s * g.image_packs + g.first_pack + t;
    // Held image R + h of thread t: x at held_x[h * kBlock + t], z at held_z[h * kBlock + t].
    extern __shared__ XCache bnr_x_cache[];
    XCache* held_x = bnr_x_cache;
    XCache* held_z = bnr_x_cache + (kResidual ? held * kBlock : 0);
    __shared__ float2 pair_scratch[2 * kBlock];  // phase A's pair sums, then phase B's coefficients
    P xp[R], zp[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {  // every image of the split in flight at once
        if (active && s + r * S < N) {
            xp[r] = *reinterpret_cast<const P*>(x + (p0 + r * step) * V);
            if constexpr (kResidual) zp[r] = *reinterpret_cast<const P*>(z + (p0 + r * step) * V);
        }
    }
    for (int h = 0; h < held; ++h) {
        const int r = R + h;
        if (active && s + r * S < N) {
            bw::tile::copy16_async(&held_x[h * kBlock + t], x + (p0 + r * step) * V);
            if constexpr (kResidual) bw::tile::copy16_async(&held_z[h * kBlock + t], z + (p0 + r * step) * V);
        }
    }
    {  // phase A: shifted sums of the thread's two channels, added up per channel
        const float lo = active ? bw::to_float(x[(g.c0 + j0) * HW]) : 0.0f;
        const float hi = active && split < V ? bw::to_float(x[(g.c0 + j0 + 1) * HW]) : lo;
        float2 a = {0.0f, 0.0f}, b = {0.0f, 0.0f};  // (sum, sum of squares) of channel j0, of j0 + 1
#pragma unroll
        for (int r = 0; r < R; ++r)
            if (active && s + r * S < N) add_shifted<T, V>(xp[r], split, lo, hi, a, b);
        if (held > 0) bw::tile::wait_copies();  // this thread's own copies: no barrier needed
        for (int h = 0; h < held; ++h)
            if (active && s + (R + h) * S < N)
                add_shifted<T, V>(*reinterpret_cast<const P*>(&held_x[h * kBlock + t]), split, lo, hi, a, b);
        // The partials stay plain sums (every block shifts a channel by the same K), as in the
        // NHWC register kernel: the channel's state is formed once, in phase B.
        group_pair_sums<V>(a, b, g, HW, [&](int j, float sa, float sb) {
            ws[s * C + g.c0 + j] = sa;
            ws[s * C + g.c0 + j + S * C] = sb;
        }, pair_scratch);
    }
    grid_sync(bar, gridDim.x * gridDim.y);  // also a block barrier: pair_scratch is free again

    // Phase B: this group's channels from all S partials, 32 a round (sum_channel_round: whole
    // sectors; a warp per channel read one sector a lane, and every block of the group repeats the
    // merge: 48 MB of L2 traffic for a 1.6 MB tensor at 32x512x7x7).
    // group <= kBlock * V / HW <= kBlock channels (HW >= V), in phase A's scratch: static shared
    // memory is taken from the held images (with coefficients of their own, four blocks of 12 held
    // images were 64 bytes over an H100 SM's 228 KiB).
    static_assert(sizeof(FwdCoef) * kBlock <= sizeof(float2) * 2 * kBlock, "the coefficients fit the scratch");
    FwdCoef* group_coef = reinterpret_cast<FwdCoef*>(pair_scratch);
    for (int first = 0; first < g.channels; first += kChannelsPerRound) {
        const float2 sums = sum_channel_round(ws, S, C, g.c0 + first, g.channels - first);  // thread t < 32: channel first + t
        if (t < kChannelsPerRound && first + t < g.channels) {
            const Stat u = from_sums(static_cast<float>(N * HW), sums.x, sums.y);
            const int c = g.c0 + first + t;
            const float m = bw::to_float(x[c * HW]) + u.mean, is = invstd_of(u, eps);
            group_coef[first + t] = FwdCoef{m, is * gamma[c], beta[c]};
            if (s == 0) {
                mean[c] = m;
                invstd[c] = is;
            }
        }
    }
    __syncthreads();

    // Phase C: y and the mask words from the registers, then from the held images.
    const FwdCoef lo = group_coef[j0], hi = split < V ? group_coef[j0 + 1] : lo;
    auto emit = [&](int r, const P& xv, const P& zv) {
        const int off = (p0 + r * step) * V;
        unsigned b = 0;
        if (active) {
            T yv[V];
#pragma unroll
            for (int k = 0; k < V; ++k) {
                const bool first = k < split;
                float p = fmaf(bw::to_float(xv.v[k]) - (first ? lo.m : hi.m), first ? lo.a : hi.a, first ? lo.b : hi.b);
                if constexpr (kResidual) p += bw::to_float(zv.v[k]);
                b |= (p > 0.0f ? 1u : 0u) << k;
                yv[k] = p > 0.0f ? bw::from_float<T>(p) : bw::from_float<T>(0.0f);
            }
            store_pack_once<T, V, true>(y, off, off + V, yv);
        }
        const unsigned word = bw::group_or<G>(b << ((lane * V) & 31));
        if (active && (lane & (G - 1)) == 0) words[off >> 5] = word;  // the span ends on a word: the word's lanes are active
    };
    // Each loop stops where the image is past N, the same for the whole block: the group OR sees
    // every lane.
#pragma unroll
    for (int r = 0; r < R; ++r) {
        if (s + r * S >= N) break;
        emit(r, xp[r], zp[r]);
    }
    for (int h = 0; h < held && s + (R + h) * S < N; ++h) {
        P zv;
        if constexpr (kResidual) zv = *reinterpret_cast<const P*>(&held_z[h * kBlock + t]);
        emit(R + h, *reinterpret_cast<const P*>(&held_x[h * kBlock + t]), zv);
    }
}

// ---------------------------------------------------------------------------------------------
// One launch for small NHWC tensors (ResNet's 7x7 and 14x14 stages, many channels, a few MB): the
// three kernels spend most of their time there on two launch gaps, a finalize and latency-bound
// passes. A block owns a tile of 32 channels (one mask word of every row) and a split of the rows:
// thread (tx, ty) holds the pack of channels tile + tx * V .. + V - 1 in rows s * TY + ty + k * S * TY,
// k < R, all loaded at once into registers. Phase A: the block's sums of the shifted values per
// channel, written as its partials; grid barrier; phase B: every block of a tile adds up the
// tile's S partials itself (32 channels a round: whole sectors, a few KB from L2); phase C: y and
// the mask words from the registers. x (and z) cross DRAM once. Needs (the host's
// nhwc_regs_plan): C % 32 == 0, 16-byte aligned tensors, the grid (C / 32 tiles x S) resident at
// once with at most R rows a thread.
// ---------------------------------------------------------------------------------------------
// 4 blocks an SM (64 registers). The residual's z waits in shared memory (cp.async, issued with
// the loads of x, so it lands during phase A and the barrier): held in registers too, it spilled at
// 64 registers, and at 3 blocks an SM the grid no longer held ResNet-50's 32x2048x7x7.
template <typename T, bool kResidual, int R>
__global__ void __launch_bounds__(kBlock, 4) bn_relu_fused_nhwc_regs(
        const T* __restrict__ x, const T* __restrict__ z, const float* __restrict__ gamma,
        const float* __restrict__ beta, float eps, float* __restrict__ mean, float* __restrict__ invstd,
        T* __restrict__ y, unsigned* __restrict__ words, float* __restrict__ ws, unsigned* bar, int rows, int C) {
    constexpr int V = bw::Pack16<T>::size;
    constexpr int TX = 32 / V;       // lanes across a tile: a row's 32 channels, one mask word
    constexpr int TY = kBlock / TX;  // rows a block covers at a time
    using P = bw::Pack<T, V>;
    const int t = threadIdx.x, tx = t % TX, ty = t / TX;
    const int s = blockIdx.y, S = gridDim.y;
    const int tile = blockIdx.x * 32, c0 = tile + tx * V;
    const int step = S * TY, r0 = s * TY + ty;
    P xp[R];
    __shared__ uint4 z_wait[kResidual ? R * kBlock : 1];  // z's pack r of thread t at r * kBlock + t
#pragma unroll
    for (int r = 0; r < R; ++r) {  // every row of the thread in flight at once
        const int off = (r0 + r * step) * C + c0;
        if (r0 + r * step < rows) {
            xp[r] = *reinterpret_cast<const P*>(x + off);
            if constexpr (kResidual) bw::tile::copy16_async(&z_wait[r * kBlock + t], z + off);
        }
    }
    // Row 0 holds each channel's shift K (the phase B thread of channel tile + t needs its own).
    const P shift = *reinterpret_cast<const P*>(x + c0);
    const float tile_shift = t < 32 ? bw::to_float(x[tile + t]) : 0.0f;
    // Phase A: each channel's sums of d = x - K and d^2, plain sums all the way (every thread of
    // the grid shifts a channel by the same K, so the sums add up; a Welford state a thread and
    // Chan's merge over lanes, warps and blocks took 2-3.5 us of 11-15 on an H100), turned into
    // the channel's state once, from all `rows` values, in phase B.
    {
        float s1[V], s2[V];
#pragma unroll
        for (int k = 0; k < V; ++k) {
            s1[k] = 0.0f;
            s2[k] = 0.0f;
        }
#pragma unroll
        for (int r = 0; r < R; ++r) {
            if (r0 + r * step >= rows) continue;
#pragma unroll
            for (int k = 0; k < V; ++k) {
                const float d = bw::to_float(xp[r].v[k]) - bw::to_float(shift.v[k]);
                s1[k] += d;
                s2[k] = fmaf(d, d, s2[k]);
            }
        }
        float a, b;
        block_sum_packs<V, TX>(s1, s2, TX, a, b);  // thread t < 32: channel pack_channel
        if (t < 32) {
            const int c = pack_channel<V>(TX);
            ws[s * C + c] = a;
            ws[s * C + c + S * C] = b;
        }
    }
    grid_sync(bar, gridDim.x * gridDim.y);

    __shared__ FwdCoef tile_coef[32];
    {  // phase B: the tile's 32 channels from all S partials
        const float2 sums = sum_channel_round(ws, S, C, tile, 32);  // thread t < 32: channel tile + t
        if (t < 32) {
            const int c = tile + t;
            const Stat u = from_sums(static_cast<float>(rows), sums.x, sums.y);
            const float m = tile_shift + u.mean, is = invstd_of(u, eps);
            tile_coef[t] = FwdCoef{m, is * gamma[c], beta[c]};
            if (s == 0) {
                mean[c] = m;
                invstd[c] = is;
            }
        }
        __syncthreads();
    }
    // The V channels' coefficients in registers, or for the residual (short of registers: held
    // next to R packs of x, they spilled) read from shared memory at each use, through a volatile
    // view so that the compiler does not hoist them back into registers.
    constexpr int NC = kResidual ? 1 : V;
    FwdCoef coef[NC];
#pragma unroll
    for (int k = 0; k < NC; ++k) coef[k] = tile_coef[tx * V + k];
    const volatile FwdCoef* each_use = tile_coef + tx * V;
    if constexpr (kResidual) bw::tile::wait_copies();  // this thread's own packs of z: no barrier needed

    // Phase C. A warp covers 32 / TX consecutive rows: it stops where its first row is past the end
    // (the same for all its lanes, so the group OR below always has every lane).
    const int warp_r0 = s * TY + (t & ~31) / TX;
#pragma unroll
    for (int r = 0; r < R; ++r) {
        if (warp_r0 + r * step >= rows) break;
        const int row = r0 + r * step, off = row * C + c0;
        const bool on = row < rows;
        unsigned b = 0;
        if (on) {
            T yv[V];
            P zr;
            if constexpr (kResidual) zr = *reinterpret_cast<const P*>(&z_wait[r * kBlock + t]);
#pragma unroll
            for (int k = 0; k < V; ++k) {
                float p;
                if constexpr (kResidual) {
                    p = fmaf(bw::to_float(xp[r].v[k]) - each_use[k].m, each_use[k].a, each_use[k].b);
                    p += bw::to_float(zr.v[k]);
                } else {
                    p = fmaf(bw::to_float(xp[r].v[k]) - coef[k].m, coef[k].a, coef[k].b);
                }
                b |= (p > 0.0f ? 1u : 0u) << k;
                yv[k] = p > 0.0f ? bw::from_float<T>(p) : bw::from_float<T>(0.0f);
            }
            store_pack_once<T, V, true>(y, off, off + V, yv);
        }
        const unsigned word = bw::group_or<TX>(b << (tx * V));
        if (on && tx == 0) words[(row * C + tile) >> 5] = word;
    }
}

template <typename T, bool kResidual, int R>
__global__ void __launch_bounds__(kBlock, 3) bn_relu_backward_fused_nchw_groups(
        const T* __restrict__ dy, const unsigned char* __restrict__ mask, int mask_bytes, const T* __restrict__ x,
        const float* __restrict__ mean, const float* __restrict__ invstd, const float* __restrict__ gamma,
        float* __restrict__ dgamma, float* __restrict__ dbeta, T* __restrict__ dx, T* __restrict__ dz,
        float* __restrict__ ws, unsigned* bar, int N, int C, int HW, int group, float inv_m) {
    constexpr int V = bw::Pack16<T>::size;
    using P = bw::Pack<T, V>;
    const GroupSpan g = group_span<V>(C, HW, group);
    const int s = blockIdx.y, S = gridDim.y, t = threadIdx.x, lane = t & 31, warp = t >> 5;
    const bool active = t < g.packs;
    int j0, split;
    span_channels(t, V, HW, g.channels, j0, split);
    const int step = S * g.image_packs, p0 = s * g.image_packs + g.first_pack + t;
    P gp[R], xp[R];
    unsigned bits[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
        bits[r] = 0;
        if (active && s + r * S < N) {
            const int off = (p0 + r * step) * V;
            gp[r] = *reinterpret_cast<const P*>(dy + off);
            xp[r] = *reinterpret_cast<const P*>(x + off);
            bits[r] = bw::read_bits<V>(mask, mask_bytes, off);
        }
    }
    const float mu_lo = active ? mean[g.c0 + j0] : 0.0f;
    const float mu_hi = active && split < V ? mean[g.c0 + j0 + 1] : mu_lo;
    {  // phase A: sums of g and g * (x - mean), g = dy where the mask bit is set
        float2 a = {0.0f, 0.0f}, b = {0.0f, 0.0f};  // (sum g, sum g * (x - mean)) of channel j0, of j0 + 1
#pragma unroll
        for (int r = 0; r < R; ++r)
            if (active && s + r * S < N) add_masked_grad<T, V>(gp[r], xp[r], bits[r], split, mu_lo, mu_hi, a, b);
        group_pair_sums<V>(a, b, g, HW, [&](int j, float sa, float sb) {
            ws[s * C + g.c0 + j] = sa;
            ws[s * C + g.c0 + j + S * C] = sb;
        });
    }
    grid_sync(bar, gridDim.x * gridDim.y);

    __shared__ BwdCoef group_coef[kBlock];  // merged 32 channels a round, as in the forward's phase B
    for (int first = 0; first < g.channels; first += kChannelsPerRound) {
        const float2 sums = sum_channel_round(ws, S, C, g.c0 + first, g.channels - first);  // thread t < 32: channel first + t
        const float sg = sums.x, sgx = sums.y;
        if (t < kChannelsPerRound && first + t < g.channels) {
            const int c = g.c0 + first + t;
            const float is = invstd[c], dg = sgx * is;
            group_coef[first + t] = BwdCoef{mean[c], gamma[c] * is, sg * inv_m, dg * is * inv_m};
            if (s == 0) {
                dbeta[c] = sg;
                dgamma[c] = dg;
            }
        }
    }
    __syncthreads();
    if (!active) return;  // no shuffles below
    const BwdCoef lo = group_coef[j0], hi = split < V ? group_coef[j0 + 1] : lo;
#pragma unroll
    for (int r = 0; r < R; ++r) {
        if (s + r * S >= N) break;
        const int off = (p0 + r * step) * V;
        T dxv[V], dzv[V];
#pragma unroll
        for (int k = 0; k < V; ++k) {
            const bool first = k < split, kept = (bits[r] >> k) & 1u;
            const float gr = kept ? bw::to_float(gp[r].v[k]) : 0.0f;
            const float m = first ? lo.m : hi.m, kk = first ? lo.k : hi.k, kx = first ? lo.kx : hi.kx;
            const float mg = first ? lo.mg : hi.mg;
            dxv[k] = bw::from_float<T>(kk * fmaf(-(bw::to_float(xp[r].v[k]) - m), kx, gr - mg));
            dzv[k] = kept ? gp[r].v[k] : bw::from_float<T>(0.0f);
        }
        store_pack_once<T, V, true>(dx, off, off + V, dxv);
        if constexpr (kResidual) store_pack_once<T, V, true>(dz, off, off + V, dzv);
    }
}

}  // namespace bnr

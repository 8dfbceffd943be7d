// The optimized softmax family, after OneFlow's softmax.cuh (see ../shared/seeds/000_*.txt):
// softmax and log-softmax forward, their backward, and the online-normalizer forward, each in the
// article's tiers. bwbench/cuda/softmax/dispatch.py picks the tier and the template arguments;
// bwbench/cuda/softmax.py launches.
//
//   warp tier      a thread group of G lanes (1 .. 32) per row, the row held in registers
//                  (cols <= G * P * NP), R rows per group and access; shuffles reduce.
//   block tiers    one block per row: `Cached` keeps the row in shared memory between the passes,
//                  otherwise every pass re-reads it (through L1/L2) and any cols works.
//   online         one pass computes the row's (max, sum of exp) with the associative (m, d)
//                  merge, a second pass writes y: a warp variant and the block variant
//                  (`OnePass`, which the block tiers of the forward also offer).
//
// Every kernel grid-strides over rows, so any grid size is correct. All arithmetic is in float;
// half and bfloat16 are converted on load and rounded once on store. Template arguments:
//   T     storage type (half_t, bf16_t, float)      Algo  kSoftmax or kLogSoftmax
//   P     elements per access (16 bytes, or 1)      NP    packs per thread (warp tier)
//   G     lanes per row (warp tier)                 R     rows per thread group per access
//
// Any cols and any row start: a row is walked as the span of aligned packs that covers it
// (softmax.cuh's RowSpan): the main loops move its whole packs in one access each, and the head
// and tail packs, where partial, are loaded and stored element by element by one thread.
// Every tensor of a call has the same offset within a pack at every row (the host checks it and
// falls back to P = 1 where they differ), so one span serves x and y (y, dy and dx).
//
// Launch shapes: warp-tier kernels take blockDim.x = 128 and hold spans of up to G * NP packs;
// block kernels any multiple of 32 up to 1024, with one span's packs (twice that for the
// backward) of dynamic shared memory when Cached.

#include "cluster_mailbox.cuh"
#include "row_tile.cuh"
#include "softmax.cuh"

using bw::Pack;
using bw::smx::Backward;
using bw::smx::Forward;
using bw::smx::MD;

// Threads per block of the warp-tier kernels (4 warps): small blocks keep the scheduler free to
// fill an SM with as many warps as the registers allow.
#define BW_SOFTMAX_WARP_BLOCK 128

// ---------------------------------------------------------------------------------------------
// Row walking for thread groups. The loop is uniform across a warp (it steps by the warp's first
// row), because the shuffles below involve all 32 lanes: a group whose row is past the end still
// joins them and just does not load or store.
// ---------------------------------------------------------------------------------------------

template <int G, int R>
struct GroupRows {
    static constexpr int kRowsPerWarp = (32 / G) * R;
    int lane;     // lane inside the group, 0 .. G-1
    i64 offset;   // first row of this group relative to the warp's first row
    i64 first;    // the warp's first row
    i64 step;     // rows covered by the whole grid per iteration

    __device__ __forceinline__ GroupRows() {
        lane = threadIdx.x & (G - 1);
        offset = static_cast<i64>((threadIdx.x & 31) / G) * R;
        const i64 warp = (static_cast<i64>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
        const i64 warps = (static_cast<i64>(gridDim.x) * blockDim.x) >> 5;
        first = warp * kRowsPerWarp;
        step = warps * kRowsPerWarp;
    }
};

// =============================================================================================
// Forward, warp tier: the row lives in registers between the three steps (max, exp-sum, scale).
// =============================================================================================

template <typename T, int Algo, int P, int NP, int G, int R>
__global__ void __launch_bounds__(BW_SOFTMAX_WARP_BLOCK)
softmax_warp(const T* __restrict__ x, i64 x_stride, T* __restrict__ y, i64 y_stride, i64 rows,
             int cols) {
    static_assert(G >= 1 && G <= 32 && (G & (G - 1)) == 0, "G: a power of two up to 32");
    constexpr int C = P * NP;
    // 16-bit rows of two or more 16-byte packs a lane stay in registers as raw packs: half the
    // registers of floats, for one more conversion an element and, for softmax, a second exp in
    // the store. Against floats with the same 16-byte loads (H200): even at 128-1024 columns, 1-6%
    // faster at 2048. Other rows are held as floats that pass 2 turns into exp(x - m) (softmax) or
    // x - m (log-softmax). The registers hold the row's whole packs; the others hold -inf, which
    // adds nothing to the max or the sum and is never stored. The partial head and tail packs are
    // loaded once, whole and masked, by their owner lane and kept in a register pack (`edge`).
    constexpr bool kRaw = sizeof(T) == 2 && P >= 2 && NP >= 2;
    // One pack a lane (groups under a warp, and full warps up to 32 packs), and groups under a
    // warp with two or three packs a lane: every pack of the span, partial or not, is loaded whole
    // and masked and handled alike in registers, so short rows keep all lanes busy; groups with
    // more packs a lane leave their two partial packs to the owner lanes (for_each_edge), which
    // keeps the register count and the instructions of the unrolled packs (masked, full warps of
    // 3-6 packs ran 3-30 points slower at 577-1025 columns).
    constexpr bool kUniform = NP == 1 || (G < 32 && NP <= 3);
    constexpr bool kEdgeHeld = !kUniform && R == 1;
    typedef Pack<T, P> PackT;
    typedef bw::smx::RowSpan<P> Span;
    GroupRows<G, R> walk;
    for (; walk.first < rows; walk.first += walk.step) {
        PackT raw[R][kRaw ? NP : 1];
        float buf[R][kRaw ? 1 : C];
        float row_max[R];
        Span span[R];
        // The partial head or tail pack this lane owns (lane 0 the head, lane G - 1 the tail; one
        // each in the full warps that have them), loaded once as one 16-byte pack and masked. Held
        // for one row per access; with two the register pack made the unrolled loops spill, so
        // those read their edges again element by element.
        PackT edge[kEdgeHeld ? R : 1];
        // Raw rows with owner-lane edges take their max from the packs as stored (max_packs), a
        // word an instruction. Not the masked shapes: the running max pack took the fitted groups
        // of three packs from 64 to 72 registers, and 129 columns lost 2.5 points of copy.
        constexpr bool kPackedMax = kRaw && !kUniform;
        PackT top[kPackedMax ? R : 1];
#pragma unroll
        for (int r = 0; r < R; ++r) {
            if constexpr (kPackedMax) top[r] = bw::smx::pack_fill<T, P>(bw::neg_inf());
            const i64 row = walk.first + walk.offset + r;
            const bool live = row < rows;
            const T* xr = bw::smx::row_at(x, live ? row : 0, x_stride);
            span[r] = live ? bw::smx::row_span<T, P>(xr, cols) : Span{0, 0};
            row_max[r] = bw::neg_inf();
#pragma unroll
            for (int p = 0; p < NP; ++p) {
                const int pack = p * G + walk.lane;
                const bool held = kUniform ? pack < span[r].packs() : span[r].whole(pack);
                auto load = [&] {
                    return kUniform ? bw::smx::load_masked<T, P>(xr, span[r], pack, bw::neg_inf())
                                    : bw::smx::load_whole<T, P>(xr, span[r], pack);
                };
                if constexpr (kPackedMax) {
                    if (held) {
                        raw[r][p] = load();
                        top[r] = bw::smx::max_packs(top[r], raw[r][p]);
                    }
                } else {
                    float f[P];
                    if (held) {
                        const PackT v = load();
                        if constexpr (kRaw) raw[r][p] = v;
                        bw::smx::unpack_words(v, f);
                    } else {  // padding: contributes nothing to max or sum, never stored
#pragma unroll
                        for (int i = 0; i < P; ++i) f[i] = bw::neg_inf();
                    }
#pragma unroll
                    for (int i = 0; i < P; ++i) {
                        if constexpr (!kRaw) buf[r][p * P + i] = f[i];
                        row_max[r] = fmaxf(row_max[r], f[i]);
                    }
                }
            }
            if constexpr (!kUniform) bw::smx::for_each_edge(span[r], walk.lane, G - 1, [&](int k) {
                const PackT v = kEdgeHeld ? bw::smx::load_masked<T, P>(xr, span[r], k, bw::neg_inf())
                                          : bw::smx::load_partial<T, P>(xr, span[r], k, bw::neg_inf());
                if constexpr (kEdgeHeld) edge[r] = v;
                if constexpr (kPackedMax) {
                    top[r] = bw::smx::max_packs(top[r], v);
                } else {
                    row_max[r] = fmaxf(row_max[r], bw::smx::pack_max(v));
                }
            });
            if constexpr (kPackedMax) row_max[r] = bw::smx::pack_max(top[r]);
        }
        float row_sum[R];
        // softmax's terms exp(x - m), shared by the sum and the store (RowExp); log-softmax keeps
        // x - m for its output and takes fast_exp(x - m) for the sum.
        bw::smx::RowExp<T> term[R];
        constexpr bool kSoftmax = Algo == bw::smx::kSoftmax;
        auto sum_term = [&](int r, float v) {
            return kSoftmax ? term[r](v) : bw::smx::fast_exp<T>(v - row_max[r]);
        };
        auto output = [&](int r, float v, float k) {
            return kSoftmax ? term[r](v) * k : Forward<Algo, T>::apply(v, row_max[r], k);
        };
#pragma unroll
        for (int r = 0; r < R; ++r) {
            row_max[r] = bw::warp_allreduce<bw::MaxOp, G>(row_max[r]);
            term[r] = bw::smx::RowExp<T>(row_max[r]);
            row_sum[r] = 0.0f;
            if constexpr (kRaw) {
#pragma unroll
                for (int p = 0; p < NP; ++p) {
                    const int pack = p * G + walk.lane;
                    if (kUniform ? pack < span[r].packs() : span[r].whole(pack)) {  // masked: exp(-inf) = 0
                        float f[P];
                        bw::smx::unpack_words(raw[r][p], f);
#pragma unroll
                        for (int i = 0; i < P; ++i) row_sum[r] += sum_term(r, f[i]);
                    }
                }
            } else {
#pragma unroll
                for (int i = 0; i < C; ++i) {
                    if (kSoftmax) {  // keep exp(x - m): the store only scales it
                        buf[r][i] = term[r](buf[r][i]);
                        row_sum[r] += buf[r][i];
                    } else {  // keep x - m: the store only subtracts log(sum)
                        buf[r][i] -= row_max[r];
                        row_sum[r] += bw::smx::fast_exp<T>(buf[r][i]);
                    }
                }
            }
            const T* xr = bw::smx::row_at(x, walk.first + walk.offset + r, x_stride);
            if constexpr (!kUniform) bw::smx::for_each_edge(span[r], walk.lane, G - 1, [&](int k) {
                float f[P];
                bw::smx::unpack_words(kEdgeHeld ? edge[r] : bw::smx::load_partial<T, P>(xr, span[r], k, bw::neg_inf()), f);
#pragma unroll
                for (int i = 0; i < P; ++i) row_sum[r] += sum_term(r, f[i]);
            });
        }
#pragma unroll
        for (int r = 0; r < R; ++r) {
            row_sum[r] = bw::warp_allreduce<bw::SumOp, G>(row_sum[r]);
            const i64 row = walk.first + walk.offset + r;
            if (row >= rows) continue;
            const float k = Forward<Algo, T>::finish(row_sum[r]);
            T* yr = bw::smx::row_at(y, row, y_stride);
#pragma unroll
            for (int p = 0; p < NP; ++p) {
                const int pack = p * G + walk.lane;
                if (kUniform ? pack < span[r].packs() : span[r].whole(pack)) {
                    float f[P];
                    if constexpr (kRaw) {
                        bw::smx::unpack_words(raw[r][p], f);
#pragma unroll
                        for (int i = 0; i < P; ++i) f[i] = output(r, f[i], k);
                    } else {
#pragma unroll
                        for (int i = 0; i < P; ++i) {
                            const float v = buf[r][p * P + i];
                            f[i] = kSoftmax ? v * k : v - k;
                        }
                    }
                    if constexpr (kUniform) {
                        bw::smx::store_any<T, P>(yr, span[r], pack, bw::smx::pack_from<T, P>(f));
                    } else {
                        bw::smx::store_whole<T, P>(yr, span[r], pack, bw::smx::pack_from<T, P>(f));
                    }
                }
            }
            const T* xr = bw::smx::row_at(x, row, x_stride);
            if constexpr (!kUniform) bw::smx::for_each_edge(span[r], walk.lane, G - 1, [&](int e) {
                float f[P];
                bw::smx::unpack_words(kEdgeHeld ? edge[r] : bw::smx::load_partial<T, P>(xr, span[r], e, bw::neg_inf()), f);
#pragma unroll
                for (int i = 0; i < P; ++i) f[i] = output(r, f[i], k);
                bw::smx::store_partial<T, P>(yr, span[r], e, bw::smx::pack_from<T, P>(f));
            });
        }
    }
}

// =============================================================================================
// Forward, block tiers: one block per row.
//   Cached:  the first pass keeps the row's whole packs (as T, so twice the rows of a float cache
//            fit) in shared memory; later passes read them from there.
//   OnePass: the first pass computes (max, sum) with the online merge, so only one more pass
//            (the store) follows, instead of a sum pass and a store pass.
// Each thread owns the whole packs first_whole + tid, + blockDim, ... in every pass, and reads
// back only the cache entries it wrote itself, so no barrier is needed between passes beyond the
// reductions'. The partial head and tail packs go to threads 0 and blockDim - 1, read from global
// memory in every pass. The loads of a pass are issued in batches of U packs before any is used,
// so enough bytes are in flight per SM even with a single block resident.
// =============================================================================================

template <typename T, int Algo, int P, bool Cached, bool OnePass>
__global__ void __launch_bounds__(1024)
softmax_block(const T* __restrict__ x, i64 x_stride, T* __restrict__ y, i64 y_stride, i64 rows,
              int cols) {
    typedef Pack<T, P> PackT;
    // Packs per batch of loads. The three-pass variants keep two: with four, their register demand
    // passes the 64 that 1024-thread blocks allow and they spill.
    constexpr int U = P == 1 ? 16 / sizeof(T) : (OnePass ? 4 : 2);
    extern __shared__ __align__(16) unsigned char softmax_smem[];
    PackT* cache = reinterpret_cast<PackT*>(softmax_smem);
    const int tid = threadIdx.x;
    const int bs = blockDim.x;
    for (i64 row = blockIdx.x; row < rows; row += gridDim.x) {
        const T* xr = bw::smx::row_at(x, row, x_stride);
        const bw::smx::RowSpan<P> span = bw::smx::row_span<T, P>(xr, cols);
        const int first = span.first_whole() + tid;
        const int end = span.end_whole();
        float row_max, row_sum;
        // Pass 1: read x from global memory (and cache it).
        MD md = bw::smx::md_identity();
        float thread_max = bw::neg_inf();
#pragma unroll 1
        for (int base = first; base < end; base += bs * U) {
            PackT v[U];
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const int p = base + u * bs;
                if (p < end) v[u] = bw::smx::load_whole<T, P>(xr, span, p);
            }
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const int p = base + u * bs;
                if (p < end) {
                    if (Cached) cache[p] = v[u];
                    float f[P];
                    bw::smx::unpack(v[u], f);
                    if (OnePass) {
                        md = bw::smx::md_add<T, P>(md, f);
                    } else {
#pragma unroll
                        for (int i = 0; i < P; ++i) thread_max = fmaxf(thread_max, f[i]);
                    }
                }
            }
        }
        bw::smx::for_each_edge(span, tid, bs - 1, [&](int k) {
            float f[P];
            bw::smx::unpack(bw::smx::load_partial<T, P>(xr, span, k, bw::neg_inf()), f);
            if (OnePass) {
                md = bw::smx::md_add<T, P>(md, f);
            } else {
#pragma unroll
                for (int i = 0; i < P; ++i) thread_max = fmaxf(thread_max, f[i]);
            }
        });
        if (OnePass) {
            md = bw::smx::block_allreduce_md<T>(md);
            row_max = md.m;
            row_sum = md.d;
        } else {
            row_max = bw::block_allreduce<bw::MaxOp>(thread_max);
            // Pass 2: sum of exp(x - max).
            float thread_sum = 0.0f;
#pragma unroll 1
            for (int base = first; base < end; base += bs * U) {
                PackT v[U];
#pragma unroll
                for (int u = 0; u < U; ++u) {
                    const int p = base + u * bs;
                    if (p < end) v[u] = Cached ? cache[p] : bw::smx::load_whole<T, P>(xr, span, p);
                }
#pragma unroll
                for (int u = 0; u < U; ++u) {
                    const int p = base + u * bs;
                    if (p < end) {
                        float f[P];
                        bw::smx::unpack(v[u], f);
#pragma unroll
                        for (int i = 0; i < P; ++i) thread_sum += bw::smx::fast_exp<T>(f[i] - row_max);
                    }
                }
            }
            bw::smx::for_each_edge(span, tid, bs - 1, [&](int k) {
                float f[P];
                bw::smx::unpack(bw::smx::load_partial<T, P>(xr, span, k, bw::neg_inf()), f);
#pragma unroll
                for (int i = 0; i < P; ++i) thread_sum += bw::smx::fast_exp<T>(f[i] - row_max);
            });
            row_sum = bw::block_allreduce<bw::SumOp>(thread_sum);
        }
        // Last pass: y.
        const float k = Forward<Algo, T>::finish(row_sum);
        T* yr = bw::smx::row_at(y, row, y_stride);
#pragma unroll 1
        for (int base = first; base < end; base += bs * U) {
            PackT v[U];
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const int p = base + u * bs;
                if (p < end) v[u] = Cached ? cache[p] : bw::smx::load_whole<T, P>(xr, span, p);
            }
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const int p = base + u * bs;
                if (p < end) {
                    float f[P];
                    bw::smx::unpack(v[u], f);
#pragma unroll
                    for (int i = 0; i < P; ++i) f[i] = Forward<Algo, T>::apply(f[i], row_max, k);
                    bw::smx::store_whole<T, P>(yr, span, p, bw::smx::pack_from<T, P>(f));
                }
            }
        }
        bw::smx::for_each_edge(span, tid, bs - 1, [&](int e) {
            float f[P];
            bw::smx::unpack(bw::smx::load_partial<T, P>(xr, span, e, bw::neg_inf()), f);
#pragma unroll
            for (int i = 0; i < P; ++i) f[i] = Forward<Algo, T>::apply(f[i], row_max, k);
            bw::smx::store_partial<T, P>(yr, span, e, bw::smx::pack_from<T, P>(f));
        });
    }
}

// =============================================================================================
// Forward, registers tier: one block of B threads per row, the row in the block's registers.
// Thread t holds packs t, t + B, ..., t + (NP - 1) B, loaded all at once (NP 16-byte loads in
// flight a thread, the whole row in flight a block), kept in storage format. (max, sum) come from
// the online merge in one reduction; the store pass reads the registers again. No shared-memory
// cache and no loop over batches: for long rows this is what the shared-memory tier lacks
// (float32 rows of 16384-32768 columns ran at 79-85% of copy there on an H200). The partial head
// and tail packs go to threads 0 and B - 1, read from global memory twice.
// =============================================================================================

template <typename T, int Algo, int P, int NP, int B>
__global__ void __launch_bounds__(B, 1)
softmax_rows(const T* __restrict__ x, i64 x_stride, T* __restrict__ y, i64 y_stride, i64 rows,
             int cols) {
    typedef Pack<T, P> PackT;
    const int tid = threadIdx.x;
    for (i64 row = blockIdx.x; row < rows; row += gridDim.x) {
        const T* xr = bw::smx::row_at(x, row, x_stride);
        const bw::smx::RowSpan<P> span = bw::smx::row_span<T, P>(xr, cols);
        PackT v[NP];
#pragma unroll
        for (int n = 0; n < NP; ++n) {
            if (span.whole(tid + n * B)) v[n] = bw::smx::load_whole<T, P>(xr, span, tid + n * B);
        }
        MD md = bw::smx::md_identity();
#pragma unroll
        for (int n = 0; n < NP; ++n) {
            if (span.whole(tid + n * B)) {
                float f[P];
                bw::smx::unpack(v[n], f);
                md = bw::smx::md_add<T, P>(md, f);
            }
        }
        bw::smx::for_each_edge(span, tid, B - 1, [&](int k) {
            float f[P];
            bw::smx::unpack(bw::smx::load_partial<T, P>(xr, span, k, bw::neg_inf()), f);
            md = bw::smx::md_add<T, P>(md, f);
        });
        md = bw::smx::block_allreduce_md<T>(md);
        const float k = Forward<Algo, T>::finish(md.d);
        T* yr = bw::smx::row_at(y, row, y_stride);
#pragma unroll
        for (int n = 0; n < NP; ++n) {
            if (span.whole(tid + n * B)) {
                float f[P];
                bw::smx::unpack(v[n], f);
#pragma unroll
                for (int i = 0; i < P; ++i) f[i] = Forward<Algo, T>::apply(f[i], md.m, k);
                bw::smx::store_whole<T, P>(yr, span, tid + n * B, bw::smx::pack_from<T, P>(f));
            }
        }
        bw::smx::for_each_edge(span, tid, B - 1, [&](int e) {
            float f[P];
            bw::smx::unpack(bw::smx::load_partial<T, P>(xr, span, e, bw::neg_inf()), f);
#pragma unroll
            for (int i = 0; i < P; ++i) f[i] = Forward<Algo, T>::apply(f[i], md.m, k);
            bw::smx::store_partial<T, P>(yr, span, e, bw::smx::pack_from<T, P>(f));
        });
    }
}

// =============================================================================================
// Forward, online warp variant: a thread group per row, no register cache. Pass 1 reads the row
// once for (m, d), the group merges with shuffles, pass 2 reads it again (from L1/L2) and stores.
// =============================================================================================

template <typename T, int Algo, int P, int G>
__global__ void __launch_bounds__(BW_SOFTMAX_WARP_BLOCK)
softmax_warp_online(const T* __restrict__ x, i64 x_stride, T* __restrict__ y, i64 y_stride,
                    i64 rows, int cols) {
    typedef Pack<T, P> PackT;
    typedef bw::smx::RowSpan<P> Span;
    constexpr int U = 4;
    GroupRows<G, 1> walk;
    for (; walk.first < rows; walk.first += walk.step) {
        const i64 row = walk.first + walk.offset;
        const bool live = row < rows;
        const T* xr = bw::smx::row_at(x, live ? row : 0, x_stride);
        const Span span = live ? bw::smx::row_span<T, P>(xr, cols) : Span{0, 0};
        const int first = span.first_whole() + walk.lane;
        const int end = span.end_whole();
        MD md = bw::smx::md_identity();
#pragma unroll 1
        for (int base = first; base < end; base += G * U) {
            PackT v[U];
#pragma unroll
            for (int u = 0; u < U; ++u) {
                if (base + u * G < end) v[u] = bw::smx::load_whole<T, P>(xr, span, base + u * G);
            }
#pragma unroll
            for (int u = 0; u < U; ++u) {
                if (base + u * G < end) {
                    float f[P];
                    bw::smx::unpack(v[u], f);
                    md = bw::smx::md_add<T, P>(md, f);
                }
            }
        }
        bw::smx::for_each_edge(span, walk.lane, G - 1, [&](int k) {
            float f[P];
            bw::smx::unpack(bw::smx::load_partial<T, P>(xr, span, k, bw::neg_inf()), f);
            md = bw::smx::md_add<T, P>(md, f);
        });
        md = bw::smx::warp_allreduce_md<T, G>(md);
        const float k = Forward<Algo, T>::finish(md.d);
        T* yr = bw::smx::row_at(y, live ? row : 0, y_stride);
#pragma unroll 1
        for (int base = first; base < end; base += G * U) {
            PackT v[U];
#pragma unroll
            for (int u = 0; u < U; ++u) {
                if (base + u * G < end) v[u] = bw::smx::load_whole<T, P>(xr, span, base + u * G);
            }
#pragma unroll
            for (int u = 0; u < U; ++u) {
                if (base + u * G < end) {
                    float f[P];
                    bw::smx::unpack(v[u], f);
#pragma unroll
                    for (int i = 0; i < P; ++i) f[i] = Forward<Algo, T>::apply(f[i], md.m, k);
                    bw::smx::store_whole<T, P>(yr, span, base + u * G, bw::smx::pack_from<T, P>(f));
                }
            }
        }
        bw::smx::for_each_edge(span, walk.lane, G - 1, [&](int e) {
            float f[P];
            bw::smx::unpack(bw::smx::load_partial<T, P>(xr, span, e, bw::neg_inf()), f);
#pragma unroll
            for (int i = 0; i < P; ++i) f[i] = Forward<Algo, T>::apply(f[i], md.m, k);
            bw::smx::store_partial<T, P>(yr, span, e, bw::smx::pack_from<T, P>(f));
        });
    }
}

// =============================================================================================
// Backward, warp tier: y and dy live in registers between the reduction and the store, in their
// storage type (raw 16-byte packs), converted to float once for the sum and again for dx: half
// the registers of floats for half and bfloat16. Against floats with the same 16-byte loads
// (H200): even for half, bfloat16 3% faster at 512 columns and 14% at 1024
// (docs/softmax.md). The partial head and tail packs are read again by their owner lane.
// =============================================================================================

template <typename T, int Algo, int P, int NP, int G, int R>
__global__ void __launch_bounds__(BW_SOFTMAX_WARP_BLOCK)
softmax_grad_warp(const T* __restrict__ y, i64 y_stride, const T* __restrict__ dy, i64 dy_stride,
                  T* __restrict__ dx, i64 dx_stride, i64 rows, int cols) {
    static_assert(G >= 1 && G <= 32 && (G & (G - 1)) == 0, "G: a power of two up to 32");
    typedef Pack<T, P> PackT;
    typedef bw::smx::RowSpan<P> Span;
    constexpr bool kUniform = NP == 1;  // as in softmax_warp: one pack a lane, partial or not, alike
    GroupRows<G, R> walk;
    for (; walk.first < rows; walk.first += walk.step) {
        PackT buf_y[R][NP];
        PackT buf_dy[R][NP];
        float row_sum[R];
        Span span[R];
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const i64 row = walk.first + walk.offset + r;
            const bool live = row < rows;
            const T* yr = bw::smx::row_at(y, live ? row : 0, y_stride);
            const T* dyr = bw::smx::row_at(dy, live ? row : 0, dy_stride);
            span[r] = live ? bw::smx::row_span<T, P>(yr, cols) : Span{0, 0};
#pragma unroll
            for (int p = 0; p < NP; ++p) {
                const int pack = p * G + walk.lane;
                if constexpr (kUniform) {
                    const bool in = pack < span[r].packs();
                    buf_y[r][p] = in ? bw::smx::load_masked<T, P>(yr, span[r], pack, 0.0f) : bw::smx::pack_fill<T, P>(0.0f);
                    buf_dy[r][p] = in ? bw::smx::load_masked<T, P>(dyr, span[r], pack, 0.0f) : bw::smx::pack_fill<T, P>(0.0f);
                } else if (span[r].whole(pack)) {
                    buf_y[r][p] = bw::smx::load_whole<T, P>(yr, span[r], pack);
                    buf_dy[r][p] = bw::smx::load_whole<T, P>(dyr, span[r], pack);
                }
            }
        }
#pragma unroll
        for (int r = 0; r < R; ++r) {
            row_sum[r] = 0.0f;
#pragma unroll
            for (int p = 0; p < NP; ++p) {
                if (kUniform || span[r].whole(p * G + walk.lane)) {
                    float fy[P], fdy[P];
                    bw::smx::unpack_words(buf_y[r][p], fy);
                    bw::smx::unpack_words(buf_dy[r][p], fdy);
#pragma unroll
                    for (int i = 0; i < P; ++i) row_sum[r] += Backward<Algo, T>::term(fy[i], fdy[i]);
                }
            }
            const i64 row = walk.first + walk.offset + r;
            const T* yr = bw::smx::row_at(y, row, y_stride);
            const T* dyr = bw::smx::row_at(dy, row, dy_stride);
            if constexpr (!kUniform) bw::smx::for_each_edge(span[r], walk.lane, G - 1, [&](int k) {
                float fy[P], fdy[P];
                bw::smx::unpack_words(bw::smx::load_partial<T, P>(yr, span[r], k, 0.0f), fy);
                bw::smx::unpack_words(bw::smx::load_partial<T, P>(dyr, span[r], k, 0.0f), fdy);
#pragma unroll
                for (int i = 0; i < P; ++i) row_sum[r] += Backward<Algo, T>::term(fy[i], fdy[i]);
            });
        }
#pragma unroll
        for (int r = 0; r < R; ++r) {
            row_sum[r] = bw::warp_allreduce<bw::SumOp, G>(row_sum[r]);
            const i64 row = walk.first + walk.offset + r;
            if (row >= rows) continue;
            T* dxr = bw::smx::row_at(dx, row, dx_stride);
#pragma unroll
            for (int p = 0; p < NP; ++p) {
                const int pack = p * G + walk.lane;
                if (kUniform ? pack < span[r].packs() : span[r].whole(pack)) {
                    float fy[P], fdy[P], f[P];
                    bw::smx::unpack_words(buf_y[r][p], fy);
                    bw::smx::unpack_words(buf_dy[r][p], fdy);
#pragma unroll
                    for (int i = 0; i < P; ++i) f[i] = Backward<Algo, T>::apply(fy[i], fdy[i], row_sum[r]);
                    if constexpr (kUniform) {
                        bw::smx::store_any<T, P>(dxr, span[r], pack, bw::smx::pack_from<T, P>(f));
                    } else {
                        bw::smx::store_whole<T, P>(dxr, span[r], pack, bw::smx::pack_from<T, P>(f));
                    }
                }
            }
            const T* yr = bw::smx::row_at(y, row, y_stride);
            const T* dyr = bw::smx::row_at(dy, row, dy_stride);
            if constexpr (!kUniform) bw::smx::for_each_edge(span[r], walk.lane, G - 1, [&](int e) {
                float fy[P], fdy[P];
                bw::smx::unpack_words(bw::smx::load_partial<T, P>(yr, span[r], e, 0.0f), fy);
                bw::smx::unpack_words(bw::smx::load_partial<T, P>(dyr, span[r], e, 0.0f), fdy);
#pragma unroll
                for (int i = 0; i < P; ++i) fy[i] = Backward<Algo, T>::apply(fy[i], fdy[i], row_sum[r]);
                bw::smx::store_partial<T, P>(dxr, span[r], e, bw::smx::pack_from<T, P>(fy));
            });
        }
    }
}

// The backward's partial head and tail packs of one row: their share of the sum (Sum), or their
// dx (store), by threads 0 and last.
template <typename T, int Algo, int P>
__device__ __forceinline__ float grad_edges_sum(const T* yr, const T* dyr, bw::smx::RowSpan<P> span, int me,
                                                int last, float sum) {
    bw::smx::for_each_edge(span, me, last, [&](int k) {
        float fy[P], fdy[P];
        bw::smx::unpack(bw::smx::load_partial<T, P>(yr, span, k, 0.0f), fy);
        bw::smx::unpack(bw::smx::load_partial<T, P>(dyr, span, k, 0.0f), fdy);
#pragma unroll
        for (int i = 0; i < P; ++i) sum += Backward<Algo, T>::term(fy[i], fdy[i]);
    });
    return sum;
}

template <typename T, int Algo, int P>
__device__ __forceinline__ void grad_edges_store(const T* yr, const T* dyr, T* dxr, bw::smx::RowSpan<P> span,
                                                 int me, int last, float row_sum) {
    bw::smx::for_each_edge(span, me, last, [&](int e) {
        float fy[P], fdy[P];
        bw::smx::unpack(bw::smx::load_partial<T, P>(yr, span, e, 0.0f), fy);
        bw::smx::unpack(bw::smx::load_partial<T, P>(dyr, span, e, 0.0f), fdy);
#pragma unroll
        for (int i = 0; i < P; ++i) fy[i] = Backward<Algo, T>::apply(fy[i], fdy[i], row_sum);
        bw::smx::store_partial<T, P>(dxr, span, e, bw::smx::pack_from<T, P>(fy));
    });
}

// =============================================================================================
// Backward, block tiers: one block per row; Cached keeps y and dy (as T) in shared memory, dy's
// packs after y's (at half the dynamic shared memory: the host sizes it for the longest span).
// =============================================================================================

template <typename T, int Algo, int P, bool Cached>
__global__ void __launch_bounds__(1024)
softmax_grad_block(const T* __restrict__ y, i64 y_stride, const T* __restrict__ dy, i64 dy_stride,
                   T* __restrict__ dx, i64 dx_stride, i64 rows, int cols) {
    typedef Pack<T, P> PackT;
    constexpr int U = P == 1 ? 8 / sizeof(T) : 2;
    extern __shared__ __align__(16) unsigned char softmax_smem[];
    unsigned smem_bytes;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(smem_bytes));
    PackT* cache_y = reinterpret_cast<PackT*>(softmax_smem);
    PackT* cache_dy = cache_y + smem_bytes / (2 * sizeof(PackT));
    const int tid = threadIdx.x;
    const int bs = blockDim.x;
    for (i64 row = blockIdx.x; row < rows; row += gridDim.x) {
        const T* yr = bw::smx::row_at(y, row, y_stride);
        const T* dyr = bw::smx::row_at(dy, row, dy_stride);
        const bw::smx::RowSpan<P> span = bw::smx::row_span<T, P>(yr, cols);
        const int first = span.first_whole() + tid;
        const int end = span.end_whole();
        float thread_sum = 0.0f;
#pragma unroll 1
        for (int base = first; base < end; base += bs * U) {
            PackT vy[U], vdy[U];
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const int p = base + u * bs;
                if (p < end) {
                    vy[u] = bw::smx::load_whole<T, P>(yr, span, p);
                    vdy[u] = bw::smx::load_whole<T, P>(dyr, span, p);
                }
            }
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const int p = base + u * bs;
                if (p < end) {
                    if (Cached) {
                        cache_y[p] = vy[u];
                        cache_dy[p] = vdy[u];
                    }
                    float fy[P], fdy[P];
                    bw::smx::unpack(vy[u], fy);
                    bw::smx::unpack(vdy[u], fdy);
#pragma unroll
                    for (int i = 0; i < P; ++i) thread_sum += Backward<Algo, T>::term(fy[i], fdy[i]);
                }
            }
        }
        thread_sum = grad_edges_sum<T, Algo, P>(yr, dyr, span, tid, bs - 1, thread_sum);
        const float row_sum = bw::block_allreduce<bw::SumOp>(thread_sum);
        T* dxr = bw::smx::row_at(dx, row, dx_stride);
#pragma unroll 1
        for (int base = first; base < end; base += bs * U) {
            PackT vy[U], vdy[U];
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const int p = base + u * bs;
                if (p < end) {
                    vy[u] = Cached ? cache_y[p] : bw::smx::load_whole<T, P>(yr, span, p);
                    vdy[u] = Cached ? cache_dy[p] : bw::smx::load_whole<T, P>(dyr, span, p);
                }
            }
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const int p = base + u * bs;
                if (p < end) {
                    float fy[P], fdy[P];
                    bw::smx::unpack(vy[u], fy);
                    bw::smx::unpack(vdy[u], fdy);
#pragma unroll
                    for (int i = 0; i < P; ++i) fy[i] = Backward<Algo, T>::apply(fy[i], fdy[i], row_sum);
                    bw::smx::store_whole<T, P>(dxr, span, p, bw::smx::pack_from<T, P>(fy));
                }
            }
        }
        grad_edges_store<T, Algo, P>(yr, dyr, dxr, span, tid, bs - 1, row_sum);
    }
}

// =============================================================================================
// The two passes of softmax_grad_partial over the whole packs [begin, end) of a row's span that a
// thread owns (begin, begin + bs, ...), U at a time: Sum adds y * dy (or dy) to `sum`, keeping the
// packs in the cache where Cache; Store writes dx, reading the packs from the cache where Cache,
// else again from global memory.
template <typename T, int Algo, int P, int U, bool Cache>
__device__ __forceinline__ float grad_sum_range(const T* yr, const T* dyr, bw::smx::RowSpan<P> span,
                                                Pack<T, P>* cache_y, Pack<T, P>* cache_dy, int begin, int end,
                                                int bs, float sum) {
#pragma unroll 1
    for (int base = begin; base < end; base += bs * U) {
        Pack<T, P> vy[U], vdy[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int p = base + u * bs;
            if (p < end) {
                vy[u] = bw::smx::load_whole<T, P>(yr, span, p);
                vdy[u] = bw::smx::load_whole<T, P>(dyr, span, p);
            }
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int p = base + u * bs;
            if (p < end) {
                if (Cache) {
                    cache_y[p] = vy[u];
                    cache_dy[p] = vdy[u];
                }
                float fy[P], fdy[P];
                bw::smx::unpack(vy[u], fy);
                bw::smx::unpack(vdy[u], fdy);
#pragma unroll
                for (int i = 0; i < P; ++i) sum += Backward<Algo, T>::term(fy[i], fdy[i]);
            }
        }
    }
    return sum;
}

template <typename T, int Algo, int P, int U, bool Cache>
__device__ __forceinline__ void grad_store_range(const T* yr, const T* dyr, bw::smx::RowSpan<P> span,
                                                 const Pack<T, P>* cache_y, const Pack<T, P>* cache_dy, T* dxr,
                                                 int begin, int end, int bs, float row_sum) {
#pragma unroll 1
    for (int base = begin; base < end; base += bs * U) {
        Pack<T, P> vy[U], vdy[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int p = base + u * bs;
            if (p < end) {
                vy[u] = Cache ? cache_y[p] : bw::smx::load_whole<T, P>(yr, span, p);
                vdy[u] = Cache ? cache_dy[p] : bw::smx::load_whole<T, P>(dyr, span, p);
            }
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int p = base + u * bs;
            if (p < end) {
                float fy[P], fdy[P];
                bw::smx::unpack(vy[u], fy);
                bw::smx::unpack(vdy[u], fdy);
#pragma unroll
                for (int i = 0; i < P; ++i) fy[i] = Backward<Algo, T>::apply(fy[i], fdy[i], row_sum);
                bw::smx::store_whole<T, P>(dxr, span, p, bw::smx::pack_from<T, P>(fy));
            }
        }
    }
}

// Backward, shared-memory tier for rows whose y and dy do not fit in a block's shared memory, of
// whole packs only: the first packs (as many as the launch's dynamic shared memory holds) are cached,
// the others read again through L2. On an H200 a float32 row of 32768 columns (256 KiB of y and
// dy) re-read whole by the uncached tier moved 1.46x its bytes from DRAM (62-80% of copy);
// caching 7/8 of it leaves an L2 footprint the second pass finds (88%).
template <typename T, int Algo, int P>
__global__ void __launch_bounds__(1024, 1)
softmax_grad_partial(const T* __restrict__ y, i64 y_stride, const T* __restrict__ dy, i64 dy_stride,
                     T* __restrict__ dx, i64 dx_stride, i64 rows, int cols) {
    typedef Pack<T, P> PackT;
    constexpr int U = P == 1 ? 8 / sizeof(T) : 2;
    extern __shared__ __align__(16) unsigned char softmax_smem[];
    unsigned smem_bytes;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(smem_bytes));
    const int capacity = static_cast<int>(smem_bytes / (2 * sizeof(PackT)));
    PackT* cache_y = reinterpret_cast<PackT*>(softmax_smem);
    PackT* cache_dy = cache_y + capacity;
    const int tid = threadIdx.x;
    const int bs = blockDim.x;
    for (i64 row = blockIdx.x; row < rows; row += gridDim.x) {
        const T* yr = bw::smx::row_at(y, row, y_stride);
        const T* dyr = bw::smx::row_at(dy, row, dy_stride);
        const bw::smx::RowSpan<P> span = bw::smx::row_span<T, P>(yr, cols);
        // Each pass walks the cached packs [0, cached_end), then the others from `rest`, in a loop
        // of its own: one loop deciding per pack needed more than the 64 registers 1024 threads
        // allow. This thread's packs are tid, tid + bs, ...; `rest` is its first one past the
        // cache. The host sends only rows of whole packs here (aligned starts, cols a multiple of
        // P): the head and tail code would take the loops past those 64 registers too.
        const int end = span.end_whole();
        const int cached_end = min(end, capacity);
        const int rest = tid + (max(cached_end - tid, 0) + bs - 1) / bs * bs;
        float thread_sum = grad_sum_range<T, Algo, P, U, true>(yr, dyr, span, cache_y, cache_dy, tid, cached_end, bs,
                                                               0.0f);
        thread_sum = grad_sum_range<T, Algo, P, U, false>(yr, dyr, span, cache_y, cache_dy, rest, end, bs, thread_sum);
        const float row_sum = bw::block_allreduce<bw::SumOp>(thread_sum);
        T* dxr = bw::smx::row_at(dx, row, dx_stride);
        grad_store_range<T, Algo, P, U, true>(yr, dyr, span, cache_y, cache_dy, dxr, tid, cached_end, bs, row_sum);
        grad_store_range<T, Algo, P, U, false>(yr, dyr, span, cache_y, cache_dy, dxr, rest, end, bs, row_sum);
    }
}

// =============================================================================================
// Cluster tier (sm_90 and later): one thread-block cluster of C blocks per row, for rows whose
// cache leaves the shared-memory tier at most one block an SM, or does not fit at all. Block r
// of a cluster caches packs [r S, r S + S) of the row's span (S = ceil(packs / C)) in its shared
// memory, loaded with cp.async (every load of the slice in flight at once, no registers held);
// each block posts its (m, d), or the backward's sum, into every peer's mailbox in distributed
// shared memory and waits for its own (cluster_mailbox.cuh), then writes its slice from its
// cache. The forward takes its slice's max and then its sum of exp(x - m) in two passes over the
// cache (cheaper than rescaling a running sum at every pack, since the slice is cached anyway). The row crosses DRAM once each way, as in the shared-memory tier, but a block holds 1/C
// of it: several blocks share an SM, so one row's reduction overlaps the next rows' loads instead
// of leaving the SM idle. No barrier over the cluster stands between rows or before a block
// leaves, so a block's share of the SM goes to the next cluster as soon as its stores are issued.
// Cache entry i of a slice is always thread i % blockDim's, in every pass and every row, so the
// only block barriers are the reductions'.
// The partial head and tail packs are cached like the others, with the neutral value outside the
// row (-inf for x, 0 for y and dy), and stored element by element.
// Built empty below sm_90, where the plan never chooses it (DeviceQueries.clusters).
// =============================================================================================

// The largest cluster every GPU with clusters launches (dispatch.PORTABLE_CLUSTER).
constexpr int kPortableCluster = 8;

namespace bw {
namespace smx {

// Pack k of the span into shared memory at `slot`: whole 16-byte packs by cp.async (completed by
// bw::tile::wait_copies), partial ones (and all packs of P = 1) through registers with `fill`
// outside the row.
template <typename T, int P>
__device__ __forceinline__ void copy_pack(Pack<T, P>* slot, const T* __restrict__ row, RowSpan<P> span, int k,
                                          float fill) {
    if constexpr (P * sizeof(T) == 16) {
        if (span.whole(k)) {
            bw::tile::copy16_async(slot, reinterpret_cast<const Pack<T, P>*>(row - span.lo) + k);
            return;
        }
    }
    *slot = span.whole(k) ? load_whole<T, P>(row, span, k) : load_partial<T, P>(row, span, k, fill);
}

// This block's slice [lo, hi) of a span of `packs` packs split over C blocks.
template <int C>
__device__ __forceinline__ void cluster_slice(int packs, int rank, int& lo, int& hi) {
    const int share = (packs + C - 1) / C;
    lo = min(packs, rank * share);
    hi = min(packs, lo + share);
}

// Which pack of a block's slice [lo, lo + entries) its cache entry e stands for: lo + e, turned by
// one pack (the last entry wrapping round to lo) where pack lo starts a 32-byte sector, so that a
// warp's 32 consecutive 16-byte packs start 16 bytes into one. Warps whose packs start on a sector
// boundary took twice the L2 read sectors for the same DRAM bytes: rows of 303872 bytes (Qwen2's
// 151936 half columns), whose slices all start on a boundary, ran 4-10 points below their
// neighbours (docs/softmax.md, "Slices turned by a pack"). The backward turns only slices of an
// even number of packs, which all start at the same offset within a sector; turning the others
// too cost it about a point, while the forward gained.
struct SliceOrder {
    int lo, entries, turn;
    __device__ __forceinline__ int pack(int e) const {
        const int k = e + turn;
        return lo + (k < entries ? k : k - entries);
    }
};

template <typename T, int P>
__device__ __forceinline__ SliceOrder slice_order(const T* row, RowSpan<P> span, int lo, int entries,
                                                  bool odd_slices_too) {
    int turn = 0;
    if constexpr (P * sizeof(T) == 16) {
        const unsigned long long first = reinterpret_cast<unsigned long long>(row - span.lo) + 16ull * lo;
        const bool turnable = entries > 1 && (odd_slices_too || entries % 2 == 0);
        turn = turnable && first % 32 == 0 ? 1 : 0;
    }
    return SliceOrder{lo, entries, turn};
}

}  // namespace smx
}  // namespace bw

// R > 0: each thread keeps the first R of its entries in registers (entry t + j blockDim in
// held[j]) and only the rest in shared memory, so a slice whose cache alone would leave one block
// an SM leaves two (dispatch.CLUSTER_HELD_SHAPES).
template <typename T, int Algo, int P, int C, int R>
__global__ void __launch_bounds__(1024) BW_CLUSTER_DIMS(C)
softmax_cluster(const T* __restrict__ x, i64 x_stride, T* __restrict__ y, i64 y_stride, i64 rows, int cols) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    typedef Pack<T, P> PackT;
    // float32 softmax keeps exp(x - m) where x was (held or cached): its accurate expf is then
    // taken once an element, not again in the store, which only scales. 16-bit packs would round
    // the exp to 16 bits; log-softmax's store takes no exp.
    constexpr bool kKeepExp = Algo == bw::smx::kSoftmax && sizeof(T) == 4;
    extern __shared__ __align__(16) unsigned char softmax_smem[];
    PackT* cache = reinterpret_cast<PackT*>(softmax_smem);  // entry e >= R blockDim at cache[e - R blockDim]
    __shared__ bw::cluster::Mailbox<float2, C> box;
    const int tid = threadIdx.x;
    const int bs = blockDim.x;
    const int rank = static_cast<int>(blockIdx.x % C);
    const int cached_from = R * bs;
    PackT held[R > 0 ? R : 1];
    bw::cluster::open(box);
    bool peers_ready = false;
    int round = 0;
    for (i64 row = blockIdx.x / C; row < rows; row += gridDim.x / C, ++round) {
        const T* xr = bw::smx::row_at(x, row, x_stride);
        const bw::smx::RowSpan<P> span = bw::smx::row_span<T, P>(xr, cols);
        int lo, hi;
        bw::smx::cluster_slice<C>(span.packs(), rank, lo, hi);
        const int entries = hi - lo;
        const bw::smx::SliceOrder order = bw::smx::slice_order<T, P>(xr, span, lo, entries, true);
#pragma unroll
        for (int j = 0; j < R; ++j) {
            const int e = tid + j * bs;
            held[j] = e < entries ? bw::smx::load_masked<T, P>(xr, span, order.pack(e), bw::neg_inf())
                                  : bw::smx::pack_fill<T, P>(bw::neg_inf());
        }
#pragma unroll 4
        for (int e = cached_from + tid; e < entries; e += bs)
            bw::smx::copy_pack<T, P>(&cache[e - cached_from], xr, span, order.pack(e), bw::neg_inf());
        if (tid == 0) bw::cluster::expect(box, round);
        // The slice's max first, then its sum of exp(x - m): two passes over the cache instead of
        // the online rescale a pack, and one max for the whole block, so the partials merge with
        // plain additions.
        PackT top = bw::smx::pack_fill<T, P>(bw::neg_inf());
#pragma unroll
        for (int j = 0; j < R; ++j) top = bw::smx::max_packs<T, P>(top, held[j]);
        bw::tile::wait_copies();
        for (int e = cached_from + tid; e < entries; e += bs)
            top = bw::smx::max_packs<T, P>(top, cache[e - cached_from]);
        const float m = bw::block_allreduce<bw::MaxOp>(bw::smx::pack_max<T, P>(top));
        const float shift = m == bw::neg_inf() ? 0.0f : m;  // a slice of -inf (or none) sums to 0
        float d = 0.0f;
        auto add_exps = [&](PackT& v) {
            float f[P];
            bw::smx::unpack(v, f);
#pragma unroll
            for (int i = 0; i < P; ++i) {
                f[i] = bw::smx::fast_exp<T>(f[i] - shift);
                d += f[i];
            }
            if constexpr (kKeepExp) v = bw::smx::pack_from<T, P>(f);
        };
#pragma unroll
        for (int j = 0; j < R; ++j) add_exps(held[j]);
        for (int e = cached_from + tid; e < entries; e += bs) add_exps(cache[e - cached_from]);
        d = bw::block_allreduce<bw::SumOp>(d);
        if (!peers_ready) {
            bw::cluster::wait_peers_ready();
            peers_ready = true;
        }
        if (tid < C) bw::cluster::post(box, round, rank, tid, make_float2(m, d));
        // The row's (max, sum) from the C parts, part r in lane r of each group of C lanes.
        const float2 part = bw::cluster::wait(box, round)[tid % C];
        const float row_max = bw::warp_allreduce<bw::MaxOp, C>(part.x);
        const float row_sum = bw::warp_allreduce<bw::SumOp, C>(part.y * bw::smx::md_scale<T>(part.x, row_max));
        const float k_row = Forward<Algo, T>::finish(row_sum);
        // kKeepExp: the cache holds exp(x - m); exp(m - row_max) / row_sum turns it into y.
        const float scale = kKeepExp ? bw::smx::md_scale<T>(m, row_max) * k_row : 0.0f;
        T* yr = bw::smx::row_at(y, row, y_stride);
        auto store = [&](int e, const PackT& v) {
            float f[P];
            bw::smx::unpack(v, f);
#pragma unroll
            for (int i = 0; i < P; ++i)
                f[i] = kKeepExp ? f[i] * scale : Forward<Algo, T>::apply(f[i], row_max, k_row);
            bw::smx::store_any<T, P>(yr, span, order.pack(e), bw::smx::pack_from<T, P>(f));
        };
#pragma unroll
        for (int j = 0; j < R; ++j) {
            const int e = tid + j * bs;
            if (e < entries) store(e, held[j]);
        }
        for (int e = cached_from + tid; e < entries; e += bs) store(e, cache[e - cached_from]);
    }
    if (!peers_ready) bw::cluster::wait_peers_ready();
#endif
}

// R > 0: each thread keeps the first R of its entries of y and of dy in registers (entry
// t + j blockDim in held_y[j], held_dy[j]) and only the rest in shared memory, so a slice whose
// cache alone would leave one block an SM leaves two (dispatch.CLUSTER_HELD_SHAPES).
template <typename T, int Algo, int P, int C, int R>
__global__ void __launch_bounds__(1024) BW_CLUSTER_DIMS(C)
softmax_grad_cluster(const T* __restrict__ y, i64 y_stride, const T* __restrict__ dy, i64 dy_stride,
                     T* __restrict__ dx, i64 dx_stride, i64 rows, int cols) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    typedef Pack<T, P> PackT;
    extern __shared__ __align__(16) unsigned char softmax_smem[];
    unsigned smem_bytes;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(smem_bytes));
    // entry e >= R blockDim at cache_y[e - R blockDim], cache_dy[e - R blockDim]
    PackT* cache_y = reinterpret_cast<PackT*>(softmax_smem);
    PackT* cache_dy = cache_y + smem_bytes / (2 * sizeof(PackT));
    __shared__ bw::cluster::Mailbox<float, C> box;
    const int tid = threadIdx.x;
    const int bs = blockDim.x;
    const int rank = static_cast<int>(blockIdx.x % C);
    const int cached_from = R * bs;
    PackT held_y[R > 0 ? R : 1], held_dy[R > 0 ? R : 1];
    // Clusters of 16 (kStride) load each row's slices while they store the row before; the host's
    // plan gives them a grid of the clusters the GPU holds at once where striding so wins
    // (dispatch.cluster_strides), else a cluster a row. The others load each row on their own.
    // (Choosing at run time, from the grid, kept both paths in one kernel: the bfloat16 held
    // sixteenths then spilled.)
    constexpr bool kStride = C > kPortableCluster;
    bw::cluster::open(box);
    bool peers_ready = false;
    int round = 0;
    const i64 step = gridDim.x / C;
    i64 row = blockIdx.x / C;
    // This block's slices of row r: y's and dy's rows, the span of packs covering them and the
    // slice [lo, lo + entries) of it.
    struct Slice {
        const T* y;
        const T* dy;
        bw::smx::RowSpan<P> span;
        int lo, entries;
        bw::smx::SliceOrder order;
    };
    auto slice_of = [&](i64 r) {
        Slice s;
        s.y = bw::smx::row_at(y, r, y_stride);
        s.dy = bw::smx::row_at(dy, r, dy_stride);
        s.span = bw::smx::row_span<T, P>(s.y, cols);
        int hi;
        bw::smx::cluster_slice<C>(s.span.packs(), rank, s.lo, hi);
        s.entries = hi - s.lo;
        s.order = bw::smx::slice_order<T, P>(s.y, s.span, s.lo, s.entries, false);
        return s;
    };
    // Entry tid + j blockDim of a slice into held register j, and entry e >= R blockDim into the
    // cache (0 outside the slice).
    auto hold = [&](int j, const Slice& s) {
        const int e = tid + j * bs;
        held_y[j] = e < s.entries ? bw::smx::load_masked<T, P>(s.y, s.span, s.order.pack(e), 0.0f) : bw::smx::pack_fill<T, P>(0.0f);
        held_dy[j] = e < s.entries ? bw::smx::load_masked<T, P>(s.dy, s.span, s.order.pack(e), 0.0f) : bw::smx::pack_fill<T, P>(0.0f);
    };
    auto cache_entry = [&](int e, const Slice& s) {
        bw::smx::copy_pack<T, P>(&cache_y[e - cached_from], s.y, s.span, s.order.pack(e), 0.0f);
        bw::smx::copy_pack<T, P>(&cache_dy[e - cached_from], s.dy, s.span, s.order.pack(e), 0.0f);
    };
    auto load = [&](const Slice& s) {
#pragma unroll
        for (int j = 0; j < R; ++j) hold(j, s);
#pragma unroll 4
        for (int e = cached_from + tid; e < s.entries; e += bs) cache_entry(e, s);
    };
    if (kStride && row < rows) load(slice_of(row));
    for (; row < rows; row += step, ++round) {
        const Slice here = slice_of(row);
        const bw::smx::RowSpan<P> span = here.span;
        const int entries = here.entries;
        if (!kStride) load(here);
        if (tid == 0) bw::cluster::expect(box, round);
        float thread_sum = 0.0f;
#pragma unroll
        for (int j = 0; j < R; ++j) {
            float fy[P], fdy[P];
            bw::smx::unpack(held_y[j], fy);
            bw::smx::unpack(held_dy[j], fdy);
#pragma unroll
            for (int i = 0; i < P; ++i) thread_sum += Backward<Algo, T>::term(fy[i], fdy[i]);
        }
        bw::tile::wait_copies();
        for (int e = cached_from + tid; e < entries; e += bs) {
            float fy[P], fdy[P];
            bw::smx::unpack(cache_y[e - cached_from], fy);
            bw::smx::unpack(cache_dy[e - cached_from], fdy);
#pragma unroll
            for (int i = 0; i < P; ++i) thread_sum += Backward<Algo, T>::term(fy[i], fdy[i]);
        }
        const float block_sum = bw::block_allreduce<bw::SumOp>(thread_sum);
        if (!peers_ready) {
            bw::cluster::wait_peers_ready();
            peers_ready = true;
        }
        if (tid < C) bw::cluster::post(box, round, rank, tid, block_sum);
        const float* parts = bw::cluster::wait(box, round);
        float total = 0.0f;
#pragma unroll
        for (int r = 0; r < C; ++r) total += parts[r];
        T* dxr = bw::smx::row_at(dx, row, dx_stride);
        auto store = [&](int k, const PackT& vy, const PackT& vdy) {
            float fy[P], fdy[P];
            bw::smx::unpack(vy, fy);
            bw::smx::unpack(vdy, fdy);
#pragma unroll
            for (int i = 0; i < P; ++i) fy[i] = Backward<Algo, T>::apply(fy[i], fdy[i], total);
            bw::smx::store_any<T, P>(dxr, span, k, bw::smx::pack_from<T, P>(fy));
        };
        if constexpr (kStride) {
            // The next row's slices, entry by entry as this row's store frees them: entry e is
            // thread e % blockDim's in every row, so no barrier comes between.
            const bool more = row + step < rows;
            Slice next = slice_of(more ? row + step : row);
            if (!more) next.entries = 0;
            // Held entries: each register takes the next row's pack as soon as its pack is stored.
#pragma unroll
            for (int j = 0; j < R; ++j) {
                const int e = tid + j * bs;
                if (e < entries) store(here.order.pack(e), held_y[j], held_dy[j]);
                hold(j, next);
            }
            int e = cached_from + tid;
            for (; e < entries; e += bs) {
                store(here.order.pack(e), cache_y[e - cached_from], cache_dy[e - cached_from]);
                if (e < next.entries) cache_entry(e, next);
            }
            for (; e < next.entries; e += bs) cache_entry(e, next);
        } else {
#pragma unroll
            for (int j = 0; j < R; ++j) {
                const int e = tid + j * bs;
                if (e < entries) store(here.order.pack(e), held_y[j], held_dy[j]);
            }
            for (int e = cached_from + tid; e < entries; e += bs)
                store(here.order.pack(e), cache_y[e - cached_from], cache_dy[e - cached_from]);
        }
    }
    if (!peers_ready) bw::cluster::wait_peers_ready();
#endif
}

// =============================================================================================
// Tile tier: short rows of dense tensors (row stride = cols for every tensor), whatever cols.
// A block takes `tile_rows` consecutive rows at a time: one contiguous run of memory, copied into
// shared memory in aligned 16-byte packs (row_tile.cuh), so rows of 31 or 197 half values move
// like a copy instead of with per-element edges. Groups of `group` lanes (a power of two up to
// 32) then work on one row each, straight from the copy: its max, its sum of exp, and the result
// written over the input in place; the tile goes back to global memory in packs. Shared-memory
// accesses are one element a lane, consecutive lanes on consecutive elements.
// E > 0: a row is at most E elements a lane (cols <= E * group), which the lane reads from the
// copies once and keeps in registers for every pass (the sums run in the same order: the same bits
// as E = 0, which reads the copies at each pass).
// The row loop runs the same number of times in every group of a block (rows past the tile
// compute nothing), because the groups of a warp shuffle together.
// =============================================================================================

#define BW_SOFTMAX_TILE_BLOCK 256

template <typename T, int Algo, int E>
__global__ void __launch_bounds__(BW_SOFTMAX_TILE_BLOCK)
softmax_tile(const T* __restrict__ x, i64 x_stride, T* __restrict__ y, i64 y_stride, i64 rows, int cols,
             int tile_rows, int group) {
    typedef Pack<T, 16 / sizeof(T)> PackT;
    extern __shared__ __align__(16) unsigned char softmax_smem[];
    PackT* cache = reinterpret_cast<PackT*>(softmax_smem);
    const int phase = bw::tile::phase_of(x);
    const bw::tile::Groups g(group);
    bw::tile::for_each_tile<T>(rows, cols, tile_rows, phase, [&](const bw::tile::Tile<T>& tile, i64, int n) {
        bw::tile::load(cache, x, tile);
        bw::tile::wait_copies();
        __syncthreads();
        T* cached = reinterpret_cast<T*>(cache) + tile.lead;
        for (int first = 0; first < n; first += g.slots) {
            const int r = first + g.slot;
            const int stop = r < n ? cols : 0;
            T* row = cached + static_cast<i64>(r < n ? r : 0) * cols;
            float m = bw::neg_inf();
            if constexpr (E > 0) {
                float v[E];
#pragma unroll
                for (int e = 0; e < E; ++e) {
                    const int c = g.lane + e * group;
                    v[e] = c < stop ? bw::to_float(row[c]) : bw::neg_inf();
                    m = fmaxf(m, v[e]);
                }
                m = bw::tile::group_allreduce<bw::MaxOp>(m, group);
                float s = 0.0f;
#pragma unroll
                for (int e = 0; e < E; ++e) {
                    if (g.lane + e * group < stop) s += bw::smx::fast_exp<T>(v[e] - m);
                }
                s = bw::tile::group_allreduce<bw::SumOp>(s, group);
                const float k = Forward<Algo, T>::finish(s);
#pragma unroll
                for (int e = 0; e < E; ++e) {
                    const int c = g.lane + e * group;
                    if (c < stop) row[c] = bw::from_float<T>(Forward<Algo, T>::apply(v[e], m, k));
                }
            } else {
                for (int c = g.lane; c < stop; c += group) m = fmaxf(m, bw::to_float(row[c]));
                m = bw::tile::group_allreduce<bw::MaxOp>(m, group);
                float s = 0.0f;
                for (int c = g.lane; c < stop; c += group) s += bw::smx::fast_exp<T>(bw::to_float(row[c]) - m);
                s = bw::tile::group_allreduce<bw::SumOp>(s, group);
                const float k = Forward<Algo, T>::finish(s);
                for (int c = g.lane; c < stop; c += group)
                    row[c] = bw::from_float<T>(Forward<Algo, T>::apply(bw::to_float(row[c]), m, k));
            }
        }
        __syncthreads();
        bw::tile::store(y, tile, cache);
        __syncthreads();  // the next tile's copies overwrite the cache
    });
}

// Backward: y and dy in two caches; dx is written over dy's copy, then stored.
template <typename T, int Algo, int E>
__global__ void __launch_bounds__(BW_SOFTMAX_TILE_BLOCK)
softmax_grad_tile(const T* __restrict__ y, i64 y_stride, const T* __restrict__ dy, i64 dy_stride,
                  T* __restrict__ dx, i64 dx_stride, i64 rows, int cols, int tile_rows, int group) {
    typedef Pack<T, 16 / sizeof(T)> PackT;
    extern __shared__ __align__(16) unsigned char softmax_smem[];
    PackT* cache_y = reinterpret_cast<PackT*>(softmax_smem);
    PackT* cache_dy = cache_y + bw::tile::packs_max(tile_rows * cols, 16 / sizeof(T));
    const int phase = bw::tile::phase_of(y);
    const bw::tile::Groups g(group);
    bw::tile::for_each_tile<T>(rows, cols, tile_rows, phase, [&](const bw::tile::Tile<T>& tile, i64, int n) {
        bw::tile::load(cache_y, y, tile);
        bw::tile::load(cache_dy, dy, tile);
        bw::tile::wait_copies();
        __syncthreads();
        const T* ys = reinterpret_cast<const T*>(cache_y) + tile.lead;
        T* dys = reinterpret_cast<T*>(cache_dy) + tile.lead;
        for (int first = 0; first < n; first += g.slots) {
            const int r = first + g.slot;
            const int stop = r < n ? cols : 0;
            const i64 at = static_cast<i64>(r < n ? r : 0) * cols;
            float s = 0.0f;
            if constexpr (E > 0) {
                float yv[E], dv[E];
#pragma unroll
                for (int e = 0; e < E; ++e) {
                    const int c = g.lane + e * group;
                    yv[e] = c < stop ? bw::to_float(ys[at + c]) : 0.0f;
                    dv[e] = c < stop ? bw::to_float(dys[at + c]) : 0.0f;
                }
#pragma unroll
                for (int e = 0; e < E; ++e) {
                    if (g.lane + e * group < stop) s += Backward<Algo, T>::term(yv[e], dv[e]);
                }
                s = bw::tile::group_allreduce<bw::SumOp>(s, group);
#pragma unroll
                for (int e = 0; e < E; ++e) {
                    const int c = g.lane + e * group;
                    if (c < stop) dys[at + c] = bw::from_float<T>(Backward<Algo, T>::apply(yv[e], dv[e], s));
                }
            } else {
                for (int c = g.lane; c < stop; c += group)
                    s += Backward<Algo, T>::term(bw::to_float(ys[at + c]), bw::to_float(dys[at + c]));
                s = bw::tile::group_allreduce<bw::SumOp>(s, group);
                for (int c = g.lane; c < stop; c += group)
                    dys[at + c] = bw::from_float<T>(Backward<Algo, T>::apply(bw::to_float(ys[at + c]),
                                                                             bw::to_float(dys[at + c]), s));
            }
        }
        __syncthreads();
        bw::tile::store(dx, tile, cache_dy);
        __syncthreads();
    });
}

// =============================================================================================
// Flat tier (backward): short rows of dense tensors (row stride = cols, cols >= a pack).
// A block takes `tile_rows` consecutive rows at a time, as the tile tier does, but its threads load
// the tile's aligned 16-byte packs of y and dy straight into registers (K of each a thread,
// consecutive threads on consecutive packs): every lane moves whole packs, and none waits for a row
// to line up with it. Each pack's elements split at a row boundary into two segments at most
// (bw::tile::PackRows); each thread sums its segments' terms into shared memory, a group of `group`
// lanes adds one row's segments in pack order (the same bits from run to run), and the threads
// store their packs of dx from the rows' sums. Edge packs, shared with the neighbouring tiles, are
// stored element by element. Two barriers a tile, whatever cols.
// No barrier ends a tile: a thread writes the next tile's segments only after every thread has
// passed this tile's second barrier (no row still being added), and the next rows' sums only after
// the next tile's first barrier (every thread done storing).
// (A forward of the same shape, each segment's (max, sum of exp) merged per row, ran at 40-49% of
// copy from 31 to 1023 half columns on an H100, behind the row tiers: not built.)
// =============================================================================================

#define BW_SOFTMAX_FLAT_BLOCK 256

namespace bw {
namespace smx {

// The segments of row r, combined in pack order by a group of `group` lanes (lane `lane` of it):
// `head[k]` is pack k's first segment, `tail[k]` its second. Every lane of the group gets the result.
template <typename S, typename Combine>
__device__ __forceinline__ S combine_row(int r, int cols, int lead, int pack, int lane, int group, const S* head,
                                         const S* tail, S identity, Combine combine) {
    const bw::tile::RowPacks span(r, cols, lead, pack);
    S acc = identity;
    for (int k = span.first + lane; k <= span.last; k += group)
        acc = combine(acc, k == span.first && span.starts_inside ? tail[k] : head[k]);
    return acc;
}

}  // namespace smx
}  // namespace bw

template <typename T, int Algo, int K>
__global__ void __launch_bounds__(BW_SOFTMAX_FLAT_BLOCK)
softmax_grad_flat(const T* __restrict__ y, i64 y_stride, const T* __restrict__ dy, i64 dy_stride,
                  T* __restrict__ dx, i64 dx_stride, i64 rows, int cols, int tile_rows, int group) {
    constexpr int P = 16 / sizeof(T);
    constexpr int B = BW_SOFTMAX_FLAT_BLOCK;
    typedef Pack<T, P> PackT;
    __shared__ float head[B * K], tail[B * K], row_sum[B * K];
    const int phase = bw::tile::phase_of(y);
    const bw::tile::Groups g(group);
    const PackT* ys = reinterpret_cast<const PackT*>(y - phase);
    const PackT* dys = reinterpret_cast<const PackT*>(dy - phase);
    PackT* dxs = reinterpret_cast<PackT*>(dx - phase);
    bw::tile::for_each_tile<T>(rows, cols, tile_rows, phase, [&](const bw::tile::Tile<T>& tile, i64, int n) {
        PackT yv[K], dv[K];
#pragma unroll
        for (int j = 0; j < K; ++j) {
            const int k = threadIdx.x + j * B;
            if (k < tile.packs) {
                yv[j] = ys[tile.pack0 + k];
                dv[j] = dys[tile.pack0 + k];
            }
        }
#pragma unroll
        for (int j = 0; j < K; ++j) {
            const int k = threadIdx.x + j * B;
            if (k >= tile.packs) continue;
            const bw::tile::PackRows<T> at(tile, k, cols);
            float a[P], b[P];
            bw::widen(yv[j], a);
            bw::widen(dv[j], b);
            float s0 = 0.0f, s1 = 0.0f;
#pragma unroll
            for (int i = 0; i < P; ++i) {
                const int r = at.of(i);
                const float t = r >= 0 && r < n ? Backward<Algo, T>::term(a[i], b[i]) : 0.0f;
                if (i < at.split) s0 += t; else s1 += t;
            }
            head[k] = s0;
            tail[k] = s1;
        }
        __syncthreads();
        for (int first = 0; first < n; first += g.slots) {
            const int r = first + g.slot;
            float s = 0.0f;
            if (r < n)
                s = bw::smx::combine_row(r, cols, tile.lead, P, g.lane, group, head, tail, 0.0f,
                                         [](float p, float q) { return p + q; });
            s = bw::tile::group_allreduce<bw::SumOp>(s, group);
            if (r < n && g.lane == 0) row_sum[r] = s;
        }
        __syncthreads();
#pragma unroll
        for (int j = 0; j < K; ++j) {
            const int k = threadIdx.x + j * B;
            if (k >= tile.packs) continue;
            const bw::tile::PackRows<T> at(tile, k, cols);
            const float s0 = row_sum[min(max(at.row, 0), n - 1)];
            const float s1 = row_sum[min(at.row + 1, n - 1)];
            float a[P], b[P];
            bw::widen(yv[j], a);
            bw::widen(dv[j], b);
            PackT out;
#pragma unroll
            for (int i = 0; i < P; ++i)
                out.v[i] = bw::from_float<T>(Backward<Algo, T>::apply(a[i], b[i], i >= at.split ? s1 : s0));
            if (at.inside(n)) {
                dxs[tile.pack0 + k] = out;
            } else {
                T* row = reinterpret_cast<T*>(&dxs[tile.pack0 + k]);
#pragma unroll
                for (int i = 0; i < P; ++i) {
                    const int r = at.of(i);
                    if (r >= 0 && r < n) row[i] = out.v[i];
                }
            }
        }
    });
}

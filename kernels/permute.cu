// Permute / transpose: y = x.permute(perm).contiguous() for a contiguous x (OneFlow's permute article).
//
// Three kernels, planned on the host by bwbench/cuda/permute/plan.py:
//
// - permute_gather<BYTES, I, THREADS, UNROLL>: the input's last dimension stays the output's last.
//   Each thread moves UNROLL units of BYTES bytes (1..16: the last dimension moved in the widest access its
//   size and the pointers' alignment allow). The output offset is turned into an N-d index with
//   multiply-shift fast division (32-bit indexing) or plain division (64-bit), after the host has
//   dropped size-1 dimensions and merged dimensions that stay adjacent.
// - permute_tiled<BYTES, VR, VW, TILE, THREADS, I>: the last dimension moves. One block moves a
//   TILE x TILE tile through padded shared memory: reads are contiguous along the input's last
//   dimension, writes along the output's. Reads are VR elements wide and writes VW (packs of up to 8
//   bytes: half2 / half4 for float16 with even sizes, as wide as each side allows); loop bounds are compile-time constants so every loop unrolls, and
//   partial tiles at the edges take a predicated copy of the same loops. The article's
//   BatchTranspose is the case with one batch dimension; any other batch dimensions are resolved
//   once per tile.
// - permute_tiled_aligned<BYTES, VR, VW, TILE, THREADS, I, ALIGN, SHIFT>: the same for output rows
//   that do not start on a 32-byte sector: each tile row is written as whole aligned pieces, the
//   tile reading the few input rows before its own as well.
// - permute_naive<BYTES>: the article's starting point. One element per thread, 64-bit N-d index
//   arithmetic with plain division for every dimension, no merging, no vectorization.
//
// Kernel parameters are plain scalars (the loader passes numpy scalars): per-dimension values come
// in fixed slots of MAX_DIMS, the unused ones zero.
#include "common.cuh"

namespace bwperm {

typedef unsigned long long u64;

// The type one access moves: only the byte count matters to a permute.
template <int BYTES>
struct Unit;
template <>
struct Unit<1> {
    typedef unsigned char type;
};
template <>
struct Unit<2> {
    typedef unsigned short type;
};
template <>
struct Unit<4> {
    typedef unsigned int type;
};
template <>
struct Unit<8> {
    typedef unsigned long long type;
};
struct alignas(16) Bytes16 {
    unsigned long long lo, hi;
};
template <>
struct Unit<16> {
    typedef Bytes16 type;
};

constexpr int MAX_DIMS = 8;
constexpr int MAX_BATCH_DIMS = MAX_DIMS - 2;
constexpr int NAIVE_THREADS = 256;

// Division by a runtime constant d (1 <= d < 2^31) of any 0 <= n < 2^31, as multiply-high, add and
// shift. `packed` is (magic << 32) | d from plan.divider32; the shift ceil(log2 d) is
// recomputed here (32 - clz(d - 1) is 0 for d = 1).
struct Div32 {
    unsigned d, magic, shift;
    __device__ __forceinline__ explicit Div32(u64 packed)
        : d(static_cast<unsigned>(packed)),
          magic(static_cast<unsigned>(packed >> 32)),
          shift(32u - static_cast<unsigned>(__clz(static_cast<int>(static_cast<unsigned>(packed) - 1u)))) {}
    __device__ __forceinline__ unsigned div(unsigned n) const { return (__umulhi(n, magic) + n) >> shift; }
};

// The gather kernel's divisions in its index type: fast for int, plain for 64-bit (tensors of 2^31
// units and more, where correctness matters more than the last few percent).
template <typename I>
struct Divider;

template <>
struct Divider<int> {
    Div32 f;
    __device__ __forceinline__ explicit Divider(u64 packed) : f(packed) {}
    __device__ __forceinline__ int divisor() const { return static_cast<int>(f.d); }
    __device__ __forceinline__ int div(int n) const { return static_cast<int>(f.div(static_cast<unsigned>(n))); }
};

template <>
struct Divider<long long> {
    long long d;
    __device__ __forceinline__ explicit Divider(u64 packed) : d(static_cast<long long>(packed)) {}
    __device__ __forceinline__ long long divisor() const { return d; }
    __device__ __forceinline__ long long div(long long n) const { return n / d; }
};

// Input offset of output unit i: peel the output index off from the innermost dimension out.
template <typename I>
__device__ __forceinline__ I gather_offset(I i, int ndims, const u64 (&divs)[MAX_DIMS],
                                           const long long (&strides)[MAX_DIMS]) {
    I offset = 0;
#pragma unroll
    for (int k = MAX_DIMS - 1; k > 0; --k) {
        if (k < ndims) {
            const Divider<I> dv(divs[k]);
            const I q = dv.div(i);
            offset += (i - q * dv.divisor()) * static_cast<I>(strides[k]);
            i = q;
        }
    }
    return offset + i * static_cast<I>(strides[0]);
}

// Where a tiled kernel's block works: block index -> (batch, tile row, tile column), tile columns
// fastest, and the batch index -> the tile's base offsets (batch dims innermost first).
template <typename I>
struct TileOrigin {
    I src_base, dst_base;
    unsigned tr, tc;
};

template <typename I>
__device__ __forceinline__ TileOrigin<I> tile_origin(u64 tiles_c_div, u64 tiles_r_div, int nb,
                                                     const u64 (&bdivs)[MAX_BATCH_DIMS],
                                                     const long long (&bsrcs)[MAX_BATCH_DIMS],
                                                     const long long (&bdsts)[MAX_BATCH_DIMS]) {
    const Div32 tc_div(tiles_c_div), tr_div(tiles_r_div);
    const unsigned block = blockIdx.x;
    const unsigned q = tc_div.div(block);
    TileOrigin<I> o;
    o.tc = block - q * tc_div.d;
    unsigned b = tr_div.div(q);
    o.tr = q - b * tr_div.d;
    o.src_base = 0;
    o.dst_base = 0;
#pragma unroll
    for (int j = 0; j < MAX_BATCH_DIMS; ++j) {
        if (j < nb) {
            const Div32 dv(bdivs[j]);
            const unsigned next = dv.div(b);
            const I index = static_cast<I>(b - next * dv.d);
            o.src_base += index * static_cast<I>(bsrcs[j]);
            o.dst_base += index * static_cast<I>(bdsts[j]);
            b = next;
        }
    }
    return o;
}

// The largest divisor of n that is at most cap: loads go out in groups that split the steps evenly.
__host__ __device__ constexpr int group_of(int n, int cap) { return n <= cap ? n : (n % cap == 0 ? cap : group_of(n, cap - 1)); }

// The full-tile read of the tiled kernels: STEPS rows of VR-element packs, YR rows apart, into
// tile rows yr, yr + YR, ... at column xr * VR. Loads go out in groups of GROUP before their
// shared-memory stores, so many are in flight without holding the whole tile in registers.
template <typename U, int VR, int YR, int STEPS, int GROUP, int COLS, typename I>
__device__ __forceinline__ void read_packed_rows(U (*tile)[COLS], const U* __restrict__ src, I row_stride, int xr,
                                                 int yr) {
    typedef bw::Pack<U, VR> PR;
    static_assert(STEPS % GROUP == 0, "groups must split the steps");
#pragma unroll
    for (int g = 0; g < STEPS; g += GROUP) {
        PR v[GROUP];
#pragma unroll
        for (int k = 0; k < GROUP; ++k) {
            v[k] = *reinterpret_cast<const PR*>(src + static_cast<I>(yr + (g + k) * YR) * row_stride);
        }
#pragma unroll
        for (int k = 0; k < GROUP; ++k) {
#pragma unroll
            for (int e = 0; e < VR; ++e) tile[yr + (g + k) * YR][xr * VR + e] = v[k].v[e];
        }
    }
}

// The full-tile read for rows of 1- or 2-byte elements that start anywhere (C odd), as 4-byte words:
// one warp per tile row (VR * BYTES == 4, 32 lanes), row k of `tile` taking input row first_row +
// k * row_stride. Each lane reads the aligned word holding its elements' start, takes the next lane's
// word through a shuffle (the last lane reads one more word when the row is not word-aligned) and
// cuts its 4 bytes out of the pair with a byte permute: one 4-byte load per lane per row instead of
// VR single-element loads, and every word read holds at least one element of the row.
template <typename U, int VR, int YR, int STEPS, int GROUP, int COLS, typename I>
__device__ __forceinline__ void read_word_rows(U (*tile)[COLS], const U* __restrict__ base, I first_row,
                                               I row_stride, int xr, int yr) {
    static_assert(VR * sizeof(U) == 4, "word reads move 4 bytes a lane");
    static_assert(STEPS % GROUP == 0, "groups must split the steps");
#pragma unroll
    for (int g = 0; g < STEPS; g += GROUP) {
        unsigned w[GROUP], tail[GROUP];
#pragma unroll
        for (int k = 0; k < GROUP; ++k) {
            const I at = first_row + static_cast<I>(yr + (g + k) * YR) * row_stride;
            const int h = static_cast<int>(at & (VR - 1));
            const unsigned* words = reinterpret_cast<const unsigned*>(base + (at - h));
            w[k] = words[xr];
            tail[k] = (xr == 31 && h != 0) ? words[32] : 0u;
        }
#pragma unroll
        for (int k = 0; k < GROUP; ++k) {
            const I at = first_row + static_cast<I>(yr + (g + k) * YR) * row_stride;
            const int h = static_cast<int>(at & (VR - 1));  // the same for the whole warp
            unsigned next = __shfl_down_sync(0xffffffffu, w[k], 1);
            if (xr == 31) next = tail[k];
            *reinterpret_cast<unsigned*>(&tile[yr + (g + k) * YR][xr * VR]) =
                __byte_perm(w[k], next, 0x3210u + 0x1111u * static_cast<unsigned>(h * sizeof(U)));
        }
    }
}

}  // namespace bwperm

#define BWPERM_SLOTS(type, name) \
    type name##0, type name##1, type name##2, type name##3, type name##4, type name##5, type name##6, type name##7
#define BWPERM_VALUES(name) name##0, name##1, name##2, name##3, name##4, name##5, name##6, name##7
#define BWPERM_BATCH_SLOTS(type, name) \
    type name##0, type name##1, type name##2, type name##3, type name##4, type name##5
#define BWPERM_BATCH_VALUES(name) name##0, name##1, name##2, name##3, name##4, name##5

// count: output units; ndims: dimensions used; div k: output size k (Divider<I> packing);
// st k: input stride (units) of the dimension that becomes output dimension k.
template <int BYTES, typename I, int THREADS, int UNROLL>
__global__ void __launch_bounds__(THREADS)
    permute_gather(const void* __restrict__ src_ptr, void* __restrict__ dst_ptr, I count, int ndims,
                   BWPERM_SLOTS(unsigned long long, div), BWPERM_SLOTS(long long, st)) {
    using namespace bwperm;
    typedef typename Unit<BYTES>::type U;
    const U* __restrict__ src = static_cast<const U*>(src_ptr);
    U* __restrict__ dst = static_cast<U*>(dst_ptr);
    const u64 divs[MAX_DIMS] = {BWPERM_VALUES(div)};
    const long long strides[MAX_DIMS] = {BWPERM_VALUES(st)};

    const I first = static_cast<I>(blockIdx.x) * (THREADS * UNROLL) + static_cast<I>(threadIdx.x);
    U v[UNROLL];
    if (first + (UNROLL - 1) * THREADS < count) {
        // All loads first, then all stores: UNROLL independent reads in flight per thread.
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            v[u] = src[gather_offset<I>(first + u * THREADS, ndims, divs, strides)];
        }
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            dst[first + u * THREADS] = v[u];
        }
    } else {
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const I i = first + u * THREADS;
            if (i < count) v[u] = src[gather_offset<I>(i, ndims, divs, strides)];
        }
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const I i = first + u * THREADS;
            if (i < count) dst[i] = v[u];
        }
    }
}

// One block of THREADS threads per TILE x TILE tile. rows (R): size of the input dimension that
// becomes the output's last; cols (C): size of the input's last dimension; src_row_stride: input
// stride of a row; dst_row_stride: output stride of a column. The block index splits into (batch,
// tile row, tile column), tile columns fastest; the batch dims (nb of them, innermost first) give the
// tile's base offsets. Reads move VR elements along the input's last dim (C a multiple of VR, the
// source aligned to VR * BYTES), writes VW elements along the output's (R a multiple of VW, the
// destination aligned to VW * BYTES): an odd side only narrows its own direction.
// SHIFT: C is not a multiple of VR, so tile rows start at any element. Each row of a full tile is
// then read as aligned packs from its start rounded down to a pack, every element stored h places
// to the left (h = the row start's offset within its pack), and the first thread of the row reads
// one more pack for the last h elements. Every pack read holds at least one element of the row, so
// no access leaves the tensor's aligned words. Edge tiles read single elements.
template <int BYTES, int VR, int VW, int TILE, int THREADS, typename I, bool SHIFT>
__global__ void __launch_bounds__(THREADS)
    permute_tiled(const void* __restrict__ src_ptr, void* __restrict__ dst_ptr, I rows, I cols, I src_row_stride,
                  I dst_row_stride, unsigned long long tiles_c_div, unsigned long long tiles_r_div, int nb,
                  BWPERM_BATCH_SLOTS(unsigned long long, bdiv), BWPERM_BATCH_SLOTS(long long, bsrc),
                  BWPERM_BATCH_SLOTS(long long, bdst)) {
    using namespace bwperm;
    typedef typename Unit<BYTES>::type U;
    typedef bw::Pack<U, VR> PR;
    typedef bw::Pack<U, VW> PW;
    constexpr int XR = TILE / VR;         // threads along a tile row when reading
    constexpr int YR = THREADS / XR;      // tile rows per read step
    constexpr int XW = TILE / VW;         // threads along an output row when writing
    constexpr int YW = THREADS / XW;      // output rows per write step
    constexpr int SR = TILE / YR;         // read steps
    constexpr int SW = TILE / YW;         // write steps
    static_assert(TILE % VR == 0 && TILE % VW == 0 && THREADS % XR == 0 && THREADS % XW == 0 &&
                      TILE % YR == 0 && TILE % YW == 0,
                  "the tile must split evenly into packs and steps");
    // One 4-byte word of padding per row: a column of the tile then falls into different banks.
    constexpr int PAD = BYTES >= 4 ? 1 : 4 / BYTES;
    __shared__ U tile[TILE][TILE + PAD];

    const u64 bdivs[MAX_BATCH_DIMS] = {BWPERM_BATCH_VALUES(bdiv)};
    const long long bsrcs[MAX_BATCH_DIMS] = {BWPERM_BATCH_VALUES(bsrc)};
    const long long bdsts[MAX_BATCH_DIMS] = {BWPERM_BATCH_VALUES(bdst)};

    const TileOrigin<I> o = tile_origin<I>(tiles_c_div, tiles_r_div, nb, bdivs, bsrcs, bdsts);
    const I src_base = o.src_base, dst_base = o.dst_base;
    const I r0 = static_cast<I>(o.tr) * TILE;
    const I c0 = static_cast<I>(o.tc) * TILE;
    const int t = threadIdx.x;
    const int xr = t % XR, yr = t / XR;
    const int xw = t % XW, yw = t / XW;
    const U* __restrict__ src = static_cast<const U*>(src_ptr) + (src_base + r0 * src_row_stride + c0 + xr * VR);
    U* __restrict__ dst = static_cast<U*>(dst_ptr) + (dst_base + c0 * dst_row_stride + r0 + xw * VW);
    const I rows_left = rows - r0;
    const I cols_left = cols - c0;

    if (rows_left >= TILE && cols_left >= TILE) {
        // Full tile: no bounds at all. Loads go out in groups of up to 16 before their shared-memory
        // stores, so many are in flight without holding a whole 1-byte-per-access tile in registers.
        constexpr int GROUP = group_of(SR, 16);
        if constexpr (SHIFT) {
            const U* __restrict__ base = static_cast<const U*>(src_ptr);
            const I row0 = src_base + r0 * src_row_stride + c0;
#pragma unroll
            for (int g = 0; g < SR; g += GROUP) {
                PR v[GROUP];
#pragma unroll
                for (int k = 0; k < GROUP; ++k) {
                    const I o = row0 + static_cast<I>(yr + (g + k) * YR) * src_row_stride;
                    v[k] = *reinterpret_cast<const PR*>(base + ((o & ~static_cast<I>(VR - 1)) + xr * VR));
                }
#pragma unroll
                for (int k = 0; k < GROUP; ++k) {
                    // The shift is recomputed rather than kept: fewer live registers across the loads.
                    const I o = row0 + static_cast<I>(yr + (g + k) * YR) * src_row_stride;
                    const int h = static_cast<int>(o & (VR - 1));
#pragma unroll
                    for (int e = 0; e < VR; ++e) {
                        const int col = xr * VR - h + e;
                        if (col >= 0) tile[yr + (g + k) * YR][col] = v[k].v[e];
                    }
                }
            }
            if (xr == 0) {
#pragma unroll
                for (int k = 0; k < SR; ++k) {
                    const I o = row0 + static_cast<I>(yr + k * YR) * src_row_stride;
                    const int h = static_cast<int>(o & (VR - 1));
                    if (h > 0) {
                        const PR p = *reinterpret_cast<const PR*>(base + (o - h + TILE));
#pragma unroll
                        for (int e = 0; e < VR; ++e) {
                            if (e < h) tile[yr + k * YR][TILE - h + e] = p.v[e];
                        }
                    }
                }
            }
        } else {
            read_packed_rows<U, VR, YR, SR, GROUP>(tile, src, src_row_stride, xr, yr);
        }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < SW; ++k) {
            PW w;
#pragma unroll
            for (int e = 0; e < VW; ++e) w.v[e] = tile[xw * VW + e][yw + k * YW];
            *reinterpret_cast<PW*>(dst + static_cast<I>(yw + k * YW) * dst_row_stride) = w;
        }
    } else {
        // Edge tile: the same unrolled loops, predicated by bounds hoisted out of them.
        const int rv = rows_left < TILE ? static_cast<int>(rows_left) : TILE;
        const int cv = cols_left < TILE ? static_cast<int>(cols_left) : TILE;
        const bool read_ok = xr * VR < cv;
        const bool write_ok = xw * VW < rv;
#pragma unroll
        for (int k = 0; k < SR; ++k) {
            const int r = yr + k * YR;
            if (SHIFT) {
                if (r < rv) {
#pragma unroll
                    for (int e = 0; e < VR; ++e) {
                        if (xr * VR + e < cv) tile[r][xr * VR + e] = src[static_cast<I>(r) * src_row_stride + e];
                    }
                }
            } else if (read_ok && r < rv) {
                const PR p = *reinterpret_cast<const PR*>(src + static_cast<I>(r) * src_row_stride);
#pragma unroll
                for (int e = 0; e < VR; ++e) tile[r][xr * VR + e] = p.v[e];
            }
        }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < SW; ++k) {
            const int c = yw + k * YW;
            if (write_ok && c < cv) {
                PW w;
#pragma unroll
                for (int e = 0; e < VW; ++e) w.v[e] = tile[xw * VW + e][c];
                *reinterpret_cast<PW*>(dst + static_cast<I>(c) * dst_row_stride) = w;
            }
        }
    }
}

// permute_tiled with every output row written in whole ALIGN-byte pieces (S = ALIGN / BYTES
// elements, a power of two): for output rows whose start is not ALIGN-aligned (R * BYTES not a
// multiple of ALIGN), the plain tile writes the first and last piece of every tile row partially,
// and partial 32-byte sectors cost L2 extra write requests and DRAM efficiency (on an H100, 74-86%
// of copy against 97-100% with whole sectors, for the same DRAM bytes). Here tile (tr, tc) writes, in
// output row j, the elements [r0 - m_j, r0 + TILE - m_j), m_j being how far row j's element r0
// lies past an ALIGN boundary: the same number of elements, starting on a boundary. The first tile
// of a row starts at 0 and the last ends at R (those two pieces stay partial). So a block reads the
// LEAD input rows before its own as well (LEAD >= S - 1, rounded to whole read steps; L2 hits,
// since tile tr - 1 has just read them). Interior tiles write VW-element packs, which are aligned
// whatever R is; tiles at an edge of the matrix write element by element.
// SHIFT (1- and 2-byte elements, VR * BYTES == 4, one warp per tile row): input rows start anywhere
// (C odd) and are read as shifted 4-byte words (read_word_rows).
template <int BYTES, int VR, int VW, int TILE, int THREADS, typename I, int ALIGN, bool SHIFT>
__global__ void __launch_bounds__(THREADS)
    permute_tiled_aligned(const void* __restrict__ src_ptr, void* __restrict__ dst_ptr, I rows, I cols,
                          I src_row_stride, I dst_row_stride, unsigned long long tiles_c_div,
                          unsigned long long tiles_r_div, int nb, BWPERM_BATCH_SLOTS(unsigned long long, bdiv),
                          BWPERM_BATCH_SLOTS(long long, bsrc), BWPERM_BATCH_SLOTS(long long, bdst)) {
    using namespace bwperm;
    typedef typename Unit<BYTES>::type U;
    typedef bw::Pack<U, VR> PR;
    typedef bw::Pack<U, VW> PW;
    constexpr int S = ALIGN / BYTES;
    constexpr int XR = TILE / VR;
    constexpr int YR = THREADS / XR;
    constexpr int XW = TILE / VW;
    constexpr int YW = THREADS / XW;
    constexpr int SR = (TILE + S - 1 + YR - 1) / YR;  // read steps: the tile and at least S - 1 rows before it
    constexpr int LEAD = SR * YR - TILE;               // rows read before the tile's own
    constexpr int SW = TILE / YW;
    static_assert(S >= 1 && (S & (S - 1)) == 0 && TILE % S == 0 && S % VW == 0 && LEAD <= TILE,
                  "the alignment must be a power-of-two number of elements that splits the tile and the packs");
    static_assert(TILE % VR == 0 && TILE % VW == 0 && THREADS % XR == 0 && THREADS % XW == 0 && TILE % YW == 0,
                  "the tile must split evenly into packs and steps");
    constexpr int PAD = BYTES >= 4 ? 1 : 4 / BYTES;
    __shared__ U tile[TILE + LEAD][TILE + PAD];  // row k: input row r0 - LEAD + k

    const u64 bdivs[MAX_BATCH_DIMS] = {BWPERM_BATCH_VALUES(bdiv)};
    const long long bsrcs[MAX_BATCH_DIMS] = {BWPERM_BATCH_VALUES(bsrc)};
    const long long bdsts[MAX_BATCH_DIMS] = {BWPERM_BATCH_VALUES(bdst)};
    const TileOrigin<I> o = tile_origin<I>(tiles_c_div, tiles_r_div, nb, bdivs, bsrcs, bdsts);
    const I r0 = static_cast<I>(o.tr) * TILE;
    const I c0 = static_cast<I>(o.tc) * TILE;
    const int t = threadIdx.x;
    const int xr = t % XR, yr = t / XR;
    const int xw = t % XW, yw = t / XW;
    const U* __restrict__ src =
        static_cast<const U*>(src_ptr) + (o.src_base + (r0 - LEAD) * src_row_stride + c0 + xr * VR);
    U* __restrict__ dst = static_cast<U*>(dst_ptr) + o.dst_base;
    // Element offset of dst_ptr within an ALIGN-byte piece: with it, m_j of output row j.
    const unsigned dst_phase = static_cast<unsigned>(reinterpret_cast<u64>(dst_ptr) / BYTES);
    const I rows_left = rows - r0;
    const I cols_left = cols - c0;

    if (r0 > 0 && rows_left > TILE && cols_left >= TILE) {
        constexpr int GROUP = group_of(SR, 16);
        if constexpr (SHIFT) {
            static_assert(XR == 32, "word reads take one warp per tile row");
            read_word_rows<U, VR, YR, SR, GROUP>(tile, static_cast<const U*>(src_ptr),
                                                 o.src_base + (r0 - LEAD) * src_row_stride + c0, src_row_stride, xr, yr);
        } else {
            read_packed_rows<U, VR, YR, SR, GROUP>(tile, src, src_row_stride, xr, yr);
        }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < SW; ++k) {
            const int c = yw + k * YW;
            const I row = (c0 + c) * dst_row_stride + r0;
            const int m = static_cast<int>((dst_phase + static_cast<unsigned>(o.dst_base + row)) & (S - 1));
            PW w;
#pragma unroll
            for (int e = 0; e < VW; ++e) w.v[e] = tile[LEAD - m + xw * VW + e][c];
            *reinterpret_cast<PW*>(dst + (row - m + xw * VW)) = w;
        }
    } else {
        const int rv = rows_left < TILE ? static_cast<int>(rows_left) : TILE;
        const int cv = cols_left < TILE ? static_cast<int>(cols_left) : TILE;
        const int first = r0 > 0 ? 0 : LEAD;  // rows before the matrix's first are not read
        const bool read_ok = xr * VR < cv;
#pragma unroll
        for (int k = 0; k < SR; ++k) {
            const int row = yr + k * YR;
            if (row < first || row >= LEAD + rv) continue;
            if constexpr (SHIFT) {  // rows start anywhere: single elements
#pragma unroll
                for (int e = 0; e < VR; ++e) {
                    if (xr * VR + e < cv) tile[row][xr * VR + e] = src[static_cast<I>(row) * src_row_stride + e];
                }
            } else if (read_ok) {
                const PR p = *reinterpret_cast<const PR*>(src + static_cast<I>(row) * src_row_stride);
#pragma unroll
                for (int e = 0; e < VR; ++e) tile[row][xr * VR + e] = p.v[e];
            }
        }
        __syncthreads();
        const bool last = rows_left <= TILE;
#pragma unroll
        for (int k = 0; k < SW; ++k) {
            const int c = yw + k * YW;
            if (c < cv) {
                const I row = (c0 + c) * dst_row_stride;
                const int m = static_cast<int>((dst_phase + static_cast<unsigned>(o.dst_base + row)) & (S - 1));
                const int begin = r0 > 0 ? -m : 0;                            // relative to r0
                const int end = last ? static_cast<int>(rows_left) : TILE - m;  // at most TILE + S - 1 past begin
                // Consecutive lanes take consecutive elements (coalesced single-element stores).
#pragma unroll
                for (int q = 0; q < 2; ++q) {
#pragma unroll
                    for (int e = 0; e < VW; ++e) {
                        const int r = begin + q * TILE + e * XW + xw;
                        if (r < end) dst[row + r0 + r] = tile[LEAD + r][c];
                    }
                }
            }
        }
    }
}

// size k: output size k; st k: input stride of the dimension that becomes output dimension k.
template <int BYTES>
__global__ void __launch_bounds__(bwperm::NAIVE_THREADS)
    permute_naive(const void* __restrict__ src_ptr, void* __restrict__ dst_ptr, long long count, int ndims,
                  BWPERM_SLOTS(long long, size), BWPERM_SLOTS(long long, st)) {
    using namespace bwperm;
    typedef typename Unit<BYTES>::type U;
    const long long sizes[MAX_DIMS] = {BWPERM_VALUES(size)};
    const long long strides[MAX_DIMS] = {BWPERM_VALUES(st)};
    const long long i = static_cast<long long>(blockIdx.x) * NAIVE_THREADS + threadIdx.x;
    if (i >= count) return;
    long long rest = i;
    long long offset = 0;
#pragma unroll
    for (int k = MAX_DIMS - 1; k >= 0; --k) {
        if (k < ndims) {
            offset += (rest % sizes[k]) * strides[k];
            rest /= sizes[k];
        }
    }
    static_cast<U*>(dst_ptr)[i] = static_cast<const U*>(src_ptr)[offset];
}

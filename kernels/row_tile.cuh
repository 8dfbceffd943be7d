// Tiles of consecutive rows of a dense tensor, moved through shared memory in aligned 16-byte packs.
//
// Rows of a dense (rows, cols) tensor lie end to end, so `n` consecutive rows are one contiguous
// run of n * cols elements. Where a row's bytes are no multiple of 16 (31 or 197 half columns,
// say), every other row starts mid-pack and a kernel that walks rows moves their edges element by
// element, or loads the packs two rows share twice. A tile walks the run instead: the aligned packs
// that cover it are copied into shared memory with one 16-byte access each (cp.async: no
// registers held, all of a tile's packs in flight), the rows are computed there at any offset,
// and the packs are stored back the same way. Only the tile's first and last packs, which it may
// share with the neighbouring tiles, are stored element by element.
//
// Every tensor of a call must start the same number of elements past a 16-byte boundary (its
// phase; the host checks), so one Tile describes the packs of x and y (or y, dy and dx) alike.
// Like common.cuh this header includes nothing but the project's own header.
#pragma once

#include "common.cuh"

namespace bw {
namespace tile {

// The most 16-byte packs a run of n elements covers, at any phase: its shared-memory footprint.
// The host sizes dynamic shared memory with the same formula (bwbench/cuda/softmax/dispatch.py).
__host__ __device__ constexpr int packs_max(int n, int pack) { return (n + 2 * pack - 2) / pack; }

// Elements `base` lies past the 16-byte boundary below it.
template <typename T>
__device__ __forceinline__ int phase_of(const T* base) {
    return static_cast<int>((reinterpret_cast<unsigned long long>(base) % 16) / sizeof(T));
}

// Elements [first, end) of a dense tensor whose data starts `phase` elements past a pack boundary:
// packs [pack0, pack0 + packs) counted from that boundary; the tile's first element sits `lead`
// elements into the first pack (and into the shared-memory copy).
template <typename T>
struct Tile {
    static constexpr int P = 16 / sizeof(T);
    i64 first;
    i64 end;
    i64 pack0;
    int packs;
    int lead;
    int phase;

    __device__ __forceinline__ Tile(i64 first_, i64 end_, int phase_) : first(first_), end(end_), phase(phase_) {
        const i64 a = first + phase, b = end + phase;
        pack0 = a / P;
        packs = static_cast<int>((b + P - 1) / P - pack0);
        lead = static_cast<int>(a - pack0 * P);
    }
};

__device__ __forceinline__ void copy16_async(void* smem, const void* gmem) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    const unsigned to = static_cast<unsigned>(__cvta_generic_to_shared(smem));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(to), "l"(gmem) : "memory");
#else
    *reinterpret_cast<uint4*>(smem) = *reinterpret_cast<const uint4*>(gmem);
#endif
}

// Waits for this thread's copies; a __syncthreads() after it makes every thread's visible.
__device__ __forceinline__ void wait_copies() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_all;" ::: "memory");
#endif
}

// Starts copying the tile's packs of tensor `base` into `cache` (thread i copies packs i, i +
// blockDim, ...). The first and last packs hold bytes outside the tile (the neighbours' rows, or
// up to 15 bytes past the tensor: an aligned pack holding one of the tensor's bytes lies within
// its allocation, which is mapped in whole pages); they are read and never used.
template <typename T>
__device__ __forceinline__ void load(Pack<T, 16 / sizeof(T)>* cache, const T* __restrict__ base, const Tile<T>& t) {
    typedef Pack<T, 16 / sizeof(T)> PackT;
    const PackT* src = reinterpret_cast<const PackT*>(base - t.phase) + t.pack0;
    for (int k = threadIdx.x; k < t.packs; k += blockDim.x) copy16_async(&cache[k], &src[k]);
}

// Stores the tile from `cache` into tensor `base`: whole packs in one access, the elements of the
// edge packs that belong to the tile one by one.
template <typename T>
__device__ __forceinline__ void store(T* __restrict__ base, const Tile<T>& t, const Pack<T, 16 / sizeof(T)>* cache) {
    typedef Pack<T, 16 / sizeof(T)> PackT;
    constexpr int P = Tile<T>::P;
    PackT* dst = reinterpret_cast<PackT*>(base - t.phase) + t.pack0;
    for (int k = threadIdx.x; k < t.packs; k += blockDim.x) {
        const i64 e = (t.pack0 + k) * P - t.phase;  // the pack's first element in the tensor
        if (e >= t.first && e + P <= t.end) {
            dst[k] = cache[k];
        } else {
            const T* from = reinterpret_cast<const T*>(&cache[k]);
#pragma unroll
            for (int i = 0; i < P; ++i) {
                if (e + i >= t.first && e + i < t.end) base[e + i] = from[i];
            }
        }
    }
}

// Calls f(tile, r0, n) for each tile of `tile_rows` consecutive rows of a dense (rows, cols)
// tensor that this block takes (tiles grid-strided over the blocks): r0 is the tile's first row,
// n its row count (tile_rows but in the last tile). Index: the kernel's row type.
template <typename T, typename Index, typename F>
__device__ __forceinline__ void for_each_tile(Index rows, int cols, int tile_rows, int phase, F f) {
    const Index tiles = (rows + tile_rows - 1) / tile_rows;
    for (Index t = blockIdx.x; t < tiles; t += gridDim.x) {
        const Index r0 = t * tile_rows;
        const int n = static_cast<int>(min(static_cast<Index>(tile_rows), rows - r0));
        f(Tile<T>(static_cast<i64>(r0) * cols, static_cast<i64>(r0 + n) * cols, phase), r0, n);
    }
}

// Tiles held in registers (the flat tiers): thread i loads packs i, i + blockDim, ... of the tile
// straight into registers; PackRows says which of the tile's rows each element of such a pack
// belongs to. For rows of at least P elements a pack spans two rows at most: elements [0, split)
// belong to `row` and [split, P) to row + 1, rows counted from the tile's first (-1: the elements
// before the tile, n: those after it, where the tile has n rows; the edge packs hold both).
template <typename T>
struct PackRows {
    static constexpr int P = 16 / sizeof(T);
    int row;
    int split;
    // Pack k of tile t, whose rows have `cols` >= P elements.
    __device__ __forceinline__ PackRows(const Tile<T>& t, int k, int cols) {
        const int at = k * P - t.lead;  // the pack's first element, counted from the tile's first; > -P >= -cols
        row = (at + cols) / cols - 1;
        split = (row + 1) * cols - at;  // in (0, cols]: at or past P, the whole pack is one row's
    }
    // The row of the pack's element i.
    __device__ __forceinline__ int of(int i) const { return row + (i >= split ? 1 : 0); }
    // Whether every element of the pack belongs to one of the tile's n rows.
    __device__ __forceinline__ bool inside(int n) const { return row >= 0 && (split >= P ? row : row + 1) < n; }
};

// The packs of row r of a tile in its pack numbering, [first, last], and whether the row starts
// inside pack `first` (so its part there is that pack's second segment, PackRows' row + 1).
struct RowPacks {
    int first;
    int last;
    bool starts_inside;
    __device__ __forceinline__ RowPacks(int r, int cols, int lead, int pack) {
        const int a = r * cols + lead, b = a + cols - 1;
        first = a / pack;
        last = b / pack;
        starts_inside = a % pack != 0;
    }
};

// A block's lanes in aligned groups of `width` (a power of two up to 32), one row a group.
struct Groups {
    int lane;   // within the group
    int slot;   // the group's index in the block
    int slots;  // groups in the block
    __device__ __forceinline__ explicit Groups(int width)
        : lane(threadIdx.x & (width - 1)), slot(threadIdx.x / width), slots(blockDim.x / width) {}
};

// All-reduce over the aligned groups of `width` lanes (a power of two up to 32) of a warp; every
// lane of the warp takes part.
template <typename Op>
__device__ __forceinline__ float group_allreduce(float v, int width) {
    for (int mask = width >> 1; mask > 0; mask >>= 1) v = Op()(v, __shfl_xor_sync(0xffffffffu, v, mask));
    return v;
}

// A shift's whole 32-bit words, fixed at compile time, or kWordsAtRunTime.
constexpr int kWordsAtRunTime = -1;

// Packs a and b (a's successor) funnel-shifted right by `bytes` (0 <= bytes < 16): the 16 bytes
// from a's byte `bytes` on. Selects on the bits of the shift, no indexed registers; where the
// caller knows the shift's whole words at compile time (Words = bytes / 4, the same at every pack
// of a loop that it dispatches once), none: only a half-word of a 16-bit type is left to run time.
template <typename T, int Words = kWordsAtRunTime>
__device__ __forceinline__ uint4 shift_pair16(const uint4& a, const uint4& b, int bytes) {
    static_assert(Words >= kWordsAtRunTime && Words < 4, "a shift of 0 to 3 whole words");
    const unsigned w[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
    unsigned twice[5];
    if constexpr (Words != kWordsAtRunTime) {
#pragma unroll
        for (int k = 0; k < 5; ++k) twice[k] = w[k + Words];
    } else {
        const int words = bytes >> 2;
        unsigned once[7];
#pragma unroll
        for (int k = 0; k < 7; ++k) once[k] = (words & 1) ? w[k + 1] : w[k];
#pragma unroll
        for (int k = 0; k < 5; ++k) twice[k] = (words & 2) ? once[k + 2] : once[k];
    }
    if constexpr (sizeof(T) >= 4) {
        return make_uint4(twice[0], twice[1], twice[2], twice[3]);
    } else {  // a half-word left over: 16 bits of the next word
        const unsigned bits = (bytes & 3) * 8;
        return make_uint4(__funnelshift_r(twice[0], twice[1], bits), __funnelshift_r(twice[1], twice[2], bits),
                          __funnelshift_r(twice[2], twice[3], bits), __funnelshift_r(twice[3], twice[4], bits));
    }
}

template <typename T>
__device__ __forceinline__ Pack<T, 16 / sizeof(T)> as_pack16(const uint4& u) {
    Pack<T, 16 / sizeof(T)> out;
    static_assert(sizeof(out) == sizeof(u), "a pack is 16 bytes");
    memcpy(&out, &u, sizeof(u));
    return out;
}

// The 16 bytes of an array that start `shift` elements past its aligned 16-byte pack `p`
// (0 <= shift < 16 / sizeof(T); `aligned` is 16-byte aligned), in two steps: straddle16 loads packs
// p and p + 1 with no branch between them (where shift is 0 the second load reads pack p again, an
// L1 hit, so nothing outside the packs that hold the elements is read), shifted16 shifts them. A
// caller of two arrays issues all four loads before it waits on one: a second load behind a branch
// on the shift was issued only after the other array's loads had arrived (LayerNorm's gamma and
// beta in norm_cluster, docs/norm.md).
struct Straddle {
    uint4 lo, hi;
    int shift_bytes;
};

template <typename T>
__device__ __forceinline__ Straddle straddle16(const T* __restrict__ aligned, int p, int shift) {
    const uint4* packs = reinterpret_cast<const uint4*>(aligned) + p;
    return Straddle{__ldg(packs), __ldg(packs + (shift != 0)), shift * static_cast<int>(sizeof(T))};
}

template <typename T, int Words = kWordsAtRunTime>
__device__ __forceinline__ Pack<T, 16 / sizeof(T)> shifted16(const Straddle& s) {
    return as_pack16<T>(shift_pair16<T, Words>(s.lo, s.hi, s.shift_bytes));
}

}  // namespace tile
}  // namespace bw

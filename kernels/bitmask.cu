// ReLU and dropout with a 1-bit mask for the backward (OneFlow's BN+ReLU fusion, ONNX Runtime's
// BitmaskDropout), and the baselines the suites compare them with: the article's
// one-thread-per-8-elements ReLU mask (uncoalesced) and a dropout that keeps one byte per element.
//
// Layout of the optimized kernels: a warp owns chunks of 32 * V consecutive elements (V = 16 /
// sizeof(T): one 16-byte access per lane), lane l the V elements at chunk + l * V. Its V keep bits
// sit at bit (l * V) % 32 of word (chunk + l * V) / 32; the G = 32 / V lanes that share a word OR
// their bits together (group_or) and the group's first lane writes it, so a warp writes V
// consecutive words: coalesced, and each word written once. Chunks are strided over the grid, the
// loop is warp-uniform (every lane reaches group_or), and elements past n keep nothing, so the
// padding bits of the last word are zero. The mask format is in bitmask.cuh.
#include "bitmask.cuh"

// i64 (common.cuh) is a global typedef.

namespace bw {

// A kept element is scaled (in float, rounded once to T, as the references do); a dropped one is 0.
template <typename T>
__device__ __forceinline__ T keep_or_zero(bool keep, T v, float scale) {
    return keep ? from_float<T>(to_float(v) * scale) : from_float<T>(0.0f);
}

struct ReluKeep {
    // Keep bits of V elements: x > 0 (a NaN is dropped, as its sign test fails).
    template <typename T, int V>
    __device__ __forceinline__ unsigned bits(i64 /*first*/, const T (&x)[V]) const {
        unsigned b = 0;
#pragma unroll
        for (int k = 0; k < V; ++k) b |= (to_float(x[k]) > 0.0f ? 1u : 0u) << k;
        return b;
    }
};

// WideCounter false: fewer than 2^34 elements, so every group index i / 8 fits the counter's first
// word (the host decides; bwbench/cuda/bitmask/plan.py) and the cheaper dropout_draw_narrow applies.
template <bool WideCounter>
struct DropoutKeep {
    unsigned threshold;
    unsigned long long seed;
    unsigned long long offset;
    // `first` is a multiple of V. V = 8 (16-bit types): one draw, all 8 halves used. V = 4 (float):
    // the lane's 4 elements are the low or high two words of its group's draw.
    template <typename T, int V>
    __device__ __forceinline__ unsigned bits(i64 first, const T (&)[V]) const {
        static_assert(V == 4 || V == 8, "a lane keeps 4 or 8 elements");
        const unsigned long long group = static_cast<unsigned long long>(first) >> 3;
        Philox4 r;
        if constexpr (WideCounter) {
            r = dropout_draw(group, seed, offset);
        } else {
            r = dropout_draw_narrow(static_cast<unsigned>(group), seed, offset);
        }
        if constexpr (V == 8) {
            return keep_halves(r.v, threshold);
        } else {
            const bool high = (first & 4) != 0;
            const unsigned w[2] = {high ? r.v[2] : r.v[0], high ? r.v[3] : r.v[1]};
            return keep_halves(w, threshold);
        }
    }
};

// V keep bits as V bytes (0 or 1) at mask[first ...]: one 8- or 4-byte store where aligned and
// in range, byte by byte at the tail.
template <int V, bool Aligned>
__device__ __forceinline__ void store_mask_bytes(unsigned char* __restrict__ bytes, i64 first, i64 n, unsigned b) {
    if (Aligned && first + V <= n) {  // V bytes in one access (8 or 4, aligned as first is)
        if constexpr (V == 8) {
            Pack<unsigned, 2> packed;
            packed.v[0] = (b & 1u) | ((b >> 1) & 1u) << 8 | ((b >> 2) & 1u) << 16 | ((b >> 3) & 1u) << 24;
            packed.v[1] = ((b >> 4) & 1u) | ((b >> 5) & 1u) << 8 | ((b >> 6) & 1u) << 16 | ((b >> 7) & 1u) << 24;
            *reinterpret_cast<Pack<unsigned, 2>*>(bytes + first) = packed;
        } else {
            static_assert(V == 4 || V == 8, "byte masks are written 4 or 8 bytes at a time");
            const unsigned packed = (b & 1u) | ((b >> 1) & 1u) << 8 | ((b >> 2) & 1u) << 16 | ((b >> 3) & 1u) << 24;
            *reinterpret_cast<unsigned*>(bytes + first) = packed;
        }
    } else {
#pragma unroll
        for (int k = 0; k < V; ++k) {
            if (first + k < n) bytes[first + k] = static_cast<unsigned char>((b >> k) & 1u);
        }
    }
}

// One warp chunk of the forward: lane `lane` handles the V elements at `first`. Full: the whole
// chunk lies inside n and every pointer is aligned, so no bounds are checked (the hot path).
template <typename T, bool Aligned, bool MaskBytes, bool Full, typename Keep>
__device__ __forceinline__ void forward_chunk(const Keep& keep, const T* __restrict__ x, T* __restrict__ y,
                                              void* __restrict__ mask, float scale, i64 n, i64 first, int lane) {
    constexpr int V = Pack16<T>::size;
    constexpr int G = 32 / V;
    T v[V];
    if constexpr (Full) {
        const Pack<T, V> pack = *reinterpret_cast<const Pack<T, V>*>(x + first);
#pragma unroll
        for (int k = 0; k < V; ++k) v[k] = pack.v[k];
    } else {
        load_pack<T, V, Aligned>(x, first, n, v);
    }
    unsigned b = keep.template bits<T, V>(first, v);
    if (!Full && first + V > n) {  // elements past the end keep nothing (zero padding bits)
        const i64 valid = n - first;
        b = valid <= 0 ? 0u : b & ((1u << valid) - 1u);
    }
    T out[V];
#pragma unroll
    for (int k = 0; k < V; ++k) out[k] = keep_or_zero((b >> k) & 1u, v[k], scale);
    if constexpr (Full) {
        Pack<T, V> pack;
#pragma unroll
        for (int k = 0; k < V; ++k) pack.v[k] = out[k];
        *reinterpret_cast<Pack<T, V>*>(y + first) = pack;
    } else {
        store_pack<T, V, Aligned>(y, first, n, out);
    }
    if constexpr (MaskBytes) {
        store_mask_bytes<V, Aligned>(static_cast<unsigned char*>(mask), first, Full ? first + V : n, b);
    } else {
        const unsigned word = group_or<G>(b << ((lane * V) & 31));
        const i64 w = first >> 5;
        if ((lane & (G - 1)) == 0 && (Full || w * 32 < n)) static_cast<unsigned*>(mask)[w] = word;
    }
}

// y = keep ? x * scale : 0, and the keep bits as a bitmask (MaskBytes false: 32-bit words) or one
// byte (0 or 1) per element (MaskBytes true). One chunk per warp per step: on an H200, 2 or 4
// chunks per step (all loaded before any is used) were 10-20% slower for ReLU and no faster for
// dropout; loading the warp's next chunk before drawing this one's bits (software pipelining, 4
// more registers, or launch bounds to keep 5-6 blocks an SM) made the dropout forward 6-14% slower
// (docs/bitmask.md).
template <typename T, bool Aligned, bool MaskBytes, typename Keep>
__device__ __forceinline__ void masked_forward(const Keep& keep, const T* __restrict__ x, T* __restrict__ y,
                                               void* __restrict__ mask, float scale, i64 n) {
    constexpr int V = Pack16<T>::size;
    const int lane = threadIdx.x & 31;
    const i64 warp = (static_cast<i64>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
    const i64 warps = (static_cast<i64>(gridDim.x) * blockDim.x) >> 5;
    const i64 chunks = (n + 32 * V - 1) / (32 * V);
    const i64 full_chunks = Aligned ? n / (32 * V) : 0;
    for (i64 c = warp; c < chunks; c += warps) {  // warp-uniform: every lane reaches group_or
        const i64 first = c * (32 * V) + static_cast<i64>(lane) * V;
        if (c < full_chunks) {
            forward_chunk<T, Aligned, MaskBytes, true>(keep, x, y, mask, scale, n, first, lane);
        } else {
            forward_chunk<T, Aligned, MaskBytes, false>(keep, x, y, mask, scale, n, first, lane);
        }
    }
}

template <typename T, bool Aligned, bool MaskBytes>
__device__ __forceinline__ unsigned mask_bits(const unsigned char* __restrict__ mask, i64 mask_bytes, i64 first,
                                              i64 n) {
    constexpr int V = Pack16<T>::size;
    unsigned b = 0;
    if constexpr (MaskBytes) {
        if (Aligned && first + V <= n) {
            if constexpr (V == 8) {
                const Pack<unsigned, 2> p = *reinterpret_cast<const Pack<unsigned, 2>*>(mask + first);
#pragma unroll
                for (int k = 0; k < 4; ++k) {
                    b |= (((p.v[0] >> (8 * k)) & 0xffu) != 0u ? 1u : 0u) << k;
                    b |= (((p.v[1] >> (8 * k)) & 0xffu) != 0u ? 1u : 0u) << (k + 4);
                }
            } else {
                const unsigned p = *reinterpret_cast<const unsigned*>(mask + first);
#pragma unroll
                for (int k = 0; k < 4; ++k) b |= (((p >> (8 * k)) & 0xffu) != 0u ? 1u : 0u) << k;
            }
        } else {
#pragma unroll
            for (int k = 0; k < V; ++k) b |= (first + k < n && mask[first + k] != 0 ? 1u : 0u) << k;
        }
    } else {
        b = read_bits<V>(mask, mask_bytes, first);
    }
    return b;
}

// dx = bit ? dy * scale : 0 for elements [start, n), the bits read from a bitmask (MaskBytes
// false) or one byte per element (MaskBytes true; any nonzero byte keeps, so a torch.bool mask
// reads the same). A thread per pack, striding over the grid.
template <typename T, bool Aligned, bool MaskBytes>
__device__ __forceinline__ void masked_backward(const T* __restrict__ dy, const unsigned char* __restrict__ mask,
                                                i64 mask_bytes, T* __restrict__ dx, float scale, i64 n,
                                                i64 start = 0) {
    constexpr int V = Pack16<T>::size;
    const i64 stride = static_cast<i64>(gridDim.x) * blockDim.x * V;
    for (i64 first = start + (static_cast<i64>(blockIdx.x) * blockDim.x + threadIdx.x) * V; first < n;
         first += stride) {
        T g[V];
        load_pack<T, V, Aligned>(dy, first, n, g);
        const unsigned b = mask_bits<T, Aligned, MaskBytes>(mask, mask_bytes, first, n);
        T out[V];
#pragma unroll
        for (int k = 0; k < V; ++k) out[k] = keep_or_zero((b >> k) & 1u, g[k], scale);
        store_pack<T, V, Aligned>(dx, first, n, out);
    }
}

// The bitmask backward over whole mask lines: a warp step covers LINE = 1024 elements, whose 32
// mask words (128 bytes) lane l reads word l of, in one coalesced request; each lane then takes the
// word holding its V bits from the lane that read it (a shuffle). With a thread per pack, every
// warp read its own 32-byte sector of the mask, a quarter of a line, and the backward stayed at
// 90-91% of copy on the H200 while the forward, which writes the mask, reached 98%.
// The S = 32 / V packs of dy a lane handles are all loaded before any is used. Lines are strided
// over the grid's warps; every pointer is 16-byte aligned (the host checks) and `lines` lines lie
// wholly inside n, so no bounds are checked. Returns nothing; the caller handles the tail.
constexpr int MASK_LINE = 1024;  // elements per 32-word mask line

template <typename T>
__device__ __forceinline__ void masked_backward_lines(const T* __restrict__ dy, const unsigned* __restrict__ words,
                                                      T* __restrict__ dx, float scale, i64 lines) {
    constexpr int V = Pack16<T>::size;
    constexpr int S = MASK_LINE / (32 * V);  // packs per lane per line: 4 for 16-bit types, 8 for float
    const int lane = threadIdx.x & 31;
    const i64 warp = (static_cast<i64>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
    const i64 warps = (static_cast<i64>(gridDim.x) * blockDim.x) >> 5;
    for (i64 line = warp; line < lines; line += warps) {
        const i64 base = line * MASK_LINE + lane * V;
        const unsigned word = words[line * 32 + lane];
        Pack<T, V> g[S];
#pragma unroll
        for (int s = 0; s < S; ++s) g[s] = *reinterpret_cast<const Pack<T, V>*>(dy + base + s * 32 * V);
#pragma unroll
        for (int s = 0; s < S; ++s) {
            // Element base + s*32*V + k is bit (lane*V + k) % 32 of the line's word s*V + lane*V/32.
            const unsigned w = __shfl_sync(0xffffffffu, word, s * V + ((lane * V) >> 5));
            const unsigned b = w >> ((lane * V) & 31);
            Pack<T, V> out;
#pragma unroll
            for (int k = 0; k < V; ++k) out.v[k] = keep_or_zero((b >> k) & 1u, g[s].v[k], scale);
            *reinterpret_cast<Pack<T, V>*>(dx + base + s * 32 * V) = out;
        }
    }
}

}  // namespace bw

// ---------------------------------------------------------------------------------------------
// Kernels (CuPy name expressions). Aligned: every pointer is 16-byte aligned (the host checks).
// ---------------------------------------------------------------------------------------------

template <typename T, bool Aligned>
__global__ void relu_forward_bitmask(const T* __restrict__ x, T* __restrict__ y, unsigned* __restrict__ words, i64 n) {
    bw::masked_forward<T, Aligned, false>(bw::ReluKeep(), x, y, words, 1.0f, n);
}

// Aligned: whole mask lines a warp step (masked_backward_lines), then the tail (fewer than 1024
// elements) a pack per thread. Misaligned: a pack per thread throughout.
template <typename T, bool Aligned>
__global__ void bitmask_backward(const T* __restrict__ dy, const unsigned char* __restrict__ mask, i64 mask_bytes,
                                 T* __restrict__ dx, float scale, i64 n) {
    i64 start = 0;
    if constexpr (Aligned) {
        const i64 lines = n / bw::MASK_LINE;
        bw::masked_backward_lines<T>(dy, reinterpret_cast<const unsigned*>(mask), dx, scale, lines);
        start = lines * bw::MASK_LINE;
    }
    bw::masked_backward<T, Aligned, false>(dy, mask, mask_bytes, dx, scale, n, start);
}

template <typename T, bool Aligned>
__global__ void bytemask_backward(const T* __restrict__ dy, const unsigned char* __restrict__ mask,
                                  T* __restrict__ dx, float scale, i64 n) {
    bw::masked_backward<T, Aligned, true>(dy, mask, n, dx, scale, n);
}

template <typename T, bool Aligned, bool WideCounter>
__global__ void dropout_forward_bitmask(const T* __restrict__ x, T* __restrict__ y, unsigned* __restrict__ words,
                                        unsigned threshold, float scale, unsigned long long seed,
                                        unsigned long long offset, i64 n) {
    bw::masked_forward<T, Aligned, false>(bw::DropoutKeep<WideCounter>{threshold, seed, offset}, x, y, words, scale, n);
}

template <typename T, bool Aligned, bool WideCounter>
__global__ void dropout_forward_bytemask(const T* __restrict__ x, T* __restrict__ y, unsigned char* __restrict__ bytes,
                                         unsigned threshold, float scale, unsigned long long seed,
                                         unsigned long long offset, i64 n) {
    bw::masked_forward<T, Aligned, true>(bw::DropoutKeep<WideCounter>{threshold, seed, offset}, x, y, bytes, scale, n);
}

// The article's first scheme: one thread per 8 consecutive elements builds one mask byte. The
// byte writes are coalesced, but a warp's loads of x stride 8 elements apart (16 or 32 bytes per
// lane per load), so each load instruction touches 32 separate sectors: the "1/8 of the
// bandwidth" the article warns about. Same mask bytes as the bitmask (bitmask.cuh).
template <typename T>
__global__ void relu_forward_bytemask_naive(const T* __restrict__ x, T* __restrict__ y,
                                            unsigned char* __restrict__ mask, i64 n) {
    const i64 nbytes = (n + 7) / 8;
    const i64 stride = static_cast<i64>(gridDim.x) * blockDim.x;
    for (i64 i = static_cast<i64>(blockIdx.x) * blockDim.x + threadIdx.x; i < nbytes; i += stride) {
        unsigned m = 0;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            const i64 k = i * 8 + j;
            if (k < n) {
                const T v = x[k];
                const bool positive = bw::to_float(v) > 0.0f;
                y[k] = positive ? v : bw::from_float<T>(0.0f);
                m |= (positive ? 1u : 0u) << j;
            }
        }
        mask[i] = static_cast<unsigned char>(m);
    }
}

// Its backward in the same style: one thread per mask byte and its 8 elements of dy.
template <typename T>
__global__ void relu_backward_bytemask_naive(const T* __restrict__ dy, const unsigned char* __restrict__ mask,
                                             T* __restrict__ dx, i64 n) {
    const i64 nbytes = (n + 7) / 8;
    const i64 stride = static_cast<i64>(gridDim.x) * blockDim.x;
    for (i64 i = static_cast<i64>(blockIdx.x) * blockDim.x + threadIdx.x; i < nbytes; i += stride) {
        const unsigned m = mask[i];
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            const i64 k = i * 8 + j;
            if (k < n) dx[k] = (m >> j) & 1u ? dy[k] : bw::from_float<T>(0.0f);
        }
    }
}

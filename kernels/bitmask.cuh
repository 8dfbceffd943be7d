// Helpers for the 1-bit mask kernels (kernels/bitmask.cu): the mask format, Philox4x32-10, the
// lane-group OR that builds a mask word, and packed loads and stores with a scalar tail.
//
// Mask format (every bitmask kernel and bwbench/cuda/bitmask.py agree on it): element i is bit
// (i % 32) of 32-bit word i / 32, words little-endian, bits past the last element zero. Read as
// bytes, that is bit (i % 8) of byte i / 8: the same bytes the article's one-thread-per-8-elements
// int8 mask writes, so both mask writers produce the same bytes for the same input.
//
// Like common.cuh, this header includes nothing (NVRTC may not find toolkit headers).
#pragma once

#include "common.cuh"

namespace bw {

// ---------------------------------------------------------------------------------------------
// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011; the
// constants and round of Random123's philox.h). Counter based: the four outputs depend only on
// (counter, key), so any thread can draw any element's number with no state and no curand header.
// bwbench/philox.py is the same function in Python; tests/test_philox.py checks both against
// Random123's known-answer vectors.
// ---------------------------------------------------------------------------------------------

struct Philox4 {
    unsigned v[4];
};

constexpr unsigned PHILOX_M0 = 0xD2511F53u;  // round multipliers
constexpr unsigned PHILOX_M1 = 0xCD9E8D57u;
constexpr unsigned PHILOX_W0 = 0x9E3779B9u;  // key bumps (Weyl sequence)
constexpr unsigned PHILOX_W1 = 0xBB67AE85u;

// The 64-bit product M0 * c0 as its two 32-bit halves. Written as mul and mulhi on 32-bit values,
// which ptxas fuses into one IMAD.WIDE (a 64-bit multiply of zero-extended values left it adding
// the zero upper words back in, one extra instruction per product).
struct Product {
    unsigned lo, hi;
};

__device__ __forceinline__ Product product(unsigned m, unsigned c) { return Product{m * c, __umulhi(m, c)}; }

// One round, given the product M0 * c[0] (computed by the caller: the first round's comes from
// philox4x32_10_from_product's caller).
__device__ __forceinline__ void philox_round(unsigned (&c)[4], unsigned k0, unsigned k1, Product m0c0) {
    const Product m1c2 = product(PHILOX_M1, c[2]);
    const unsigned c1 = c[1];
    const unsigned c3 = c[3];
    c[0] = m1c2.hi ^ c1 ^ k0;
    c[1] = m1c2.lo;
    c[2] = m0c0.hi ^ c3 ^ k1;
    c[3] = m0c0.lo;
}

// Philox4x32-10 of counter (c0, c1, c2, c3) where the caller passes m0c0 = M0 * c0 instead of c0
// (every caller now passes product(PHILOX_M0, c0); the split remains from draws that shared it).
__device__ __forceinline__ Philox4 philox4x32_10_from_product(Product m0c0, unsigned c1, unsigned c2,
                                                              unsigned c3, unsigned k0, unsigned k1) {
    unsigned c[4] = {0u, c1, c2, c3};  // c0 enters the first round only through m0c0
    philox_round(c, k0, k1, m0c0);
#pragma unroll
    for (int round = 1; round < 10; ++round) {  // the key is bumped before every round but the first
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
        philox_round(c, k0, k1, product(PHILOX_M0, c[0]));
    }
    Philox4 out;
#pragma unroll
    for (int i = 0; i < 4; ++i) out.v[i] = c[i];
    return out;
}

__device__ __forceinline__ Philox4 philox4x32_10(unsigned c0, unsigned c1, unsigned c2, unsigned c3, unsigned k0,
                                                unsigned k1) {
    return philox4x32_10_from_product(product(PHILOX_M0, c0), c1, c2, c3, k0, k1);
}

// The dropout stream: element i keeps iff 16-bit half (i % 8) of Philox at counter
// (lo(i / 8), hi(i / 8), lo(offset), hi(offset)) with key (lo(seed), hi(seed)), the halves taken
// low first from output words 0..3, is >= threshold = round(p * 2^16) (host side). An integer
// comparison, so the Python reference reproduces it bit for bit. Sixteen bits an element, not 32:
// one draw decides 8 elements, half the draws the float16 forward made when it was issue bound.
__device__ __forceinline__ Philox4 dropout_draw(unsigned long long group, unsigned long long seed,
                                                unsigned long long offset) {
    return philox4x32_10(static_cast<unsigned>(group), static_cast<unsigned>(group >> 32), static_cast<unsigned>(offset),
                         static_cast<unsigned>(offset >> 32), static_cast<unsigned>(seed),
                         static_cast<unsigned>(seed >> 32));
}

// The same draw for a group below 2^32 (the caller's promise). With the counter's second word a
// literal 0 the first round's second output, and so the second round's first product, depend only
// on offset and seed: the compiler computes them once, in the uniform datapath.
__device__ __forceinline__ Philox4 dropout_draw_narrow(unsigned group, unsigned long long seed,
                                                       unsigned long long offset) {
    return philox4x32_10_from_product(product(PHILOX_M0, group), 0u, static_cast<unsigned>(offset),
                                      static_cast<unsigned>(offset >> 32), static_cast<unsigned>(seed),
                                      static_cast<unsigned>(seed >> 32));
}

// Keep bits of the 2 * W elements whose random halves are in words w[0..W): bit 2k from the low
// half of w[k], bit 2k + 1 from its high half.
template <int W>
__device__ __forceinline__ unsigned keep_halves(const unsigned (&w)[W], unsigned threshold) {
    unsigned b = 0;
#pragma unroll
    for (int k = 0; k < W; ++k) {
        b |= ((w[k] & 0xFFFFu) >= threshold ? 1u : 0u) << (2 * k);
        b |= ((w[k] >> 16) >= threshold ? 2u : 0u) << (2 * k);
    }
    return b;
}

// ---------------------------------------------------------------------------------------------
// OR of a value over aligned groups of G lanes (G = 32 / elements per lane): every lane of the
// group gets the group's mask word. A butterfly of full-warp shuffles (log2 G of them). REDUX
// (__reduce_or_sync) looks like one instruction, but each group names a different member mask, and
// on an H200 the dropout kernel built on it ran at 50% of copy, 26% slower than the same kernel
// storing one byte per element. All 32 lanes must call it.
// ---------------------------------------------------------------------------------------------

template <int G>
__device__ __forceinline__ unsigned group_or(unsigned w) {
    static_assert(G >= 1 && G <= 32 && (G & (G - 1)) == 0, "G must be a power of two, at most 32");
#pragma unroll
    for (int o = 1; o < G; o <<= 1) w |= __shfl_xor_sync(0xffffffffu, w, o);
    return w;
}

// ---------------------------------------------------------------------------------------------
// V consecutive elements starting at `first`: one 16-byte access when the pointer is aligned
// (Aligned, checked on the host) and the whole pack is in range; element by element otherwise.
// Out-of-range elements load as 0 and are not stored.
// ---------------------------------------------------------------------------------------------

template <typename T, int V, bool Aligned>
__device__ __forceinline__ void load_pack(const T* __restrict__ p, i64 first, i64 n, T (&out)[V]) {
    if (Aligned && first + V <= n) {
        const Pack<T, V> pack = *reinterpret_cast<const Pack<T, V>*>(p + first);
#pragma unroll
        for (int k = 0; k < V; ++k) out[k] = pack.v[k];
    } else {
#pragma unroll
        for (int k = 0; k < V; ++k) out[k] = first + k < n ? p[first + k] : from_float<T>(0.0f);
    }
}

template <typename T, int V, bool Aligned>
__device__ __forceinline__ void store_pack(T* __restrict__ p, i64 first, i64 n, const T (&in)[V]) {
    if (Aligned && first + V <= n) {
        Pack<T, V> pack;
#pragma unroll
        for (int k = 0; k < V; ++k) pack.v[k] = in[k];
        *reinterpret_cast<Pack<T, V>*>(p + first) = pack;
    } else {
#pragma unroll
        for (int k = 0; k < V; ++k) {
            if (first + k < n) p[first + k] = in[k];
        }
    }
}

// V bits of a packed mask starting at element `first` (a multiple of V, V divides 32): bit k of
// the result is element first + k. The mask holds `mask_bytes` bytes; a whole word is read when
// it lies inside them, else the bytes that do (the last word of a mask that is only
// ceil(n / 8) bytes long).
template <int V>
__device__ __forceinline__ unsigned read_bits(const unsigned char* __restrict__ mask, i64 mask_bytes, i64 first) {
    const i64 w = first >> 5;
    unsigned word = 0;
    if ((w + 1) * 4 <= mask_bytes) {
        word = reinterpret_cast<const unsigned*>(mask)[w];
    } else {
#pragma unroll
        for (int b = 0; b < 4; ++b) {
            if (w * 4 + b < mask_bytes) word |= static_cast<unsigned>(mask[w * 4 + b]) << (8 * b);
        }
    }
    return (word >> (static_cast<unsigned>(first) & 31u)) & ((V == 32 ? 0u : (1u << V)) - 1u);
}

}  // namespace bw

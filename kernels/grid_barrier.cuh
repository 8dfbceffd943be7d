// The grid-wide barrier and the ready flags of kernels/bn_relu.cu's one-launch (cooperative)
// kernels: blocks of a fully resident grid wait for each other between phases.
#pragma once

#include "common.cuh"

namespace bnr {

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

}  // namespace bnr

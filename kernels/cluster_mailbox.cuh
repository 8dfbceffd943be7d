// A per-row all-to-all of one small value between the C blocks of a thread-block cluster, without
// a cluster barrier a row (sm_90 and later).
//
// Each block owns a mailbox in its shared memory: C slots, one per sender, and an mbarrier that
// completes once every slot holds this round's value. A block posts its value into every peer's
// mailbox with st.async, whose bytes count against the receiver's mbarrier, and then waits on its
// own. A block therefore waits only until the last peer has posted, never for peers to finish
// storing, and leaves as soon as its own work is done: no barrier over the whole cluster stands
// between rows or at the end.
//
// Rounds alternate between two mailboxes. A sender can be at most one round ahead of a receiver
// (it cannot finish round r + 1 before the receiver has posted round r + 1, which the receiver
// does only after reading round r), so round r + 2 never overwrites a slot still to be read.
// The one cluster barrier is at the start: peers must see the mbarriers initialised before the
// first post. `open` arrives there at once and `wait_peers_ready` waits just before the first post,
// so the first row's loads overlap it.
#pragma once

// A kernel's cluster size, fixed at compile time (sm_90 and later; elsewhere the kernel is never launched).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define BW_CLUSTER_DIMS(c) __cluster_dims__(c, 1, 1)
#else
#define BW_CLUSTER_DIMS(c)
#endif

namespace bw {
namespace cluster {

template <typename V, int C>
struct Mailbox {
    // V: float or float2 (store_async's overloads)
    V slot[2][C];
    unsigned long long full[2];  // mbarriers, one a round parity
};

__device__ __forceinline__ unsigned smem_address(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// Thread 0 initialises both mbarriers (one arrival each: the owner's expect_tx); every thread then
// arrives at the cluster barrier that `wait_peers_ready` completes.
template <typename V, int C>
__device__ __forceinline__ void open(Mailbox<V, C>& box) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (threadIdx.x == 0) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_address(&box.full[0])) : "memory");
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_address(&box.full[1])) : "memory");
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
#endif
}

// Every thread, once, before its block's first post (and before leaving, if it never posts).
__device__ __forceinline__ void wait_peers_ready() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
#endif
}

// Thread 0, each round before the block waits: the round completes once C values have landed.
template <typename V, int C>
__device__ __forceinline__ void expect(Mailbox<V, C>& box, int round) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_address(&box.full[round & 1])),
                 "r"(static_cast<unsigned>(C * sizeof(V)))
                 : "memory");
#endif
}

__device__ __forceinline__ void store_async(unsigned slot, float value, unsigned bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];" ::"r"(slot),
                 "r"(__float_as_uint(value)), "r"(bar)
                 : "memory");
#endif
}

__device__ __forceinline__ void store_async(unsigned slot, float2 value, unsigned bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.b32 [%0], {%1, %2}, [%3];" ::"r"(slot),
                 "r"(__float_as_uint(value.x)), "r"(__float_as_uint(value.y)), "r"(bar)
                 : "memory");
#endif
}

// Thread `to` (< C) of block `rank` posts `value` into slot `rank` of block `to`'s mailbox.
template <typename V, int C>
__device__ __forceinline__ void post(Mailbox<V, C>& box, int round, int rank, int to, V value) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    unsigned slot, bar;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(slot) : "r"(smem_address(&box.slot[round & 1][rank])), "r"(to));
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(bar) : "r"(smem_address(&box.full[round & 1])), "r"(to));
    store_async(slot, value, bar);
#endif
}

// Every thread: waits until round `round`'s C values are in this block's mailbox; returns them.
template <typename V, int C>
__device__ __forceinline__ const V* wait(Mailbox<V, C>& box, int round) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    const unsigned bar = smem_address(&box.full[round & 1]);
    const unsigned parity = static_cast<unsigned>(round >> 1) & 1u;
    unsigned done = 0;
    while (!done) {
        asm volatile(
            "{\n\t.reg .pred p;\n\t"
            "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n\t"
            "selp.u32 %0, 1, 0, p;\n\t}"
            : "=r"(done)
            : "r"(bar), "r"(parity)
            : "memory");
    }
#endif
    return box.slot[round & 1];
}

}  // namespace cluster
}  // namespace bw

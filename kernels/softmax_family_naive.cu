// The naive multi-kernel versions of log-softmax and of the softmax backward, in the style of
// softmax_naive.cu: one launch per step of the formula, every intermediate crossing DRAM in
// float32. The reductions (row max, row sum) are softmax_naive.cu's kernels; this file adds the
// element-wise steps they lack.
//
//   log-softmax:  m = max(x); t = x - m; e = exp(t); s = sum(e); y = t - log(s)
//                 (softmax_naive.cu: reduce_max, broadcast_sub, reduce_sum; here: exp_into,
//                 broadcast_sub_log)
//   softmax grad: p = y * dy; s = sum(p); t = dy - s; dx = t * y
//                 (softmax_naive.cu: reduce_sum; here: mul, broadcast_sub_grad, mul_out)
//
// Indices are 64-bit: rows * cols may exceed 2^31.

#include "common.cuh"

// e[i] = exp(t[i]) into a second buffer (log-softmax still needs t afterwards)
__global__ void naive_exp_into(const float* __restrict__ t, float* __restrict__ e, i64 n) {
    const i64 stride = bw::grid_stride();
    for (i64 i = bw::global_thread_index(); i < n; i += stride) e[i] = expf(t[i]);
}

// y[r, c] = t[r, c] - log(s[r]), rounded once to T
template <typename T>
__global__ void naive_broadcast_sub_log(const float* __restrict__ t, const float* __restrict__ s,
                                        T* __restrict__ y, i64 rows, i64 cols) {
    const i64 n = rows * cols;
    const i64 stride = bw::grid_stride();
    i64 i = bw::global_thread_index();
    if (i >= n) return;
    bw::RowCursor cur(i, stride, cols);
    for (; i < n; i += stride, cur.advance()) y[i] = bw::from_float<T>(t[i] - logf(s[cur.row]));
}

// p[i] = y[i] * dy[i] in float
template <typename T>
__global__ void naive_mul(const T* __restrict__ y, const T* __restrict__ dy, float* __restrict__ p, i64 n) {
    const i64 stride = bw::grid_stride();
    for (i64 i = bw::global_thread_index(); i < n; i += stride) p[i] = bw::to_float(y[i]) * bw::to_float(dy[i]);
}

// t[r, c] = dy[r, c] - s[r] in float
template <typename T>
__global__ void naive_broadcast_sub_grad(const T* __restrict__ dy, const float* __restrict__ s,
                                         float* __restrict__ t, i64 rows, i64 cols) {
    const i64 n = rows * cols;
    const i64 stride = bw::grid_stride();
    i64 i = bw::global_thread_index();
    if (i >= n) return;
    bw::RowCursor cur(i, stride, cols);
    for (; i < n; i += stride, cur.advance()) t[i] = bw::to_float(dy[i]) - s[cur.row];
}

// dx[i] = t[i] * y[i], rounded once to T
template <typename T>
__global__ void naive_mul_out(const float* __restrict__ t, const T* __restrict__ y, T* __restrict__ dx, i64 n) {
    const i64 stride = bw::grid_stride();
    for (i64 i = bw::global_thread_index(); i < n; i += stride) dx[i] = bw::from_float<T>(t[i] * bw::to_float(y[i]));
}

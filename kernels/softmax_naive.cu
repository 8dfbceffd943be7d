// The article's naive softmax: five kernels, one per step of the formula
//
//     m = max(x);  t = x - m;  t = exp(t);  s = sum(t);  y = t / s        (per row)
//
// each a separate launch that reads its input from global memory and writes its output back. The
// point of "naive" is that structure (five launches, the row crossing DRAM again at every step:
// about 6 passes of float32 traffic instead of one read and one write), not careless code: each
// kernel is a plain, reasonably written grid-stride loop, so the gap to the fused kernels measures
// the fusion and nothing else.
//
// Intermediates are float32 whatever the storage type T, so half and bfloat16 inputs are rounded
// only once, when y is written. Indices are 64-bit: rows * cols may exceed 2^31.
//
// Reductions run one block per row (grid-stride over rows) and need blockDim.x to be a multiple of
// 32; the elementwise kernels take any launch shape.

#include "common.cuh"

// row_max[r] = max_c x[r, c]
template <typename T>
__global__ void naive_reduce_max(const T* __restrict__ x, float* __restrict__ row_max, i64 rows,
                                 i64 cols) {
    for (i64 row = blockIdx.x; row < rows; row += gridDim.x) {
        const T* xr = x + row * cols;
        float m = bw::MaxOp::identity();
        for (i64 c = threadIdx.x; c < cols; c += blockDim.x) {
            m = fmaxf(m, bw::to_float(xr[c]));
        }
        m = bw::block_allreduce<bw::MaxOp>(m);
        if (threadIdx.x == 0) row_max[row] = m;
    }
}

// tmp[r, c] = x[r, c] - row_max[r]
template <typename T>
__global__ void naive_broadcast_sub(const T* __restrict__ x, const float* __restrict__ row_max,
                                    float* __restrict__ tmp, i64 rows, i64 cols) {
    const i64 n = rows * cols;
    const i64 stride = bw::grid_stride();
    i64 i = bw::global_thread_index();
    if (i >= n) return;
    bw::RowCursor cur(i, stride, cols);
    for (; i < n; i += stride, cur.advance()) {
        tmp[i] = bw::to_float(x[i]) - row_max[cur.row];
    }
}

// tmp[i] = exp(tmp[i]), in place
__global__ void naive_exp(float* __restrict__ tmp, i64 n) {
    const i64 stride = bw::grid_stride();
    for (i64 i = bw::global_thread_index(); i < n; i += stride) {
        tmp[i] = expf(tmp[i]);
    }
}

// row_sum[r] = sum_c tmp[r, c]
__global__ void naive_reduce_sum(const float* __restrict__ tmp, float* __restrict__ row_sum,
                                 i64 rows, i64 cols) {
    for (i64 row = blockIdx.x; row < rows; row += gridDim.x) {
        const float* tr = tmp + row * cols;
        float s = bw::SumOp::identity();
        for (i64 c = threadIdx.x; c < cols; c += blockDim.x) {
            s += tr[c];
        }
        s = bw::block_allreduce<bw::SumOp>(s);
        if (threadIdx.x == 0) row_sum[row] = s;
    }
}

// y[r, c] = tmp[r, c] / row_sum[r], rounded once to T
template <typename T>
__global__ void naive_broadcast_div(const float* __restrict__ tmp,
                                    const float* __restrict__ row_sum, T* __restrict__ y, i64 rows,
                                    i64 cols) {
    const i64 n = rows * cols;
    const i64 stride = bw::grid_stride();
    i64 i = bw::global_thread_index();
    if (i >= n) return;
    bw::RowCursor cur(i, stride, cols);
    for (; i < n; i += stride, cur.advance()) {
        y[i] = bw::from_float<T>(tmp[i] / row_sum[cur.row]);
    }
}

// Experiment (not used by bwbench): softmax_grad_warp with y and dy kept in registers in their
// storage type (raw 16-byte packs) instead of as floats, converted again for the store. Half the
// registers for half/bfloat16 rows, so more warps an SM; two more conversions an element.
#include "softmax.cu"

template <typename T, int Algo, int P, int NP, int G, int R>
__global__ void __launch_bounds__(BW_SOFTMAX_WARP_BLOCK)
softmax_grad_warp_raw(const T* __restrict__ y, i64 y_stride, const T* __restrict__ dy, i64 dy_stride,
                      T* __restrict__ dx, i64 dx_stride, i64 rows, int cols) {
    typedef Pack<T, P> PackT;
    GroupRows<G, R> walk;
    for (; walk.first < rows; walk.first += walk.step) {
        PackT buf_y[R][NP];
        PackT buf_dy[R][NP];
        float row_sum[R];
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const i64 row = walk.first + walk.offset + r;
            const bool live = row < rows;
            const PackT* yr = bw::smx::row_packs<T, P>(y, live ? row : 0, y_stride);
            const PackT* dyr = bw::smx::row_packs<T, P>(dy, live ? row : 0, dy_stride);
#pragma unroll
            for (int p = 0; p < NP; ++p) {
                const int pack = p * G + walk.lane;
                if (live && pack * P < cols) {
                    buf_y[r][p] = yr[pack];
                    buf_dy[r][p] = dyr[pack];
                }
            }
        }
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const i64 row = walk.first + walk.offset + r;
            const bool live = row < rows;
            row_sum[r] = 0.0f;
#pragma unroll
            for (int p = 0; p < NP; ++p) {
                const int pack = p * G + walk.lane;
                if (live && pack * P < cols) {
                    float fy[P], fdy[P];
                    bw::smx::unpack(buf_y[r][p], fy);
                    bw::smx::unpack(buf_dy[r][p], fdy);
#pragma unroll
                    for (int i = 0; i < P; ++i) row_sum[r] += Backward<Algo, T>::term(fy[i], fdy[i]);
                }
            }
        }
#pragma unroll
        for (int r = 0; r < R; ++r) {
            row_sum[r] = bw::warp_allreduce<bw::SumOp, G>(row_sum[r]);
            const i64 row = walk.first + walk.offset + r;
            if (row >= rows) continue;
            PackT* dxr = bw::smx::row_packs<T, P>(dx, row, dx_stride);
#pragma unroll
            for (int p = 0; p < NP; ++p) {
                const int pack = p * G + walk.lane;
                if (pack * P < cols) {
                    float fy[P], fdy[P], f[P];
                    bw::smx::unpack(buf_y[r][p], fy);
                    bw::smx::unpack(buf_dy[r][p], fdy);
#pragma unroll
                    for (int i = 0; i < P; ++i) f[i] = Backward<Algo, T>::apply(fy[i], fdy[i], row_sum[r]);
                    dxr[pack] = bw::smx::pack_from<T, P>(f);
                }
            }
        }
    }
}

// Experiment (not used by bwbench): softmax_warp with x kept in registers in its storage type (raw
// 16-byte packs) instead of as floats. Half the registers for half/bfloat16 rows; softmax pays a
// second exp per element for the store (log-softmax only a second conversion).
#include "softmax.cu"

template <typename T, int Algo, int P, int NP, int G, int R>
__global__ void __launch_bounds__(BW_SOFTMAX_WARP_BLOCK)
softmax_warp_raw(const T* __restrict__ x, i64 x_stride, T* __restrict__ y, i64 y_stride, i64 rows, int cols) {
    typedef Pack<T, P> PackT;
    GroupRows<G, R> walk;
    for (; walk.first < rows; walk.first += walk.step) {
        PackT buf[R][NP];
        float row_max[R], row_sum[R];
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const i64 row = walk.first + walk.offset + r;
            const bool live = row < rows;
            const PackT* xr = bw::smx::row_packs<T, P>(x, live ? row : 0, x_stride);
#pragma unroll
            for (int p = 0; p < NP; ++p) {
                if (live && (p * G + walk.lane) * P < cols) buf[r][p] = xr[p * G + walk.lane];
            }
        }
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const bool live = walk.first + walk.offset + r < rows;
            row_max[r] = bw::neg_inf();
#pragma unroll
            for (int p = 0; p < NP; ++p) {
                if (live && (p * G + walk.lane) * P < cols) {
                    float f[P];
                    bw::smx::unpack(buf[r][p], f);
#pragma unroll
                    for (int i = 0; i < P; ++i) row_max[r] = fmaxf(row_max[r], f[i]);
                }
            }
            row_max[r] = bw::warp_allreduce<bw::MaxOp, G>(row_max[r]);
            row_sum[r] = 0.0f;
#pragma unroll
            for (int p = 0; p < NP; ++p) {
                if (live && (p * G + walk.lane) * P < cols) {
                    float f[P];
                    bw::smx::unpack(buf[r][p], f);
#pragma unroll
                    for (int i = 0; i < P; ++i) row_sum[r] += bw::smx::fast_exp<T>(f[i] - row_max[r]);
                }
            }
        }
#pragma unroll
        for (int r = 0; r < R; ++r) {
            row_sum[r] = bw::warp_allreduce<bw::SumOp, G>(row_sum[r]);
            const i64 row = walk.first + walk.offset + r;
            if (row >= rows) continue;
            const float k = Forward<Algo, T>::finish(row_sum[r]);
            PackT* yr = bw::smx::row_packs<T, P>(y, row, y_stride);
#pragma unroll
            for (int p = 0; p < NP; ++p) {
                const int pack = p * G + walk.lane;
                if (pack * P < cols) {
                    float f[P];
                    bw::smx::unpack(buf[r][p], f);
#pragma unroll
                    for (int i = 0; i < P; ++i) f[i] = Forward<Algo, T>::apply(f[i], row_max[r], k);
                    yr[pack] = bw::smx::pack_from<T, P>(f);
                }
            }
        }
    }
}

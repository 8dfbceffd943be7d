// Experiment (not used by bwbench): the warp tiers with the row held as floats (as before the raw
// packs), their loads fixed to 16-byte accesses, to time against the shipped raw-pack kernels.
#include "softmax.cu"

template <typename T, int Algo, int P, int NP, int G, int R>
__global__ void __launch_bounds__(BW_SOFTMAX_WARP_BLOCK)
softmax_warp_floats(const T* __restrict__ x, i64 x_stride, T* __restrict__ y, i64 y_stride, i64 rows,
             int cols) {
    static_assert(G >= 1 && G <= 32 && (G & (G - 1)) == 0, "G: a power of two up to 32");
    constexpr int C = P * NP;
    typedef Pack<T, P> PackT;
    GroupRows<G, R> walk;
    for (; walk.first < rows; walk.first += walk.step) {
        float buf[R][C];
        float row_max[R];
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const i64 row = walk.first + walk.offset + r;
            const bool live = row < rows;
            const PackT* xr = bw::smx::row_packs<T, P>(x, live ? row : 0, x_stride);
            row_max[r] = bw::neg_inf();
#pragma unroll
            for (int p = 0; p < NP; ++p) {
                const int pack = p * G + walk.lane;
                float f[P];
                if (live && pack * P < cols) {
                    const PackT v = xr[pack];
                    bw::smx::unpack(v, f);
                } else {  // padding: contributes nothing to max or sum, never stored
#pragma unroll
                    for (int i = 0; i < P; ++i) f[i] = bw::neg_inf();
                }
#pragma unroll
                for (int i = 0; i < P; ++i) {
                    buf[r][p * P + i] = f[i];
                    row_max[r] = fmaxf(row_max[r], f[i]);
                }
            }
        }
        float row_sum[R];
#pragma unroll
        for (int r = 0; r < R; ++r) {
            row_max[r] = bw::warp_allreduce<bw::MaxOp, G>(row_max[r]);
            row_sum[r] = 0.0f;
#pragma unroll
            for (int i = 0; i < C; ++i) {
                if (Algo == bw::smx::kSoftmax) {  // keep exp(x - m): the store only scales it
                    buf[r][i] = bw::smx::fast_exp<T>(buf[r][i] - row_max[r]);
                    row_sum[r] += buf[r][i];
                } else {  // keep x - m: the store only subtracts log(sum)
                    buf[r][i] -= row_max[r];
                    row_sum[r] += bw::smx::fast_exp<T>(buf[r][i]);
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
#pragma unroll
                    for (int i = 0; i < P; ++i) {
                        const float v = buf[r][p * P + i];
                        f[i] = Algo == bw::smx::kSoftmax ? v * k : v - k;
                    }
                    yr[pack] = bw::smx::pack_from<T, P>(f);
                }
            }
        }
    }
}

template <typename T, int Algo, int P, int NP, int G, int R>
__global__ void __launch_bounds__(BW_SOFTMAX_WARP_BLOCK)
softmax_grad_warp_floats(const T* __restrict__ y, i64 y_stride, const T* __restrict__ dy, i64 dy_stride,
                  T* __restrict__ dx, i64 dx_stride, i64 rows, int cols) {
    static_assert(G >= 1 && G <= 32 && (G & (G - 1)) == 0, "G: a power of two up to 32");
    constexpr int C = P * NP;
    typedef Pack<T, P> PackT;
    GroupRows<G, R> walk;
    for (; walk.first < rows; walk.first += walk.step) {
        float buf_y[R][C];
        float buf_dy[R][C];
        float row_sum[R];
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const i64 row = walk.first + walk.offset + r;
            const bool live = row < rows;
            const PackT* yr = bw::smx::row_packs<T, P>(y, live ? row : 0, y_stride);
            const PackT* dyr = bw::smx::row_packs<T, P>(dy, live ? row : 0, dy_stride);
            row_sum[r] = 0.0f;
#pragma unroll
            for (int p = 0; p < NP; ++p) {
                const int pack = p * G + walk.lane;
                float fy[P], fdy[P];
                if (live && pack * P < cols) {
                    const PackT vy = yr[pack], vdy = dyr[pack];
                    bw::smx::unpack(vy, fy);
                    bw::smx::unpack(vdy, fdy);
                } else {
#pragma unroll
                    for (int i = 0; i < P; ++i) fy[i] = fdy[i] = 0.0f;
                }
#pragma unroll
                for (int i = 0; i < P; ++i) {
                    buf_y[r][p * P + i] = fy[i];
                    buf_dy[r][p * P + i] = fdy[i];
                    row_sum[r] += Backward<Algo, T>::term(fy[i], fdy[i]);
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
                    float f[P];
#pragma unroll
                    for (int i = 0; i < P; ++i) {
                        f[i] = Backward<Algo, T>::apply(buf_y[r][p * P + i], buf_dy[r][p * P + i], row_sum[r]);
                    }
                    dxr[pack] = bw::smx::pack_from<T, P>(f);
                }
            }
        }
    }
}


"""Probe for a permute kernel change tried and not kept (notes/permute.md: through bwbench's general
tile path two tiles a block measured slower): float16 batch transpose (B, R, C) -> (B, C, R) in
64 x 64 tiles of 16-byte packs, one tile a block (as permute_tiled does it) against two tiles a block,
the second tile's loads out before the first tile's writes (a one-wave transpose otherwise reads
everything, then writes everything). Each is checked against torch, then timed cold with bwbench's
Timer next to bwbench's permute, torch.compile and torch. A tuning aid (notes/permute.md);
`bwbench run permute` gives the figures to report.

Usage: PYTHONPATH=. python3 scripts/permute_two_tiles_probe.py
Shapes are multiples of 64 (full tiles only; the probe has no edge handling).
"""
import cupy as cp
import numpy as np
import torch

from bwbench.cuda.permute import permute
from bwbench.stats import SamplingPolicy
from bwbench.timing import Timer

SRC = r'''
#include <cuda_fp16.h>
struct __align__(16) H8 { __half v[8]; };
constexpr int T = 64, PAD = 2;
// tile index -> (batch, tile row, tile col), tile cols fastest
__device__ __forceinline__ void origin(int tile, int tiles_c, int tiles_r, int R, int C, long long& src, long long& dst) {
    const int tc = tile % tiles_c, q = tile / tiles_c, tr = q % tiles_r, b = q / tiles_r;
    src = (long long)b * R * C + (long long)tr * T * C + tc * T;   // x[b][tr*T][tc*T]
    dst = (long long)b * R * C + (long long)tc * T * R + tr * T;   // y[b][tc*T][tr*T]
}
template <int TILES>
__global__ void __launch_bounds__(256) tr(const __half* __restrict__ x, __half* __restrict__ y, int R, int C, int tiles_c, int tiles_r, int ntiles) {
    __shared__ __align__(16) __half tile[TILES][T][T + PAD];
    const int t = threadIdx.x, xr = t % 8, yr = t / 8;
    H8 a[TILES][2];
    long long src[TILES], dst[TILES];
#pragma unroll
    for (int k = 0; k < TILES; ++k) origin(blockIdx.x * TILES + k, tiles_c, tiles_r, R, C, src[k], dst[k]);
    // tile 0's loads
#pragma unroll
    for (int s = 0; s < 2; ++s) a[0][s] = *reinterpret_cast<const H8*>(x + src[0] + (long long)(yr + 32 * s) * C + xr * 8);
#pragma unroll
    for (int s = 0; s < 2; ++s)
#pragma unroll
        for (int e = 0; e < 8; ++e) tile[0][yr + 32 * s][xr * 8 + e] = a[0][s].v[e];
    if constexpr (TILES == 2) {
        if (blockIdx.x * 2 + 1 < ntiles) {
#pragma unroll
            for (int s = 0; s < 2; ++s) a[1][s] = *reinterpret_cast<const H8*>(x + src[1] + (long long)(yr + 32 * s) * C + xr * 8);
        }
    }
    __syncthreads();
#pragma unroll
    for (int s = 0; s < 2; ++s) {
        const int c = yr + 32 * s;
        H8 w;
#pragma unroll
        for (int e = 0; e < 8; ++e) w.v[e] = tile[0][xr * 8 + e][c];
        *reinterpret_cast<H8*>(y + dst[0] + (long long)c * R + xr * 8) = w;
    }
    if constexpr (TILES == 2) {
        if (blockIdx.x * 2 + 1 < ntiles) {
#pragma unroll
            for (int s = 0; s < 2; ++s)
#pragma unroll
                for (int e = 0; e < 8; ++e) tile[1][yr + 32 * s][xr * 8 + e] = a[1][s].v[e];
        }
        __syncthreads();
        if (blockIdx.x * 2 + 1 < ntiles) {
#pragma unroll
            for (int s = 0; s < 2; ++s) {
                const int c = yr + 32 * s;
                H8 w;
#pragma unroll
                for (int e = 0; e < 8; ++e) w.v[e] = tile[1][xr * 8 + e][c];
                *reinterpret_cast<H8*>(y + dst[1] + (long long)c * R + xr * 8) = w;
            }
        }
    }
}
'''
mod = cp.RawModule(code=SRC, options=("-std=c++17",), name_expressions=["tr<1>", "tr<2>"])
dev = torch.device("cuda")
timer = Timer(dev, torch.cuda.get_device_properties(0).L2_cache_size, None,
              SamplingPolicy(min_samples=60, max_seconds=1.0))
for shape in ((64, 256, 256), (64, 512, 512), (64, 1024, 1024)):
    B, R, C = shape
    x = torch.randn(shape, device=dev).half()
    want = x.permute(0, 2, 1).contiguous()
    tiles_c, tiles_r = C // 64, R // 64
    ntiles = B * tiles_c * tiles_r
    row = []
    for tiles in (1, 2):
        k = mod.get_function(f"tr<{tiles}>")
        y = torch.full((B, C, R), float("nan"), device=dev, dtype=torch.half)
        args = (x.data_ptr(), y.data_ptr(), np.int32(R), np.int32(C), np.int32(tiles_c), np.int32(tiles_r), np.int32(ntiles))
        grid = -(-ntiles // tiles)
        def call(k=k, grid=grid, args=args):
            k((grid,), (256,), args, stream=cp.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream))
        call(); torch.cuda.synchronize()
        ok = torch.equal(y, want)
        us = timer.cold(call).stats.median_us
        row.append(f"{tiles} tile{'s' if tiles > 1 else ''}/block {us:6.2f} us{'' if ok else ' WRONG'}")
    out = torch.empty_like(want)
    row.append(f"bwbench {timer.cold(lambda: permute(x, (0, 2, 1), out=out)).stats.median_us:6.2f} us")
    comp = torch.compile(lambda t: t.permute(0, 2, 1).contiguous(), dynamic=False)
    comp(x)
    row.append(f"compiled {timer.cold(lambda: comp(x)).stats.median_us:6.2f} us")
    row.append(f"torch {timer.cold(lambda: x.permute(0, 2, 1).contiguous()).stats.median_us:6.2f} us")
    print("x".join(map(str, shape)), " | ".join(row), flush=True)

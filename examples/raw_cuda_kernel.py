"""A user's raw CUDA C++ kernel, compiled at run time by CuPy, benchmarked as a bwbench suite.

    bwbench run ./raw_cuda_kernel.py

z = a * x + y on float32 (saxpy) with 16-byte loads and stores: it reads x and y and writes z, 12
bytes per element, so its speed of light is a copy of that many bytes. The kernel runs on PyTorch's
current stream and reads the tensors where they are (their device addresses, zero-copy). Its kind, "cupy", is this file's own name for it: any string is a
kind, and one that is not a known baseline kind counts as code under test.
"""

import functools

import torch

from bwbench import Skip, Suite, Tolerance, Traffic

SOURCE = r"""
extern "C" __global__ void saxpy4(const float4* __restrict__ x, const float4* __restrict__ y,
                                  float4* __restrict__ z, float a, long long n4) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n4;
         i += (long long)gridDim.x * blockDim.x) {
        float4 xv = x[i], yv = y[i];
        z[i] = make_float4(fmaf(a, xv.x, yv.x), fmaf(a, xv.y, yv.y), fmaf(a, xv.z, yv.z), fmaf(a, xv.w, yv.w));
    }
}
"""

suite = Suite(
    "raw_cuda_saxpy",
    "z = a * x + y (float32) with a raw CUDA kernel through CuPy, next to torch",
    axes={"n": [1 << 20, 1 << 24, 1 << 28]},
    dtypes=["float32"],
    quick={"n": [1 << 20, 1 << 24]},
    tolerances={"float32": Tolerance(rtol=1e-6, atol=1e-6)},
)

A = 2.5


@functools.lru_cache(maxsize=None)
def kernel():
    import cupy

    return cupy.RawModule(code=SOURCE, options=("-std=c++17",)).get_function("saxpy4")


def saxpy(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """A * x + y into a new tensor, launched on PyTorch's current stream. The tensors go to the
    kernel as raw device addresses: nothing is copied and the host never waits for the GPU."""
    import cupy
    import numpy as np

    z = torch.empty_like(y)
    n4 = x.numel() // 4
    blocks = min((n4 + 255) // 256, 65535 * 8)
    pointers = (np.uint64(x.data_ptr()), np.uint64(y.data_ptr()), np.uint64(z.data_ptr()))
    with cupy.cuda.Device(x.device.index), cupy.cuda.ExternalStream(torch.cuda.current_stream(x.device).cuda_stream):
        kernel()((blocks,), (256,), (*pointers, np.float32(A), np.int64(n4)))
    return z


@suite.inputs
def inputs(case, gen):
    return {"x": torch.randn(case.n, generator=gen, device=gen.device),
            "y": torch.randn(case.n, generator=gen, device=gen.device)}


@suite.reference
def reference(x, y):
    return A * x.double() + y.double()


@suite.traffic
def traffic(case):
    return Traffic(read=2 * 4 * case.n, write=4 * case.n)


@suite.impl("raw_cuda", kind="cupy")
def raw_cuda(case):
    """My CUDA C++ kernel: float4 loads and stores, a grid-stride loop."""
    try:
        kernel()  # compile now: build time, not timed
    except ImportError as err:
        raise Skip(f"CuPy is not installed here ({err})")
    if case.n % 4:
        raise Skip("n must be a multiple of 4 for float4 accesses")
    return saxpy


@suite.impl("torch", kind="torch")
def eager(case):
    """torch.add(y, x, alpha=A): one fused elementwise kernel."""
    return lambda x, y: torch.add(y, x, alpha=A)

"""Runtime-API calls on the simulator: 2-D copies, async copies and memsets on streams, managed memory,
memory info, the modelled GPU's properties, events, the device clock and error strings."""

from __future__ import annotations

import pytest
import torch
from conftest import build

SRC = r"""
#include <cuda_runtime.h>
#include <ctime>

// Copy a rows x cols block out of a padded source (pitch spitch floats) into a padded destination through
// a pitched device buffer, then scale it on a stream, with async copies and a memset around the kernel.
__global__ void scale_rows(float* d, size_t pitch_bytes, int rows, int cols, float s) {
    int r = blockIdx.y, c = blockIdx.x * blockDim.x + threadIdx.x;
    if (r < rows && c < cols) {
        float* row = (float*)((char*)d + r * pitch_bytes);
        row[c] *= s;
    }
}
void copy2d(const float* src, float* dst, int rows, int cols, int spitch, int dpitch, float* status_out) {
    float status[3];  // host code cannot write device memory: filled here, copied out at the end
    float* d; size_t pitch;
    cudaMallocPitch(&d, &pitch, cols * sizeof(float), rows);
    cudaStream_t st; cudaStreamCreate(&st);
    cudaMemsetAsync(d, 0, pitch * rows, st);
    cudaMemcpy2DAsync(d, pitch, src, spitch * sizeof(float), cols * sizeof(float), rows, cudaMemcpyDeviceToDevice,
                      st);
    dim3 grid((cols + 31) / 32, rows);
    scale_rows<<<grid, 32, 0, st>>>(d, pitch, rows, cols, 2.0f);
    // round trip on the stream: out to a scratch buffer and back with cudaMemcpyAsync, in stream order
    float* scratch;
    cudaMalloc(&scratch, pitch * rows);
    cudaMemcpyAsync(scratch, d, pitch * rows, cudaMemcpyDeviceToDevice, st);
    cudaMemsetAsync(d, 0xFF, pitch * rows, st);
    cudaMemcpyAsync(d, scratch, pitch * rows, cudaMemcpyDeviceToDevice, st);
    cudaFree(scratch);
    cudaError_t e = cudaMemcpy2D(dst, dpitch * sizeof(float), d, pitch, cols * sizeof(float), rows,
                                 cudaMemcpyDeviceToDevice);
    cudaStreamSynchronize(st);
    status[0] = (float)pitch;
    status[1] = (float)e;
    // a pitch below the row width is refused
    status[2] = (float)cudaMemcpy2D(dst, 1, d, pitch, cols * sizeof(float), rows, cudaMemcpyDeviceToDevice);
    cudaStreamDestroy(st);
    cudaFree(d);
    cudaMemcpy(status_out, status, sizeof status, cudaMemcpyHostToDevice);
}

__global__ void fill(float* p, int n, float v) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] = v + i;
}
void managed(float* out, int n) {
    float* m;
    cudaMallocManaged(&m, n * sizeof(float));
    fill<<<(n + 127) / 128, 128>>>(m, n, 0.5f);
    cudaDeviceSynchronize();
    float* h = new float[n];
    for (int i = 0; i < n; ++i) h[i] = m[i] * 2.0f;  // the host reads managed memory directly
    cudaMemcpy(out, h, n * sizeof(float), cudaMemcpyHostToDevice);
    delete[] h;
    cudaFree(m);
}

__global__ void clocks_kernel(long long* t) {
    long long a = clock64();
    clock_t c = clock();
    (void)c;
    long long b = clock64();
    t[threadIdx.x] = b - a;
}
void info(long long* out_d, long long* ticks, float* ms_d) {
    long long out[6]; float ms[1];  // host results, copied to the device arguments at the end
    size_t free_b = 0, total_b = 0;
    out[0] = cudaMemGetInfo(&free_b, &total_b);
    out[1] = (long long)free_b;
    out[2] = (long long)total_b;
    out[3] = CLOCKS_PER_SEC;
    cudaEvent_t a, b;
    cudaEventCreate(&a); cudaEventCreate(&b);
    cudaEventRecord(a);
    clocks_kernel<<<1, 32>>>(ticks);
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    cudaEventElapsedTime(ms, a, b);
    cudaEventDestroy(a); cudaEventDestroy(b);
    out[4] = cudaGetLastError();
    out[5] = cudaPeekAtLastError();
    cudaMemcpy(out_d, out, sizeof out, cudaMemcpyHostToDevice);
    cudaMemcpy(ms_d, ms, sizeof ms, cudaMemcpyHostToDevice);
}

// the modelled GPU's numbers
void props(long long* out, char* name) {
    cudaDeviceProp p;
    cudaGetDeviceProperties(&p, 0);
    long long v[] = {p.multiProcessorCount, p.major, p.minor, (long long)p.sharedMemPerMultiprocessor,
                     (long long)p.sharedMemPerBlockOptin, (long long)p.sharedMemPerBlock, p.regsPerMultiprocessor,
                     p.regsPerBlock, p.maxThreadsPerMultiProcessor, p.maxBlocksPerMultiProcessor, p.warpSize,
                     p.l2CacheSize, p.memoryBusWidth, p.memoryClockRate, (long long)p.totalGlobalMem,
                     p.maxThreadsPerBlock};
    cudaMemcpy(out, v, sizeof v, cudaMemcpyHostToDevice);
    cudaMemcpy(name, p.name, 32, cudaMemcpyHostToDevice);
}

// every error code the simulator's API returns has a name and a string
void errors(int* out_d) {
    int out[5];
    cudaError_t codes[] = {cudaSuccess, cudaErrorInvalidValue, cudaErrorMemoryAllocation,
                           cudaErrorInvalidConfiguration, cudaErrorLaunchFailure};
    for (int i = 0; i < 5; ++i) {
        const char* s = cudaGetErrorString(codes[i]);
        const char* n = cudaGetErrorName(codes[i]);
        out[i] = (s && *s && strcmp(s, "unknown error") != 0) + 2 * (n && strcmp(n, "cudaErrorUnknown") != 0);
    }
    cudaMemcpy(out_d, out, sizeof out, cudaMemcpyHostToDevice);
}
"""


@pytest.fixture(scope="module")
def lib():
    m = build(SRC, "host_api.cu")
    yield m
    m.close()


def test_memcpy2d_pitched_async_on_a_stream(lib):
    rows, cols, spitch, dpitch = 7, 45, 50, 64
    g = torch.Generator().manual_seed(3)
    src = torch.randn(rows * spitch, generator=g)
    dst = torch.full((rows * dpitch,), float("nan"))
    status = torch.zeros(3)
    lib.call("copy2d", [src, dst, rows, cols, spitch, dpitch, status])
    assert status[0] == 512 and status[1] == 0
    assert status[2] == 1, "a destination pitch below the row width must be cudaErrorInvalidValue"
    got = dst.view(rows, dpitch)
    assert torch.equal(got[:, :cols], 2 * src.view(rows, spitch)[:, :cols])
    assert torch.isnan(got[:, cols:]).all(), "the padding of the destination must not be written"


def test_managed_memory(lib):
    out = torch.full((300,), float("nan"))
    lib.call("managed", [out, 300])
    assert torch.equal(out, 2 * (0.5 + torch.arange(300, dtype=torch.float32)))


def test_mem_info_events_and_clocks(lib):
    out = torch.full((6,), -1, dtype=torch.int64)
    ticks = torch.full((32,), -1, dtype=torch.int64)
    ms = torch.full((1,), float("nan"))
    lib.call("info", [out, ticks, ms])
    assert out[0] == 0 and out[2] == 85017624576 and 0 < out[1] <= out[2]
    assert out[3] == 1000000
    assert (ticks >= 0).all(), "clock64() must not run backwards"
    assert ms[0] >= 0
    assert out[4] == 0 and out[5] == 0


def test_device_properties_are_the_h100s(lib):
    out = torch.zeros(16, dtype=torch.int64)
    name = torch.zeros(32, dtype=torch.uint8)
    lib.call("props", [out, name])
    assert out.tolist() == [132, 9, 0, 228 * 1024, 227 * 1024, 48 * 1024, 65536, 65536, 2048, 32, 32,
                            50 * 1024 * 1024, 5120, 2619000, 85017624576, 1024]
    assert bytes(name.tolist()).split(b"\0")[0] == b"NVIDIA H100 80GB HBM3"


def test_error_names_and_strings(lib):
    out = torch.zeros(5, dtype=torch.int32)
    lib.call("errors", [out])
    assert out.tolist() == [3] * 5

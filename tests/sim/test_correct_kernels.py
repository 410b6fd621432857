"""Correct kernels produce correct results and no diagnosis, in checked mode, under every thread order."""

from __future__ import annotations

import pytest
import torch
from conftest import build

SRC = r"""
#include <cuda_runtime.h>
#include <cfloat>

#define BLOCK 256
__global__ void reduce_kernel(const float* x, float* partial, int n) {
    __shared__ float sdata[BLOCK];
    int tid = threadIdx.x;
    int i = blockIdx.x * blockDim.x * 2 + tid;
    float v = 0.0f;
    if (i < n) v += x[i];
    if (i + blockDim.x < n) v += x[i + blockDim.x];
    sdata[tid] = v;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 32; s >>= 1) {
        if (tid < s) sdata[tid] += sdata[tid + s];
        __syncthreads();
    }
    if (tid < 32) {
        float w = sdata[tid] + sdata[tid + 32];
        for (int o = 16; o > 0; o >>= 1) w += __shfl_down_sync(0xffffffff, w, o);
        if (tid == 0) partial[blockIdx.x] = w;
    }
}
void reduce(const float* x, float* out, float* partial, int n) {
    int blocks = (n + 2 * BLOCK - 1) / (2 * BLOCK);
    reduce_kernel<<<blocks, BLOCK>>>(x, partial, n);
    reduce_kernel<<<1, BLOCK>>>(partial, out, blocks);
}

#define TILE 16
__global__ void matmul_kernel(const float* A, const float* B, float* C, int M, int N, int K) {
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE + 1];
    int tx = threadIdx.x, ty = threadIdx.y;
    int row = blockIdx.y * TILE + ty, col = blockIdx.x * TILE + tx;
    float acc = 0.0f;
    for (int t = 0; t < (K + TILE - 1) / TILE; ++t) {
        int ka = t * TILE + tx, kb = t * TILE + ty;
        As[ty][tx] = (row < M && ka < K) ? A[row * K + ka] : 0.0f;
        Bs[ty][tx] = (kb < K && col < N) ? B[kb * N + col] : 0.0f;
        __syncthreads();
        #pragma unroll
        for (int k = 0; k < TILE; ++k) acc += As[ty][k] * Bs[k][tx];
        __syncthreads();
    }
    if (row < M && col < N) C[row * N + col] = acc;
}
void matmul(const float* A, const float* B, float* C, int M, int N, int K) {
    dim3 block(TILE, TILE);
    dim3 grid((N + TILE - 1) / TILE, (M + TILE - 1) / TILE);
    matmul_kernel<<<grid, block>>>(A, B, C, M, N, K);
}

__inline__ __device__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffff, v, o));
    return v;
}
__inline__ __device__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);
    return v;
}
__global__ void softmax_kernel(const float* x, float* y, int cols) {
    __shared__ float red[32];
    const float* row = x + blockIdx.x * cols;
    float* out = y + blockIdx.x * cols;
    int t = threadIdx.x, lane = t % 32, warp = t / 32, nw = blockDim.x / 32;
    float m = -FLT_MAX;
    for (int c = t; c < cols; c += blockDim.x) m = fmaxf(m, row[c]);
    m = warp_max(m);
    if (lane == 0) red[warp] = m;
    __syncthreads();
    m = lane < nw ? red[lane] : -FLT_MAX;
    m = warp_max(m);
    __syncthreads();          // red[] is reused below
    float s = 0.0f;
    for (int c = t; c < cols; c += blockDim.x) s += expf(row[c] - m);
    s = warp_sum(s);
    if (lane == 0) red[warp] = s;
    __syncthreads();
    s = lane < nw ? red[lane] : 0.0f;
    s = warp_sum(s);
    for (int c = t; c < cols; c += blockDim.x) out[c] = expf(row[c] - m) / s;
}
void softmax(const float* x, float* y, int rows, int cols) { softmax_kernel<<<rows, 128>>>(x, y, cols); }

#define TDIM 32
#define ROWS 8
__global__ void transpose_kernel(const float* in, float* out, int w, int h) {
    __shared__ float tile[TDIM][TDIM + 1];
    int x = blockIdx.x * TDIM + threadIdx.x, y = blockIdx.y * TDIM + threadIdx.y;
    for (int j = 0; j < TDIM; j += ROWS)
        if (x < w && y + j < h) tile[threadIdx.y + j][threadIdx.x] = in[(y + j) * w + x];
    __syncthreads();
    x = blockIdx.y * TDIM + threadIdx.x;
    y = blockIdx.x * TDIM + threadIdx.y;
    for (int j = 0; j < TDIM; j += ROWS)
        if (x < h && y + j < w) out[(y + j) * h + x] = tile[threadIdx.x][threadIdx.y + j];
}
void transpose(const float* in, float* out, int w, int h) {
    dim3 block(TDIM, ROWS), grid((w + TDIM - 1) / TDIM, (h + TDIM - 1) / TDIM);
    transpose_kernel<<<grid, block>>>(in, out, w, h);
}
"""

ORDERS = ["forward", "reverse", "shuffle:3"]


@pytest.fixture(scope="module", params=ORDERS)
def lib(request):
    lib = build(SRC, "correct.cu", order=request.param)
    yield lib
    lib.close()


def test_reduction(lib) -> None:
    for n in (1, 1000, 4099):
        x = torch.randn(n)
        out = torch.full((1,), float("nan"))
        partial = torch.zeros((n + 511) // 512)
        lib.call("reduce", [x, out, partial, n])
        assert torch.allclose(out, x.sum().reshape(1), atol=1e-3), n


def test_tiled_gemm(lib) -> None:
    for m, n, k in ((33, 17, 40), (64, 64, 64)):
        a, b = torch.randn(m, k), torch.randn(k, n)
        c = torch.full((m, n), float("nan"))
        lib.call("matmul", [a, b, c, m, n, k])
        assert torch.allclose(c, a @ b, atol=1e-4)


def test_softmax_with_warp_shuffles(lib) -> None:
    x = torch.randn(5, 300) * 10
    y = torch.full_like(x, float("nan"))
    lib.call("softmax", [x, y, 5, 300])
    assert torch.allclose(y, torch.softmax(x, 1), atol=1e-6)


def test_shared_memory_transpose(lib) -> None:
    x = torch.randn(45, 70)
    y = torch.full((70, 45), float("nan"))
    lib.call("transpose", [x, y, 70, 45])
    assert torch.equal(y, x.t())

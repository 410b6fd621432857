// stencil2d.cu - one Jacobi step of the 5-point Laplacian stencil on a 2-D grid, with a shared tile and
// its one-cell halo; boundary cells copy through.
//
// Versions:
//   kernel1: global memory only
//   kernel2: (TILE+2) x (TILE+2) shared tile, halo loaded by edge threads
// Run: pytest tests/sim/test_realworld.py -k stencil2d (simulator), tests/test_parity.py (GPU)
#include <cuda_runtime.h>
#include "common.h"

#define TILE 16

// ----------------------------------------------------------------------------------------------------
// Kernels
// ----------------------------------------------------------------------------------------------------
__global__ void stencil_kernel1(float* out, const float* in, int H, int W) {
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= W || y >= H) return;
    int i = y * W + x;
    if (x == 0 || y == 0 || x == W - 1 || y == H - 1) out[i] = in[i];
    else out[i] = 0.25f * (in[i - 1] + in[i + 1] + in[i - W] + in[i + W]);
}

__global__ void stencil_kernel2(float* out, const float* in, int H, int W) {
    __shared__ float s[TILE + 2][TILE + 2];
    int tx = threadIdx.x, ty = threadIdx.y;
    int x = blockIdx.x * TILE + tx, y = blockIdx.y * TILE + ty;
    auto at = [&](int yy, int xx) { return yy >= 0 && yy < H && xx >= 0 && xx < W ? in[yy * W + xx] : 0.0f; };
    s[ty + 1][tx + 1] = at(y, x);
    if (tx == 0) s[ty + 1][0] = at(y, x - 1);
    if (tx == TILE - 1) s[ty + 1][TILE + 1] = at(y, x + 1);
    if (ty == 0) s[0][tx + 1] = at(y - 1, x);
    if (ty == TILE - 1) s[TILE + 1][tx + 1] = at(y + 1, x);
    __syncthreads();
    if (x >= W || y >= H) return;
    if (x == 0 || y == 0 || x == W - 1 || y == H - 1) out[y * W + x] = s[ty + 1][tx + 1];
    else out[y * W + x] = 0.25f * (s[ty + 1][tx] + s[ty + 1][tx + 2] + s[ty][tx + 1] + s[ty + 2][tx + 1]);
}

// ----------------------------------------------------------------------------------------------------
// Launchers
// ----------------------------------------------------------------------------------------------------
void stencil(int version, float* out, const float* in, int H, int W) {
    dim3 block(TILE, TILE), grid(ceil_div(W, TILE), ceil_div(H, TILE));
    if (version == 1) stencil_kernel1<<<grid, block>>>(out, in, H, W);
    else stencil_kernel2<<<grid, block>>>(out, in, H, W);
    cudaCheck(cudaGetLastError());
}

// ----------------------------------------------------------------------------------------------------
// Validation
// ----------------------------------------------------------------------------------------------------
void validate(int seed, float* report) {
    report_reset();
    rng_seed(seed);
    const int H = 35, W = 50;
    float* in = make_random(H * W);
    float* ref = (float*)malloc(H * W * sizeof(float));
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) {
            int i = y * W + x;
            ref[i] = (x == 0 || y == 0 || x == W - 1 || y == H - 1)
                         ? in[i] : 0.25f * (in[i - 1] + in[i + 1] + in[i - W] + in[i + W]);
        }
    float* d_in = to_device<float>(in, H * W);
    float* d_out = device_poisoned<float>(H * W);
    for (int version = 1; version <= 2; version++) {
        cudaCheck(cudaMemset(d_out, 0xFF, H * W * sizeof(float)));
        stencil(version, d_out, d_in, H, W);
        validate_result(d_out, ref, "out", H * W, 1e-6f);
    }
    cudaFree(d_in); cudaFree(d_out);
    free(in); free(ref);
    write_report(report);
}

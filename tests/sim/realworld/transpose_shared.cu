// transpose_shared.cu - matrix transpose through a padded shared-memory tile (the classic NVIDIA sample
// pattern), plus the naive version.
//
// Versions:
//   kernel1: naive, coalesced reads and strided writes
//   kernel2: TILE x TILE shared tile with +1 padding (no bank conflicts), BLOCK_ROWS rows per thread loop
// Run: pytest tests/sim/test_realworld.py -k transpose_shared (simulator), tests/test_parity.py (GPU)
#include <cuda_runtime.h>
#include "common.h"

#define TILE 32
#define BLOCK_ROWS 8

// ----------------------------------------------------------------------------------------------------
// Kernels
// ----------------------------------------------------------------------------------------------------
__global__ void transpose_kernel1(float* out, const float* in, int rows, int cols) {
    int c = blockIdx.x * blockDim.x + threadIdx.x, r = blockIdx.y * blockDim.y + threadIdx.y;
    if (r < rows && c < cols) out[c * rows + r] = in[r * cols + c];
}

__global__ void transpose_kernel2(float* out, const float* in, int rows, int cols) {
    __shared__ float tile[TILE][TILE + 1];
    int x = blockIdx.x * TILE + threadIdx.x, y = blockIdx.y * TILE + threadIdx.y;
    for (int j = 0; j < TILE; j += BLOCK_ROWS)
        if (x < cols && y + j < rows) tile[threadIdx.y + j][threadIdx.x] = in[(y + j) * cols + x];
    __syncthreads();
    x = blockIdx.y * TILE + threadIdx.x;  // swapped block indices
    y = blockIdx.x * TILE + threadIdx.y;
    for (int j = 0; j < TILE; j += BLOCK_ROWS)
        if (x < rows && y + j < cols) out[(y + j) * rows + x] = tile[threadIdx.x][threadIdx.y + j];
}

// ----------------------------------------------------------------------------------------------------
// Launchers
// ----------------------------------------------------------------------------------------------------
void transpose(int version, float* out, const float* in, int rows, int cols) {
    if (version == 1) {
        dim3 block(16, 16), grid(ceil_div(cols, 16), ceil_div(rows, 16));
        transpose_kernel1<<<grid, block>>>(out, in, rows, cols);
    } else {
        dim3 block(TILE, BLOCK_ROWS), grid(ceil_div(cols, TILE), ceil_div(rows, TILE));
        transpose_kernel2<<<grid, block>>>(out, in, rows, cols);
    }
    cudaCheck(cudaGetLastError());
}

// ----------------------------------------------------------------------------------------------------
// Validation
// ----------------------------------------------------------------------------------------------------
void validate(int seed, float* report) {
    report_reset();
    rng_seed(seed);
    const int rows = 45, cols = 70;
    float* in = make_random(rows * cols);
    float* ref = (float*)malloc(rows * cols * sizeof(float));
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) ref[c * rows + r] = in[r * cols + c];
    float* d_in = to_device<float>(in, rows * cols);
    float* d_out = device_poisoned<float>(rows * cols);
    for (int version = 1; version <= 2; version++) {
        cudaCheck(cudaMemset(d_out, 0xFF, rows * cols * sizeof(float)));
        transpose(version, d_out, d_in, rows, cols);
        validate_result(d_out, ref, "out", rows * cols, 0.0f);
    }
    cudaFree(d_in); cudaFree(d_out);
    free(in); free(ref);
    write_report(report);
}

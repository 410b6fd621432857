// spmv_csr.cu - sparse matrix-vector product y = A x with A in CSR form (the "CSR vector" kernel of
// Bell & Garland: one warp per row).
//
// Versions:
//   kernel1: CSR scalar, one thread per row
//   kernel2: CSR vector, one warp per row, __shfl_down_sync reduction, lane 0 writes
// Run: pytest tests/sim/test_realworld.py -k spmv_csr (simulator), tests/test_parity.py (GPU)
#include <cuda_runtime.h>
#include "common.h"

// ----------------------------------------------------------------------------------------------------
// Kernels
// ----------------------------------------------------------------------------------------------------
__global__ void spmv_scalar(float* y, const int* row_ptr, const int* cols, const float* vals, const float* x, int rows) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    float s = 0.0f;
    for (int k = row_ptr[r]; k < row_ptr[r + 1]; k++) s += vals[k] * x[cols[k]];
    y[r] = s;
}

__global__ void spmv_vector(float* y, const int* row_ptr, const int* cols, const float* vals, const float* x, int rows) {
    int warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32, lane = threadIdx.x & 31;
    if (warp >= rows) return;
    float s = 0.0f;
    for (int k = row_ptr[warp] + lane; k < row_ptr[warp + 1]; k += 32) s += vals[k] * __ldg(&x[cols[k]]);
    for (int off = 16; off > 0; off >>= 1) s += __shfl_down_sync(0xffffffff, s, off);
    if (lane == 0) y[warp] = s;
}

// ----------------------------------------------------------------------------------------------------
// Launchers
// ----------------------------------------------------------------------------------------------------
void spmv(int version, float* y, const int* row_ptr, const int* cols, const float* vals, const float* x, int rows,
          int block_size) {
    if (version == 1) spmv_scalar<<<ceil_div(rows, block_size), block_size>>>(y, row_ptr, cols, vals, x, rows);
    else spmv_vector<<<ceil_div(rows * 32, block_size), block_size>>>(y, row_ptr, cols, vals, x, rows);
    cudaCheck(cudaGetLastError());
}

// ----------------------------------------------------------------------------------------------------
// Validation: a random sparse matrix with empty rows and one long row
// ----------------------------------------------------------------------------------------------------
void validate(int seed, float* report) {
    report_reset();
    rng_seed(seed);
    const int rows = 50, ncols = 80;
    int* row_ptr = (int*)malloc((rows + 1) * sizeof(int));
    row_ptr[0] = 0;
    for (int r = 0; r < rows; r++) {
        int len = r == 7 ? 75 : (int)(rng_u32() % 6);  // some rows empty
        row_ptr[r + 1] = row_ptr[r] + len;
    }
    int nnz = row_ptr[rows];
    int* cols = make_random_int(nnz, ncols);
    float* vals = make_random(nnz);
    float* x = make_random(ncols);
    float* ref = (float*)malloc(rows * sizeof(float));
    for (int r = 0; r < rows; r++) {
        double s = 0;
        for (int k = row_ptr[r]; k < row_ptr[r + 1]; k++) s += vals[k] * x[cols[k]];
        ref[r] = (float)s;
    }
    int *d_row_ptr, *d_cols;
    cudaCheck(cudaMalloc(&d_row_ptr, (rows + 1) * sizeof(int)));
    cudaCheck(cudaMalloc(&d_cols, nnz * sizeof(int)));
    cudaCheck(cudaMemcpy(d_row_ptr, row_ptr, (rows + 1) * sizeof(int), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(d_cols, cols, nnz * sizeof(int), cudaMemcpyHostToDevice));
    float* d_vals = to_device<float>(vals, nnz);
    float* d_x = to_device<float>(x, ncols);
    float* d_y = device_poisoned<float>(rows);
    int block_sizes[] = {32, 128};
    for (int version = 1; version <= 2; version++)
        for (int bs : block_sizes) {
            cudaCheck(cudaMemset(d_y, 0xFF, rows * sizeof(float)));
            spmv(version, d_y, d_row_ptr, d_cols, d_vals, d_x, rows, bs);
            validate_result(d_y, ref, "y", rows, 1e-5f);
        }
    cudaFree(d_row_ptr); cudaFree(d_cols); cudaFree(d_vals); cudaFree(d_x); cudaFree(d_y);
    free(row_ptr); free(cols); free(vals); free(x); free(ref);
    write_report(report);
}

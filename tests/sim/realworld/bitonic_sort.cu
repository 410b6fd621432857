// bitonic_sort.cu - sort each segment of 2^k keys in shared memory with a bitonic network (the CUDA
// samples' sortingNetworks bitonicSortShared pattern), keys padded with +inf to the segment size.
//
// Versions:
//   kernel1: one block per segment, SEG/2 threads, each compare-exchanges one pair per stage
// Run: pytest tests/sim/test_realworld.py -k bitonic_sort (simulator), tests/test_parity.py (GPU)
#include <cuda_runtime.h>
#include <cfloat>
#include "common.h"

#define SEG 256

// ----------------------------------------------------------------------------------------------------
// Kernels
// ----------------------------------------------------------------------------------------------------
__global__ void bitonic_sort_kernel(float* keys, int n) {
    __shared__ float s[SEG];
    int base = blockIdx.x * SEG, t = threadIdx.x;
    s[t] = base + t < n ? keys[base + t] : FLT_MAX;
    s[t + SEG / 2] = base + t + SEG / 2 < n ? keys[base + t + SEG / 2] : FLT_MAX;
    for (int size = 2; size <= SEG; size <<= 1) {
        for (int stride = size / 2; stride > 0; stride >>= 1) {
            __syncthreads();
            int pos = 2 * t - (t & (stride - 1));  // first element of this thread's pair
            bool ascending = ((pos & size) == 0) || size == SEG;
            float a = s[pos], b = s[pos + stride];
            if ((a > b) == ascending) { s[pos] = b; s[pos + stride] = a; }
        }
    }
    __syncthreads();
    if (base + t < n) keys[base + t] = s[t];
    if (base + t + SEG / 2 < n) keys[base + t + SEG / 2] = s[t + SEG / 2];
}

// ----------------------------------------------------------------------------------------------------
// Launchers
// ----------------------------------------------------------------------------------------------------
void bitonic_sort_segments(float* keys, int n) {
    bitonic_sort_kernel<<<ceil_div(n, SEG), SEG / 2>>>(keys, n);
    cudaCheck(cudaGetLastError());
}

// ----------------------------------------------------------------------------------------------------
// Validation
// ----------------------------------------------------------------------------------------------------
static int cmp_float(const void* a, const void* b) {
    float x = *(const float*)a, y = *(const float*)b;
    return (x > y) - (x < y);
}
void validate(int seed, float* report) {
    report_reset();
    rng_seed(seed);
    const int n = 3 * SEG + 77;  // a short last segment
    float* keys = make_random(n);
    float* ref = (float*)malloc(n * sizeof(float));
    memcpy(ref, keys, n * sizeof(float));
    for (int s = 0; s < n; s += SEG) qsort(ref + s, (n - s < SEG ? n - s : SEG), sizeof(float), cmp_float);
    float* d_keys = to_device<float>(keys, n);
    bitonic_sort_segments(d_keys, n);
    validate_result(d_keys, ref, "keys", n, 0.0f);
    cudaFree(d_keys);
    free(keys); free(ref);
    write_report(report);
}

// ====================================================================================================
// Lesson 08, task 8.7: variants of the fused RMSNorm + 1x128 quantization, toward the copy bandwidth (not graded).
//
// The solution's rmsnorm_quant_1x128_fast_kernel gives a row to one warp: a row of 4096 bf16 is 16 uint4 per lane
// in registers (128 registers, spills), 16 warps per SM, and 53% of the copy bandwidth on the H200 (issue 40's aim:
// 85%). Its Triton twin reaches 76% with a whole program per row: many threads per row, few values each. These
// variants do the same in CUDA: one block per row, THREADS threads, NP 16-byte pieces per thread (cols <= 8 *
// THREADS * NP), w read with the row (the same 8 KB for every row: L1 and L2 hits), the sum of squares reduced
// over the block (warp shuffles, then one __syncthreads over the warps' partial sums), each group of 128 values
// held by one half of a warp (piece k = THREADS * j + t: lanes 0-15 hold 16 neighbouring pieces), its scale
// written by the half-warp's first lane.
//
// Versions (callable from Python as m.<name>(x, w, y, scales, rows, cols, eps), the solution's contract):
//   rq_rowblock_128    128 threads a row, 4 pieces each at cols = 4096
//   rq_rowblock_256    256 threads a row, 2 pieces each at cols = 4096 (the Triton twin's shape: 8 warps)
//   rq_rowblock_512    512 threads a row, 1 piece each at cols = 4096
// Each needs cols % 8 == 0, cols <= 8 * THREADS * NP, 16-byte aligned x and w, 8-byte aligned y; otherwise it
// calls the solution's launcher.
//
// Not a file of its own: benchmarks/fp8_quant_variants.py builds it appended to solutions/08_fp8/fp8.cu, whose
// helpers it uses (bf16x8_to_float, e4m3x8, halfwarp_max, warp_sum, aligned16, the launcher it falls back to).
// (An #include of the .cu would do on nvcc, but the simulator builds the text it is given, not included kernels.)
//
// Run it: python3 benchmarks/fp8_quant_variants.py (a GPU: the table of each against the copy bandwidth and the
// solution); tests/test_08_fp8.py checks each on the simulator as it checks task 8.3.
// ====================================================================================================

template <int THREADS, int NP>
__global__ void __launch_bounds__(THREADS) rq_rowblock_kernel(const __nv_bfloat16* __restrict__ x,
                                                              const __nv_bfloat16* __restrict__ w,
                                                              __nv_fp8_e4m3* __restrict__ y,
                                                              float* __restrict__ scales, int rows, int cols,
                                                              float eps) {
    __shared__ float s_part[THREADS / 32];
    const int r = blockIdx.x, t = threadIdx.x, lane = t & 31, warp = t >> 5;
    const int pieces = cols / 8;
    const uint4* xr = reinterpret_cast<const uint4*>(x + (long long)r * cols);
    const uint4* wv = reinterpret_cast<const uint4*>(w);
    uint4 raw[NP], wraw[NP];
#pragma unroll
    for (int j = 0; j < NP; ++j) {  // everything in flight first: the row's pieces and w's
        const int k = THREADS * j + t;
        raw[j] = k < pieces ? xr[k] : make_uint4(0u, 0u, 0u, 0u);
        wraw[j] = k < pieces ? __ldg(wv + k) : make_uint4(0u, 0u, 0u, 0u);
    }
    float ss = 0.0f;
#pragma unroll
    for (int j = 0; j < NP; ++j) {
        float f[8];
        bf16x8_to_float(raw[j], f);
        for (int i = 0; i < 8; ++i) ss = fmaf(f[i], f[i], ss);
    }
    ss = warp_sum(ss);
    if (lane == 0) s_part[warp] = ss;
    __syncthreads();
    float total = 0.0f;
#pragma unroll
    for (int i = 0; i < THREADS / 32; ++i) total += s_part[i];
    const float rstd = rsqrtf(total / (float)cols + eps);
#pragma unroll
    for (int j = 0; j < NP; ++j) {
        if (THREADS * j >= pieces) break;  // the same for the whole block: no piece of this j exists
        const int k = THREADS * j + t;
        float v[8], wf[8];
        bf16x8_to_float(raw[j], v);
        bf16x8_to_float(wraw[j], wf);
        float m = 0.0f;
        for (int i = 0; i < 8; ++i) {
            v[i] = v[i] * rstd * wf[i];
            m = fmaxf(m, fabsf(v[i]));
        }
        const float amax = fmaxf(halfwarp_max(m), kAmaxFloor);
        if (k < pieces) {
            *reinterpret_cast<uint2*>(y + (long long)r * cols + 8 * k) = e4m3x8(v, kE4m3Max / amax);
            if ((lane & 15) == 0) scales[(long long)(k / 16) * rows + r] = amax / kE4m3Max;
        }
    }
}

template <int THREADS, int NP>
static void rq_rowblock(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_fp8_e4m3* y, float* scales, int rows,
                        int cols, float eps) {
    if (rows <= 0 || cols <= 0) return;
    if (cols % 8 != 0 || cols > 8 * THREADS * NP || !aligned16(x) || !aligned16(w) || !aligned8(y)) {
        rmsnorm_quant_1x128(x, w, y, scales, rows, cols, eps);
        return;
    }
    rq_rowblock_kernel<THREADS, NP><<<rows, THREADS>>>(x, w, y, scales, rows, cols, eps);
}

void rq_rowblock_128(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_fp8_e4m3* y, float* scales, int rows,
                     int cols, float eps) {
    rq_rowblock<128, 4>(x, w, y, scales, rows, cols, eps);
}

void rq_rowblock_256(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_fp8_e4m3* y, float* scales, int rows,
                     int cols, float eps) {
    rq_rowblock<256, 2>(x, w, y, scales, rows, cols, eps);
}

void rq_rowblock_512(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_fp8_e4m3* y, float* scales, int rows,
                     int cols, float eps) {
    rq_rowblock<512, 1>(x, w, y, scales, rows, cols, eps);
}

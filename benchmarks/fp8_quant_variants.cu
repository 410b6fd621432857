// ====================================================================================================
// Lesson 08, task 8.7: variants of the fused RMSNorm + 1x128 quantization around the solution's kernel (not graded).
//
// The solution's rmsnorm_quant_1x128_fast_kernel (a block of 128 threads per row, 4 pieces of x and 4 of w per thread
// at cols = 4096) reached 0.86 of the copy bandwidth with CUDA events and 83% in make bench on the H200 (issue 40's
// aim: 85%; results/nvidia-h200/fp8/wave3_*). ptxas gives it 62 registers, so 8 blocks (1024 threads) fit on an SM.
// These variants ask whether more bytes in flight per SM help:
//   rq_wlate_128       w's pieces loaded after the row's sum (L1/L2 hits: the same 8 KB for every row), so only x
//                      is held through the reduction: fewer registers, more blocks per SM
//   rq_wlate_128_b12   the same, __launch_bounds__(128, 12): the compiler must fit 12 blocks (42 registers)
//   rq_wlate_64        64 threads a row, 8 pieces each, w late
//   rq_stream_128      the solution's shape with x read by __ldcs (streaming: evict first; w stays cached)
// Each needs what the solution's fast path needs (cols % 8 == 0, cols <= 8 * THREADS * NP, 16-byte aligned x and w,
// 8-byte aligned y) and calls the solution's launcher otherwise.
//
// Not a file of its own: benchmarks/fp8_quant_variants.py builds it appended to solutions/08_fp8/fp8.cu, whose
// helpers it uses (bf16x8_to_float, e4m3x8, halfwarp_max, warp_sum, aligned16, aligned8, the launcher).
// Run it: python3 benchmarks/fp8_quant_variants.py (a GPU); tests/test_08_fp8.py checks each on the simulator.
// ====================================================================================================

template <int THREADS, int NP, int MINB, bool W_LATE, bool STREAM>
__global__ void __launch_bounds__(THREADS, MINB) rq_variant_kernel(const __nv_bfloat16* __restrict__ x,
                                                                   const __nv_bfloat16* __restrict__ w,
                                                                   __nv_fp8_e4m3* __restrict__ y,
                                                                   float* __restrict__ scales, int rows, int cols,
                                                                   float eps) {
    __shared__ float s_part[THREADS / 32];
    const int r = blockIdx.x, t = threadIdx.x, lane = t & 31, warp = t >> 5, pieces = cols / 8;
    const uint4* xr = reinterpret_cast<const uint4*>(x + (long long)r * cols);
    const uint4* wv = reinterpret_cast<const uint4*>(w);
    const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
    uint4 raw[NP], wraw[W_LATE ? 1 : NP];
#pragma unroll
    for (int j = 0; j < NP; ++j) {
        const int k = THREADS * j + t;
        raw[j] = k < pieces ? (STREAM ? __ldcs(xr + k) : xr[k]) : zero;
        if (!W_LATE) wraw[j] = k < pieces ? wv[k] : zero;
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
        if (THREADS * j >= pieces) break;
        const int k = THREADS * j + t;
        float v[8], wf[8];
        bf16x8_to_float(raw[j], v);
        bf16x8_to_float(W_LATE ? (k < pieces ? __ldg(wv + k) : zero) : wraw[W_LATE ? 0 : j], wf);
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

template <int THREADS, int NP, int MINB, bool W_LATE, bool STREAM>
static void rq_variant(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_fp8_e4m3* y, float* scales, int rows,
                       int cols, float eps) {
    if (rows <= 0 || cols <= 0) return;
    if (cols % 8 != 0 || cols > 8 * THREADS * NP || !aligned16(x) || !aligned16(w) || !aligned8(y)) {
        rmsnorm_quant_1x128(x, w, y, scales, rows, cols, eps);
        return;
    }
    rq_variant_kernel<THREADS, NP, MINB, W_LATE, STREAM><<<rows, THREADS>>>(x, w, y, scales, rows, cols, eps);
}

void rq_wlate_128(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_fp8_e4m3* y, float* scales, int rows,
                  int cols, float eps) {
    rq_variant<128, 4, 1, true, false>(x, w, y, scales, rows, cols, eps);
}
void rq_wlate_128_b12(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_fp8_e4m3* y, float* scales, int rows,
                      int cols, float eps) {
    rq_variant<128, 4, 12, true, false>(x, w, y, scales, rows, cols, eps);
}
void rq_wlate_64(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_fp8_e4m3* y, float* scales, int rows,
                 int cols, float eps) {
    rq_variant<64, 8, 1, true, false>(x, w, y, scales, rows, cols, eps);
}
void rq_stream_128(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_fp8_e4m3* y, float* scales, int rows,
                   int cols, float eps) {
    rq_variant<128, 4, 1, false, true>(x, w, y, scales, rows, cols, eps);
}

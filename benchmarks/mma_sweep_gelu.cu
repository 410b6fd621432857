// Issue 17 sweep (benchmarks/mma_sweep.py): variants of task 5.1's bias+GELU (solutions/05_tensor_cores/bf16.cu,
// included whole for gelu_f32, Bf16x8 and the solution's own launcher). Each variant differs from the solution
// kernel in one thing: streaming cache hints (__ldcs/__stcs), two row groups in flight per thread, the grid size,
// or a flat 1-D layout with several groups per thread.
#include "@BF16@"

template <bool Hint, int Rows2>
__global__ void gelu_v_kernel(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ bias,
                              __nv_bfloat16* __restrict__ y, int rows, int row_groups) {
    const uint4* x8 = reinterpret_cast<const uint4*>(x);
    const uint4* b8 = reinterpret_cast<const uint4*>(bias);
    uint4* y8 = reinterpret_cast<uint4*>(y);
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= row_groups) return;
    Bf16x8 b;
    b.raw = b8[c];
    float2 fb[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) fb[j] = __bfloat1622float2(b.pair[j]);
    for (long long r = blockIdx.y; r < rows; r += (long long)Rows2 * gridDim.y) {
        Bf16x8 v[Rows2];
        bool ok[Rows2];
#pragma unroll
        for (int u = 0; u < Rows2; ++u) {
            const long long rr = r + (long long)u * gridDim.y;
            ok[u] = rr < rows;
            if (ok[u]) v[u].raw = Hint ? __ldcs(x8 + rr * row_groups + c) : x8[rr * row_groups + c];
        }
#pragma unroll
        for (int u = 0; u < Rows2; ++u) {
            if (!ok[u]) continue;
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const float2 f = __bfloat1622float2(v[u].pair[j]);
                v[u].pair[j] = __floats2bfloat162_rn(gelu_f32(f.x + fb[j].x), gelu_f32(f.y + fb[j].y));
            }
            uint4* dst = y8 + (r + (long long)u * gridDim.y) * row_groups + c;
            if (Hint) __stcs(dst, v[u].raw); else *dst = v[u].raw;
        }
    }
}

// Flat: thread t of block blk handles groups blk * 256 * Items + t + i * 256 (i < Items), all loads first.
template <int Items>
__global__ void gelu_flat_kernel(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ bias,
                                 __nv_bfloat16* __restrict__ y, long long n_groups, int row_groups) {
    const uint4* x8 = reinterpret_cast<const uint4*>(x);
    const uint4* b8 = reinterpret_cast<const uint4*>(bias);
    uint4* y8 = reinterpret_cast<uint4*>(y);
    const long long g0 = (long long)blockIdx.x * 256 * Items + threadIdx.x;
    Bf16x8 v[Items], b[Items];
#pragma unroll
    for (int i = 0; i < Items; ++i) {
        const long long g = g0 + i * 256;
        if (g < n_groups) {
            v[i].raw = __ldcs(x8 + g);
            b[i].raw = __ldg(b8 + g % row_groups);
        }
    }
#pragma unroll
    for (int i = 0; i < Items; ++i) {
        const long long g = g0 + i * 256;
        if (g >= n_groups) continue;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const float2 f = __bfloat1622float2(v[i].pair[j]), fb = __bfloat1622float2(b[i].pair[j]);
            v[i].pair[j] = __floats2bfloat162_rn(gelu_f32(f.x + fb.x), gelu_f32(f.y + fb.y));
        }
        __stcs(y8 + g, v[i].raw);
    }
}

// row_blocks: grid.y of the 2-D kernels (0: the solution's full_grid() choice); cols % 8 == 0, aligned tensors.
template <bool Hint, int Rows2>
static void gelu_v(const __nv_bfloat16* x, const __nv_bfloat16* b, __nv_bfloat16* y, int rows, int cols, int row_blocks) {
    const int row_groups = cols / 8, threads = 256, col_blocks = (row_groups + threads - 1) / threads;
    if (row_blocks <= 0) {  // 0: the grid sized to the GPU (lesson 05's launcher before issue 17's sweep)
        int dev = 0, sms = 1, per_sm_threads = 2048;
        cudaGetDevice(&dev);
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
        cudaDeviceGetAttribute(&per_sm_threads, cudaDevAttrMaxThreadsPerMultiProcessor, dev);
        row_blocks = (int)((long long)sms * per_sm_threads / ((long long)col_blocks * threads));
    }
    if (row_blocks > rows) row_blocks = rows;
    gelu_v_kernel<Hint, Rows2><<<dim3(col_blocks, row_blocks), threads>>>(x, b, y, rows, row_groups);
}
void gelu_plain(const __nv_bfloat16* x, const __nv_bfloat16* b, __nv_bfloat16* y, int rows, int cols, int rb) { gelu_v<false, 1>(x, b, y, rows, cols, rb); }
void gelu_hint(const __nv_bfloat16* x, const __nv_bfloat16* b, __nv_bfloat16* y, int rows, int cols, int rb) { gelu_v<true, 1>(x, b, y, rows, cols, rb); }
void gelu_hint2(const __nv_bfloat16* x, const __nv_bfloat16* b, __nv_bfloat16* y, int rows, int cols, int rb) { gelu_v<true, 2>(x, b, y, rows, cols, rb); }
void gelu_plain2(const __nv_bfloat16* x, const __nv_bfloat16* b, __nv_bfloat16* y, int rows, int cols, int rb) { gelu_v<false, 2>(x, b, y, rows, cols, rb); }
void gelu_flat(const __nv_bfloat16* x, const __nv_bfloat16* b, __nv_bfloat16* y, int rows, int cols, int items) {
    const long long n_groups = (long long)rows * cols / 8;
    const long long per = 256LL * items;
    const unsigned blocks = (unsigned)((n_groups + per - 1) / per);
    if (items == 1) gelu_flat_kernel<1><<<blocks, 256>>>(x, b, y, n_groups, cols / 8);
    else if (items == 2) gelu_flat_kernel<2><<<blocks, 256>>>(x, b, y, n_groups, cols / 8);
    else gelu_flat_kernel<4><<<blocks, 256>>>(x, b, y, n_groups, cols / 8);
}

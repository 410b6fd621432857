// ====================================================================================================
// Lesson 01: ReLU, y = max(x, 0), elementwise over n floats.
//
// The simplest useful kernel, written four ways, plus its backward pass and a fused bias + GELU.
// Every kernel here is memory-bound: ReLU reads 4 bytes and writes 4 bytes per element and does one
// comparison, so its speed is set by how fast the GPU moves bytes, not by how fast it computes.
//
// Versions (each launcher below is callable from Python as m.<name>(...), tensors for pointers):
//   relu_v1_scalar       task 1.1  one thread per element, with a bounds check
//   relu_v2_grid_stride  task 1.2  a fixed grid whose threads loop over the array
//   relu_v3_float4       task 1.3  each thread moves 16 bytes at a time (float4), plus a scalar tail
//   relu_backward        task 1.4  dx = dy where x > 0, else 0 (wired into torch.autograd.Function)
//   bias_gelu            task 1.5  y = gelu_tanh(x + b[col]) over a (rows, cols) matrix, in one pass
// Worked examples, complete, one beside each TODO: scale, fill, scale_float4, abs_backward, bias_add.
// Task 1.6 (the hand-written torch::Tensor binding) lives in relu_torch.cu.
//
// Run it:
//   import cudacourse as cc; m = cc.lesson("01_relu"); m.relu_v1_scalar(x, y, n)
//   make check T=1.1             (one task's graded checks; run it in the course's top folder)
//   make bench LESSONS=01_relu   (timings, GPU only)
// ====================================================================================================

#include <cstdint>

// Threads per block for every launcher in this file. Any multiple of 32 (a warp) up to 1024 works;
// 256 is a good default for simple elementwise kernels (README: "choosing the launch configuration").
constexpr int kBlock = 256;

// Number of blocks needed to cover `n` items with `per_block` items per block (rounded up).
static inline int ceil_div(int n, int per_block) { return (n + per_block - 1) / per_block; }

// ----------------------------------------------------------------------------------------------------
// Worked example: scale (y = a * x), one thread per element
// ----------------------------------------------------------------------------------------------------

__global__ void scale_kernel(const float* __restrict__ x, float* __restrict__ y, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;  // this thread's global index
    if (i < n) {                                    // the last block may stick out past the end
        y[i] = a * x[i];
    }
}

// Contract: x and y hold n floats (n >= 0); writes y[i] = a * x[i] for i < n.
void scale(const float* x, float* y, float a, int n) {
    if (n == 0) return;  // a grid of 0 blocks is an invalid launch
    scale_kernel<<<ceil_div(n, kBlock), kBlock>>>(x, y, a, n);
}

// ----------------------------------------------------------------------------------------------------
// Task 1.1: relu_v1_scalar, one thread per element
// ----------------------------------------------------------------------------------------------------

__global__ void relu_v1_scalar_kernel(const float* __restrict__ x, float* __restrict__ y, int n) {
    // TODO(task 1.1): compute this thread's global index i and, if i < n, write y[i] = max(x[i], 0)
    // (~3 lines). Hint: copy the shape of scale_kernel above; fmaxf(a, b) is the float maximum.
    // BEGIN SOLUTION
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = fmaxf(x[i], 0.0f);
    }
    // END SOLUTION
}

// Contract: x and y hold n floats (n >= 0); writes y[i] = max(x[i], 0) for i < n. x is not modified.
void relu_v1_scalar(const float* x, float* y, int n) {
    if (n == 0) return;
    relu_v1_scalar_kernel<<<ceil_div(n, kBlock), kBlock>>>(x, y, n);
}

// ----------------------------------------------------------------------------------------------------
// Worked example: fill (y = value), grid-stride loop
// ----------------------------------------------------------------------------------------------------

__global__ void fill_kernel(float* __restrict__ y, float value, int n) {
    // Each thread starts at its global index and jumps by the number of threads in the whole grid,
    // so any grid, even a single block, covers all n elements.
    int stride = gridDim.x * blockDim.x;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        y[i] = value;
    }
}

// Contract: y holds n floats; writes y[i] = value for i < n. blocks <= 0 picks the grid size itself.
void fill(float* y, float value, int n, int blocks) {
    if (n == 0) return;
    if (blocks <= 0) blocks = ceil_div(n, kBlock) < 1024 ? ceil_div(n, kBlock) : 1024;
    fill_kernel<<<blocks, kBlock>>>(y, value, n);
}

// ----------------------------------------------------------------------------------------------------
// Task 1.2: relu_v2_grid_stride, a fixed grid whose threads loop
// ----------------------------------------------------------------------------------------------------

__global__ void relu_v2_grid_stride_kernel(const float* __restrict__ x, float* __restrict__ y, int n) {
    // TODO(task 1.2): loop i from this thread's global index while i < n, in steps of the number of
    // threads in the whole grid, writing y[i] = max(x[i], 0) (~4 lines).
    // Hint: fill_kernel above is the pattern; the stride is gridDim.x * blockDim.x. The tests launch
    // grids of 1, 2, 3 and 7 blocks, so a kernel without the loop leaves most of y unwritten.
    // BEGIN SOLUTION
    int stride = gridDim.x * blockDim.x;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        y[i] = fmaxf(x[i], 0.0f);
    }
    // END SOLUTION
}

// Contract: like relu_v1_scalar, but launches `blocks` blocks whatever n is (blocks <= 0: just enough
// blocks to fill the GPU, capped by what n needs). Every element must still be written.
void relu_v2_grid_stride(const float* x, float* y, int n, int blocks) {
    if (n == 0) return;
    if (blocks <= 0) {
        // Enough blocks to fill every SM with as many threads as it can hold (2048 per SM on compute
        // capability 8.0 and 9.0, 1536 on 8.6/8.9), and no more than n needs. Asked once: querying
        // the device costs far more than a launch.
        static int full_grid = 0;
        if (full_grid == 0) {
            int device = 0;
            cudaDeviceProp prop;
            cudaGetDevice(&device);
            cudaGetDeviceProperties(&prop, device);
            int per_sm = prop.maxThreadsPerMultiProcessor / kBlock;
            full_grid = (prop.multiProcessorCount > 0 ? prop.multiProcessorCount : 1) * (per_sm > 0 ? per_sm : 1);
        }
        int needed = ceil_div(n, kBlock);
        blocks = needed < full_grid ? needed : full_grid;
    }
    relu_v2_grid_stride_kernel<<<blocks, kBlock>>>(x, y, n);
}

// ----------------------------------------------------------------------------------------------------
// Worked example: scale_float4 (y = a * x), 16 bytes per thread, n a multiple of 4, no tail
// ----------------------------------------------------------------------------------------------------

__global__ void scale_float4_kernel(const float* __restrict__ x, float* __restrict__ y, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;  // index of a float4, i.e. of 4 floats
    if (i < n / 4) {
        // One 16-byte load and one 16-byte store instead of four 4-byte ones. Only valid when x and y
        // are 16-byte aligned: the launcher checks that.
        float4 v = reinterpret_cast<const float4*>(x)[i];
        v.x *= a; v.y *= a; v.z *= a; v.w *= a;
        reinterpret_cast<float4*>(y)[i] = v;
    }
}

// True when p can be read as float4 (its address is a multiple of 16 bytes).
static inline bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

// Contract: x and y hold n floats, n a multiple of 4, both 16-byte aligned; writes y[i] = a * x[i].
// Anything else is refused by doing nothing (y stays as it was); relu_v3_float4 shows how to do better.
void scale_float4(const float* x, float* y, float a, int n) {
    if (n == 0 || n % 4 != 0 || !aligned16(x) || !aligned16(y)) return;
    scale_float4_kernel<<<ceil_div(n / 4, kBlock), kBlock>>>(x, y, a, n);
}

// ----------------------------------------------------------------------------------------------------
// Task 1.3: relu_v3_float4, 16 bytes per thread, with a tail for n not a multiple of 4
// ----------------------------------------------------------------------------------------------------

__global__ void relu_v3_float4_kernel(const float* __restrict__ x, float* __restrict__ y, int n) {
    // TODO(task 1.3): thread i handles the float4 number i (floats 4i..4i+3) when i < n / 4, with one
    // float4 load and one float4 store; then the first n % 4 threads of the grid (i < n % 4) each handle
    // one leftover float at index (n / 4) * 4 + i (~10 lines).
    // Hint: scale_float4_kernel above does the float4 part. The launcher starts enough threads for both
    // parts and only calls this kernel when x and y are 16-byte aligned. Try n = 1, 3, 5 and 1001.
    // BEGIN SOLUTION
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int n4 = n / 4;
    if (i < n4) {
        float4 v = reinterpret_cast<const float4*>(x)[i];
        v.x = fmaxf(v.x, 0.0f);
        v.y = fmaxf(v.y, 0.0f);
        v.z = fmaxf(v.z, 0.0f);
        v.w = fmaxf(v.w, 0.0f);
        reinterpret_cast<float4*>(y)[i] = v;
    }
    int tail = n - n4 * 4;  // 0..3 leftover floats after the last whole float4
    if (i < tail) {
        y[n4 * 4 + i] = fmaxf(x[n4 * 4 + i], 0.0f);
    }
    // END SOLUTION
}

// Contract: like relu_v1_scalar for any n. Tensors from torch start 16-byte aligned, but a view such as
// x[1:] does not: for such pointers this falls back to relu_v1_scalar_kernel (task 1.1), because a
// misaligned float4 access is an error on the GPU ("misaligned address").
void relu_v3_float4(const float* x, float* y, int n) {
    if (n == 0) return;
    if (!aligned16(x) || !aligned16(y)) {
        relu_v1_scalar_kernel<<<ceil_div(n, kBlock), kBlock>>>(x, y, n);
        return;
    }
    int n4 = n / 4, tail = n % 4;
    int threads = n4 > tail ? n4 : tail;  // enough threads for the float4 part and for the tail
    relu_v3_float4_kernel<<<ceil_div(threads, kBlock), kBlock>>>(x, y, n);
}

// ----------------------------------------------------------------------------------------------------
// Worked example: abs_backward (the gradient of y = |x|: dx = dy * sign(x))
// ----------------------------------------------------------------------------------------------------

__global__ void abs_backward_kernel(const float* __restrict__ x, const float* __restrict__ dy,
                                    float* __restrict__ dx, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float s = x[i] > 0.0f ? 1.0f : (x[i] < 0.0f ? -1.0f : 0.0f);  // torch's choice: 0 at x == 0
        dx[i] = dy[i] * s;
    }
}

// Contract: x, dy and dx hold n floats; writes dx[i] = dy[i] * sign(x[i]).
void abs_backward(const float* x, const float* dy, float* dx, int n) {
    if (n == 0) return;
    abs_backward_kernel<<<ceil_div(n, kBlock), kBlock>>>(x, dy, dx, n);
}

// ----------------------------------------------------------------------------------------------------
// Task 1.4: relu_backward (dx = dy where x > 0, else 0)
// ----------------------------------------------------------------------------------------------------

__global__ void relu_backward_kernel(const float* __restrict__ x, const float* __restrict__ dy,
                                     float* __restrict__ dx, int n) {
    // TODO(task 1.4): for i < n write dx[i] = dy[i] if x[i] > 0, else 0 (~4 lines).
    // Hint: abs_backward_kernel above has the same shape. At x == 0 exactly, PyTorch's ReLU gradient is
    // 0: use a strict x[i] > 0. Write 0.0f rather than dy[i] * 0.0f, which is NaN when dy is Inf or NaN.
    // BEGIN SOLUTION
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        dx[i] = x[i] > 0.0f ? dy[i] : 0.0f;
    }
    // END SOLUTION
}

// Contract: x (the forward input), dy (the gradient of the loss w.r.t. y) and dx hold n floats; writes
// dx, reads x and dy only.
void relu_backward(const float* x, const float* dy, float* dx, int n) {
    if (n == 0) return;
    relu_backward_kernel<<<ceil_div(n, kBlock), kBlock>>>(x, dy, dx, n);
}

// ----------------------------------------------------------------------------------------------------
// Worked example: bias_add (y[r, c] = x[r, c] + b[c]) over a row-major (rows, cols) matrix
// ----------------------------------------------------------------------------------------------------

__global__ void bias_add_kernel(const float* __restrict__ x, const float* __restrict__ b,
                                float* __restrict__ y, int rows, int cols) {
    // One thread per element of the flattened matrix; the column is the index modulo cols.
    // (rows * cols must fit in an int: the launcher checks.)
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < rows * cols) {
        y[i] = x[i] + b[i % cols];
    }
}

// Contract: x and y hold rows * cols floats (row-major), b holds cols floats.
void bias_add(const float* x, const float* b, float* y, int rows, int cols) {
    long long total = static_cast<long long>(rows) * cols;
    if (total <= 0 || total > 0x7fffffffLL) return;  // nothing to do, or too large for int indexing
    bias_add_kernel<<<ceil_div(static_cast<int>(total), kBlock), kBlock>>>(x, b, y, rows, cols);
}

// ----------------------------------------------------------------------------------------------------
// Task 1.5: bias_gelu, y = gelu_tanh(x + b[col]) in one pass
// ----------------------------------------------------------------------------------------------------

// GELU, tanh approximation (Hendrycks & Gimpel 2016), the formula of
// torch.nn.functional.gelu(v, approximate="tanh"):
//     gelu(v) = 0.5 * v * (1 + tanh(sqrt(2 / pi) * (v + 0.044715 * v^3)))
__device__ __forceinline__ float gelu_tanh(float v) {
    // TODO(task 1.5, part 1 of 2): return the formula above (~3 lines).
    // Hint: tanhf is the float tanh; sqrt(2 / pi) = 0.7978845608f. tanhf saturates cleanly at +-1 for
    // large inputs; a tanh built from expf overflows to Inf / Inf = NaN when v is about 10 or more.
    // BEGIN SOLUTION
    const float k0 = 0.7978845608028654f;  // sqrt(2 / pi)
    const float k1 = 0.044715f;
    return 0.5f * v * (1.0f + tanhf(k0 * (v + k1 * v * v * v)));
    // STUB: return v;  // placeholder so the stub compiles: wrong on purpose
    // END SOLUTION
}

__global__ void bias_gelu_kernel(const float* __restrict__ x, const float* __restrict__ b,
                                 float* __restrict__ y, int rows, int cols) {
    // TODO(task 1.5, part 2 of 2): like bias_add_kernel above, but write gelu_tanh(x[i] + b[column])
    // (~4 lines).
    // Hint: fusing means one read of x and one write of y, instead of writing x + b to memory and
    // reading it back for the GELU: half the memory traffic of the two-kernel version.
    // BEGIN SOLUTION
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < rows * cols) {
        y[i] = gelu_tanh(x[i] + b[i % cols]);
    }
    // END SOLUTION
}

// Contract: x and y hold rows * cols floats (row-major), b holds cols floats; writes
// y[r, c] = gelu_tanh(x[r, c] + b[c]).
void bias_gelu(const float* x, const float* b, float* y, int rows, int cols) {
    long long total = static_cast<long long>(rows) * cols;
    if (total <= 0 || total > 0x7fffffffLL) return;
    bias_gelu_kernel<<<ceil_div(static_cast<int>(total), kBlock), kBlock>>>(x, b, y, rows, cols);
}

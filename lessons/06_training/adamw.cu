// ====================================================================================================
// Lesson 06, part 2: the AdamW optimizer step, exactly as torch.optim.AdamW computes it.
//
// For every parameter element, with gradient g, moments m and v, at step t (1, 2, ...):
//   p = p * (1 - lr * weight_decay)                 decoupled weight decay: not part of the gradient
//   m = m + (1 - beta1) (g - m)                      (= beta1 m + (1 - beta1) g, as torch's lerp)
//   v = beta2 v + (1 - beta2) g^2
//   p = p - (lr / (1 - beta1^t)) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
// Every element is independent: the kernel is memory-bound (read p, g, m, v; write p, m, v: 28 bytes
// per parameter), so the whole step is one pass over the memory, one launch.
//
// Versions (callable from Python as m.<name>(...)):
//   adamw_flat    task 6.5  one flat buffer of all parameters (and one each for grads, m, v)
//   adamw_multi   task 6.5  a list of tensors in one launch: each block takes a chunk of one tensor
//                           from a table (as torch's multi_tensor_apply), per-tensor weight decay
//
// Run it:
//   import cudacourse as cc; m = cc.lesson("06_training"); m.adamw_flat(p, g, m1, v1, n, lr, ...)
//   make check T=6.5                                         (graded checks)
// ====================================================================================================

#include <cmath>

constexpr int kAdamBlock = 256;

// The scalars of step t that are the same for every element, computed once on the host in double.
struct AdamScalars {
    float lr, beta1, beta2, eps;
    float step_size;       // lr / (1 - beta1^t)
    float inv_bc2_sqrt;    // 1 / sqrt(1 - beta2^t)
};

static AdamScalars adam_scalars(float lr, float beta1, float beta2, float eps, int step) {
    const double bc1 = 1.0 - std::pow((double)beta1, step), bc2 = 1.0 - std::pow((double)beta2, step);
    return {lr, beta1, beta2, eps, (float)(lr / bc1), (float)(1.0 / std::sqrt(bc2))};
}

// The update of one element, shared by both versions (worked).
__device__ inline void adamw_element(float* p, const float* g, float* m, float* v, long long i, const AdamScalars& s,
                                     float weight_decay) {
    const float gi = g[i];
    const float mi = m[i] + (1.0f - s.beta1) * (gi - m[i]);
    const float vi = s.beta2 * v[i] + (1.0f - s.beta2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    const float pi = p[i] * (1.0f - s.lr * weight_decay);
    p[i] = pi - s.step_size * mi / (sqrtf(vi) * s.inv_bc2_sqrt + s.eps);
}

// ----------------------------------------------------------------------------------------------------
// Task 6.5, part 1: adamw_flat
// ----------------------------------------------------------------------------------------------------

__global__ void adamw_flat_kernel(float* __restrict__ p, const float* __restrict__ g, float* __restrict__ m,
                                  float* __restrict__ v, long long n, AdamScalars s, float weight_decay) {
    // TODO(task 6.5, part 1 of 2): a grid-stride loop over i < n calling adamw_element (~2 lines).
    // Hint: the launcher caps the grid, so one thread handles several elements: i += gridDim.x * blockDim.x
    // (in long long: 124M parameters times 4 bytes is past 2^31 bytes, not past 2^31 elements, but be safe).
}

// Contract: p, g, m, v hold n floats; step >= 1 is the step number after this update (torch's state
// "step"). Updates p, m, v in place as torch.optim.AdamW(lr, betas=(beta1, beta2), eps, weight_decay).
void adamw_flat(float* p, const float* g, float* m, float* v, long long n, float lr, float beta1, float beta2,
                float eps, float weight_decay, int step) {
    if (n <= 0) return;
    long long blocks = (n + kAdamBlock - 1) / kAdamBlock;
    if (blocks > 65536) blocks = 65536;
    adamw_flat_kernel<<<(int)blocks, kAdamBlock>>>(p, g, m, v, n, adam_scalars(lr, beta1, beta2, eps, step),
                                                   weight_decay);
}

// ----------------------------------------------------------------------------------------------------
// Task 6.5, part 2: adamw_multi, many tensors in one launch
// ----------------------------------------------------------------------------------------------------
// The tensors are views into four arenas (params, grads, m, v): tensor t occupies elements
// offsets[t] .. offsets[t + 1] - 1 of each. The Python wrapper cuts every tensor into chunks of `chunk`
// elements and builds one row per chunk: block b updates elements chunk_start[b] .. (the chunk's end,
// or the end of tensor chunk_tensor[b], whichever is first), with that tensor's weight decay. One
// launch then covers any number of tensors of any sizes, and no block straddles two tensors.
// (torch's fused kernels pass a table of device pointers instead of offsets; here the tensors share
// an arena because the simulator checks every access against the buffers passed as arguments.)

__global__ void adamw_multi_kernel(float* __restrict__ p, const float* __restrict__ g, float* __restrict__ m,
                                   float* __restrict__ v, const long long* __restrict__ offsets,
                                   const float* __restrict__ decay, const int* __restrict__ chunk_tensor,
                                   const long long* __restrict__ chunk_start, int chunk, AdamScalars s) {
    // TODO(task 6.5, part 2 of 2): t = chunk_tensor[blockIdx.x]; the range is chunk_start[blockIdx.x]
    // up to min(that + chunk, offsets[t + 1]); the block's threads stride over it calling adamw_element
    // with decay[t] (~5 lines).
    // Hint: the block count is the number of chunks (the launcher's grid): no bounds test on blockIdx.
}

// Contract: p, g, m, v are arenas of offsets[n_tensors] floats; offsets holds n_tensors + 1 int64s
// (offsets[0] = 0, increasing); decay n_tensors floats; chunk_tensor and chunk_start n_chunks entries
// as described above. Updates every tensor's p, m, v as torch.optim.AdamW with per-tensor weight decay
// (param groups).
void adamw_multi(float* p, const float* g, float* m, float* v, const long long* offsets, const float* decay,
                 const int* chunk_tensor, const long long* chunk_start, int n_chunks, int chunk, float lr,
                 float beta1, float beta2, float eps, int step) {
    if (n_chunks <= 0) return;
    adamw_multi_kernel<<<n_chunks, kAdamBlock>>>(p, g, m, v, offsets, decay, chunk_tensor, chunk_start, chunk,
                                                 adam_scalars(lr, beta1, beta2, eps, step));
}

// ====================================================================================================
// Lesson 01, task 1.6: the classic route, a hand-written torch::Tensor binding.
//
// relu.cu holds plain CUDA with raw pointers and the course loader writes the Python binding for you.
// Most CUDA extensions you will meet in the wild look like this file instead: they include the torch
// headers, take and return torch::Tensor, check their inputs with TORCH_CHECK, allocate the output with
// torch, launch on PyTorch's current stream and check the launch. torch.utils.cpp_extension.load_inline
// (or a setup.py with CUDAExtension, see extension_setup/) compiles such a file and binds each listed
// function with pybind11. The price is build time: the torch headers make one build take tens of
// seconds instead of one or two (README: "Three ways to build an extension"). This file includes
// <torch/types.h> (torch::Tensor, the ATen ops, TORCH_CHECK) rather than the usual <torch/extension.h>, which
// adds the whole C++ frontend and pybind11: only the binding that load_inline writes needs those, and nvcc
// then compiles this file in about half the time (33 s instead of 64 s on the H100 machine).
//
// Functions (callable as m.<name>(...) on cc.lesson("01_relu"); they return tensors):
//   scale_forward(x, a)   worked example: returns a * x
//   relu_forward(x)       task 1.6: returns max(x, 0), checking its input like a real extension
// ====================================================================================================

#include <torch/types.h>            // torch::Tensor, torch::empty_like, TORCH_CHECK
#include <c10/cuda/CUDAStream.h>     // c10::cuda::getCurrentCUDAStream()
#include <c10/cuda/CUDAException.h>  // C10_CUDA_KERNEL_LAUNCH_CHECK()

constexpr int kThreads = 256;

// ----------------------------------------------------------------------------------------------------
// Kernels (complete; relu_torch_kernel is the same idea as your relu_v1_scalar_kernel)
// ----------------------------------------------------------------------------------------------------

__global__ void scale_torch_kernel(const float* __restrict__ x, float* __restrict__ y, float a, int64_t n) {
    int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;  // 64-bit: tensors can be big
    if (i < n) y[i] = a * x[i];
}

__global__ void relu_torch_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
    int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) y[i] = fmaxf(x[i], 0.0f);
}

// ----------------------------------------------------------------------------------------------------
// Worked example: scale_forward(x, a) -> a * x
// ----------------------------------------------------------------------------------------------------

torch::Tensor scale_forward(torch::Tensor x, double a) {
    // 1. Check the input: a raw pointer would happily read a CPU tensor, a float64 tensor or a strided
    //    view as if it were contiguous float32 on the GPU, giving garbage or a crash. TORCH_CHECK raises
    //    a Python RuntimeError carrying this message.
    TORCH_CHECK(x.is_cuda(), "scale_forward: x must be a CUDA tensor, got a tensor on ", x.device());
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "scale_forward: x must be float32, got ", x.scalar_type());
    TORCH_CHECK(x.is_contiguous(), "scale_forward: x must be contiguous (call x.contiguous() first)");
    // 2. Allocate the output with torch (same shape, dtype and device as x): its caching allocator is
    //    much faster than cudaMalloc, and the tensor frees itself.
    torch::Tensor y = torch::empty_like(x);
    const int64_t n = x.numel();
    if (n == 0) return y;  // a grid of 0 blocks is an invalid launch
    // 3. Launch on PyTorch's current stream, so the kernel is ordered with the other torch operations.
    //    data_ptr<float>() is the raw device pointer (it also checks the dtype once more).
    const float* xp = x.data_ptr<float>();
    float* yp = y.data_ptr<float>();
    const int64_t blocks = (n + kThreads - 1) / kThreads;
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    scale_torch_kernel<<<blocks, kThreads, 0, stream>>>(xp, yp, static_cast<float>(a), n);
    // 4. Check the launch: a bad configuration is reported here, as a RuntimeError, not later.
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}

// ----------------------------------------------------------------------------------------------------
// Task 1.6: relu_forward(x) -> max(x, 0)
// ----------------------------------------------------------------------------------------------------

torch::Tensor relu_forward(torch::Tensor x) {
    // TODO(task 1.6): the four steps of scale_forward above, for relu_torch_kernel (~16 lines):
    // check x is a CUDA tensor, float32 and contiguous with TORCH_CHECK (messages that name "x" and say
    // "CUDA", "float32" and "contiguous": the tests look for those words), allocate y with
    // torch::empty_like, return early when x is empty, launch on the current stream, then
    // C10_CUDA_KERNEL_LAUNCH_CHECK() and return y.
    // Hint: the tests also pass tensors of shape (3, 5, 7): numel() counts every element.
    TORCH_CHECK(false, "TODO(task 1.6) not implemented: relu_forward in lessons/01_relu/relu_torch.cu "
                       "must check x, allocate y, launch relu_torch_kernel and return y");
    return x;
}

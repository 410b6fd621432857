// swish_cuda.cu - the CUDA implementation of cudacourse_l07_cpp::swish (see swish_op.cpp): the kernels of
// lesson 07's host_side.cu, launched on PyTorch's current stream so the op stays ordered with the model.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>

namespace {
__global__ void swish_forward_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] / (1.0f + expf(-x[i]));
}
__global__ void swish_backward_kernel(const float* __restrict__ x, const float* __restrict__ dy, float* __restrict__ dx,
                                      int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) {
        float s = 1.0f / (1.0f + expf(-x[i]));
        dx[i] = dy[i] * s * (1.0f + x[i] * (1.0f - s));
    }
}
void check_input(const at::Tensor& t, const char* name) {
    TORCH_CHECK(t.is_cuda(), "swish: argument '", name, "' is on ", t.device(), ", expected a CUDA device");
    TORCH_CHECK(t.scalar_type() == at::kFloat, "swish: argument '", name, "' must be float32, got ", t.scalar_type());
    TORCH_CHECK(t.is_contiguous(), "swish: argument '", name, "' must be contiguous; call .contiguous() first");
}
}  // namespace

at::Tensor swish_cuda(const at::Tensor& x) {
    check_input(x, "x");
    const c10::cuda::CUDAGuard guard(x.device());
    at::Tensor y = at::empty_like(x);
    const int64_t n = x.numel();
    if (n > 0) {
        swish_forward_kernel<<<(unsigned)((n + 255) / 256), 256, 0, c10::cuda::getCurrentCUDAStream()>>>(
            x.data_ptr<float>(), y.data_ptr<float>(), n);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
    return y;
}

at::Tensor swish_backward_cuda(const at::Tensor& x, const at::Tensor& dy_in) {
    at::Tensor dy = dy_in.contiguous();
    check_input(x, "x");
    check_input(dy, "dy");
    const c10::cuda::CUDAGuard guard(x.device());
    at::Tensor dx = at::empty_like(x);
    const int64_t n = x.numel();
    if (n > 0) {
        swish_backward_kernel<<<(unsigned)((n + 255) / 256), 256, 0, c10::cuda::getCurrentCUDAStream()>>>(
            x.data_ptr<float>(), dy.data_ptr<float>(), dx.data_ptr<float>(), n);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
    return dx;
}

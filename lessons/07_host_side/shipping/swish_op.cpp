// swish_op.cpp - lesson 07's swish as a C++ operator registered with TORCH_LIBRARY (the route PyTorch's
// own operators take), for the CMake build (CMakeLists.txt) and the setup.py wheel (setup.py).
//
//   TORCH_LIBRARY       declares the schemas under the namespace cudacourse_l07_cpp
//   TORCH_LIBRARY_IMPL  registers an implementation per dispatch key:
//     CPU   a plain loop (the CPU build; also what the CPU-only machine that wrote this can test)
//     Meta  shape, dtype and device only: what torch.compile traces with (the C++ twin of register_fake)
//     CUDA  the kernels of swish_cuda.cu on PyTorch's current stream (built when WITH_CUDA is defined)
// Autograd: registered from Python (swish_ext/__init__.py, torch.library.register_autograd), as the
// Python route of task 7.3 does.
//
// Use it: torch.ops.load_library("libswish_op.so"); torch.ops.cudacourse_l07_cpp.swish(x)
#include <torch/library.h>
#include <ATen/ATen.h>

#include <cmath>

namespace {

void check_input(const at::Tensor& t, const char* name) {
    TORCH_CHECK(t.scalar_type() == at::kFloat, "swish: argument '", name, "' must be float32, got ", t.scalar_type());
    TORCH_CHECK(t.is_contiguous(), "swish: argument '", name, "' must be contiguous; call .contiguous() first");
}

at::Tensor swish_cpu(const at::Tensor& x) {
    check_input(x, "x");
    TORCH_CHECK(x.device().is_cpu(), "swish: argument 'x' is on ", x.device(), ", expected cpu");
    at::Tensor y = at::empty_like(x);
    const float* xp = x.data_ptr<float>();
    float* yp = y.data_ptr<float>();
    for (int64_t i = 0; i < x.numel(); ++i) yp[i] = xp[i] / (1.0f + std::exp(-xp[i]));
    return y;
}

at::Tensor swish_backward_cpu(const at::Tensor& x, const at::Tensor& dy_in) {
    at::Tensor dy = dy_in.contiguous();
    check_input(x, "x");
    check_input(dy, "dy");
    TORCH_CHECK(x.sizes() == dy.sizes(), "swish_backward: 'x' and 'dy' must have the same shape");
    at::Tensor dx = at::empty_like(x);
    const float *xp = x.data_ptr<float>(), *gp = dy.data_ptr<float>();
    float* dp = dx.data_ptr<float>();
    for (int64_t i = 0; i < x.numel(); ++i) {
        const float s = 1.0f / (1.0f + std::exp(-xp[i]));
        dp[i] = gp[i] * s * (1.0f + xp[i] * (1.0f - s));
    }
    return dx;
}

at::Tensor swish_meta(const at::Tensor& x) {
    check_input(x, "x");
    return at::empty_like(x);
}

at::Tensor swish_backward_meta(const at::Tensor& x, const at::Tensor&) { return at::empty_like(x); }

}  // namespace

#ifdef WITH_CUDA
at::Tensor swish_cuda(const at::Tensor& x);                            // swish_cuda.cu
at::Tensor swish_backward_cuda(const at::Tensor& x, const at::Tensor& dy);
#endif

TORCH_LIBRARY(cudacourse_l07_cpp, m) {
    m.def("swish(Tensor x) -> Tensor");
    m.def("swish_backward(Tensor x, Tensor dy) -> Tensor");
}

TORCH_LIBRARY_IMPL(cudacourse_l07_cpp, CPU, m) {
    m.impl("swish", &swish_cpu);
    m.impl("swish_backward", &swish_backward_cpu);
}

TORCH_LIBRARY_IMPL(cudacourse_l07_cpp, Meta, m) {
    m.impl("swish", &swish_meta);
    m.impl("swish_backward", &swish_backward_meta);
}

#ifdef WITH_CUDA
TORCH_LIBRARY_IMPL(cudacourse_l07_cpp, CUDA, m) {
    m.impl("swish", &swish_cuda);
    m.impl("swish_backward", &swish_backward_cuda);
}
#endif

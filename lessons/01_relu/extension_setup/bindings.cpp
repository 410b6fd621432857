// The Python module of the setup.py route: what load_inline(functions=[...]) generates for you.
// TORCH_EXTENSION_NAME is defined by torch's build helpers as the extension's name ("relu_ext").
#include <torch/extension.h>

// Defined in ../relu_torch.cu (compiled by nvcc as a separate translation unit).
torch::Tensor scale_forward(torch::Tensor x, double a);
torch::Tensor relu_forward(torch::Tensor x);

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("scale_forward", &scale_forward, "a * x (worked example)", pybind11::arg("x"), pybind11::arg("a"));
    m.def("relu_forward", &relu_forward, "max(x, 0) for a contiguous float32 CUDA tensor (task 1.6)",
          pybind11::arg("x"));
}

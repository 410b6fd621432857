// ccsim_torch.h - CPU stand-ins for the CUDA parts of torch used by the classic torch::Tensor route.
//
// Included after <torch/extension.h> and ccsim.h when a learner file that includes torch is built for
// the simulator: the current stream, device guards and launch checks exist but do nothing on the CPU,
// and every tensor whose data_ptr<T>() a wrapper takes is registered so checked mode knows its bounds.
#ifndef CCSIM_TORCH_H
#define CCSIM_TORCH_H

namespace at { namespace cuda {
struct CUDAStreamStub {
    operator cudaStream_t() const { return nullptr; }
    cudaStream_t stream() const { return nullptr; }
    void synchronize() const {}
};
static inline CUDAStreamStub getCurrentCUDAStream(int = -1) { return {}; }
static inline CUDAStreamStub getDefaultCUDAStream(int = -1) { return {}; }
struct OptionalCUDAGuard { template <class... T> explicit OptionalCUDAGuard(T&&...) {} };
struct CUDAGuard { template <class... T> explicit CUDAGuard(T&&...) {} };
}}  // namespace at::cuda
namespace c10 { namespace cuda {
using at::cuda::getCurrentCUDAStream;
using at::cuda::OptionalCUDAGuard;
using at::cuda::CUDAGuard;
}}  // namespace c10::cuda

namespace ccsim {
template <class T> static inline T* reg_tensor(const at::Tensor& t, T* p, const char* name) {
    ccsim_rt_register((const void*)p, (size_t)t.numel() * t.element_size(), name, (size_t)t.element_size());
    return p;
}
}  // namespace ccsim

#endif  // CCSIM_TORCH_H

"""The classic ahead-of-time route: build lessons/01_relu/relu_torch.cu as a Python extension with setuptools.

Not part of the graded work and not run in CI (it needs a CUDA build of torch and nvcc). After task 1.6,
on a GPU machine, from the repository root:

    .venv/bin/python -m pip install --no-build-isolation ./lessons/01_relu/extension_setup
    .venv/bin/python -c "import torch, relu_ext; print(relu_ext.relu_forward(torch.randn(8, device='cuda')))"

``--no-build-isolation`` lets the build see the torch you already have (an isolated build would try to
download another one). ``CUDAExtension`` compiles ``.cu`` sources with nvcc and ``.cpp`` sources with
the host compiler, adding torch's include folders and libraries; ``BuildExtension`` supplies the flags
(and uses ninja when it is installed). Set ``TORCH_CUDA_ARCH_LIST`` to your GPU's compute capability
(``9.0`` for an H100) to build for that GPU only, which is faster.
"""

from pathlib import Path

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension

HERE = Path(__file__).resolve().parent

setup(
    name="relu_ext",
    version="0.1.0",
    ext_modules=[
        CUDAExtension(
            name="relu_ext",
            # Your task 1.6 file (the kernels and the torch::Tensor functions) plus the pybind11 module
            # that load_inline would otherwise generate for you.
            sources=[str(HERE.parent / "relu_torch.cu"), str(HERE / "bindings.cpp")],
            extra_compile_args={"cxx": ["-O3"], "nvcc": ["-O3"]},
        )
    ],
    cmdclass={"build_ext": BuildExtension},
)

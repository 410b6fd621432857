"""The setup.py route: lesson 07's swish operator packaged as a wheel (``cudacourse-swish-ext``).

    pip wheel --no-build-isolation --no-deps -w dist .       (torch must be importable: it builds against it)
    pip install dist/cudacourse_swish_ext-*.whl               (in any environment with the same torch)
    python check_wheel.py                                     (outside this folder's swish_ext/)

With a CUDA build of torch (and nvcc) it is a CUDAExtension with the CPU, Meta and CUDA implementations;
with a CPU-only torch it is a CppExtension with the CPU and Meta ones. The wheel is tied to the torch
version, Python version and platform it was built with, as every compiled torch extension is.
"""

import torch
from setuptools import setup
from torch.utils.cpp_extension import CUDA_HOME, BuildExtension, CppExtension, CUDAExtension

if torch.cuda.is_available() or (torch.version.cuda and CUDA_HOME):
    ext = CUDAExtension("swish_ext._C", ["swish_op.cpp", "swish_cuda.cu"],
                        define_macros=[("WITH_CUDA", None)])
else:
    ext = CppExtension("swish_ext._C", ["swish_op.cpp"])

setup(
    name="cudacourse-swish-ext",
    version="0.1.0",
    description="Lesson 07 of the CUDA course: swish as a TORCH_LIBRARY operator",
    packages=["swish_ext"],
    ext_modules=[ext],
    cmdclass={"build_ext": BuildExtension},
    install_requires=[f"torch=={torch.__version__.split('+')[0]}"],
    python_requires=">=3.9",
)

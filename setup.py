"""Builds alexop._C, the operator library, with ninja through torch's BuildExtension.

The CUDA kernels are built whenever this torch is a CUDA build and nvcc is
found (CUDA_HOME), even on a machine with no GPU; otherwise a CPU-only library
is built. TORCH_CUDA_ARCH_LIST picks the GPU architectures (default: sm_80
and sm_90a; the Hopper forward uses wgmma, which exists only in sm_90a code,
and a plain 9.0 build falls back to the mma.sync kernel there).
ALEXOP_CPU_ONLY=1 forces a CPU-only build.
"""

import glob
import os
import sysconfig
from pathlib import Path

import torch
from setuptools import find_packages, setup
from torch.utils.cpp_extension import CUDA_HOME, BuildExtension, CppExtension, CUDAExtension

ROOT = Path(__file__).parent


def build_cuda() -> bool:
    if os.environ.get("ALEXOP_CPU_ONLY", "0") == "1":
        return False
    return torch.version.cuda is not None and CUDA_HOME is not None


def cuda_include_dirs() -> list[str]:
    # The CUDA wheels of torch ship the toolkit headers (cuBLAS, cuSPARSE, ...)
    # that ATen's CUDA headers include; a bare nvcc install may lack them.
    purelib = Path(sysconfig.get_paths()["purelib"])
    return [str(p) for p in purelib.glob("nvidia/cu*/include") if p.is_dir()]


def extension():
    sources = sorted(glob.glob("csrc/**/*.cpp", recursive=True))
    cxx = ["-O3"]
    if os.environ.get("DEBUG", "0") == "1":
        cxx = ["-O0", "-g"]
    if not build_cuda():
        return CppExtension(
            "alexop._C", sources, extra_compile_args={"cxx": cxx}, py_limited_api=True
        )
    os.environ.setdefault("TORCH_CUDA_ARCH_LIST", "8.0;9.0a")
    sources += sorted(glob.glob("csrc/**/*.cu", recursive=True))
    nvcc = ["-O3", "--expt-relaxed-constexpr", "-lineinfo"]
    return CUDAExtension(
        "alexop._C",
        sources,
        include_dirs=cuda_include_dirs(),
        extra_compile_args={"cxx": cxx, "nvcc": nvcc},
        # py_limited_api keeps libtorch_python off the link line: the library
        # has no Python symbols, so C++ processes can load it.
        py_limited_api=True,
    )


setup(
    name="alexop",
    version="0.1.0",
    description="AlexNet's first convolution (11x11, stride 4) as a PyTorch custom operator",
    long_description=(ROOT / "README.md").read_text() if (ROOT / "README.md").exists() else "",
    long_description_content_type="text/markdown",
    packages=find_packages(include=["alexop", "alexop.*"]),
    ext_modules=[extension()],
    cmdclass={"build_ext": BuildExtension},
    python_requires=">=3.10",
    install_requires=["torch>=2.11"],
)

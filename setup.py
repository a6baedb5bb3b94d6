"""Builds alexop._C, the operator library, with ninja through torch's BuildExtension.

The CUDA kernels are built whenever this torch is a CUDA build and a CUDA
toolkit is found, even on a machine with no GPU; otherwise a CPU-only library
is built. The toolkit is found without help: CUDA_HOME or CUDA_PATH if set,
else the toolkit that the nvcc on PATH belongs to (asked through nvcc itself,
so a wrapper script or symlink on PATH is seen through), else the usual
install places. TORCH_CUDA_ARCH_LIST picks the GPU architectures (default:
machine code for Turing to Blackwell, sm_75, sm_80, sm_90a, sm_100 and sm_120,
as far as this nvcc knows them, and compute_80 PTX that newer GPUs compile at
load time; wgmma exists only in sm_90a code). ALEXOP_CPU_ONLY=1 forces a
CPU-only build.
"""

import glob
import logging
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).parent
DEFAULT_ARCHS = ("7.5", "8.0+PTX", "9.0a", "10.0", "12.0")


def _is_toolkit(home: str) -> bool:
    # nvcc to compile, cuda_runtime.h and libcudart to build and link against
    root = Path(home)
    has_lib = any(root.glob("lib64/libcudart.so*")) or any(root.glob("targets/*/lib/libcudart.so*"))
    return (root / "bin" / "nvcc").is_file() and has_lib and (
        (root / "include" / "cuda_runtime.h").is_file() or any(root.glob("targets/*/include/cuda_runtime.h"))
    )


def _nvcc_top(nvcc: str) -> Optional[str]:
    # `nvcc --dryrun` prints the toolkit root it runs from as `#$ TOP=...`.
    try:
        out = subprocess.run(
            [nvcc, "--dryrun", "-c", "-x", "cu", os.devnull, "-o", os.devnull],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    match = re.search(r"^#\$ TOP=(.+)$", out.stdout + out.stderr, re.MULTILINE)
    return os.path.realpath(match.group(1).strip()) if match else None


def find_cuda_home() -> Optional[str]:
    """The CUDA toolkit to build with, or None."""
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            return os.environ[var]
    candidates = []
    nvcc = shutil.which("nvcc")
    if nvcc:
        candidates += [_nvcc_top(nvcc), os.path.dirname(os.path.dirname(os.path.realpath(nvcc)))]
    candidates += ["/usr/local/cuda", *sorted(glob.glob("/usr/local/cuda-*"), reverse=True), "/opt/cuda"]
    return next((os.path.realpath(c) for c in candidates if c and _is_toolkit(c)), None)


def default_archs() -> str:
    """DEFAULT_ARCHS less those the toolkit's nvcc does not know."""
    try:
        known = subprocess.run(
            [os.path.join(CUDA_HOME_FOUND, "bin", "nvcc"), "--list-gpu-arch"],
            capture_output=True, text=True, timeout=60,
        ).stdout.split()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        known = []
    if not known:
        return ";".join(DEFAULT_ARCHS)
    base = lambda a: "compute_" + a.split("+")[0].rstrip("a").replace(".", "")  # noqa: E731
    return ";".join(a for a in DEFAULT_ARCHS if base(a) in known)


def tell(message: str) -> None:
    """Prints to the terminal even while pip captures the build's output."""
    try:
        with open("/dev/tty", "w") as tty:
            tty.write(message + "\n")
    except OSError:
        pass
    print(message, file=sys.stderr, flush=True)


CUDA_HOME_FOUND = None if os.environ.get("ALEXOP_CPU_ONLY", "0") == "1" else find_cuda_home()
if CUDA_HOME_FOUND:
    # torch.utils.cpp_extension reads CUDA_HOME once, at import.
    os.environ["CUDA_HOME"] = CUDA_HOME_FOUND
# Without a GPU it warns "No CUDA runtime is found" on import: expected here.
logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)

import torch  # noqa: E402
from setuptools import find_packages, setup  # noqa: E402
from torch.utils.cpp_extension import BuildExtension, CppExtension, CUDAExtension  # noqa: E402


def build_cuda() -> bool:
    return torch.version.cuda is not None and CUDA_HOME_FOUND is not None


def cuda_include_dirs() -> list[str]:
    # The CUDA wheels of torch ship the toolkit headers (cuBLAS, cuSPARSE, ...)
    # that ATen's CUDA headers include; a bare nvcc install may lack them.
    purelib = Path(sysconfig.get_paths()["purelib"])
    return [str(p) for p in purelib.glob("nvidia/cu*/include") if p.is_dir()]


class Build(BuildExtension):
    """Says what it builds before the long part starts (pip runs setup.py more than once)."""

    def build_extensions(self):
        if build_cuda():
            jobs = int(os.environ.get("MAX_JOBS") or os.cpu_count() or 1)
            archs = os.environ["TORCH_CUDA_ARCH_LIST"].split(";")
            names = ", ".join("sm_" + a.replace(".", "").replace("+PTX", " + PTX") for a in archs)
            names = names.replace("+ PTX", "(+ PTX)")
            tell(
                f"alexop: compiling the CUDA kernels for {names} with {CUDA_HOME_FOUND}/bin/nvcc, "
                f"{jobs} jobs at a time (the five default architectures take about 8 minutes on 2 cores; "
                "one takes about 1.5 on 16). "
                "ALEXOP_CPU_ONLY=1 builds the CPU kernels only, in about a minute."
            )
        else:
            why = "ALEXOP_CPU_ONLY=1" if os.environ.get("ALEXOP_CPU_ONLY", "0") == "1" else (
                "this torch has no CUDA" if torch.version.cuda is None else "no CUDA toolkit (nvcc) was found"
            )
            tell(f"alexop: building the CPU kernels only ({why}).")
        super().build_extensions()


def openmp() -> list[str]:
    # at::parallel_for runs its loop on one thread unless the file that calls
    # it is compiled with OpenMP (it is inline in ATen's headers); the library
    # then binds to the libgomp.so.1 torch has loaded, so torch.set_num_threads
    # applies.
    return ["-fopenmp"] if torch.backends.openmp.is_available() and sys.platform.startswith("linux") else []


def extension():
    # csrc/cuda/ holds host code too (.cpp), for the CUDA build only
    sources = sorted(p for p in glob.glob("csrc/**/*.cpp", recursive=True) if not p.startswith("csrc/cuda/"))
    cxx = ["-O3"]
    if os.environ.get("DEBUG", "0") == "1":
        cxx = ["-O0", "-g"]
    cxx += openmp()
    if not build_cuda():
        return CppExtension(
            "alexop._C",
            sources,
            extra_compile_args={"cxx": cxx},
            extra_link_args=openmp(),
            py_limited_api=True,
        )
    if not os.environ.get("TORCH_CUDA_ARCH_LIST"):
        os.environ["TORCH_CUDA_ARCH_LIST"] = default_archs()
    cu_sources = sorted(glob.glob("csrc/cuda/**/*.cpp", recursive=True) + glob.glob("csrc/**/*.cu", recursive=True))
    nvcc = ["-O3", "--expt-relaxed-constexpr", "-lineinfo"]
    return CUDAExtension(
        "alexop._C",
        sources + cu_sources,
        include_dirs=cuda_include_dirs(),
        extra_compile_args={"cxx": cxx, "nvcc": nvcc},
        extra_link_args=openmp(),
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
    cmdclass={"build_ext": Build},
    python_requires=">=3.10",
    install_requires=["torch>=2.11"],
)

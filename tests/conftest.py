import os

import pytest
import torch
import torch.nn.functional as F

import alexop

CUDA = torch.cuda.is_available()

# Under pytest-xdist each worker would start one CPU thread per core: the workers' CPU tests
# then fight over the cores, and a CPU gradcheck can run many times its time alone.
if "PYTEST_XDIST_WORKER_COUNT" in os.environ:
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"])))

needs_cuda = pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")


def sm80_kernels_forced():
    """ALEXOP_FORCE_SM80=1 or CUDA_FORCE_PTX_JIT=1: the selectors choose as on an A100, whatever the GPU."""
    return "1" in (os.environ.get("ALEXOP_FORCE_SM80"), os.environ.get("CUDA_FORCE_PTX_JIT"))


def wgmma_kernels_run():
    """An sm_90 GPU running this build's sm_90a (wgmma) kernels: not forced to the sm_80 ones, and
    not a build without sm_90a code (TORCH_CUDA_ARCH_LIST="8.0+PTX"), where AlexNet's bf16 input
    gradient is an mma.sync kernel."""
    if not CUDA or torch.cuda.get_device_capability() != (9, 0) or sm80_kernels_forced():
        return False
    x = torch.empty(256, 3, 224, 224, device="cuda", dtype=torch.bfloat16)
    w = torch.empty(96, 3, 11, 11, device="cuda", dtype=torch.bfloat16)
    return alexop.kernel_for(x, w, 2)["input_grad"].startswith("dgrad_gmma")


def _cpu_flags():
    try:
        with open("/proc/cpuinfo") as f:
            return set(next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), []))
    except OSError:
        return set()


# The 16-bit dtypes whose convolution ATen runs on oneDNN's native kernels on this CPU (bfloat16 with
# AVX512-BF16, float16 with AMX-FP16): there alexop's CPU ops hand their forward and weight gradient
# to ATen.
_FLAGS = _cpu_flags()
_AVX512 = {"avx512f", "avx512dq", "avx512bw", "avx512vl", "fma"} <= _FLAGS
_AMX_BF16 = _AVX512 and {"avx512_bf16", "amx_tile", "amx_bf16"} <= _FLAGS
_AMX_FP16 = _AMX_BF16 and "amx_fp16" in _FLAGS
NATIVE_16BIT_CPU = {torch.bfloat16: _AVX512 and "avx512_bf16" in _FLAGS, torch.float16: _AMX_FP16}
# This CPU as alexop._kernel_for_cpu names CPUs (the choices differ by instruction set and native
# 16-bit arithmetic), and the instruction set of its kernels as ALEXOP_CPU_CAPABILITY names it.
HOST_ISA = "avx512" if _AVX512 else "avx2" if {"avx2", "fma"} <= _FLAGS else "default"
HOST_CPU = ("amx_fp16" if _AMX_FP16 else "amx_bf16" if _AMX_BF16 else
            "avx512_bf16" if NATIVE_16BIT_CPU[torch.bfloat16] else HOST_ISA)

DEVICES = ["cpu", pytest.param("cuda", marks=needs_cuda)]

# Relative L2 error allowed against the float64 reference, per dtype.
REL_L2 = {
    torch.float64: 1e-12,
    torch.float32: 1e-5,
    torch.float16: 2e-3,
    torch.bfloat16: 1e-2,
}


def reference(x, w, b=None, padding=2):
    """F.conv2d in float64 on the CPU: the specification of conv11s4."""
    return F.conv2d(
        x.detach().double().cpu(),
        w.detach().double().cpu(),
        None if b is None else b.detach().double().cpu(),
        stride=4,
        padding=padding,
    )


def grads_reference(x, w, b, grad, padding):
    """The gradients of F.conv2d in float64 on the CPU, for (x, w) or (x, w, b)."""
    leaves = [t.detach().double().cpu().requires_grad_() for t in (x, w) + ((b,) if b is not None else ())]
    out = F.conv2d(leaves[0], leaves[1], leaves[2] if b is not None else None, stride=4, padding=padding)
    return torch.autograd.grad(out, leaves, grad.double().cpu())


class precision:
    """torch.set_float32_matmul_precision for the duration of a block."""

    def __init__(self, value):
        self.value = value

    def __enter__(self):
        self.saved = torch.get_float32_matmul_precision()
        torch.set_float32_matmul_precision(self.value)

    def __exit__(self, *exc):
        torch.set_float32_matmul_precision(self.saved)


class untimed:
    """torch.backends.cudnn.deterministic for the duration of a block: where kernel_for names two
    timed choices ("a|b"), a runs, on the GPU and on the CPU."""

    def __enter__(self):
        self.saved = torch.backends.cudnn.deterministic
        torch.backends.cudnn.deterministic = True

    def __exit__(self, *exc):
        torch.backends.cudnn.deterministic = self.saved


def guesses(names):
    """kernel_for's names with only the first of two timed choices ("a|b"): what runs untimed."""
    return {op: name.split("|")[0] for op, name in names.items()}


def rel_l2(out, ref):
    out = out.detach().double().cpu()
    ref = ref.detach().double().cpu()
    return ((out - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def assert_matches(out, ref, dtype):
    """out (any dtype/device) against a float64 reference: finite, same shape, within REL_L2."""
    assert out.shape == ref.shape
    assert torch.isfinite(out).all()
    if ref.numel() == 0:
        return
    err = rel_l2(out, ref)
    assert err <= REL_L2[dtype], f"relative L2 error {err:.3g} > {REL_L2[dtype]:.1g} for {dtype}"
    if dtype in (torch.float32, torch.float64):
        tol = 1e-4 if dtype == torch.float32 else 1e-10
        torch.testing.assert_close(out.detach().double().cpu(), ref, atol=tol, rtol=tol)


def assert_layout_like(out, ref):
    """out is laid out as ref, F.conv2d's result for operands of the same layouts
    (reference() and grads_reference() keep them): the same strides wherever a
    dimension of more than one element makes them count. Empty batches are not
    compared: F.conv2d returns those NCHW whatever the operands' layouts."""
    assert out.shape == ref.shape
    if ref.numel() == 0:
        return
    assert significant_strides(out) == significant_strides(ref), f"strides {out.stride()}, F.conv2d's {ref.stride()}"


def significant_strides(t):
    """t's strides of dimensions of more than one element: the others address nothing."""
    return [s for s, n in zip(t.stride(), t.shape) if n > 1]


def make_inputs(n, c_in, c_out, h, w, dtype=torch.float32, device="cpu", bias=True, seed=0):
    """Random inputs scaled like a real first layer: U[0,1) images, nn.Conv2d-style weights."""
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, c_in, h, w, generator=g, dtype=torch.float64)
    bound = (c_in * 121) ** -0.5
    wt = (torch.rand(c_out, c_in, 11, 11, generator=g, dtype=torch.float64) * 2 - 1) * bound
    b = (torch.rand(c_out, generator=g, dtype=torch.float64) * 2 - 1) * bound if bias else None
    cast = lambda t: None if t is None else t.to(device=device, dtype=dtype)  # noqa: E731
    return cast(x), cast(wt), cast(b)


class Stem(torch.nn.Module):
    """AlexNet's first layer: conv11s4 + ReLU."""

    def __init__(self, out_channels: int = 16):
        super().__init__()
        self.conv = alexop.Conv11s4(3, out_channels)

    def forward(self, x):
        return torch.relu(self.conv(x))


class Net(torch.nn.Module):
    """A tiny classifier, so training produces gradients on both sides of alexop."""

    def __init__(self, out_channels: int = 8):
        super().__init__()
        self.conv = alexop.Conv11s4(3, out_channels)
        self.head = torch.nn.Linear(out_channels, 2)

    def forward(self, x):
        return self.head(self.conv(x).relu().mean((2, 3)))

"""Inf and NaN: outputs and gradients are +Inf, -Inf and NaN exactly where float64
F.conv2d's are, and their finite values match it, on every device, dtype and
CUDA precision mode (the CUDA forms need a GPU and skip without one)."""

import pytest
import torch

import alexop
from conftest import REL_L2, grads_reference, guesses, make_inputs, needs_cuda, precision, reference, rel_l2, untimed

INF, NAN = float("inf"), float("nan")

# dtype, torch.set_float32_matmul_precision, relative L2 bound on the finite values.
MODES = [
    pytest.param(torch.float64, "highest", REL_L2[torch.float64], id="fp64"),
    pytest.param(torch.float32, "highest", REL_L2[torch.float32], id="fp32"),
    pytest.param(torch.float32, "high", 1e-3, id="fp32-high"),
    pytest.param(torch.float32, "medium", 1e-3, id="fp32-medium"),
    pytest.param(torch.bfloat16, "highest", REL_L2[torch.bfloat16], id="bf16"),
    pytest.param(torch.float16, "highest", REL_L2[torch.float16], id="fp16"),
]

# (N, C_in, C_out, H, W, padding): a small shape, and AlexNet's conv1 at batch
# 8, where the CUDA tensor-core kernels run (small shapes may take others);
# 6 channels: two slices of 3 on CUDA, the second adding its part to the
# first's (forward) and read and written in place (views of the images); on
# Hopper the forwards walk chunks of channels instead, as for 5 channels of 61
# columns (the last 16-bit chunk half zeros, rows copied to whole 16-byte
# units first; fp32-accurate chunks from more than one small image).
SMALL = (2, 3, 8, 64, 64, 2)
SLICES = (2, 6, 8, 64, 64, 2)
CHUNKS = (24, 5, 8, 61, 61, 1)
ALEXNET = (8, 3, 96, 224, 224, 2)
# too wide for whole input rows beside 96 filters' weights: column blocks, each
# tile's patch its block's columns, zeros written past the image's edges
WIDE = (2, 3, 96, 27, 1024, 2)
# grayscale at 224 x 224: on Hopper the 16-bit forward and weight gradient run
# the phase planes built for (or leaving zero) the missing channels
GRAY = (40, 1, 64, 224, 224, 2)
# RGBA: on Hopper the 16-bit forward runs the phase planes built for 4 channels
RGBA = (40, 4, 64, 224, 224, 2)
CASES = [
    pytest.param("cpu", SMALL, id="cpu"),
    pytest.param("cuda", SMALL, id="cuda", marks=needs_cuda),
    pytest.param("cuda", SLICES, id="cuda-slices", marks=needs_cuda),
    pytest.param("cuda", CHUNKS, id="cuda-chunks", marks=needs_cuda),
    pytest.param("cuda", WIDE, id="cuda-wide", marks=needs_cuda),
    pytest.param("cuda", GRAY, id="cuda-gray", marks=needs_cuda),
    pytest.param("cuda", RGBA, id="cuda-rgba", marks=needs_cuda),
    pytest.param("cuda", ALEXNET, id="cuda-alexnet", marks=[needs_cuda, pytest.mark.slow]),
]


@pytest.fixture(autouse=True)
def _guesses_run():
    """The selectors' guesses run, untimed (a first call's timing could hand a problem to cuDNN
    or ATen): the kernels kernel_for names first are the ones these tests check."""
    with untimed():
        yield


def _poison(t):
    """t with +Inf, -Inf and NaN in a few places: a +Inf and a -Inf close enough
    that some windows hold both (NaN there), values at opposite corners (windows
    reaching into the padding), one in the last image."""
    n, c, h, w = t.shape
    t = t.clone()
    t[0, 0, h // 3, w // 3] = INF
    t[0, c - 1, h // 3 + 3, w // 3 + 6] = -INF
    t[n - 1, c // 2, h // 2, 3 * w // 4] = NAN
    t[n - 1, 0, h - 1, 0] = INF
    t[0, c - 1, 0, w - 1] = -INF
    return t


def _inputs(device, shape, dtype, channels_last):
    n, c_in, c_out, h, w, p = shape
    x, wt, b = make_inputs(n, c_in, c_out, h, w, dtype=dtype, device=device)
    if channels_last:
        x = x.to(memory_format=torch.channels_last)
    g = torch.Generator().manual_seed(1)
    grad = torch.randn(n, c_out, (h + 2 * p - 11) // 4 + 1, (w + 2 * p - 11) // 4 + 1, generator=g)
    return x, wt, b, grad.to(device=device, dtype=dtype), p


def assert_nonfinite_match(out, ref, bound, name):
    """out has +Inf, -Inf and NaN exactly where ref (float64) has them; elsewhere within bound."""
    out = out.detach().double().cpu()
    assert out.shape == ref.shape, name
    for kind, where in (("+Inf", lambda t: t == INF), ("-Inf", lambda t: t == -INF), ("NaN", torch.isnan)):
        got, want = where(out), where(ref)
        if not torch.equal(got, want):
            differ = (got != want).nonzero()[:4].tolist()
            pytest.fail(
                f"{name}: {kind} at {int(got.sum())} elements, float64 F.conv2d at {int(want.sum())}; "
                f"they differ at {differ}, where alexop gives {[out[tuple(i)].item() for i in differ]} "
                f"and F.conv2d {[ref[tuple(i)].item() for i in differ]}"
            )
    finite = torch.isfinite(ref)
    assert rel_l2(out[finite], ref[finite]) <= bound, name


@pytest.mark.parametrize("device,shape", CASES)
@pytest.mark.parametrize("dtype,mode,bound", MODES)
@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "nhwc"])
def test_forward_nonfinite_where_conv2d_is(device, shape, dtype, mode, bound, channels_last):
    x, wt, b, _, p = _inputs(device, shape, dtype, channels_last)
    x = _poison(x)
    ref = reference(x, wt, b, p)
    assert (ref == INF).any() and (ref == -INF).any() and ref.isnan().any() and ref.isfinite().any()
    with precision(mode):
        out = alexop.conv11s4(x, wt, b, p)
    assert_nonfinite_match(out, ref, bound, "output")


# Non-finite images reach the weight and bias gradients; a non-finite
# grad_output reaches all three gradients.
@pytest.mark.parametrize("device,shape", CASES)
@pytest.mark.parametrize("dtype,mode,bound", MODES)
@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "nhwc"])
@pytest.mark.parametrize("poisoned", ["input", "grad_output"])
def test_gradients_nonfinite_where_conv2d_is(device, shape, dtype, mode, bound, channels_last, poisoned):
    x, wt, b, grad, p = _inputs(device, shape, dtype, channels_last)
    if poisoned == "input":
        x = _poison(x)
    else:
        grad = _poison(grad)
    want = list(grads_reference(x, wt, b, grad, p))
    assert not want[1].isfinite().all() and bool(want[0].isfinite().all()) == (poisoned == "input")
    leaves = [t.detach().requires_grad_() for t in (x, wt, b)]
    with precision(mode):
        got = torch.autograd.grad(alexop.conv11s4(*leaves, p), leaves, grad)
        choices = guesses(alexop.kernel_for(x, wt, p))
        # A gradient handed to cuDNN or oneDNN is F.conv2d's on this device and dtype, in either
        # layout (the fallbacks run the faster; untimed, the input gradient channels_last). Their
        # weight gradient leaves out the padded pixels: an infinite grad_output next to the padding
        # gives ±Inf there where float64 F.conv2d multiplies the padding's zeros and gives NaN.
        # cuDNN's deterministic input gradients (the untimed choice here) give NaN around an
        # infinite grad_output, past the pixels its windows reach, how far depending on the
        # layout's algorithm. (A 16-bit result of oneDNN's with non-finite elements is computed
        # again by alexop's kernels.)
        handed = {"input": ("dgrad_cudnn", "cpu_dgrad_aten"), "weight": ("wgrad_cudnn", "cpu_wgrad_aten")}
        on_device = _device_grads(x, wt, grad, p)
    for name, g, w, d, op in (("input", got[0], want[0], on_device[0], "input_grad"),
                              ("weight", got[1], want[1], on_device[1], "weight_grad")):
        wants = [*d, w] if choices[op] in handed[name] else [w]
        for i, r in enumerate(wants):
            try:
                assert_nonfinite_match(g, r, bound, f"{name} gradient ({choices[op]})")
                break
            except (AssertionError, pytest.fail.Exception):
                if i == len(wants) - 1:
                    raise
    assert_nonfinite_match(got[2], want[2], bound, "bias gradient")


def _device_grads(x, wt, grad, p):
    """F.conv2d's input and weight gradients as alexop's fallbacks compute them, as float64 on the
    CPU: on the tensors' own device and in their dtype (on the CPU, 16-bit dtypes in float32, as
    there), in NCHW and in channels_last; [[input's], [weight's]]."""
    reduced = x.device.type == "cpu" and x.dtype in (torch.float16, torch.bfloat16)
    x, wt, grad = (t.detach().float() if reduced else t.detach() for t in (x, wt, grad))
    # the fallbacks let cuDNN use TF32 only where the float32 precision allows it (not "highest")
    saved = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.get_float32_matmul_precision() != "highest"
    try:
        found = [[], []]
        for layout in (torch.contiguous_format, torch.channels_last):
            leaves = [t.contiguous(memory_format=layout).requires_grad_() for t in (x, wt)]
            out = torch.nn.functional.conv2d(*leaves, None, stride=4, padding=p)
            for f, g in zip(found, torch.autograd.grad(out, leaves, grad.contiguous(memory_format=layout))):
                f.append(g.double().cpu())
        return found
    finally:
        torch.backends.cudnn.allow_tf32 = saved

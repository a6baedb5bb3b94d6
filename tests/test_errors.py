"""Every bad input raises a RuntimeError that says what was wrong and what was expected."""

import re

import pytest
import torch

import alexop
from conftest import DEVICES


def _good(device):
    return torch.rand(2, 3, 32, 32, device=device), torch.rand(8, 3, 11, 11, device=device), torch.rand(8, device=device)


CASES = [
    ("input 3-d", lambda x, w, b: (x[0], w, b, 2), r"expected input to be a 4-d tensor \(N, C, H, W\), but got a 3-d tensor"),
    ("input 5-d", lambda x, w, b: (x[None], w, b, 2), r"expected input to be a 4-d tensor"),
    ("weight 3-d", lambda x, w, b: (x, w[0], b, 2), r"expected weight to be a 4-d tensor \(C_out, C_in, 11, 11\)"),
    ("weight 7x7", lambda x, w, b: (x, w[..., :7, :7], b, 2), r"expected an 11x11 weight of shape \(C_out, C_in, 11, 11\), but got shape \[8, 3, 7, 7\]"),
    ("channel mismatch", lambda x, w, b: (x[:, :2], w, b, 2), r"weight of shape \[8, 3, 11, 11\] expects 3 input channels, but the input has 2"),
    ("no input channels", lambda x, w, b: (x[:, :0], w[:, :0], b, 2), r"expected at least one input channel"),
    ("no output channels", lambda x, w, b: (x, w[:0], None, 2), r"expected at least one output channel"),
    ("bias shape", lambda x, w, b: (x, w, b[:5], 2), r"expected bias of shape \(C_out,\) = \(8,\), but got shape \[5\]"),
    ("bias 2-d", lambda x, w, b: (x, w, b[None], 2), r"expected bias of shape \(C_out,\)"),
    ("weight dtype", lambda x, w, b: (x, w.double(), b, 2), r"expected weight to have the dtype of input \(Float\), but got Double"),
    ("bias dtype", lambda x, w, b: (x, w, b.half(), 2), r"expected bias to have the dtype of input \(Float\), but got Half"),
    ("negative padding", lambda x, w, b: (x, w, b, -1), r"expected padding >= 0, but got -1"),
    ("input too small", lambda x, w, b: (x[..., :6, :], w, b, 2), r"the padded input height \(6 \+ 2 \* padding 2\) must be at least the kernel size 11"),
    ("too narrow", lambda x, w, b: (x[..., :10], w, b, 0), r"the padded input width \(10 \+ 2 \* padding 0\) must be at least the kernel size 11"),
    ("integer input", lambda x, w, b: ((x * 10).long(), w.long(), b.long(), 2), r"expected a floating-point tensor .* but got Long"),
]


@pytest.mark.parametrize("device", DEVICES + ["meta"])
@pytest.mark.parametrize("make,message", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input(device, make, message):
    args = make(*_good(device))
    with pytest.raises(RuntimeError, match=message):
        alexop.conv11s4(*args)


@pytest.mark.parametrize("device", DEVICES)
def test_device_mismatch(device):
    x, w, b = _good(device)
    with pytest.raises(RuntimeError, match=r"expected weight to be on the device of input \(.+\), but got meta"):
        alexop.conv11s4(x, w.to("meta"), b)


def test_unsupported_dtype_on_a_backend():
    x, w, b = _good("cpu")
    x, w, b = (t.to(torch.complex64) for t in (x, w, b))
    with pytest.raises(RuntimeError, match="expected a floating-point tensor"):
        alexop.conv11s4(x, w, b)


def test_backward_ops_check_their_arguments():
    x, w, _ = _good("cpu")
    grad = torch.rand(2, 8, 7, 7)
    with pytest.raises(RuntimeError, match=re.escape("expected grad_output of shape [2, 8, 6, 6] for an input of size [2, 3, 27, 27]")):
        torch.ops.alexop.conv11s4_backward_input(grad, w, [2, 3, 27, 27], 2)
    with pytest.raises(RuntimeError, match=re.escape("expected input_size to be (N, C, H, W)")):
        torch.ops.alexop.conv11s4_backward_input(grad, w, [3, 32, 32], 2)
    with pytest.raises(RuntimeError, match=re.escape("expected grad_output of shape [2, 8, 7, 7] for an input of shape [2, 3, 32, 32], but got [2, 8, 6, 7]")):
        torch.ops.alexop.conv11s4_backward_weight(grad[..., :6, :], x, 2, True)


def test_module_arguments():
    with pytest.raises(ValueError, match="padding >= 0"):
        alexop.Conv11s4(3, 8, padding=-1)
    with pytest.raises(ValueError, match="at least one input and one output channel"):
        alexop.Conv11s4(0, 8)
    with pytest.raises(ValueError, match="kernel_size 11, stride 4"):
        alexop.Conv11s4.from_conv2d(torch.nn.Conv2d(3, 8, 11, stride=2))



def _three_ops(device, n, c_in, c_out, h, w, padding):
    """The forward and both backward ops of one convolution, as (op name, call).
    grad_output is (N, C_out, 1, 1): what GEOMETRY holds is refused before its shape."""
    x = torch.zeros(n, c_in, h, w, device=device)
    wt = torch.zeros(c_out, c_in, 11, 11, device=device)
    grad = torch.zeros(n, c_out, 1, 1, device=device)
    ops = torch.ops.alexop
    return [
        ("alexop.conv11s4", lambda: ops.conv11s4(x, wt, None, padding)),
        ("alexop.conv11s4_backward_input", lambda: ops.conv11s4_backward_input(grad, wt, [n, c_in, h, w], padding)),
        ("alexop.conv11s4_backward_weight", lambda: ops.conv11s4_backward_weight(grad, x, padding, True)),
    ]


GEOMETRY = [
    (
        "no input channels",
        (1, 0, 4, 11, 11, 0),
        r"expected at least one input channel, but (the input|input_size) has shape \[1, 0, 11, 11\]",
    ),
    (
        "no output channels",
        (1, 3, 0, 11, 11, 0),
        r"expected at least one output channel, but (weight has shape \[0, 3, 11, 11\]|grad_output has shape \[1, 0, 1, 1\])",
    ),
    ("negative padding", (1, 3, 4, 11, 11, -1), r"expected padding >= 0, but got -1"),
    (
        "padding 2**62",
        (1, 3, 4, 11, 11, 2**62),
        re.escape("expected padding <= 4611686018427387903 (2**62 - 1, as F.conv2d), but got 4611686018427387904"),
    ),
    ("padding 2**63 - 1", (1, 3, 4, 11, 11, 2**63 - 1), r"expected padding <= 4611686018427387903 .*, but got 9223372036854775807"),
    (
        "padded height overflows",
        (1, 3, 4, 11, 11, 2**62 - 1),
        re.escape("the padded input height (11 + 2 * padding 4611686018427387903) overflows int64"),
    ),
    ("too small", (1, 3, 4, 6, 11, 2), re.escape("the padded input height (6 + 2 * padding 2) must be at least the kernel size 11")),
]


# The three ops share one check of what they have in common, so each refuses
# a geometry as the forward does, on every backend.
@pytest.mark.parametrize("device", DEVICES + ["meta"])
@pytest.mark.parametrize("size,message", [g[1:] for g in GEOMETRY], ids=[g[0] for g in GEOMETRY])
def test_the_three_ops_refuse_a_geometry_alike(device, size, message):
    for op, call in _three_ops(device, *size):
        with pytest.raises(RuntimeError, match=f"^{re.escape(op)}: {message}"):
            call()


# The crash: a division by the channel count in the CPU kernel (SIGFPE).
@pytest.mark.parametrize("device", DEVICES + ["meta"])
def test_backward_input_without_input_channels_raises_instead_of_crashing(device):
    grad, wt = torch.randn(1, 1, 1, 1, device=device), torch.randn(1, 0, 11, 11, device=device)
    with pytest.raises(RuntimeError, match=r"expected at least one input channel, but input_size has shape \[1, 0, 11, 11\]"):
        torch.ops.alexop.conv11s4_backward_input(grad, wt, [1, 0, 11, 11], 0)


# The silent wrong answer: padding 2**63 - 1 wrapped around into a
# small all-bias output.
@pytest.mark.parametrize("device", DEVICES + ["meta"])
def test_padding_near_2_63_raises_instead_of_wrapping(device):
    x, w, b = _good(device)
    with pytest.raises(RuntimeError, match=r"expected padding <= 4611686018427387903"):
        alexop.conv11s4(x, w, b, 2**63 - 1)


# Padding 2**40 is within F.conv2d's bound but makes an output no 64-bit size
# can hold: refused before allocating, naming what to change.
@pytest.mark.parametrize("device", DEVICES + ["meta"])
def test_output_too_large_for_64_bit_sizes_is_refused_before_allocation(device):
    x, w = torch.randn(1, 1, 16, 16, device=device), torch.randn(1, 1, 11, 11, device=device)
    message = re.escape("alexop.conv11s4: the output would have shape [1, 1, 549755813890, 549755813890], too large for 64-bit sizes")
    with pytest.raises(RuntimeError, match=message + r".*reduce padding"):
        alexop.conv11s4(x, w, None, 2**40)


# Each backward op's result is checked too, with expanded tensors standing in
# for grad_outputs and inputs of that size.
@pytest.mark.parametrize("device", DEVICES + ["meta"])
def test_gradients_too_large_for_64_bit_sizes_are_refused_before_allocation(device):
    ops = torch.ops.alexop
    h = 2**31
    p = (h + 4 - 11) // 4 + 1
    grad = torch.zeros(1, 1, 1, 1, device=device).expand(1, 1, p, p)
    with pytest.raises(RuntimeError, match=re.escape("the input gradient would have shape [1, 3, 2147483648, 2147483648], too large")):
        ops.conv11s4_backward_input(grad, torch.zeros(1, 3, 11, 11, device=device), [1, 3, h, h], 2)
    grad = torch.zeros(0, 1, 1, 1, device=device).expand(0, 2**31, 1, 1)
    x = torch.zeros(0, 1, 11, 11, device=device).expand(0, 2**31, 11, 11)
    with pytest.raises(RuntimeError, match=re.escape("the weight gradient would have shape [2147483648, 2147483648, 11, 11], too large")):
        ops.conv11s4_backward_weight(grad, x, 0, False)


@pytest.mark.parametrize("device", DEVICES + ["meta"])
def test_backward_input_refuses_negative_input_size(device):
    grad, w = torch.zeros(1, 8, 1, 1, device=device), torch.zeros(8, 3, 11, 11, device=device)
    with pytest.raises(RuntimeError, match=re.escape("expected input_size to have no negative entries, but got [-1, 3, 11, 11]")):
        torch.ops.alexop.conv11s4_backward_input(grad, w, [-1, 3, 11, 11], 0)


# None where the schema takes a Tensor arrives as an undefined tensor; it used
# to fail with "tensor does not have a device". Without autograd (inference
# mode) the backend kernels meet it first: the same message.
@pytest.mark.parametrize("device", DEVICES + ["meta"])
@pytest.mark.parametrize("inference", [False, True], ids=["autograd", "inference"])
def test_none_for_a_tensor_is_refused_naming_it(device, inference):
    x, w, _ = _good(device)
    grad = torch.zeros(2, 8, 7, 7, device=device)
    ops = torch.ops.alexop
    calls = [
        ("weight", lambda: ops.conv11s4(x, None)),
        ("input", lambda: ops.conv11s4(None, w)),
        ("grad_output", lambda: ops.conv11s4_backward_input(None, w, [2, 3, 32, 32], 2)),
        ("weight", lambda: ops.conv11s4_backward_input(grad, None, [2, 3, 32, 32], 2)),
        ("grad_output", lambda: ops.conv11s4_backward_weight(None, x, 2, True)),
        ("input", lambda: ops.conv11s4_backward_weight(grad, None, 2, True)),
    ]
    with torch.inference_mode(inference):
        for name, call in calls:
            with pytest.raises(RuntimeError, match=rf"expected {name} to be a 4-d tensor .*, but got None"):
                call()


def test_padding_beyond_int64_is_a_value_error_naming_padding():
    x, w, b = _good("cpu")
    for padding in (2**63, -(2**63) - 1, 10**30):
        with pytest.raises(ValueError, match=rf"alexop.conv11s4: expected padding to fit in int64, but got {padding}"):
            alexop.conv11s4(x, w, b, padding)


class _Conv(torch.nn.Module):
    """conv11s4 with a given weight and padding, which Conv11s4 would refuse to hold."""

    def __init__(self, weight, padding):
        super().__init__()
        self.register_buffer("weight", weight)
        self.padding = padding

    def forward(self, x):
        return alexop.conv11s4(x, self.weight, None, self.padding)


# Compiled and exported graphs run the Meta kernel's check: the same message.
@pytest.mark.parametrize("size,message", [g[1:] for g in GEOMETRY], ids=[g[0] for g in GEOMETRY])
def test_compile_and_export_refuse_with_the_same_message(size, message):
    n, c_in, c_out, h, w, padding = size
    x, wt = torch.zeros(n, c_in, h, w), torch.zeros(c_out, c_in, 11, 11)
    compiled = torch.compile(alexop.conv11s4, fullgraph=True, dynamic=False, backend="aot_eager")
    with pytest.raises(RuntimeError, match=f"alexop.conv11s4: {message}"):
        compiled(x, wt, None, padding)
    with pytest.raises(RuntimeError, match=f"alexop.conv11s4: {message}"):
        torch.export.export(_Conv(wt, padding), (x,))

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

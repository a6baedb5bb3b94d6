"""torch.library.opcheck on every alexop op: schema, autograd registration, fake tensors, AOT dispatch."""

import pytest
import torch

from conftest import DEVICES, make_inputs

OPS = torch.ops.alexop


def _conv_samples(device, requires_grad):
    for bias in (True, False):
        x, wt, b = make_inputs(2, 3, 5, 23, 27, device=device, bias=bias)
        yield (x, wt, b, 2)
    x, wt, b = make_inputs(3, 1, 4, 15, 15, device=device)
    yield (x.to(memory_format=torch.channels_last), wt, b, 0)
    # channels_last results, from the input or from the weight
    x, wt, b = make_inputs(2, 3, 6, 23, 27, device=device)
    yield (x.to(memory_format=torch.channels_last), wt, b, 2)
    yield (x, wt.to(memory_format=torch.channels_last), None, 1)
    x, wt, b = make_inputs(0, 3, 4, 15, 15, device=device)
    yield (x, wt, b, 1)


def _with_grad(args, requires_grad):
    if not requires_grad:
        return args
    return tuple(a.detach().requires_grad_() if isinstance(a, torch.Tensor) and a.numel() else a for a in args)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("requires_grad", [False, True])
def test_conv11s4(device, requires_grad):
    for args in _conv_samples(device, requires_grad):
        torch.library.opcheck(OPS.conv11s4.default, _with_grad(args, requires_grad))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("requires_grad", [False, True])
@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "nhwc"])
def test_conv11s4_backward_input(device, requires_grad, channels_last):
    x, wt, _ = make_inputs(2, 3, 5, 23, 27, device=device)
    grad = torch.randn(2, 5, 5, 6, device=device)
    if channels_last:  # a channels_last input gradient
        grad = grad.to(memory_format=torch.channels_last)
    args = (grad, wt, list(x.shape), 2)
    torch.library.opcheck(OPS.conv11s4_backward_input.default, _with_grad(args, requires_grad))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("requires_grad", [False, True])
@pytest.mark.parametrize("bias_grad", [False, True])
def test_conv11s4_backward_weight(device, requires_grad, bias_grad):
    x, _, _ = make_inputs(2, 3, 5, 23, 27, device=device)
    grad = torch.randn(2, 5, 5, 6, device=device)
    args = (grad, x, 2, bias_grad)
    torch.library.opcheck(OPS.conv11s4_backward_weight.default, _with_grad(args, requires_grad))

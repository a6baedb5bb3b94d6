"""Under autocast the op runs in the autocast dtype, like nn.Conv2d."""

import pytest
import torch
import torch.nn.functional as F

import alexop
from conftest import REL_L2, make_inputs, needs_cuda, reference, rel_l2


@pytest.mark.parametrize(
    "device,dtype",
    [
        ("cpu", torch.bfloat16),
        ("cpu", torch.float16),
        pytest.param("cuda", torch.float16, marks=needs_cuda),
        pytest.param("cuda", torch.bfloat16, marks=needs_cuda),
    ],
)
def test_autocast_dtype_like_conv2d(device, dtype):
    x, wt, b = make_inputs(2, 3, 16, 67, 67, device=device)
    with torch.autocast(device, dtype=dtype):
        out = alexop.conv11s4(x, wt, b)
        like = F.conv2d(x, wt, b, stride=4, padding=2)
    assert out.dtype == like.dtype == dtype
    assert rel_l2(out, reference(x, wt, b)) <= REL_L2[dtype]


def test_autocast_training_grads_in_parameter_dtype():
    x, wt, b = make_inputs(2, 3, 16, 67, 67)
    wt.requires_grad_()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = alexop.conv11s4(x, wt, b).float().square().mean()
    loss.backward()
    assert wt.grad.dtype == torch.float32 and torch.isfinite(wt.grad).all()

"""conv11s4(input, weight, bias, padding) == F.conv2d(..., stride=4, padding=padding)."""

import pytest
import torch

import alexop
from conftest import (
    DEVICES,
    assert_layout_like,
    assert_matches,
    grads_reference,
    make_inputs,
    needs_cuda,
    reference,
    significant_strides,
)

# (H, W, padding): the smallest valid input, odd and non-square sizes,
# AlexNet's 224 with p=2 (output 55) and the original 227 with p=0.
SIZES = [(7, 7, 2), (11, 12, 0), (19, 30, 1), (224, 224, 2), (227, 227, 0)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("n", [0, 1, 2, 7])
@pytest.mark.parametrize("c_in", [1, 3, 4])
@pytest.mark.parametrize("c_out", [1, 64, 96])
@pytest.mark.parametrize("size", SIZES, ids=lambda s: "{}x{}p{}".format(*s))
def test_matches_conv2d(device, n, c_in, c_out, size):
    h, w, p = size
    x, wt, b = make_inputs(n, c_in, c_out, h, w, device=device, bias=(n + c_out) % 2 == 0)
    out = alexop.conv11s4(x, wt, b, padding=p)
    assert out.device == x.device and out.dtype == x.dtype
    assert out.shape == (n, c_out, (h + 2 * p - 11) // 4 + 1, (w + 2 * p - 11) // 4 + 1)
    assert_matches(out, reference(x, wt, b, p), torch.float32)


def _layouts(x, wt):
    yield "contiguous", x, wt
    yield "channels_last", x.to(memory_format=torch.channels_last), wt
    wide = x.new_zeros(*x.shape[:3], 2 * x.shape[3])
    wide[..., ::2] = x
    yield "every other column of a wider tensor", wide[..., ::2], wt
    yield "permuted weight", x, wt.permute(0, 1, 3, 2).contiguous().permute(0, 1, 3, 2)
    yield "channels_last weight", x, wt.to(memory_format=torch.channels_last)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("bias", [True, False])
def test_any_strides(device, bias):
    x, wt, b = make_inputs(3, 3, 16, 41, 37, device=device, bias=bias)
    for name, xs, ws in _layouts(x, wt):
        out = alexop.conv11s4(xs, ws, b)
        ref = reference(xs, ws, b)
        assert_layout_like(out, ref)
        assert_matches(out, ref, torch.float32)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("c_in", [1, 3, 4])
def test_output_layout_like_conv2d_and_meta(device, dtype, c_in):
    """The result is channels_last where the input or the weight is, as F.conv2d's
    (one channel is NCHW and channels_last at once: NCHW); the input gradient follows
    grad_output and the weight in the same way; the Meta kernels agree."""
    x, wt, b = make_inputs(2, c_in, 8, 31, 31, dtype=dtype, device=device)
    cl = torch.channels_last
    for xs, ws in [(x, wt), (x.to(memory_format=cl), wt), (x, wt.to(memory_format=cl)),
                   (x.to(memory_format=cl), wt.to(memory_format=cl))]:
        real = alexop.conv11s4(xs, ws, b)
        meta = alexop.conv11s4(xs.to("meta"), ws.to("meta"), b.to("meta"))
        assert significant_strides(real) == significant_strides(meta)
        assert_layout_like(real, reference(xs, ws, b))
        grad = torch.randn_like(real)  # real's layout, as autograd passes it
        gx = torch.ops.alexop.conv11s4_backward_input(grad, ws, list(x.shape), 2)
        gx_meta = torch.ops.alexop.conv11s4_backward_input(grad.to("meta"), ws.to("meta"), list(x.shape), 2)
        assert significant_strides(gx) == significant_strides(gx_meta)
        assert_layout_like(gx, grads_reference(xs, ws, b, grad, 2)[0])
        gw, _ = torch.ops.alexop.conv11s4_backward_weight(grad, xs, 2, True)
        assert gw.is_contiguous()


@pytest.mark.parametrize(
    "device,dtype",
    [
        ("cpu", torch.float64),
        ("cpu", torch.float32),
        ("cpu", torch.bfloat16),
        ("cpu", torch.float16),
        pytest.param("cuda", torch.float64, marks=needs_cuda),
        pytest.param("cuda", torch.float32, marks=needs_cuda),
        pytest.param("cuda", torch.bfloat16, marks=needs_cuda),
        pytest.param("cuda", torch.float16, marks=needs_cuda),
    ],
)
def test_dtypes(device, dtype):
    x, wt, b = make_inputs(2, 3, 32, 47, 51, dtype=dtype, device=device)
    out = alexop.conv11s4(x, wt, b)
    assert out.dtype == dtype
    assert_matches(out, reference(x, wt, b), dtype)


def test_default_padding_is_two():
    x, wt, b = make_inputs(1, 3, 4, 224, 224)
    assert alexop.conv11s4(x, wt, b).shape == (1, 4, 55, 55)
    assert torch.equal(alexop.conv11s4(x, wt, b), torch.ops.alexop.conv11s4(x, wt, b, 2))


@needs_cuda
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_second_gpu():
    x, wt, b = make_inputs(2, 3, 8, 35, 35, device="cuda:1")
    with torch.cuda.device(0):
        out = alexop.conv11s4(x, wt, b)
    assert out.device == torch.device("cuda:1")
    assert_matches(out, reference(x, wt, b), torch.float32)

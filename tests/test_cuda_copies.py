"""The copies the CUDA paths make for cuDNN: the space-to-depth view of the input that its 3x3
kernels take (cuda/cudnn/space_to_depth.h) and its inverse for the input gradient, every element
bit for bit against a reference made of pad and reshape, from and to either layout; and the
errors of their private ops."""

import math

import pytest
import torch

from conftest import needs_cuda

pytestmark = needs_cuda


# The view tests' cases: channels, dtypes, sizes and paddings, the source's layout (a strided
# one too, and one that starts an element into its storage), the result's layout.
VIEW_CASES = [
    pytest.mark.parametrize("c", [1, 3, 8, 16]),
    pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=["fp32", "bf16", "fp16"]),
    pytest.mark.parametrize("h,w,pad", [(63, 63, 2), (127, 100, 0), (37, 41, 5), (224, 224, 2), (30, 287, 1)]),
    pytest.mark.parametrize("source", ["nchw", "channels_last", "strided", "offset"]),
    pytest.mark.parametrize("channels_last", [False, True], ids=["to_nchw", "to_channels_last"]),
]


def view_cases(test):
    for mark in VIEW_CASES:
        test = mark(test)
    return test


# The cuDNN fallback also times cuDNN's 3x3 kernels on the space-to-depth view
# (cuda/cudnn/space_to_depth.h): the padded input's 4x4 pixel blocks as 16C channels, 16c + 4a + b
# the pixel (a, b) of channel c. From either layout or a strided input, to either layout, 1-16
# channels, paddings 0-5, odd sizes: every element bit for bit, zeros past the image, the rows and
# columns no window reaches left out.
def _space_to_depth_reference(x, pad, rows, cols):
    n, c, h, w = x.shape
    x = torch.nn.functional.pad(x, (pad, 4 * cols - w - pad, pad, 4 * rows - h - pad))
    return x.reshape(n, c, rows, 4, cols, 4).permute(0, 1, 3, 5, 2, 4).reshape(n, 16 * c, rows, cols)


def _view_source(size, dtype, source):
    """A random tensor of `size` in the source's layout."""
    if source == "offset":
        return torch.randn(math.prod(size) + 1, device="cuda").to(dtype)[1:].view(size)
    x = torch.randn(*size[:3], 2 * size[3] if source == "strided" else size[3], device="cuda").to(dtype)
    x = x[..., ::2] if source == "strided" else x
    return x.to(memory_format=torch.channels_last) if source == "channels_last" else x


@view_cases
def test_space_to_depth_view(c, dtype, h, w, pad, source, channels_last):
    x = _view_source((3, c, h, w), dtype, source)
    rows, cols = (h + 2 * pad - 11) // 4 + 3, (w + 2 * pad - 11) // 4 + 3
    got = torch.ops.alexop._space_to_depth(x, pad, rows, cols, channels_last)
    assert got.is_contiguous(memory_format=torch.channels_last if channels_last else torch.contiguous_format)
    assert torch.equal(got, _space_to_depth_reference(x, pad, rows, cols))


# Its inverse for the input gradient: the view's values back at their pixels of an h x w input,
# zeros where no block of the view reaches (the rows and columns past the last window), every
# element bit for bit, from a view in either layout or strided, to either layout.
def _depth_to_space_reference(v, pad, h, w):
    n, d, rows, cols = v.shape
    x = v.reshape(n, d // 16, 4, 4, rows, cols).permute(0, 1, 4, 2, 5, 3).reshape(n, d // 16, 4 * rows, 4 * cols)
    x = torch.nn.functional.pad(x, (0, max(0, w + pad - 4 * cols), 0, max(0, h + pad - 4 * rows)))
    return x[:, :, pad:pad + h, pad:pad + w]


@view_cases
def test_depth_to_space_view(c, dtype, h, w, pad, source, channels_last):
    rows, cols = (h + 2 * pad - 11) // 4 + 3, (w + 2 * pad - 11) // 4 + 3
    v = _view_source((2, 16 * c, rows, cols), dtype, source)
    got = torch.ops.alexop._depth_to_space(v, pad, h, w, channels_last)
    assert got.is_contiguous(memory_format=torch.channels_last if channels_last else torch.contiguous_format)
    assert torch.equal(got, _depth_to_space_reference(v, pad, h, w))


@pytest.mark.parametrize("x,message", [
    (torch.zeros(2, 17, 40, 40), "at most 16 channels"),
    (torch.zeros(2, 3, 40, 40, dtype=torch.int32), "alexop._space_to_depth"),
    (torch.zeros(3, 40, 40), "4-D"),
], ids=["channels", "dtype", "dims"])
def test_space_to_depth_view_errors(x, message):
    with pytest.raises(RuntimeError, match=message):
        torch.ops.alexop._space_to_depth(x.cuda(), 2, 10, 10, False)


@pytest.mark.parametrize("v,message", [
    (torch.zeros(2, 17 * 16, 10, 10), "at most 16 x 16 channels"),
    (torch.zeros(2, 40, 10, 10), "multiple of 16"),
    (torch.zeros(2, 48, 10, 10, dtype=torch.int32), "alexop._depth_to_space"),
], ids=["channels", "not-a-view", "dtype"])
def test_depth_to_space_view_errors(v, message):
    with pytest.raises(RuntimeError, match=message):
        torch.ops.alexop._depth_to_space(v.cuda(), 2, 40, 40, False)

"""The CUDA tensor-core paths (forward, weight and input gradients): accuracy per
precision mode, every element written, bitwise reproducibility, odd shapes, and
outputs past 2^31 elements."""

import pytest
import torch

import alexop
from conftest import (
    REL_L2,
    assert_layout_like,
    grads_reference,
    guesses,
    make_inputs,
    needs_cuda,
    precision,
    reference,
    rel_l2,
    untimed,
    wgmma_kernels_run,
)

pytestmark = needs_cuda


@pytest.fixture(autouse=True)
def _guesses_run():
    """The kernels under test are the selectors' guesses: a first call's timing against cuDNN,
    which could hand a problem to cuDNN, is off (tests/test_every_shape.py tests it)."""
    with untimed():
        yield

# AlexNet's conv1 (96 filters) and torchvision's (64), on shapes that are and
# are not multiples of the kernels' tiles; batches of 1-3 images take the
# fp32 forward's channel-split path and the wgmma gather kernels' 64-pixel
# tiles (full ones would leave SMs idle), 128 filters its split for large K.
SHAPES = [
    (16, 96, 224, 224, 2),
    (16, 64, 224, 224, 2),
    (1, 96, 227, 227, 0),
    (3, 96, 97, 131, 1),
    (2, 64, 15, 11, 3),
    (2, 128, 64, 64, 2),
]


def _poison_allocator(numel, dtype):
    """Leave NaN in the caching allocator's free blocks, so an output that is
    not fully written shows up as NaN."""
    torch.full((numel,), float("nan"), dtype=dtype, device="cuda")
    torch.cuda.synchronize()


def _forward(shape, dtype, mode, bias=True, channels_last=False):
    """alexop's forward of make_inputs' tensors (shape: N, C_in, C_out, H, W, padding) on an
    allocator poisoned with NaN, with float64's result and kernel_for's names."""
    n, c, k, h, w, p = shape
    x, wt, b = make_inputs(n, c, k, h, w, dtype=dtype, device="cuda", bias=bias)
    if channels_last:
        x = x.to(memory_format=torch.channels_last)
    ref = reference(x, wt, b, p)
    _poison_allocator(ref.numel(), dtype)
    with precision(mode):
        out = alexop.conv11s4(x, wt, b, p)
        names = alexop.kernel_for(x, wt, p)
    return out, ref, names


# The forward's precision modes and their bounds on the relative L2 error against float64
# ("high": bf16x3 on mma.sync, 3xFP16 on wgmma).
FORWARD_MODES = [
    pytest.param(torch.float32, "highest", 1e-5, id="fp32"),
    pytest.param(torch.float32, "high", 2e-5, id="bf16x3"),
    pytest.param(torch.float32, "medium", 1e-3, id="tf32"),
    pytest.param(torch.bfloat16, "highest", REL_L2[torch.bfloat16], id="bf16"),
    pytest.param(torch.float16, "highest", REL_L2[torch.float16], id="fp16"),
]


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype,mode,bound", FORWARD_MODES)
@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "nhwc"])
def test_forward_accuracy(shape, dtype, mode, bound, channels_last):
    n, k, h, w, p = shape
    out, ref, _ = _forward((n, 3, k, h, w, p), dtype, mode, channels_last=channels_last)
    assert torch.isfinite(out).all(), "some output element was not written"
    assert rel_l2(out, ref) <= bound
    if dtype == torch.float32 and mode == "highest":
        torch.testing.assert_close(out.double().cpu(), ref, atol=1e-4, rtol=1e-4)


# From one 192-pixel tile per SM on, outputs 48-55 pixels wide take the
# kernels that read the input as phase planes: TF32 (8-byte copies for even
# padding and width, channels_last by unit types of 3 channels x 4 columns,
# three planes at a time; 4-byte ones otherwise) and 16-bit of even padding
# and width (4-byte copies; channels_last by unit types), 64 or 96 channel
# slots, the 16-bit ones with a store warpgroup; ragged last tiles (an image's
# last tile with warpgroups past its pixels), no bias. Other widths: from two
# 256-pixel tiles per SM the 16-bit Hopper forward hands its outputs to store
# warps that write each channel's run in aligned 16-byte chunks (odd plane
# lengths: each run starts mid-chunk, differently per channel); even padding
# and width take its space-to-depth form, NCHW and channels_last each with
# their own copy; the rest the gather kernel.
MANY_TILE_SHAPES = [
    (96, 96, 97, 131, 1),  # 23 x 31 outputs: 3 tiles per image, the last ragged
    (40, 64, 225, 223, 0),  # 54 x 54 outputs: 12 tiles per image
    # even padding and width: the space-to-depth kernel, or for 48-55 wide the planes
    (96, 96, 98, 130, 2),  # 23 x 31 outputs, ragged last tile
    (40, 64, 226, 224, 0),  # 54 x 54
    (24, 96, 224, 224, 2),  # the headline shape
    (64, 96, 64, 320, 2),  # 15 x 79 outputs: too wide for its patch, the gather kernel
    (20, 72, 200, 216, 4),  # 50 x 54 outputs, 72 of 96 channel slots
    (12, 96, 212, 208, 3),  # 52 x 51 outputs, odd padding
]


@pytest.mark.parametrize("shape", MANY_TILE_SHAPES, ids=str)
@pytest.mark.parametrize(
    "dtype,mode",
    [(torch.bfloat16, "highest"), (torch.float16, "highest"), (torch.float32, "medium")],
    ids=["bf16", "fp16", "tf32"],
)
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "nobias"])
@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "nhwc"])
def test_forward_accuracy_many_tiles(shape, dtype, mode, bias, channels_last):
    n, k, h, w, p = shape
    out, ref, _ = _forward((n, 3, k, h, w, p), dtype, mode, bias, channels_last)
    assert torch.isfinite(out).all(), "some output element was not written"
    assert rel_l2(out, ref) <= (1e-3 if dtype == torch.float32 else REL_L2[dtype])


# Images too wide for a patch of whole input rows beside the resident weights
# in any tile size (plan.cu): the gather kernels cut the output into column
# blocks, each tile a range of one block's pixels and its patch that block's
# input columns, zeros written where the input ends; the last block is
# narrower, with tiles cut to whole rows of it. On sm_90: wgmma 3xFP16, TF32
# and the two-CTA 16-bit kernel in blocks (5 x 255 outputs); an odd width
# (element copies, TF32 and 16-bit); channel groups over blocks (3xTF32 in
# groups of 48, 16-bit of 128). With the sm_80 kernels forced, mma.sync TF32
# and 16-bit in blocks.
WIDE_SHAPES = [
    (8, 96, 27, 1024, 2),
    (4, 64, 47, 1001, 3),
    (6, 192, 35, 900, 0),
]


@pytest.mark.parametrize("shape", WIDE_SHAPES, ids=str)
@pytest.mark.parametrize("dtype,mode,bound", FORWARD_MODES)
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "nobias"])
@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "nhwc"])
def test_forward_accuracy_wide_images(shape, dtype, mode, bound, bias, channels_last):
    n, k, h, w, p = shape
    names = _check_forward((n, 3, k, h, w, p), dtype, mode, bound, bias, channels_last)
    if wgmma_kernels_run():
        assert names["forward"] != "fwd_cudnn", names


def _check_forward(shape, dtype, mode, bound, bias, channels_last):
    """The forward (_forward): every element written, in F.conv2d's layout, within bound of
    float64 (under "high", TF32's bound where cuDNN runs: "high" lets it use TF32). Returns
    kernel_for's names."""
    out, ref, names = _forward(shape, dtype, mode, bias, channels_last)
    if mode == "high" and names["forward"] == "fwd_cudnn":
        bound = 1e-3
    assert torch.isfinite(out).all(), "some output element was not written"
    assert_layout_like(out, ref)
    assert rel_l2(out, ref) <= bound, names
    return names


# 4-16 input channels (in float32 also 1 and 2): on sm_90 the TF32, 16-bit and (up to 5
# channels) fp32-accurate forwards run one kernel that walks the channels in chunks
# (gmma_chunks.cuh: one channel a chunk in TF32 and 3xFP16, two in 16-bit), streaming each
# chunk's weights and patch while the last one multiplies. Shapes: chunks the channels fill and
# do not (odd counts in 16-bit), channel groups (K > 96 in float32, > 128 in 16-bit), ragged K,
# odd and no padding, a partial last tile, column blocks (1024 wide); channels_last inputs are
# copied to NCHW first. fp32-accurate chunks of 1 and 2 channels need more than one small image
# (one of 4 channels takes them); "high" takes the
# slices or cuDNN's TF32, 16-bit 1 and 2 channels the 3-channel kernels, and the forwards of
# CUDNN_INSTEAD cuDNN (forward/select.cu: TF32 filter groups from 13 channels, TF32
# channels_last copies from 9): checked all the same.
CHUNK_SHAPES = [
    (4, 1, 96, 224, 224, 2),
    (2, 2, 64, 127, 127, 5),
    (4, 4, 96, 224, 224, 2),
    (1, 4, 96, 224, 224, 2),
    (3, 5, 64, 100, 100, 0),
    (2, 8, 40, 127, 127, 5),
    (24, 16, 192, 63, 63, 1),
    (1, 13, 384, 95, 111, 3),
    (3, 7, 96, 27, 1024, 2),
    (3, 5, 96, 27, 1024, 2),
]
CUDNN_INSTEAD = {((1, 13, 384, 95, 111, 3), False), ((1, 13, 384, 95, 111, 3), True), ((24, 16, 192, 63, 63, 1), True)}


@pytest.mark.parametrize("shape", CHUNK_SHAPES, ids=str)
@pytest.mark.parametrize("dtype,mode,bound", FORWARD_MODES)
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "nobias"])
@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "nhwc"])
def test_forward_accuracy_more_channels(shape, dtype, mode, bound, bias, channels_last):
    names = _check_forward(shape, dtype, mode, bound, bias, channels_last)
    n, c, _, h, w, p = shape
    one_small_image = n * ((h + 2 * p - 11) // 4 + 1) * ((w + 2 * p - 11) // 4 + 1) <= 4096
    if dtype != torch.float32:
        chunked = c > 3
    elif mode == "medium":
        chunked = (shape, channels_last) not in CUDNN_INSTEAD
    else:  # fp32-accurate chunks up to 5 channels (their accumulation error grows with them),
        # for one small image from 4 (cuDNN's full-fp32 kernels are as quick at 1 and 2)
        chunked = mode == "highest" and c <= 5 and (c > 3 or not one_small_image)
    copied = channels_last and c > 1  # one channel in channels_last is NCHW as well
    if wgmma_kernels_run() and chunked:
        assert names["forward"].startswith(("nchw+" if copied else "") + "fwd_gmma_chunks_"), names


# The chunk kernel takes 16-bit NCHW rows of any width and address as they are: it copies
# 4-byte words, its patch moved by one element for tiles whose rows start on an odd one
# (gather.cuh's word_shift). Rows start on odd elements at odd widths, in every other image
# of an odd image size, and in an input at an odd address (at any width); the image 2047 wide
# takes column blocks, the 5 channels a last chunk of one.
WORD_SHAPES = [
    (3, 16, 64, 127, 127, 2),
    (3, 5, 96, 63, 101, 0),
    (2, 8, 40, 27, 1023, 3),
    (1, 5, 16, 27, 2047, 3),
    (2, 4, 64, 64, 128, 2),
]


@pytest.mark.parametrize("shape", WORD_SHAPES, ids=str)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("address", ["aligned", "odd"])
def test_forward_chunks_rows_at_any_element(shape, dtype, address):
    n, c, k, h, w, p = shape
    x, wt, b = make_inputs(n, c, k, h, w, dtype=dtype, device="cuda")
    if address == "odd":
        x = torch.empty(x.numel() + 1, dtype=dtype, device="cuda")[1:].view_as(x).copy_(x)
    ref = reference(x, wt, b, p)
    _poison_allocator(ref.numel(), dtype)
    out = alexop.conv11s4(x, wt, b, p)
    assert torch.isfinite(out).all(), "some output element was not written"
    assert rel_l2(out, ref) <= REL_L2[dtype]
    if wgmma_kernels_run():
        assert alexop.kernel_for(x, wt, p)["forward"].startswith("fwd_gmma_chunks_")


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize(
    "dtype,mode,bound",
    [
        (torch.float32, "highest", 1e-5),
        (torch.float32, "high", 1e-3),
        (torch.bfloat16, "highest", REL_L2[torch.bfloat16]),
        (torch.float16, "highest", REL_L2[torch.float16]),
    ],
    ids=["fp32", "tf32", "bf16", "fp16"],
)
@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "nhwc"])
def test_weight_and_bias_grad_accuracy(shape, dtype, mode, bound, channels_last):
    _check_weight_and_bias_grad(shape, dtype, mode, bound, channels_last, ref_device="cpu")


def _check_weight_and_bias_grad(shape, dtype, mode, bound, channels_last, ref_device, c=3):
    """Both gradients finite (every element written: the allocator is
    poisoned) and within `bound` of float64 autograd on `ref_device`; returns
    kernel_for's names. channels_last: the input and grad_output (as autograd
    hands it for a channels_last output)."""
    n, k, h, w, p = shape
    x, wt, b = make_inputs(n, c, k, h, w, dtype=dtype, device="cuda")
    grad = torch.randn(n, k, (h + 2 * p - 11) // 4 + 1, (w + 2 * p - 11) // 4 + 1, device="cuda").to(dtype)
    if channels_last:
        x = x.to(memory_format=torch.channels_last)
        grad = grad.to(memory_format=torch.channels_last)
    ref_w, ref_b = (t.double().to(ref_device).requires_grad_() for t in (wt, b))
    out = torch.nn.functional.conv2d(x.double().to(ref_device), ref_w, ref_b, stride=4, padding=p)
    want = torch.autograd.grad(out, (ref_w, ref_b), grad.double().to(ref_device))
    _poison_allocator(wt.numel(), dtype)
    with precision(mode):
        got = torch.ops.alexop.conv11s4_backward_weight(grad, x, p, True)
        names = alexop.kernel_for(x, wt, p)
    for g, r, name in zip(got, want, ("weight", "bias")):
        assert torch.isfinite(g).all(), name
        assert rel_l2(g, r) <= bound, name
    return names


# The 16-bit weight gradient on phase planes (even padding and width, outputs
# 48-55 wide; tiles of 4 output rows, batches of 4 tiles an SM or more, 14
# tiles an image at 224 x 224): heights whose last tile has 3 or 1 rows,
# outputs 53 and 54 wide, no padding, 64 filters (its two warpgroups split
# each tile's rows).
@pytest.mark.parametrize(
    "shape", [(40, 96, 224, 224, 2), (40, 96, 226, 218, 2), (44, 64, 200, 214, 2), (40, 96, 227, 226, 0)], ids=str
)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_weight_grad_planes_accuracy(shape, dtype):
    # batches of 40+ images: the float64 reference on the GPU
    _check_weight_and_bias_grad(shape, dtype, "highest", REL_L2[dtype], False, ref_device="cuda")


# The 16-bit phase-plane forward of 1 and 2 channels (outputs 48-55 wide): the planes of the
# missing channels stay zero, no zero-padded copy; a channels_last input of 2 channels is
# copied to NCHW first (one of 1 channel is NCHW already); every output written, in the
# input's layout, within the dtype's bound of float64.
@pytest.mark.parametrize("c", [1, 2])
@pytest.mark.parametrize("shape", [(16, 96, 224, 224, 2), (16, 64, 227, 226, 0)], ids=str)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "nobias"])
@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "nhwc"])
def test_forward_planes_fewer_channels(c, shape, dtype, bias, channels_last):
    n, k, h, w, p = shape
    names = _check_forward((n, c, k, h, w, p), dtype, "highest", REL_L2[dtype], bias, channels_last)
    if wgmma_kernels_run():
        kind = "bf16" if dtype == torch.bfloat16 else "fp16"
        copied = "nchw+" if channels_last and c > 1 else ""
        assert guesses(names)["forward"] == f"{copied}fwd_planes_{kind}_{c}ch_c{k}", names


# The 16-bit phase-plane forward built for 4 channels (RGBA, RGB-D; outputs 48-55 wide): NCHW
# and channels_last inputs as they are (channels_last: a pixel pair a 16-byte copy), odd widths
# (even padding) on an NCHW copy one zero column wider; 96 filters hold one set of planes (the
# weights take 111 KB), 64 or fewer two, more than 96 run in filter groups (200: three of 72).
# Every output written, in the input's layout, within the dtype's bound of float64.
@pytest.mark.parametrize("shape", [(16, 4, 96, 224, 224, 2), (16, 4, 64, 227, 226, 0), (16, 4, 40, 225, 223, 2),
                                   (16, 4, 200, 224, 224, 2)], ids=str)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "nobias"])
@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "nhwc"])
def test_forward_planes_four_channels(shape, dtype, bias, channels_last):
    names = _check_forward(shape, dtype, "highest", REL_L2[dtype], bias, channels_last)
    if wgmma_kernels_run():
        kind = "bf16" if dtype == torch.bfloat16 else "fp16"
        k, w = shape[2], shape[4]
        copied = "widen+" if w % 2 else ""
        groups = "_split_g96" if k > 96 else f"_c{64 if k <= 64 else 96}"
        assert guesses(names)["forward"] == f"{copied}fwd_planes_{kind}_4ch{groups}", names


# A channels_last input of 4 channels off a 16-byte boundary (8 bytes on) cannot be copied to the
# planes 16 bytes at a time: it runs on an NCHW copy.
def test_forward_planes_four_channels_unaligned_channels_last():
    n, c, k, h, w, p = 16, 4, 64, 224, 224, 2
    x, wt, b = make_inputs(n, c, k, h, w, dtype=torch.bfloat16, device="cuda")
    buf = torch.empty(x.numel() + 4, dtype=x.dtype, device="cuda")
    x = buf[4:].view(n, h, w, c).permute(0, 3, 1, 2).copy_(x)
    assert x.is_contiguous(memory_format=torch.channels_last) and x.data_ptr() % 16 == 8
    ref = reference(x, wt, b, p)
    out = alexop.conv11s4(x, wt, b, p)
    assert torch.isfinite(out).all() and rel_l2(out, ref) <= REL_L2[torch.bfloat16]
    assert_layout_like(out, ref)
    if wgmma_kernels_run():
        assert guesses(alexop.kernel_for(x, wt, p))["forward"] == "nchw+fwd_planes_bf16_4ch_c64"


# More than 96 filters on the phase planes (outputs 48-55 wide): one launch a filter group of
# equal width up to 96 (100 and 128 filters: two of 64; 200: three of 72; 384: four of 96),
# each writing its channels of the output in either layout; 1 and 2 channels too (2 from
# channels_last on an NCHW copy).
# Every output written, within the mode's bound of float64.
@pytest.mark.parametrize("k", [100, 128, 200, 384])
@pytest.mark.parametrize("c,dtype,mode,bound,channels_last", [
    pytest.param(3, torch.bfloat16, "highest", REL_L2[torch.bfloat16], False, id="bf16-nchw"),
    pytest.param(3, torch.bfloat16, "highest", REL_L2[torch.bfloat16], True, id="bf16-nhwc"),
    pytest.param(3, torch.float16, "highest", REL_L2[torch.float16], True, id="fp16-nhwc"),
    pytest.param(3, torch.float32, "medium", 1e-3, False, id="tf32-nchw"),
    pytest.param(3, torch.float32, "medium", 1e-3, True, id="tf32-nhwc"),
    pytest.param(1, torch.bfloat16, "highest", REL_L2[torch.bfloat16], False, id="bf16-1ch"),
    pytest.param(2, torch.float16, "highest", REL_L2[torch.float16], False, id="fp16-2ch"),
    pytest.param(2, torch.bfloat16, "highest", REL_L2[torch.bfloat16], True, id="bf16-2ch-nhwc"),
])
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "nobias"])
def test_forward_planes_filter_groups(k, c, dtype, mode, bound, channels_last, bias):
    names = _check_forward((16, c, k, 224, 224, 2), dtype, mode, bound, bias, channels_last)
    if wgmma_kernels_run():
        kind = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "tf32"}[dtype]
        few = "" if c == 3 else f"_{c}ch"
        copied = "nchw+" if channels_last and c == 2 else ""
        assert guesses(names)["forward"] == f"{copied}fwd_planes_{kind}{few}_split_g{64 if k <= 128 else 96}", names


# A channels_last 16-bit output is staged pixel by pixel and written in pieces of a pixel's
# channels, 16 bytes where the filter count is a multiple of 8, else 4 (90 filters) or 2 bytes
# (odd counts): the planes (one CTA of 96 or 64 slots), space-to-depth and the staged gather
# kernel. (8-byte pieces: 100 filters, in test_forward_planes_filter_groups.)
@pytest.mark.parametrize("shape,kernel", [
    ((16, 3, 90, 224, 224, 2), "fwd_planes_{}_c96"),
    ((16, 3, 33, 224, 224, 2), "fwd_planes_{}_c64"),
    ((96, 3, 90, 98, 130, 2), "fwd_s2d_{}_nhwc_c96"),
    ((64, 3, 45, 227, 227, 5), "fwd_gmma_staged_{}_c64"),
], ids=str)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_forward_channels_last_filters_off_eight(shape, kernel, dtype):
    names = _check_forward(shape, dtype, "highest", REL_L2[dtype], True, True)
    if wgmma_kernels_run():
        assert guesses(names)["forward"] == kernel.format("bf16" if dtype == torch.bfloat16 else "fp16"), names


# A 16-bit input of odd width and even padding whose outputs are 48-55 wide (227 x 227 without
# padding: Caffe's AlexNet) runs the phase planes on an NCHW copy one zero column wider, from
# either layout and with filter groups too: the column lies in the padding or past every window.
@pytest.mark.parametrize("shape", [(16, 3, 96, 227, 227, 0), (16, 3, 64, 225, 223, 2), (16, 3, 192, 227, 227, 0)],
                         ids=str)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "nhwc"])
def test_forward_planes_odd_width(shape, dtype, channels_last):
    names = _check_forward(shape, dtype, "highest", REL_L2[dtype], True, channels_last)
    if wgmma_kernels_run():
        kind = "bf16" if dtype == torch.bfloat16 else "fp16"
        k = shape[2]
        groups = f"_split_g{64 if k <= 128 else 96}" if k > 96 else f"_c{k}"
        assert guesses(names)["forward"] == f"widen+fwd_planes_{kind}{groups}", names


def _forward_one_element_off(x, wt, b, p):
    """The untimed forward of a copy of x one element past a 16-byte boundary (x's strides) and of
    x itself: (the copy's output, x's, the guessed forward kernel of each), the copy's output
    checked first: every element written, within the dtype's bound of float64."""
    off = torch.empty(x.numel() + 1, dtype=x.dtype, device="cuda")[1:].as_strided(x.shape, x.stride())
    off.copy_(x)
    ref = reference(x, wt, b, p)
    _poison_allocator(ref.numel(), x.dtype)
    with untimed():
        got, aligned = alexop.conv11s4(off, wt, b, p), alexop.conv11s4(x, wt, b, p)
        names = [guesses(alexop.kernel_for(t, wt, p))["forward"] for t in (off, x)]
    assert torch.isfinite(got).all(), "some output element was not written"
    assert rel_l2(got, ref) <= REL_L2[x.dtype], names
    return got, aligned, names


# 16-bit NCHW inputs whose rows are not whole 16-byte units (odd widths, an input one element
# off a boundary) run the gather kernels on a copy of rows widened with zeros to whole units
# where the staged kernel fills the GPU and there are more than 64 filters ("widen+"; 227 x 227
# with padding 2: space-to-depth, padding 5: the staged kernel), or where too few tiles for the
# staged kernel run the two-CTA kernel on rows wider than 64 (127 x 127, one 227 x 227 image):
# within the dtype's bound of float64, every output written, the misaligned input's the same
# bits as the aligned one's (untimed).
@pytest.mark.parametrize("shape", [(24, 3, 96, 227, 227, 2), (24, 3, 96, 227, 227, 5), (24, 3, 80, 299, 231, 3),
                                   (24, 3, 96, 224, 224, 5), (8, 3, 96, 127, 127, 2), (1, 3, 64, 227, 227, 2)],
                         ids=str)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_forward_gather_widened_rows(shape, dtype):
    n, c, k, h, w, p = shape
    x, wt, b = make_inputs(n, c, k, h, w, dtype=dtype, device="cuda")
    got, aligned, names = _forward_one_element_off(x, wt, b, p)
    torch.testing.assert_close(got, aligned, rtol=0, atol=0)
    if wgmma_kernels_run():
        assert names[0].startswith("widen+fwd_") and names[1].startswith("widen+") == (w % 8 != 0), names


# 16-bit rows the gather kernels keep unwidened that are not whole 16-byte units have no
# cp.async: they are copied through registers, rows of up to 64 elements three a warp (all their
# loads before their stores), longer ones element by element. Around that bound (63, 64 and 66
# elements a row; 127 on the staged and mma.sync kernels), NCHW and channels_last, from an aligned
# input and one an element off a boundary: within the dtype's bound of float64, every output
# written, and the misaligned input the same kernel and the same bits as the aligned one (at 64
# elements the aligned rows are 16-byte copies; untimed).
REGISTER_ROW_SHAPES = [
    (64, 3, 96, 63, 63, 2, False),
    (64, 3, 96, 64, 64, 0, False),
    (64, 3, 128, 63, 63, 2, False),
    (16, 3, 96, 21, 21, 2, True),
    (16, 3, 96, 22, 22, 2, True),
    (256, 3, 64, 127, 127, 2, False),
    (64, 3, 128, 127, 127, 2, False),
]


@pytest.mark.parametrize("shape", REGISTER_ROW_SHAPES, ids=str)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_forward_gather_register_rows(shape, dtype):
    n, c, k, h, w, p, channels_last = shape
    x, wt, b = make_inputs(n, c, k, h, w, dtype=dtype, device="cuda")
    if channels_last:
        x = x.to(memory_format=torch.channels_last)
    got, aligned, names = _forward_one_element_off(x, wt, b, p)
    if wgmma_kernels_run():
        assert names[0] == names[1] and not names[0].startswith("widen+"), names
        torch.testing.assert_close(got, aligned, rtol=0, atol=0)


# The phase-plane weight gradient reads grad_output from the 16-byte boundary at or before it
# (so at any alignment) and its slices of 96 filters in place (160 filters: 96 + 64): the same
# bits from a grad_output 6 bytes off a boundary as from an aligned one.
@pytest.mark.parametrize("k", [96, 160])
def test_weight_grad_planes_any_grad_output_alignment(k):
    x, wt, _ = make_inputs(40, 3, k, 224, 224, dtype=torch.bfloat16, device="cuda")
    gy = torch.randn(40, k, 55, 55, device="cuda").to(torch.bfloat16)
    off = torch.empty(gy.numel() + 3, device="cuda", dtype=torch.bfloat16)[3:].view(gy.shape)
    off.copy_(gy)
    want = torch.ops.alexop.conv11s4_backward_weight(gy, x, 2, True)
    got = torch.ops.alexop.conv11s4_backward_weight(off, x, 2, True)
    if wgmma_kernels_run():
        assert "wgrad_planes_bf16" in alexop.kernel_for(x, wt, 2)["weight_grad"]
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


# The phase-plane kernel built for 1 and 2 channels: grayscale and two-channel inputs as they
# are (no zero channels), and the last slice of 4 and 5 channels (a slice of 3, then the last
# 1 or 2); 128 filters in slices of 96 (the last zero-padded to 64).
@pytest.mark.parametrize("c", [1, 2, 4, 5])
@pytest.mark.parametrize("shape", [(40, 96, 224, 224, 2), (44, 64, 226, 218, 2), (40, 128, 227, 226, 0)], ids=str)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "nhwc"])
def test_weight_grad_planes_fewer_channels(c, shape, dtype, channels_last):
    names = _check_weight_and_bias_grad(shape, dtype, "highest", REL_L2[dtype], channels_last, "cuda", c)
    if wgmma_kernels_run():
        kind = "bf16" if dtype == torch.bfloat16 else "fp16"
        want = f"wgrad_planes_{kind}_{c}ch_c" if c < 3 else f"slice3x2+{'kslice96x2+' if shape[1] > 96 else ''}wgrad_planes"
        assert want in names["weight_grad"], names


# The phase-plane weight gradient reads a channels_last grad_output in place where its pixels'
# channels are 16-byte rows ("_dynhwc"; 100 filters are not: copied to NCHW), views of its
# filter slices too (160 = 96 + 64): the same bits as from an NCHW grad_output, an Inf in it too
# (the reductions recompute NaN sums at dy's strides; untimed). kernel_for takes grad_output in the
# output's layout: from a channels_last input of more than one channel, channels_last.
@pytest.mark.parametrize("c,k", [(3, 96), (3, 64), (1, 160), (2, 100), (3, 192), (4, 96)], ids=str)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("x_channels_last", [False, True], ids=["x_nchw", "x_nhwc"])
@pytest.mark.parametrize("inf", [False, True], ids=["finite", "inf"])
def test_weight_grad_planes_channels_last_grad_output(c, k, dtype, x_channels_last, inf):
    x, wt, _ = make_inputs(40, c, k, 224, 224, dtype=dtype, device="cuda")
    if x_channels_last:
        x = x.to(memory_format=torch.channels_last)
    gy = torch.randn(40, k, 55, 55, device="cuda").to(dtype)
    if inf:
        gy[3, k - 1, 10, 20] = float("inf")
    with untimed():  # both on the guess, not cuDNN where a first call's timing picked it
        want = torch.ops.alexop.conv11s4_backward_weight(gy, x, 2, True)
        got = torch.ops.alexop.conv11s4_backward_weight(gy.to(memory_format=torch.channels_last), x, 2, True)
    for g, r in zip(got, want):
        torch.testing.assert_close(g, r, rtol=0, atol=0, equal_nan=True)
    if wgmma_kernels_run() and x_channels_last and c > 1:
        name = guesses(alexop.kernel_for(x, wt, 2))["weight_grad"]
        assert "wgrad_planes" in name and name.endswith("_dynhwc") == (k % 8 == 0), name


def off_boundary(t):
    """A copy of t one element past a 16-byte boundary: the operator takes copies where it would read views."""
    off = torch.empty(t.numel() + 1, device=t.device, dtype=t.dtype)[1:].view(t.shape)
    return off.copy_(t)


def check_views_against_copies(gy, x, wt, b, mode, inf, off_gy, off_x):
    """The weight gradient from (gy, x), read as views, against the one from (off_gy, off_x), read as
    zero-padded copies: the same bits, and (finite operands) float64's bound. Returns its kernel name."""
    with precision("medium" if mode == "tf32" else "highest"), untimed():
        got = torch.ops.alexop.conv11s4_backward_weight(gy, x, 2, True)
        copied = torch.ops.alexop.conv11s4_backward_weight(off_gy, off_x, 2, True)
        name = guesses(alexop.kernel_for(x, wt, 2))["weight_grad"]
    for g, r in zip(got, copied):
        torch.testing.assert_close(g, r, rtol=0, atol=0, equal_nan=True)
    if not inf:
        _, want_gw, want_gb = grads_reference(x, wt, b, gy, 2)
        bound = {"tf32": 1e-3, "fp32": 1e-5, "bf16": 1e-2}[mode]
        assert rel_l2(got[0], want_gw) <= bound and rel_l2(got[1], want_gb) <= bound, name
    return name


# The wgmma weight gradient of more than 96 filters reads grad_output's filter slices in place,
# the kernel's rows past a slice's channels zero (128: 96 + 32 of 64 rows; 200: 96 + 96 + 8;
# 160: 96 + 64): within float64's bound, and the same bits as from a grad_output one element off a
# 16-byte boundary, whose slices it gets as zero-padded copies; an Inf in it too (the reductions
# recompute NaN sums from the view, the rows past it as zeros; untimed).
@pytest.mark.parametrize("c,k,mode", [(3, 128, "tf32"), (3, 200, "fp32"), (1, 384, "tf32"), (4, 128, "fp32"),
                                      (2, 160, "tf32")], ids=str)
@pytest.mark.parametrize("inf", [False, True], ids=["finite", "inf"])
def test_weight_grad_filter_slices_in_place(c, k, mode, inf):
    x, wt, b = make_inputs(8, c, k, 224, 224, dtype=torch.float32, device="cuda")
    gy = torch.randn(8, k, 55, 55, device="cuda")
    if inf:
        gy[3, k - 1, 10, 20] = float("inf")
    name = check_views_against_copies(gy, x, wt, b, mode, inf, off_boundary(gy), x)
    if wgmma_kernels_run():
        assert "kslice96x" in name and "wgrad_gmma" in name, name


# The wgmma weight gradient (16-byte input copies) reads the last input slice of 1 or 2 channels
# (1, 2: the whole input, "pad3+"; 4, 5: after one or two slices of 3) in place, staging the rows
# of the channels past it as zeros: the same bits as from an input one element off a 16-byte
# boundary, whose slices it gets as zero-padded copies, within float64's bound; an Inf in the
# input too (the reductions recompute NaN sums from the view, its missing channels as zeros).
@pytest.mark.parametrize("c,k,hw,mode", [(1, 96, 224, "tf32"), (2, 64, 224, "fp32"), (4, 96, 224, "tf32"),
                                         (5, 64, 224, "fp32"), (1, 64, 256, "bf16"), (4, 96, 256, "bf16")],
                         ids=str)
@pytest.mark.parametrize("inf", [False, True], ids=["finite", "inf"])
def test_weight_grad_channel_slices_in_place(c, k, hw, mode, inf):
    dtype = torch.bfloat16 if mode == "bf16" else torch.float32
    x, wt, b = make_inputs(8, c, k, hw, hw, dtype=dtype, device="cuda")
    if inf:
        x[2, c - 1, 40, 41] = float("inf")
    q = (hw + 4 - 11) // 4 + 1
    gy = torch.randn(8, k, q, q, device="cuda").to(dtype)
    name = check_views_against_copies(gy, x, wt, b, mode, inf, gy, off_boundary(x))
    if wgmma_kernels_run():
        assert ("pad3+" in name or "slice3x" in name) and "wgrad_gmma" in name and name.endswith("_vec"), name


# The wgmma weight gradient reads a channels_last grad_output in place where its pixels' channels are
# 16-byte rows ("_dynhwc"), views of its filter slices too (160 = 96 + 64; 200 = 96 + 96 + 8): the
# same bits as from an NCHW grad_output, from an NCHW or channels_last input (strided rows; a last
# slice of 1 channel; slices of 4 channels), an Inf in it too (the reductions recompute NaN sums at
# dy's strides; untimed). kernel_for takes grad_output in the output's layout: from a channels_last
# input of more than one channel, channels_last.
@pytest.mark.parametrize("c,k,hw,mode", [(3, 96, 224, "fp32"), (3, 64, 224, "tf32"), (1, 160, 224, "tf32"),
                                         (4, 200, 224, "fp32"), (3, 96, 128, "bf16"), (2, 64, 128, "bf16")],
                         ids=str)
@pytest.mark.parametrize("x_channels_last", [False, True], ids=["x_nchw", "x_nhwc"])
@pytest.mark.parametrize("inf", [False, True], ids=["finite", "inf"])
def test_weight_grad_gmma_channels_last_grad_output(c, k, hw, mode, x_channels_last, inf):
    dtype = torch.bfloat16 if mode == "bf16" else torch.float32
    x, wt, _ = make_inputs(8, c, k, hw, hw, dtype=dtype, device="cuda")
    if x_channels_last:
        x = x.to(memory_format=torch.channels_last)
    q = (hw + 4 - 11) // 4 + 1
    gy = torch.randn(8, k, q, q, device="cuda").to(dtype)
    if inf:
        gy[3, k - 1, 10, 20] = float("inf")
    with precision("medium" if mode == "tf32" else "highest"), untimed():
        want = torch.ops.alexop.conv11s4_backward_weight(gy, x, 2, True)
        got = torch.ops.alexop.conv11s4_backward_weight(gy.to(memory_format=torch.channels_last), x, 2, True)
        name = guesses(alexop.kernel_for(x, wt, 2))["weight_grad"]
    for g, r in zip(got, want):
        torch.testing.assert_close(g, r, rtol=0, atol=0, equal_nan=True)
    if wgmma_kernels_run() and x_channels_last and c > 1:
        assert "wgrad_gmma" in name and "_dynhwc" in name, name


# Beside cuDNN's weight gradient, the bias gradient is alexop's sum of grad_output as given:
# NCHW and channels_last along their rows, in float, in a fixed order (other strides: ATen's
# sum). 16 filters (fewer than a warp), 64, 96 (not a power of two) and 384 (more than a block
# of threads), outputs of odd sizes: within the dtype's bound of the float64 sum, the same bits
# on a second run.
@pytest.mark.parametrize("k", [16, 64, 96, 384])
@pytest.mark.parametrize("layout", ["nchw", "nhwc", "expanded"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=["fp32", "bf16", "fp16"])
def test_cudnn_weight_grad_bias(k, layout, dtype):
    x, wt, _ = make_inputs(8, 16, k, 63, 67, dtype=dtype, device="cuda")
    grad = torch.randn(8, k, 15, 16, device="cuda").to(dtype)
    if layout == "nhwc":
        x, grad = x.to(memory_format=torch.channels_last), grad.to(memory_format=torch.channels_last)
    elif layout == "expanded":
        grad = grad[:1].expand_as(grad)
    got = torch.ops.alexop.conv11s4_backward_weight(grad, x, 2, True)[1]
    again = torch.ops.alexop.conv11s4_backward_weight(grad, x, 2, True)[1]
    assert got.dtype == dtype and got.shape == (k,)
    assert rel_l2(got, grad.double().sum((0, 2, 3))) <= REL_L2[dtype]
    assert torch.equal(got, again)
    if wgmma_kernels_run():
        assert guesses(alexop.kernel_for(x, wt, 2))["weight_grad"] == "wgrad_cudnn"


# 16-bit channels_last inputs are transposed to NCHW for the weight gradient
# (3 channels, H x W a multiple of 8: the operator's own 16-byte transpose;
# otherwise contiguous(); an odd width, a copy one column wider): the gradients
# are those of the NCHW input, bit for bit.
@pytest.mark.parametrize("hw", [(64, 64), (97, 130), (97, 131)], ids=["transpose", "contiguous", "odd-width"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_weight_grad_channels_last_matches_nchw(hw, dtype):
    h, w = hw
    x, _, _ = make_inputs(6, 3, 96, h, w, dtype=dtype, device="cuda")
    grad = torch.randn(6, 96, (h + 4 - 11) // 4 + 1, (w + 4 - 11) // 4 + 1, device="cuda").to(dtype)
    want = torch.ops.alexop.conv11s4_backward_weight(grad, x, 2, True)
    got = torch.ops.alexop.conv11s4_backward_weight(grad, x.to(memory_format=torch.channels_last), 2, True)
    assert all(torch.equal(g, r) for g, r in zip(got, want))


# 16-bit inputs of odd width reach the weight gradient as copies one zero column wider (the
# column where the padding's zeros were; never an extra output column), so the kernels that
# read column pairs take them ("widen+"): within the dtype's bound of float64, every padding,
# 3 channels and 1 or 2 (zero-padded slices).
@pytest.mark.parametrize("c", [3, 1, 2])
@pytest.mark.parametrize("shape", [(16, 96, 127, 127, 0), (16, 96, 127, 127, 5), (8, 64, 63, 63, 2),
                                   (40, 96, 227, 227, 0)], ids=str)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "nhwc"])
def test_weight_grad_odd_width(c, shape, dtype, channels_last):
    names = _check_weight_and_bias_grad(shape, dtype, "highest", REL_L2[dtype], channels_last, "cuda", c)
    if names["weight_grad"] != "wgrad_cudnn":
        assert "widen+" in names["weight_grad"], names


# fp32 "highest" images of at most a third of a unit's output pixels (3 channels, 64 or 96
# filters, wgmma) reach the weight gradient packed: ceil(N / r) copies of r >= 3 images side by
# side, grad_output zero between the bands ("pack<r>+"): within float64's bound for batches not a
# multiple of r, every padding, odd widths, both layouts (untimed: the packed kernel runs). TF32
# and 16-bit images of those sizes, and fewer than 3 images, are not packed.
@pytest.mark.parametrize("shape,packs", [((5, 96, 63, 63, 2), True), ((8, 64, 63, 63, 0), True),
                                         ((6, 96, 47, 47, 1), True), ((7, 64, 63, 67, 5), True),
                                         ((2, 96, 63, 63, 2), False), ((6, 96, 95, 95, 2), False)], ids=str)
@pytest.mark.parametrize("dtype,mode,bound", [(torch.float32, "highest", 1e-5), (torch.float32, "medium", 1e-3),
                                              (torch.bfloat16, "highest", REL_L2[torch.bfloat16])],
                         ids=["fp32", "tf32", "bf16"])
@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "nhwc"])
def test_weight_grad_packed_images(shape, packs, dtype, mode, bound, channels_last):
    with untimed():
        names = _check_weight_and_bias_grad(shape, dtype, mode, bound, channels_last, "cuda")
    if wgmma_kernels_run():
        packed = packs and dtype == torch.float32 and mode == "highest"
        assert names["weight_grad"].startswith("pack") == packed, names


# The tensor-core input gradient serves every batch size of 3-channel images
# (one image leaves most SMs idle); other channel counts and more filters than
# its weights buffer holds take the cuBLAS + fold path, which the other
# backward tests cover.
DGRAD_SHAPES = [
    (1, 64, 224, 224, 2),
    (2, 96, 67, 59, 2),
    (8, 96, 224, 224, 2),
    (12, 64, 227, 227, 0),
    (24, 96, 97, 131, 1),
]


@pytest.mark.parametrize("shape", DGRAD_SHAPES, ids=str)
@pytest.mark.parametrize(
    "dtype,mode,bound",
    [
        (torch.float32, "highest", 1e-5),
        (torch.float32, "medium", 1e-3),
        (torch.bfloat16, "highest", REL_L2[torch.bfloat16]),
        (torch.float16, "highest", REL_L2[torch.float16]),
    ],
    ids=["fp32", "tf32", "bf16", "fp16"],
)
def test_input_grad_accuracy(shape, dtype, mode, bound):
    n, k, h, w, p = shape
    _, wt, _ = make_inputs(1, 3, k, h, w, dtype=dtype, device="cuda")
    grad = torch.randn(n, k, (h + 2 * p - 11) // 4 + 1, (w + 2 * p - 11) // 4 + 1, device="cuda").to(dtype)
    want = torch.nn.grad.conv2d_input((n, 3, h, w), wt.double().cpu(), grad.double().cpu(), stride=4, padding=p)
    _poison_allocator(n * 3 * h * w, dtype)
    with precision(mode):
        got = torch.ops.alexop.conv11s4_backward_input(grad, wt, [n, 3, h, w], p)
    assert torch.isfinite(got).all(), "some input-gradient element was not written"
    assert rel_l2(got, want) <= bound
    if dtype == torch.float32 and mode == "highest":
        torch.testing.assert_close(got.double().cpu(), want, atol=1e-4, rtol=1e-4)


# alexop's kernels write NCHW: a channels_last result is the operator's copy of one (32 or more
# channels: 32 x 32 tiles through shared memory, partial tiles included; 2, 4, 8 and 16: a
# thread a pixel, whole-pixel vector stores; other counts: ATen's copy).
# Input gradients of 2-33 channels, small and odd images, every dtype: channels_last strides,
# every element written, the NCHW gradient's values bit for bit (where cuDNN is the guess,
# within the dtype's bound of the NCHW result).
@pytest.mark.parametrize("c", [2, 3, 4, 5, 8, 16, 31, 32, 33])
@pytest.mark.parametrize("hw", [(15, 11), (63, 63), (47, 130)], ids=str)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=["fp32", "bf16", "fp16"])
def test_input_grad_channels_last_copy(c, hw, dtype):
    (h, w), n = hw, 3
    x, wt, _ = make_inputs(n, c, 16, h, w, dtype=dtype, device="cuda")
    grad = torch.randn(n, 16, (h + 4 - 11) // 4 + 1, (w + 4 - 11) // 4 + 1, device="cuda").to(dtype)
    want = torch.ops.alexop.conv11s4_backward_input(grad, wt, [n, c, h, w], 2)
    _poison_allocator(n * c * h * w, dtype)
    got = torch.ops.alexop.conv11s4_backward_input(grad.to(memory_format=torch.channels_last), wt, [n, c, h, w], 2)
    assert got.is_contiguous(memory_format=torch.channels_last)
    assert torch.isfinite(got).all(), "some input-gradient element was not written"
    guess = guesses(alexop.kernel_for(x.to(memory_format=torch.channels_last), wt, 2))["input_grad"]
    if "cudnn" in guess:
        assert rel_l2(got, want) <= REL_L2[dtype], guess
    else:
        assert torch.equal(got, want), guess


def test_float32_matmul_precision_selects_the_mode():
    x, wt, b = make_inputs(8, 3, 96, 224, 224, device="cuda")
    ref = reference(x, wt, b)
    errors = {}
    for mode in ("highest", "high", "medium"):
        with precision(mode):
            errors[mode] = rel_l2(alexop.conv11s4(x, wt, b), ref)
    # highest: fp32 accuracy (3xTF32, or 3xFP16 on Hopper with enough tiles);
    # high: bf16x3, or 3xFP16 where that runs; medium: TF32.
    assert errors["highest"] <= 1e-5
    assert errors["high"] <= 1e-5
    assert 1e-5 < errors["medium"] <= 1e-3


def _decades(lo, hi, m, shape):
    """10^lo .. 10^hi in m steps, shaped to scale one dimension of a tensor."""
    return 10 ** torch.linspace(lo, hi, m, device="cuda").view(shape)


def _six_decades(t, g):
    """t with each element scaled by its own random power of ten in [1e-3, 1e3]."""
    return t * 10 ** (6 * torch.rand(t.shape, device="cuda", generator=g) - 3)


def _assert_fp32_accurate(out, ref, name=None, bound=1e-5, atol_floor=0.0):
    """rel L2 <= bound and allclose(1e-4) against float64, atol relative to the largest |ref|
    (at least atol_floor)."""
    assert rel_l2(out, ref) <= bound, name
    scale = ref.abs().max().item()
    torch.testing.assert_close(out.double().cpu(), ref, atol=max(1e-4 * scale, atol_floor), rtol=1e-4, msg=name)


def _sliced_sum_floor(forward):
    """The absolute error a sliced float32 forward may add below float32's normal range: each
    later slice's reduction into the output may flush a subnormal operand and its sum to zero
    (docs/precision.md), up to 2 * 2^-126 a slice."""
    if not forward.startswith("slice"):
        return 0.0
    slices = int(forward.split("+")[0].removeprefix("slice3x"))
    return 2 * slices * torch.finfo(torch.float32).tiny


# The fp32-accurate forward on Hopper scales each tile's inputs and the
# weights by powers of two before splitting them into fp16 parts: values far
# from 1 either way, six decades within a tile, a bright spot in a dark image,
# outputs that cancel and (1 or 5 channels: the chunk kernel, whose tile scale
# follows its channels as they arrive) channels twelve decades apart all keep
# fp32-level accuracy. Batch 4 at 224x224 fills a 132-SM GPU enough to take
# those paths.
@pytest.mark.parametrize("c", [3, 1, 5])
@pytest.mark.parametrize(
    "values", ["huge", "tiny", "six_decades", "dark_with_spot", "cancelling", "channels_apart"]
)
def test_forward_fp32_accuracy_across_value_scales(c, values):
    x, wt, b = make_inputs(4, c, 96, 224, 224, device="cuda")
    g = torch.Generator(device="cuda").manual_seed(1)
    if values == "huge":
        x, wt, b = x * 255, wt * 1e4, b * 1e4
    elif values == "tiny":
        x, wt, b = x * 1e-20, wt * 1e-15, b * 1e-35
    elif values == "six_decades":
        x = _six_decades(x, g)
    elif values == "dark_with_spot":
        x = x * 1e-6
        x[:, :, 100:110, 100:110] = 1e3
    elif values == "channels_apart":  # 1, 1e6, 1e-6, 1e6, 1e-6: larger and smaller after the first
        x = x * torch.tensor([1.0] + [1e6 if i % 2 else 1e-6 for i in range(1, c)], device="cuda").view(1, c, 1, 1)
    else:
        x = 1 + 1e-3 * x
        wt = wt - wt.mean(dim=(1, 2, 3), keepdim=True)
    ref = reference(x, wt, b)
    # 3xTF32 (mma.sync, the A100's kernels) accumulates the three products'
    # cancelling terms in the tensor cores' float32, so its bound for
    # cancelling outputs is looser (docs/precision.md); 3xFP16 keeps 1e-5.
    forward = alexop.kernel_for(x, wt, 2)["forward"]
    if wgmma_kernels_run() and c != 3:
        assert forward.startswith("fwd_gmma_chunks_3xfp16"), forward
    x3tf32 = "3xtf32" in forward
    _assert_fp32_accurate(alexop.conv11s4(x, wt, b), ref, bound=2e-5 if x3tf32 and values == "cancelling" else 1e-5,
                          atol_floor=_sliced_sum_floor(forward))


# The fp32-accurate weight gradient on Hopper (3xFP16) scales the images and
# grad_output by powers of two per run of output rows, taken from the run's
# first row and taken again wherever a later row leaves their range: values
# far from 1 either way, six decades within each tensor, images (and their
# gradients) spanning eight decades, rows growing over six decades down the
# image, a bright spot in a dark image, and nearly constant images all keep
# fp32-level accuracy in both gradients.
@pytest.mark.parametrize(
    "values",
    ["huge", "tiny", "six_decades", "images_over_8_decades", "rows_over_6_decades", "dark_with_spot",
     "nearly_constant"],
)
def test_weight_grad_fp32_accuracy_across_value_scales(values):
    n, k, h, w, p = 8, 96, 224, 224, 2
    x, _, _ = make_inputs(n, 3, k, h, w, device="cuda")
    g = torch.Generator(device="cuda").manual_seed(1)
    grad = torch.randn(n, k, 55, 55, device="cuda", generator=g)
    if values == "huge":
        x, grad = x * 1e18, grad * 1e17
    elif values == "tiny":
        x, grad = x * 1e-20, grad * 1e-15
    elif values == "six_decades":
        x = _six_decades(x, g)
        grad = _six_decades(grad, g)
    elif values == "images_over_8_decades":
        x = x * _decades(-4, 4, n, (n, 1, 1, 1))
        grad = grad * _decades(4, -4, n, (n, 1, 1, 1))
    elif values == "rows_over_6_decades":
        x = x * _decades(-3, 3, h, (1, 1, h, 1))
        grad = grad * _decades(3, -3, 55, (1, 1, 55, 1))
    elif values == "dark_with_spot":
        x = x * 1e-6
        x[:, :, 100:110, 100:110] = 1e3
    else:
        x = 1 + 1e-3 * x
    want_w = torch.nn.grad.conv2d_weight(x.double().cpu(), (k, 3, 11, 11), grad.double().cpu(), stride=4, padding=p)
    want_b = grad.double().cpu().sum((0, 2, 3))
    got = torch.ops.alexop.conv11s4_backward_weight(grad, x, p, True)
    for out, ref, name in zip(got, (want_w, want_b), ("weight", "bias")):
        _assert_fp32_accurate(out, ref, name)


# The fp32-accurate input gradient on Hopper (3xFP16) scales the weights by a
# power of two and grad_output by one per stage (16 channels) of each tile:
# values far from 1 either way, six decades within each tensor, images over
# eight decades, rows over six decades, a bright spot in a dark gradient and
# weights that cancel all keep fp32-level accuracy.
@pytest.mark.parametrize(
    "values",
    ["huge", "tiny", "six_decades", "images_over_8_decades", "rows_over_6_decades", "dark_with_spot", "cancelling"],
)
def test_input_grad_fp32_accuracy_across_value_scales(values):
    n, k, h, w, p = 8, 96, 224, 224, 2
    _, wt, _ = make_inputs(1, 3, k, h, w, device="cuda")
    g = torch.Generator(device="cuda").manual_seed(1)
    grad = torch.randn(n, k, 55, 55, device="cuda", generator=g)
    if values == "huge":
        wt, grad = wt * 1e18, grad * 1e17
    elif values == "tiny":
        wt, grad = wt * 1e-20, grad * 1e-15
    elif values == "six_decades":
        wt = _six_decades(wt, g)
        grad = _six_decades(grad, g)
    elif values == "images_over_8_decades":
        grad = grad * _decades(-4, 4, n, (n, 1, 1, 1))
    elif values == "rows_over_6_decades":
        grad = grad * _decades(-3, 3, 55, (1, 1, 55, 1))
    elif values == "dark_with_spot":
        grad = grad * 1e-6
        grad[:, :, 20:25, 20:25] = 1e3
    else:
        wt = wt - wt.mean(dim=(1, 2, 3), keepdim=True)
    want = torch.nn.grad.conv2d_input((n, 3, h, w), wt.double().cpu(), grad.double().cpu(), stride=4, padding=p)
    _assert_fp32_accurate(torch.ops.alexop.conv11s4_backward_input(grad, wt, [n, 3, h, w], p), want)


@pytest.mark.parametrize(
    "dtype,mode",
    [(torch.float32, "highest"), (torch.float32, "medium"), (torch.bfloat16, "highest")],
    ids=["fp32", "tf32", "bf16"],
)
def test_bitwise_reproducible(dtype, mode):
    x, wt, b = make_inputs(32, 3, 96, 224, 224, dtype=dtype, device="cuda")
    grad = torch.randn(32, 96, 55, 55, device="cuda").to(dtype)
    def run():
        with precision(mode):
            return (
                alexop.conv11s4(x, wt, b),
                *torch.ops.alexop.conv11s4_backward_weight(grad, x, 2, True),
                torch.ops.alexop.conv11s4_backward_input(grad, wt, list(x.shape), 2),
            )

    first = run()
    for _ in range(3):
        assert all(torch.equal(a, f) for a, f in zip(run(), first))


@pytest.mark.slow
def test_output_past_2_31_elements():
    # 8192 x 96 x 55 x 55 = 2.38e9 outputs in bfloat16 (4.8 GB).
    n = 8192
    if torch.cuda.get_device_properties(0).total_memory < 16 * 2**30:
        pytest.skip("needs 16 GiB of GPU memory")
    x, wt, b = make_inputs(1, 3, 96, 224, 224, dtype=torch.bfloat16, device="cuda")
    big = torch.rand(n, 3, 224, 224, device="cuda", dtype=torch.bfloat16)
    big[-1] = x[0]
    big[0] = x[0]
    out = alexop.conv11s4(big, wt, b)
    assert out.numel() > 2**31
    ref = reference(x, wt, b)[0]
    for i in (0, n - 1):
        assert rel_l2(out[i], ref) <= REL_L2[torch.bfloat16], i

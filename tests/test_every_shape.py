"""Every 11x11 stride-4 convolution the op accepts, on CUDA: which kernel the
selectors choose (never the slow reference kernels where a tensor-core kernel or
cuDNN is faster), and that the choices beyond AlexNet's shape — 1 or 2 input
channels padded to 3, 4 to 16 in chunks (Hopper's TF32 and 16-bit forward) or slices of 3,
up to 384 filters in channel groups, cuDNN for the rest — compute F.conv2d at the promised
precision (float32's default is fp32-accurate, so a cuDNN fallback that used TF32 there
would fail)."""

import itertools

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

MODES = [
    pytest.param(torch.float32, "highest", 1e-5, id="fp32"),
    pytest.param(torch.float32, "medium", 1e-3, id="tf32"),
    pytest.param(torch.bfloat16, "highest", REL_L2[torch.bfloat16], id="bf16"),
    pytest.param(torch.float16, "highest", REL_L2[torch.float16], id="fp16"),
]

# (N, C_in, C_out, H, W, padding), each reaching a choice of its own.
SHAPES = [
    pytest.param((4, 1, 64, 135, 139, 2), id="grayscale-pad3"),
    pytest.param((8, 2, 96, 100, 100, 0), id="two-channels-pad3"),
    pytest.param((1, 1, 64, 224, 224, 2), id="one-grayscale-image"),
    pytest.param((2, 3, 192, 64, 80, 2), id="192-filters-groups"),
    pytest.param((8, 3, 192, 224, 224, 2), id="192-filters-gmma-groups"),
    pytest.param((2, 3, 384, 48, 48, 5), id="384-filters-groups"),
    pytest.param((2, 4, 96, 64, 64, 2), id="rgba-small-batch"),
    pytest.param((2, 16, 64, 47, 47, 1), id="16-channels-small-batch"),
    pytest.param((8, 4, 96, 100, 100, 2), id="rgba-slices"),
    pytest.param((12, 5, 128, 96, 96, 0), id="5-channels-slices"),
    # past 2^17 output pixels: TF32 and fp32 weight gradients in slices of 3 channels by
    # slices of up to 96 filters, the last zero-padded
    pytest.param((44, 4, 100, 224, 224, 2), id="rgba-100-filters-many-pixels"),
    pytest.param((8, 6, 64, 127, 127, 3), id="6-channels-slices"),
    pytest.param((8, 16, 64, 127, 127, 1), id="16-channels-slices"),
    # slices of whole channels read (and the input gradient written) in place
    pytest.param((8, 6, 64, 128, 128, 2), id="6-channels-views"),
    pytest.param((4, 12, 96, 96, 96, 2), id="12-channels-views"),
    pytest.param((2, 3, 16, 63, 63, 0), id="16-filters"),
    pytest.param((1, 3, 96, 224, 224, 2), id="one-image"),
    # slices over column blocks: float32 slices add into the output in place
    pytest.param((2, 4, 96, 27, 900, 2), id="rgba-wide-column-blocks"),
]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype,mode,bound", MODES)
def test_forward_and_gradients_match_float64(shape, dtype, mode, bound):
    """Each shape's guesses, untimed (the kernels kernel_for names first), give float64's results."""
    n, c, k, h, w, p = shape
    x, wt, b = make_inputs(n, c, k, h, w, dtype=dtype, device="cuda", seed=c * 1000 + k)
    grad = torch.randn(n, k, (h + 2 * p - 11) // 4 + 1, (w + 2 * p - 11) // 4 + 1, device="cuda").to(dtype)
    with precision(mode), untimed():
        y = alexop.conv11s4(x, wt, b, p)
        gx = torch.ops.alexop.conv11s4_backward_input(grad, wt, list(x.shape), p)
        gw, gb = torch.ops.alexop.conv11s4_backward_weight(grad, x, p, True)
        names = alexop.kernel_for(x, wt, p)
    want_gx, want_gw, want_gb = grads_reference(x, wt, b, grad, p)
    for name, got, want in [
        ("forward", y, reference(x, wt, b, p)),
        ("input_grad", gx, want_gx),
        ("weight_grad", gw, want_gw),
        ("bias_grad", gb, want_gb),
    ]:
        assert got.dtype == dtype, name
        assert_layout_like(got, want)
        err = rel_l2(got, want)
        assert err <= bound, f"{name} ({names}): relative L2 error {err:.2e} > {bound:.0e}"


def _selection(n, c, k, hw, p, dtype, mode, channels_last=False):
    x = torch.empty(n, c, *hw, device="cuda", dtype=dtype)
    if channels_last:
        x = x.to(memory_format=torch.channels_last)
    with precision(mode):
        return alexop.kernel_for(x, torch.empty(k, c, 11, 11, device="cuda", dtype=dtype), p)


# The grid of issue 27 (C_in x C_out x image x padding x batch), tensors up to 1 GiB.
GRID = [
    case
    for case in itertools.product(
        (1, 8, 64), (1, 2, 3, 4, 8, 16), (16, 64, 96, 128, 192, 384),
        ((63, 63), (127, 127), (224, 224), (227, 227), (240, 320), (512, 512)), (0, 2, 5),
    )
    if case[0] * max(case[1], case[2] // 16) * case[3][0] * case[3][1] * 4 <= 1 << 30
]


def grid_on_reference_kernels(select, dtype, mode):
    """The grid's problems (both layouts) whose choices include a reference kernel. select:
    (n, c, k, hw, p, dtype, mode, channels_last) -> the kernel names, as _selection."""
    slow = {}
    for n, c, k, hw, p in GRID:
        for channels_last in (False, True):
            names = select(n, c, k, hw, p, dtype, mode, channels_last)
            if any("generic" in v for v in names.values()):
                slow[(n, c, k, hw, p, channels_last)] = names
    return slow


def three_channel_forwards_on_cudnn(select, dtype, mode):
    """The 3-channel forwards of the grid, and of 8 images of 1024 x 1024, that select sends to cuDNN."""
    shapes = dict.fromkeys((n, k, hw, p) for n, _, k, hw, p in GRID)
    shapes.update(dict.fromkeys((8, k, (1024, 1024), p) for k in (16, 64, 96, 128, 192, 384) for p in (0, 2, 5)))
    return [(n, k, hw, p, channels_last) for n, k, hw, p in shapes for channels_last in (False, True)
            if select(n, 3, k, hw, p, dtype, mode, channels_last)["forward"] == "fwd_cudnn"]


@pytest.mark.parametrize("dtype,mode,bound", MODES)
def test_no_shape_falls_to_the_reference_kernels(dtype, mode, bound):
    """The reference kernels (one thread an output) ran 10-100x slower than cuDNN:
    outside alexop's tensor-core kernels every float32 / 16-bit problem goes to
    cuDNN (or, for the input gradient, cuBLAS + fold)."""
    if torch.cuda.get_device_capability() < (8, 0):
        pytest.skip("alexop's tensor-core kernels need sm_80")
    slow = grid_on_reference_kernels(_selection, dtype, mode)
    assert not slow, f"{len(slow)} problems on the reference kernels, e.g. {next(iter(slow.items()))}"


@pytest.mark.parametrize("dtype,mode,bound", MODES)
def test_three_channel_forwards_run_alexop_kernels_on_hopper(dtype, mode, bound):
    """On Hopper every 3-channel forward of the grid, images up to 1024 x 1024, runs one of
    alexop's tensor-core kernels: images too wide for a patch of whole rows in column blocks
    (forward/plan.cu), where cuDNN ran before."""
    if not wgmma_kernels_run():
        pytest.skip("expectations for the sm_90a kernels")
    on_cudnn = three_channel_forwards_on_cudnn(_selection, dtype, mode)
    assert not on_cudnn, f"{len(on_cudnn)} 3-channel forwards on cuDNN, e.g. {on_cudnn[:3]}"


def test_float64_keeps_the_reference_kernels():
    names = _selection(2, 3, 96, (64, 64), 2, torch.float64, "highest")
    assert names == {"forward": "fwd_generic", "weight_grad": "wgrad_generic", "input_grad": "dgrad_cublas_fold"}


# bf16 forwards of 64 images of 224 x 224: (C_in, C_out, the name's prefix on sm_80, on sm_90a).
FIRST_LAYER_CHOICES = [
    # zero channels, then the 3-channel kernels; on Hopper the phase planes, whose planes
    # of the missing channels stay zero
    (1, 96, "pad3+", "fwd_planes_bf16_1ch_c96"),
    (2, 64, "pad3+", "fwd_planes_bf16_2ch_c64"),
    # slices of 3 channels, the last zero-padded, partial outputs summed; on Hopper the
    # phase planes built for 4 channels, or one kernel over chunks of 2 channels
    (4, 96, "slice3x2+", "fwd_planes_bf16_4ch_c96"),
    (6, 64, "slice3x2+", "fwd_gmma_chunks_bf16_c64"),
    (8, 64, "fwd_cudnn", "fwd_gmma_chunks_bf16_c64"),  # cuDNN wins from 3 slices on
    (16, 192, "fwd_cudnn", "fwd_gmma_chunks_bf16_split_g128"),
]


@pytest.mark.parametrize("c,k,want,on_hopper", FIRST_LAYER_CHOICES)
def test_first_layer_choices(c, k, want, on_hopper):
    if torch.cuda.get_device_capability() < (8, 0):
        pytest.skip("alexop's tensor-core kernels need sm_80")
    names = _selection(64, c, k, (224, 224), 2, torch.bfloat16, "highest")
    assert names["forward"].startswith(on_hopper if wgmma_kernels_run() else want), names


# Where Hopper's chunk kernel runs (64 images of 224 x 224, padding 2): 4-16 channels, in TF32
# also 1 and 2, in 16-bit 1, 2 and 4 but where the phase planes run (from NCHW or an NCHW copy,
# more than 96 filters in groups; a 1-channel input is NCHW in either format); from
# channels_last it pays its NCHW copy except where cuDNN's channels_last
# kernels are quick (16-bit: 13-16 channels at 64 or 128 filters; TF32: 6-8 channels at 16
# filters, 9-16 channels but at 16 filters or 65-96 of up to 12 channels); in TF32 from 9
# channels a last group of filters less than half full (128 = 96 + 32), and from 13 channels
# more than two groups, go to cuDNN.
HOPPER_CHUNK_CHOICES = [
    (4, 64, "bf16", True, "fwd_planes_bf16_4ch_c64"),  # the phase planes built for 4, in place
    (4, 64, "tf32", True, "nchw+fwd_gmma_chunks_tf32_c64"),
    (8, 64, "bf16", True, "nchw+fwd_gmma_chunks_bf16_c64"),
    (16, 96, "bf16", True, "nchw+fwd_gmma_chunks_bf16_c96"),
    (16, 64, "bf16", True, "fwd_cudnn"),
    (16, 128, "bf16", True, "fwd_cudnn"),
    (16, 64, "bf16", False, "fwd_gmma_chunks_bf16_c64"),
    (8, 16, "tf32", True, "fwd_cudnn"),
    (8, 32, "tf32", True, "nchw+fwd_gmma_chunks_tf32_c64"),
    (12, 96, "tf32", True, "nchw+fwd_gmma_chunks_tf32_c96"),
    (16, 16, "tf32", True, "nchw+fwd_gmma_chunks_tf32_c64"),
    (16, 64, "tf32", True, "fwd_cudnn"),
    (8, 128, "tf32", False, "fwd_gmma_chunks_tf32_split_g96"),
    (16, 128, "tf32", False, "fwd_cudnn"),
    (16, 192, "tf32", False, "fwd_gmma_chunks_tf32_split_g96"),
    (16, 256, "tf32", False, "fwd_cudnn"),
    (12, 256, "tf32", False, "fwd_gmma_chunks_tf32_split_g96"),
    (12, 16, "tf32", False, "fwd_gmma_chunks_tf32_c64"),
    # TF32 1 and 2 channels too (128 or 256 reduction slots against pad3's 368)
    (1, 96, "tf32", False, "fwd_gmma_chunks_tf32_c96"),
    (2, 64, "tf32", True, "nchw+fwd_gmma_chunks_tf32_c64"),
    (1, 192, "bf16", False, "fwd_planes_bf16_1ch_split_g96"),
    (2, 128, "bf16", False, "fwd_planes_bf16_2ch_split_g64"),
    (2, 96, "bf16", True, "nchw+fwd_planes_bf16_2ch_c96"),
    (2, 192, "bf16", True, "nchw+fwd_planes_bf16_2ch_split_g96"),
    (1, 96, "bf16", True, "fwd_planes_bf16_1ch_c96"),
    (2, 64, "bf16", False, "fwd_planes_bf16_2ch_c64"),
]


@pytest.mark.parametrize("c,k,mode,channels_last,want", HOPPER_CHUNK_CHOICES)
def test_chunk_kernel_choices_on_hopper(c, k, mode, channels_last, want):
    if not wgmma_kernels_run():
        pytest.skip("expectations for the sm_90a kernels")
    dtype = torch.bfloat16 if mode == "bf16" else torch.float32
    names = _selection(64, c, k, (224, 224), 2, dtype, "medium", channels_last)
    assert guesses(names)["forward"] == want, names


# (C_in, mode) -> the kernel-name prefixes of (forward, weight_grad, input_grad) for 8 images
# of 100 x 100 from channels_last, 96 filters: slices of 3 channels where they beat cuDNN's
# kernels for the same precision (full fp32: up to 16 channels; TF32: the forward up to 6, the
# input gradient never; "high": as TF32, but the forward, fp32-accurate there, never; 16-bit: the
# forward up to 6, the weight gradient up to 12, the input gradient up to 8). On Hopper the
# forwards (of 96 filters) of up to CHUNKED_UP_TO channels run the chunk kernel on an NCHW copy
# instead (CHUNKED).
SLICED = {
    (4, "fp32"): ("slice3x2+", "slice3x2+", "slice3x2+"),
    (16, "fp32"): ("slice3x6+", "slice3x6+", "slice3x6+"),
    (4, "tf32"): ("slice3x2+", "slice3x2+", "dgrad_cudnn"),
    (4, "high"): ("fwd_cudnn", "slice3x2+", "dgrad_cudnn"),  # fp32-accurate forward vs cuDNN's TF32
    (8, "tf32"): ("fwd_cudnn", "slice3x3+", "dgrad_cudnn"),
    (8, "bf16"): ("fwd_cudnn", "slice3x3+", "slice3x3+"),
    (16, "bf16"): ("fwd_cudnn", "wgrad_cudnn", "dgrad_cublas_fold"),
}


CHUNKED = {
    "fp32": "nchw+fwd_gmma_chunks_3xfp16_c96",
    "tf32": "nchw+fwd_gmma_chunks_tf32_c96",
    "bf16": "nchw+fwd_gmma_chunks_bf16_c96",
}
CHUNKED_UP_TO = {"fp32": 5, "tf32": 8, "bf16": 16}


@pytest.mark.parametrize("c,mode", list(SLICED), ids=lambda v: str(v))
def test_channel_slices_selection(c, mode):
    if torch.cuda.get_device_capability()[0] != 9:
        # an A100's 163 KB a block hold neither the fp32 input gradient's weights and stages
        # nor the TF32 forward's (cuBLAS + fold, cuDNN: test_kernel_for's A100 column)
        pytest.skip("written for Hopper's shared memory, the sm_80 kernels forced there too")
    check_channel_slices(_selection, c, mode, wgmma_kernels_run())


def check_channel_slices(select, c, mode, hopper):
    """SLICED's expectation for (c, mode) under select (as _selection); hopper: sm_90a choices."""
    dtype = torch.bfloat16 if mode == "bf16" else torch.float32
    precision = {"tf32": "medium", "high": "high"}.get(mode, "highest")
    names = select(8, c, 96, (100, 100), 2, dtype, precision, True)
    got = tuple(names[key] for key in ("forward", "weight_grad", "input_grad"))
    want = SLICED[c, mode]
    if hopper and mode in CHUNKED and c <= CHUNKED_UP_TO[mode]:
        want = (CHUNKED[mode],) + want[1:]
    assert all(name.startswith(prefix) for name, prefix in zip(got, want)), got


# Where the weight gradient of 4-16 channels runs slices of 3 (and of up to 96 filters), by
# what cuDNN runs in their place (weight_grad/select.cu, many_channels_pay): (N, C_in, C_out,
# image side, precision, channels_last) -> the name's prefix; padding 2.
WEIGHT_GRAD_SLICE_CHOICES = [
    (64, 4, 128, 224, "bf16", False, "slice3x2+kslice96x2+"),
    (64, 8, 384, 224, "bf16", True, "slice3x3+kslice96x4+"),  # cuDNN's 7-9 channels are slow
    (64, 4, 256, 224, "bf16", False, "wgrad_cudnn"),
    (64, 12, 96, 224, "bf16", False, "slice3x4+"),
    (64, 16, 64, 224, "bf16", False, "wgrad_cudnn"),
    (64, 4, 64, 127, "bf16", False, "wgrad_cudnn"),  # an odd width
    (64, 4, 32, 224, "bf16", False, "slice3x2+kslice96x1+"),  # zero-padded filter slots
    (64, 8, 32, 224, "bf16", False, "wgrad_cudnn"),
    (8, 4, 96, 224, "bf16", False, "slice3x2+"),  # the older rule's region: at any size
    (8, 4, 128, 224, "bf16", False, "wgrad_cudnn"),  # the rest from 2^16 output pixels
    (8, 12, 96, 224, "bf16", False, "wgrad_cudnn"),
    (8, 4, 128, 512, "bf16", False, "slice3x2+kslice96x2+"),
    (64, 4, 128, 224, "tf32", False, "slice3x2+kslice96x2+"),
    (64, 4, 128, 224, "tf32", True, "wgrad_cudnn"),
    (64, 4, 128, 127, "tf32", False, "wgrad_cudnn"),  # few pixels
    (64, 16, 64, 127, "tf32", True, "wgrad_cudnn"),
    (64, 16, 96, 127, "tf32", True, "slice3x6+"),
    (64, 8, 16, 224, "fp32", False, "slice3x3+kslice96x1+"),
    (64, 8, 16, 127, "fp32", False, "wgrad_cudnn"),
    (64, 8, 128, 127, "fp32", True, "slice3x3+kslice96x2+"),
    (1, 4, 96, 224, "fp32", False, "wgrad_cudnn"),  # one small image
]


@pytest.mark.parametrize("n,c,k,hw,mode,channels_last,want", WEIGHT_GRAD_SLICE_CHOICES)
def test_weight_grad_slices_selection(n, c, k, hw, mode, channels_last, want):
    if torch.cuda.get_device_capability() < (8, 0):
        pytest.skip("alexop's tensor-core kernels need sm_80")
    dtype = torch.bfloat16 if mode == "bf16" else torch.float32
    names = _selection(n, c, k, (hw, hw), 2, dtype, "medium" if mode == "tf32" else "highest", channels_last)
    assert names["weight_grad"].startswith(want), names


# Up to 16 channels the weight gradient's rules are a guess (cuDNN's kernels there are fast or
# slow by shape in ways no rule follows; one image leaves alexop's tiles few): its first call
# times alexop's kernels (slices of 3 and of 96 filters wherever they take them) against cuDNN
# and the process keeps the faster. kernel_for names both, the guess first; the timed call, a
# later one and an untimed one (the guess's) each give float64's gradients.
# dtype, torch.set_float32_matmul_precision and the relative L2 bound of a timed test's mode.
TIMED_MODES = {"bf16": (torch.bfloat16, "highest", REL_L2[torch.bfloat16]), "tf32": (torch.float32, "medium", 1e-3),
               "fp32": (torch.float32, "highest", 1e-5), "high": (torch.float32, "high", 2e-5)}


@pytest.mark.parametrize("n,c,k,hw,mode,channels_last,mine", [
    (16, 8, 64, 126, "bf16", True, "slice3x3+"),  # slices guessed
    (8, 12, 96, 224, "bf16", False, "slice3x4+"),  # cuDNN guessed
    (8, 5, 96, 100, "tf32", False, "slice3x2+"),
    (8, 5, 96, 100, "fp32", False, "slice3x2+"),  # fp32-accurate slices against cuDNN's full fp32
    (4, 7, 64, 127, "bf16", False, "slice3x3+"),  # an odd width: slices one zero column wider
    (8, 1, 128, 224, "fp32", False, "pad3+kslice96x2+"),  # cuDNN's full fp32 guessed
    (1, 2, 128, 224, "bf16", False, "pad3+kslice96x2+"),  # one image
    (2, 3, 96, 100, "fp32", False, "wgrad_"),
])
def test_weight_grad_timed_against_cudnn(n, c, k, hw, mode, channels_last, mine):
    if torch.cuda.get_device_capability() < (8, 0):
        pytest.skip("alexop's tensor-core kernels need sm_80")
    dtype, matmul, bound = TIMED_MODES[mode]
    x, wt, b = make_inputs(n, c, k, hw, hw, dtype=dtype, device="cuda", seed=c)
    if channels_last:
        x = x.to(memory_format=torch.channels_last)
    side = (hw + 4 - 11) // 4 + 1
    grad = torch.randn(n, k, side, side, device="cuda").to(dtype)
    with precision(matmul):
        names = alexop.kernel_for(x, wt, 2)["weight_grad"].split("|")
        got = [torch.ops.alexop.conv11s4_backward_weight(grad, x, 2, True) for _ in range(2)]
        with untimed():
            got.append(torch.ops.alexop.conv11s4_backward_weight(grad, x, 2, True))
    assert len(names) == 2 and "wgrad_cudnn" in names, names
    assert any(name.startswith(mine) for name in names), names
    _, want_gw, want_gb = grads_reference(x, wt, b, grad, 2)
    for gw, gb in got:
        assert rel_l2(gw, want_gw) <= bound and rel_l2(gb, want_gb) <= bound, names


# The input gradient likewise times alexop's own kernels (its choice, or slices of 3, or the
# cuBLAS GEMM + fold) against cuDNN, whose speed beyond 3 channels jumps with the filter count;
# up to 3 channels where alexop's kernels are the guess.
@pytest.mark.parametrize("n,c,k,hw,mode,channels_last", [
    (8, 5, 16, 64, "bf16", True),
    (4, 12, 32, 100, "bf16", False),
    (8, 4, 96, 100, "tf32", False),
    (8, 4, 96, 100, "fp32", False),
    (2, 20, 64, 67, "bf16", False),
    (4, 1, 64, 224, "bf16", False),
    (8, 3, 96, 100, "fp32", True),
])
def test_input_grad_timed_against_cudnn(n, c, k, hw, mode, channels_last):
    if torch.cuda.get_device_capability() < (8, 0):
        pytest.skip("alexop's tensor-core kernels need sm_80")
    dtype, matmul, bound = TIMED_MODES[mode]
    x, wt, b = make_inputs(n, c, k, hw, hw, dtype=dtype, device="cuda", seed=c)
    side = (hw + 4 - 11) // 4 + 1
    grad = torch.randn(n, k, side, side, device="cuda").to(dtype)
    if channels_last:
        x, grad = (t.to(memory_format=torch.channels_last) for t in (x, grad))
    with precision(matmul):
        names = alexop.kernel_for(x, wt, 2)["input_grad"].split("|")
        got = [torch.ops.alexop.conv11s4_backward_input(grad, wt, list(x.shape), 2) for _ in range(2)]
        with untimed():
            got.append(torch.ops.alexop.conv11s4_backward_input(grad, wt, list(x.shape), 2))
    assert len(names) == 2 and "dgrad_cudnn" in names, names
    want = grads_reference(x, wt, b, grad, 2)[0]
    for gx in got:
        assert_layout_like(gx, want)
        assert rel_l2(gx, want) <= bound, names


# Every forward on alexop's tensor-core kernels is a guess (its rules were measured on Hopper
# at a few batch sizes; one image has few tiles): the first call times it against cuDNN, as
# accurate as the kernel it may replace (TF32 off under "high"), and the process keeps the
# faster. The timed call, a later one and an untimed one each give float64's output.
@pytest.mark.parametrize("n,c,k,hw,pad,mode,channels_last", [
    (1, 8, 192, 224, 5, "bf16", True),  # one image: cuDNN's channels_last kernels were faster
    (1, 2, 128, 224, 0, "fp32", True),
    (8, 3, 96, 224, 2, "fp32", False),
    (4, 1, 64, 224, 2, "bf16", False),
    (2, 4, 64, 127, 2, "tf32", True),
    (1, 3, 96, 224, 2, "high", False),
])
def test_forward_timed_against_cudnn(n, c, k, hw, pad, mode, channels_last):
    if torch.cuda.get_device_capability() < (8, 0):
        pytest.skip("alexop's tensor-core kernels need sm_80")
    dtype, matmul, bound = TIMED_MODES[mode]
    x, wt, b = make_inputs(n, c, k, hw, hw, dtype=dtype, device="cuda", seed=c + k)
    if channels_last:
        x = x.to(memory_format=torch.channels_last)
    with precision(matmul):
        names = alexop.kernel_for(x, wt, pad)["forward"].split("|")
        got = [alexop.conv11s4(x, wt, b, pad) for _ in range(2)]
        with untimed():
            got.append(alexop.conv11s4(x, wt, b, pad))
    if names == ["fwd_cudnn"]:
        pytest.skip("no alexop kernel for this problem on this GPU: nothing is timed")
    assert len(names) == 2 and "fwd_cudnn" in names, names
    want = reference(x, wt, b, pad)
    for y in got:
        assert_layout_like(y, want)
        assert rel_l2(y, want) <= bound, names


@pytest.mark.parametrize("c", [4, 8, 16])
@pytest.mark.parametrize("dtype,mode,bound", MODES)
def test_channel_slices_from_channels_last_without_bias(c, dtype, mode, bound):
    """Slices are copies of the input's channels: a channels_last input and no bias
    give what F.conv2d gives, in its layout, whichever kernels the selectors guess."""
    n, k, h, w, p = 8, 96, 100, 100, 2
    x, wt, _ = make_inputs(n, c, k, h, w, dtype=dtype, device="cuda", seed=c)
    x = x.to(memory_format=torch.channels_last)
    grad = torch.randn(n, k, 24, 24, device="cuda").to(dtype, memory_format=torch.channels_last)
    with precision(mode), untimed():
        names = alexop.kernel_for(x, wt, p)
        y = alexop.conv11s4(x, wt, None, p)
        gx = torch.ops.alexop.conv11s4_backward_input(grad, wt, list(x.shape), p)
        gw, gb = torch.ops.alexop.conv11s4_backward_weight(grad, x, p, False)
    want_gx, want_gw = grads_reference(x, wt, None, grad, p)
    assert gb.numel() == 0
    for name, got, want in [("forward", y, reference(x, wt, None, p)), ("input_grad", gx, want_gx),
                            ("weight_grad", gw, want_gw)]:
        if name == "weight_grad":  # contiguous, where F.conv2d's follows the input
            assert got.is_contiguous(), name
        else:
            assert_layout_like(got, want)
        err = rel_l2(got, want)
        assert err <= bound, f"{name} ({names}): relative L2 error {err:.2e} > {bound:.0e}"


@pytest.mark.parametrize("c,k,hw,p", [(17, 32, 71, 1), (3, 96, 100, 2)], ids=["cudnn-layout", "alexop-forward"])
def test_untimed_in_graph_capture_and_deterministic_mode(c, k, hw, p):
    """A problem's first call times its choice (a cuDNN fallback its two layouts, alexop's
    forward against cuDNN), except where nothing may synchronize (CUDA graph capture) or results
    must not depend on a timing (deterministic mode): there the guess runs, and still computes
    F.conv2d."""
    x, wt, b = make_inputs(3, c, k, hw, hw, device="cuda", seed=c)
    forward = alexop.kernel_for(x, wt, p)["forward"]
    if c == 3 and not forward.endswith("|fwd_cudnn"):
        pytest.skip("alexop's kernel is not this GPU's guess")
    assert forward == "fwd_cudnn" if c == 17 else forward.endswith("|fwd_cudnn"), forward
    want = reference(x, wt, b, p)
    with precision("highest"):
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.stream(side):
            # the kernels loaded (cuDNN loads an engine's kernels on first use, which capture
            # forbids) on another problem, timed: this one is not
            alexop.conv11s4(torch.cat([x, x[:1]]), wt, b, p)
            torch.cuda.synchronize()
            with torch.cuda.graph(graph):
                y = alexop.conv11s4(x, wt, b, p)
        torch.cuda.current_stream().wait_stream(side)
        graph.replay()
        torch.cuda.synchronize()
        assert rel_l2(y, want) <= 1e-5
        saved = torch.backends.cudnn.deterministic
        torch.backends.cudnn.deterministic = True
        try:
            x2 = x[:2].contiguous()  # a problem not timed yet
            assert rel_l2(alexop.conv11s4(x2, wt, b, p), want[:2]) <= 1e-5
        finally:
            torch.backends.cudnn.deterministic = saved
        assert rel_l2(alexop.conv11s4(x, wt, b, p), want) <= 1e-5  # timed now


@pytest.mark.parametrize("dtype,mode,bound", MODES)
def test_cudnn_fallback_from_channels_last(dtype, mode, bound):
    """17 channels go to cuDNN; a channels_last input, a channel count and an image that
    fill no 32 x 32 tile of the layout copies evenly: the results have F.conv2d's layouts
    (NCHW from an NCHW grad_output too) and values."""
    n, c, k, h, w, p = 3, 17, 40, 61, 67, 3
    x, wt, b = make_inputs(n, c, k, h, w, dtype=dtype, device="cuda", seed=5)
    x = x.to(memory_format=torch.channels_last)
    grad = torch.randn(n, k, (h + 2 * p - 11) // 4 + 1, (w + 2 * p - 11) // 4 + 1, device="cuda").to(dtype)
    if dtype == torch.float32:  # grad_output in the forward's layout, as autograd passes it
        grad = grad.to(memory_format=torch.channels_last)
    with precision(mode):
        names = alexop.kernel_for(x, wt, p)
        y = alexop.conv11s4(x, wt, b, p)
        gx = torch.ops.alexop.conv11s4_backward_input(grad, wt, list(x.shape), p)
        gw, gb = torch.ops.alexop.conv11s4_backward_weight(grad, x, p, True)
    assert names["forward"] == "fwd_cudnn" and names["weight_grad"] == "wgrad_cudnn", names
    want_gx, want_gw, want_gb = grads_reference(x, wt, b, grad, p)
    for name, got, want in [("forward", y, reference(x, wt, b, p)), ("input_grad", gx, want_gx),
                            ("weight_grad", gw, want_gw), ("bias_grad", gb, want_gb)]:
        assert got.shape == want.shape, name
        if name == "forward" or (name == "input_grad" and grad.is_contiguous(memory_format=torch.channels_last)):
            assert_layout_like(got, want)
        else:  # alexop's input gradient follows grad_output; weight gradients are contiguous
            assert got.is_contiguous(), name
        err = rel_l2(got, want)
        assert err <= bound, f"{name} ({names}): relative L2 error {err:.2e} > {bound:.0e}"

"""alexop.kernel_for: the names of the kernels the operators choose, asked
without running anything. On CUDA the expected names follow the selectors'
decision trees (csrc/cuda/*/select.cu) for AlexNet's first layer."""

import pytest
import torch

import alexop
from conftest import HOST_CPU, guesses, make_inputs, needs_cuda, precision, sm80_kernels_forced, wgmma_kernels_run
from test_every_shape import (
    FIRST_LAYER_CHOICES,
    HOPPER_CHUNK_CHOICES,
    MODES,
    SLICED,
    WEIGHT_GRAD_SLICE_CHOICES,
    check_channel_slices,
    grid_on_reference_kernels,
    three_channel_forwards_on_cudnn,
)

KEYS = ("forward", "weight_grad", "input_grad")


def _cpu_names(forward_and_weight_grad, isa):
    return {"forward": f"cpu_fwd_{forward_and_weight_grad}_{isa}",
            "weight_grad": f"cpu_wgrad_{forward_and_weight_grad}_{isa}", "input_grad": f"cpu_dgrad_s2d_{isa}"}


def _named_cpu(cpu, n, c, k, h, dtype=torch.float32, channels_last=False, padding=2, width=None):
    """_kernel_for_cpu's names for a CPU of the named kind, from meta tensors' sizes."""
    x = torch.empty(n, c, h, width or h, device="meta", dtype=dtype)
    x = x.to(memory_format=torch.channels_last) if channels_last else x
    return dict(zip(KEYS, torch.ops.alexop._kernel_for_cpu(x, torch.empty(k, c, 11, 11, device="meta", dtype=dtype),
                                                            padding, cpu)))


def _runs(names):
    """kernel_for's names as "aten" or "alexop", forward, weight gradient, input gradient: the
    selector's guess where a problem is timed ("a|b")."""
    return tuple("aten" if v.endswith("_aten") else "alexop" for v in guesses(names).values())


def test_cpu_names(monkeypatch):
    # This CPU answers as the kind it is named by (conftest.HOST_CPU); float16 and bfloat16 run in
    # float32 but where the CPU multiplies them natively; ALEXOP_CPU_CAPABILITY=default gives the
    # portable kernels' names for every shape on every CPU.
    x, w, _ = make_inputs(1, 3, 96, 224, 224)
    for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.float64):
        assert alexop.kernel_for(x.to(dtype), w.to(dtype)) == _named_cpu(HOST_CPU, 1, 3, 96, 224, dtype)
    monkeypatch.setenv("ALEXOP_CPU_CAPABILITY", "default")
    assert alexop.kernel_for(x, w) == _cpu_names("direct", "default")
    assert alexop.kernel_for(x.bfloat16(), w.bfloat16()) == _cpu_names("direct", "default")
    assert alexop.kernel_for(x, w, padding=0) == _cpu_names("direct", "default")
    assert alexop.kernel_for(x[:0], w) == dict.fromkeys(KEYS, "none")


# AlexNet's conv1 on one image, per kind of CPU: Winograd with AVX-512 and AVX2 for float32; the
# portable kernels' forward and input gradient lose to oneDNN's beyond 16 filters.
# float64 runs alexop's kernels everywhere (ATen's is its slow generic convolution).
@pytest.mark.parametrize("cpu,want", [
    ("avx512", _cpu_names("winograd", "avx512")),
    ("avx2", _cpu_names("winograd", "avx2")),
    ("default", {"forward": "cpu_fwd_aten", "weight_grad": "cpu_wgrad_direct_default", "input_grad": "cpu_dgrad_aten"}),
])
def test_named_cpu_names(cpu, want):
    assert guesses(_named_cpu(cpu, 1, 3, 96, 224)) == want
    assert "aten" not in str(_named_cpu(cpu, 1, 3, 96, 224, torch.float64))
    assert _named_cpu(cpu, 1, 3, 96, 224, torch.bfloat16) == _named_cpu(cpu, 1, 3, 96, 224)  # computed in float32


def test_named_cpu_checks_its_arguments():
    schema = str(torch.ops.alexop._kernel_for_cpu.default._schema)
    assert schema == "alexop::_kernel_for_cpu(Tensor input, Tensor weight, int padding, str cpu) -> str[]"
    with pytest.raises(RuntimeError, match='expected cpu to be "default", "avx2", "avx512", "avx512_bf16", '
                                           '"amx_bf16" or "amx_fp16", but got "neon"'):
        _named_cpu("neon", 1, 3, 96, 224)
    with pytest.raises(RuntimeError, match="padding >= 0"):
        _named_cpu("avx2", 1, 3, 96, 224, padding=-1)
    assert _named_cpu("avx2", 0, 3, 96, 224) == dict.fromkeys(KEYS, "none")


# (N, C_in, C_out, H) on AVX-512, against oneDNN's AVX-512 kernels: ATen runs the forward under 48
# filters (24 at 4 or more channels), the weight gradient under 24 (16 at 4-12 channels), both
# under 512 output pixels (55 x 55 with 1-3 channels); the input gradient beyond 12 channels, at
# 11-12 under 55 x 55 pixels, at 7-10 under 576, at 5-6 under 512;
# the forward of
# 4 or more channels under 1600 output pixels, and of 64 filters (112, 160, ...) under 55 x 55
# (csrc/cpu/select.cpp, docs/cpu.md).
CPU_CHOICES = [
    ((1, 3, 96, 224), ("alexop", "alexop", "alexop")),  # AlexNet's conv1, one image
    ((2, 3, 8, 32), ("aten", "aten", "alexop")),
    ((8, 3, 32, 227), ("aten", "alexop", "alexop")),
    ((1, 3, 64, 127), ("aten", "aten", "alexop")),
    ((8, 16, 96, 227), ("alexop", "alexop", "aten")),
    ((8, 6, 96, 63), ("aten", "alexop", "alexop")),  # 15 x 15 outputs: narrow
    ((1, 6, 96, 63), ("aten", "aten", "aten")),
    ((8, 3, 64, 63), ("aten", "aten", "alexop")),
    ((4, 8, 96, 63), ("aten", "alexop", "alexop")),
    ((1, 4, 192, 127), ("aten", "alexop", "alexop")),
    ((8, 8, 64, 63), ("aten", "alexop", "alexop")),
    ((8, 16, 64, 63), ("aten", "alexop", "aten")),
    ((8, 8, 96, 63), ("aten", "alexop", "alexop")),
    ((8, 1, 64, 224), ("alexop", "alexop", "alexop")),
    ((32, 3, 64, 224), ("alexop", "alexop", "alexop")),  # torchvision's AlexNet conv1
    ((8, 4, 64, 224), ("alexop", "alexop", "alexop")),
    ((2, 7, 256, 69), ("aten", "alexop", "aten")),  # 2 x 16 x 16 outputs
    ((4, 8, 128, 55), ("aten", "alexop", "alexop")),  # 4 x 12 x 12
    ((8, 9, 96, 127), ("alexop", "alexop", "alexop")),
    ((8, 12, 96, 127), ("alexop", "alexop", "alexop")),
    ((2, 12, 96, 127), ("alexop", "alexop", "aten")),
    ((8, 14, 96, 127), ("alexop", "alexop", "aten")),
    ((4, 6, 16, 227), ("aten", "alexop", "alexop")),
    ((4, 10, 8, 227), ("aten", "aten", "alexop")),
    ((8, 3, 16, 127), ("aten", "aten", "alexop")),
    ((8, 3, 32, 127), ("aten", "alexop", "alexop")),
    ((8, 4, 32, 127), ("alexop", "alexop", "alexop")),
    ((1, 16, 24, 227), ("alexop", "alexop", "aten")),
]


# (N, C_in, C_out, H, W, channels_last) on AVX-512: ATen's forward for outputs under 24 columns
# (W under 99 at padding 2) of 4 or more channels, of one NCHW channel, and of 2-3 NCHW channels
# up to 6 columns (W under 31); beyond 2e9 FLOP from NCHW inputs under 18 columns (W under 75).
CPU_CHOICES_NARROW = [
    ((8, 8, 96, 224, 95, False), "aten"),
    ((8, 8, 96, 224, 99, False), "alexop"),
    ((8, 16, 96, 300, 60, True), "aten"),
    ((8, 1, 128, 300, 60, False), "aten"),
    ((8, 1, 128, 300, 60, True), "alexop"),
    ((8, 3, 96, 224, 95, False), "alexop"),
    ((8, 3, 96, 224, 30, False), "aten"),
    ((8, 3, 96, 224, 31, False), "alexop"),
    ((8, 3, 96, 60, 300, False), "alexop"),
    ((32, 8, 192, 243, 75, False), "alexop"),
    ((32, 8, 192, 243, 75, True), "aten"),
    ((32, 8, 192, 243, 71, False), "aten"),
]


@pytest.mark.parametrize("size,want", CPU_CHOICES_NARROW, ids=lambda v: str(v))
def test_cpu_aten_for_narrow_outputs(size, want):
    *size, width, channels_last = size
    assert _runs(_named_cpu("avx512", *size, channels_last=channels_last, width=width))[0] == want


# (N, C_in, C_out, H, channels_last) on AVX-512: the Winograd forward with tiles in lanes for NCHW
# outputs of one channel, output channels in lanes otherwise. AVX2 has the latter only.
WINOGRAD_ROWS = [
    ((8, 1, 64, 224, False), "cpu_fwd_winograd_rows_avx512"),
    ((1, 1, 96, 1024, False), "cpu_fwd_winograd_rows_avx512"),
    ((8, 1, 64, 224, True), "cpu_fwd_winograd_avx512"),
    ((8, 2, 96, 127, False), "cpu_fwd_winograd_avx512"),
]


@pytest.mark.parametrize("size,want", WINOGRAD_ROWS, ids=lambda v: str(v))
def test_cpu_winograd_forward_with_tiles_in_lanes(size, want):
    *size, channels_last = size
    assert guesses(_named_cpu("avx512", *size, channels_last=channels_last))["forward"] == want
    assert guesses(_named_cpu("avx2", *size, channels_last=channels_last))["forward"] == "cpu_fwd_winograd_avx2"


@pytest.mark.parametrize("size,want", CPU_CHOICES, ids=lambda v: str(v))
def test_cpu_aten_where_alexop_is_slower(size, want):
    assert _runs(_named_cpu("avx512", *size)) == want
    # bfloat16 computes in float32 without AVX512-BF16; with it, ATen's native forward and
    # weight gradient run; float16 computes in float32 but with AMX-FP16
    assert _runs(_named_cpu("avx512", *size, torch.bfloat16)) == want
    assert _runs(_named_cpu("avx512_bf16", *size, torch.bfloat16))[:2] == ("aten", "aten")
    assert _runs(_named_cpu("avx512_bf16", *size, torch.float16)) == want
    assert _runs(_named_cpu("amx_bf16", *size, torch.float16)) == want
    assert "aten" not in str(_named_cpu("avx512", *size, torch.float64))


# (N, C_in, C_out, H) from channels_last inputs on AVX-512, where oneDNN's channels_last kernels
# run: ATen's forward under 48 filters at any channel count and from 8 channels up to 55 x 55
# output pixels, its weight gradient from 8 channels under 900 and under 24 filters at any channel
# count, its input gradient beyond 8 channels and at 7-8 under 961; one channel is alexop's.
CPU_CHOICES_NHWC = [
    ((8, 1, 128, 224), ("alexop", "alexop", "alexop")),
    ((1, 8, 96, 127), ("aten", "alexop", "alexop")),
    ((8, 4, 64, 63), ("aten", "alexop", "alexop")),
    ((8, 3, 96, 224), ("alexop", "alexop", "alexop")),
    ((1, 16, 96, 224), ("aten", "alexop", "aten")),
    ((8, 3, 64, 224), ("alexop", "alexop", "alexop")),
    ((1, 16, 64, 99), ("aten", "aten", "aten")),
    ((1, 8, 128, 139), ("aten", "alexop", "alexop")),
    ((1, 8, 256, 123), ("aten", "alexop", "aten")),  # 30 x 30 outputs: oneDNN's input gradient too
    ((2, 8, 256, 69), ("aten", "aten", "aten")),
    ((8, 9, 96, 127), ("alexop", "alexop", "aten")),
    ((4, 6, 16, 227), ("aten", "aten", "alexop")),
    ((8, 4, 32, 127), ("aten", "alexop", "alexop")),
]


@pytest.mark.parametrize("size,want", CPU_CHOICES_NHWC, ids=lambda v: str(v))
def test_cpu_aten_where_alexop_is_slower_channels_last(size, want):
    assert _runs(_named_cpu("avx512", *size, channels_last=True)) == want


# (N, C_in, C_out, H) in bfloat16 where ATen runs it on AVX512-BF16 kernels: ATen's forward and
# weight gradient; its input gradient beyond 4 channels, or 3-4 under 1024 output pixels. On AMX
# tiles (bfloat16 with AMX-BF16, float16 with AMX-FP16) ATen's input gradient too.
CPU_CHOICES_NATIVE_16BIT = [
    ((1, 3, 96, 224), ("aten", "aten", "alexop")),
    ((8, 1, 16, 63), ("aten", "aten", "alexop")),
    ((1, 3, 96, 127), ("aten", "aten", "aten")),
    ((8, 4, 96, 63), ("aten", "aten", "alexop")),
    ((8, 8, 96, 227), ("aten", "aten", "aten")),
]


@pytest.mark.parametrize("size,want", CPU_CHOICES_NATIVE_16BIT, ids=lambda v: str(v))
def test_cpu_native_16bit_choices(size, want):
    assert _runs(_named_cpu("avx512_bf16", *size, torch.bfloat16)) == want
    assert _runs(_named_cpu("amx_bf16", *size, torch.bfloat16)) == ("aten", "aten", "aten")
    assert _runs(_named_cpu("amx_fp16", *size, torch.float16)) == ("aten", "aten", "aten")
    assert _runs(_named_cpu("amx_fp16", *size, torch.bfloat16)) == ("aten", "aten", "aten")


# (N, C_in, C_out, H, channels_last) with AVX2, against oneDNN held to AVX2 (grids on one AVX-512
# CPU, docs/cpu.md): the Winograd forward and weight gradient lose only on small problems, under 512
# output pixels at 4 or more channels (the weight gradient also at 3 channels and 48 filters or
# more), from channels_last inputs the forward of 8 or more channels under 32 filters and the weight
# gradient up to one 55 x 55 image's pixels; oneDNN's input gradient, in blocks of 8 channels, wins
# at 8, 16 and beyond, from channels_last inputs beyond 11, from NCHW ones beyond 12 up to 2e9 FLOP
# (4 channels under 512 output pixels).
CPU_CHOICES_AVX2 = [
    ((1, 3, 96, 224, False), ("alexop", "alexop", "alexop")),
    ((8, 3, 96, 224, True), ("alexop", "alexop", "alexop")),
    ((8, 1, 16, 224, True), ("alexop", "alexop", "alexop")),
    ((1, 3, 96, 63, False), ("alexop", "aten", "alexop")),
    ((1, 1, 96, 63, False), ("alexop", "alexop", "alexop")),
    ((8, 8, 96, 63, True), ("alexop", "aten", "aten")),
    ((8, 8, 16, 63, True), ("aten", "aten", "aten")),
    ((1, 4, 64, 63, True), ("aten", "aten", "aten")),
    ((8, 16, 96, 224, False), ("alexop", "alexop", "aten")),
    ((8, 4, 64, 63, False), ("alexop", "alexop", "alexop")),
    ((8, 6, 64, 127, False), ("alexop", "alexop", "alexop")),
    ((8, 8, 96, 224, False), ("alexop", "alexop", "aten")),
    ((8, 10, 96, 224, True), ("alexop", "alexop", "alexop")),
    ((8, 12, 96, 224, False), ("alexop", "alexop", "alexop")),
    ((8, 12, 96, 224, True), ("alexop", "alexop", "aten")),
    ((1, 13, 96, 224, False), ("alexop", "alexop", "aten")),
    ((8, 13, 96, 224, False), ("alexop", "alexop", "alexop")),
    ((1, 24, 64, 127, False), ("alexop", "alexop", "aten")),
]


@pytest.mark.parametrize("size,want", CPU_CHOICES_AVX2, ids=lambda v: str(v))
def test_cpu_aten_where_avx2_kernels_are_slower(size, want):
    *size, channels_last = size
    assert _runs(_named_cpu("avx2", *size, channels_last=channels_last)) == want


# The portable kernels (no AVX2: aarch64 and others), against oneDNN held to SSE4.1 on the same
# CPU (not measured on aarch64): they win the forward and input gradient at 16 filters or fewer
# (the input gradient under 8 channels, 4 under 512 output pixels), the weight gradient up to 96
# filters but 64-96 under 512 output pixels of 3 or more channels.
CPU_CHOICES_PORTABLE = [
    ((1, 3, 96, 224, False), ("aten", "alexop", "aten")),
    ((8, 3, 16, 224, False), ("alexop", "alexop", "alexop")),
    ((8, 8, 16, 224, True), ("alexop", "alexop", "aten")),
    ((1, 4, 16, 63, False), ("alexop", "alexop", "aten")),
    ((8, 3, 192, 224, False), ("aten", "aten", "aten")),
    ((1, 3, 96, 63, True), ("aten", "aten", "aten")),
    ((1, 1, 96, 63, True), ("aten", "alexop", "aten")),
    ((8, 16, 64, 63, False), ("aten", "alexop", "aten")),
]


@pytest.mark.parametrize("size,want", CPU_CHOICES_PORTABLE, ids=lambda v: str(v))
def test_cpu_aten_where_portable_kernels_are_slower(size, want):
    *size, channels_last = size
    assert _runs(_named_cpu("default", *size, channels_last=channels_last)) == want


# The CPU's timed choices by name: the first call of a problem of up to 2e9 floating-point
# operations times alexop's kernels against ATen's and keeps the faster, named "guess|other";
# float32, and float16 / bfloat16 where the CPU multiplies them natively (elsewhere they are asked
# as float32). One name beyond that size, for float64 and under ALEXOP_CPU_CAPABILITY.
# (cpu, N, C_in, C_out, H, dtype) -> timed.
CPU_TIMED = [
    (("avx512", 1, 3, 96, 224, torch.float32), True),
    (("avx512", 9, 3, 96, 224, torch.float32), True),  # 1.9e9
    (("avx512", 10, 3, 96, 224, torch.float32), False),  # 2.1e9
    (("avx512", 1, 16, 384, 224, torch.float32), False),
    (("avx512", 2, 7, 256, 69, torch.float32), True),
    (("avx512", 1, 3, 96, 224, torch.float64), False),
    (("avx512", 1, 3, 96, 224, torch.bfloat16), True),  # float32's choice
    (("avx512_bf16", 1, 3, 96, 224, torch.bfloat16), True),  # ATen's bfloat16 or alexop's float32
    (("avx512_bf16", 10, 3, 96, 224, torch.bfloat16), False),
    (("amx_bf16", 1, 3, 96, 224, torch.float16), True),  # float32's choice
    (("amx_bf16", 10, 3, 96, 224, torch.float16), False),
    (("amx_fp16", 1, 3, 96, 224, torch.float16), True),  # ATen's float16 or alexop's float32
    (("avx2", 8, 8, 96, 63, torch.float32), True),
    (("default", 8, 3, 16, 224, torch.float32), True),
]


@pytest.mark.parametrize("case,timed", CPU_TIMED, ids=lambda v: str(v))
def test_cpu_timed_choices_by_name(case, timed):
    cpu, n, c, k, h, dtype = case
    names = _named_cpu(cpu, n, c, k, h, dtype)
    for op, name in names.items():
        ways = name.split("|")
        assert len(ways) == (2 if timed else 1), (op, name)
        assert sum(way.endswith("_aten") for way in ways) == (1 if timed else ways[0].endswith("_aten")), (op, name)


@pytest.mark.parametrize("cpu", ["default", "avx2", "avx512", "avx512_bf16", "amx_bf16", "amx_fp16"])
def test_float64_and_forced_kernels_never_run_aten(cpu, monkeypatch):
    # ATen's float64 convolution is its slow generic one; ALEXOP_CPU_CAPABILITY names alexop's
    # kernels for every shape (this CPU's answers; a CPU named is asked as it would answer unset)
    for size in [s for s, _ in CPU_CHOICES]:
        assert "aten" not in str(_named_cpu(cpu, *size, torch.float64))
    monkeypatch.setenv("ALEXOP_CPU_CAPABILITY", "default")
    for size, _ in CPU_CHOICES:
        x, w, _ = make_inputs(*size, size[-1], dtype=torch.bfloat16)
        assert "aten" not in str(alexop.kernel_for(x, w))


# This CPU's _kernel_for agrees with _kernel_for_cpu of the kind it is named, on every shape above.
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=["fp32", "bf16", "fp16"])
def test_named_cpu_agrees_with_this_cpu(dtype, monkeypatch):
    monkeypatch.delenv("ALEXOP_CPU_CAPABILITY", raising=False)
    sizes = [(*s, False) for s, _ in CPU_CHOICES] + [(*s, True) for s, _ in CPU_CHOICES_NHWC] + \
        [s for s, _ in CPU_CHOICES_AVX2 + CPU_CHOICES_PORTABLE]
    for n, c, k, h, channels_last in sizes:
        x = torch.empty(n, c, h, h, dtype=dtype)
        x = x.to(memory_format=torch.channels_last) if channels_last else x
        got = alexop.kernel_for(x, torch.empty(k, c, 11, 11, dtype=dtype))
        assert got == _named_cpu(HOST_CPU, n, c, k, h, dtype, channels_last), (n, c, k, h, channels_last)


def test_checks_arguments_like_the_forward():
    x, w, _ = make_inputs(2, 3, 8, 32, 32)
    with pytest.raises(RuntimeError, match="11x11"):
        alexop.kernel_for(x, w[..., :5, :5])
    with pytest.raises(RuntimeError, match="padding >= 0"):
        alexop.kernel_for(x, w, -1)
    with pytest.raises(RuntimeError, match="input channels"):
        alexop.kernel_for(x[:, :2], w)


def test_schema():
    schema = str(torch.ops.alexop._kernel_for.default._schema)
    assert schema == "alexop::_kernel_for(Tensor input, Tensor weight, int padding=2) -> str[]"


def test_exported():
    assert "kernel_for" in alexop.__all__


# AlexNet's first layer: batch 256, 3 -> 96 channels, 224 x 224, padding 2.
ALEXNET = (256, 3, 96, 224, 224, 2)

# (dtype, float32 matmul precision) -> names of (forward, weight_grad,
# input_grad) on sm_90a (H100 / H200), then on A100 (108 SMs, 163 KB of
# shared memory a block: the fp32 weights of 96 channels leave no room for a
# patch, so the fp32-accurate forwards split them into groups of 48 and TF32,
# which has no split, goes to cuDNN; the fp32 input gradient's weights and
# stage buffers do not fit either).
EXPECTED = {
    (torch.bfloat16, "highest"): (
        ("fwd_planes_bf16_c96", "wgrad_planes_bf16_c96", "dgrad_gmma_bf16"),
        ("fwd_mma_bf16_pairs_c96", "wgrad_mma_bf16_pairs_c96", "dgrad_mma_bf16"),
    ),
    (torch.float16, "highest"): (
        ("fwd_planes_fp16_c96", "wgrad_planes_fp16_c96", "dgrad_gmma_fp16"),
        ("fwd_mma_fp16_pairs_c96", "wgrad_mma_fp16_pairs_c96", "dgrad_mma_fp16"),
    ),
    (torch.float32, "highest"): (
        ("fwd_gmma_3xfp16_c96", "wgrad_gmma_3xfp16_c96_vec", "dgrad_gmma_3xfp16"),
        ("fwd_mma_3xtf32_split_g48", "wgrad_mma_3xtf32_c96", "dgrad_cublas_fold"),
    ),
    (torch.float32, "high"): (
        ("fwd_gmma_3xfp16_c96", "wgrad_gmma_tf32_c96_vec", "dgrad_mma_tf32"),
        ("fwd_mma_bf16x3_split_g48", "wgrad_mma_tf32_c96", "dgrad_cublas_fold"),
    ),
    (torch.float32, "medium"): (
        ("fwd_planes_tf32_c96", "wgrad_gmma_tf32_c96_vec", "dgrad_mma_tf32"),
        ("fwd_cudnn", "wgrad_mma_tf32_c96", "dgrad_cublas_fold"),
    ),
}


@pytest.fixture
def gpu():
    """Which column of EXPECTED this GPU takes: 0 for sm_90 (the default build
    carries sm_90a code), 1 for A100; other GPUs skip."""
    if sm80_kernels_forced():
        pytest.skip("sm_80 kernels forced on this GPU: an sm_80 choice with its shared memory, unlike either column")
    major, minor = torch.cuda.get_device_capability()
    if major == 9:
        if not wgmma_kernels_run():
            pytest.skip("this build carries no sm_90a code: an sm_80 choice with sm_90's shared memory")
        return 0
    if (major, minor) == (8, 0):
        return 1
    pytest.skip("expectations are written for sm_90 (H100 / H200) and sm_80 (A100)")


def _names(n, c, k, h, w, p, dtype, precision, channels_last=False):
    x = torch.empty(n, c, h, w, device="cuda", dtype=dtype)
    if channels_last:
        x = x.to(memory_format=torch.channels_last)
    wt = torch.empty(k, c, 11, 11, device="cuda", dtype=dtype)
    saved = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision(precision)
    try:
        return alexop.kernel_for(x, wt, p)
    finally:
        torch.set_float32_matmul_precision(saved)


@needs_cuda
@pytest.mark.parametrize("case", list(EXPECTED), ids=lambda c: f"{str(c[0])[6:]}-{c[1]}")
def test_alexnet_selection(case, gpu):
    dtype, precision = case
    assert guesses(_names(*ALEXNET, dtype, precision)) == dict(zip(KEYS, EXPECTED[case][gpu]))


@needs_cuda
def test_hopper_channels_last_and_small_batch(gpu):
    if gpu != 0:
        pytest.skip("sm_90 expectations")
    # 16-bit channels_last: the weight gradient transposes the input first and reads
    # grad_output (channels_last, as the output) in place
    assert guesses(_names(*ALEXNET, torch.bfloat16, "highest", channels_last=True)) == {
        "forward": "fwd_planes_bf16_c96",
        "weight_grad": "nhwc3_to_nchw+wgrad_planes_bf16_c96_dynhwc",
        "input_grad": "dgrad_gmma_bf16",
    }
    # fp32 channels_last rows are not 16-byte copies; grad_output is read channels_last
    names = guesses(_names(*ALEXNET, torch.float32, "highest", channels_last=True))
    assert names["weight_grad"] == "wgrad_gmma_3xfp16_c96_dynhwc"
    # one image: too few tiles for 3xFP16; 3xTF32 in channel groups of 16
    assert guesses(_names(1, 3, 96, 224, 224, 2, torch.float32, "highest"))["forward"] == "fwd_mma_3xtf32_split_g16"


@needs_cuda
def test_outside_the_tensor_core_kernels():
    names = _names(2, 3, 96, 64, 64, 2, torch.float64, "highest")
    assert names == {"forward": "fwd_generic", "weight_grad": "wgrad_generic", "input_grad": "dgrad_cublas_fold"}
    names = _names(0, 3, 96, 64, 64, 2, torch.float32, "highest")
    assert names["forward"] == "none" and names["input_grad"] == "none"


# _kernel_for_gpu: the same selectors for a GPU named rather than present, from the sizes,
# dtypes and layouts of meta tensors, so the selection expectations run without a GPU (CI);
# on an H100 / H200 or A100 of the named kind's SM count both answers must agree.
named_gpus = pytest.mark.skipif(
    not torch._C._dispatch_has_kernel_for_dispatch_key("alexop::_kernel_for_gpu", "CompositeExplicitAutograd"),
    reason="a CPU-only build has no CUDA selectors",
)
NAMED = {0: "h100", 1: "a100"}


def _named(gpu, n, c, k, h, w, p, dtype, mode, channels_last=False):
    x = torch.empty(n, c, h, w, device="meta", dtype=dtype)
    if channels_last:
        x = x.to(memory_format=torch.channels_last)
    with precision(mode):
        return dict(zip(KEYS, torch.ops.alexop._kernel_for_gpu(x, torch.empty(k, c, 11, 11, device="meta",
                                                                                   dtype=dtype), p, gpu)))


def _named_selection(gpu):
    """test_every_shape's _selection, for a named GPU."""
    return lambda n, c, k, hw, p, dtype, mode, channels_last=False: _named(gpu, n, c, k, *hw, p, dtype, mode,
                                                                          channels_last)


@named_gpus
@pytest.mark.parametrize("gpu", ["h100", "a100", "b200", "rtx5090"])
@pytest.mark.parametrize("dtype,mode,bound", MODES)
def test_no_grid_shape_falls_to_the_reference_kernels_by_name(gpu, dtype, mode, bound):
    slow = grid_on_reference_kernels(_named_selection(gpu), dtype, mode)
    assert not slow, f"{len(slow)} problems on the reference kernels, e.g. {next(iter(slow.items()))}"


@named_gpus
@pytest.mark.parametrize("gpu", ["h100", "a100"])
@pytest.mark.parametrize("c,k,want,on_hopper", FIRST_LAYER_CHOICES)
def test_first_layer_choices_by_name(gpu, c, k, want, on_hopper):
    names = _named(gpu, 64, c, k, 224, 224, 2, torch.bfloat16, "highest")
    assert names["forward"].startswith(on_hopper if gpu == "h100" else want), names


@named_gpus
@pytest.mark.parametrize("c,mode", list(SLICED), ids=lambda v: str(v))
def test_channel_slices_selection_by_name(c, mode):
    check_channel_slices(_named_selection("h100"), c, mode, hopper=True)


# 16-bit inputs of odd width: the weight gradient takes a copy one zero column wider ("widen+"),
# 3 channels and 1 or 2, on Hopper and the A100 alike; on Hopper, outputs 48-55 wide of an even
# padding (227 x 227, no padding: Caffe's AlexNet) on phase planes, 1 or 2 channels as they are.
@named_gpus
@pytest.mark.parametrize("gpu", ["h100", "a100"])
@pytest.mark.parametrize("c", [1, 2, 3])
@pytest.mark.parametrize("hw,p", [(127, 0), (227, 2), (63, 5), (227, 0)], ids=["127p0", "227p2", "63p5", "227p0"])
def test_odd_width_weight_grad_widened_by_name(gpu, c, hw, p):
    names = _named(gpu, 64, c, 96, hw, hw, p, torch.bfloat16, "highest")
    assert "widen+" in names["weight_grad"] and "strided" not in names["weight_grad"], names
    if gpu == "h100" and (hw, p) == (227, 0):
        assert guesses(names)["weight_grad"] == f"widen+wgrad_planes_bf16{'' if c == 3 else f'_{c}ch'}_c96", names


# Their 3-channel forward on Hopper: the phase planes on the widened copy, of either layout and
# beyond 96 filters, except a channels_last input that fills the staged gather kernel, which
# reads it in place.
@named_gpus
@pytest.mark.parametrize("n,k,channels_last,want", [
    (64, 96, False, "widen+fwd_planes_bf16_c96"), (8, 96, True, "widen+fwd_planes_bf16_c96"),
    (64, 192, True, "widen+fwd_planes_bf16_split_g96"), (64, 96, True, "fwd_gmma_staged_bf16_c96")])
def test_odd_width_forward_by_name(n, k, channels_last, want):
    names = _named("h100", n, 3, k, 227, 227, 0, torch.bfloat16, "highest", channels_last)
    assert guesses(names)["forward"] == want, names


# 16-bit NCHW rows not of whole 16-byte units (odd widths; outputs not 48-55 wide) reach the
# gather kernels on a copy of rows widened to whole units ("widen+") where the staged kernel
# fills the GPU and the widened rows take space-to-depth or the staged kernel with more than 64
# filters, and where too few tiles for the staged kernel run the two-CTA kernel on rows wider
# than 64; channels_last inputs, rows of 63, the two-CTA kernel on tiles that fill the GPU
# (rows too wide for the staged kernel) and up to 64 filters on the staged kernel as they are.
@named_gpus
@pytest.mark.parametrize("n,k,hw,p,channels_last,want", [
    (64, 96, 227, 2, False, "widen+fwd_s2d_bf16_c96"), (64, 96, 227, 5, False, "widen+fwd_gmma_staged_bf16_c96"),
    (64, 64, 299, 2, False, "fwd_gmma_staged_bf16_pairs_c64"), (64, 80, 299, 2, False, "widen+fwd_gmma_staged_bf16_pairs_c96"),
    (16, 96, 1023, 2, False, "fwd_gmma_2cta_bf16_pairs_c96"), (64, 96, 227, 5, True, "fwd_gmma_staged_bf16_c96"),
    (16, 96, 227, 2, False, "widen+fwd_gmma_2cta_bf16_pairs_c96"), (64, 96, 224, 5, False, "fwd_gmma_staged_bf16_c96"),
    (64, 96, 127, 2, False, "widen+fwd_gmma_2cta_bf16_pairs_c96"), (1, 64, 227, 2, False, "widen+fwd_gmma_2cta_bf16_pairs_c64"),
    (64, 96, 127, 2, True, "fwd_gmma_2cta_bf16_c96"), (64, 96, 63, 2, False, "fwd_gmma_2cta_bf16_pairs_c96")])
def test_gather_widened_rows_by_name(n, k, hw, p, channels_last, want):
    names = _named("h100", n, 3, k, hw, hw, p, torch.bfloat16, "highest", channels_last)
    assert guesses(names)["forward"] == want, names


@named_gpus
@pytest.mark.parametrize("dtype,mode,bound", MODES)
def test_three_channel_forwards_run_alexop_kernels_by_name(dtype, mode, bound):
    on_cudnn = three_channel_forwards_on_cudnn(_named_selection("h100"), dtype, mode)
    assert not on_cudnn, f"{len(on_cudnn)} 3-channel forwards on cuDNN, e.g. {on_cudnn[:3]}"


@named_gpus
@pytest.mark.parametrize("column", list(NAMED), ids=NAMED.get)
@pytest.mark.parametrize("case", list(EXPECTED), ids=lambda c: f"{str(c[0])[6:]}-{c[1]}")
def test_alexnet_selection_by_name(case, column):
    dtype, mode = case
    assert guesses(_named(NAMED[column], *ALEXNET, dtype, mode)) == dict(zip(KEYS, EXPECTED[case][column]))


@named_gpus
@pytest.mark.parametrize("c,k,mode,channels_last,want", HOPPER_CHUNK_CHOICES)
def test_chunk_kernel_choices_by_name(c, k, mode, channels_last, want):
    dtype = torch.bfloat16 if mode == "bf16" else torch.float32
    assert guesses(_named("h100", 64, c, k, 224, 224, 2, dtype, "medium", channels_last))["forward"] == want


@named_gpus
@pytest.mark.parametrize("gpu", ["h100", "a100"])
@pytest.mark.parametrize("n,c,k,hw,mode,channels_last,want", WEIGHT_GRAD_SLICE_CHOICES)
def test_weight_grad_slices_by_name(gpu, n, c, k, hw, mode, channels_last, want):
    dtype = torch.bfloat16 if mode == "bf16" else torch.float32
    names = _named(gpu, n, c, k, hw, hw, 2, dtype, "medium" if mode == "tf32" else "highest", channels_last)
    assert names["weight_grad"].startswith(want), names


@named_gpus
def test_named_gpu_checks_its_arguments():
    schema = str(torch.ops.alexop._kernel_for_gpu.default._schema)
    assert schema == "alexop::_kernel_for_gpu(Tensor input, Tensor weight, int padding, str gpu) -> str[]"
    with pytest.raises(RuntimeError, match='expected gpu to be one of "h100", .*"rtx5090", but got "v100"'):
        _named("v100", *ALEXNET, torch.float32, "highest")
    with pytest.raises(RuntimeError, match="padding >= 0"):
        _named("h100", 2, 3, 96, 64, 64, -1, torch.float32, "highest")


@named_gpus
@needs_cuda
@pytest.mark.parametrize(
    "shape", [ALEXNET, (64, 4, 128, 224, 224, 2), (64, 16, 64, 127, 127, 1), (8, 1, 96, 512, 512, 0),
              (1, 3, 96, 224, 224, 2), (3, 5, 96, 27, 1024, 2)], ids=str)
@pytest.mark.parametrize("dtype,mode", list(EXPECTED))
@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "nhwc"])
def test_named_gpu_agrees_with_this_gpu(gpu, shape, dtype, mode, channels_last):
    sms = {0: 132, 1: 108}[gpu]
    if torch.cuda.get_device_properties(0).multi_processor_count != sms:
        pytest.skip(f"the named kind has {sms} SMs")
    assert _named(NAMED[gpu], *shape, dtype, mode, channels_last) == _names(*shape, dtype, mode, channels_last)


# The weight gradient's two timed choices by name: at 1-16 channels both, the guess first, on
# every GPU with alexop's kernels; one name where nothing is timed (17 channels, float64) or
# where cuDNN alone runs: float images of at most 256 output pixels, but in TF32 those of 3
# channels and 64 or 96 filters on wgmma (their kernel beats cuDNN's implicit GEMM there).
# In fp32 "highest" there, images a third of a unit (64 pixels) wide are packed side by side, as
# many as one unit takes ("pack<r>+"), three or more: not TF32 nor 16-bit, nor 127 x 127 (two).
# (gpu, N, C_in, C_out, side, dtype, precision, channels_last) -> name.
TIMED_WEIGHT_GRAD_NAMES = [
    (("h100", 16, 8, 64, 126, torch.bfloat16, "highest", True), "slice3x3+wgrad_gmma_bf16_c64_dynhwc|wgrad_cudnn"),
    (("h100", 8, 12, 96, 224, torch.bfloat16, "highest", False), "wgrad_cudnn|slice3x4+wgrad_gmma_bf16_c96_vec"),
    (("a100", 8, 12, 96, 224, torch.bfloat16, "highest", False), "wgrad_cudnn|slice3x4+wgrad_mma_bf16_pairs_c96"),
    (("h100", 8, 5, 96, 100, torch.float32, "medium", False), "slice3x2+wgrad_gmma_tf32_c96_vec|wgrad_cudnn"),
    (("h100", 4, 7, 64, 127, torch.bfloat16, "highest", False), "wgrad_cudnn|slice3x3+widen+wgrad_gmma_bf16_c64_vec"),
    (("h100", 8, 5, 96, 100, torch.float32, "highest", False), "slice3x2+wgrad_gmma_3xfp16_c96_vec|wgrad_cudnn"),
    (("h100", 8, 3, 96, 224, torch.bfloat16, "highest", False), "wgrad_gmma_bf16_c96_vec|wgrad_cudnn"),
    (("h100", 4, 1, 64, 224, torch.bfloat16, "highest", False), "pad3+wgrad_gmma_bf16_c64_vec|wgrad_cudnn"),
    # cuDNN's full-fp32 kernels guessed at 1-2 channels beyond 96 filters; timed against slices
    (("h100", 8, 1, 128, 224, torch.float32, "highest", False),
     "wgrad_cudnn|pad3+kslice96x2+wgrad_gmma_3xfp16_c96_vec"),
    (("a100", 8, 1, 128, 224, torch.float32, "highest", False), "wgrad_cudnn|pad3+kslice96x2+wgrad_mma_3xtf32_c96"),
    (("h100", 8, 17, 96, 224, torch.bfloat16, "highest", False), "wgrad_cudnn"),
    (("h100", 8, 3, 96, 224, torch.float64, "highest", False), "wgrad_generic"),
    (("h100", 1, 3, 16, 63, torch.float32, "highest", False), "wgrad_cudnn"),
    (("h100", 64, 3, 96, 63, torch.float32, "highest", False), "pack3+wgrad_gmma_3xfp16_c96_vec|wgrad_cudnn"),
    (("h100", 64, 3, 96, 63, torch.float32, "medium", False), "wgrad_gmma_tf32_c96|wgrad_cudnn"),
    (("h200", 8, 3, 64, 63, torch.float32, "high", True), "wgrad_gmma_tf32_c64_dynhwc|wgrad_cudnn"),
    (("h200", 8, 3, 64, 63, torch.float32, "highest", True), "pack3+wgrad_gmma_3xfp16_c64_vec|wgrad_cudnn"),
    (("h100", 8, 3, 96, 127, torch.float32, "highest", False), "wgrad_gmma_3xfp16_c96|wgrad_cudnn"),
    (("h100", 2, 3, 96, 63, torch.float32, "highest", False), "wgrad_cudnn"),
    (("h100", 1, 3, 96, 63, torch.float32, "medium", False), "wgrad_gmma_tf32_c96|wgrad_cudnn"),
    (("h100", 8, 1, 64, 63, torch.float32, "medium", False), "wgrad_cudnn"),
    (("h100", 64, 3, 200, 63, torch.float32, "medium", False), "wgrad_cudnn"),
    (("a100", 64, 3, 96, 63, torch.float32, "medium", False), "wgrad_cudnn"),
]


# The input gradient's two timed choices by name: alexop's own (its choice, or where that is
# cuDNN, slices of 3, else the cuBLAS GEMM + fold) and cuDNN, the guess first; up to 3 channels
# only where the guess is alexop's (one 3-channel image: cuDNN, untimed).
TIMED_INPUT_GRAD_NAMES = [
    (("h100", 8, 5, 16, 100, torch.bfloat16, "highest", True), "slice3x2+dgrad_gmma_bf16|dgrad_cudnn"),
    (("h100", 4, 12, 32, 100, torch.bfloat16, "highest", False), "dgrad_cublas_fold|dgrad_cudnn"),
    (("h100", 8, 4, 96, 100, torch.float32, "medium", False), "dgrad_cudnn|slice3x2+dgrad_mma_tf32"),
    (("a100", 8, 4, 96, 100, torch.float32, "medium", False), "dgrad_cudnn|dgrad_cublas_fold"),
    (("h100", 2, 20, 64, 67, torch.bfloat16, "highest", False), "dgrad_cublas_fold|dgrad_cudnn"),
    (("h100", 8, 4, 96, 100, torch.float32, "highest", False), "slice3x2+dgrad_gmma_3xfp16|dgrad_cudnn"),
    (("h100", 8, 3, 96, 224, torch.bfloat16, "highest", False), "dgrad_gmma_bf16|dgrad_cudnn"),
    (("h100", 4, 1, 64, 224, torch.bfloat16, "highest", False), "pad3+dgrad_gmma_bf16|dgrad_cudnn"),
    (("h100", 1, 3, 96, 224, torch.float32, "highest", False), "dgrad_cudnn"),
    (("h100", 8, 3, 96, 224, torch.float64, "highest", False), "dgrad_cublas_fold"),
]


# The forward's timed choices by name: every tensor-core guess is timed against cuDNN, the guess
# first; one name where cuDNN is the guess (17 channels; 8 channels of 192 filters on an A100; one
# small image of 1 or 2 channels fp32-accurate, where cuDNN's kernels are as quick as the chunks,
# which from 4 channels beat them), for float64 (the reference kernel) and for an empty batch.
TIMED_FORWARD_NAMES = [
    (("h100", 256, 3, 96, 224, torch.bfloat16, "highest", False), "fwd_planes_bf16_c96|fwd_cudnn"),
    (("a100", 256, 3, 96, 224, torch.float32, "highest", False), "fwd_mma_3xtf32_split_g48|fwd_cudnn"),
    (("h100", 1, 3, 96, 224, torch.float32, "high", False), "fwd_mma_bf16x3_split_g16|fwd_cudnn"),
    (("h100", 1, 8, 192, 224, torch.bfloat16, "highest", True), "nchw+fwd_gmma_chunks_bf16_split_g128|fwd_cudnn"),
    (("a100", 1, 8, 192, 224, torch.bfloat16, "highest", True), "fwd_cudnn"),
    (("h100", 3, 17, 32, 71, torch.float32, "highest", False), "fwd_cudnn"),
    (("h100", 1, 4, 96, 224, torch.float32, "highest", True), "nchw+fwd_gmma_chunks_3xfp16_c96|fwd_cudnn"),
    (("h100", 1, 5, 64, 127, torch.float32, "highest", False), "fwd_gmma_chunks_3xfp16_c64|fwd_cudnn"),
    (("h100", 1, 1, 96, 224, torch.float32, "highest", False), "fwd_cudnn"),
    (("h100", 1, 2, 64, 127, torch.float32, "highest", True), "fwd_cudnn"),
    (("h100", 2, 3, 96, 64, torch.float64, "highest", False), "fwd_generic"),
    (("h100", 0, 3, 96, 64, torch.float32, "highest", False), "none"),
]


@named_gpus
@pytest.mark.parametrize("op,case,want", [("forward", *t) for t in TIMED_FORWARD_NAMES] +
                         [("weight_grad", *t) for t in TIMED_WEIGHT_GRAD_NAMES] +
                         [("input_grad", *t) for t in TIMED_INPUT_GRAD_NAMES], ids=lambda v: str(v))
def test_timed_choices_by_name(op, case, want):
    gpu, n, c, k, side, dtype, mode, channels_last = case
    assert _named(gpu, n, c, k, side, side, 2, dtype, mode, channels_last)[op] == want


# Ada and Blackwell: the kernels were not measured against cuDNN there, so cuDNN is each op's
# guess (what runs untimed) and alexop's sm_80 kernels, chosen for the GPU's SMs and shared
# memory, the alternative its first call times ("fwd_cudnn|fwd_mma_..."); never an sm_90a kernel
# (wgmma, phase planes, space-to-depth) nor the reference.
UNMEASURED = ["l4", "rtx4090", "b200", "rtx5090"]
CUDNN_NAMES = {"forward": "fwd_cudnn", "weight_grad": "wgrad_cudnn", "input_grad": "dgrad_cudnn"}


@named_gpus
@pytest.mark.parametrize("gpu", UNMEASURED)
@pytest.mark.parametrize("case", list(EXPECTED), ids=lambda c: f"{str(c[0])[6:]}-{c[1]}")
def test_unmeasured_gpus_guess_cudnn(gpu, case):
    dtype, mode = case
    for shape in (ALEXNET, (64, 1, 64, 224, 224, 2), (8, 4, 128, 127, 127, 2), (1, 16, 384, 240, 320, 0)):
        names = _named(gpu, *shape, dtype, mode)
        assert guesses(names) == CUDNN_NAMES, (shape, names)
        mine = "".join(name.split("|", 1)[1] for name in names.values() if "|" in name)
        assert not any(k in mine for k in ("gmma", "planes", "s2d", "generic")), (shape, names)


# AlexNet's layer in bf16: the B200 (227 KB of shared memory a block) has the A100's kernels; with
# 99 KB (RTX 5090, like the L4 and RTX 4090) the forward takes channel groups of 64 (96 do not
# fit), and the input gradient's kernel does not fit (the cuBLAS GEMM + fold instead).
UNMEASURED_ALEXNET_BF16 = {
    "b200": {"forward": "fwd_cudnn|fwd_mma_bf16_pairs_c96", "weight_grad": "wgrad_cudnn|wgrad_mma_bf16_pairs_c96",
             "input_grad": "dgrad_cudnn|dgrad_mma_bf16"},
    "rtx5090": {"forward": "fwd_cudnn|fwd_mma_bf16_pairs_split_g64", "weight_grad": "wgrad_cudnn|wgrad_mma_bf16_pairs_c96",
                "input_grad": "dgrad_cudnn|dgrad_cublas_fold"},
}


@named_gpus
@pytest.mark.parametrize("gpu", list(UNMEASURED_ALEXNET_BF16))
def test_unmeasured_gpus_alexnet_alternatives(gpu):
    assert _named(gpu, *ALEXNET, torch.bfloat16, "highest") == UNMEASURED_ALEXNET_BF16[gpu]


@named_gpus
def test_unmeasured_gpus_keep_the_reference_for_float64():
    for gpu in UNMEASURED:
        names = _named(gpu, 2, 3, 96, 64, 64, 2, torch.float64, "highest")
        assert names == {"forward": "fwd_generic", "weight_grad": "wgrad_generic", "input_grad": "dgrad_cublas_fold"}

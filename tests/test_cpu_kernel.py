"""The CPU kernels: every shape, layout and instruction set against float64 F.conv2d, deterministic."""

import pytest
import torch
import torch.nn.functional as F

import alexop
from conftest import (HOST_CPU, HOST_ISA, NATIVE_16BIT_CPU, REL_L2, assert_layout_like, assert_matches, grads_reference, guesses,
                      make_inputs, reference, rel_l2, untimed)
from test_nonfinite import _poison, assert_nonfinite_match

# alexop picks the best instruction set the CPU has; ALEXOP_CPU_CAPABILITY lowers it, and makes
# alexop's kernels run for every shape (no ATen where they would be the slower).
ISAS = ["avx512", "avx2", "default"]


@pytest.fixture(params=ISAS)
def isa(request, monkeypatch):
    monkeypatch.setenv("ALEXOP_CPU_CAPABILITY", request.param)
    return request.param


def _grads(x, wt, b, grad, padding):
    leaves = [t.detach().clone().requires_grad_() for t in (x, wt, b)]
    out = alexop.conv11s4(*leaves, padding)
    return torch.autograd.grad(out, leaves, grad)


def _grads_reference(x, wt, b, grad, padding):
    leaves = [t.detach().double().requires_grad_() for t in (x, wt, b)]
    out = F.conv2d(*leaves, stride=4, padding=padding)
    return torch.autograd.grad(out, leaves, grad.double())


def _check_all(x, wt, b, padding, dtype):
    out = alexop.conv11s4(x, wt, b, padding)
    ref = reference(x, wt, b, padding)
    assert_layout_like(out, ref)
    assert_matches(out, ref, dtype)
    grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64).to(dtype)
    for name, got, want in zip(("input", "weight", "bias"), _grads(x, wt, b, grad, padding),
                               _grads_reference(x, wt, b, grad, padding)):
        assert got.dtype == dtype and got.shape == want.shape, name
        assert rel_l2(got, want) <= REL_L2[dtype], name


# (N, C_in, C_out, H, W, padding): odd and non-square sizes, every padding 0..5, channel counts
# that fill register blocks exactly and that leave partial ones, tile tails of every length.
SHAPES = [
    (1, 1, 1, 11, 11, 0),
    (2, 1, 5, 13, 30, 1),
    (1, 2, 16, 23, 19, 2),
    (3, 3, 96, 35, 37, 2),
    (2, 3, 64, 29, 41, 3),
    (1, 4, 33, 20, 27, 4),
    (2, 3, 48, 31, 17, 5),
    (1, 16, 384, 19, 23, 2),
    (1, 7, 130, 15, 47, 1),
    (2, 12, 17, 26, 12, 0),
    # 5 and 7 vectors of filters (80 and 112 at 16 lanes, 40 and 56 at 8) and of the input
    # gradient's 16 phases x channels (5 and 7 channels at 16 lanes): blocks of 2-4 vectors with
    # a zero-padded one
    (2, 5, 80, 33, 29, 2),
    (1, 7, 112, 27, 35, 1),
    (1, 2, 40, 21, 25, 3),
    (2, 3, 56, 24, 22, 4),
    # the Winograd forward with tiles in lanes (one channel): vectors of 16 tiles across tile rows
    # of 13, 28 and 5 tiles, 12-filter blocks and tails, odd rows
    (2, 1, 13, 127, 101, 5),
    (1, 1, 25, 99, 230, 0),
    (3, 1, 12, 47, 39, 3),
]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "n{}c{}k{}_{}x{}p{}".format(*s))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
def test_matches_conv2d_on_every_instruction_set(isa, shape, dtype):
    n, c, k, h, w, p = shape
    _check_all(*make_inputs(n, c, k, h, w, dtype=dtype, seed=hash(shape) % 1000), p, dtype)


def _every_other_column(x):
    wide = x.new_zeros(*x.shape[:3], 2 * x.shape[3])
    wide[..., ::2] = x
    return wide[..., ::2]


LAYOUTS = {
    "channels_last": lambda x: x.to(memory_format=torch.channels_last),
    "every other column": _every_other_column,
    "column-major planes": lambda x: x.transpose(2, 3).contiguous().transpose(2, 3),
}


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("shape", [(2, 3, 40, 37, 45, 2), (1, 4, 33, 20, 27, 4)], ids=["k40", "k33"])
def test_input_layouts(isa, layout, shape):
    n, c, k, h, w, p = shape
    x, wt, b = make_inputs(n, c, k, h, w)
    _check_all(LAYOUTS[layout](x), wt, b, p, torch.float32)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
def test_channels_last_weight(isa, dtype):
    """A channels_last weight makes the result channels_last (F.conv2d's rule) from an NCHW input."""
    x, wt, b = make_inputs(2, 3, 50, 41, 39, dtype=dtype)
    _check_all(x, wt.to(memory_format=torch.channels_last), b, 1, dtype)


def test_grad_output_layouts(isa):
    x, wt, b = make_inputs(2, 3, 24, 33, 29)
    out = alexop.conv11s4(x, wt, b)
    base = torch.randn(out.shape)
    for grad in (base.to(memory_format=torch.channels_last), base.transpose(2, 3).contiguous().transpose(2, 3)):
        for got, want in zip(_grads(x, wt, b, grad, 2), _grads_reference(x, wt, b, base, 2)):
            assert rel_l2(got, want) <= REL_L2[torch.float32]


def test_alexnet_layer(isa):
    _check_all(*make_inputs(1, 3, 96, 224, 224), 2, torch.float32)


@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "nhwc"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_aten_where_alexop_is_slower(channels_last, dtype):
    """Shapes whose ops go to ATen (few pixels and filters; many channels for the input
    gradient) compute F.conv2d as alexop's kernels do: NCHW results, float64's values."""
    x, wt, b = make_inputs(2, 9, 16, 47, 39, dtype=dtype)
    assert set(guesses(alexop.kernel_for(x, wt, 1)).values()) == {"cpu_fwd_aten", "cpu_wgrad_aten", "cpu_dgrad_aten"}
    if channels_last:
        x = x.to(memory_format=torch.channels_last)
    _check_all(x, wt, b, 1, dtype)
    grad = torch.randn(2, 16, 10, 8).to(dtype)
    gw, gb = torch.ops.alexop.conv11s4_backward_weight(grad, x, 1, False)
    assert gw.is_contiguous() and gb.shape == (0,)


def test_empty_batch():
    x, wt, b = make_inputs(0, 3, 8, 31, 31)
    out = alexop.conv11s4(x, wt, b)
    assert out.shape == (0, 8, 7, 7)
    gx, gw, gb = _grads(x, wt, b, torch.ones(out.shape), 2)
    assert gx.shape == x.shape and not gw.any() and not gb.any()


def _bits(threads, isa_name, monkeypatch):
    monkeypatch.setenv("ALEXOP_CPU_CAPABILITY", isa_name)
    x, wt, b = make_inputs(4, 3, 40, 61, 53)
    grad = torch.randn(4, 40, 14, 12, generator=torch.Generator().manual_seed(2))
    saved = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return [alexop.conv11s4(x, wt, b), *_grads(x, wt, b, grad, 2)]
    finally:
        torch.set_num_threads(saved)


@pytest.mark.parametrize("isa_name", ISAS)
def test_deterministic_across_runs_and_thread_counts(isa_name, monkeypatch):
    first = _bits(2, isa_name, monkeypatch)
    for threads in (2, 1):
        again = _bits(threads, isa_name, monkeypatch)
        assert all(torch.equal(a, f) for a, f in zip(again, first)), threads


# Winograd and the space-to-depth input gradient fall back to other kernels
# (or add terms one by one) where results come out non-finite: the patterns of
# +Inf, -Inf and NaN are F.conv2d's on every instruction set, with the
# non-finite values in the images, grad_output or the weights; on AVX-512 the one-channel forward
# has tiles in lanes, the three-channel one output channels.
@pytest.mark.parametrize("poisoned", ["input", "grad_output", "weight"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("shape", [(2, 1, 20, 61, 67), (2, 3, 20, 61, 67)], ids=["c1", "c3"])
def test_nonfinite_where_conv2d_is(isa, poisoned, dtype, shape):
    x, wt, b = make_inputs(*shape, dtype=dtype)
    grad = torch.randn(reference(x, wt, b).shape, generator=torch.Generator().manual_seed(3), dtype=dtype)
    if poisoned == "input":
        x = _poison(x)
    elif poisoned == "grad_output":
        grad = _poison(grad)
    else:
        wt = _poison(wt)
    leaves = [t.detach().requires_grad_() for t in (x, wt, b)]
    out = alexop.conv11s4(*leaves)
    assert_nonfinite_match(out, reference(x, wt, b), REL_L2[dtype], "output")
    got = torch.autograd.grad(out, leaves, grad)
    for name, g, r in zip(("input", "weight", "bias"), got, grads_reference(x, wt, b, grad, 2)):
        assert_nonfinite_match(g, r, REL_L2[dtype], f"{name} gradient")


def test_reduced_dtypes_match_float32():
    x, wt, b = make_inputs(2, 3, 16, 27, 27)
    want = alexop.conv11s4(x, wt, b)
    for dtype in (torch.float16, torch.bfloat16):
        got = alexop.conv11s4(x.to(dtype), wt.to(dtype), b.to(dtype))
        assert got.dtype == dtype
        assert_matches(got, reference(x.to(dtype), wt.to(dtype), b.to(dtype)), dtype)
        assert rel_l2(got, want) <= REL_L2[dtype]


# Where ATen runs float16 / bfloat16 on native kernels, the forward and weight gradient are ATen's
# own in that dtype, bit for bit what F.conv2d and its autograd give; the input gradient of 1-2
# channels stays alexop's (in float32) but on AMX, within the dtype's bound of float64. Untimed:
# those are the guesses, and a first call's timing may choose otherwise.
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "nhwc"])
def test_native_16bit_runs_aten(dtype, channels_last):
    if not NATIVE_16BIT_CPU[dtype]:
        pytest.skip(f"ATen runs {dtype} on no native kernels on this CPU")
    x, wt, b = make_inputs(4, 2, 64, 67, 71, dtype=dtype)
    if channels_last:
        x = x.to(memory_format=torch.channels_last)
    names = guesses(alexop.kernel_for(x, wt, 2))
    assert (names["forward"], names["weight_grad"]) == ("cpu_fwd_aten", "cpu_wgrad_aten")
    amx = HOST_CPU.startswith("amx")
    assert names["input_grad"].startswith("cpu_dgrad_aten" if amx else "cpu_dgrad_s2d_")
    grad = torch.randn(4, 64, 16, 17).to(dtype)
    with untimed():
        got = _grads(x, wt, b, grad, 2)
        out = alexop.conv11s4(x, wt, b, 2)
    leaves = [t.detach().clone().requires_grad_() for t in (x, wt, b)]
    want = torch.autograd.grad(F.conv2d(*leaves, stride=4, padding=2), leaves, grad)
    assert torch.equal(out, F.conv2d(x, wt, b, stride=4, padding=2))
    assert torch.equal(got[1], want[1]) and torch.equal(got[2], want[2])
    assert torch.equal(got[0], want[0]) or not amx
    for name, g, r in zip(("input", "weight", "bias"), got, grads_reference(x, wt, b, grad, 2)):
        assert rel_l2(g, r) <= REL_L2[dtype], name


# Where ATen computes a 16-bit result natively, a result with Inf or NaN anywhere is computed again
# by alexop's kernels (oneDNN's do not place them where float64 F.conv2d does): here they lie in the
# last image only, the end of the scan for them. With one channel the input and weights are the
# smaller tensors, read instead of the output: the Inf there sends it to the output's scan.
@pytest.mark.parametrize("c", [1, 3])
@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "nhwc"])
def test_native_16bit_nonfinite_in_the_last_image(channels_last, c):
    if not NATIVE_16BIT_CPU[torch.bfloat16]:
        pytest.skip("ATen runs bfloat16 on no native kernels on this CPU")
    n, k, h, w = 2, 64, 127, 127
    x, wt, b = make_inputs(n, c, k, h, w, dtype=torch.bfloat16)
    x[n - 1, 0, h // 3, w // 3] = float("inf")
    x[n - 1, c - 1, h // 3 + 3, w // 3 + 6] = -float("inf")
    if channels_last:
        x = x.to(memory_format=torch.channels_last)
    with untimed():
        assert guesses(alexop.kernel_for(x, wt, 2))["forward"] == "cpu_fwd_aten"
        out = alexop.conv11s4(x, wt, b, 2)
    assert_nonfinite_match(out, reference(x, wt, b, 2), REL_L2[torch.bfloat16], "output")


# Finite operands whose products could reach bfloat16's largest value: the output itself is read.
# Where it is finite it is ATen's, bit for bit F.conv2d's; where a product overflows, alexop's,
# with Inf where float64 F.conv2d rounded to bfloat16 has it.
@pytest.mark.parametrize("overflow", [False, True], ids=["finite", "overflow"])
def test_native_16bit_large_operands(overflow):
    if not NATIVE_16BIT_CPU[torch.bfloat16]:
        pytest.skip("ATen runs bfloat16 on no native kernels on this CPU")
    x, wt, b = make_inputs(2, 1, 64, 127, 127, dtype=torch.bfloat16)
    x[1, 0, 63, 63] = 3e38 if overflow else 1e36  # under tap (5, 5) of output (15, 15)
    wt[:, 0, 5, 5] = 2.0
    with untimed():
        out = alexop.conv11s4(x, wt, b, 2)
    ref = reference(x, wt, b, 2).to(torch.bfloat16).double()
    assert ref.isinf().any() == overflow
    if overflow:
        assert_nonfinite_match(out, ref, REL_L2[torch.bfloat16], "output")
    else:
        assert torch.equal(out, F.conv2d(x, wt, b, stride=4, padding=2))


# oneDNN's native 16-bit kernels go wrong on outputs one column wide (weight gradients from
# channels_last inputs narrower than the padding on AVX512-BF16, forwards on AMX): there alexop
# computes in float32, within the dtype's bound of float64 where F.conv2d is not.
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("shape", [(2, 2, 64, 53, 3, 5), (3, 3, 7, 10, 1, 5), (1, 6, 7, 12, 3, 5),
                                   (3, 3, 1, 27, 12, 1), (2, 2, 7, 30, 7, 2)], ids=str)
def test_outputs_one_column_wide_in_16bit(dtype, shape):
    n, c, k, h, w, p = shape
    x, wt, b = make_inputs(n, c, k, h, w, dtype=dtype)
    x, wt = (t.to(memory_format=torch.channels_last) for t in (x, wt))
    grad = torch.randn(n, k, (h + 2 * p - 11) // 4 + 1, 1).to(dtype, memory_format=torch.channels_last)
    assert_matches(alexop.conv11s4(x, wt, b, p), reference(x, wt, b, p), dtype)
    for name, g, r in zip(("input", "weight", "bias"), _grads(x, wt, b, grad, p), grads_reference(x, wt, b, grad, p)):
        assert rel_l2(g, r) <= REL_L2[dtype], name


def _ops(x, wt, b, grad, p):
    """The forward, input gradient, weight and bias gradients, each by its op."""
    return [alexop.conv11s4(x, wt, b, p), torch.ops.alexop.conv11s4_backward_input(grad, wt, x.shape, p),
            *torch.ops.alexop.conv11s4_backward_weight(grad, x, p, True)]


# A problem kernel_for names "guess|other": its first call times alexop's kernels against ATen's
# and the process keeps the faster. Every call's result is then bit for bit one of the two ways'
# (ATen's as F.conv2d and its autograd give it), the same one call after call; untimed
# (torch.backends.cudnn.deterministic or torch.use_deterministic_algorithms), the guess's.
# Shapes whose guesses are ATen's, alexop's and both, from both layouts.
@pytest.mark.parametrize("shape", [(2, 9, 16, 47, 39, 1), (1, 3, 96, 67, 67, 2), (2, 7, 256, 69, 69, 2)], ids=str)
@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "nhwc"])
def test_timed_choice_is_one_way_bit_for_bit(shape, channels_last, monkeypatch):
    monkeypatch.delenv("ALEXOP_CPU_CAPABILITY", raising=False)
    n, c, k, h, w, p = shape
    x, wt, b = make_inputs(n, c, k, h, w)
    grad = torch.randn(reference(x, wt, b, p).shape, generator=torch.Generator().manual_seed(4))
    if channels_last:
        x, grad = (t.to(memory_format=torch.channels_last) for t in (x, grad))
    names = alexop.kernel_for(x, wt, p)
    assert all("|" in name for name in names.values()), names
    leaves = [t.detach().clone().requires_grad_() for t in (x, wt, b)]
    out = F.conv2d(*leaves, stride=4, padding=p)
    aten = [out, *torch.autograd.grad(out, leaves, grad)]
    with monkeypatch.context() as m:
        m.setenv("ALEXOP_CPU_CAPABILITY", HOST_ISA)
        own = _ops(x, wt, b, grad, p)
    first, again = _ops(x, wt, b, grad, p), _ops(x, wt, b, grad, p)
    with untimed():
        guess = _ops(x, wt, b, grad, p)
    torch.use_deterministic_algorithms(True)
    try:
        deterministic = _ops(x, wt, b, grad, p)
    finally:
        torch.use_deterministic_algorithms(False)
    for op, parts in (("forward", [0]), ("input_grad", [1]), ("weight_grad", [2, 3])):
        ran = aten if all(torch.equal(first[j], aten[j]) for j in parts) else own
        want = aten if names[op].split("|")[0].endswith("_aten") else own
        for j in parts:
            assert torch.equal(first[j], ran[j]), op
            assert torch.equal(again[j], first[j]), op
            assert torch.equal(guess[j], want[j]) and torch.equal(deterministic[j], want[j]), op


def test_unknown_instruction_set_is_an_error(monkeypatch):
    monkeypatch.setenv("ALEXOP_CPU_CAPABILITY", "sse9")
    x, wt, b = make_inputs(1, 3, 4, 15, 15)
    with pytest.raises(RuntimeError, match=r"ALEXOP_CPU_CAPABILITY=sse9 is not an instruction set .* default, avx2 or avx512"):
        alexop.conv11s4(x, wt, b)

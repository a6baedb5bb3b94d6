"""Fuzz: random valid arguments (shapes, paddings, dtypes, memory layouts, with
and without bias) give float64 F.conv2d's output and gradients; random invalid
ones raise an error naming the op: never a crash, never a result. Fixed seeds,
so a failure names a case that reproduces."""

import random
import re

import pytest
import torch

import alexop
from conftest import assert_layout_like, assert_matches, grads_reference, make_inputs, needs_cuda, reference

OPS = torch.ops.alexop
# float32 and float64 twice as often as the 16-bit types.
DTYPES = [torch.float32, torch.float64, torch.float32, torch.float64, torch.float16, torch.bfloat16]
# Every refusal comes from alexop's own checks: C++ ("alexop.conv11s4...: "),
# Python ("alexop.conv11s4: ") or the schema's argument types ("alexop::conv11s4").
REFUSAL = r"^alexop(\.|::)conv11s4"


def _layout(t, rng):
    """t's values (or, for "expanded", its first slice repeated) in a random memory layout."""
    if t is None:
        return None
    kind = rng.choice(["contiguous", "channels_last", "permuted", "sliced", "offset", "expanded"])
    if kind == "channels_last" and t.dim() == 4:
        return t.contiguous(memory_format=torch.channels_last)
    if kind == "permuted":  # any order of dimensions in memory: channels_last, transposed, ...
        order = list(range(t.dim()))
        rng.shuffle(order)
        inverse = [order.index(d) for d in range(t.dim())]
        return t.permute(order).contiguous().permute(inverse)
    if kind == "sliced":  # every other element of a tensor twice as large
        big = t.new_zeros([2 * s for s in t.shape])
        view = big[tuple(slice(None, None, 2) for _ in t.shape)]
        view.copy_(t)
        return view
    if kind == "offset":  # a corner of a larger tensor, not at its start
        big = t.new_zeros([s + 1 for s in t.shape])
        view = big[tuple(slice(1, None) for _ in t.shape)]
        view.copy_(t)
        return view
    if kind == "expanded" and t.shape[0] > 0:  # stride 0 along the first dimension
        return t[:1].expand(t.shape)
    return t


def _valid_case(rng, device):
    n, c_in, c_out, p = rng.randint(0, 3), rng.randint(1, 5), rng.randint(1, 9), rng.randint(0, 6)
    smallest = max(1, 11 - 2 * p)
    h, w = rng.randint(smallest, 40), rng.randint(smallest, 40)
    dtype = rng.choice(DTYPES)
    x, wt, b = make_inputs(n, c_in, c_out, h, w, dtype, device, bias=rng.random() < 0.7, seed=rng.randrange(2**31))
    g = torch.Generator().manual_seed(rng.randrange(2**31))
    grad = torch.randn(n, c_out, (h + 2 * p - 11) // 4 + 1, (w + 2 * p - 11) // 4 + 1, generator=g)
    return (_layout(x, rng), _layout(wt, rng), _layout(b, rng), p), _layout(grad.to(device, dtype), rng)


def _check_valid(x, wt, b, p, grad):
    args = [None if t is None else t.detach().requires_grad_() for t in (x, wt, b)]
    out = alexop.conv11s4(*args, p)
    ref = reference(x, wt, b, p)
    assert_layout_like(out, ref)
    assert_matches(out, ref, x.dtype)
    got = torch.autograd.grad(out, [t for t in args if t is not None], grad)
    for g, r in zip(got, grads_reference(x, wt, b, grad, p)):
        assert_matches(g, r, x.dtype)


def _describe(t):
    if not isinstance(t, torch.Tensor):
        return repr(t)
    return f"Tensor{tuple(t.shape)} {t.dtype} strides {t.stride()} on {t.device}"


@pytest.mark.parametrize("device,cases", [("cpu", 300), pytest.param("cuda", 100, marks=needs_cuda)])
def test_random_valid_arguments_match_conv2d(device, cases):
    rng = random.Random(28)
    for i in range(cases):
        args, grad = _valid_case(rng, device)
        try:
            _check_valid(*args, grad)
        except AssertionError as e:
            raise AssertionError(f"case {i}: {[_describe(a) for a in args]}, grad_output {_describe(grad)}") from e


def _invalid_case(rng, device):
    """A valid case with one thing made wrong: (what, call)."""
    (x, wt, b, p), grad = _valid_case(rng, device)
    n, c_in, h, w = x.shape
    c_out = wt.shape[0]
    size = [n, c_in, h, w]
    other = "meta" if device != "meta" else "cpu"
    wrong_kernel = rng.choice([(k, k) for k in range(1, 16) if k != 11] + [(11, 7), (5, 11)])
    small_p = rng.randint(0, 4)
    too_small = x.new_zeros(n, c_in, rng.randint(1, 10 - 2 * small_p), w)
    mistakes = {
        "negative padding": lambda: alexop.conv11s4(x, wt, b, -rng.choice([1, rng.randint(2, 1000), 2 ** rng.randint(10, 63)])),
        "padding above 2**62 - 1": lambda: alexop.conv11s4(x, wt, b, rng.randint(2**62, 2**63 - 1)),
        "padding beyond int64": lambda: alexop.conv11s4(x, wt, b, rng.choice([1, -1]) * rng.randint(2**63 + 1, 2**80)),
        "float padding": lambda: alexop.conv11s4(x, wt, b, p + 0.5),
        "3-d input": lambda: alexop.conv11s4(x[0] if n else x.sum(0), wt, b, p),
        "5-d input": lambda: alexop.conv11s4(x[None], wt, b, p),
        "weight not 11x11": lambda: alexop.conv11s4(x, wt.new_zeros(c_out, c_in, *wrong_kernel), None, p),
        "channel mismatch": lambda: alexop.conv11s4(x, wt.new_zeros(c_out, c_in + rng.randint(1, 3), 11, 11), None, p),
        "no input channels": lambda: alexop.conv11s4(x[:, :0], wt[:, :0], b, p),
        "no output channels": lambda: alexop.conv11s4(x, wt[:0], None, p),
        "input too small": lambda: alexop.conv11s4(too_small, wt, b, small_p),
        "bias shape": lambda: alexop.conv11s4(x, wt, wt.new_zeros(c_out + rng.choice([-1, 1])), p),
        "2-d bias": lambda: alexop.conv11s4(x, wt, wt.new_zeros(1, c_out), p),
        "weight dtype": lambda: alexop.conv11s4(x, wt.to(torch.float64 if x.dtype != torch.float64 else torch.float32), b, p),
        "integer tensors": lambda: alexop.conv11s4(x.long(), wt.long(), None, p),
        "complex tensors": lambda: alexop.conv11s4(x.to(torch.complex64), wt.to(torch.complex64), None, p),
        "weight device": lambda: alexop.conv11s4(x, torch.zeros(wt.shape, dtype=wt.dtype, device=other), None, p),
        "None weight": lambda: OPS.conv11s4(x, None, b, p),
        "None input": lambda: OPS.conv11s4(None, wt, b, p),
        "input_size of 3": lambda: OPS.conv11s4_backward_input(grad, wt, size[1:], p),
        "negative input_size": lambda: OPS.conv11s4_backward_input(grad, wt, [n, c_in, -h, w], p),
        "input_size without channels": lambda: OPS.conv11s4_backward_input(grad, wt[:, :0], [n, 0, h, w], p),
        "grad_output shape (input)": lambda: OPS.conv11s4_backward_input(grad[..., 1:], wt, size, p),
        "grad_output dtype (input)": lambda: OPS.conv11s4_backward_input(grad.long(), wt, size, p),
        "padding (input)": lambda: OPS.conv11s4_backward_input(grad, wt, size, rng.choice([-1, 2**62])),
        "grad_output shape (weight)": lambda: OPS.conv11s4_backward_weight(grad[:, :, 1:], x, p, True),
        "grad_output without channels": lambda: OPS.conv11s4_backward_weight(grad[:, :0], x, p, True),
        "input 3-d (weight)": lambda: OPS.conv11s4_backward_weight(grad, x[0] if n else x.sum(0), p, False),
        "padding (weight)": lambda: OPS.conv11s4_backward_weight(grad, x, rng.choice([-1, 2**63 - 1]), True),
    }
    what = rng.choice(sorted(mistakes))
    return what, mistakes[what]


@pytest.mark.parametrize("device,cases", [("cpu", 500), ("meta", 200), pytest.param("cuda", 100, marks=needs_cuda)])
def test_random_invalid_arguments_raise_naming_the_op(device, cases):
    rng = random.Random(2800 + len(device))
    for i in range(cases):
        what, call = _invalid_case(rng, device)
        try:
            call()
        except (RuntimeError, ValueError, TypeError) as e:
            assert re.match(REFUSAL, str(e)), f"case {i} ({what}) raised an error not naming the op: {e!r}"
        else:
            pytest.fail(f"case {i} ({what}) returned instead of raising")

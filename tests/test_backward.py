"""Gradients: float64 gradcheck, float32 against F.conv2d, and only what is needed."""

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import alexop
from conftest import DEVICES, REL_L2, grads_reference, make_inputs, needs_cuda, rel_l2


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("size", [(11, 11, 0), (17, 22, 2), (23, 19, 3)], ids=str)
def test_gradcheck(device, bias, size):
    h, w, p = size
    x, wt, b = make_inputs(2, 2, 3, h, w, dtype=torch.float64, device=device, bias=bias)
    inputs = [t.requires_grad_() for t in (x, wt, b) if t is not None]

    def f(x, wt, b=None):
        return alexop.conv11s4(x, wt, b, p)

    assert torch.autograd.gradcheck(f, inputs)
    assert torch.autograd.gradgradcheck(f, inputs, fast_mode=True)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("n,c_in,c_out,h,w,p", [(1, 3, 96, 67, 67, 2), (5, 3, 64, 43, 58, 2), (2, 4, 7, 29, 31, 1)])
def test_float32_grads_match_conv2d(device, n, c_in, c_out, h, w, p):
    x, wt, b = make_inputs(n, c_in, c_out, h, w, device=device)
    for t in (x, wt, b):
        t.requires_grad_()
    out = alexop.conv11s4(x, wt, b, p)
    grad = torch.randn_like(out)
    got = torch.autograd.grad(out, (x, wt, b), grad)
    want = grads_reference(x, wt, b, grad, p)
    for name, g, r in zip(("input", "weight", "bias"), got, want):
        assert g.dtype == torch.float32 and g.shape == r.shape
        assert rel_l2(g, r) <= REL_L2[torch.float32], name


@pytest.mark.parametrize("device", DEVICES)
def test_grad_output_any_strides(device):
    x, wt, b = make_inputs(2, 3, 8, 31, 31, device=device)
    for t in (x, wt, b):
        t.requires_grad_()
    out = alexop.conv11s4(x, wt, b)
    base = torch.randn(out.shape[1], device=device)
    for grad in (
        base.view(1, -1, 1, 1).expand_as(out),  # zero strides, as .sum() hands in
        torch.randn_like(out).to(memory_format=torch.channels_last),
        torch.randn(*out.shape[:3], 2 * out.shape[3], device=device)[..., ::2],
    ):
        got = torch.autograd.grad(out, (x, wt, b), grad, retain_graph=True)
        want = grads_reference(x, wt, b, grad, 2)
        for g, r in zip(got, want):
            assert rel_l2(g, r) <= REL_L2[torch.float32]


class _OpLog(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func.overloadpacket))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "needs,expected",
    [
        # A first layer: images need no gradient, so no input gradient is computed.
        ({"weight", "bias"}, {"alexop.conv11s4_backward_weight"}),
        ({"input"}, {"alexop.conv11s4_backward_input"}),
        ({"input", "weight", "bias"}, {"alexop.conv11s4_backward_input", "alexop.conv11s4_backward_weight"}),
        ({"bias"}, set()),
    ],
    ids=["weight+bias", "input", "all", "bias"],
)
def test_only_needed_gradients_are_computed(device, needs, expected):
    x, wt, b = make_inputs(2, 3, 8, 31, 31, device=device)
    named = {"input": x, "weight": wt, "bias": b}
    for name in needs:
        named[name].requires_grad_()
    out = alexop.conv11s4(x, wt, b)
    with _OpLog() as log:
        out.backward(torch.ones_like(out))
    called = {op for op in log.ops if op.startswith("alexop.")}
    assert called == expected
    for name, t in named.items():
        assert (t.grad is not None) == (name in needs), name


def test_first_layer_does_not_keep_the_weight_for_backward():
    x, wt, b = make_inputs(2, 3, 8, 31, 31)
    wt.requires_grad_()
    saved = []

    def pack(t):
        saved.append(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        alexop.conv11s4(x, wt, b)
    assert [t.shape for t in saved if t.numel() > 0] == [x.shape]


@needs_cuda
def test_cuda_grads_are_deterministic():
    x, wt, b = make_inputs(8, 3, 96, 99, 99, device="cuda")
    for t in (wt, b):
        t.requires_grad_()
    out = alexop.conv11s4(x, wt, b)
    grad = torch.randn_like(out)
    first = torch.autograd.grad(out, (wt, b), grad, retain_graph=True)
    for _ in range(3):
        again = torch.autograd.grad(out, (wt, b), grad, retain_graph=True)
        assert all(torch.equal(a, f) for a, f in zip(again, first))

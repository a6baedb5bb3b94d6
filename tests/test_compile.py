"""torch.compile: fullgraph forward and training step, dynamic batch, alexop ops in the graphs."""

import pytest
import torch
import torch._dynamo.testing
from torch._dynamo.backends.common import aot_autograd
from torch._functorch.aot_autograd import make_boxed_func

import alexop
from conftest import DEVICES, REL_L2, make_inputs, reference, rel_l2

ALEXOP_OPS = {
    torch.ops.alexop.conv11s4.default,
    torch.ops.alexop.conv11s4_backward_input.default,
    torch.ops.alexop.conv11s4_backward_weight.default,
}


class _Capture:
    """An AOT backend that records the alexop ops of the forward and backward graphs."""

    def __init__(self):
        self.forward, self.backward = [], []

    def _record(self, into):
        def compiler(gm, example_inputs):
            into.append({n.target for n in gm.graph.nodes if n.op == "call_function"} & ALEXOP_OPS)
            return make_boxed_func(gm.forward)

        return compiler

    def backend(self):
        return aot_autograd(fw_compiler=self._record(self.forward), bw_compiler=self._record(self.backward))


def _model(device):
    torch.manual_seed(0)
    return torch.nn.Sequential(
        alexop.Conv11s4(3, 16, padding=2), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.LazyLinear(4)
    ).to(device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "nhwc"])
def test_forward_fullgraph_inductor(device, channels_last):
    x, wt, b = make_inputs(2, 3, 16, 67, 67, device=device)
    if channels_last:
        x = x.to(memory_format=torch.channels_last)
    fn = torch.compile(alexop.conv11s4, fullgraph=True)
    got = fn(x, wt, b)
    assert got.stride() == alexop.conv11s4(x, wt, b).stride()  # the layout eager gives: F.conv2d's
    assert rel_l2(got, reference(x, wt, b)) <= REL_L2[torch.float32]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "nhwc"])
def test_training_step_fullgraph(device, channels_last):
    x, wt, b = make_inputs(4, 3, 16, 63, 63, device=device)
    if channels_last:  # a channels_last model: the result and its gradient channels_last too
        x, wt = x.to(memory_format=torch.channels_last), wt.to(memory_format=torch.channels_last)
    wt.requires_grad_()
    b.requires_grad_()

    def step(x, wt, b):
        return alexop.conv11s4(x, wt, b).relu().square().mean()

    eager = torch.autograd.grad(step(x, wt, b), (wt, b))
    capture = _Capture()
    compiled = torch.compile(step, fullgraph=True, backend=capture.backend())
    got = torch.autograd.grad(compiled(x, wt, b), (wt, b))
    for g, e in zip(got, eager):
        assert rel_l2(g, e) <= REL_L2[torch.float32]
    assert capture.forward == [{torch.ops.alexop.conv11s4.default}]
    # The images need no gradient: only the weight/bias backward op runs.
    assert capture.backward == [{torch.ops.alexop.conv11s4_backward_weight.default}]


@pytest.mark.slow
def test_training_step_inductor_module():
    model = _model("cpu")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.rand(4, 3, 63, 63)
    model(x)  # materialise the lazy layer
    reference_model = _model("cpu")
    reference_model(x)
    reference_model.load_state_dict(model.state_dict())

    @torch.compile(fullgraph=True)
    def loss_fn(x):
        return model(x).square().mean()

    loss = loss_fn(x)
    loss.backward()
    want = reference_model(x).square().mean()
    want.backward()
    assert rel_l2(loss, want) <= 1e-5
    for p, q in zip(model.parameters(), reference_model.parameters()):
        assert rel_l2(p.grad, q.grad) <= 1e-4
    opt.step()


def test_dynamic_batch_does_not_recompile():
    counter = torch._dynamo.testing.CompileCounterWithBackend("aot_eager")
    fn = torch.compile(alexop.conv11s4, fullgraph=True, dynamic=True, backend=counter)
    for n in (2, 3, 5):
        x, wt, b = make_inputs(n, 3, 8, 45, 45)
        assert rel_l2(fn(x, wt, b), reference(x, wt, b)) <= REL_L2[torch.float32]
    assert counter.frame_count == 1


def test_dynamic_batch_inductor():
    fn = torch.compile(alexop.conv11s4, fullgraph=True, dynamic=True)
    for n in (2, 3, 5):
        x, wt, b = make_inputs(n, 3, 8, 45, 45)
        assert rel_l2(fn(x, wt, b), reference(x, wt, b)) <= REL_L2[torch.float32]

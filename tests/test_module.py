"""Conv11s4 is a drop-in for nn.Conv2d(in, out, 11, stride=4, padding=p); convert() swaps them in models."""

import pytest
import torch

import alexop
from conftest import REL_L2, rel_l2


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("padding", [0, 2])
def test_state_dict_interchangeable_with_conv2d(bias, padding):
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(3, 16, 11, stride=4, padding=padding, bias=bias)
    ours = alexop.Conv11s4(3, 16, padding=padding, bias=bias)
    assert ours.state_dict().keys() == conv.state_dict().keys()
    ours.load_state_dict(conv.state_dict())
    x = torch.rand(2, 3, 67, 67)
    assert rel_l2(ours(x), conv(x)) <= REL_L2[torch.float32]
    conv.load_state_dict(alexop.Conv11s4(3, 16, padding=padding, bias=bias).state_dict())


def test_initialisation_matches_conv2d_statistics():
    torch.manual_seed(0)
    ours = alexop.Conv11s4(3, 96)
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(3, 96, 11, stride=4, padding=2)
    assert torch.equal(ours.weight, conv.weight) and torch.equal(ours.bias, conv.bias)


def test_factory_kwargs():
    m = alexop.Conv11s4(3, 4, dtype=torch.float64, device="meta")
    assert m.weight.dtype == torch.float64 and m.weight.device.type == "meta"


def test_from_conv2d_shares_parameters():
    conv = torch.nn.Conv2d(3, 8, 11, stride=4, padding=(1, 1))
    ours = alexop.Conv11s4.from_conv2d(conv)
    assert ours.weight is conv.weight and ours.bias is conv.bias and ours.padding == 1
    assert "kernel_size=(11, 11), stride=(4, 4), padding=1" in repr(ours)


@pytest.mark.parametrize(
    "conv,eligible",
    [
        (torch.nn.Conv2d(3, 8, 11, stride=4), True),
        (torch.nn.Conv2d(3, 8, 11, stride=4, padding="valid"), True),
        (torch.nn.Conv2d(3, 8, 11, stride=4, bias=False, padding=3), True),
        (torch.nn.Conv2d(3, 8, 11, stride=2), False),
        (torch.nn.Conv2d(3, 8, 5, stride=4), False),
        (torch.nn.Conv2d(3, 8, 11, stride=4, dilation=2), False),
        (torch.nn.Conv2d(4, 8, 11, stride=4, groups=2), False),
        (torch.nn.Conv2d(3, 8, 11, stride=4, padding=(1, 2)), False),
        (torch.nn.Conv2d(3, 8, 11, stride=4, padding=2, padding_mode="reflect"), False),
        (torch.nn.Conv2d(3, 8, (11, 5), stride=4), False),
    ],
    ids=str,
)
def test_eligibility(conv, eligible):
    assert alexop.Conv11s4.eligible(conv) == eligible


def test_convert_replaces_only_eligible_convs():
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 11, stride=4, padding=2),
        torch.nn.ReLU(),
        torch.nn.Sequential(torch.nn.Conv2d(8, 8, 3, padding=1)),
    )
    x = torch.rand(2, 3, 67, 67)
    want = model(x)
    converted = alexop.convert(model)
    assert converted is model
    assert isinstance(model[0], alexop.Conv11s4)
    assert type(model[2][0]) is torch.nn.Conv2d
    assert rel_l2(model(x), want) <= REL_L2[torch.float32]
    assert isinstance(alexop.convert(torch.nn.Conv2d(3, 8, 11, stride=4)), alexop.Conv11s4)


def test_convert_torchvision_alexnet():
    models = pytest.importorskip("torchvision.models")
    torch.manual_seed(0)
    net = models.alexnet(weights=None).eval()
    x = torch.rand(2, 3, 224, 224)
    with torch.no_grad():
        want = net(x)
        alexop.convert(net)
        assert isinstance(net.features[0], alexop.Conv11s4)
        assert sum(isinstance(m, alexop.Conv11s4) for m in net.modules()) == 1
        got = net(x)
    assert rel_l2(got, want) <= 1e-4

"""Conv11s4 is a drop-in for nn.Conv2d(in, out, 11, stride=4, padding=p); convert() swaps them in models."""

import warnings

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


def test_convert_keeps_a_channels_last_model_channels_last():
    """A model and input in channels_last: the converted layer's output and its input
    gradient stay channels_last, as nn.Conv2d's do, so the next layer gets no copy."""
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(3, 16, 11, stride=4, padding=2).to(memory_format=torch.channels_last)
    layer = alexop.Conv11s4.from_conv2d(conv)
    x = torch.rand(2, 3, 63, 63).to(memory_format=torch.channels_last).requires_grad_()
    for m in (conv, layer):
        y = m(x)
        assert y.is_contiguous(memory_format=torch.channels_last) and not y.is_contiguous()
        (gx,) = torch.autograd.grad(y, x, torch.ones_like(y))
        assert gx.is_contiguous(memory_format=torch.channels_last) and not gx.is_contiguous()


class _Scaled(torch.nn.Conv2d):
    """A subclass with a forward of its own: convert() must not lose it."""

    def forward(self, x):
        return super().forward(x) * 10


def _conv():
    return torch.nn.Conv2d(3, 8, 11, stride=4, padding=2)


def _with(setup):
    conv = _conv()
    setup(conv)
    return conv


def _qat_conv():
    qconfig = torch.ao.quantization.get_default_qat_qconfig("x86")
    return torch.ao.nn.qat.Conv2d(3, 8, 11, stride=4, padding=2, qconfig=qconfig)


def _forward_replaced(conv):
    forward = conv.forward
    conv.forward = lambda x: forward(x) + 1


# 11x11 stride-4 convs that a Conv11s4 would not reproduce, with the reason
# convert() and from_conv2d give.
UNCONVERTIBLE = [
    ("subclass", lambda: _Scaled(3, 8, 11, stride=4, padding=2), r"_Scaled, a subclass of nn.Conv2d, whose own forward"),
    ("qat conv", _qat_conv, r"torch.ao.nn.qat.modules.conv.Conv2d, a subclass of nn.Conv2d"),
    ("forward hook", lambda: _with(lambda c: c.register_forward_hook(lambda m, i, o: o * 2)), r"has forward hooks"),
    ("forward pre-hook", lambda: _with(lambda c: c.register_forward_pre_hook(lambda m, i: (i[0] * 2,))), r"has forward pre-hooks"),
    ("backward hook", lambda: _with(lambda c: c.register_full_backward_hook(lambda m, gi, go: None)), r"has backward hooks"),
    ("weight_norm", lambda: torch.nn.utils.parametrizations.weight_norm(_conv()), r"its parameters are parametrized"),
    ("spectral_norm", lambda: torch.nn.utils.parametrizations.spectral_norm(_conv()), r"its parameters are parametrized"),
    ("old weight_norm", lambda: torch.nn.utils.weight_norm(_conv()), r"has forward pre-hooks"),
    ("old spectral_norm", lambda: torch.nn.utils.spectral_norm(_conv()), r"has forward pre-hooks"),
    ("forward on the instance", lambda: _with(_forward_replaced), r"its forward is replaced on the instance"),
    ("extra buffer", lambda: _with(lambda c: c.register_buffer("scale", torch.ones(1))), r"it holds \['weight', 'bias', 'scale'\]"),
    ("groups", lambda: torch.nn.Conv2d(6, 8, 11, stride=4, groups=2), r"Conv11s4 needs kernel_size 11, stride 4, dilation 1, groups 1"),
    ("asymmetric padding", lambda: torch.nn.Conv2d(3, 8, 11, stride=4, padding=(1, 2)), r"padding=\(1, 2\)"),
    ("complex", lambda: torch.nn.Conv2d(3, 8, 11, stride=4, dtype=torch.complex64), r"its weight is torch.complex64"),
]


def _input_for(conv):
    torch.manual_seed(1)
    return torch.rand(2, conv.in_channels, 67, 67, dtype=conv.weight.dtype if conv.weight.is_complex() else None)


@pytest.mark.filterwarnings("ignore::FutureWarning")  # the deprecated weight_norm and spectral_norm
@pytest.mark.parametrize("make,reason", [u[1:] for u in UNCONVERTIBLE], ids=[u[0] for u in UNCONVERTIBLE])
def test_convert_leaves_alone_what_conv11s4_would_change(make, reason):
    torch.manual_seed(0)
    model = torch.nn.Sequential(_conv(), torch.nn.ReLU(), make())
    model.eval()
    x = _input_for(model[2])
    want = model[2](x)
    skipped = model[2]
    with pytest.warns(UserWarning, match=r"alexop.convert left 1 11x11 stride-4 convolution\(s\) as they are.*\n  2: .*" + reason):
        assert alexop.convert(model) is model
    assert isinstance(model[0], alexop.Conv11s4)
    assert model[2] is skipped
    torch.testing.assert_close(model[2](x), want)
    assert not alexop.Conv11s4.eligible(skipped)
    with pytest.raises(ValueError, match="(?s)Conv11s4.from_conv2d cannot replace .*: .*" + reason):
        alexop.Conv11s4.from_conv2d(skipped)


def test_convert_keeps_a_subclass_forward():
    model = torch.nn.Sequential(_Scaled(3, 8, 11, stride=4, padding=2))
    x = torch.rand(2, 3, 67, 67)
    want = model(x)
    with pytest.warns(UserWarning, match="_Scaled"):
        alexop.convert(model)
    torch.testing.assert_close(model(x), want)


def test_convert_keeps_hooks_firing():
    conv = _conv()
    calls = []
    conv.register_forward_hook(lambda m, i, o: calls.append(1))
    model = torch.nn.Sequential(conv)
    with pytest.warns(UserWarning, match="forward hooks"):
        alexop.convert(model)
    model(torch.rand(1, 3, 67, 67))
    assert calls == [1]


# The issue: a parametrized conv raised a TypeError after earlier layers had
# been replaced. Now it is left alone and the rest is converted.
def test_convert_converts_around_a_parametrized_conv():
    torch.manual_seed(0)
    normed = torch.nn.utils.parametrizations.weight_norm(_conv())
    model = torch.nn.Sequential(_conv(), torch.nn.Sequential(normed), torch.nn.Sequential(_conv()))
    with pytest.warns(UserWarning, match=r"1.0: its parameters are parametrized"):
        alexop.convert(model)
    assert isinstance(model[0], alexop.Conv11s4) and isinstance(model[2][0], alexop.Conv11s4)
    assert model[1][0] is normed


def test_convert_strict_raises_and_changes_nothing():
    model = torch.nn.Sequential(_conv(), _Scaled(3, 8, 11, stride=4))
    with pytest.raises(ValueError, match=r"left 1 11x11 stride-4 convolution\(s\) as they are.*\n  1: it is a .*_Scaled"):
        alexop.convert(model, strict=True)
    assert type(model[0]) is torch.nn.Conv2d


class _Refusing(torch.nn.Module):
    """A container whose second child cannot be reassigned."""

    def __init__(self):
        super().__init__()
        self.a, self.b = _conv(), _conv()

    def __setattr__(self, name, value):
        if name == "b" and isinstance(value, alexop.Conv11s4):
            raise RuntimeError("b is frozen")
        super().__setattr__(name, value)


def test_convert_never_leaves_a_model_half_converted():
    model = _Refusing()
    with pytest.raises(RuntimeError, match="b is frozen"):
        alexop.convert(model)
    assert type(model.a) is torch.nn.Conv2d and type(model.b) is torch.nn.Conv2d


def test_convert_is_silent_on_what_it_converts_or_does_not_concern_it():
    model = torch.nn.Sequential(_conv(), torch.nn.Conv2d(8, 8, 3), _Scaled(8, 8, 3), alexop.Conv11s4(3, 8))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        alexop.convert(model)
        alexop.convert(model)
    assert isinstance(model[0], alexop.Conv11s4) and type(model[1]) is torch.nn.Conv2d


def test_convert_makes_one_conv11s4_of_a_shared_conv():
    conv = _conv()
    model = torch.nn.Sequential(conv, torch.nn.ReLU(), conv)
    alexop.convert(model)
    assert isinstance(model[0], alexop.Conv11s4) and model[2] is model[0]


def test_convert_on_the_meta_device():
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 11, stride=4, device="meta"))
    alexop.convert(model)
    assert isinstance(model[0], alexop.Conv11s4) and model[0].weight.is_meta


@pytest.mark.parametrize(
    "padding,expected",
    [(2, 2), ((3, 3), 3), ([1, 1], 1), ("valid", 0)],
    ids=str,
)
def test_module_padding_forms(padding, expected):
    assert alexop.Conv11s4(3, 4, padding=padding).padding == expected


# What nn.Conv2d accepts and fails on only later (or never): refused by the
# constructor, naming the argument.
@pytest.mark.parametrize(
    "kwargs,error,message",
    [
        ({"padding": 2.5}, TypeError, r"expected padding to be an int, but got float 2.5"),
        ({"padding": True}, TypeError, r"expected padding to be an int, but got a bool"),
        ({"padding": (1, 2)}, ValueError, r"expected padding to be an int >= 0, a pair of two equal ints or 'valid' \(the same on every side\), but got \(1, 2\)"),
        ({"padding": (2, 2, 2)}, ValueError, r"expected padding to be an int >= 0, a pair .* but got \(2, 2, 2\)"),
        ({"padding": "same"}, ValueError, r"expected padding to be an int >= 0, .* but got 'same'"),
        ({"padding": -1}, ValueError, r"expected padding >= 0, but got -1"),
        ({"padding": 2**63}, ValueError, r"expected padding to fit in int64"),
        ({"in_channels": 3.0}, TypeError, r"expected in_channels to be an int, but got float 3.0"),
        ({"out_channels": True}, TypeError, r"expected out_channels to be an int, but got a bool"),
        ({"in_channels": 0}, ValueError, r"expected at least one input and one output channel, but got in_channels=0"),
        ({"dtype": torch.complex64}, ValueError, r"expected dtype to be one of float16, bfloat16, float32, float64, but got torch.complex64"),
        ({"dtype": torch.int64}, ValueError, r"expected dtype to be one of .* but got torch.int64"),
    ],
    ids=str,
)
def test_module_refuses_what_conv2d_fails_on_later(kwargs, error, message):
    args = {"in_channels": 3, "out_channels": 4, **kwargs}
    with pytest.raises(error, match="^Conv11s4: " + message):
        alexop.Conv11s4(**args)

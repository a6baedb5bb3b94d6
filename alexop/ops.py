"""The Python API: a thin, typed layer over ``torch.ops.alexop``.

Every check of the op's arguments lives in the C++ kernels, so eager calls,
TorchScript, compiled and exported graphs all raise the same errors. Python
checks only what cannot reach C++ (an int beyond int64) and what the module
and convert() decide before any op runs.
"""

import math
import operator
import warnings
from typing import List, Optional, Tuple, Union

import torch
from torch import Tensor, nn
from torch.nn.utils import parametrize

from . import _library  # noqa: F401  (loads the operator library)

__all__ = ["Conv11s4", "conv11s4", "convert", "kernel_for"]

KERNEL_SIZE = 11
STRIDE = 4
# What every backend computes: the module's and convert()'s dtypes.
DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
# The dispatch keys of the devices alexop has kernels for.
_DEVICE_KEYS = {"cpu": "CPU", "cuda": "CUDA", "meta": "Meta"}


def conv11s4(input: Tensor, weight: Tensor, bias: Optional[Tensor] = None, padding: int = 2) -> Tensor:
    """AlexNet's first convolution: ``F.conv2d(input, weight, bias, stride=4, padding=padding)``.

    Args:
        input: ``(N, C_in, H, W)``, any strides (NCHW, channels_last, views);
            ``C_in >= 1``, ``H + 2 * padding >= 11`` and ``W + 2 * padding >= 11``.
        weight: ``(C_out, C_in, 11, 11)``, ``C_out >= 1``, same dtype and device
            as ``input``.
        bias: optional ``(C_out,)``.
        padding: zero padding on every side, ``0 <= padding <= 2**62 - 1``
            (F.conv2d's bound).

    Returns:
        ``(N, C_out, (H + 2p - 11) // 4 + 1, (W + 2p - 11) // 4 + 1)`` of the
        input's dtype, in ``F.conv2d``'s memory format: channels_last where the
        input or the weight is channels_last, else contiguous NCHW.

    Raises:
        RuntimeError: naming the argument, for any argument the op refuses.

    dtypes: float32 and float64 everywhere, float16 and bfloat16 too (on the
    CPU computed in float32, or by ATen where the CPU multiplies them
    natively). On CUDA, float32 is computed to full float32
    accuracy unless ``torch.set_float32_matmul_precision("high")`` (or
    ``"medium"``) allows TF32 tensor cores.
    """
    if not torch.jit.is_scripting():  # TorchScript's ints are int64 already
        _check_int64("alexop.conv11s4", padding)
    return torch.ops.alexop.conv11s4(input, weight, bias, padding)


def kernel_for(input: Tensor, weight: Tensor, padding: int = 2) -> dict[str, str]:
    """The names of the kernels alexop runs for ``conv11s4(input, weight, bias, padding)``.

    Asks the same kernel choice the operators make, for the forward and both
    gradients, and launches nothing. The choice depends on the device (its
    architecture, SM count and shared memory), the dtype, float32's matmul
    precision (``torch.get_float32_matmul_precision()``), the shape, the
    input's memory layout and alignment, and the batch; bias does not change
    it. The gradients are named as autograd would call them, with a
    ``grad_output`` of the output's shape and memory format.

    Args:
        input: ``(N, C_in, H, W)``, as for :func:`conv11s4`.
        weight: ``(C_out, C_in, 11, 11)``, same dtype and device.
        padding: zero padding on every side, ``>= 0``.

    Returns:
        ``{"forward": ..., "weight_grad": ..., "input_grad": ...}``, e.g.
        ``"fwd_planes_bf16_c96"``, ``"wgrad_gmma_3xfp16_c96_vec"``,
        ``"slice3x2+fwd_planes_tf32_c96"`` (4 to 6 input channels, run as two
        slices of 3), ``"fwd_gmma_chunks_bf16_c96"`` (on Hopper, 4 to 16 input
        channels, TF32 also 1 and 2, 16-bit 1 and 2 but where
        ``fwd_planes_bf16_1ch_c96`` runs them, fp32-accurate 1, 2, 4 and 5: one kernel
        over chunks of them;
        ``"nchw+"`` before it: a channels_last input copied to NCHW first),
        ``"fwd_cudnn"`` (cuDNN, in the memory layout its first call timed
        faster), ``"fwd_planes_bf16_c96|fwd_cudnn"`` or
        ``"wgrad_cudnn|slice3x4+wgrad_gmma_bf16_c96"`` (two choices, the
        guess first: the first call of each problem times both and the
        process keeps the faster; the first runs untimed: under
        ``torch.backends.cudnn.deterministic`` or
        ``torch.use_deterministic_algorithms``, and in a CUDA graph capture of
        a problem no call has timed)
        on CUDA, ``"cpu_fwd_winograd_avx512"`` or
        ``"cpu_wgrad_aten|cpu_wgrad_winograd_avx512"`` (ATen's convolution or
        alexop's kernels, timed the same way up to 2e9 FLOP) on the CPU;
        ``"none"`` where an empty result needs no kernel.
    """
    forward, weight_grad, input_grad = torch.ops.alexop._kernel_for(input, weight, padding)
    return {"forward": forward, "weight_grad": weight_grad, "input_grad": input_grad}


def _check_int64(where: str, padding) -> None:
    # torch.ops passes ints as int64: a larger Python int would be refused
    # there with "Expected a value of type 'int' ... but instead found type 'int'".
    if isinstance(padding, int) and not -(2**63) <= padding < 2**63:
        raise ValueError(f"{where}: expected padding to fit in int64, but got {padding}")


def _int(where: str, name: str, value) -> int:
    """``value`` as an int, refusing bools and floats (nn.Conv2d would take some and fail later)."""
    if isinstance(value, bool):
        raise TypeError(f"{where}: expected {name} to be an int, but got a bool ({value})")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{where}: expected {name} to be an int, but got {type(value).__name__} {value!r}") from None


def _padding(where: str, padding) -> int:
    """The padding of every side, from the forms nn.Conv2d takes: an int, a pair, or 'valid'."""
    expected = "an int >= 0, a pair of two equal ints or 'valid'"
    if isinstance(padding, str):
        if padding == "valid":
            return 0
        raise ValueError(f"{where}: expected padding to be {expected}, but got {padding!r}")
    if isinstance(padding, (tuple, list)):
        if len(padding) != 2:
            raise ValueError(f"{where}: expected padding to be {expected}, but got {padding!r}")
        first, second = (_int(where, "padding", p) for p in padding)
        if first != second:
            raise ValueError(
                f"{where}: expected padding to be {expected} (the same on every side), but got {padding!r}"
            )
        padding = first
    padding = _int(where, "padding", padding)
    if padding < 0:
        raise ValueError(f"{where}: expected padding >= 0, but got {padding}")
    _check_int64(where, padding)
    return padding


class Conv11s4(nn.Module):
    """``nn.Conv2d(in_channels, out_channels, 11, stride=4, padding=padding)`` on alexop.

    Its parameters and state_dict are those of the equivalent ``nn.Conv2d``
    (``weight`` of shape ``(out, in, 11, 11)``, optional ``bias``), initialised
    the same way, so the two load each other's checkpoints.

    Args:
        in_channels, out_channels: ints >= 1.
        padding: an int >= 0, a pair of two equal ints, or ``"valid"`` (0).
        bias: whether to learn an additive bias.
        device, dtype: of the parameters; dtype float16, bfloat16, float32 or
            float64.

    Raises ``TypeError`` or ``ValueError`` naming the argument for anything
    else, where ``nn.Conv2d`` would accept some of it and fail only later.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        padding: Union[int, Tuple[int, int], str] = 2,
        bias: bool = True,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        in_channels = _int("Conv11s4", "in_channels", in_channels)
        out_channels = _int("Conv11s4", "out_channels", out_channels)
        if in_channels < 1 or out_channels < 1:
            raise ValueError(
                f"Conv11s4: expected at least one input and one output channel, but got "
                f"in_channels={in_channels}, out_channels={out_channels}"
            )
        padding = _padding("Conv11s4", padding)
        if dtype is not None and dtype not in DTYPES:
            raise ValueError(f"Conv11s4: expected dtype to be one of {_names(DTYPES)}, but got {dtype}")
        factory = {"device": device, "dtype": dtype}
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.padding = padding
        self.weight = nn.Parameter(torch.empty(out_channels, in_channels, KERNEL_SIZE, KERNEL_SIZE, **factory))
        if bias:
            self.bias = nn.Parameter(torch.empty(out_channels, **factory))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        # nn.Conv2d's initialisation, so a fresh module is a drop-in replacement.
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            bound = 1 / math.sqrt(self.in_channels * KERNEL_SIZE * KERNEL_SIZE)
            nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, input: Tensor) -> Tensor:
        return conv11s4(input, self.weight, self.bias, self.padding)

    def extra_repr(self) -> str:
        return (
            f"{self.in_channels}, {self.out_channels}, kernel_size=(11, 11), stride=(4, 4), "
            f"padding={self.padding}, bias={self.bias is not None}"
        )

    @staticmethod
    def eligible(conv: nn.Module) -> bool:
        """Whether ``from_conv2d(conv)`` computes exactly what ``conv`` computes: what ``convert()`` replaces."""
        return _unconvertible(conv) is None

    @classmethod
    def from_conv2d(cls, conv: nn.Conv2d) -> "Conv11s4":
        """A ``Conv11s4`` that shares ``conv``'s parameters (optimizers keep working).

        Raises ``ValueError`` with the reason unless ``conv`` is ``eligible``: a plain
        ``nn.Conv2d`` (not a subclass) with kernel_size 11, stride 4, dilation 1,
        groups 1, the same zero padding on every side, a dtype and device alexop
        computes, and nothing the replacement would drop (hooks, parametrizations).
        """
        reason = _unconvertible(conv)
        if reason is not None:
            raise ValueError(f"Conv11s4.from_conv2d cannot replace {conv!r}: {reason}")
        # Built on the meta device, then given conv's own parameters.
        module = cls(conv.in_channels, conv.out_channels, conv.padding, conv.bias is not None, device="meta")
        module.weight = conv.weight
        module.bias = conv.bias
        module.train(conv.training)
        return module


def _names(dtypes) -> str:
    return ", ".join(str(d).removeprefix("torch.") for d in dtypes)


_HOOKS = (
    ("forward pre-hooks", "_forward_pre_hooks"),
    ("forward hooks", "_forward_hooks"),
    ("backward pre-hooks", "_backward_pre_hooks"),
    ("backward hooks", "_backward_hooks"),
    ("state_dict hooks", "_state_dict_pre_hooks"),
    ("state_dict hooks", "_state_dict_hooks"),
    ("load_state_dict hooks", "_load_state_dict_pre_hooks"),
    ("load_state_dict hooks", "_load_state_dict_post_hooks"),
)


def _unconvertible(conv: nn.Module) -> Optional[str]:
    """Why a Conv11s4 in place of ``conv`` would not behave as ``conv`` does; None when it would."""
    if not isinstance(conv, nn.Conv2d):
        return f"it is a {type(conv).__name__}, not an nn.Conv2d"
    if parametrize.is_parametrized(conv):
        return "its parameters are parametrized (weight_norm, spectral_norm, ...), which Conv11s4 would drop"
    if type(conv) is not nn.Conv2d:
        return f"it is a {type(conv).__module__}.{type(conv).__qualname__}, a subclass of nn.Conv2d, whose own forward Conv11s4 would drop"
    geometry = (
        tuple(conv.kernel_size) == (KERNEL_SIZE, KERNEL_SIZE)
        and tuple(conv.stride) == (STRIDE, STRIDE)
        and tuple(conv.dilation) == (1, 1)
        and conv.groups == 1
        and conv.padding_mode == "zeros"
    )
    try:
        _padding("nn.Conv2d", conv.padding)
    except (TypeError, ValueError):
        geometry = False
    if not geometry:
        return (
            "Conv11s4 needs kernel_size 11, stride 4, dilation 1, groups 1 and the same zero padding on every "
            f"side, but it has kernel_size={conv.kernel_size}, stride={conv.stride}, dilation={conv.dilation}, "
            f"groups={conv.groups}, padding={conv.padding!r}, padding_mode={conv.padding_mode!r}"
        )
    hooks = sorted({kind for kind, attribute in _HOOKS if getattr(conv, attribute)})
    if hooks:
        return f"it has {' and '.join(hooks)}, which would no longer run"
    if "forward" in vars(conv):
        return "its forward is replaced on the instance, which Conv11s4 would drop"
    if set(conv._parameters) != {"weight", "bias"} or conv.weight is None or conv._buffers or conv._modules:
        held = [*conv._parameters, *conv._buffers, *conv._modules]
        return f"it holds {held}, not just the parameters weight and bias, so its state would change"
    if conv.weight.dtype not in DTYPES:
        return f"its weight is {conv.weight.dtype}; alexop computes {_names(DTYPES)}"
    key = _DEVICE_KEYS.get(conv.weight.device.type)
    if key is None or not torch._C._dispatch_has_kernel_for_dispatch_key("alexop::conv11s4", key):
        return f"its weight is on {conv.weight.device}, which this alexop build has no kernel for"
    return None


def _is_alexnet_conv(module: nn.Module) -> bool:
    """The convolutions convert() reports when it leaves them alone: 11x11 stride 4."""
    return (
        isinstance(module, nn.Conv2d)
        and tuple(module.kernel_size) == (KERNEL_SIZE, KERNEL_SIZE)
        and tuple(module.stride) == (STRIDE, STRIDE)
    )


def convert(model: nn.Module, strict: bool = False) -> nn.Module:
    """Replaces each ``nn.Conv2d`` of ``model`` that a ``Conv11s4`` computes exactly by one, in place.

    Replaced are the modules of type ``nn.Conv2d`` itself (``Conv11s4.eligible``):
    11x11 kernel, stride 4, dilation 1, groups 1, the same zero padding on every
    side, a float16/bfloat16/float32/float64 weight on a device alexop has kernels
    for, and nothing a ``Conv11s4`` would drop: no hooks, no parametrizations
    (``weight_norm``, ``spectral_norm``), no parameters or buffers besides weight and
    bias. Parameters are shared, not copied, so optimizers keep working; a conv
    held in two places becomes one ``Conv11s4``.

    Everything else is left alone. Among what is left alone, each 11x11 stride-4
    ``nn.Conv2d`` (a subclass such as a QAT conv, one with hooks or parametrizations,
    a grouped one, ...) is named with the reason in one ``UserWarning``; with
    ``strict=True``, a ``ValueError`` with that text is raised instead. Every
    decision is made before the first replacement, so the model is converted
    completely or not at all.

    Returns ``model``, or the replacement when ``model`` itself is replaced.
    """
    decided = {}  # id(conv) -> its replacement, or None where it stays
    skipped: List[str] = []
    for name, module in model.named_modules(remove_duplicate=False):
        if id(module) in decided:
            continue
        reason = _unconvertible(module)
        decided[id(module)] = Conv11s4.from_conv2d(module) if reason is None else None  # type: ignore[arg-type]
        if reason is not None and _is_alexnet_conv(module):
            skipped.append(f"  {name or 'the model itself'}: {reason}")
    if skipped:
        message = (
            f"alexop.convert left {len(skipped)} 11x11 stride-4 convolution(s) as they are, since a Conv11s4 "
            "would not behave the same:\n" + "\n".join(skipped)
        )
        if strict:
            raise ValueError(message)
        warnings.warn(message + "\n(strict=True makes this an error)", UserWarning, stacklevel=2)
    if decided[id(model)] is not None:
        return decided[id(model)]
    places = [
        (parent, name, child)
        for parent in model.modules()
        for name, child in parent._modules.items()
        if decided.get(id(child)) is not None
    ]
    done = []
    try:
        for parent, name, child in places:
            setattr(parent, name, decided[id(child)])
            done.append((parent, name, child))
    except BaseException:
        # A parent that refuses the assignment gets every earlier one undone.
        for parent, name, child in reversed(done):
            setattr(parent, name, child)
        raise
    return model
